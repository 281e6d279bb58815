"""SIGTERM under DDP through the real CLI (issue 41, item 1), on CPU with gloo on 127.0.0.1: SIGTERM to a 2-process
fit's process group (what a scheduler sends at a time limit) stops every rank at the same step, each exiting 143
within 30 s, with a last.ckpt whose resume ends bit-identical to the uninterrupted run; also beside two busy loops,
where the race of Lightning's own handler showed (issue 41: 5 of 5 hung on a loaded machine); under torchrun; and
through `ega sweep`, which passes its SIGTERM to rank 0 only.

Every wait is bounded: a rank alive 30 s after the signal fails the test, and every process a test started (its
session, and torchrun's workers, which run in sessions of their own) is killed when it ends.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from .helpers import (
    REPO,
    SLURM_TASK,
    TINY,
    alive,
    busy_loops,
    children_of,
    free_port,
    kill_all,
    processes_under,
    scalars,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cluster")]

DDP = ["--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp"]
STEPS = 40
SCHEDULE = [f"--trainer.max_steps={STEPS}", "--trainer.val_check_interval=20", "--checkpoint_every_n_steps=4"]
FIT = ["fit", *TINY, *SCHEDULE, "--trainer.enable_progress_bar=false"]
STOP_LINE = "ega: stopped by SIGTERM before the end"
BOUND_S = 30.0
TRIALS = 5


def env_for(data_dir: Path) -> dict[str, str]:
    return {**os.environ, "EGA_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"} | {
        "OMP_NUM_THREADS": "1"
    }


def checkpoint_step(path: Path) -> int:
    return torch.load(path, map_location="cpu", weights_only=False)["global_step"]


def ega_in_session(args: list[str], cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`ega` in a session of its own (rank 1, started by rank 0, is in it too), its output in ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "ega_lightning.cli", *args],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def finish(args: list[str], cwd: Path, env: dict[str, str], log: Path, timeout: float = 300) -> str:
    """`ega` to its end (exit 0 asserted) within ``timeout`` seconds; its output."""
    proc = ega_in_session(args, cwd, env, log)
    try:
        status = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`ega {' '.join(args[:1])}` did not end within {timeout} s:\n{log.read_text()[-3000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert status == 0, log.read_text()[-3000:]
    return log.read_text()


def wait_for_training(proc: subprocess.Popen[bytes], last: Path, log: Path, step: int = 4) -> None:
    deadline = time.monotonic() + 240
    while not (last.is_file() and checkpoint_step(last) >= step):
        assert proc.poll() is None, f"the fit ended before it could be signalled:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "the fit did not reach its first checkpoint within 240 s"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, data_dir) -> dict[int, float]:
    """val/loss of the 2-process fit run to its end without a signal."""
    work = tmp_path_factory.mktemp("uninterrupted")
    finish([*FIT, *DDP, "--run_name=full"], work, env_for(data_dir), work / "full.log")
    return scalars(work / "lightning_logs/full", "val/loss")


def sigterm_trial(
    work: Path, name: str, env: dict[str, str], delay: float, signum: int = signal.SIGTERM, after_step: int = 4
) -> tuple[float, str]:
    """A 2-process DDP fit, ``signum`` to its process group ``delay`` s after its last.ckpt holds ``after_step``: every
    rank gone within 30 s (else the test fails), rank 0's exit status 128 + ``signum``; the seconds it took and the
    output."""
    log = work / f"{name}.log"
    proc = ega_in_session([*FIT, *DDP, f"--run_name={name}"], work, env, log)
    ranks = [proc.pid]
    try:
        wait_for_training(proc, work / f"lightning_logs/{name}/checkpoints/last.ckpt", log, step=after_step)
        time.sleep(delay)
        ranks += children_of(proc.pid)
        assert len(ranks) == 2 and proc.poll() is None, f"not training on 2 ranks: {ranks}\n{log.read_text()[-3000:]}"
        signalled = time.monotonic()
        os.killpg(proc.pid, signum)
        while any(alive(pid) for pid in ranks) and time.monotonic() - signalled < BOUND_S:
            time.sleep(0.05)
        took = time.monotonic() - signalled
        assert not any(alive(pid) for pid in ranks), f"hung: a rank alive {BOUND_S:.0f} s after signal {signum}"
        assert proc.wait(timeout=5) == 128 + signum, log.read_text()[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        kill_all(ranks)
        proc.wait()
    return took, log.read_text()


@pytest.mark.parametrize("busy", [0, 2], ids=["quiet", "beside-two-busy-loops"])
def test_sigterm_to_a_ddp_fits_group_stops_every_rank_143_and_the_resume_ends_bit_identical(
    busy, tmp_path, data_dir, uninterrupted
):
    env = env_for(data_dir)
    rng = random.Random(41 + busy)
    for trial in range(TRIALS):
        name = f"t{trial}"
        # the signal lands at a random checkpoint and a random moment after it, with 20 steps or more left: a time
        # alone (up to 1.5 s after step 4) outlasted the whole fit on an idle machine (27 ms a step), which then
        # finished and exited 0
        step, delay = rng.choice(range(4, STEPS - 16, 4)), rng.uniform(0, 0.2)
        with busy_loops(busy):
            took, out = sigterm_trial(tmp_path, name, env, delay=delay, after_step=step)
        assert took < BOUND_S
        assert out.count(STOP_LINE) == 2, out[-3000:]  # each rank took the stop path, after the same step
        assert "Traceback" not in out and "ended with status" not in out, out[-3000:]
        last = tmp_path / f"lightning_logs/{name}/checkpoints/last.ckpt"
        stopped_at = checkpoint_step(last)
        assert 4 <= stopped_at < STEPS and stopped_at % 4 == 0, stopped_at

        if busy and trial:  # beside the busy loops the race is the stop's: one resume there, five quiet ones
            continue
        # the resume runs without the busy loops: the race is the stop's, and the suite's time is short
        resumed = finish([*FIT, *DDP, f"--run_name={name}", "--ckpt_path=last"], tmp_path, env, tmp_path / "r.log")
        assert f"Restoring states from the checkpoint path at {last}" in resumed
        assert checkpoint_step(last) == STEPS
        assert scalars(tmp_path / f"lightning_logs/{name}", "val/loss") == uninterrupted, trial  # to the bit


def test_sigint_to_a_ddp_fits_group_stops_every_rank_130_and_keeps_the_run(tmp_path, data_dir):
    """Ctrl-C (SIGINT to the terminal's process group) under DDP: every rank stops after the same step, exits 130
    with the Ctrl-C line, and the run (it has a last.ckpt) is kept for --ckpt_path last."""
    took, out = sigterm_trial(tmp_path, "int", env_for(data_dir), delay=0.5, signum=signal.SIGINT)
    assert took < BOUND_S
    assert out.count("ega fit: interrupted (Ctrl-C).") == 2 and "The run in lightning_logs/int is kept" in out, out
    assert "Traceback" not in out and "ended with status" not in out, out[-3000:]
    assert 4 <= checkpoint_step(tmp_path / "lightning_logs/int/checkpoints/last.ckpt") < STEPS


def until_checkpointed(procs: list[subprocess.Popen[bytes]], last: Path, step: int = 4) -> None:
    """Until ``last`` holds step ``step`` or later, every process of ``procs`` still running (240 s at most)."""
    deadline = time.monotonic() + 240
    while not (last.is_file() and checkpoint_step(last) >= step):
        assert all(p.poll() is None for p in procs) and time.monotonic() < deadline
        time.sleep(0.05)


def sigterm_and_wait(procs: list[subprocess.Popen[bytes]], what: str) -> None:
    """SIGTERM to the process group of ``procs`` (the first one's), each waited for: one still running 30 s later
    fails the test as a hang of ``what``."""
    signalled = time.monotonic()
    os.killpg(procs[0].pid, signal.SIGTERM)
    try:
        for p in procs:
            p.wait(timeout=max(signalled + BOUND_S - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: {what} alive {BOUND_S:.0f} s after SIGTERM")


NODES = ["--trainer.num_nodes=2", "--trainer.devices=1", "--trainer.strategy=ddp", "--trainer.accelerator=cpu"]


def test_sigterm_to_two_torchrun_nodes_stops_both_workers_143_and_torchrun_exits_1(tmp_path, data_dir):
    """The two launchers in one process group get SIGTERM (a job script's `kill -TERM -$pgid`); each passes it on to
    its worker, which runs in a session of its own. Both workers stop at the same step, exit 143 within 30 s and
    keep last.ckpt; torchrun itself exits 1 whenever it was signalled, whatever its workers' status (torch
    2.13's elastic agent re-raises the signal as an exception), which docs/scale-out.md says."""
    env = env_for(data_dir)
    port, logs = free_port(), tmp_path / "logs"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1"]
    cmd += ["--master_addr=127.0.0.1", f"--master_port={port}"]
    args = ["-m", "ega_lightning.cli", *FIT, *NODES, "--run_name=tr"]
    launchers: list[subprocess.Popen[bytes]] = []
    try:
        for rank in (0, 1):
            # one process group of this session (setpgid cannot join a group of another session)
            group = {"process_group": 0 if rank == 0 else launchers[0].pid}
            node = [*cmd, f"--node_rank={rank}", f"--log-dir={logs / f'node{rank}'}", "--redirects=3", *args]
            with open(tmp_path / f"node{rank}.err", "w") as err:  # a file: a pipe could fill before the signal
                launchers.append(subprocess.Popen(node, cwd=tmp_path, env=env, stderr=err, **group))  # type: ignore[call-overload]
        last = tmp_path / "lightning_logs/tr/checkpoints/last.ckpt"
        until_checkpointed(launchers, last)
        workers = [pid for pid in processes_under(tmp_path) if pid not in {p.pid for p in launchers}]
        sigterm_and_wait(launchers, "a torchrun node")
        assert not any(alive(pid) for pid in workers)
    finally:
        kill_all([p.pid for p in launchers] + processes_under(tmp_path))
        for p in launchers:
            p.wait()
    for rank, launcher in enumerate(launchers):
        launcher_err = (tmp_path / f"node{rank}.err").read_text()
        assert launcher.returncode == 1, launcher_err[-3000:]
        assert re.search(r"SignalException: Process \d+ got signal: 15", launcher_err), launcher_err[-3000:]
        (stderr,) = (logs / f"node{rank}").glob("*/attempt_0/0/stderr.log")
        worker_err = stderr.read_text()
        assert STOP_LINE in worker_err and "Traceback" not in worker_err, worker_err[-3000:]
    assert 4 <= checkpoint_step(last) < STEPS


def test_sigterm_to_two_srun_tasks_stops_both_143(tmp_path, data_dir):
    """Two SLURM tasks (what srun sets for each, one process of the run each), SIGTERM to both, as slurmstepd sends
    it at the time limit: both stop at the same step and exit 143 within 30 s; last.ckpt is kept."""
    env = env_for(data_dir) | SLURM_TASK | {"SLURM_NTASKS": "2", "SLURM_NNODES": "2", "MASTER_PORT": str(free_port())}
    cmd = [sys.executable, "-m", "ega_lightning.cli", *FIT, *NODES, "--run_name=srun"]
    tasks: list[subprocess.Popen[bytes]] = []
    try:
        for rank in (0, 1):
            group = {"process_group": 0 if rank == 0 else tasks[0].pid}
            task_env = {**env, "SLURM_PROCID": str(rank), "SLURM_NODEID": str(rank)}
            with open(tmp_path / f"task{rank}.err", "w") as err:
                tasks.append(subprocess.Popen(cmd, cwd=tmp_path, env=task_env, stderr=err, **group))  # type: ignore[call-overload]
        last = tmp_path / "lightning_logs/srun/checkpoints/last.ckpt"
        until_checkpointed(tasks, last)
        sigterm_and_wait(tasks, "a task")
    finally:
        kill_all([t.pid for t in tasks])
        for t in tasks:
            t.wait()
    for rank, task in enumerate(tasks):
        stderr = (tmp_path / f"task{rank}.err").read_text()
        assert task.returncode == 143 and STOP_LINE in stderr and "Traceback" not in stderr, stderr[-3000:]
    assert 4 <= checkpoint_step(last) < STEPS


def test_a_sweep_whose_ddp_run_was_stopped_exits_143_and_rank_1_heard_it_from_rank_0(tmp_path, data_dir):
    """SIGTERM to the sweep only: it passes it on to its `ega fit` (rank 0); rank 1, never signalled, stops at the
    same step through the ranks' agreement, and the sweep exits 143 with no rank left behind."""
    configs = ["base.yaml", "size/cpu.yaml", "corpus/tinyshakespeare.yaml", "gate/linear.yaml"]
    spec = {"name": "ddp", "configs": configs, "args": [*TINY, *SCHEDULE, *DDP], "runs": [{"name": "a", "seeds": [1]}]}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    log = tmp_path / "sweep.out"
    sweep = ega_in_session(
        ["sweep", "spec.yaml", "--runs_dir", "runs", "--records_dir", "rec"], tmp_path, env_for(data_dir), log
    )
    try:
        wait_for_training(sweep, tmp_path / "runs/a-seed1/checkpoints/last.ckpt", log)
        ranks = processes_under(tmp_path)
        sweep.send_signal(signal.SIGTERM)
        status = sweep.wait(timeout=BOUND_S)
        assert not any(alive(pid) for pid in ranks if pid != sweep.pid)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: the sweep alive {BOUND_S:.0f} s after SIGTERM")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sweep.pid, signal.SIGKILL)
        kill_all(processes_under(tmp_path))
        sweep.wait()
    out = log.read_text()
    assert status == 143, out[-3000:]
    assert "[1/1] a-seed1: stopped by SIGTERM (143)" in out
    assert (tmp_path / "runs/a-seed1/sweep.log").read_text().count(STOP_LINE) == 2  # rank 0's and rank 1's
