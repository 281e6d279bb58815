"""Issue 72, hostile input's fifth round: records a report would overwrite, a seed runner that skipped by file name,
amendments that left their rules in code, non-causal evaluations fed to a registered claim, evaluation files read
against nothing, resumes that change a run, sweep runs taken for done, and `ega check-gate`'s blind spots."""

from __future__ import annotations

from pathlib import Path

from ega_lightning.commands import report
from ega_lightning.experiments import records, rundirs
from ega_lightning.experiments.spec import load_spec

from .test_experiments import fake_run, write_spec


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
