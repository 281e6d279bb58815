"""A run that another process is running is left alone: the run directory's lock, as `ega sweep` takes it."""

from __future__ import annotations

from ega_lightning import runs

from .helpers import REPO


def test_the_same_index_in_two_processes_trains_once(tmp_path, capsys, monkeypatch):
    import fcntl

    from ega_lightning.experiments import sweep

    monkeypatch.chdir(REPO)
    run_dir = tmp_path / "runs" / "ts-none-seed1"
    run_dir.mkdir(parents=True)
    with open(run_dir / runs.LOCK_FILE, "w") as lock:  # the other process, mid-run
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        args = ["configs/sweeps/short.yaml", "--index", "0", "--runs_dir", str(tmp_path / "runs")]
        assert sweep.main([*args, "--records_dir", str(tmp_path / "rec")]) == 75  # busy: nothing to do here
    assert "skipped (running in another process" in capsys.readouterr().out
    assert not (run_dir / "sweep.log").exists()
