"""Issue 72, hostile input's fifth round: records a report would overwrite, a seed runner that skipped by file name,
amendments that left their rules in code, non-causal evaluations fed to a registered claim, evaluation files read
against nothing, resumes that change a run, sweep runs taken for done, and `ega check-gate`'s blind spots."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ega_lightning.commands import report
from ega_lightning.errors import UserError
from ega_lightning.experiments import records, rundirs
from ega_lightning.experiments.spec import load_spec

from .test_experiments import fake_run, findings_of, write_spec


def _spec(path: Path, args: list[str], name: str = "ts-none") -> Path:
    entry = {"name": name, "seeds": [1], "group": "main", "args": args}
    return write_spec(path, {"name": "toy", "runs": [entry]})


def test_report_refuses_to_replace_a_record_of_other_arguments_and_steps(tmp_path, monkeypatch, capsys):
    """Case 1: a toy spec's 20-step run named like a committed 1,500-step one (ts-none-seed1) overwrote the committed
    record, exit 0. Now `ega report` refuses in one paragraph, exit 2: the record and --out as they were."""
    monkeypatch.chdir(tmp_path)
    committed = _spec(tmp_path / "shipped.yaml", ["--trainer.max_steps=1500"])
    (run,) = load_spec(committed).runs
    recorded = tmp_path / "results" / "runs"
    rundirs.record_run(run, fake_run(tmp_path / "made", "ts-none-seed1", "none", [2.0, 1.5, 1.4]), recorded)
    before = (recorded / "ts-none-seed1.json").read_bytes()

    toy = _spec(tmp_path / "toy.yaml", ["--trainer.max_steps=20"])
    fake_run(tmp_path / "lightning_logs", "ts-none-seed1", "none", [2.5, 2.4])  # the toy's run, finished
    code = report.main([str(toy), "--runs_dir", "lightning_logs", "--out", "out", "--records_dir", str(recorded)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert (recorded / "ts-none-seed1.json").read_bytes() == before
    assert "would replace that record with another run's numbers" in err and len(err.strip().splitlines()) == 1
    assert "args ['--trainer.max_steps=1500'] there, ['--trainer.max_steps=20'] here" in err
    assert not (tmp_path / "out").exists()

    # the same run read again from its directory refreshes its record as before
    same = fake_run(tmp_path / "again", "ts-none-seed1", "none", [2.0, 1.5, 1.4])
    loaded = rundirs.read_runs([run], same.parent, recorded)
    assert rundirs.refresh_records(loaded, recorded) == [records.record_path(recorded, "ts-none-seed1")]


def _without_amendment(text: str, issue: int) -> str:
    """The protocol's text less its (first) amendment of ``issue``."""
    start = text.index(f'  - date: "2026-12-05"\n    issue: {issue}\n')
    end = text.index("\n  - date: ", start + 1) + 1
    return text[:start] + text[end:]


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda t: _without_amendment(t, 51), "lacks the amendment of issue 51, yet this code reads the rules best,"),
        (
            lambda t: t.replace("rules: [effect, lower, worse, best, grows, cost]", "rules: [cost]", 1),
            "has the amendment of issue 51 without the rule(s) best, effect, grows, lower, worse",
        ),
    ],
)
def test_an_amendment_deleted_from_the_protocol_is_refused_not_left_in_force(tmp_path, monkeypatch, capsys, edit, said):
    """Case 3: deleting an amendment from configs/protocol.yaml (uncommitted) left its rules in force (they live in
    code), its verdicts read "registered" on the entry's date, and nothing said so. Now `ega report` checks that every
    amendment the code applies is in the protocol, with its rules, and refuses in one paragraph, exit 2, nothing
    written, the records left as they were."""
    from ega_lightning.experiments import protocol

    monkeypatch.chdir(tmp_path)
    edited = tmp_path / "protocol.yaml"
    edited.write_text(edit(protocol.PATH.read_text()))
    monkeypatch.setattr(protocol, "current", lambda: protocol.load(edited))
    spec = _spec(tmp_path / "spec.yaml", [])
    fake_run(tmp_path / "runs", "ts-none-seed1", "none", [2.0, 1.5])
    code = report.main([str(spec), "--runs_dir", "runs", "--out", "out", "--records_dir", "out/runs"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert said in err and "Restore the amendment" in err
    assert not (tmp_path / "out").exists()


def _head_to_head(tmp_path: Path, ega1_args: list[str], recipe: dict | None) -> Path:
    """EGA-1 (linear) against its baseline in group `main`, 3 seeds, EGA-1 lower by 0.10 each: a clear improvement."""
    for seed in (1, 2, 3):
        fake_run(tmp_path / "runs", f"none-seed{seed}", "none", [2.0, 1.5 + seed / 100], gap=0.3)
        fake_run(tmp_path / "runs", f"ega1-seed{seed}", "linear", [2.0, 1.4 + seed / 100], gap=0.2, recipe=recipe)
    spec = {
        "name": "hth",
        "runs": [
            {"name": "none", "seeds": [1, 2, 3], "group": "main"},
            {"name": "ega1", "seeds": [1, 2, 3], "group": "main", "variant": "linear", "args": ega1_args},
        ],
    }
    return write_spec(tmp_path / "spec.yaml", spec)


def test_a_main_entry_evaluated_over_the_whole_window_feeds_no_registered_claim(tmp_path, monkeypatch):
    """Case 4: a `main` entry with `--model.eval_znorm=window` (z over the whole window at evaluation: non-causal) fed
    the registered "EGA-1 lowers the final val loss" as ours. Now its improvement and gap are "not testable here",
    saying why; the same runs evaluated causally still read their verdict."""
    monkeypatch.chdir(tmp_path)
    leaky = _head_to_head(tmp_path / "leaky", ["--model.eval_znorm=window"], {"eval_znorm": "window"})
    assert report.main([str(leaky), "--runs_dir", "leaky/runs", "--out", "a", "--records_dir", "a/runs"]) == 0
    found = {f["kind"]: f for f in findings_of(tmp_path / "a") if f["section"] == "main"}
    for kind in ("improvement", "gap"):
        assert found[kind]["verdict"] == "not testable here", found[kind]
        assert "`linear` evaluated z over the whole window" in found[kind]["not_testable"]
        assert "non-causal" in found[kind]["not_testable"]

    causal = _head_to_head(tmp_path / "causal", ["--model.eval_znorm=prefix"], {"eval_znorm": "prefix"})
    assert report.main([str(causal), "--runs_dir", "causal/runs", "--out", "b", "--records_dir", "b/runs"]) == 0
    (improvement,) = findings_of(tmp_path / "b", "improvement")
    assert improvement["verdict"] != "not testable here"


def test_an_evaluation_file_of_another_step_or_cpu_than_its_record_is_refused(tmp_path, monkeypatch, capsys):
    """Case 5: a beyond-the-block evaluation edited to another checkpoint step (1499 -> 499) and CPU was accepted and
    moved a label; `step` and `cpu` were read and compared with nothing (the whole-split files likewise). Now each is
    checked against its run's record (its last step; the CPU model it ran on) and the seed's other evaluations (one
    CPU kind): a mismatch is one paragraph, exit 2, nothing written."""
    from ega_lightning import host

    from .helpers import TINY_MODEL

    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path / "spec.yaml", {"name": "e", "runs": [{"name": "nopos", "seeds": [1, 2]}]})
    for seed in (1, 2):
        fake_run(tmp_path / "runs", f"nopos-seed{seed}", "none", [2.0, 1.5])  # max_steps 6: the final step is 5
    kind = f"{host.cpu_model()} (AVX512)"
    length = 2 * TINY_MODEL["block_size"]

    def write(folder: str, name: str, **fields) -> Path:
        path = tmp_path / "out" / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(fields))
        return path

    def whole(seed: int, step: int = 5, cpu: str = kind) -> Path:
        run = f"nopos-seed{seed}"
        return write("author-whole-split", f"{run}.json", run_name=run, step=step, val_loss_whole_split=1.5, cpu=cpu)

    def beyond(seed: int, step: int = 5, cpu: str = kind) -> Path:
        run = f"nopos-seed{seed}"
        fields = {"run_name": run, "step": step, "eval_block_size": length, "val_loss": 1.6, "cpu": cpu}
        return write("beyond-the-block", f"{run}-T{length}.json", **fields, loss_by_position=[1.6] * length)

    def report_exit() -> tuple[int, str]:
        code = report.main([str(spec), "--runs_dir", "runs", "--out", "out", "--records_dir", "out/runs"])
        return code, capsys.readouterr().err

    for seed in (1, 2):
        whole(seed), beyond(seed)
    assert report_exit()[0] == 0  # as the seed runner writes them
    (tmp_path / "out" / "results.json").unlink()
    for edit, said in [
        (lambda: beyond(1, step=2), "is an evaluation at step 2, but the record of nopos-seed1 ends at step 5"),
        (lambda: whole(2, step=2), "is an evaluation at step 2, but the record of nopos-seed2 ends at step 5"),
        (lambda: beyond(2, cpu="Intel(R) Xeon(R) Platinum 8488C (AVX512)"), "ran on"),
        (lambda: whole(1, cpu=f"{host.cpu_model()} (AVX2)"), "a seed's evaluations run on one CPU kind"),
    ]:
        path = edit()
        code, err = report_exit()
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert str(path.relative_to(tmp_path)) in err and said in err, err
        assert not (tmp_path / "out" / "results.json").exists()
        for seed in (1, 2):  # restored
            whole(seed), beyond(seed)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model.eval_znorm": "window"}, "model.eval_znorm: checkpoint None, this command 'window' (how val/loss"),
        ({"trainer.accumulate_grad_batches": 4}, "accumulate_grad_batches: checkpoint 1, this command 4 (the global"),
        ({"model.scale_residual_init": False}, "model.scale_residual_init: checkpoint True, this command False (the"),
        ({"model.decay_every_parameter": True}, "model.decay_every_parameter: checkpoint False, this command True"),
        # messy: taken, the run trained at two dropouts, config.yaml naming the second and hparams.yaml the first
        ({"model.dropout": 0.2}, "model.dropout: checkpoint 0.0, this command 0.2 (the dropout masks"),
    ],
)
def test_a_resume_that_changes_the_evaluation_the_batch_or_the_initialisation_is_refused(changes, message):
    """Case 6 (the plan): `--ckpt_path last` with another eval_znorm (best.ckpt chosen across causal and leaky
    evaluations), accumulate_grad_batches (the global batch changed mid-run), scale_residual_init (no effect, yet
    recorded) or decay_every_parameter (a ValueError traceback, config.yaml rewritten) was accepted; now refused."""
    from dataclasses import replace

    from ega_lightning import run_policy
    from ega_lightning.errors import UserError

    from .test_run_policy import RESUMED, SAVED, checkpoint, request

    model = {"model.eval_znorm": None, "model.scale_residual_init": True, "model.decay_every_parameter": False}
    model["model.dropout"] = 0.0
    saved = {**SAVED, "trainer.accumulate_grad_batches": 1, **model}
    ckpt = replace(checkpoint("runs/r/checkpoints/last.ckpt", step=20, corpus="tinyshakespeare"), saved=saved)
    own = {**RESUMED, "trainer.precision": "32-true", "trainer.accumulate_grad_batches": 1, **model}
    assert run_policy.plan_run(request(ckpt=ckpt, **own)).resume_step == 20  # the run's own command resumes
    with pytest.raises(UserError) as refused:
        run_policy.plan_run(request(ckpt=ckpt, **{**own, **changes}))
    assert message in str(refused.value) and "--overwrite=true" in str(refused.value)


def test_a_resume_refuses_the_random_evaluations_seed_and_batch_only_where_the_run_evaluates_so():
    """Messy (issue 72): a resume with another data.eval_batch_size or data.random_eval_seed was refused for a run
    that evaluates the whole split, which reads neither. Now taken there; refused where the run draws random
    evaluation batches (they choose its windows), and turning the random evaluation on or off is refused."""
    from dataclasses import replace

    from ega_lightning import run_policy

    from .test_run_policy import RESUMED, SAVED, checkpoint, request

    other = {"data.eval_batch_size": 2, "data.random_eval_seed": 5}
    whole_split = {**SAVED, "data.random_eval_batches": None}
    ckpt = replace(checkpoint("runs/r/checkpoints/last.ckpt", step=20, corpus="tinyshakespeare"), saved=whole_split)
    own = {**RESUMED, "trainer.precision": "32-true", "data.random_eval_batches": None}
    assert run_policy.plan_run(request(ckpt=ckpt, **{**own, **other})).resume_step == 20
    with pytest.raises(UserError, match=r"data.random_eval_batches: checkpoint None, this command 50 \(how"):
        run_policy.plan_run(request(ckpt=ckpt, **{**own, **other, "data.random_eval_batches": 50}))
    random_batches = replace(ckpt, saved=SAVED)
    with pytest.raises(UserError) as refused:
        run_policy.plan_run(request(ckpt=random_batches, **{**RESUMED, "trainer.precision": "32-true", **other}))
    said = str(refused.value)
    assert "data.eval_batch_size: checkpoint 32, this command 2" in said
    assert "data.random_eval_seed: checkpoint 0, this command 5" in said


@pytest.mark.slow
def test_ega_fit_refuses_a_resume_that_changes_the_run_and_leaves_it_as_it_was(tmp_path, data_dir):
    """Case 6 through `ega fit`: a two-step run, resumed with --ckpt_path last and one of the changed values, is one
    paragraph, exit 2, its config.yaml and last.ckpt as they were (decay_every_parameter flipped was a ValueError
    traceback with config.yaml rewritten)."""
    from .helpers import SHORT, TINY, run_ega

    env = {"EGA_DATA_DIR": str(data_dir)}
    first = run_ega(["fit", *TINY, *SHORT, "--run_name", "r"], cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "lightning_logs" / "r"
    kept = {p: p.read_bytes() for p in (run_dir / "config.yaml", run_dir / "checkpoints" / "last.ckpt")}
    for change, said in [
        ("--model.eval_znorm=window", "model.eval_znorm: checkpoint None, this command 'window'"),
        ("--trainer.accumulate_grad_batches=4", "trainer.accumulate_grad_batches: checkpoint 1, this command 4"),
        ("--model.scale_residual_init=false", "model.scale_residual_init: checkpoint True, this command False"),
        ("--model.decay_every_parameter=true", "model.decay_every_parameter: checkpoint False, this command True"),
    ]:
        resumed = run_ega(["fit", *TINY, *SHORT, "--run_name", "r", "--ckpt_path", "last", change], tmp_path, env)
        assert resumed.returncode == 2 and "Traceback" not in resumed.stderr, resumed.stderr[-3000:]
        (line,) = [x for x in resumed.stderr.splitlines() if x.startswith("ega fit: error: ")]
        assert said in line, line
        assert {p: p.read_bytes() for p in kept} == kept


@pytest.mark.slow
def test_a_resume_keeps_one_dropout_and_hparams_yaml_says_what_config_yaml_says(tmp_path, data_dir):
    """Messy (issue 72): a resume with another dropout was taken, config.yaml then naming the second dropout and
    hparams.yaml the first; one with another data.eval_batch_size or data.random_eval_seed was refused for a run that
    evaluates the whole split, which reads neither. Now through `ega fit`: another dropout is one paragraph, exit 2,
    the run as it was; the unused evaluation values and another attention path (a choice of how the model runs)
    resume, and hparams.yaml holds the model config.yaml records."""
    import yaml

    from .helpers import SHORT, TINY, run_ega

    env = {"EGA_DATA_DIR": str(data_dir)}
    first = run_ega(["fit", *TINY, *SHORT, "--run_name", "r", "--model.dropout=0.1"], cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "lightning_logs" / "r"
    files = ("config.yaml", "hparams.yaml", "checkpoints/last.ckpt")
    kept = {p: p.read_bytes() for p in (run_dir / name for name in files)}
    again = ["fit", *TINY, *SHORT, "--run_name", "r", "--ckpt_path", "last"]
    refused = run_ega([*again, "--model.dropout=0.2"], tmp_path, env)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    (line,) = [x for x in refused.stderr.splitlines() if x.startswith("ega fit: error: ")]
    assert "model.dropout: checkpoint 0.1, this command 0.2 (the dropout masks" in line, line
    assert {p: p.read_bytes() for p in kept} == kept

    changed = ["--model.dropout=0.1", "--data.eval_batch_size=3", "--data.random_eval_seed=5"]
    resumed = run_ega([*again, *changed, "--model.attention=reference", "--trainer.max_steps=4"], tmp_path, env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    hparams = yaml.safe_load((run_dir / "hparams.yaml").read_text())
    assert config["model"]["attention"] == "reference" and config["data"]["eval_batch_size"] == 3
    assert hparams["eval_batch_size"] == 3  # the data module's arguments, beside the model's
    assert {k: hparams[k] for k in config["model"] if k in hparams} == {
        k: v for k, v in config["model"].items() if k in hparams
    }


@pytest.mark.slow
def test_a_run_resumed_to_a_raised_max_steps_stamps_its_validations_as_an_uninterrupted_run(tmp_path, data_dir):
    """Messy (issue 72): the final val/loss was stamped at step max_steps - 1 uninterrupted (the step the records and
    the whole-split evaluations carry) and at max_steps after a resume from a last.ckpt written at the end of a fit
    (a run of 3 steps resumed to 6): Lightning's restart moved its logging step on once more. Now both stamp alike."""
    from .helpers import TINY, run_ega, scalars

    env = {"EGA_DATA_DIR": str(data_dir)}
    every = [*TINY, "--trainer.val_check_interval=3", "--trainer.enable_progress_bar=false"]
    whole = run_ega(["fit", *every, "--trainer.max_steps=6", "--run_name", "whole"], tmp_path, env)
    assert whole.returncode == 0, whole.stderr[-3000:]
    for steps, resume in (("3", []), ("6", ["--ckpt_path", "last"])):
        part = run_ega(["fit", *every, f"--trainer.max_steps={steps}", "--run_name", "parts", *resume], tmp_path, env)
        assert part.returncode == 0, part.stderr[-3000:]
    uninterrupted = scalars(tmp_path / "lightning_logs" / "whole", "val/loss")
    resumed = scalars(tmp_path / "lightning_logs" / "parts", "val/loss")
    assert sorted(uninterrupted) == [2, 5]  # max_steps - 1, as every record's last point
    assert resumed.keys() == uninterrupted.keys()
    assert resumed == pytest.approx(uninterrupted, abs=1e-6)


@pytest.mark.parametrize(
    ("logged", "said"),
    [
        # trainer.limit_val_batches=0: it trains to max_steps and validates never
        ({"tag": "train/loss", "steps": (3, 7, 11)}, "with no val/loss in its event files"),
        # trainer.limit_train_batches=0: nothing trained, nothing logged
        (None, "with no val/loss in its event files"),
        # checkpoint_every_n_steps=0 with max_time: stopped after its first validation, no last.ckpt to tell
        ({"steps": (3,)}, "its val/loss stops at step 3 (as logged) of a run of 12 steps"),
    ],
)
def test_a_sweep_run_that_exits_0_without_its_validations_is_no_done_run(tmp_path, monkeypatch, capsys, logged, said):
    """Case 7: a sweep run with limit_val_batches=0, limit_train_batches=0, or checkpoint_every_n_steps=0 with a
    max_time that stopped it got DONE and was skipped forever (`sweep.stopped_short` took "no last.ckpt" for
    finished). Now `ega sweep` (its fit a stand-in that leaves what each leaves) says it failed, writes no DONE and
    no record, and runs it again next time; a run that validated to its max_steps is done."""
    import sys

    from ega_lightning.experiments import sweep

    from .test_experiments import logs_a_validation

    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path / "spec.yaml", {"name": "s", "runs": [{"name": "r", "seeds": [1]}]})

    def fit(run, runs_dir, resume, overwrite=False, logged=logged):
        run_dir = Path(runs_dir) / run.run_name
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text("trainer: {max_steps: 12}\n")
        if logged is not None:
            logs_a_validation(run_dir, **logged)
        return [sys.executable, "-c", "print('ok')"]

    monkeypatch.setattr(sweep, "fit_command", fit)
    assert sweep.main([str(spec), "--runs_dir", "runs", "--records_dir", "rec"]) == 1
    out = capsys.readouterr().out
    assert "[1/1] r-seed1: failed: " in out and said in out, out
    assert not (tmp_path / "runs/r-seed1/DONE").exists() and not (tmp_path / "rec").exists()

    monkeypatch.setattr(sweep, "fit_command", lambda *a, **k: fit(*a, **k, logged={"steps": (3, 7, 11)}))
    assert sweep.main([str(spec), "--runs_dir", "runs", "--records_dir", "rec"]) == 0  # run again: now it validated
    assert (tmp_path / "runs/r-seed1/DONE").is_file()


def test_a_record_with_two_val_losses_at_its_last_step_is_unusable_not_read_by_the_last(tmp_path, monkeypatch):
    """Case 8: a record with two val/loss values at its last step was read by the last one. Now the record is
    unusable, saying why, and `ega report` lists its run as incomplete with that reason, in no number."""
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path / "spec.yaml", {"name": "t", "runs": [{"name": "r", "seeds": [1, 2], "group": "main"}]})
    runs = load_spec(spec).runs
    recorded = tmp_path / "out" / "runs"
    for run in runs:
        rundirs.record_run(run, fake_run(tmp_path / "made", run.run_name, "none", [2.0, 1.5]), recorded)
    path = recorded / "r-seed1.json"
    data = json.loads(path.read_text())
    data["scalars"]["val/loss"].append([data["scalars"]["val/loss"][-1][0], 0.5])  # a second value at step 5
    path.write_text(json.dumps(data))
    loaded = rundirs.load_run(runs[0], tmp_path / "no-runs", recorded)
    assert loaded.status == "incomplete" and "holds two values at step 5, where a record holds one" in loaded.reason
    assert report.main([str(spec), "--runs_dir", "no-runs", "--out", "out", "--records_dir", str(recorded)]) == 0
    (row,) = [r for r in json.loads((tmp_path / "out/results.json").read_text())["runs"] if r["run_name"] == "r-seed1"]
    assert row["status"] == "incomplete" and "two values at step 5" in row["reason"]
    assert "final_val_loss" not in row


@pytest.mark.slow
@pytest.mark.parametrize(
    ("gate", "failed", "said"),
    [
        ("TrainOnlyLeakGate", "causal", "(fused attention, train mode): the gate reads the future"),
        ("BigBatchStatsGate", "batch_independent", "changing the other 7 sequences of a batch of 8 moved"),
        ("LongWindowLeakGate", "causal", "the gate reads the future"),
    ],
)
def test_check_gate_fails_a_leak_in_training_a_batch_of_4_or_past_32_positions(tmp_path, data_dir, gate, failed, said):
    """Case 9: `ega check-gate` passed a gate that reads the future only in training mode (causality was checked in
    eval mode only), one that reads other sequences only at batch >= 4 (it checked a batch of 3), and one that leaks
    only past its default window of 32 (below every shipped block, 128). Now each fails its property, exit 1."""
    from .helpers import REPO, run_ega

    env = {"EGA_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO)}
    result = run_ega(["check-gate", f"tests.hostile_gates.{gate}", "--only", failed], tmp_path, env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stdout + result.stderr[-3000:]
    (line,) = [x for x in result.stdout.splitlines() if x.startswith(f"FAIL  {failed}")]
    assert said in line, line
    assert "T = 128" in result.stdout  # the default window: the shipped block


@pytest.mark.slow
def test_ega_validate_says_a_leaky_evaluation_is_no_causal_loss(tmp_path, data_dir, checkpoint):
    """Messy (issue 72): `ega validate --model.eval_znorm=window` printed its loss as a plain val/loss. Now its headline
    says z was taken over the whole window (non-causal); the causal evaluation's says nothing of it."""
    from .helpers import run_ega

    env = {"EGA_DATA_DIR": str(data_dir)}
    base = ["validate", "--ckpt_path", str(checkpoint), "--data.max_eval_windows=4", "--trainer.logger=false"]
    leaky = run_ega([*base, "--model.eval_znorm=window"], tmp_path, env)
    assert leaky.returncode == 0, leaky.stderr[-3000:]
    assert "z over the whole window (non-causal" in leaky.stdout, leaky.stdout
    causal = run_ega(base, tmp_path, env)
    assert causal.returncode == 0 and "non-causal" not in causal.stdout, causal.stdout


def test_the_same_seed_number_of_two_specs_is_two_sittings_each_of_its_own_cpu_kind():
    """The shipped report's author seed 1 (whole split, "AMD EPYC") and rope seed 1 (beyond the block, "AMD EPYC
    (AVX512)") ran in two sittings: the check of case 5 compares a seed's evaluations within its spec only."""
    from ega_lightning.experiments import whole_split
    from ega_lightning.experiments.beyond_the_block import BeyondTheBlock

    machine = "AMD EPYC x2; Linux-6-x86_64-with-glibc2.36; torch 2.13.0+cpu"
    ran = {
        "author-seed1": whole_split.Ran(1, 3000, machine, "author.yaml"),
        "rope-seed1": whole_split.Ran(1, 1500, machine, "rope.yaml"),
    }
    found = [
        (whole_split.WholeSplit("author-seed1", 2999, 1.7, "AMD EPYC"), Path("a.json")),
        (BeyondTheBlock("rope-seed1", 1499, 256, 1.6, (1.6,) * 256, "AMD EPYC (AVX512)"), Path("b.json")),
    ]
    whole_split.check_against_records(found, ran)  # no error
    one_spec = {name: dataclasses.replace(r, spec="one.yaml") for name, r in ran.items()}
    with pytest.raises(UserError, match="a seed's evaluations run on one CPU kind"):
        whole_split.check_against_records(found, one_spec)


@pytest.mark.slow
def test_ega_bench_keeps_the_tables_its_out_holds_unless_told_to_replace_them(tmp_path):
    """Messy (issue 72): `ega bench` silently overwrote the committed results/bench-cpu-32-true.*. Now tables --out
    already holds for the device and precision are one paragraph, exit 2, before any timing; --overwrite replaces."""
    from .helpers import run_ega

    (tmp_path / "results").mkdir()
    committed = tmp_path / "results" / "bench-cpu-32-true.json"
    committed.write_text("{}")
    args = ["bench", "--sizes", "cpu", "--gates", "linear", "--repeats", "3", "--no_generation", "--device", "cpu"]
    refused = run_ega(args, tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    (line,) = [x for x in refused.stderr.splitlines() if x.startswith("ega bench: error: ")]
    assert "--out results already holds bench-cpu-32-true.json, which this bench would replace" in line
    assert committed.read_text() == "{}" and not (tmp_path / "results" / "bench-cpu-32-true.md").exists()


@pytest.mark.slow
def test_ega_bench_names_no_row_for_a_position_it_did_not_run(tmp_path, capsys):
    """Messy (issue 72): under --position learned the rows fox_nopos and alibi_nopos were timed with learned positions
    under their names. Now naming one in --gates is one paragraph, exit 2, nothing written; of the default list
    (every config) they are left out, saying so, and every row kept runs at the position asked."""
    from ega_lightning.bench.settings import gate_settings
    from ega_lightning.commands.bench import at_position
    from ega_lightning.config_files import PACKAGED_CONFIGS

    from .helpers import run_ega

    args = ["bench", "--sizes", "cpu", "--gates", "fox", "fox_nopos", "--position", "learned", "--no_generation"]
    refused = run_ega([*args, "--repeats", "3", "--device", "cpu", "--out", str(tmp_path / "out")], tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    (line,) = [x for x in refused.stderr.splitlines() if x.startswith("ega bench: error: ")]
    assert "--position learned would replace the position of fox_nopos (position none)" in line
    assert not (tmp_path / "out").exists()

    every = gate_settings(PACKAGED_CONFIGS, None)
    own = {name for name, s in every.items() if s.get("position") not in (None, "learned")}
    assert {"fox_nopos", "alibi_nopos"} <= own
    kept = at_position(every, "learned", None)
    assert kept.keys() == every.keys() - own and {s["position"] for s in kept.values()} == {"learned"}
    note = capsys.readouterr().err
    assert "left out alibi_nopos, fox_nopos" in note
    assert at_position(every, "none", None).keys() == every.keys()  # none: theirs, and every other's too


def test_a_label_an_amendment_and_a_level_edit_changed_is_not_dated_by_the_edit_as_the_amendment():
    """Messy (issue 72): a label changed by an amendment and by a later edit of the level read "the amendment of
    2026-12-07" (the edit's date; no amendment has it). Now the amendment is named without the edit's date."""
    from ega_lightning.experiments.engine import registration_text
    from ega_lightning.experiments.findings import Registration

    both = Registration("exploratory", 0, 3, "2026-12-07T10:00", amended="holds", level_was="too few seeds to tell")
    text = registration_text(both)
    assert "the amendment of 2026-12-07" not in text and "the amendment changed its label (was: holds)" in text
    assert "the edit of the family-wise level (2026-12-07) changed its label" in text
    alone = Registration("registered", 3, 3, "2026-12-05T10:00", amended="holds")
    assert "the amendment of 2026-12-05 changed its label (was: holds)" in registration_text(alone)


@pytest.mark.slow
def test_a_copy_without_git_history_marks_no_verdict_registered(tmp_path):
    """Messy (issue 72): a git-less install (a copy of the tree, an sdist) dated the protocol by its own stated
    dates, which predate the edits made after the data, and upgraded 8 labels. Now `ega report` run from a copy of
    the package without .git marks no verdict registered ("not dated") and the method note says why."""
    import shutil

    from .helpers import REPO, run_ega

    copy = tmp_path / "copy"
    shutil.copytree(REPO / "ega_lightning", copy / "ega_lightning", ignore=shutil.ignore_patterns("__pycache__"))
    runs = tmp_path / "runs"
    started = {"started_at": "2027-06-01T10:00:00+00:00"}  # after every date protocol.yaml states
    for seed, (base, gain) in enumerate([(1.50, 0.02), (1.60, 0.03), (1.55, 0.01)], 1):
        fake_run(runs, f"none-seed{seed}", "none", [2.0, base], done_with=started)
        fake_run(runs, f"ega1-seed{seed}", "linear", [2.0, base - gain], done_with=started)
    entries = [{"name": "none", "seeds": [1, 2, 3], "group": "main"}]
    entries.append({"name": "ega1", "seeds": [1, 2, 3], "group": "main", "variant": "linear"})
    spec = write_spec(tmp_path / "spec.yaml", {"name": "nogit", "runs": entries})
    out = tmp_path / "out"
    args = ["report", str(spec), "--runs_dir", str(runs), "--out", str(out), "--records_dir", str(out / "runs")]
    done = run_ega(args, cwd=copy)
    assert done.returncode == 0, done.stderr[-3000:]
    marks = [(f.get("registration") or {}).get("mark") for f in findings_of(out)]
    assert "not dated" in marks and set(marks) <= {None, "not dated"}, marks
    assert "git history cannot date it here: not in a git checkout" in (out / "REPORT.md").read_text()
