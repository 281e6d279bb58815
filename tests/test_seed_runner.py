"""scripts/seed_runner.py's bookkeeping, its runs and evaluations stood in for: a seed's pairs stay on one CPU kind
(model and vector instructions), and each run is evaluated before the next one starts, so that a machine that does not
outlive its sitting leaves every finished run with its evaluations."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import yaml

from ega_lightning.experiments.records import Record
from ega_lightning.experiments.spec import collect_runs, load_spec, static_value
from ega_lightning.runs import DONE

from .helpers import REPO, seed_runner

SPEC = REPO / "configs/sweeps/author.yaml"
SPEC_RUNS = {r.run_name: r for r in collect_runs([load_spec(SPEC)])}


def record_of(run_name: str, **fields: Any) -> str:
    """A record of the spec's run ``run_name`` as `ega sweep` would write it (its configs, arguments, seed and
    max_steps; no curves), with ``fields`` beside (the runner reads a record by its content)."""
    r = SPEC_RUNS[run_name]
    kept = {"configs": list(r.configs), "args": list(r.args), "max_steps": static_value(r, "trainer.max_steps")}
    return json.dumps({**Record(run_name=run_name, seed=r.seed, **kept).as_data(), **fields})


RUNS = ["author-none", "author-ega1", "author-ega1-prefix", "author-ega1-gatefirst", "author-linear", "author-ega4"]


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, list[str]]:
    """The runner on a machine whose CPU model is "AMD EPYC" with AVX512 kernels, its training and evaluation
    replaced by stand-ins that write what the real ones write and log what ran, in order."""
    module = seed_runner()
    ran: list[str] = []
    monkeypatch.setattr(module.host, "cpu_model", lambda: "AMD EPYC")
    monkeypatch.setattr(module, "REPORTED", tmp_path / "reported")  # the report's records: none of seed 4 here
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")

    def sweep(command: list[str], cwd: Path, **_: Any) -> subprocess.CompletedProcess[str]:
        run_name = command[command.index("--only") + 1]
        records_dir = Path(command[command.index("--records_dir") + 1])
        run_dir = Path(command[command.index("--runs_dir") + 1]) / run_name
        if (run_dir / DONE).is_file():  # `ega sweep` on a finished run directory: it records it, trains nothing
            ran.append(f"record {run_name} in {Path(cwd).name}")
        else:
            (run_dir / "checkpoints").mkdir(parents=True)
            (run_dir / "checkpoints" / "last.ckpt").write_text("a checkpoint")
            (run_dir / DONE).write_text("")
            ran.append(f"fit {run_name}")
            if Path(cwd).resolve() != REPO and "-ega1-" in run_name:  # as e2ababa's sweep: trained, not recorded
                return subprocess.CompletedProcess(command, 0)
        (records_dir / f"{run_name}.json").write_text(record_of(run_name, cpu=module.cpu()))
        return subprocess.CompletedProcess(command, 0)

    def whole_split(run_name: str, runs_dir: Path, out: Path, checkout: Path) -> int:
        assert (runs_dir / run_name / "checkpoints" / "last.ckpt").is_file()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"run_name": run_name, "cpu": module.cpu()}))
        ran.append(f"evaluate {run_name}")
        return 0

    monkeypatch.setattr(module.subprocess, "run", sweep)
    monkeypatch.setattr(module, "whole_split", whole_split)
    return module, ran


def seed_begun(tmp_path: Path, kind: str, finished: int) -> Path:
    """The records directory of a seed 4 begun on CPU kind ``kind`` by an earlier sitting, its first ``finished`` runs
    recorded and evaluated there."""
    records = tmp_path / "records"
    (records / "whole_split").mkdir(parents=True)
    (records / "seed4.cpu").write_text(kind + "\n")
    for name in RUNS[:finished]:
        (records / f"{name}-seed4.json").write_text(record_of(f"{name}-seed4"))
        (records / "whole_split" / f"{name}-seed4.json").write_text("{}")
    return records


def _args(tmp_path: Path, seed: int) -> list[str]:
    # the runs directory is each test's: it is what a new machine lacks
    return [str(SPEC), "--seeds", str(seed), "--records_dir", str(tmp_path / "records")]


def test_each_run_is_evaluated_before_the_next_one_trains(runner, tmp_path):
    module, ran = runner
    argv = [*_args(tmp_path, 4), "--runs_dir", str(tmp_path / "runs"), "--whole_split"]
    assert module.main(argv) == 0
    expected = [step for name in RUNS for step in (f"fit {name}-seed4", f"evaluate {name}-seed4")]
    assert ran == expected
    assert (tmp_path / "records/seed4.cpu").read_text() == "AMD EPYC (AVX512)\n"


def test_a_seed_begun_on_this_cpu_kind_keeps_its_committed_runs_on_a_new_machine(runner, tmp_path):
    """A new machine of the same kind: the records and evaluations committed from the last sitting stand, the run
    directories are gone; only the seed's other runs train."""
    module, ran = runner
    records = seed_begun(tmp_path, "AMD EPYC (AVX512)", 2)
    argv = [*_args(tmp_path, 4), "--runs_dir", str(tmp_path / "new-machine-runs"), "--whole_split"]
    assert module.main(argv) == 0
    assert ran == [step for name in RUNS[2:] for step in (f"fit {name}-seed4", f"evaluate {name}-seed4")]
    assert (records / "whole_split" / f"{RUNS[0]}-seed4.json").read_text() == "{}"  # kept, not remade


@pytest.mark.parametrize("begun_on", ["AMD EPYC (AVX2)", "Intel(R) Xeon(R) Platinum 8488C (AVX512)"])
def test_a_seed_begun_on_another_cpu_kind_is_rerun_whole_with_its_evaluations(runner, tmp_path, begun_on):
    """The same model name with other vector instructions is another kind: AVX2 and AVX-512 kernels round
    differently, so the seed's finished runs and their evaluations are removed and every run trains here."""
    module, ran = runner
    records = seed_begun(tmp_path, begun_on, 3)
    argv = [*_args(tmp_path, 4), "--runs_dir", str(tmp_path / "runs"), "--whole_split"]
    assert module.main(argv) == 0
    assert ran == [step for name in RUNS for step in (f"fit {name}-seed4", f"evaluate {name}-seed4")]
    for name in RUNS:  # every record and evaluation is this kind's
        for made in (records / f"{name}-seed4.json", records / "whole_split" / f"{name}-seed4.json"):
            assert json.loads(made.read_text())["cpu"] == "AMD EPYC (AVX512)"
    assert (records / "seed4.cpu").read_text() == "AMD EPYC (AVX512)\n"


def test_a_finished_run_without_its_evaluation_or_checkpoint_is_named_not_failed(runner, tmp_path, capsys):
    """Every run of the seed is recorded, one evaluation missing and its checkpoint gone with the last machine: the
    runner names it and exits 0, training nothing."""
    module, ran = runner
    records = tmp_path / "records"
    (records / "whole_split").mkdir(parents=True)
    for name in RUNS:
        (records / f"{name}-seed4.json").write_text(record_of(f"{name}-seed4"))
        if name != RUNS[1]:
            (records / "whole_split" / f"{name}-seed4.json").write_text("{}")
    argv = [*_args(tmp_path, 4), "--runs_dir", str(tmp_path / "runs"), "--whole_split"]
    assert module.main(argv) == 0
    assert ran == []
    assert f"{RUNS[1]}-seed4: 1 evaluation(s) missing and no checkpoint to make them from" in capsys.readouterr().out


def test_a_run_the_study_checkout_could_not_record_is_recorded_by_this_checkouts_sweep(runner, tmp_path):
    """The study's checkout trains the author's dropout-first variants and does not record them: this checkout's
    sweep writes their records from the finished run directories before the next run, so none is lost with the
    machine."""
    module, ran = runner
    argv = [*_args(tmp_path, 4), "--runs_dir", str(tmp_path / "runs"), "--checkout", str(tmp_path)]
    assert module.main(argv) == 0
    unrecorded = ("author-ega1-seed4", "author-ega1-prefix-seed4", "author-ega1-gatefirst-seed4")
    assert [step for step in ran if step.startswith("record")] == [f"record {r} in {REPO.name}" for r in unrecorded]
    assert ran.index(f"record {unrecorded[0]} in {REPO.name}") == ran.index(f"fit {unrecorded[0]}") + 1
    assert all((tmp_path / "records" / f"{name}-seed4.json").is_file() for name in RUNS)


def test_a_seed_whose_records_the_report_reads_is_not_run_again(runner, tmp_path):
    """Seeds 1 to 3 whole in results/runs/ (here a stand-in folder), none of their files in the records directory: a
    fresh machine given the documented command (--seeds 1 2 3 4 5) starts at seed 4; a seed only part-moved is not
    whole there and runs."""
    module, ran = runner
    reported = module.REPORTED
    reported.mkdir()
    for name, seed in [(name, seed) for name in RUNS for seed in (1, 2, 3)] + [(RUNS[0], 4)]:
        (reported / f"{name}-seed{seed}.json").write_text(record_of(f"{name}-seed{seed}"))
    argv = [str(SPEC), "--seeds", "1", "2", "3", "4", "--records_dir", str(tmp_path / "records")]
    assert module.main([*argv, "--runs_dir", str(tmp_path / "runs")]) == 0
    assert [step.split()[1] for step in ran] == [f"{name}-seed4" for name in RUNS]


def test_across_kinds_a_seed_begun_on_another_kind_goes_on_here_and_lists_both(runner, tmp_path):
    """The paper-size study (issue 67): a run is 8-11 hours, so a seed taken up on another CPU kind goes on, its
    finished runs and their evaluations kept, and seed<N>.cpu lists the kind it began on and this one."""
    module, ran = runner
    records = seed_begun(tmp_path, "AMD EPYC (AVX2)", 3)
    argv = [*_args(tmp_path, 4), "--runs_dir", str(tmp_path / "runs"), "--whole_split", "--across_kinds"]
    assert module.main(argv) == 0
    assert ran == [step for name in RUNS[3:] for step in (f"fit {name}-seed4", f"evaluate {name}-seed4")]
    assert (records / f"{RUNS[0]}-seed4.json").read_text() == record_of(f"{RUNS[0]}-seed4")  # kept
    assert (records / "seed4.cpu").read_text() == "AMD EPYC (AVX2)\nAMD EPYC (AVX512)\n"


def test_a_shipped_record_named_like_a_new_specs_entry_is_no_done_seed(runner, tmp_path, capsys):
    """Issue 72, case 2: a new spec whose entry is named like a shipped one (its records in results/runs/, here a
    stand-in folder) printed "seed N: done (its records are the report's)" and ran nothing: the runner matched
    records by file name. Now it reads each record's content (configs, arguments, seed, max_steps): a record of
    another run under the entry's name is one paragraph, exit 2, nothing written; the entry's own records still
    make the seed done."""
    module, ran = runner
    reported = module.REPORTED
    reported.mkdir()
    for name in RUNS:  # the shipped runs, as the spec gives them
        (reported / f"{name}-seed1.json").write_text(record_of(f"{name}-seed1"))
    new = tmp_path / "new.yaml"  # a new spec: the same entry names, another budget
    spec = yaml.safe_load(SPEC.read_text())
    spec["args"] = [*spec.get("args", []), "--trainer.max_steps=20"]
    new.write_text(yaml.safe_dump(spec))
    records = tmp_path / "records"
    argv = [str(new), "--seeds", "1", "--records_dir", str(records), "--runs_dir", str(tmp_path / "runs")]
    assert module.main(argv) == 2
    err = capsys.readouterr()
    assert "done (its records are the report's)" not in err.out and ran == []
    (line,) = err.err.strip().splitlines()
    assert line.startswith("seed_runner: error: ") and f"{reported / RUNS[0]}-seed1.json ran with configs" in line
    assert "Give the spec entry another name" in line and not records.exists()

    # a record of the entry's name and configs but another step budget is another run's too
    (reported / f"{RUNS[0]}-seed1.json").write_text(
        record_of(f"{RUNS[0]}-seed1").replace('"max_steps": 3000', '"max_steps": 20')
    )
    assert module.main([str(SPEC), *argv[1:]]) == 2
    assert "is the record of a run of 20 steps, but the spec entry author-none gives 3000" in capsys.readouterr().err

    (reported / f"{RUNS[0]}-seed1.json").write_text(record_of(f"{RUNS[0]}-seed1"))  # the spec's own: done
    assert module.main([str(SPEC), *argv[1:]]) == 0
    assert "seed 1: done (its records are the report's)" in capsys.readouterr().out and ran == []


def test_a_bad_spec_checkout_directory_or_seed_is_one_paragraph_and_leaves_nothing(runner, tmp_path, capsys):
    """Issue 72's seed-runner tracebacks and leftovers: a spec path that is not there, a --records_dir that is a
    file, a --checkout that is not there (each a traceback before), an unknown seed (an empty records folder left):
    one paragraph each, exit 2, nothing written."""
    module, ran = runner
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    records = tmp_path / "records"
    base = ["--seeds", "1", "--runs_dir", str(tmp_path / "runs")]
    for argv, said in [
        (["nope.yaml", *base, "--records_dir", str(records)], "nope.yaml"),
        ([str(SPEC), *base, "--records_dir", str(a_file)], "is a file: give a directory"),
        ([str(SPEC), *base, "--records_dir", str(records), "--checkout", str(tmp_path / "no")], "is not a directory"),
        ([str(SPEC), "--seeds", "99", "--runs_dir", "r", "--records_dir", str(records)], "has no run of seed(s) [99]"),
    ]:
        assert module.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "Traceback" not in err and said in err and err.startswith("seed_runner: error: "), err
        assert not records.exists() and ran == []


def test_a_spec_path_relative_to_this_directory_is_handed_to_the_sweep_absolute(runner, tmp_path, monkeypatch):
    """Issue 72: a spec path relative to the current directory reached `ega sweep` as given, run in the checkout,
    where it is not (seed1.cpu written first). The runner hands the sweep the spec's absolute path."""
    module, _ = runner
    where = tmp_path / "elsewhere"
    where.mkdir()
    (where / "mine.yaml").write_text(SPEC.read_text())
    monkeypatch.chdir(where)
    seen: list[str] = []
    sweep = module.subprocess.run

    def spying(command, cwd, **kw):
        seen.append(command[2])
        return sweep(command, cwd, **kw)

    monkeypatch.setattr(module.subprocess, "run", spying)
    assert module.main(["mine.yaml", "--seeds", "4", "--records_dir", "rec", "--runs_dir", "runs"]) == 0
    assert set(seen) == {str(where / "mine.yaml")}
