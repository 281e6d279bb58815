"""SIGTERM to a 2-process DDP `ega fit`'s process group, as a scheduler sends it at a time limit: how often it hangs.

Each trial starts `ega fit --trainer.strategy=ddp --trainer.devices=2` on CPU (gloo on 127.0.0.1; Lightning's
launcher: rank 0 starts rank 1) at the test size in a fresh directory and a session of its own, waits for training
to have begun (last.ckpt at step >= 5), waits a random 0-3 s more, sends SIGTERM to the group, and records each
rank's exit status, the seconds to exit, a hang (a rank alive 30 s after the signal: the group is then killed),
whether each rank printed `ega`'s stop line, and the step of last.ckpt (loaded with torch.load):

    EGA_DATA_DIR=... PYTHONPATH=. python scripts/sigterm_trials.py --trials 5
    EGA_DATA_DIR=... PYTHONPATH=. python scripts/sigterm_trials.py --trials 5 --busy 2   # beside 2 busy loops

Rank 1's exit status is known when this script reaps it (it is a child subreaper, so an orphaned rank 1 is
its own); where rank 0 reaped it first, it shows as '?' and its stop line says how it ended.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--model.n_layer=2", "--model.n_head=2", "--model.n_embd=32", "--model.block_size=32"]
TINY += ["--data.batch_size=4", "--data.max_eval_windows=4", "--trainer.enable_progress_bar=false"]
DDP = ["--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp"]
STOP_LINE = "ega: stopped by SIGTERM"
HANG_S = 30.0
PR_SET_CHILD_SUBREAPER = 36


def children_of(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def checkpoint_step(path: Path) -> int | None:
    try:
        return int(torch.load(path, map_location="cpu", weights_only=False)["global_step"])
    except Exception:  # absent, or half-written: what the trial records
        return None


def trial(work: Path, max_steps: int, rng: random.Random) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    args = ["fit", *TINY, *DDP, f"--trainer.max_steps={max_steps}", "--trainer.val_check_interval=50"]
    args += ["--checkpoint_every_n_steps=5", "--run_name=t"]
    log = open(work / "out.log", "w")  # noqa: SIM115  (closed below)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ega_lightning.cli", *args],
        cwd=work,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    last = work / "lightning_logs/t/checkpoints/last.ckpt"
    deadline = time.monotonic() + 300
    while not (last.is_file() and (checkpoint_step(last) or 0) >= 5):
        if proc.poll() is not None or time.monotonic() > deadline:
            out = (work / "out.log").read_text()
            raise RuntimeError(f"the fit ended or stalled before it could be signalled:\n{out[-3000:]}")
        time.sleep(0.1)
    time.sleep(rng.uniform(0, 3))
    ranks = [proc.pid, *children_of(proc.pid)]
    status: dict[int, int | None] = dict.fromkeys(ranks)
    signalled = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)
    ended: dict[int, float] = {}
    while time.monotonic() - signalled < HANG_S and len(ended) < len(ranks):
        with_status = proc.poll()
        if with_status is not None and proc.pid not in ended:
            status[proc.pid], ended[proc.pid] = with_status, time.monotonic() - signalled
        while True:  # orphaned ranks, reparented to this subreaper
            try:
                pid, code = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in status and pid != proc.pid:
                status[pid] = os.waitstatus_to_exitcode(code)
        for pid in ranks[1:]:
            if pid not in ended and not alive(pid):
                ended[pid] = time.monotonic() - signalled
        time.sleep(0.05)
    hang = len(ended) < len(ranks)
    if hang:
        for pid in [proc.pid, *ranks[1:]]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
        status[proc.pid] = status[proc.pid] if status[proc.pid] is not None else proc.returncode
    with contextlib.suppress(ProcessLookupError):  # whatever of the group is left
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()
    out = (work / "out.log").read_text()
    return {
        "status": [status[pid] for pid in ranks],
        "seconds": [round(ended[pid], 1) if pid in ended else None for pid in ranks],
        "hang": hang,
        "stop_lines": out.count(STOP_LINE),
        "traceback": "Traceback" in out,
        "last_step": checkpoint_step(last),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--busy", type=int, default=0, help="busy loops beside the trials (bounded by timeout)")
    parser.add_argument("--max_steps", type=int, default=3000, help="enough that SIGTERM lands mid-training")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep each trial's directory (its out.log)")
    opts = parser.parse_args()
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1)
    rng = random.Random(opts.seed)
    busy = [
        subprocess.Popen(["timeout", "900", sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(opts.busy)
    ]
    hangs = 0
    try:
        for n in range(opts.trials):
            work = Path(tempfile.mkdtemp(prefix="sigterm-trial-"))
            result = trial(work, opts.max_steps, rng)
            hangs += bool(result["hang"])
            print(f"trial {n + 1}: {result}" + (f"  ({work})" if opts.keep else ""), flush=True)
            if not opts.keep:
                subprocess.run(["rm", "-rf", str(work)], check=False)
    finally:
        for loop in busy:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait()
    print(f"{hangs} of {opts.trials} trials hung (a rank alive {HANG_S:.0f} s after SIGTERM); busy loops: {opts.busy}")


if __name__ == "__main__":
    main()
