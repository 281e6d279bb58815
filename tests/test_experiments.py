"""`ega sweep` and `ega report`: spec validation, restartable runs, statistics, the report's numbers."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ega_lightning.cli import main as ega_main
from ega_lightning.commands import report
from ega_lightning.config_files import PACKAGED_CONFIGS
from ega_lightning.errors import MACHINE_REFUSED
from ega_lightning.experiments import comparisons, records, rundirs, stats, sweep
from ega_lightning.experiments.spec import static_value
from ega_lightning.fingerprint import code_fingerprint

from .helpers import (
    CONFIGS,
    REPO,
    TINY_MODEL,
    TINY_VOCAB,
    git_commit_all,
    landscape_json,
    package_checkout,
    run_ega,
)

# ----------------------------------------------------------------------------- statistics


def test_summarize_mean_and_sample_std():
    s = stats.summarize([1.0, 2.0, 4.0])
    assert s.mean == pytest.approx(7 / 3) and s.n == 3
    assert s.std == pytest.approx(math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2))
    assert stats.summarize([5.0]) == stats.Summary(5.0, None, 1)
    assert stats.summarize([]) == stats.Summary(None, None, 0)


def test_paired_interval_by_hand():
    # differences 0.10, 0.08, 0.10: mean 0.09333, sd 0.011547, se 0.0066667, t(0.975, 2) = 4.3027
    d = stats.compare({1: 1.50, 2: 1.60, 3: 1.55}, {1: 1.40, 2: 1.52, 3: 1.45})
    assert d.method == "paired" and d.n == 3 and d.df == 2
    assert d.estimate == pytest.approx(0.093333, abs=1e-6)
    assert d.low == pytest.approx(0.093333 - 0.028685, abs=1e-5)
    assert d.high == pytest.approx(0.093333 + 0.028685, abs=1e-5)
    assert d.excludes_zero is True


def test_welch_when_seeds_differ_and_no_interval_for_one_seed():
    # equal variances (1) and sizes (3): df = 2 (n - 1) = 4, se = sqrt(2/3)
    d = stats.compare({1: 1.0, 2: 2.0, 3: 3.0}, {4: 2.0, 5: 3.0, 6: 4.0})
    assert d.method == "welch" and d.df == pytest.approx(4.0)
    assert d.estimate == pytest.approx(-1.0)
    assert d.high == pytest.approx(-1.0 + 2.776445 * math.sqrt(2 / 3), abs=1e-5)
    assert d.excludes_zero is False
    same = stats.compare({1: 2.0, 2: 2.0}, {3: 1.5, 4: 1.5})  # no spread on either side: no width to give
    with warnings.catch_warnings():  # seeds alike are a zero-width interval, said without scipy's warning
        warnings.simplefilter("error")
        alike = stats.compare({1: 1.7, 2: 1.8, 3: 1.9}, {1: 1.6, 2: 1.7, 3: 1.8})
        one_side_alike = stats.compare({1: 1.7, 2: 1.7}, {3: 2.0, 4: 2.5})
    assert alike.low == pytest.approx(0.1) and alike.high == pytest.approx(0.1)
    assert one_side_alike.method == "welch" and one_side_alike.low < -0.55 < one_side_alike.high
    assert (same.method, same.estimate, same.low, same.high) == ("welch", 0.5, 0.5, 0.5)
    single = stats.compare({1: 1.5}, {1: 1.4})
    assert single.method == "single" and single.low is None and single.excludes_zero is None
    assert single.estimate == pytest.approx(0.1)


# ----------------------------------------------------------------------------- sweep specs


def write_spec(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A directory with three small config files, as the current directory (spec paths are relative to it)."""
    monkeypatch.chdir(tmp_path)
    for name in ("base.yaml", "size.yaml", "a.yaml", "b.yaml"):
        (tmp_path / name).write_text("model: {}\n")
    return tmp_path


def good_spec() -> dict:
    return {
        "name": "t",
        "configs": ["base.yaml", "size.yaml"],
        "args": ["--trainer.max_steps=4"],
        "runs": [
            {"name": "ra", "configs": ["a.yaml"], "seeds": [1, 2], "args": ["--model.tau_init=0.35"], "group": "main"},
            {"name": "rb", "configs": ["b.yaml"], "seeds": [1, 2]},
        ],
    }


@pytest.mark.parametrize(
    "mutate,expected",
    [
        (lambda s: s["runs"][0].update(seed=[3]), ["runs[0] (ra): unknown key 'seed'", "did you mean 'seeds'"]),
        (lambda s: s.update(confgs=[]), ["unknown key 'confgs'", "did you mean 'configs'"]),
        (lambda s: s["runs"][1].update(configs=["nope.yaml"]), ["runs[1] (rb): config file nope.yaml not found"]),
        (lambda s: s["runs"][1].update(name="ra"), ["run name 'ra-seed1' already comes from runs[0]"]),
        (lambda s: s["runs"][0].update(seeds=[1, 1]), ["run name 'ra-seed1' already comes from runs[0]"]),
        (lambda s: s["runs"][0].update(args=["--run_name=x"]), ["args may not contain --run_name"]),
        (lambda s: s["runs"][0].update(seeds=["1"]), ["'seeds' must be a non-empty list of integers"]),
        (lambda s: s["runs"][0].update(seeds=[-1]), ["'seeds' must be a non-empty list of integers in [0, 2**32)"]),
        (lambda s: s["runs"][0].update(seeds=[2**32]), ["in [0, 2**32) (Lightning's seeds)"]),
        (lambda s: s["runs"][1].update(args=["--seed_everything 5"]), ["as --key=value, one item per flag"]),
    ],
)
def test_invalid_spec_names_the_problem_and_runs_nothing(workdir, capsys, mutate, expected):
    spec = good_spec()
    mutate(spec)
    path = write_spec(workdir / "spec.yaml", spec)
    with pytest.raises(sweep.SpecError) as err:
        sweep.load_spec(path)
    for text in expected:
        assert text in str(err.value)
    assert sweep.main([str(path), "--runs_dir", "runs"]) == 2
    assert "nothing was run" in capsys.readouterr().err
    assert not (workdir / "runs").exists()


def test_spec_errors_are_all_listed_at_once(workdir):
    spec = good_spec()
    spec["runs"][0]["seed"] = 1
    spec["runs"][1]["configs"] = ["missing.yaml"]
    with pytest.raises(sweep.SpecError) as err:
        sweep.load_spec(write_spec(workdir / "spec.yaml", spec))
    assert "unknown key 'seed'" in str(err.value) and "missing.yaml not found" in str(err.value)
    assert "relative to the current directory" in str(err.value)  # says how to fix a relative path


def test_relative_configs_resolve_against_the_current_directory(workdir, tmp_path_factory, monkeypatch):
    path = write_spec(workdir / "spec.yaml", good_spec())
    assert len(sweep.load_spec(path).runs) == 4
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    with pytest.raises(sweep.SpecError, match=r"size\.yaml not found") as err:
        sweep.load_spec(path)
    assert "base.yaml" not in str(err.value)  # as `-c base.yaml` does, the packaged file of that name


def test_a_packaged_spec_and_the_configs_it_names_resolve_from_any_directory(tmp_path, monkeypatch, capsys):
    # issue 42: outside a checkout (the image's /workspace, any install) `ega sweep configs/sweeps/paper.yaml` was
    # "not found", and with the packaged file's full path each configs/... in it was "not found" as well
    monkeypatch.chdir(tmp_path)
    by_name = [sweep.load_spec(name) for name in ("configs/sweeps/paper.yaml", "sweeps/paper.yaml")]
    assert by_name[0].path == by_name[1].path == PACKAGED_CONFIGS / "sweeps/paper.yaml"
    assert by_name[0].runs == by_name[1].runs and len(by_name[0].runs) == 12
    run = by_name[0].runs[0]
    assert run.configs[:2] == ("configs/base.yaml", "configs/size/paper.yaml")  # as written: records compare these
    paper = yaml.safe_load((PACKAGED_CONFIGS / "size/paper.yaml").read_text())
    assert static_value(run, "model.n_embd") == paper["model"]["n_embd"]  # read from the packaged file
    assert sweep.main(["configs/sweeps/paper.yaml", "--dry_run", "--runs_dir", "runs"]) == 0
    commands = [command for _, command in parse_dry_run(capsys.readouterr().out).values()]
    assert len(commands) == 12 and all(c[c.index("fit") + 4] == "configs/size/paper.yaml" for c in commands)
    assert sorted(tmp_path.iterdir()) == []  # a dry run writes nothing


def test_a_local_spec_or_config_wins_over_the_packaged_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs/size").mkdir(parents=True)
    (tmp_path / "configs/size/paper.yaml").write_text("model: {n_embd: 8}\n")  # your edited copy
    run = sweep.load_spec("configs/sweeps/paper.yaml").runs[0]  # no local spec: the packaged one
    assert static_value(run, "model.n_embd") == 8
    (tmp_path / "configs/sweeps").mkdir()
    write_spec(tmp_path / "configs/sweeps/paper.yaml", {**good_spec(), "configs": ["configs/size/paper.yaml"]})
    (tmp_path / "a.yaml").write_text("model: {}\n")
    (tmp_path / "b.yaml").write_text("model: {}\n")
    local = sweep.load_spec("configs/sweeps/paper.yaml")
    assert local.path == Path("configs/sweeps/paper.yaml") and local.name == "t"
    with pytest.raises(sweep.SpecError) as err:
        sweep.load_spec("sweeps/absent.yaml")
    assert "not found" in str(err.value) and "configs/sweeps/paper.yaml" in str(err.value)  # lists the shipped ones


def parse_dry_run(out: str) -> dict[str, tuple[str, list[str] | None]]:
    """run name -> (state line, command) from `ega sweep --dry_run` output."""
    result: dict[str, tuple[str, list[str] | None]] = {}
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("["):
            name, state = line.split("] ", 1)[1].split(": ", 1)
            has_cmd = i + 1 < len(lines) and lines[i + 1].startswith("    ")
            result[name] = (state, shlex.split(lines[i + 1]) if has_cmd else None)
    return result


def test_dry_run_prints_commands_resumes_and_skips(workdir, capsys):
    path = write_spec(workdir / "spec.yaml", good_spec())
    runs = workdir / "runs"
    (runs / "ra-seed2").mkdir(parents=True)
    (runs / "ra-seed2" / "DONE").write_text("{}")
    (runs / "rb-seed1" / "checkpoints").mkdir(parents=True)
    (runs / "rb-seed1" / "checkpoints" / "last.ckpt").write_bytes(b"")
    (runs / "rb-seed2").mkdir()  # config/events only, no checkpoint: starts fresh
    before = sorted(p.relative_to(workdir) for p in workdir.rglob("*"))

    assert sweep.main([str(path), "--dry_run", "--runs_dir", "runs"]) == 0
    out = capsys.readouterr().out
    parsed = parse_dry_run(out)
    assert list(parsed) == ["ra-seed1", "ra-seed2", "rb-seed1", "rb-seed2"]
    assert out.splitlines()[0].startswith("[1/4] ra-seed1: would start")
    assert parsed["ra-seed2"] == ("skipped (done)", None)
    fit = [sys.executable, "-m", "ega_lightning.cli", "fit", "-c", "base.yaml", "-c", "size.yaml"]
    assert parsed["ra-seed1"] == (
        "would start",
        [
            *fit,
            *["-c", "a.yaml", "--trainer.max_steps=4", "--model.tau_init=0.35"],
            *["--seed_everything=1", "--run_name=ra-seed1", "--runs_dir=runs"],
        ],
    )
    rb1 = ["-c", "b.yaml", "--trainer.max_steps=4", "--seed_everything=1", "--run_name=rb-seed1", "--runs_dir=runs"]
    assert parsed["rb-seed1"] == ("would resume", [*fit, *rb1, "--ckpt_path", "last"])
    assert parsed["rb-seed2"][0] == "would start" and "--ckpt_path" not in parsed["rb-seed2"][1]
    assert sorted(p.relative_to(workdir) for p in workdir.rglob("*")) == before  # a dry run touches nothing


def test_only_filters_run_names(workdir, capsys):
    path = write_spec(workdir / "spec.yaml", good_spec())
    assert sweep.main([str(path), "--dry_run", "--only", "*-seed2"]) == 0
    assert list(parse_dry_run(capsys.readouterr().out)) == ["ra-seed2", "rb-seed2"]
    assert sweep.main([str(path), "--dry_run", "--only", "zz*"]) == 2
    assert "no run of" in capsys.readouterr().err


def test_ega_dispatches_sweep_and_report(workdir, capsys):
    path = write_spec(workdir / "spec.yaml", good_spec())
    ega_main(["sweep", str(path), "--dry_run"])
    assert "[1/4] ra-seed1: would start" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:  # a failing tool fails the `ega` command
        ega_main(["sweep", str(workdir / "absent.yaml")])
    assert exit_info.value.code == 2


def logs_a_validation(run_dir: Path, steps: tuple[int, ...] = (3,), tag: str = "val/loss") -> None:
    """Event files in ``run_dir`` with ``tag`` logged at ``steps``, as a run's validations leave them."""
    from torch.utils.tensorboard import SummaryWriter

    run_dir.mkdir(parents=True, exist_ok=True)
    with SummaryWriter(str(run_dir)) as writer:
        for step in steps:
            writer.add_scalar(tag, 1.5, step)


def test_sweep_runs_in_order_records_done_reports_failures_and_resumes(workdir, monkeypatch, capsys):
    """The bookkeeping, with `ega fit` replaced by tiny scripts: fail, succeed, resume, skip, busy."""
    path = write_spec(workdir / "spec.yaml", good_spec())
    runs = workdir / "runs"
    commands: dict[str, list[str]] = {}
    real_fit_command = sweep.fit_command

    def fake_fit(run, runs_dir, resume, overwrite=False):
        commands[run.run_name] = real_fit_command(run, runs_dir, resume, overwrite)
        code = "print('boom: bad config'); raise SystemExit(3)" if run.run_name == "ra-seed1" else "print('ok')"
        if run.run_name != "ra-seed1":  # a finished run logs its validation (issue 72: none logged is no finished run)
            logs_a_validation(Path(runs_dir) / run.run_name)
        return [sys.executable, "-c", code]

    monkeypatch.setattr(sweep, "fit_command", fake_fit)
    (runs / "rb-seed1" / "checkpoints").mkdir(parents=True)
    (runs / "rb-seed1" / "checkpoints" / "last.ckpt").write_bytes(b"")
    first_attempt = "2026-11-01T00:00:00+00:00"  # rb-seed1 was started by an earlier sweep, then stopped
    (runs / "rb-seed1" / "sweep.log").write_text(f"\n===== {first_attempt} ega sweep spec.yaml: fresh\n")

    assert sweep.main([str(path), "--runs_dir", "runs"]) == 1  # one run failed
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[1/4] ra-seed1: started"
    assert out[1].startswith("[1/4] ra-seed1: failed (3)")
    assert "    | boom: bad config" in out[2 : out.index("[2/4] ra-seed2: started")]  # the tail of its log
    assert "[2/4] ra-seed2: started" in out and "[3/4] rb-seed1: resumed" in out  # went on after the failure
    assert any(line.startswith("[4/4] rb-seed2: done in ") for line in out)
    assert commands["rb-seed1"][-2:] == ["--ckpt_path", "last"] and "--ckpt_path" not in commands["ra-seed2"]
    assert not (runs / "ra-seed1" / "DONE").exists()
    done = json.loads((runs / "ra-seed2" / "DONE").read_text())
    assert done["returncode"] == 0 and done["wall_seconds"] >= 0 and not done["resumed"]
    assert first_attempt < done["started_at"] <= done["finished_at"]  # its own (only) attempt
    resumed = json.loads((runs / "rb-seed1" / "DONE").read_text())
    assert resumed["resumed"] is True and resumed["started_at"] == first_attempt  # the first attempt's start
    assert "boom: bad config" in (runs / "ra-seed1" / "sweep.log").read_text()

    # again: the finished runs are skipped, the failed one is retried; a locked run is left alone
    (workdir / "results" / "runs" / "rb-seed2.json").unlink()  # its record would skip it before its lock is tried
    with open(runs / "rb-seed2" / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert sweep.main([str(path), "--runs_dir", "runs"]) == 1
    out = capsys.readouterr().out.splitlines()
    # recorded, as a finished run with its validation is (its record is read before its directory)
    assert "[2/4] ra-seed2: skipped (recorded in results/runs/ra-seed2.json)" in out
    assert "[3/4] rb-seed1: skipped (recorded in results/runs/rb-seed1.json)" in out
    assert "[1/4] ra-seed1: started" in out
    assert any(line.startswith("[4/4] rb-seed2: skipped (running in another process") for line in out)
    assert (runs / "ra-seed1" / "sweep.log").read_text().count("\nboom: bad config\n") == 2  # appended


# ----------------------------------------------------------------------------- report on fabricated runs


def fake_run(
    runs_dir: Path,
    name: str,
    gate: str,
    val: list[float],
    *,
    done: bool = True,
    gap: float | None = None,
    tau: list[float] | None = None,
    tau_init: float = 0.0,
    options: dict | None = None,
    speed: float = 1000.0,
    resumed_from: float | None = None,
    converged: bool | None = None,
    block_size: int = TINY_MODEL["block_size"],
    done_with: dict | None = None,
    recipe: dict | None = None,
) -> Path:
    """A run directory as `ega fit` + `ega sweep` leave it, with chosen numbers (evaluations at steps 2, 5, ...);
    ``done_with``: what its DONE holds (a start, the tree it ran from), ``recipe``: hyper-parameters changed."""
    from torch.utils.tensorboard import SummaryWriter

    run_dir = runs_dir / name
    run_dir.mkdir(parents=True)
    hparams = {**TINY_MODEL, "block_size": block_size, "gate": gate, "gate_options": options, "tau_init": tau_init}
    hparams["vocab"] = TINY_VOCAB
    hparams |= {"corpus": "tinyshakespeare", "batch_size": 8, "max_eval_windows": 16, "seed": 1, **(recipe or {})}
    (run_dir / "hparams.yaml").write_text(yaml.safe_dump(hparams))
    config = {"data": {"corpus": "tinyshakespeare"}, "model": {"gate": gate}, "trainer": {"max_steps": 3 * len(val)}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    steps = [3 * i + 2 for i in range(len(val))]
    with SummaryWriter(str(run_dir)) as writer:
        for i, (step, value) in enumerate(zip(steps, val, strict=True)):
            writer.add_scalar("train/tokens_per_sec", speed, step)
            writer.add_scalar("val/loss", resumed_from if resumed_from and i == len(val) - 1 else value, step)
            if gap is not None:
                writer.add_scalar("gap", gap, step)
            if tau is not None:
                writer.add_scalar("gate/tau_mean", tau[i], step)
                writer.add_scalar("gate/frac_above_tau", 0.37, step)
    if resumed_from is not None:  # the resumed process logs the last evaluation again: it wins
        # its event file must sort after the first, as a later process's does by its start time: in one process
        # within one second the names differ only by a counter, and "....10" sorts before "....9"
        for first in run_dir.glob("events.out.tfevents.*"):
            first.rename(run_dir / f"events.out.tfevents.1000000000.{first.name.split('.', 4)[-1]}")
        with SummaryWriter(str(run_dir)) as writer:
            writer.add_scalar("val/loss", val[-1], steps[-1])
    if converged is not None:  # as TauTracker writes it (the parts the report reads)
        summary = {"converged": converged, "converged_step": 5 if converged else None, "final": {"tau_mean": tau[-1]}}
        (run_dir / "gate_summary.json").write_text(json.dumps(summary))
    if done:
        (run_dir / "DONE").write_text(json.dumps(done_with or {}))
    return run_dir


@pytest.fixture(scope="module")
def fabricated(tmp_path_factory):
    work = tmp_path_factory.mktemp("report")
    runs = work / "runs"
    base_val, ega1_val = [1.50, 1.60, 1.55], [1.40, 1.52, 1.45]
    for seed in (1, 2, 3):
        i = seed - 1
        fake_run(runs, f"none-seed{seed}", "none", [2.0, base_val[i]], gap=[0.30, 0.33, 0.32][i])
        fake_run(
            runs,
            f"ega1-seed{seed}",
            "linear",
            [2.0, ega1_val[i]],
            gap=[0.25, 0.28, 0.29][i],
            tau=[0.1, [0.30, 0.34, 0.36][i]],
            speed=950.0,
            resumed_from=1.30 if seed == 1 else None,  # a lower value overwritten by the resumed run
            converged=seed != 3,
        )
        fake_run(runs, f"db2-seed{seed}", "db2", [2.0, [1.52, 1.58, 1.56][i]], tau=[0.1, 0.2])
        fake_run(runs, f"ms2-seed{seed}", "multiscale", [2.0, [1.45, 1.55, 1.50][i]], options={"scales": 2})
    fake_run(runs, "ega1-seed4", "linear", [9.0, 9.0], done=False)  # interrupted: must not be averaged in
    (runs / "ega1-seed4" / "checkpoints").mkdir()
    (runs / "ega1-seed4" / "checkpoints" / "last.ckpt").write_bytes(b"")
    fake_run(runs, "tau0-seed1", "linear", [2.0, 1.46], tau=[0.1, 0.30], tau_init=0.0)
    fake_run(runs, "tau7-seed1", "linear", [2.0, 1.47], tau=[0.6, 0.45], tau_init=0.7)
    spec = {
        "name": "fab",
        "runs": [
            # the baseline and EGA-1 shown in the ablation too, as short.yaml shows them: the protocol's ablation
            # comparisons name ablation/none and ablation/linear (and each gate by its variant name)
            {"name": "none", "seeds": [1, 2, 3], "group": "main", "also_in": ["ablation"]},
            # seed 5: never ran
            {"name": "ega1", "seeds": [1, 2, 3, 4, 5], "group": "main", "variant": "linear", "also_in": ["ablation"]},
            {"name": "db2", "seeds": [1, 2, 3], "group": "ablation"},
            {"name": "ms2", "seeds": [1, 2, 3], "group": "ablation", "variant": "multiscale2"},
            {"name": "tau0", "seeds": [1], "group": "tau_init"},
            {"name": "tau7", "seeds": [1], "group": "tau_init"},
        ],
    }
    path = write_spec(work / "spec.yaml", spec)
    out = work / "results"
    assert report.main([str(path), "--runs_dir", str(runs), "--out", str(out), "--records_dir", str(out / "runs")]) == 0
    return out, json.loads((out / "results.json").read_text()), (out / "REPORT.md").read_text()


def findings_of(out: Path, kind: str | None = None) -> list[dict]:
    """The findings of the report in ``out`` (results.json), of one kind when given."""
    found = json.loads((out / "results.json").read_text())["findings"]
    return [f for f in found if kind is None or f["kind"] == kind]


def variant(results: dict, group: str, label: str) -> dict:
    table = next(t for t in results["groups"] if t["group"] == group and t["corpus"] == "tinyshakespeare")
    return next(v for v in table["variants"] if v["variant"] == label)


def test_report_numbers_use_finished_runs_only(fabricated):
    _, results, _ = fabricated
    ega1 = variant(results, "main", "linear")
    assert ega1["seeds_done"] == [1, 2, 3] and ega1["seeds_not_done"] == [4, 5]
    assert ega1["final_val_loss"]["n"] == 3
    assert ega1["final_val_loss"]["mean"] == pytest.approx((1.40 + 1.52 + 1.45) / 3, abs=1e-6)  # not the 9.0
    d = ega1["diff_final_val_loss"]
    expected = stats.paired_difference([1.50, 1.60, 1.55], [1.40, 1.52, 1.45])
    assert d["method"] == "paired" and d["n"] == 3 and d["excludes_zero"] is True
    for key in ("estimate", "low", "high"):
        assert d[key] == pytest.approx(getattr(expected, key), abs=1e-5)
    assert ega1["diff_final_gap"]["estimate"] == pytest.approx((0.05 + 0.05 + 0.03) / 3, abs=1e-6)
    assert ega1["final_tau_mean"]["mean"] == pytest.approx((0.30 + 0.34 + 0.36) / 3, abs=1e-6)
    assert ega1["tokens_per_sec"]["mean"] == pytest.approx(950.0)
    # EGA-1 adds n_layer * n_head * (n_embd + 2) parameters (docs/gates.md)
    baseline = variant(results, "main", "none")
    extra = TINY_MODEL["n_layer"] * TINY_MODEL["n_head"] * (TINY_MODEL["n_embd"] + 2)
    assert ega1["n_params"] - baseline["n_params"] == extra
    assert ega1["overhead_pct"] == pytest.approx(100 * extra / baseline["n_params"])
    seed1 = next(r for r in results["runs"] if r["run_name"] == "ega1-seed1")
    assert seed1["final_val_loss"] == pytest.approx(1.40, abs=1e-6)
    assert seed1["best_val_loss"] == pytest.approx(1.40, abs=1e-6)  # the overwritten 1.30 is gone


def test_report_lists_missing_and_incomplete_runs(fabricated):
    _, results, text = fabricated
    status = {r["run_name"]: r["status"] for r in results["runs"]}
    assert status["ega1-seed4"] == "incomplete" and status["ega1-seed5"] == "missing"
    assert sum(s != "done" for s in status.values()) == 2
    missing_section = text.split("## Missing and incomplete runs")[1]
    assert (
        "| `ega1-seed4` |" in missing_section and "| incomplete | no DONE; has checkpoints/last.ckpt" in missing_section
    )
    assert "| `ega1-seed5` |" in missing_section and "| missing |" in missing_section
    assert "**14 of 16 runs finished**" in text


def test_report_findings_compare_with_the_paper(fabricated):
    out, _, text = fabricated
    (improvement,) = findings_of(out, "improvement")
    assert improvement["section"] == "main" and improvement["claim"] == "improvement:tinyshakespeare"
    d = improvement["ours"]
    assert d["method"] == "paired" and d["n"] == 3
    assert (round(d["estimate"], 3), round(d["low"], 3), round(d["high"], 3)) == (0.093, 0.065, 0.122)
    assert improvement["verdict"] == "holds"  # the direction: the fabricated interval lies above 0
    assert improvement["magnitude"]["reading"] == "reproduced"  # and it holds the paper's +0.103
    (gap,) = findings_of(out, "gap")
    assert gap["ours"]["estimate"] == pytest.approx(0.13 / 3, abs=1e-6) and gap["paper_regime"] is True
    assert gap["verdict"] == "holds" and gap["magnitude"]["reading"] == "reproduced"  # holds +0.042 and not 0
    assert not findings_of(out, "best_val_loss")  # every run ends at its best
    (tau,) = findings_of(out, "tau")
    assert {k: tau[k] for k in ("settled", "tracked")} == {"settled": 2, "tracked": 3}
    assert tau["code"]["flag"] == "unknown"  # fabricated runs: no fingerprint, no provenance.json
    (best,) = findings_of(out, "ablation_best")
    assert (best["rank"], best["paper_rows"]) == (1, 4)
    pairs = {f["subject"]: f for f in findings_of(out, "ablation_pair")}
    assert pairs["EGA-2 `multiscale2`"]["ours"]["estimate"] == pytest.approx(-0.043, abs=1e-3)
    assert pairs["EGA-DB2 `db2`"]["ours"]["estimate"] == pytest.approx(-0.003, abs=1e-3)
    assert not findings_of(out, "cost")[0]["verdict"] or findings_of(out, "cost")[0]["claim"] == "cost"
    assert text.index("## Claims") < text.index("## Method") < text.index("## main")


def test_tau_trajectory_starts_at_tau_init_then_follows_the_logged_points():
    run = sweep.Run(Path("spec.yaml"), "ts-tau", 1, (), (), "tau_init", "tau")

    def logged(points: list[tuple[int, float]]) -> comparisons.RunData:
        common = {"status": "done", "reason": "", "corpus": "tinyshakespeare", "gate": "linear"}
        return comparisons.RunData(run=run, **common, scalars={"gate/tau_mean": points})

    data = logged([(250, 0.41), (500, 0.44)])
    assert comparisons.tau_trajectory(data, 0.35) == [(0, 0.35), (250, 0.41), (500, 0.44)]
    data = logged([(0, 0.36), (250, 0.41)])  # a point logged at step 0 yields to tau_init
    assert comparisons.tau_trajectory(data, 0.35) == [(0, 0.35), (250, 0.41)]
    assert comparisons.tau_trajectory(data, None) == [(0, 0.36), (250, 0.41)]  # no tau_init: the logged points only


def test_tau_init_finding_reads_the_shared_seeds_and_pairs_with_the_default_init(tmp_path):
    runs = tmp_path / "runs"
    for seed, val in zip((1, 2, 3), (1.50, 1.52, 1.54), strict=True):
        fake_run(runs, f"none-seed{seed}", "none", [2.0, 1.6])
        fake_run(runs, f"tau0-seed{seed}", "linear", [2.0, val], tau=[0.1, 0.1], tau_init=0.0)
    fake_run(runs, "tau7-seed1", "linear", [2.0, 1.56], tau=[0.6, 0.7], tau_init=0.7)
    spec = {
        "name": "fab",
        "runs": [
            {"name": "none", "seeds": [1, 2, 3], "group": "tau_init"},
            {"name": "tau0", "seeds": [1, 2, 3], "group": "tau_init"},
            {"name": "tau7", "seeds": [1], "group": "tau_init"},
        ],
    }
    path = write_spec(tmp_path / "spec.yaml", spec)
    out = tmp_path / "out"
    assert report.main([str(path), "--runs_dir", str(runs), "--out", str(out), "--records_dir", str(out / "runs")]) == 0
    (f,) = findings_of(out, "tau_init")
    # read on seed 1, the only one both ran: 1.50 and 1.56 span 0.06, three times the std 0.02 of the
    # three tau_init 0 seeds (the 3-seed mean 1.52 would have given 0.04)
    assert f["seeds"] == [1]
    assert f["loss_span"] == pytest.approx(0.06, abs=1e-6)
    init, scatter = f["scatter"]
    assert init == 0.0 and scatter["std"] == pytest.approx(0.02, abs=1e-6) and scatter["n"] == 3
    assert f["tau_span"] == pytest.approx(0.6, abs=1e-6)
    ((init, paired),) = f["paired"]  # tau_init 0 − tau_init 0.7 on seed 1
    assert init == 0.7 and paired["method"] == "single" and paired["estimate"] == pytest.approx(-0.06, abs=1e-6)


def test_report_figures_and_sections(fabricated):
    out, results, text = fabricated
    for name in (
        "main-tinyshakespeare-val_loss.png",
        "main-tinyshakespeare-gap.png",
        "tau_init-tinyshakespeare-tau.png",
        "leaderboard-tinyshakespeare.png",  # the study has an ablation: its gates side by side
    ):
        assert (out / name).stat().st_size > 1000 and f"]({name})" in text
    assert not (out / "main-tinyshakespeare-tau.png").exists()  # one tau_init in main: no tau study there
    # one section per group of the spec, in its order; the leaderboard beside them; no landscape, no diagnostics
    assert [t["group"] for t in results["groups"]] == ["main", "ablation", "tau_init"]
    # every gate the ablation's section shows (EGA-1 too, as short.yaml shows it), largest baseline − gate first
    assert [row["variant"] for row in results["leaderboard"]["rows"]] == ["linear", "multiscale2", "db2"]
    assert results["landscape"] == []
    sections = {f["section"] for f in results["findings"]}
    assert sections == {"main", "ablation", "tau_init", "leaderboard", "cost"}  # cost: no section, a link
    assert "--only 'ega1-seed*'" in text


def report_into(spec: Path, runs: Path, out: Path) -> int:
    """`ega report SPEC` over fabricated runs, its records beside the report (not the committed ones)."""
    return report.main([str(spec), "--runs_dir", str(runs), "--out", str(out), "--records_dir", str(out / "runs")])


TOY_STUDY = '''"""A study of one claim, with a section and a key of results.json, written against the contract only."""

from ega_lightning.experiments.engine import Compared
from ega_lightning.experiments.findings import Where, measured_with
from ega_lightning.experiments.paper import Claim
from ega_lightning.experiments.study import Study
from ega_lightning.experiments.text import fmt_interval


def table_findings(table, inputs):
    rows = [r for r in table.rows if r.variant.gate == "linear" and r.baseline is not None]
    where = [Where(table.group, table.corpus, measured_with(r.variant, r.baseline), "EGA-1", "baseline") for r in rows]
    found = [(w, r.diffs["final_val_loss"]) for w, r in zip(where, rows)]
    return [Compared(kind="toy", **w._asdict(), ours=d, claim="toy") for w, d in found]


def section(inputs, data, found, drawn):
    lines = [f"- toy: baseline - EGA-1 {fmt_interval(f.interval)}." for f in found if f.kind == "toy"]
    return ["## toy study", "", *lines, ""]


STUDY = Study(
    "toy",
    groups=("toy",),
    claims=(Claim("toy", "EGA-1 lowers the loss in the toy's section", "lower"),),
    table_findings=table_findings,
    section=section,
    json=lambda inputs, data: {"sections": [t.title for t in inputs.tables_of(("toy",))]},
)
'''


def test_a_new_study_is_one_module_and_its_spec_entries_and_shows_its_claim_section_and_json(tmp_path):
    """Issue 38: a new claim touched 4 files of the package, a study with a section, figure or JSON 8 to 10. Now a
    study is one module written against `study.Study` only, and a spec that gives it its section: the report runs
    it with the others and shows its claim's row, its section and its key of results.json, and no file of the
    package changed for it (in the package, its line in `studies.STUDIES` lists it)."""
    import importlib.util

    from ega_lightning.experiments import report_assembly, studies

    package = {p: p.read_bytes() for p in Path(comparisons.__file__).parents[1].rglob("*.py")}
    runs = tmp_path / "runs"
    for seed in (1, 2):
        fake_run(runs, f"none-seed{seed}", "none", [2.0, 1.5 + 0.01 * seed])
        fake_run(runs, f"ega1-seed{seed}", "linear", [2.0, 1.40 + 0.02 * seed], tau=[0.1, 0.3])
    written = [tmp_path / "toy_study.py", tmp_path / "spec.yaml"]  # every file a new study with a section needs
    written[0].write_text(TOY_STUDY)
    toy_spec = {
        "name": "toy",
        "runs": [
            {"name": "none", "seeds": [1, 2], "group": "toy"},
            {"name": "ega1", "seeds": [1, 2], "group": "toy", "variant": "linear"},
        ],
    }
    write_spec(written[1], toy_spec)
    loader = importlib.util.spec_from_file_location("toy_study", written[0])
    toy = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(toy)
    out = tmp_path / "results"
    report_assembly.write_report([written[1]], runs, out, out / "runs", studies_run=(*studies.STUDIES, toy.STUDY))
    results = json.loads((out / "results.json").read_text())
    (row,) = [c for c in results["claims"] if c["claim"] == "toy"]
    assert row["section"] == "toy" and row["verdict"] is None  # measured, by no registered rule: no verdict
    (finding,) = [f for f in results["findings"] if f["kind"] == "toy"]
    assert finding["ours"]["estimate"] == pytest.approx(0.085)  # baseline 1.51, 1.52 − EGA-1 1.42, 1.44: paired
    assert results["toy"] == {"sections": ["toy / tinyshakespeare"]}
    assert list(results).index("toy") < list(results).index("groups")  # a study's key, after the findings
    text = (out / "REPORT.md").read_text()
    assert "| EGA-1 lowers the loss in the toy's section (EGA-1 against baseline) | lower | +0.085 [" in text
    assert "## toy study\n\n- toy: baseline - EGA-1 +0.085 [" in text
    assert text.index("## toy\n") < text.index("## toy study")  # its section, after the sections by group
    assert len(written) == 2 and {p.suffix for p in written} == {".py", ".yaml"}  # one module, its spec entries
    assert {p: p.read_bytes() for p in package} == package  # nothing of the package edited for it


def test_report_says_a_shared_comparison_once_and_names_unrun_rows(tmp_path):
    runs = tmp_path / "runs"
    for seed in (1, 2):
        fake_run(runs, f"none-seed{seed}", "none", [2.0, 1.5 + 0.01 * seed])
        fake_run(runs, f"ega1-seed{seed}", "linear", [2.0, 1.45 + 0.01 * seed], tau=[0.1, 0.3])
    spec = {
        "name": "shared",
        "runs": [
            {"name": "none", "seeds": [1, 2], "group": "main", "also_in": ["context"]},
            {"name": "ega1", "seeds": [1, 2], "group": "main", "also_in": ["context"], "variant": "linear"},
            {
                "name": "ms4",
                "seeds": [1],
                "group": "context",
                "configs": [str(CONFIGS / "corpus/tinyshakespeare.yaml"), str(CONFIGS / "gate/multiscale4.yaml")],
            },
        ],
    }
    path = write_spec(tmp_path / "spec.yaml", spec)
    assert report_into(path, runs, tmp_path / "out") == 0
    text = (tmp_path / "out" / "REPORT.md").read_text()
    assert [f["section"] for f in findings_of(tmp_path / "out", "improvement")] == ["main"]  # said once
    assert "## context" in text  # the shared runs still appear in both sections
    # a row that never ran is named from its configs: the paper's EGA-4, not "EGA-?"
    assert "(EGA-4)" in text.split("## context")[1] and "EGA-?" not in text


def test_report_gives_the_best_val_loss_beside_the_final_once_runs_overfit(tmp_path):
    runs = tmp_path / "runs"
    for seed in (1, 2):  # val loss bottoms out, then rises: the final and best differences differ
        fake_run(runs, f"none-seed{seed}", "none", [2.0, 1.40, 1.50 + 0.01 * seed], gap=0.35)
        fake_run(runs, f"ega1-seed{seed}", "linear", [2.0, 1.42, 1.45 + 0.01 * seed], gap=0.3, tau=[0.1, 0.2, 0.2])
    spec = {
        "name": "long",
        "runs": [
            {"name": "none", "seeds": [1, 2], "group": "long"},
            {"name": "ega1", "seeds": [1, 2], "group": "long", "variant": "linear"},
        ],
    }
    path = write_spec(tmp_path / "spec.yaml", spec)
    assert report_into(path, runs, tmp_path / "out") == 0
    (final,) = findings_of(tmp_path / "out", "improvement")
    assert final["ours"]["estimate"] == pytest.approx(0.05) and final["ours"]["high"] == pytest.approx(0.05)
    assert final["verdict"] == "holds" and final["magnitude"]["reading"] == "not reproduced"  # half the +0.103
    (best,) = findings_of(tmp_path / "out", "best_val_loss")
    assert best["ours"]["estimate"] == pytest.approx(-0.02) and best["verdict"] is None


def test_report_context_finding_tracks_the_difference_by_block_size(tmp_path):
    runs = tmp_path / "runs"
    # EGA-1's advantage: +0.01 at T16, +0.03 at T32, -0.02 at T64 (one seed each)
    for block, base, ega1 in ((16, 1.60, 1.59), (32, 1.55, 1.52), (64, 1.50, 1.52)):
        fake_run(runs, f"none-T{block}-seed1", "none", [2.0, base], gap=0.1, block_size=block)
        fake_run(runs, f"ega1-T{block}-seed1", "linear", [2.0, ega1], gap=0.1, tau=[0.1, 0.2], block_size=block)
    # a second seed at T32 only (+0.10): the trend must be read on seed 1, which every block size ran
    fake_run(runs, "none-T32-seed2", "none", [2.0, 1.55], gap=0.1, block_size=32)
    fake_run(runs, "ega1-T32-seed2", "linear", [2.0, 1.45], gap=0.1, tau=[0.1, 0.2], block_size=32)
    # the variants the protocol's comparison names (context/linear against context/none) at the shortest block, as
    # the shipped sweep names those of block 128
    label = {"none": "none", "ega1": "linear"}
    entries = [
        {
            "name": f"{gate}-T{block}",
            "seeds": [1, 2] if block == 32 else [1],
            "group": "context",
            "variant": label[gate] if block == 16 else f"{gate}-T{block}",
        }
        for block in (16, 32, 64)
        for gate in ("none", "ega1")
    ]

    def context_finding(entries: list[dict]) -> list[dict]:
        path = write_spec(tmp_path / "spec.yaml", {"name": "ctx", "runs": entries})
        out = tmp_path / "out"
        args = [str(path), "--runs_dir", str(runs), "--out", str(out), "--records_dir", str(tmp_path / "rec")]
        assert report.main(args) == 0
        return findings_of(out, "context")

    (f,) = context_finding(entries)
    assert f["seeds"] == [1]  # the trend is read on seed 1, which every block size ran
    assert [(b, round(d["estimate"], 3)) for b, d in f["by_block"]] == [(16, 0.01), (32, 0.03), (64, -0.02)]
    assert f["monotone"] is False and f["verdict"] == "too few seeds to tell"  # one seed
    assert f["ours"]["estimate"] == pytest.approx(-0.03, abs=1e-6)  # T64 - T16
    (f,) = context_finding(entries[:4])  # without T64 the advantage grows
    assert f["monotone"] is True and [b for b, _ in f["by_block"]] == [16, 32]
    assert context_finding(entries[:2]) == []  # one block size: no context study


def test_frozen_tau_and_the_leak_audit_are_set_against_learned_tau_and_the_causal_evaluation(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    base = {1: 1.50, 2: 1.60, 3: 1.55}
    learned = {1: 1.49, 2: 1.59, 3: 1.54}  # causal EGA-1: +0.010
    frozen = {1: 1.4905, 2: 1.5895, 3: 1.5403}  # learned - frozen: -0.0005, +0.0005, -0.0003
    window = {1: 1.30, 2: 1.42, 3: 1.36}  # the leak, as trained: +0.190
    causal_eval = {1: 1.70, 2: 1.81, 3: 1.74}  # the same checkpoints evaluated causally: -0.200
    for seed in (1, 2, 3):
        fake_run(runs, f"none-seed{seed}", "none", [2.0, base[seed]])
        fake_run(runs, f"ega1-seed{seed}", "linear", [2.0, learned[seed]], tau=[0.1, 0.2])
        fake_run(
            runs, f"frozen-seed{seed}", "linear", [2.0, frozen[seed]], tau=[0.0, 0.0], options={"learn_tau": False}
        )
        fake_run(runs, f"window-seed{seed}", "linear", [2.0, window[seed]], tau=[0.1, 0.3], options={"znorm": "window"})
    landscape_json(
        out / "landscape" / "window-prefix.json",
        [
            {
                "name": f"window-seed{s}/last.ckpt",
                "loss": causal_eval[s],
                "trained_znorm": "window",
                "eval_znorm": "prefix",
            }
            for s in (1, 2, 3)
        ],
    )
    spec = {
        "name": "tau",
        "runs": [
            {"name": "none", "seeds": [1, 2, 3], "group": "main"},
            {"name": "ega1", "seeds": [1, 2, 3], "group": "main", "variant": "linear"},
            {"name": "frozen", "seeds": [1, 2, 3], "group": "frozen_tau", "variant": "frozen_tau=0"},
            {"name": "window", "seeds": [1, 2, 3], "group": "leak", "variant": "znorm=window"},
        ],
    }
    assert report_into(write_spec(tmp_path / "spec.yaml", spec), runs, out) == 0

    def mean_diff(a: dict, b: dict) -> float:
        return sum(a[s] - b[s] for s in a) / len(a)

    (f,) = findings_of(out, "frozen_tau")
    assert f["against"] == "EGA-1 `linear`" and f["ours"]["method"] == "paired" and f["ours"]["n"] == 3
    assert f["ours"]["estimate"] == pytest.approx(mean_diff(learned, frozen), abs=1e-6)  # event files hold float32
    assert f["verdict"] == "consistent"  # the whole interval lies within the margin
    (leak,) = findings_of(out, "leak")
    assert leak["ours"]["estimate"] == pytest.approx(mean_diff(base, window), abs=1e-6)
    assert leak["causal"]["estimate"] == pytest.approx(mean_diff(base, learned), abs=1e-6)
    # +0.190 with a tight interval: the direction holds, the size lies above the paper's +0.103
    assert leak["verdict"] == "holds" and leak["magnitude"]["reading"] == "not reproduced"
    (increment,) = findings_of(out, "leak_increment")  # the leak's own share: causal EGA-1 − leak, by seed
    assert increment["ours"]["estimate"] == pytest.approx(mean_diff(learned, window), abs=1e-6)
    assert increment["family"] == "leak" and leak["family"] == "leak" and leak["family_k"] == 2
    assert increment["corrected"]["level"] == pytest.approx(0.975) and increment["ours"]["low"] is not None
    # the causal evaluation of the leaky checkpoints is a diagnostic: no claim, no verdict
    (causal,) = findings_of(out, "leak_causal")
    assert causal["ours"]["estimate"] == pytest.approx(mean_diff(base, causal_eval), abs=1e-6)
    assert causal["seeds"] == [1, 2, 3] and causal["verdict"] is None and causal["claim"] is None
    assert causal["section"] == "diagnostics"
    # only the head-to-head section makes the main claim: neither the frozen nor the leaky model is "EGA-1"
    assert [x["section"] for x in findings_of(out, "improvement")] == ["main"]
    claims = (out / "REPORT.md").read_text().split("## Method")[0]
    assert claims.count("leak audit") == 1 and "never trained" in claims
    assert "## diagnostics" in (out / "REPORT.md").read_text()
    (mechanism,) = findings_of(out, "tau_mechanism")
    assert mechanism["verdict"] == "too few seeds to tell"  # no EGA-1 checkpoint evaluated


# ----------------------------------------------------------------------------- run records


def test_records_keep_every_point_and_the_report_regenerates_from_them_alone(fabricated, tmp_path):
    out, results, _ = fabricated
    record = json.loads((out / "runs" / "ega1-seed1.json").read_text())
    assert record["source"] == "event files" and record["seed"] == 1 and record["max_steps"] == 6
    assert record["scalars"]["val/loss"] == [[2, 2.0], [5, pytest.approx(1.40)]]  # the resumed run's write wins
    assert record["hparams"]["gate"] == "linear" and "_instantiator" not in record["hparams"]
    assert record["machine"] == rundirs.machine()  # its DONE names none: recorded where it ran
    assert not (out / "runs" / "ega1-seed4.json").exists()  # interrupted: no record
    assert not (out / "runs" / "ega1-seed5.json").exists()

    # the run directories are gone (a fresh clone): the records give the same report
    again = tmp_path / "again"
    spec = out.parent / "spec.yaml"
    args = [str(spec), "--runs_dir", str(tmp_path / "no-runs"), "--out", str(again), "--records_dir", str(out / "runs")]
    assert report.main(args) == 0
    regenerated = json.loads((again / "results.json").read_text())
    assert regenerated["groups"] == results["groups"]
    sources = {r["run_name"]: r["source"] for r in regenerated["runs"] if r["status"] == "done"}
    assert set(sources.values()) == {"record"} and len(sources) == 14
    assert {r["run_name"]: r["status"] for r in regenerated["runs"]}["ega1-seed4"] == "missing"
    assert findings_of(again) == findings_of(out)
    assert (again / "main-tinyshakespeare-val_loss.png").stat().st_size > 1000
    assert "| 5 | record |" in (again / "REPORT.md").read_text()  # the runs table says where a run was read from


def test_sweep_skips_recorded_runs_and_refuses_a_record_of_other_arguments(workdir, monkeypatch, capsys):
    path = write_spec(workdir / "spec.yaml", good_spec())
    runs = {r.run_name: r for r in sweep.load_spec(path).runs}
    recorded = workdir / "results" / "runs"
    fake_run(workdir / "made", "ra-seed1", "linear", [2.0, 1.5])
    rundirs.record_run(runs["ra-seed1"], workdir / "made" / "ra-seed1", recorded)
    fake_run(workdir / "made", "rb-seed1", "none", [2.0, 1.6])
    stale = rundirs.make_record(runs["rb-seed1"], workdir / "made" / "rb-seed1")
    stale = dataclasses.replace(stale, args=["--trainer.max_steps=400"])  # made under an older version of the spec
    records.write_record(stale, recorded)

    assert sweep.main([str(path), "--dry_run"]) == 1  # a refused run: the dry run says it will fail
    out = capsys.readouterr().out.splitlines()
    assert "[1/4] ra-seed1: skipped (recorded in results/runs/ra-seed1.json)" in out
    (refused,) = [line for line in out if line.startswith("[3/4] rb-seed1:")]
    assert refused.startswith("[3/4] rb-seed1: failed: results/runs/rb-seed1.json ran with configs")
    assert "delete results/runs/rb-seed1.json to rerun the run as specified" in refused

    started: list[str] = []

    def fake_fit(run, runs_dir, resume, overwrite=False):
        started.append(run.run_name)
        logs_a_validation(Path(runs_dir) / run.run_name)  # a finished run logs its validation (issue 72)
        return [sys.executable, "-c", "print('ok')"]

    monkeypatch.setattr(sweep, "fit_command", fake_fit)
    assert sweep.main([str(path), "--runs_dir", "runs"]) == 1  # the refused run counts as failed
    assert started == ["ra-seed2", "rb-seed2"]
    assert "not finished: rb-seed1" in capsys.readouterr().out
    # the report does not count the refused record either, and says why
    rb1 = rundirs.load_run(runs["rb-seed1"], workdir / "runs", recorded)
    assert rb1.status == "incomplete" and "unusable record" in rb1.reason and "ran with configs" in rb1.reason


def test_a_record_or_run_directory_copied_under_another_seeds_name_is_refused(workdir):
    path = write_spec(workdir / "spec.yaml", good_spec())
    runs = {r.run_name: r for r in sweep.load_spec(path).runs}
    recorded = workdir / "results" / "runs"
    run_dir = fake_run(workdir / "made", "ra-seed1", "linear", [2.0, 1.5])
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**config, "seed_everything": 1}))
    rundirs.record_run(runs["ra-seed1"], run_dir, recorded)

    # seed 1's numbers must not be counted as seed 2's
    shutil.copy(recorded / "ra-seed1.json", recorded / "ra-seed2.json")
    ra2 = rundirs.load_run(runs["ra-seed2"], workdir / "no-runs", recorded)
    assert ra2.status == "incomplete" and "is the record of ra-seed1 (seed 1), not of ra-seed2 (seed 2)" in ra2.reason
    assert rundirs.load_run(runs["ra-seed1"], workdir / "no-runs", recorded).status == "done"

    copied = shutil.copytree(run_dir, workdir / "runs" / "ra-seed2")
    with pytest.raises(records.RecordError, match=r"ran with seed 1 \(its config.yaml\), but ra-seed2 is seed 2"):
        rundirs.make_record(runs["ra-seed2"], copied)
    assert rundirs.make_record(runs["ra-seed1"], run_dir).seed == 1


def test_a_spec_that_is_not_utf8_is_said_not_a_traceback(workdir, capsys):
    (workdir / "latin1.yaml").write_bytes("name: caf\xe9\nruns: []\n".encode("latin-1"))
    assert sweep.main(["latin1.yaml", "--dry_run"]) == 2
    assert "latin1.yaml is not valid YAML (UTF-8)" in capsys.readouterr().err


@pytest.mark.parametrize("done", ["[]", '{"command": 5}', '{"command": "ega fit -c"}', '{"command": "ega fit \'x"}'])
def test_a_garbled_done_makes_a_run_that_does_not_count_not_a_traceback(workdir, done):
    ra1 = sweep.load_spec(write_spec(workdir / "spec.yaml", good_spec())).runs[0]
    run_dir = fake_run(workdir / "runs", "ra-seed1", "linear", [2.0, 1.5])
    (run_dir / "DONE").write_text(done)
    loaded = rundirs.load_run(ra1, workdir / "runs", workdir / "records")
    assert loaded.status == "incomplete" and "DONE is not what `ega sweep` writes" in loaded.reason


def test_reading_runs_writes_nothing_and_the_report_refreshes_the_record_it_read(workdir):
    """Issue 38: `rundirs.read_runs` wrote records while reading. Now reading leaves the records directory as it
    was, hands back the run read from its directory as ``fresh``, and `ega report` is the one that writes it."""
    ra1, ra2 = sweep.load_spec(write_spec(workdir / "spec.yaml", good_spec())).runs[:2]
    fake_run(workdir / "runs", "ra-seed1", "linear", [2.0, 1.5])
    recorded = workdir / "records"
    loaded = rundirs.read_runs([ra1, ra2], workdir / "runs", recorded)
    assert [(x.status, x.fresh) for x in loaded] == [("done", True), ("missing", False)]
    assert not recorded.exists()  # read, not written
    assert rundirs.refresh_records(loaded, recorded) == [records.record_path(recorded, "ra-seed1")]
    again = rundirs.load_run(ra1, workdir / "no-runs", recorded)  # from the record now, as a fresh clone reads it
    assert again.status == "done" and again.record == loaded[0].record


def test_a_run_row_is_frozen_keyword_only_and_built_once_with_its_corpus_and_code(workdir):
    """Issue 38: `RunData` was a mutable 17-field positional row (a test built it with status a Path) whose corpus
    and code later stages rewrote in place. Now it is built once, keyword by keyword, from what was read."""
    ra1, ra2 = sweep.load_spec(write_spec(workdir / "spec.yaml", good_spec())).runs[:2]
    fake_run(workdir / "runs", "ra-seed1", "linear", [2.0, 1.5])
    loaded = rundirs.read_runs([ra1, ra2], workdir / "runs", workdir / "records")
    code = {"fingerprint": "f" * 16, "status": "today", "how": "recorded; today's computed"}
    done, missing = comparisons.run_rows(loaded, {"ra-seed1": code})
    assert (done.status, done.source, done.code, done.corpus) == ("done", "event files", code, loaded[0].record.corpus)
    assert missing.status == "missing" and missing.code["status"] == "unknown"
    assert missing.corpus == done.corpus  # the entry's other seed named it: one entry is one set of configs
    with pytest.raises(dataclasses.FrozenInstanceError):
        done.corpus = "ptb"  # type: ignore[misc]
    with pytest.raises(TypeError):
        comparisons.RunData(ra1, "done", "", "tinyshakespeare", "linear")  # type: ignore[misc]


@pytest.mark.parametrize(
    ("name", "text"), [("gate_summary.json", "{not json"), ("config.yaml", "a: [\n"), ("hparams.yaml", "- a list\n")]
)
def test_a_finished_run_directory_with_a_garbled_file_is_refused_not_a_traceback(workdir, name, text):
    ra1 = sweep.load_spec(write_spec(workdir / "spec.yaml", good_spec())).runs[0]
    run_dir = fake_run(workdir / "runs", "ra-seed1", "linear", [2.0, 1.5])
    assert rundirs.make_record(ra1, run_dir).seed == 1
    (run_dir / name).write_text(text)
    with pytest.raises(records.RecordError, match="is DONE, but a file the run wrote cannot be read"):
        rundirs.make_record(ra1, run_dir)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("done", "yes", "done must be an object"),
        ("scalars", {"val/loss": [[5, "abc"]]}, "scalars['val/loss'] must be a list of [step, value] pairs"),
        ("seed", "1", "seed an integer"),
        ("args", "--trainer.max_steps=4", "args must be a list of strings"),
    ],
)
def test_a_record_with_a_field_of_the_wrong_type_is_unusable_not_a_traceback(workdir, field, value, said):
    ra1 = sweep.load_spec(write_spec(workdir / "spec.yaml", good_spec())).runs[0]
    recorded = workdir / "records"
    path = rundirs.record_run(ra1, fake_run(workdir / "made", "ra-seed1", "linear", [2.0, 1.5]), recorded)
    assert rundirs.load_run(ra1, workdir / "runs", recorded).status == "done"
    path.write_text(json.dumps({**json.loads(path.read_text()), field: value}))
    loaded = rundirs.load_run(ra1, workdir / "runs", recorded)
    assert loaded.status == "incomplete" and said in loaded.reason


def test_a_finished_run_is_recorded_as_it_ran_and_refused_once_its_spec_entry_changed(workdir, capsys):
    path = write_spec(workdir / "spec.yaml", good_spec())
    ra1 = sweep.load_spec(path).runs[0]
    before = dataclasses.replace(ra1, args=("--trainer.max_steps=4", "--model.tau_init=0.7"))  # an older spec
    run_dir = fake_run(workdir / "runs", "ra-seed1", "linear", [2.0, 1.5])
    done = {"command": sweep.fit_command(before, "runs", resume=False), "machine": "box A"}
    (run_dir / "DONE").write_text(json.dumps(done))
    record = rundirs.make_record(before, run_dir)
    assert record.args == ["--trainer.max_steps=4", "--model.tau_init=0.7"] and record.machine == "box A"
    with pytest.raises(records.RecordError, match="ran with configs"):
        rundirs.make_record(ra1, run_dir)  # a record never claims what the run did not run with

    assert sweep.main([str(path), "--dry_run", "--only", "ra-seed1", "--runs_dir", "runs"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("[1/1] ra-seed1: failed: runs/ra-seed1 ran with configs")
    assert "args ['--trainer.max_steps=4', '--model.tau_init=0.7'], but the spec now gives" in out
    assert "and ['--trainer.max_steps=4', '--model.tau_init=0.35']: delete runs/ra-seed1 to rerun" in out
    assert sweep.main([str(path), "--only", "ra-seed1", "--runs_dir", "runs"]) == 1  # not rerun over it either
    assert not (workdir / "results").exists()  # and not recorded

    # its record from before the change: the report neither counts it nor overwrites it
    records.write_record(record, workdir / "out" / "runs")
    stale = (workdir / "out" / "runs" / "ra-seed1.json").read_text()
    # no run counts: the report writes nothing and fails
    assert report.main([str(path), "--runs_dir", "runs", "--out", "out", "--records_dir", "out/runs"]) == 2
    assert (workdir / "out" / "runs" / "ra-seed1.json").read_text() == stale
    assert "is finished" in capsys.readouterr().err and not (workdir / "out" / "results.json").exists()


def test_a_diverged_run_is_recorded_and_reported(tmp_path):
    runs = tmp_path / "runs"
    fake_run(runs, "none-seed1", "none", [2.0, 1.5])
    fake_run(runs, "nan-seed1", "linear", [2.0, math.nan], tau=[0.1, math.nan])
    spec = {"name": "nan", "runs": [{"name": "none", "seeds": [1]}, {"name": "nan", "seeds": [1]}]}
    path = write_spec(tmp_path / "spec.yaml", spec)
    assert report_into(path, runs, tmp_path / "out") == 0
    record = json.loads((tmp_path / "out" / "runs" / "nan-seed1.json").read_text())
    assert math.isnan(record["scalars"]["val/loss"][-1][1])
    results = json.loads((tmp_path / "out" / "results.json").read_text())  # strict JSON all the same
    assert next(r for r in results["runs"] if r["run_name"] == "nan-seed1")["final_val_loss"] is None
    assert not list((tmp_path / "out" / "runs").glob("*.tmp"))


def test_a_diverged_seed_is_named_beside_each_verdict_that_reads_it_and_listed_with_the_missing_runs(tmp_path):
    """Issue 52: a seed whose final val loss is NaN was dropped from the comparison without a sentence ("paired over
    2 seeds": survivorship, unsaid). Now EGA-1's seed 2 diverged: the improvement still reads seeds 1 and 3 (the
    protocol's rule, its amendment for a diverged seed), and its sentence, the variant's row and the list of missing
    and incomplete runs each name it."""
    runs = tmp_path / "runs"
    for seed in (1, 2, 3):
        fake_run(runs, f"none-seed{seed}", "none", [2.0, 1.5 + 0.01 * seed])
        final = math.nan if seed == 2 else 1.40 + 0.01 * seed
        fake_run(runs, f"ega1-seed{seed}", "linear", [2.0, final], tau=[0.1, 0.3])
    spec = {
        "name": "nan",
        "runs": [
            {"name": "none", "seeds": [1, 2, 3], "group": "main"},
            {"name": "ega1", "seeds": [1, 2, 3], "group": "main", "variant": "linear"},
        ],
    }
    out = tmp_path / "results"
    assert report_into(write_spec(tmp_path / "spec.yaml", spec), runs, out) == 0
    (improvement,) = findings_of(out, "improvement")
    assert improvement["ours"]["n"] == 2 and improvement["code"]["diverged"] == ["ega1-seed2"]
    results = json.loads((out / "results.json").read_text())
    assert variant(results, "main", "linear")["seeds_diverged"] == [2]
    assert next(r for r in results["runs"] if r["run_name"] == "ega1-seed2")["status"] == "diverged"
    text = (out / "REPORT.md").read_text()
    sentence = next(line for line in text.splitlines() if line.startswith("- ") and "improvement" in line.lower())
    assert "⚠ Diverged (final val loss not finite): `ega1-seed2`; the protocol's rule, its amendment of" in sentence
    assert "left out of every interval, the verdict read over the seeds that did not diverge" in sentence
    assert "| 2/3 (diverged: seed 2) |" in text
    missing = text.split("## Missing and incomplete runs")[1]
    assert "| `ega1-seed2` |" in missing and "| diverged | it diverged: its final val loss is nan" in missing


def test_a_run_from_a_modified_tree_is_not_todays_code(tmp_path):
    """Issue 52: runs made from a modified, uncommitted tree were marked "today's code" (the report never read the
    record's git_dirty; the fingerprint does not cover the recipe or data code). Now a record keeps the modified
    paths of the package and configs (git_modified); every EGA-1 seed here has today's fingerprint: seed 1's tree was
    modified and its paths not recorded (as the FoX reruns of results/runs) -> unknown, a rerun from a clean tree
    would establish it; seed 2's differed outside the package and configs -> today's; seed 3's in the package ->
    modified, its paths said."""
    runs = tmp_path / "runs"
    trees = {
        1: {"git_dirty": True},
        2: {"git_dirty": True, "git_modified": []},
        3: {"git_dirty": True, "git_modified": ["ega_lightning/experiments/sweep.py"]},
    }
    for seed, tree in trees.items():
        fake_run(runs, f"none-seed{seed}", "none", [2.0, 1.5 + 0.01 * seed])
        run_dir = fake_run(runs, f"ega1-seed{seed}", "linear", [2.0, 1.40 + 0.01 * seed], tau=[0.1, 0.3])
        for name in (f"none-seed{seed}", f"ega1-seed{seed}"):
            hparams = yaml.safe_load((runs / name / "hparams.yaml").read_text())
            ran = {"code_fingerprint": code_fingerprint(hparams), "git_dirty": False}
            (runs / name / "DONE").write_text(json.dumps(ran | (tree if runs / name == run_dir else {})))
    spec = {
        "name": "tree",
        "runs": [
            {"name": "none", "seeds": [1, 2, 3], "group": "main"},
            {"name": "ega1", "seeds": [1, 2, 3], "group": "main", "variant": "linear"},
        ],
    }
    out = tmp_path / "results"
    assert report_into(write_spec(tmp_path / "spec.yaml", spec), runs, out) == 0
    results = json.loads((out / "results.json").read_text())
    code = {r["run_name"]: r["code"] for r in results["runs"]}
    assert {name: c["status"] for name, c in code.items() if c["status"] != "today"} == {
        "ega1-seed1": "unknown",
        "ega1-seed3": "modified",
    }
    assert code["ega1-seed1"]["how"].startswith("unknown: a modified tree whose paths were not recorded")
    assert "ega_lightning/experiments/sweep.py" in code["ega1-seed3"]["how"]
    assert json.loads((out / "runs" / "ega1-seed3.json").read_text())["git_modified"] == trees[3]["git_modified"]
    (improvement,) = findings_of(out, "improvement")
    assert improvement["code"]["flag"] == "unknown" and improvement["code"]["runs"] == ["ega1-seed1", "ega1-seed3"]
    text = (out / "REPORT.md").read_text()
    assert "- 4 of 6 finished runs ran today's code; not established: `ega1-seed1`, `ega1-seed3`." in text
    assert "`ega1-seed1`: made from a modified tree whose paths were not recorded" in text
    assert "a rerun from a clean tree would establish it." in text


@pytest.mark.slow
def test_a_sweeps_done_keeps_the_modified_paths_of_the_package_and_configs(tmp_path):
    """What `ega sweep` writes into a run's DONE (rundirs.run_environment), run from a checkout of its own: a clean
    tree names no path; a modified module, a new file in the package and a changed file outside it name the first
    two; more than MAX_MODIFIED are counted."""
    checkout = package_checkout(tmp_path / "checkout", "2026-01-01T10:00:00+00:00")
    (checkout / "results").mkdir()
    (checkout / "results" / "REPORT.md").write_text("a report\n")
    git_commit_all(checkout, "results", "2026-01-02T10:00:00+00:00")
    probe = [
        sys.executable,
        "-c",
        "import json; from ega_lightning.experiments import rundirs as r; "
        "e = r.run_environment(); print(json.dumps([e['git_dirty'], e['git_modified']]))",
    ]

    def environment() -> list:
        done = subprocess.run(probe, cwd=checkout, capture_output=True, text=True, check=True)
        return json.loads(done.stdout)

    assert environment() == [False, []]
    sweep_py = checkout / "ega_lightning" / "experiments" / "sweep.py"
    sweep_py.write_text(sweep_py.read_text() + "\n# edited\n")
    (checkout / "ega_lightning" / "gates" / "mine.py").write_text("# a gate of my own\n")
    (checkout / "results" / "REPORT.md").write_text("edited\n")
    assert environment() == [True, ["ega_lightning/experiments/sweep.py", "ega_lightning/gates/mine.py"]]
    many = "\n".join(f" M ega_lightning/m{i}.py" for i in range(rundirs.MAX_MODIFIED + 3))
    kept = rundirs.modified_paths(many)
    assert len(kept) == rundirs.MAX_MODIFIED + 1 and kept[-1] == "... and 3 more"


# ----------------------------------------------------------------------------- the real thing


@pytest.mark.slow
def test_a_sweep_of_packaged_config_names_trains_from_any_directory(tmp_path, data_dir):
    # the configs a spec names reach `ega fit -c` as written, and fit finds them as the spec check did
    tiny = "--model.n_layer=1 --model.n_head=2 --model.n_embd=16 --model.block_size=16 --data.batch_size=4"
    tiny += " --data.max_eval_windows=4 --trainer.max_steps=2 --trainer.val_check_interval=2"
    spec = {
        "name": "packaged",
        "configs": ["configs/base.yaml", "size/cpu.yaml"],
        "args": [*tiny.split(), "--trainer.enable_progress_bar=false"],
        "runs": [{"name": "ts-db4", "configs": ["configs/corpus/tinyshakespeare.yaml", "gate/db4.yaml"], "seeds": [1]}],
    }
    write_spec(tmp_path / "spec.yaml", spec)
    result = run_ega(["sweep", "spec.yaml", "--runs_dir", "runs"], cwd=tmp_path, env={"EGA_DATA_DIR": str(data_dir)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    config = yaml.safe_load((tmp_path / "runs/ts-db4-seed1/config.yaml").read_text())
    db4 = yaml.safe_load((PACKAGED_CONFIGS / "gate/db4.yaml").read_text())
    assert config["model"]["gate"] == db4["model"]["gate"] and config["data"]["corpus"] == "tinyshakespeare"
    record = json.loads((tmp_path / "results/runs/ts-db4-seed1.json").read_text())
    assert record["command"].startswith("ega fit -c configs/base.yaml -c size/cpu.yaml ")  # as the spec wrote them


@pytest.mark.slow
def test_mini_sweep_end_to_end_is_restartable_and_reported(tmp_path, data_dir):
    tiny = "--model.n_layer=1 --model.n_head=2 --model.n_embd=16 --model.block_size=16 --data.batch_size=4"
    tiny += " --data.max_eval_windows=8 --trainer.max_steps=4 --trainer.val_check_interval=2"
    tiny += " --trainer.log_every_n_steps=1 --trainer.enable_progress_bar=false"
    spec = {
        "name": "mini",
        "configs": [str(CONFIGS / "base.yaml"), str(CONFIGS / "size/cpu.yaml")],
        "args": tiny.split(),
        "runs": [
            {
                "name": f"ts-{gate}",
                "configs": [str(CONFIGS / "corpus/tinyshakespeare.yaml"), str(CONFIGS / f"gate/{gate}.yaml")],
                "seeds": [1],
                "group": "main",
                "variant": gate,
            }
            for gate in ("none", "linear")
        ],
    }
    write_spec(tmp_path / "spec.yaml", spec)
    env = {"EGA_DATA_DIR": str(data_dir)}
    first = run_ega(["sweep", "spec.yaml", "--runs_dir", "runs"], cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "[1/2] ts-none-seed1: started" in first.stdout and "[2/2] ts-linear-seed1: done in" in first.stdout
    run_dirs = [tmp_path / "runs" / f"ts-{gate}-seed1" for gate in ("none", "linear")]
    for run_dir in run_dirs:
        done = json.loads((run_dir / "DONE").read_text())
        assert done["returncode"] == 0 and "--seed_everything=1" in done["command"]
        assert (run_dir / "checkpoints" / "last.ckpt").is_file() and (run_dir / "sweep.log").stat().st_size > 0
    snapshot = {p: p.stat().st_mtime_ns for d in run_dirs for p in d.rglob("*") if p.name != ".lock"}

    again = run_ega(["sweep", "spec.yaml", "--runs_dir", "runs"], cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "[1/2] ts-none-seed1: skipped (recorded in results/runs/ts-none-seed1.json)" in again.stdout
    assert "[2/2] ts-linear-seed1: skipped (recorded in results/runs/ts-linear-seed1.json)" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in snapshot} == snapshot  # nothing rewritten, DONE included

    made = run_ega(["report", "spec.yaml", "--runs_dir", "runs", "--out", "results"], cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-3000:]
    text = (tmp_path / "results" / "REPORT.md").read_text()
    assert "| `none` | none (baseline)" in text and "| `linear` | linear (EGA-1)" in text
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    for run_dir in run_dirs:
        events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
        events.Reload()
        entry = next(r for r in results["runs"] if r["run_name"] == run_dir.name)
        assert entry["status"] == "done"
        assert entry["final_val_loss"] == events.Scalars("val/loss")[-1].value
    for name in ("main-tinyshakespeare-val_loss.png", "main-tinyshakespeare-gap.png"):
        assert (tmp_path / "results" / name).stat().st_size > 0

    # each finished run left its record (results/runs/, committed): a fresh clone skips and reports it
    for run_dir in run_dirs:
        record = json.loads((tmp_path / "results" / "runs" / f"{run_dir.name}.json").read_text())
        done = json.loads((run_dir / "DONE").read_text())
        assert record["command"] == done["command"] and record["machine"] == done["machine"]
        assert record["command"].startswith("ega fit -c ") and "--runs_dir" not in record["command"]
        assert record["git_commit"] == done["git_commit"] and record["versions"]["torch"] is not None
        assert record["hparams"]["n_embd"] == 16 and record["max_steps"] == 4
        assert record["code_fingerprint"] == done["code_fingerprint"] == code_fingerprint(record["hparams"])
    shutil.rmtree(tmp_path / "runs")
    fresh = run_ega(["sweep", "spec.yaml", "--runs_dir", "runs"], cwd=tmp_path, env=env)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert "[1/2] ts-none-seed1: skipped (recorded in results/runs/ts-none-seed1.json)" in fresh.stdout
    assert not (tmp_path / "runs").exists()
    remade = run_ega(["report", "spec.yaml", "--runs_dir", "runs", "--out", "results"], cwd=tmp_path)
    assert remade.returncode == 0, remade.stderr[-3000:]
    assert json.loads((tmp_path / "results" / "results.json").read_text())["groups"] == results["groups"]


@pytest.mark.slow
def test_the_report_flags_each_comparison_whose_pairs_ran_on_two_machines(tmp_path):
    """Issue 41, item 8: records edited to name another machine for two of the baseline's seeds; `ega report`
    (the real CLI, records only) flags the comparisons that pair them, in the group table, its note, the
    finding's sentence and the claims table, naming the seeds; before, only the runs table's label changed."""
    runs = tmp_path / "runs"
    for seed, (base, ega1) in enumerate(((1.50, 1.40), (1.60, 1.52), (1.55, 1.45)), 1):
        fake_run(runs, f"none-seed{seed}", "none", [2.0, base], gap=0.30)
        fake_run(runs, f"ega1-seed{seed}", "linear", [2.0, ega1], gap=0.26, tau=[0.1, 0.3])
    spec = {
        "name": "fab",
        "runs": [
            {"name": "none", "seeds": [1, 2, 3], "group": "main"},
            {"name": "ega1", "seeds": [1, 2, 3], "group": "main", "variant": "linear"},
        ],
    }
    path = write_spec(tmp_path / "spec.yaml", spec)
    out, records = tmp_path / "results", tmp_path / "results" / "runs"
    args = ["report", str(path), "--runs_dir", str(runs), "--out", str(out), "--records_dir", str(records)]
    first = run_ega(args, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "two machines" not in (out / "REPORT.md").read_text()  # one machine: nothing to flag
    shutil.rmtree(runs)  # from here on the records are the runs
    for seed in (1, 2):
        record = json.loads((records / f"none-seed{seed}.json").read_text())
        record["machine"] = "Other CPU x64; Linux-6.1; torch 2.13.0"
        (records / f"none-seed{seed}.json").write_text(json.dumps(record))
    # seed 3's two runs name one machine booted with two kernel builds: one machine, not flagged
    for name, build in (("none-seed3", "v509"), ("ega1-seed3", "v1252")):
        record = json.loads((records / f"{name}.json").read_text())
        record["machine"] = f"AMD EPYC x2; Linux-6.18.44-fc-{build}-x86_64-with-glibc2.36; torch 2.13.0+cpu"
        (records / f"{name}.json").write_text(json.dumps(record))

    again = run_ega(args, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    text = (out / "REPORT.md").read_text()
    (row,) = [line for line in text.splitlines() if line.startswith("| `linear` |")]
    assert re.search(r"⚠ two machines: seeds 1, 2(?![,\d])", row)  # not seed 3: a kernel build is no machine
    assert "`linear` and its baseline `none` ran seed(s) 1, 2 on different machines" in text
    sentences = [line for line in text.splitlines() if line.startswith("- ") and "Seed(s) 1, 2 pair" in line]
    assert sentences and all("`linear`" in line and "`none`" in line for line in sentences)  # EGA-1 vs baseline
    claims = text.split("## Claims")[1].split("\n## ")[0]
    flagged = [line for line in claims.splitlines() if "two machines: seeds 1, 2" in line]
    assert flagged and all("EGA-1" in line or "linear" in line for line in flagged)


def test_report_stopped_by_ctrl_c_leaves_out_as_it_was(fabricated, tmp_path, monkeypatch, capsys):
    """Issue 40: Ctrl-C while the figures were drawn left --out with some PNGs and no REPORT.md or results.json,
    exit 130 with no message. Now the report is written beside --out and moved in whole."""
    from ega_lightning.experiments import figure_choice

    done_out = fabricated[0]
    runs = done_out.parent / "runs"
    out = tmp_path / "results"
    (out / "runs").mkdir(parents=True)
    (out / "REPORT.md").write_text("the old report\n")
    (out / "bench-keep.json").write_text("{}\n")  # a file of --out that is not the report's: left alone
    before = {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    save_png, saved = figure_choice.save_png, []

    def stopped_after_two(fig, path):
        if len(saved) == 2:
            raise KeyboardInterrupt
        saved.append(save_png(fig, path))
        return saved[-1]

    monkeypatch.setattr(figure_choice, "save_png", stopped_after_two)
    spec = done_out.parent / "spec.yaml"
    args = [str(spec), "--runs_dir", str(runs), "--out", str(out), "--records_dir", str(out / "runs")]
    capsys.readouterr()
    assert report.main(args) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"ega report: interrupted: nothing was written to {out}; rerun the command for the report."
    ]
    after = {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    # the old report and the other file as they were; no PNG, no temporary directory (records may be refreshed)
    assert {k: v for k, v in after.items() if not k.startswith("results/runs/")} == {
        k: v for k, v in before.items() if not k.startswith("results/runs/")
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]
    monkeypatch.setattr(figure_choice, "save_png", save_png)
    assert report.main(args) == 0  # and the whole report, moved in beside the other file
    assert (out / "bench-keep.json").read_text() == "{}\n" and "the old report" not in (out / "REPORT.md").read_text()
    assert {p.name for p in out.glob("*.png")} == {p.name for p in done_out.glob("*.png")}
    assert json.loads((out / "results.json").read_text())["findings"]


def test_a_seed_of_another_model_shape_is_left_out_of_its_variant(tmp_path):
    """Issue 40: a config edited between seeds (seed 1 at n_embd 32, seed 2 at 48) made one variant of both, each
    paired with the 32-wide baseline. Now the variant's shape is the one most of its seeds trained (a tie: the
    lowest seed's); a run of another shape is paired with nothing, and its row says so."""
    runs = tmp_path / "runs"
    for seed in (1, 2):
        fake_run(runs, f"none-seed{seed}", "none", [2.0, 1.5 + 0.01 * seed])
        run_dir = fake_run(runs, f"ega1-seed{seed}", "linear", [2.0, 1.40 + 0.01 * seed], tau=[0.1, 0.3])
    hparams = yaml.safe_load((run_dir / "hparams.yaml").read_text())  # ega1-seed2: its config was edited
    (run_dir / "hparams.yaml").write_text(yaml.safe_dump({**hparams, "n_embd": 48}))
    spec = {
        "name": "edited",
        "runs": [
            {"name": "none", "seeds": [1, 2], "group": "main"},
            {"name": "ega1", "seeds": [1, 2], "group": "main", "variant": "linear"},
        ],
    }
    out = tmp_path / "results"
    assert report_into(write_spec(tmp_path / "spec.yaml", spec), runs, out) == 0
    results = json.loads((out / "results.json").read_text())
    (row,) = [r for g in results["groups"] for r in g["variants"] if r["variant"] == "linear"]
    assert row["seeds_done"] == [1] and row["seeds_not_done"] == [2]
    assert list(row["seeds_left_out"]) == ["2"] and "2×2×48 T32 (61,496 parameters)" in row["seeds_left_out"]["2"]
    assert row["n_params"] == 28712
    assert row["final_val_loss"]["n"] == 1 and row["final_val_loss"]["mean"] == pytest.approx(1.41)
    diff = row["diff_final_val_loss"]
    assert diff["n"] == 1 and diff["estimate"] == pytest.approx(1.51 - 1.41)  # seed 1's pair only
    text = (out / "REPORT.md").read_text()
    assert "1/2 (left out, another model: seed 2 at 2×2×48 T32)" in text
    assert "`linear`: `ega1-seed2` is left out of every number: its model is 2×2×48 T32" in text


def test_a_seed_of_another_recipe_is_left_out_of_its_variant_and_named(tmp_path):
    """Issue 52: a config file edited between seeds (lr 0.001 -> 0.01, same path) had its seeds pooled and paired
    without a word (the code fingerprint does not cover the optimizer). Now a seed whose recorded recipe is not its
    variant's is left out and named, as another model shape is: EGA-1's seed 3 at lr 0.01, and the baseline's seed 2
    evaluated on the author's 50 random batches (an option added after the records: read at its default)."""
    runs = tmp_path / "runs"
    for seed in (1, 2, 3):
        lr = {"lr": 0.01} if seed == 3 else {"lr": 0.001}
        evaluation = {"random_eval_batches": 50} if seed == 2 else {}
        fake_run(runs, f"none-seed{seed}", "none", [2.0, 1.5 + 0.01 * seed], recipe={"lr": 0.001, **evaluation})
        fake_run(runs, f"ega1-seed{seed}", "linear", [2.0, 1.40 + 0.01 * seed], tau=[0.1, 0.3], recipe=lr)
    spec = {
        "name": "edited",
        "runs": [
            {"name": "none", "seeds": [1, 2, 3], "group": "main"},
            {"name": "ega1", "seeds": [1, 2, 3], "group": "main", "variant": "linear"},
        ],
    }
    out = tmp_path / "results"
    assert report_into(write_spec(tmp_path / "spec.yaml", spec), runs, out) == 0
    results = json.loads((out / "results.json").read_text())
    rows = {r["variant"]: r for g in results["groups"] for r in g["variants"]}
    assert rows["linear"]["seeds_done"] == [1, 2] and list(rows["linear"]["seeds_left_out"]) == ["3"]
    assert "lr 0.01 (the variant's 0.001)" in rows["linear"]["seeds_left_out"]["3"]
    assert rows["none"]["seeds_done"] == [1, 3] and list(rows["none"]["seeds_left_out"]) == ["2"]
    assert "random_eval_batches 50 (the variant's null)" in rows["none"]["seeds_left_out"]["2"]
    diff = rows["linear"]["diff_final_val_loss"]
    assert diff["n"] == 1 and diff["estimate"] == pytest.approx(1.51 - 1.41)  # seed 1, the one both sides keep
    text = (out / "REPORT.md").read_text()
    assert "2/3 (left out, another recipe: seed 3 (lr 0.01))" in text
    assert "`linear`: `ega1-seed3` is left out of every number: its recorded recipe is not the variant's" in text
    missing = text.split("## Missing and incomplete runs")[1]
    assert "| `ega1-seed3` |" in missing and "| `none-seed2` |" in missing


def test_a_recipe_key_a_record_lacks_is_read_at_the_default_the_code_trains_with():
    """Every argument of CharLM and CharDataModule but the model's shape, the seed, the corpus and compile is part of
    a run's recipe, and a record made before it existed is read at the argument's default: a new option (issue 50's
    qkv_bias, random_eval_batches, ...) set at its default in a new seed does not set an old seed apart."""
    import inspect

    from ega_lightning import CharDataModule, CharLM

    defaults = {}
    for cls in (CharLM, CharDataModule):
        for name, p in inspect.signature(cls.__init__).parameters.items():
            if p.default is not inspect.Parameter.empty and name not in (*comparisons.NOT_RECIPE, "data_dir"):
                defaults[name] = list(p.default) if isinstance(p.default, tuple) else p.default
    assert defaults == comparisons.RECIPE_DEFAULTS
    old = comparisons.RunData(
        run=None, status="done", reason="", corpus="c", gate="linear", hparams={"lr": 0.001}, max_steps=20
    )
    new = dataclasses.replace(old, hparams={"lr": 0.001, **defaults})
    assert comparisons.recipe(old) == comparisons.recipe(new)
    assert comparisons.recipe_difference(dataclasses.replace(new, max_steps=30), comparisons.recipe(old)) == [
        "max_steps 30 (the variant's 20)"
    ]


@pytest.mark.slow
def test_an_evaluation_of_a_finished_sweep_run_leaves_its_record_as_it_was(tmp_path, data_dir):
    """Issue 40, case 1: `ega validate` of a finished sweep run's best.ckpt, then `ega report` rebuilding the record
    from the run directory: the record equals the one the sweep wrote (before, the evaluation's point at step 0
    joined the run's val/loss and the report rewrote the record with it)."""
    tiny = [*(f"--model.{k}={v}" for k, v in TINY_MODEL.items()), "--data.batch_size=4", "--data.max_eval_windows=4"]
    args = [*tiny, "--trainer.max_steps=4", "--trainer.val_check_interval=2", "--trainer.enable_progress_bar=false"]
    spec = {"name": "v", "args": args, "runs": [{"name": "r", "seeds": [1], "group": "main"}]}
    path = write_spec(tmp_path / "spec.yaml", spec)
    env = {"EGA_DATA_DIR": str(data_dir)}
    where = ["--runs_dir", "runs", "--records_dir", "rec"]
    swept = run_ega(["sweep", str(path), *where], tmp_path, env=env)
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
    written = json.loads((tmp_path / "rec/r-seed1.json").read_text())
    best = tmp_path / "runs/r-seed1/checkpoints/best.ckpt"
    evaluated = run_ega(["validate", f"--ckpt_path={best}", "--data.max_eval_windows=2"], tmp_path, env=env)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    (tmp_path / "rec/r-seed1.json").unlink()  # the report rebuilds it from the run directory
    report = run_ega(["report", str(path), *where, "--out", "out"], tmp_path, env=env)
    assert report.returncode == 0, report.stderr[-3000:]
    rebuilt = json.loads((tmp_path / "rec/r-seed1.json").read_text())
    assert rebuilt["scalars"] == written["scalars"] and rebuilt["scalars"]["val/loss"]


@pytest.mark.slow
def test_a_sweep_s_done_records_and_report_say_what_ran(tmp_path, data_dir):
    """Issue 52: a records directory that cannot be written, a run stopped short of its max_steps (DONE after 0 of 20
    steps), a sweep run restarted by hand with other arguments (its old DONE kept, the record rewritten under the
    spec's arguments), a record whose curves stop early (counted as finished), and specs that name no size file
    ("Sizes run: none.")."""
    tiny = [*(f"--model.{k}={v}" for k, v in TINY_MODEL.items()), "--data.batch_size=4", "--data.max_eval_windows=4"]
    args = [*tiny, "--trainer.max_steps=4", "--trainer.val_check_interval=2", "--trainer.enable_progress_bar=false"]
    stop = ["--trainer.callbacks+=tests.helpers.StopAtStep", "--trainer.callbacks.step=2"]
    runs = [{"name": "full", "seeds": [1, 2], "group": "main"}, {"name": "short", "seeds": [1], "args": stop}]
    path = write_spec(tmp_path / "spec.yaml", {"name": "d", "args": args, "runs": runs})
    env = {"EGA_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO)}
    where = ["--runs_dir", "runs", "--records_dir", "rec"]

    epochs = write_spec(
        tmp_path / "epochs.yaml", {"name": "e", "args": [*args, "--trainer.max_epochs=0"], "runs": runs[:1]}
    )
    refused = run_ega(["sweep", str(epochs), *where], tmp_path, env=env)
    assert (
        refused.returncode == 2
        and "trainer.max_epochs is 0: the training windows are an endless stream" in refused.stderr
    )
    faults = str(REPO / "tests" / "faults")
    read_only = {**env, "PYTHONPATH": os.pathsep.join([faults, str(REPO)]), "EGA_TEST_FAULT": f"EROFS:{tmp_path}/rec*"}
    refused = run_ega(["sweep", str(path), *where], tmp_path, env=read_only)
    assert refused.returncode == MACHINE_REFUSED, refused.stdout + refused.stderr
    assert "--records_dir rec cannot be written, so no run would leave its record" in refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epochs.yaml", "spec.yaml"]  # nothing ran

    swept = run_ega(["sweep", str(path), *where], tmp_path, env=env)
    assert swept.returncode == 1, swept.stdout[-3000:] + swept.stderr[-3000:]
    assert "short-seed1: failed: it exited 0 at step 2 of its 4 (trainer.max_steps)" in swept.stdout
    assert not (tmp_path / "runs/short-seed1/DONE").exists() and not (tmp_path / "rec/short-seed1.json").exists()
    assert (tmp_path / "runs/full-seed1/DONE").is_file()

    recorded = (tmp_path / "rec/full-seed1.json").read_text()
    by_hand = ["fit", *args, "--seed_everything=1", "--run_name=full-seed1", "--runs_dir=runs", "--overwrite=true"]
    redone = run_ega([*by_hand, "--model.lr=0.02", "--model.warmup_steps=0"], tmp_path, env=env)
    assert redone.returncode == 0, redone.stderr[-3000:]
    assert not (tmp_path / "runs/full-seed1/DONE").exists()  # the DONE named the spec's run, which is gone

    cut = json.loads((tmp_path / "rec/full-seed2.json").read_text())
    cut["scalars"]["val/loss"] = cut["scalars"]["val/loss"][:1]  # the curve stops at its first validation
    (tmp_path / "rec/full-seed2.json").write_text(json.dumps(cut))
    shutil.rmtree(tmp_path / "runs/full-seed2")  # as in a fresh clone: the record alone
    report = run_ega(["report", str(path), *where, "--out", "out"], tmp_path, env=env)
    assert report.returncode == 0, report.stderr[-3000:]
    assert (tmp_path / "rec/full-seed1.json").read_text() == recorded  # not rewritten with the lr 0.02 numbers
    text = (tmp_path / "out/REPORT.md").read_text()
    missing = text.split("## Missing and incomplete runs", 1)[1]
    (seed2,) = [line for line in missing.splitlines() if "`full-seed2`" in line]
    assert (
        "its val/loss stops at step 1 (as logged) of a run of 4 steps, whose last validation is logged at step 3"
        in seed2
    )
    assert "`short-seed1`" in missing
    assert "Sizes run: no size file (2×2×32 T32" in text


# ----------------------------------------------------------------------------- the protocol edited after the data


def _improvement(out: Path) -> dict:
    (found,) = findings_of(out, "improvement")
    return found


@pytest.mark.slow
def test_a_protocols_level_is_checked_and_its_edit_dates_the_verdicts_it_changes(tmp_path):
    """Issue 52: `level: 95` (a percentage) was read as a fraction (intervals "at 3233.33%"); `level: 0.50` edited in
    and not committed changed labels whose registration stayed; a shallow clone dated the protocol by the file's own
    words, upgrading rows. Through `ega report` in a checkout of its own (protocol committed 1 Jan, runs started
    1 Jun): EGA-1's improvement (per-seed differences 0.02, 0.03, 0.01) is undecided and registered at 0.95; at an
    uncommitted 0.50 it holds, and reads exploratory with its former label; `level: 95` is one paragraph, exit 2,
    nothing written; in a shallow clone no verdict is marked registered and the method note says why."""
    checkout = package_checkout(tmp_path / "checkout", "2026-01-01T10:00:00+00:00")
    runs = tmp_path / "runs"
    started = {"started_at": "2026-06-01T10:00:00+00:00"}
    for seed, (base, gain) in enumerate([(1.50, 0.02), (1.60, 0.03), (1.55, 0.01)], 1):
        fake_run(runs, f"none-seed{seed}", "none", [2.0, base], done_with=started)
        fake_run(runs, f"ega1-seed{seed}", "linear", [2.0, base - gain], done_with=started)
    spec = {
        "name": "level",
        "runs": [
            {"name": "none", "seeds": [1, 2, 3], "group": "main"},
            {"name": "ega1", "seeds": [1, 2, 3], "group": "main", "variant": "linear"},
        ],
    }
    path = write_spec(tmp_path / "spec.yaml", spec)

    def report_in(where: Path, out: str):
        args = ["report", str(path), "--runs_dir", str(runs), "--out", str(tmp_path / out)]
        return run_ega([*args, "--records_dir", str(tmp_path / out / "runs")], cwd=where)

    done = report_in(checkout, "registered")
    assert done.returncode == 0, done.stderr[-3000:]
    f = _improvement(tmp_path / "registered")
    assert (f["verdict"], f["registration"]["mark"]) == ("too few seeds to tell", "registered")

    protocol_file = checkout / "ega_lightning" / "configs" / "protocol.yaml"
    text = protocol_file.read_text()
    protocol_file.write_text(text.replace("\nlevel: 0.95", "\nlevel: 0.50", 1))  # not committed
    done = report_in(checkout, "edited")
    assert done.returncode == 0, done.stderr[-3000:]
    f = _improvement(tmp_path / "edited")
    assert f["verdict"] == "holds" and f["family_level"] == pytest.approx(0.5)
    assert f["registration"]["mark"] == "exploratory"
    assert f["registration"]["level_was"].startswith("too few seeds to tell")
    assert "the edit of the family-wise level" in (tmp_path / "edited" / "REPORT.md").read_text()

    protocol_file.write_text(text.replace("\nlevel: 0.95", "\nlevel: 95", 1))
    done = report_in(checkout, "percent")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "level is 95, not a fraction in (0, 1)" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "percent").exists()

    protocol_file.write_text(text.replace("\nlevel: 0.95", "\nlevel: 0.50", 1))
    git_commit_all(checkout, "level 0.50", "2026-07-01T10:00:00+00:00")  # after the runs: still exploratory
    shallow = tmp_path / "shallow"
    clone = ["git", "clone", "-q", "--depth", "1", f"file://{checkout}", str(shallow)]
    subprocess.run(clone, check=True, capture_output=True)
    done = report_in(shallow, "shallow")
    assert done.returncode == 0, done.stderr[-3000:]
    f = _improvement(tmp_path / "shallow")
    assert f["verdict"] == "holds" and f["registration"]["mark"] == "not dated"
    assert all(
        (x.get("registration") or {}).get("mark") in (None, "not dated") for x in findings_of(tmp_path / "shallow")
    )
    assert "git history cannot date it here: a shallow clone" in (tmp_path / "shallow" / "REPORT.md").read_text()
