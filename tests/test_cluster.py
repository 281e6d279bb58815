"""Cluster-grade runs (issue 41) through the real CLI: Lightning's SLURM requeue checkpoint, and what the exit
codes of `ega fit` and `ega sweep` tell a job script."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from .helpers import REPO, SHORT, SLURM_TASK, TINY, free_port, processes_under, run_ega, scalars

pytestmark = pytest.mark.slow
# several processes of one run each (torchrun nodes, srun tasks, DDP ranks): one at a time, on one xdist worker
# (`pytest -n auto --dist loadgroup`), with tests/test_sigterm.py's
CLUSTER = pytest.mark.xdist_group("cluster")


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


# ----------------------------------------------------------------------------- exit codes a job script reads


def held(run_dir: Path):
    """The run directory's lock, held as another process training the run holds it (close to release)."""
    import fcntl

    run_dir.mkdir(parents=True, exist_ok=True)
    lock = open(run_dir / ".lock", "w")  # noqa: SIM115  (the caller closes it: that releases the lock)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return lock


def test_a_run_another_process_trains_is_busy_75_for_fit_and_sweep(tmp_path, data_dir):
    env = {"EGA_DATA_DIR": str(data_dir)}
    lock = held(tmp_path / "lightning_logs/taken")
    try:
        fit = run_ega(["fit", *TINY, *SHORT, "--run_name=taken"], tmp_path, env=env)
        sweep_args = ["sweep", str(REPO / "configs/sweeps/short.yaml"), "--index", "0", "--runs_dir", "runs"]
        (tmp_path / "runs/ts-none-seed1").mkdir(parents=True)
        with held(tmp_path / "runs/ts-none-seed1"):
            sweep = run_ega([*sweep_args, "--records_dir", "rec"], tmp_path, env=env)
    finally:
        lock.close()
    assert fit.returncode == 75 and "Traceback" not in fit.stderr, fit.stderr[-3000:]
    (line,) = [line for line in fit.stderr.splitlines() if line.startswith("ega fit: error: ")]  # one paragraph
    assert line.startswith("ega fit: error: the run directory") and "in use by another process" in line
    assert sorted(p.name for p in (tmp_path / "lightning_logs/taken").iterdir()) == [".lock"]
    assert sweep.returncode == 75, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    assert "skipped (running in another process" in sweep.stdout
    assert not (tmp_path / "runs/ts-none-seed1/sweep.log").exists()


def fit_child(pid: int) -> int:
    """The `ega fit` that the process ``pid`` started."""
    found = {}
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            found[int(child)] = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
    fits = [child for child, cmdline in found.items() if b"fit" in cmdline]
    assert len(fits) == 1, found
    return fits[0]


def wait_for_step(proc: subprocess.Popen, last: Path, step: int) -> None:
    deadline = time.time() + 240
    while not (last.is_file() and checkpoint_step(last) >= step):
        assert proc.poll() is None and time.time() < deadline, "the sweep ended before it could be stopped"
        time.sleep(0.1)


def test_a_sweep_stopped_by_sigterm_exits_143_whether_the_run_or_the_sweep_got_it(tmp_path, data_dir):
    slow = ["--trainer.max_steps=40", "--trainer.val_check_interval=20", "--checkpoint_every_n_steps=2"]
    slow += ["--trainer.callbacks+=tests.helpers.SleepEachStep", "--trainer.enable_progress_bar=false"]
    configs = ["base.yaml", "size/cpu.yaml", "corpus/tinyshakespeare.yaml", "gate/linear.yaml"]
    spec = {"name": "term", "configs": configs, "args": [*TINY, *slow], "runs": [{"name": "a", "seeds": [1, 2]}]}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = {**os.environ, "EGA_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "ega_lightning.cli", "sweep", "spec.yaml"]
    cmd += ["--runs_dir", "runs", "--records_dir", "rec"]
    last = tmp_path / "runs/a-seed1/checkpoints/last.ckpt"

    def sweep_stopped(by_the_sweep: bool, after_step: int) -> tuple[subprocess.Popen, str]:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        child = None
        try:
            wait_for_step(proc, last, after_step)
            child = fit_child(proc.pid)
            os.kill(proc.pid if by_the_sweep else child, signal.SIGTERM)
            out, _ = proc.communicate(timeout=180)
            orphan = Path(f"/proc/{child}").exists()  # the sweep waited for its run: reaped, gone
        finally:
            proc.kill()
            if child is not None and Path(f"/proc/{child}").exists():
                os.kill(child, signal.SIGKILL)  # a run the sweep left behind training
        assert not orphan
        return proc, out

    # the time limit reached the run only (SIGTERM to `ega fit`): the sweep says so, starts nothing more
    proc, out = sweep_stopped(by_the_sweep=False, after_step=2)
    assert proc.returncode == 143, out[-3000:]
    assert "[1/2] a-seed1: stopped by SIGTERM (143)" in out and "a-seed2" in out.splitlines()[-1]
    assert not (tmp_path / "runs/a-seed2").exists()
    stopped_at = checkpoint_step(last)
    assert stopped_at < 40

    # the next sweep resumes it; the time limit reaches the sweep only: it passes SIGTERM on to its run
    proc, out = sweep_stopped(by_the_sweep=True, after_step=stopped_at + 2)
    assert proc.returncode == 143, out[-3000:]
    assert "[1/2] a-seed1: resumed" in out and "[1/2] a-seed1: stopped by SIGTERM (143)" in out
    assert not (tmp_path / "runs/a-seed2").exists()
    assert stopped_at + 2 <= checkpoint_step(last) < 40
    assert (tmp_path / "runs/a-seed1/sweep.log").read_text().count("stopped by SIGTERM before the end") == 2


# ----------------------------------------------------------------------------- the world size of a resumed run


def test_a_checkpoint_from_before_the_world_size_record_reads_its_runs_config(tmp_path, data_dir):
    """A last.ckpt without ega's world size (written before it was recorded) has its run's: config.yaml's."""
    env = {"EGA_DATA_DIR": str(data_dir)}
    first = run_ega(["fit", *TINY, *SHORT, "--run_name=old"], tmp_path, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "lightning_logs/old"
    last = run_dir / "checkpoints/last.ckpt"
    ckpt = torch.load(last, map_location="cpu", weights_only=False)
    ckpt.pop("ega_world", None)
    torch.save(ckpt, last)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["trainer"]["devices"], config["trainer"]["num_nodes"] = 2, 2  # as if it ran on 2 nodes x 2 devices
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}

    resumed = run_ega(["fit", *TINY, *SHORT, "--run_name=old", "--ckpt_path=last"], tmp_path, env=env)
    assert resumed.returncode == 2 and "Traceback" not in resumed.stderr, resumed.stderr[-3000:]
    (line,) = [line for line in resumed.stderr.splitlines() if line.startswith("ega fit: error: ")]
    assert "4 processes (--trainer.num_nodes=2 --trainer.devices=2)" in line and "this command runs 1" in line
    assert "--allow_world_size_change=true" in line
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before  # nothing rewritten


# ----------------------------------------------------------------------------- two torchrun nodes on 127.0.0.1

NODES = ["--trainer.num_nodes=2", "--trainer.devices=1", "--trainer.strategy=ddp", "--trainer.accelerator=cpu"]


def torchrun_nodes(args: list[str], cwds: list[Path], logs: Path, timeout: int = 120) -> list[tuple[int, str]]:
    """``ega`` on two torchrun nodes of one worker each (node_rank 0 and 1, in ``cwds``), all waits bounded by
    ``timeout`` seconds: each node's worker exit status (as its launcher reports it; 0 when it reports none) and
    the worker's own stderr."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    port = free_port()
    procs = []
    for rank, cwd in enumerate(cwds):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1"]
        cmd += [f"--node_rank={rank}", "--master_addr=127.0.0.1", f"--master_port={port}"]
        cmd += [f"--log-dir={logs / f'node{rank}'}", "--redirects=3", "-m", "ega_lightning.cli", *args]
        procs.append(subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + timeout
    try:
        launched = [proc.communicate(timeout=max(deadline - time.monotonic(), 1)) for proc in procs]
    except subprocess.TimeoutExpired:
        pytest.fail(f"the two nodes did not end within {timeout} s")
    finally:
        for pid in [proc.pid for proc in procs] + [p for cwd in cwds for p in processes_under(cwd)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    results = []
    for rank, (_, launcher_err) in enumerate(launched):
        status = re.search(r"exitcode\s*:\s*(-?\d+)", launcher_err)
        (stderr,) = (logs / f"node{rank}").glob("*/attempt_0/0/stderr.log")
        results.append((int(status.group(1)) if status else 0, stderr.read_text()))
    return results


def errors_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("ega fit: error: ")]


# by its class, with an option (a class path alone is a name to the parser, which Lightning refuses)
BY_CLASS = [
    "--trainer.strategy=lightning.pytorch.strategies.DDPStrategy",
    "--trainer.strategy.process_group_backend=gloo",
]


@CLUSTER
@pytest.mark.parametrize("strategy", [["--trainer.strategy=ddp"], BY_CLASS], ids=["name", "class_path"])
def test_a_finished_run_refused_on_rank_0_stops_both_torchrun_nodes_with_its_paragraph(tmp_path, data_dir, strategy):
    """Rank 0 refuses the run directory (under its lock); the other node hears it once the process group forms,
    and both exit 2 with the same paragraph, not a DistNetworkError (torchrun) or a wait until killed (srun). DDP
    given by its class path agrees as by its name (it was built as Lightning's own DDP, which does not)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    first = run_ega(["fit", *TINY, *SHORT, "--run_name=r"], shared, env={"EGA_DATA_DIR": str(data_dir)})
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = shared / "lightning_logs/r"
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}

    started = time.monotonic()
    nodes = [*NODES[:2], *strategy, *NODES[3:]]
    nodes = torchrun_nodes(["fit", *TINY, *SHORT, *nodes, "--run_name=r"], [shared, shared], tmp_path / "logs")
    assert time.monotonic() - started < 120
    for status, stderr in nodes:
        assert status == 2 and "Traceback" not in stderr, stderr[-3000:]
        (line,) = errors_of(stderr)
        assert "already holds a run (with checkpoints/last.ckpt)" in line and "--ckpt_path last" in line
    assert errors_of(nodes[0][1]) == errors_of(nodes[1][1])
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before  # nothing written, nothing lost


@CLUSTER
def test_a_resume_on_node_local_disks_where_node_1_lacks_last_ckpt_stops_every_node(tmp_path, data_dir):
    """Node 0 has the run's last.ckpt, node 1 (its own working directory, as on a node-local disk) has none: both
    stop with one paragraph naming the checkpoint and the way out, not node 0 restoring it while node 1 starts
    afresh and both wait in mismatched collectives."""
    node0, node1 = tmp_path / "node0", tmp_path / "node1"
    node0.mkdir()
    node1.mkdir()
    first = run_ega(["fit", *TINY, *SHORT, "--run_name=r"], node0, env={"EGA_DATA_DIR": str(data_dir)})
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = node0 / "lightning_logs/r"
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}

    resume = ["fit", *TINY, *SHORT, *NODES, "--run_name=r", "--trainer.max_steps=4", "--ckpt_path=last"]
    # trained by one process, resumed by two: node 0 refuses that from the checkpoint node 1 lacks, and both say it
    nodes = torchrun_nodes(resume, [node0, node1], tmp_path / "logs-world")
    for status, stderr in nodes:
        assert status == 2 and "Traceback" not in stderr, stderr[-3000:]
        (line,) = errors_of(stderr)
        assert "trained by 1 processes" in line and "this command runs 2" in line, line

    resume += ["--allow_world_size_change=true"]
    started = time.monotonic()
    nodes = torchrun_nodes(resume, [node0, node1], tmp_path / "logs")
    assert time.monotonic() - started < 120
    for status, stderr in nodes:
        assert status == 2 and "Traceback" not in stderr, stderr[-3000:]
        (line,) = errors_of(stderr)
        assert "rank 1 (on " in line and "cannot read lightning_logs/r/checkpoints/last.ckpt" in line, line
        assert "filesystem that every node shares" in line and "copy the run directory lightning_logs/r" in line
    assert errors_of(nodes[0][1]) == errors_of(nodes[1][1])
    assert "Restored all states" not in nodes[0][1]
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    assert not [p for p in (node1 / "lightning_logs").rglob("*") if p.is_file() and p.name != ".lock"]


@CLUSTER
def test_a_finished_run_refused_on_task_0_stops_both_srun_tasks_with_its_paragraph(tmp_path, data_dir):
    """Two SLURM tasks (what srun sets for each), started together on a shared runs dir that holds a finished
    run: task 1 no longer waits at 'Initializing distributed' until killed; both exit 2 with the paragraph."""
    first = run_ega(["fit", *TINY, *SHORT, "--run_name=r"], tmp_path, env={"EGA_DATA_DIR": str(data_dir)})
    assert first.returncode == 0, first.stderr[-3000:]
    env = {**os.environ, "EGA_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    env |= {**SLURM_TASK, "SLURM_NTASKS": "2", "SLURM_NNODES": "2", "MASTER_PORT": str(free_port())}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "ega_lightning.cli", "fit", *TINY, *SHORT, *NODES, "--run_name=r"]
    tasks = [
        subprocess.Popen(
            cmd,
            cwd=tmp_path,
            env={**env, "SLURM_PROCID": str(rank), "SLURM_NODEID": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    deadline = time.monotonic() + 120
    try:
        ended = [task.communicate(timeout=max(deadline - time.monotonic(), 1)) for task in tasks]
    except subprocess.TimeoutExpired:
        pytest.fail("the two tasks did not end within 120 s")
    finally:
        for task in tasks:
            task.kill()
    for task, (_, stderr) in zip(tasks, ended, strict=True):
        assert task.returncode == 2 and "Traceback" not in stderr, stderr[-3000:]
        (line,) = errors_of(stderr)
        assert "already holds a run (with checkpoints/last.ckpt)" in line


@CLUSTER
def test_a_run_another_process_trains_is_busy_75_on_both_torchrun_nodes(tmp_path, data_dir):
    """Rank 0 cannot take the run directory's lock (another process holds it): both nodes exit 75 with its line,
    and the directory keeps only the lock."""
    shared = tmp_path / "shared"
    lock = held(shared / "lightning_logs/taken")
    try:
        nodes = torchrun_nodes(["fit", *TINY, *SHORT, *NODES, "--run_name=taken"], [shared, shared], tmp_path / "logs")
    finally:
        lock.close()
    for status, stderr in nodes:
        assert status == 75 and "Traceback" not in stderr, stderr[-3000:]
        (line,) = errors_of(stderr)
        assert "lightning_logs/taken is in use by another process" in line
    assert sorted(p.name for p in (shared / "lightning_logs/taken").iterdir()) == [".lock"]
