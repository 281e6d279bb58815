"""Cluster-grade runs (issue 41) through the real CLI: Lightning's SLURM requeue checkpoint, and what the exit
codes of `ega fit` and `ega sweep` tell a job script."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from .conftest import REPO, SHORT, TINY, run_ega
from .helpers import scalars

pytestmark = pytest.mark.slow

# What srun sets for a one-task job step: Lightning then takes the process for one SLURM manages.
SLURM_TASK = {
    "SLURM_NTASKS": "1",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_JOB_NAME": "ega-test",
    "SLURM_JOB_ID": "4242",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NODELIST": "localhost",
}


def checkpoint_step(path: Path) -> int:
    return torch.load(path, map_location="cpu", weights_only=False)["global_step"]


def test_overwrite_removes_a_slurm_requeue_checkpoint_and_never_restores_it(tmp_path, data_dir):
    env = {"EGA_DATA_DIR": str(data_dir)}
    first = run_ega(["fit", *TINY, *SHORT, "--run_name=r"], tmp_path, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "lightning_logs/r"
    fresh = scalars(run_dir, "val/loss")
    # another run's state (another seed, one step in) where Lightning's SIGUSR1 handler would have left it
    other = ["--run_name=other", "--seed_everything=7", "--trainer.max_steps=1", "--trainer.val_check_interval=1"]
    result = run_ega(["fit", *TINY, *SHORT, *other, "--checkpoint_every_n_steps=1"], tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    shutil.copy(tmp_path / "lightning_logs/other/checkpoints/last.ckpt", run_dir / "hpc_ckpt_1.ckpt")

    again = run_ega(["fit", *TINY, *SHORT, "--run_name=r", "--overwrite=true"], tmp_path, env={**env, **SLURM_TASK})
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Restoring states" not in again.stdout + again.stderr
    assert not list(run_dir.glob("hpc_ckpt_*"))
    assert scalars(run_dir, "val/loss") == fresh  # the fresh run's numbers, to the bit


def test_slurms_requeue_signal_stops_the_run_like_sigterm_and_writes_no_requeue_checkpoint(tmp_path, data_dir):
    env = {**os.environ, "EGA_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    env |= SLURM_TASK
    args = ["fit", *TINY, "--trainer.max_steps=40", "--trainer.val_check_interval=20", "--run_name=usr1"]
    args += ["--trainer.enable_progress_bar=false", "--checkpoint_every_n_steps=2"]
    args += ["--trainer.callbacks+=tests.helpers.SleepEachStep"]
    cmd = [sys.executable, "-m", "ega_lightning.cli", *args]
    run = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_dir = tmp_path / "lightning_logs/usr1"
    last = run_dir / "checkpoints/last.ckpt"
    deadline = time.time() + 240
    while not (last.is_file() and checkpoint_step(last) >= 2):
        assert run.poll() is None and time.time() < deadline, "the run ended before it could be signalled"
        time.sleep(0.1)
    run.send_signal(signal.SIGUSR1)
    try:
        _, err = run.communicate(timeout=180)
    finally:
        run.kill()
    assert run.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "stopped by SIGUSR1" in err and "--ckpt_path last" in err
    assert not list(run_dir.glob("hpc_ckpt_*"))
    assert checkpoint_step(last) < 40
