"""Crash safety through the real CLI: SIGKILL mid-training, resume, same result; NaN stops cleanly."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml

from .helpers import CONFIGS, REPO, SHORT, TINY, TINY_MODEL, logged_steps, run_ega, scalars

pytestmark = pytest.mark.slow

MAX_STEPS = 16
ARGS = [
    "fit",
    *("-c", str(CONFIGS / "base.yaml"), "-c", str(CONFIGS / "size/cpu.yaml")),
    *("-c", str(CONFIGS / "corpus/tinyshakespeare.yaml"), "-c", str(CONFIGS / "gate/linear.yaml")),
    *[f"--model.{k}={v}" for k, v in TINY_MODEL.items()],
    "--model.dropout=0.1",  # dropout masks must repeat after the restart too
    "--data.batch_size=8",
    "--data.max_eval_windows=16",
    f"--trainer.max_steps={MAX_STEPS}",
    "--trainer.val_check_interval=8",
    "--trainer.log_every_n_steps=1",
    "--trainer.enable_progress_bar=false",
]


def ega(args: list[str], cwd, env) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "ega_lightning.cli", *args]
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def checkpoint_step(path) -> int:
    return torch.load(path, map_location="cpu", weights_only=False)["global_step"]


def wait_for_checkpoint(run: subprocess.Popen, last, step: int) -> None:
    """Until ``last`` holds step ``step`` or later, while ``run`` is still training."""
    deadline = time.time() + 240
    while not (last.is_file() and checkpoint_step(last) >= step):
        assert run.poll() is None and time.time() < deadline, "the run ended before it could be stopped"
        time.sleep(0.1)


@pytest.fixture
def env(data_dir):
    return {**os.environ, "EGA_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def test_sigkill_then_resume_ends_exactly_like_an_uninterrupted_run(tmp_path, env):
    every = ["--checkpoint_every_n_steps=2"]
    full = ega([*ARGS, *every, "--run_name=full"], tmp_path, env)
    assert full.wait(timeout=300) == 0, full.stderr.read()[-3000:]

    slow = ["--trainer.callbacks+=tests.helpers.SleepEachStep"]
    killed = ega([*ARGS, *every, *slow, "--run_name=killed"], tmp_path, env)
    last = tmp_path / "lightning_logs/killed/checkpoints/last.ckpt"
    wait_for_checkpoint(killed, last, 6)
    killed.send_signal(signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL
    stopped_at = checkpoint_step(last)
    assert 6 <= stopped_at < MAX_STEPS

    resumed = ega([*ARGS, *every, "--run_name=killed", "--ckpt_path=last"], tmp_path, env)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]
    assert f"Restoring states from the checkpoint path at {last}" in err + out

    full_dir, killed_dir = tmp_path / "lightning_logs/full", tmp_path / "lightning_logs/killed"
    assert checkpoint_step(killed_dir / "checkpoints/last.ckpt") == MAX_STEPS
    full_train, resumed_train = scalars(full_dir, "train/loss"), scalars(killed_dir, "train/loss")
    for step in range(stopped_at, MAX_STEPS):  # same batches and dropout masks from the resumed step on
        assert resumed_train[step] == pytest.approx(full_train[step], abs=1e-6), step
    full_val, resumed_val = scalars(full_dir, "val/loss"), scalars(killed_dir, "val/loss")
    assert list(full_val) == list(resumed_val) == [7, 15]
    assert resumed_val[15] == pytest.approx(full_val[15], abs=1e-6)

    # one segment per fit that trained the run, the resumed one from the checkpoint's step, each naming its CPU kind
    from ega_lightning.runs import read_segments

    assert [s["from_step"] for s in read_segments(full_dir)] == [0]
    segments = read_segments(killed_dir)
    assert [(s["from_step"], s["to_step"]) for s in segments] == [(0, stopped_at), (stopped_at, None)]
    assert all(s["cpu"]["capability"] == torch.backends.cpu.get_cpu_capability() for s in segments)


def summary(run_dir) -> dict:
    return json.loads((run_dir / "gate_summary.json").read_text())


def test_a_kill_right_after_a_checkpoint_loses_no_validation(tmp_path, env):
    # last.ckpt every 4 steps, validation every 8: the checkpoint of step 8 is the one a validation follows
    every = ["--checkpoint_every_n_steps=4"]
    full = ega([*ARGS, *every, "--run_name=full"], tmp_path, env)
    assert full.wait(timeout=300) == 0, full.stderr.read()[-3000:]
    kill = ["--trainer.callbacks+=tests.helpers.KillAfterSave", "--trainer.callbacks.step=8"]
    killed = ega([*ARGS, *every, *kill, "--run_name=killed"], tmp_path, env)
    killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL
    full_dir, killed_dir = tmp_path / "lightning_logs/full", tmp_path / "lightning_logs/killed"
    assert checkpoint_step(killed_dir / "checkpoints/last.ckpt") == 8

    resumed = ega([*ARGS, *every, "--run_name=killed", "--ckpt_path=last"], tmp_path, env)
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]

    full_val, resumed_val = scalars(full_dir, "val/loss"), scalars(killed_dir, "val/loss")
    assert list(resumed_val) == list(full_val) == [7, 15]  # every validation, the one after the checkpoint too
    assert list(resumed_val.values()) == pytest.approx(list(full_val.values()), abs=1e-6)
    best = [
        torch.load(d / "checkpoints/best.ckpt", map_location="cpu", weights_only=False) for d in (full_dir, killed_dir)
    ]
    assert best[0]["global_step"] == best[1]["global_step"]
    for name, value in best[0]["state_dict"].items():
        assert torch.allclose(best[1]["state_dict"][name], value, atol=1e-6), name
    full_tau, resumed_tau = summary(full_dir), summary(killed_dir)
    assert [h["step"] for h in resumed_tau["history"]] == [h["step"] for h in full_tau["history"]] == [8, 16]
    for a, b in zip(full_tau["history"], resumed_tau["history"], strict=True):
        assert b["gate/tau_mean"] == pytest.approx(a["gate/tau_mean"], abs=1e-6)
    assert resumed_tau["converged"] == full_tau["converged"]


def test_what_a_killed_run_logged_after_its_last_checkpoint_is_not_shown_twice(tmp_path, env):
    # killed after the validation of step 8 reached the event file, before the last.ckpt of step 8 (of step 4
    # on disk): the resumed run validates step 8 again, and TensorBoard keeps that one only
    every = ["--checkpoint_every_n_steps=4"]
    kill = ["--trainer.callbacks+=tests.helpers.KillAfterSave", "--trainer.callbacks.step=8"]
    kill += ["--trainer.callbacks.name=best.ckpt", "--trainer.callbacks.flush_logs=true"]
    killed = ega([*ARGS, *every, *kill, "--run_name=r"], tmp_path, env)
    killed.communicate(timeout=300)
    run_dir = tmp_path / "lightning_logs/r"
    assert killed.returncode == -signal.SIGKILL and checkpoint_step(run_dir / "checkpoints/last.ckpt") == 4
    assert logged_steps(run_dir, "val/loss") == [7]  # on disk before the kill

    resumed = ega([*ARGS, *every, "--run_name=r", "--ckpt_path=last"], tmp_path, env)
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]
    assert logged_steps(run_dir, "val/loss") == [7, 15]
    assert logged_steps(run_dir, "train/loss") == list(range(MAX_STEPS))


def test_sigterm_exits_nonzero_so_a_cut_short_run_is_not_taken_for_finished(tmp_path, env):
    # Lightning alone exits 0 on SIGTERM: `ega sweep` would then mark the run DONE
    slow = ["--trainer.callbacks+=tests.helpers.SleepEachStep", "--checkpoint_every_n_steps=2"]
    run = ega([*ARGS, *slow, "--run_name=term"], tmp_path, env)
    last = tmp_path / "lightning_logs/term/checkpoints/last.ckpt"
    wait_for_checkpoint(run, last, 2)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "stopped by SIGTERM" in err and "--ckpt_path last" in err
    assert checkpoint_step(last) < MAX_STEPS


def test_nan_stops_training_naming_step_and_cause_and_keeps_last_good_checkpoint(tmp_path, env):
    args = [*ARGS, "--checkpoint_every_n_steps=2", "--run_name=nan"]
    run = ega([*args, "--trainer.callbacks+=tests.helpers.PoisonLossAt", "--trainer.callbacks.step=5"], tmp_path, env)
    _, err = run.communicate(timeout=300)
    assert run.returncode != 0
    assert "Training stopped at step 5" in err and "gradient norm is nan" in err and "--model.lr" in err
    last = tmp_path / "lightning_logs/nan/checkpoints/last.ckpt"
    assert checkpoint_step(last) == 4  # the last good one, not overwritten by the failing state
    state = torch.load(last, map_location="cpu", weights_only=False)["state_dict"]
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())
    assert not list(last.parent.glob("*.tmp"))  # no half-written file left behind


def image_steps(run_dir, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"images": 0})
    events.Reload()
    return [e.step for e in events.Images(tag)] if tag in events.Tags()["images"] else []


def test_a_resumed_run_keeps_its_gate_maps(tmp_path, env):
    """Issue 41, item 6: killed right after the step-8 checkpoint (a validation's), the run resumes there and
    TensorBoard drops what was logged from step 8 on; the gate maps (layer 0, 1) of the uninterrupted run are all
    there after the resume, and the first validation of the resumed process draws one more."""
    every = ["--checkpoint_every_n_steps=8", "--trainer.val_check_interval=4"]
    full = ega([*ARGS, *every, "--run_name=full"], tmp_path, env)
    assert full.wait(timeout=300) == 0, full.stderr.read()[-3000:]
    kill = ["--trainer.callbacks+=tests.helpers.KillAfterSave", "--trainer.callbacks.step=8"]
    killed = ega([*ARGS, *every, *kill, "--run_name=killed"], tmp_path, env)
    killed.communicate(timeout=300)
    full_dir, killed_dir = tmp_path / "lightning_logs/full", tmp_path / "lightning_logs/killed"
    assert killed.returncode == -signal.SIGKILL and checkpoint_step(killed_dir / "checkpoints/last.ckpt") == 8

    resumed = ega([*ARGS, *every, "--run_name=killed", "--ckpt_path=last"], tmp_path, env)
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]
    for layer in range(TINY_MODEL["n_layer"]):
        tag = f"gate/map/layer_{layer}"
        assert image_steps(full_dir, tag) == [3, 15]  # the first validation's and the last's
        assert image_steps(killed_dir, tag) == [3, 11, 15]  # and the resumed process's first validation's


def test_a_moved_run_resumes_and_its_summary_names_its_own_best_checkpoint(tmp_path, checkpoint, data_dir):
    """A run directory copied elsewhere resumes there; with no validation after the resume, Lightning holds the old
    directory's best path without its score, and the summary names the run's own best.ckpt (it raised TypeError)."""
    moved = tmp_path / "lightning_logs" / "tiny"
    shutil.copytree(checkpoint.parent.parent, moved)
    args = ["fit", *TINY, *SHORT, "--model.gate=db2", "--run_name=tiny", "--trainer.max_steps=3", "--ckpt_path=last"]
    result = run_ega(args, tmp_path, env={"EGA_DATA_DIR": str(data_dir)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert torch.load(moved / "checkpoints/last.ckpt", weights_only=True)["global_step"] == 3
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("  best checkpoint  ")]
    best_step = torch.load(moved / "checkpoints/best.ckpt", weights_only=True)["global_step"]
    assert line.split()[2:5] == ["lightning_logs/tiny/checkpoints/best.ckpt", "(at", "step"]
    assert line.split()[5] == f"{best_step},"


def test_a_resume_with_more_steps_follows_the_schedule_to_the_new_end(tmp_path, data_dir):
    """trainer.max_steps raised on a resume is recorded and applied from the first resumed step: the learning rate
    of every step is the schedule's to the new end (the checkpoint holds the rate its last step set for the old)."""
    lr, min_lr = 1e-3, 1e-4
    run = ["fit", *TINY, "--model.warmup_steps=1", f"--model.lr={lr}", f"--model.min_lr={min_lr}", "--run_name=r"]
    run += ["--trainer.val_check_interval=2", "--trainer.log_every_n_steps=1", "--trainer.enable_progress_bar=false"]
    env = {"EGA_DATA_DIR": str(data_dir)}
    first = run_ega([*run, "--trainer.max_steps=2"], tmp_path, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = run_ega([*run, "--trainer.max_steps=6", "--ckpt_path=last"], tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    run_dir = tmp_path / "lightning_logs/r"

    def rate(step: int, max_steps: int) -> float:  # CharLM's schedule: warm-up of one step, then cosine to min_lr
        progress = min(1.0, (step - 1) / (max_steps - 1))
        return lr if step < 1 else min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))

    logged = [value for _, value in sorted(scalars(run_dir, "train/lr").items())]
    expected = [rate(0, 2), rate(1, 2), *(rate(step, 6) for step in range(2, 6))]
    assert logged == pytest.approx(expected, rel=1e-6)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["trainer"]["max_steps"] == 6
