"""Scale-out through the real CLI in subprocesses: DDP on CPU (gloo) and bf16 mixed precision.

`strategy=ddp` re-executes the command line, so these run `ega` itself, never an in-process Trainer.
"""

import math
import shutil

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from .helpers import CONFIGS, TINY_MODEL, run_ega

pytestmark = pytest.mark.slow

COMPOSE = [
    *("-c", str(CONFIGS / "base.yaml"), "-c", str(CONFIGS / "size/cpu.yaml")),
    *("-c", str(CONFIGS / "corpus/tinyshakespeare.yaml"), "-c", str(CONFIGS / "gate/linear.yaml")),
]
TINY = [f"--model.{k}={v}" for k, v in TINY_MODEL.items()] + [
    "--data.batch_size=8",
    "--data.eval_batch_size=4",
    "--data.max_eval_windows=18",  # 5 evaluation batches: the two ranks get 3 and 2
    "--trainer.enable_progress_bar=false",
    "--trainer.accelerator=cpu",
]
DDP = ["--trainer.devices=2", "--trainer.strategy=ddp"]
COMPARED = ("val/loss", "train_eval/loss", "gap", "gate/frac_above_tau", "gate/mean_gate", "gate/tau_mean")


def last_scalars(run_dir) -> dict[str, float]:
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: events.Scalars(tag)[-1].value for tag in events.Tags()["scalars"]}


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory, data_dir):
    work = tmp_path_factory.mktemp("ddp")
    env = {"EGA_DATA_DIR": str(data_dir), "OMP_NUM_THREADS": "1"}
    args = ["fit", *COMPOSE, *TINY, *DDP, "--trainer.max_steps=6", "--trainer.val_check_interval=3", "--run_name=ddp"]
    result = run_ega(args, cwd=work, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return work, env


def test_ddp_fit_writes_checkpoint_and_gate_summary(ddp_run):
    work, _ = ddp_run
    run_dir = work / "lightning_logs/ddp"
    assert (run_dir / "checkpoints/last.ckpt").is_file() and (run_dir / "gate_summary.json").is_file()
    scalars = last_scalars(run_dir)
    assert all(math.isfinite(scalars[tag]) for tag in COMPARED)


def test_ddp_evaluation_matches_a_single_process_on_the_same_windows(ddp_run):
    work, env = ddp_run
    ckpt = str(work / "lightning_logs/ddp/checkpoints/last.ckpt")
    results = {}
    for name, devices in (("single", ["--trainer.devices=1"]), ("two", DDP)):
        args = ["validate", *COMPOSE, *TINY, *devices, f"--ckpt_path={ckpt}", f"--run_name=validate-{name}"]
        result = run_ega(args, cwd=work, env=env, timeout=600)
        assert result.returncode == 0, result.stderr[-4000:]
        results[name] = last_scalars(work / "lightning_logs" / f"validate-{name}" / "validate")  # its own run
    for tag in COMPARED:  # split over ranks, summed, divided: the same numbers up to float rounding
        assert results["two"][tag] == pytest.approx(results["single"][tag], abs=1e-5), tag


def test_bf16_mixed_precision_trains_on_cpu(tmp_path, data_dir):
    args = ["fit", *COMPOSE, *TINY, "--trainer.precision=bf16-mixed", "--trainer.max_steps=4"]
    args += ["--trainer.val_check_interval=2", "--run_name=bf16"]
    result = run_ega(args, cwd=tmp_path, env={"EGA_DATA_DIR": str(data_dir)}, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    scalars = last_scalars(tmp_path / "lightning_logs/bf16")
    assert all(math.isfinite(scalars[tag]) for tag in COMPARED)
    assert scalars["val/loss"] < math.log(65)
    assert "bf16" in (tmp_path / "lightning_logs/bf16/config.yaml").read_text()


def test_a_resume_with_another_world_size_is_refused_unless_allowed(ddp_run):
    """The 2-process run resumed by one process: refused before anything is built (no process group), with the
    way out; allowed by the flag, which its config.yaml keeps."""
    work, env = ddp_run
    run_dir = work / "resized/ddp"  # a copy under its own name: a checkpoint continues its own run only
    shutil.copytree(work / "lightning_logs/ddp", run_dir)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    resume = ["fit", *COMPOSE, *TINY, "--trainer.devices=1", "--trainer.max_steps=6", "--trainer.val_check_interval=3"]
    resume += ["--runs_dir=resized", "--run_name=ddp", "--ckpt_path=last"]

    refused = run_ega(resume, cwd=work, env=env, timeout=600)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-4000:]
    (line,) = [line for line in refused.stderr.splitlines() if line.startswith("ega fit: error: ")]
    assert "2 processes (--trainer.num_nodes=1 --trainer.devices=2)" in line and "this command runs 1" in line
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before  # config.yaml too

    allowed = run_ega([*resume, "--allow_world_size_change=true"], cwd=work, env=env, timeout=600)
    assert allowed.returncode == 0, allowed.stderr[-4000:]
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["allow_world_size_change"] is True and str(config["trainer"]["devices"]) == "1"
