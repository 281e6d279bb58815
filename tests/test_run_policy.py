"""The run plan of `ega fit/validate/test`, decided from plain data: the run directory, what the checkpoint
decides and what the command keeps, the resume point, the lock, and each refusal in its order."""

from __future__ import annotations

import ast
import copy
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml
from jsonargparse import Namespace

from ega_lightning import run_policy, runs
from ega_lightning.errors import UserError
from ega_lightning.run_policy import CheckpointFacts, RunRequest, plan_run

from .helpers import REPO, TINY_MODEL

# a command's parsed config as `read_request` hands it over: the parts the plan reads
CONFIG = {
    "model": {
        **TINY_MODEL,
        "bias": True,
        "gate": "linear",
        "gate_options": None,
        "output_gate": "none",
        "vocab": "ab",
        "attention": "fused",
        "eval_znorm": None,
        "compile": False,
        "lr": 1e-3,
    },
    "data": {"corpus": "tinyshakespeare", "seed": 7},
    "trainer": {
        "max_steps": 100,
        "val_check_interval": 5,
        "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": {"filename": "best"}}],
    },
    "runs_dir": "runs",
    "run_name": None,
    "ckpt_path": None,
    "overwrite": False,
    "checkpoint_every_n_steps": 100,
}


def config(**changes: object) -> dict:
    """CONFIG with ``changes`` by dotted key: ``config(**{"trainer.max_steps": 0})``."""
    out = copy.deepcopy(CONFIG)
    for dotted, value in changes.items():
        *sections, key = dotted.split(".")
        target = out
        for section in sections:
            target = target[section]
        target[key] = value
    return out


def checkpoint(path: str = "other/model.ckpt", step: int = 40, corpus: str | None = "ptb", **model) -> CheckpointFacts:
    return CheckpointFacts(Path(path), {**CONFIG["model"], **model}, step, corpus)


def request(command: str | None = "fit", typed=(), ckpt: CheckpointFacts | None = None, **changes) -> RunRequest:
    return RunRequest(command, config(**changes), frozenset(typed), ckpt)


def test_a_fresh_fit_is_planned_into_the_directory_its_config_names():
    plan = plan_run(request())
    assert plan.run_dir == Path("runs") / runs.default_run_name(CONFIG)
    assert (plan.lock, plan.clear_old_run, plan.resume_step) == (True, False, None)
    assert (plan.merge_checkpoint_model, plan.kept_model, plan.corpus, plan.last_every) == (False, {}, None, 100)
    assert plan_run(request(run_name="mine")).run_dir == Path("runs/mine")
    started_over = plan_run(request(overwrite=True))
    assert started_over.clear_old_run  # once every class is built


@pytest.mark.parametrize("command", ["validate", "test"])
def test_an_evaluation_takes_no_lock_deletes_nothing_and_writes_no_last_ckpt(command):
    ckpt = checkpoint("runs/r/checkpoints/best.ckpt")
    plan = plan_run(request(command, ckpt=ckpt, ckpt_path=str(ckpt.path), overwrite=True, checkpoint_every_n_steps=5))
    assert (plan.lock, plan.clear_old_run, plan.last_every) == (False, False, 0)
    assert plan_run(request(None, checkpoint_every_n_steps=5)).last_every == 5  # the Python API builds a fit's


def test_resuming_last_keeps_the_command_s_config_and_resumes_at_the_checkpoint_s_step():
    ckpt = checkpoint("runs/r/checkpoints/last.ckpt", step=40, corpus="ptb", attention="reference")
    plan = plan_run(request(ckpt=ckpt, ckpt_path="last", run_name="r"))
    assert plan.resume_step == 40
    assert not plan.merge_checkpoint_model  # the config of a resumed run is its own
    assert plan.kept_model == {"attention": "fused", "eval_znorm": None, "compile": False}  # how the model runs
    assert plan.corpus == "ptb"  # the checkpoint's corpus
    derived = plan_run(request(ckpt=ckpt, ckpt_path="last"))
    assert derived.run_dir.name.startswith("ptb-linear-")  # named after the corpus the run trains


def test_a_checkpoint_file_decides_the_model_and_the_run_directory_is_named_after_it():
    ckpt = checkpoint(n_embd=64, gate="fox", corpus="ptb")
    plan = plan_run(request("validate", ckpt=ckpt, ckpt_path=str(ckpt.path)))
    assert plan.merge_checkpoint_model and plan.resume_step is None
    expected = runs.default_run_name({"model": ckpt.hparams, "data": {**CONFIG["data"], "corpus": "ptb"}})
    assert plan.run_dir == Path("runs") / expected and "fox" in expected and "x64-" in expected
    # a checkpoint of a run evaluates into that run, unless a run name is given
    own = checkpoint("runs/r/checkpoints/best.ckpt")
    assert plan_run(request("test", ckpt=own, ckpt_path=str(own.path))).run_dir == Path("runs/r")
    assert plan_run(request("test", ckpt=own, ckpt_path=str(own.path), run_name="e")).run_dir == Path("runs/e")


def test_an_evaluation_refuses_only_the_model_arguments_the_user_typed():
    ckpt = checkpoint(n_embd=64)
    evaluate = {"ckpt": ckpt, "ckpt_path": str(ckpt.path)}
    assert plan_run(request("validate", **evaluate)).merge_checkpoint_model  # the config's 32: not typed
    with pytest.raises(UserError, match=r"holds a different model \(n_embd: checkpoint 64, this command 32\)"):
        plan_run(request("validate", typed={"model.n_embd"}, **evaluate))
    # a fit trains the model its config describes: every model-defining argument must match, typed or not
    with pytest.raises(UserError, match=r"n_embd: checkpoint 64, this command 32"):
        plan_run(request("fit", **evaluate))


@pytest.mark.parametrize(
    ("command", "changes", "message"),
    [
        ("validate", {"ckpt_path": "last"}, "--ckpt_path last resumes `ega fit`; give `ega validate` a checkpoint"),
        ("fit", {"trainer.max_steps": 0}, "trainer.max_steps is 0; set a positive number of optimizer steps"),
        ("fit", {"trainer.max_steps": None}, "trainer.max_steps is None; set a positive"),
        ("fit", {"trainer.val_check_interval": 0.0}, "trainer.val_check_interval is 0.0; set a positive number"),
        ("test", {"trainer.val_check_interval": -2}, "trainer.val_check_interval is -2"),
        ("fit", {"checkpoint_every_n_steps": -1}, "checkpoint_every_n_steps must be >= 0 (0: never), got -1."),
        ("fit", {"run_name": "a/b"}, "--run_name 'a/b' is not a run name"),
        ("validate", {"run_name": ".."}, "--run_name '..' is not a run name"),
        ("fit", {"trainer.gradient_clip_val": -1.0}, "trainer.gradient_clip_val is -1.0: Lightning clips only"),
        ("validate", {"trainer.gradient_clip_val": float("nan")}, "trainer.gradient_clip_val is nan: Lightning"),
        ("fit", {"trainer.accumulate_grad_batches": 0}, "trainer.accumulate_grad_batches is 0; set a positive"),
        ("fit", {"seed_everything": -1}, "seed_everything is -1; set an integer in [0, 2**32)"),
        ("test", {"seed_everything": 2**40}, f"seed_everything is {2**40}; set an integer in [0, 2**32)"),
        ("fit", {"run_name": "r" * 256}, f"--run_name '{'r' * 256}' is 256 bytes long"),
        ("validate", {}, "no --ckpt_path: ega validate evaluates a checkpoint"),
        ("fit", {"ckpt": checkpoint(step=10), "trainer.max_steps": 10}, "other/model.ckpt is at step 10 and trainer"),
    ],
)
def test_each_refusal_says_what_is_wrong(command, changes, message):
    changes = dict(changes)
    ckpt = changes.pop("ckpt", None)
    if ckpt is not None:
        changes = {**changes, "ckpt_path": str(ckpt.path)}
    with pytest.raises(UserError) as refused:
        plan_run(request(command, ckpt=ckpt, **changes))
    assert str(refused.value).startswith(message)


# what a resumed run's last.ckpt says of the run that saved it (read_checkpoint: the datamodule's, ega's record)
SAVED = {
    "run_name": "r",
    "data.corpus": "tinyshakespeare",
    "data.seed": 7,
    "data.batch_size": 8,
    "data.max_eval_windows": 4,
    "data.random_eval_batches": 50,
    "data.random_eval_seed": 0,
    "data.eval_batch_size": 32,
    "trainer.precision": "32-true",
}
RESUMED = {
    "run_name": "r",
    "ckpt_path": "last",
    "data.batch_size": 8,
    "data.max_eval_windows": 4,
    "data.random_eval_batches": 50,
    "data.random_eval_seed": 0,
    "data.eval_batch_size": 32,
    "trainer.max_steps": 20,
}


def resumed_from(**saved: object) -> CheckpointFacts:
    return replace(checkpoint("runs/r/checkpoints/last.ckpt", step=20, corpus="tinyshakespeare"), saved=saved)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"data.batch_size": 16}, "data.batch_size: checkpoint 8, this command 16 (the training windows"),
        ({"data.seed": 1}, "seed_everything: checkpoint 7, this command 1 (the training windows and dropout"),
        ({"data.max_eval_windows": 64}, "data.max_eval_windows: checkpoint 4, this command 64 (the validation"),
        ({"data.max_eval_windows": None}, "data.max_eval_windows: checkpoint 4, this command None"),
        # the author's evaluation (issue 50): the whole split after 50 random batches, or other batches
        ({"data.random_eval_batches": None}, "data.random_eval_batches: checkpoint 50, this command None (how val"),
        ({"data.random_eval_seed": 1}, "data.random_eval_seed: checkpoint 0, this command 1 (which random"),
        ({"data.eval_batch_size": 64}, "data.eval_batch_size: checkpoint 32, this command 64 (the windows"),
        ({"trainer.precision": "bf16-mixed"}, "trainer.precision: checkpoint '32-true', this command 'bf16-mixed'"),
        ({"run_name": "b"}, "run_name: checkpoint 'r', this command 'b' (the run that saved it)"),
    ],
)
def test_a_resume_that_would_mix_two_runs_under_one_name_is_refused_naming_both_values(changes, message):
    refused = run_policy.resume_continues_one_run
    own = request(ckpt=resumed_from(**SAVED), **RESUMED, **{"trainer.precision": "32-true"})
    assert refused(own, run_policy.decide(own)) is None  # a study's own resume: the same command, another day
    with pytest.raises(UserError) as err:
        plan_run(request(ckpt=resumed_from(**SAVED), **{**RESUMED, "trainer.precision": "32-true", **changes}))
    assert message in str(err.value) and "--overwrite=true" in str(err.value)
    assert refused in run_policy.REFUSALS


def test_a_resume_compares_only_what_its_checkpoint_records_and_precisions_by_the_name_lightning_runs():
    plan_run(request(ckpt=resumed_from(), **{**RESUMED, "data.batch_size": 16}))  # a checkpoint before the record
    for spelling in (32, "32", "32-true"):
        plan_run(request(ckpt=resumed_from(**SAVED), **RESUMED, **{"trainer.precision": spelling}))
    # a file into a new run is another run, whose config records its own values
    other = replace(resumed_from(**SAVED), path=Path("other/model.ckpt"))
    new_run = {"run_name": "new", "ckpt_path": str(other.path), "data.batch_size": 16, "trainer.max_steps": 30}
    plan_run(request(ckpt=other, **new_run))


def test_a_resume_below_its_checkpoint_s_step_is_refused_and_at_it_ends_at_once():
    ckpt = resumed_from(**SAVED)
    with pytest.raises(UserError, match=r"runs/r is at step 20 \(its last.ckpt\) and trainer.max_steps is 10"):
        plan_run(request(ckpt=ckpt, **{**RESUMED, "trainer.precision": "32-true", "trainer.max_steps": 10}))
    assert plan_run(request(ckpt=ckpt, **RESUMED, **{"trainer.precision": "32-true"})).resume_step == 20  # finished


@pytest.mark.parametrize("changes", [{"trainer.max_steps": 0}, {"trainer.max_steps": None}])
def test_max_steps_is_fit_s_alone(changes):
    ckpt = checkpoint("runs/r/checkpoints/best.ckpt")
    assert plan_run(request("validate", ckpt=ckpt, ckpt_path=str(ckpt.path), **changes)).lock is False


def test_a_run_directory_under_a_file_is_refused(tmp_path):
    (tmp_path / "runs").write_text("not a directory")
    with pytest.raises(UserError, match=r"runs is a file, so the run directory .*runs/r cannot be made there"):
        plan_run(request(runs_dir=str(tmp_path / "runs"), run_name="r"))


def test_refusals_are_asked_in_order_and_listed_together():
    wrong = request("validate", ckpt_path="last", run_name="a/b", **{"trainer.val_check_interval": 0})
    problems = run_policy.refusals(wrong, run_policy.decide(wrong))
    assert [p.split(" ", 1)[0] for p in problems] == ["--ckpt_path", "trainer.val_check_interval", "--run_name"]
    with pytest.raises(UserError) as refused:
        plan_run(wrong)
    assert str(refused.value) == problems[0]
    assert run_policy.REFUSALS[0].name == "last_resumes_only_fit"


def test_typed_keys_are_the_flags_and_the_keys_of_the_config_files(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(yaml.safe_dump({"model": {"gate": "none", "n_embd": 64}, "seed_everything": 3}))
    second.write_text(yaml.safe_dump({"trainer": {"max_steps": 5}}))
    argv = ["fit", "-c", str(first), "--model.n_layer=2", "--trainer.val_check_interval", "5"]
    argv += ["--model.gate_options.scales=2", f"--config={second}", "--run_name=r", "--ckpt_path", "last"]
    assert run_policy.typed_keys(argv) == {
        "model.gate",
        "model.n_embd",
        "seed_everything",
        "model.n_layer",
        "trainer.val_check_interval",
        "model.gate_options",
        "trainer.max_steps",
        "run_name",
        "ckpt_path",
    }
    assert run_policy.typed_keys(["fit", "--config", "{model: {bias: false}}"]) == {"model.bias"}  # YAML text


def test_read_request_reads_the_checkpoint_the_command_would_read(tmp_path):
    run_dir = tmp_path / "runs" / "r"
    (run_dir / "checkpoints").mkdir(parents=True)
    hparams = {**CONFIG["model"], "n_embd": 48}
    saved = {"state_dict": {}, "hyper_parameters": hparams, "global_step": 12}
    torch.save({**saved, "datamodule_hyper_parameters": {"corpus": "ptb"}}, run_dir / runs.LAST)

    def read(command: str, ckpt_path: str | None) -> RunRequest:
        parsed = Namespace(config(runs_dir=str(tmp_path / "runs"), run_name="r", ckpt_path=ckpt_path))
        return run_policy.read_request(command, parsed, [command, "--model.n_embd=32"])

    resumed = read("fit", "last")
    # the model's values a resume continues, as its hyper-parameters hold them (issue 72: here eval_znorm)
    saved = {"data.corpus": "ptb", "model.eval_znorm": None}
    assert resumed.checkpoint == CheckpointFacts(run_dir / runs.LAST, hparams, 12, "ptb", saved=saved)
    assert resumed.typed == {"model.n_embd"} and resumed.config["model"]["n_embd"] == 32
    assert read("validate", "last").checkpoint is None  # refused by the plan, never read
    assert read("validate", str(run_dir / runs.LAST)).checkpoint.global_step == 12
    (run_dir / runs.LAST).unlink()
    assert read("fit", "last").checkpoint is None  # nothing to resume: the directory's state says so
    with pytest.raises(UserError, match="no such file"):
        read("test", str(run_dir / runs.LAST))


def test_the_directory_s_state_is_read_under_its_lock(tmp_path):
    run_dir = tmp_path / "r"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / runs.LAST).write_bytes(b"a run")
    plan = plan_run(request(runs_dir=str(tmp_path), run_name="r"))
    with runs.RunClaim() as claim:
        with pytest.raises(UserError, match="already holds a run"):
            claim.claim(plan.run_dir, plan.lock, plan.ckpt_path, plan.clear_old_run)
        assert runs.try_lock(run_dir) is None  # taken before the state was read
    held = runs.try_lock(run_dir)  # another process trains the run: busy, whatever its state
    with runs.RunClaim() as claim, pytest.raises(runs.RunBusy, match="in use by another process"):
        claim.claim(plan.run_dir, plan.lock, plan.ckpt_path, plan.clear_old_run)
    held.close()
    ckpt = checkpoint(str(run_dir / runs.LAST))
    evaluation = plan_run(
        request("validate", ckpt=ckpt, ckpt_path=str(ckpt.path), runs_dir=str(tmp_path), run_name="r")
    )
    with runs.RunClaim() as claim:
        claim.claim(evaluation.run_dir, evaluation.lock, evaluation.ckpt_path)  # no lock, no state check
        free = runs.try_lock(run_dir)
        assert claim.run_dir == run_dir and free is not None
        free.close()


def test_cpu_devices_past_the_cores_are_refused_counted_as_the_world_size_counts_them():
    many = os.cpu_count() + 1
    for devices in (many, str(many), ",".join(map(str, range(many)))):
        with pytest.raises(UserError, match=f"trainer.devices is {devices} on the CPU, .* start {many} training"):
            plan_run(request(**{"trainer.accelerator": "cpu", "trainer.devices": devices}))
    for devices in ("auto", -1, 1):  # Lightning counts the machine's: nothing to refuse
        assert plan_run(request(**{"trainer.accelerator": "cpu", "trainer.devices": devices})).lock


@pytest.mark.parametrize("clip", [None, 0, 0.0, 0.5, 1])
def test_a_gradient_clip_of_zero_or_none_means_no_clipping_and_is_taken(clip):
    assert plan_run(request(**{"trainer.gradient_clip_val": clip})).lock


def test_the_checkpoint_decides_the_corpus_a_command_names_unlike_it():
    ckpt = checkpoint(corpus="ptb", step=4)
    for command in ("fit", "validate", "test"):
        with pytest.raises(UserError, match=r"trained on the corpus ptb, and this command names tinyshakespeare"):
            plan_run(request(command, typed={"data.corpus"}, ckpt=ckpt, ckpt_path=str(ckpt.path)))
        # not typed: the config's default, which the checkpoint's corpus replaces
        assert plan_run(request(command, ckpt=ckpt, ckpt_path=str(ckpt.path))).corpus == "ptb"
    same = request("validate", typed={"data.corpus"}, **{"data.corpus": "ptb"}, ckpt=ckpt, ckpt_path=str(ckpt.path))
    assert plan_run(same).corpus == "ptb"  # the checkpoint's own corpus, typed: nothing to refuse


def test_a_fit_from_a_checkpoint_refuses_optimizer_values_its_restored_state_would_override():
    ckpt = checkpoint("runs/r/checkpoints/last.ckpt", step=4, lr=0.5, betas=(0.9, 0.99), tau_init=0.3, dropout=0.0)
    model = {"model.betas": [0.9, 0.99], "model.tau_init": 0.0, "model.dropout": 0.0}
    # a resume records its config: every optimizer value it holds must be the checkpoint's, typed or not
    with pytest.raises(UserError, match=r"\(lr: checkpoint 0.5, this command 0.001\)"):
        plan_run(request(ckpt=ckpt, ckpt_path="last", run_name="r", **model))
    resumed = request(ckpt=ckpt, ckpt_path="last", run_name="r", **model, **{"model.lr": 0.5})
    assert plan_run(resumed).resume_step == 4  # the packaged tau_init, not typed, is left alone
    with pytest.raises(UserError, match=r"\(tau_init: checkpoint 0.3, this command 0.0\)"):
        plan_run(RunRequest("fit", resumed.config, frozenset({"model.tau_init"}), ckpt))
    # a checkpoint file: its hyper-parameters replace the config's, so only the values typed unlike them
    other = {"ckpt": ckpt, "ckpt_path": str(ckpt.path), **model}
    assert plan_run(request(**other)).merge_checkpoint_model
    with pytest.raises(UserError, match=r"\(lr: checkpoint 0.5, this command 0.001\)\S* .* Drop those arguments"):
        plan_run(request(typed={"model.lr"}, **other))
    with pytest.raises(UserError, match=r"\(dropout: checkpoint 0.0, this command 0.2\)"):
        plan_run(request(typed={"model.dropout", "model.attention"}, **{**other, "model.dropout": 0.2}))
    assert plan_run(request("validate", typed={"model.lr"}, **other)).evaluation == "validate"  # fit's rule
    # a resume builds its dropout from its config: it would take effect, so it is refused as a change of the run
    # where the checkpoint records its own (`run_policy.CONTINUED`; issue 72)
    resumed_with = {**other, "ckpt_path": "last", "model.dropout": 0.2, "model.lr": 0.5}
    assert plan_run(request(typed={"model.dropout"}, **resumed_with)).resume_step == 4
    recorded = replace(ckpt, saved={"model.dropout": 0.0})
    with pytest.raises(UserError, match=r"model.dropout: checkpoint 0.0, this command 0.2 \(the dropout masks"):
        plan_run(request(typed={"model.dropout"}, **{**resumed_with, "ckpt": recorded}))


def test_a_section_flag_types_the_keys_of_its_mapping(tmp_path):
    (tmp_path / "m.yaml").write_text("n_embd: 64\ngate: fox\n")
    argv = ["validate", "--model={n_embd: 64}", "--data", str(tmp_path / "m.yaml"), "--trainer=[1]", "--model.bias=x"]
    assert run_policy.typed_keys(argv) == {"model.n_embd", "data.n_embd", "data.gate", "trainer", "model.bias"}
    assert run_policy.typed_keys([f"--model={tmp_path / 'm.yaml'}"]) == {"model.n_embd", "model.gate"}


def test_a_fit_from_another_run_s_checkpoint_needs_steps_left_to_train():
    ckpt, ten = checkpoint(step=10), {"trainer.max_steps": 10}
    with pytest.raises(UserError, match=r"max_steps is 10, so continuing it would train nothing"):
        plan_run(request(ckpt=ckpt, ckpt_path=str(ckpt.path), **ten))
    assert plan_run(request(ckpt=ckpt, ckpt_path=str(ckpt.path), **{"trainer.max_steps": 11})).merge_checkpoint_model
    assert plan_run(request(ckpt=ckpt, ckpt_path="last", **ten)).resume_step == 10  # a finished run's: ends at once
    assert plan_run(request("validate", ckpt=ckpt, ckpt_path=str(ckpt.path))).evaluation == "validate"


def test_the_ranks_agree_on_rank_0_s_refusal_then_on_a_checkpoint_some_rank_lacks(tmp_path):
    """What every rank of a run started together says once the process group forms (`agreed_refusal`)."""
    last = tmp_path / "runs/r" / runs.LAST
    last.parent.mkdir(parents=True)
    last.write_bytes(b"")
    runs_dir = str(tmp_path / "runs")
    plan = plan_run(request(ckpt=checkpoint(str(last)), ckpt_path="last", run_name="r", runs_dir=runs_dir))
    here = run_policy.rank_verdict(plan, 0, "a", None)
    assert here.missing is None and run_policy.agreed_refusal([here], plan) is None
    last.unlink()
    gone = run_policy.rank_verdict(plan, 1, "b", None)
    assert gone.missing == str(last)
    message, busy = run_policy.agreed_refusal([gone, here], plan)
    assert not busy and f"rank 1 (on b) cannot read {last}" in message and "rank 0 (on a) can" in message
    assert "filesystem that every node shares" in message and "copy the run directory" in message
    nobody, _ = run_policy.agreed_refusal([run_policy.rank_verdict(plan, 0, "a", None), gone], plan)
    assert "no process of this run can read" in nobody
    busy_0 = run_policy.rank_verdict(plan, 0, "a", runs.RunBusy("in use"))
    assert run_policy.agreed_refusal([gone, busy_0], plan) == ("in use", True)  # rank 0's refusal comes first
    refused_1 = run_policy.rank_verdict(plan, 1, "b", UserError("no"))
    assert run_policy.agreed_refusal([here, refused_1], plan) == ("rank 1 (on b) refused: no", False)


def test_ranks_started_together_keep_a_refusal_that_rests_on_the_checkpoint_alone():
    """A checkpoint another node may lack: its refusal waits for the process group; the config's is raised."""
    ckpt = checkpoint("runs/r/checkpoints/last.ckpt", corpus="tinyshakespeare")
    resumed = request(ckpt=ckpt, ckpt_path="last", run_name="r", **{"model.lr": 0.5})
    plan = plan_run(resumed, together=True)
    assert plan.resume_step == 40 and "lr: checkpoint 0.001, this command 0.5" in plan.refusal
    with pytest.raises(UserError, match=r"lr: checkpoint 0\.001, this command 0\.5"):
        plan_run(resumed)  # one process: said at once
    assert plan_run(request(ckpt=ckpt, ckpt_path="last", run_name="r"), together=True).refusal is None
    with pytest.raises(UserError, match="max_steps is 0"):
        plan_run(request(ckpt=ckpt, ckpt_path="last", run_name="r", **{"trainer.max_steps": 0}), together=True)


def test_refusals_yaml_holds_every_paragraph_the_shell_says_and_none_it_does_not():
    """The wording is data (ega_lightning/refusals.yaml), named by key where a check says it (`paragraph`, `Limit`):
    a key that no check names is wording no one reads, and a name without its key a KeyError on the one path that
    says it (a rare refusal's is seldom run)."""
    keys = set(yaml.safe_load((REPO / "ega_lightning/refusals.yaml").read_text(encoding="utf-8")))
    named = set()
    for path in ("run_policy.py", "runs.py", "fit_args.py"):
        for node in ast.walk(ast.parse((REPO / "ega_lightning" / path).read_text(encoding="utf-8"))):
            called = isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("paragraph", "Limit", "wording")
            if called and node.args:  # the key, or a choice of two (`a if ... else b`)
                key = node.args[0]
                choices = [key.body, key.orelse] if isinstance(key, ast.IfExp) else [key]
                named |= {c.value for c in choices if isinstance(c, ast.Constant)}
    assert named - keys == set()
    assert keys - named == set()
    assert {row.key for row in run_policy.CONTINUED} >= {"run_name", "data.seed", "trainer.precision", "model.dropout"}
