"""One run per directory: the lock, checkpoints of other runs, runs that cannot resume, and a bare `ega fit`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ega_lightning import runs
from ega_lightning.callbacks.board import HPARAMS_SUFFIX
from ega_lightning.experiments import rundirs, spec

from .helpers import REPO, TINY_MODEL, run_ega, scalars

TINY = [*(f"--model.{k}={v}" for k, v in TINY_MODEL.items()), "--data.batch_size=4", "--data.max_eval_windows=4"]
SHORT = ["--trainer.max_steps=4", "--trainer.val_check_interval=2", "--trainer.enable_progress_bar=false"]


def fit(cwd: Path, data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return run_ega(["fit", *TINY, *SHORT, *args], cwd, env={"EGA_DATA_DIR": str(data_dir)})


def files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def event_files(run_dir: Path) -> tuple[int, int]:
    """(training event files, HPARAMS event files) directly in ``run_dir``."""
    names = [p.name for p in run_dir.glob("events.out.tfevents.*")]
    hparams = sum(name.endswith(HPARAMS_SUFFIX) for name in names)
    return len(names) - hparams, hparams


def error_of(result: subprocess.CompletedProcess, code: int = 2) -> str:
    assert result.returncode == code and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("ega fit: error: ")]
    return line


def test_fit_state_is_decided_by_last_ckpt_and_outputs(tmp_path):
    run = tmp_path / "run"
    assert runs.fit_state(run) is runs.FitState.FRESH
    run.mkdir()
    (run / runs.LOCK_FILE).touch()
    (run / "sweep.log").write_text("started\n")
    assert runs.fit_state(run) is runs.FitState.FRESH  # a lock and a sweep's log are no run yet
    (run / "checkpoints").mkdir()
    (run / "checkpoints/best.ckpt").write_bytes(b"x")
    assert runs.fit_state(run) is runs.FitState.STALE
    assert rundirs.run_state(run) == "stale"
    (run / runs.LAST).write_bytes(b"x")
    assert runs.fit_state(run) is runs.FitState.RESUME
    runs.clear_outputs(run)
    assert sorted(p.name for p in run.iterdir()) == [runs.LOCK_FILE, "sweep.log"]


def test_the_lock_is_one_per_directory_and_passes_to_a_child(tmp_path, monkeypatch):
    run = tmp_path / "run"
    held = runs.try_lock(run)
    assert held is not None
    assert runs.try_lock(run) is None  # a second open of the same lock file: refused
    with pytest.raises(runs.RunBusy, match="in use by another process"):
        runs.RunClaim().claim(run, fit=True)
    monkeypatch.setenv(runs.LOCK_FD_ENV, str(held.fileno()))
    assert runs.try_lock(run) is not None  # the inherited, already locked file (as `ega sweep` hands it over)
    held.close()


def test_sweep_starts_a_run_that_cannot_resume_over_and_resumes_one_that_can(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("name: s\nruns:\n  - {name: a, configs: [], seeds: [1]}\n")
    (run,) = spec.load_spec(path).runs
    assert "--overwrite=true" in spec.fit_command(run, tmp_path, resume=False, overwrite=True)
    assert spec.fit_command(run, tmp_path, resume=True)[-2:] == ["--ckpt_path", "last"]
    assert spec.ran_with(spec.fit_command(run, tmp_path, resume=False, overwrite=True)) == ([], [])


@pytest.mark.slow
def test_two_fits_of_one_run_cannot_both_write_it(tmp_path, data_dir):
    env = {**os.environ, "EGA_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO)}
    go = tmp_path / "go"
    paused = ["--trainer.callbacks+=tests.helpers.WaitForFile", f"--trainer.callbacks.path={go}", "--run_name=same"]
    cmd = [sys.executable, "-m", "ega_lightning.cli", "fit", *TINY, *SHORT, *paused]
    first = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    run_dir = tmp_path / "lightning_logs/same"
    deadline = time.time() + 240
    while not (run_dir / "config.yaml").is_file():  # the first fit is training (and holds at step 1)
        assert first.poll() is None and time.time() < deadline
        time.sleep(0.1)
    second = run_ega(["fit", *TINY, *SHORT, "--run_name=same"], tmp_path, env={"EGA_DATA_DIR": str(data_dir)})
    assert "is in use by another process" in error_of(second, code=75)  # busy, not the user's mistake
    go.touch()
    assert first.wait(timeout=300) == 0, first.stderr.read()[-3000:]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert event_files(run_dir) == (1, 1)  # the second fit wrote no events of its own
    assert list(scalars(run_dir, "val/loss")) == [1, 3]  # each validation once


@pytest.mark.slow
def test_a_checkpoint_of_another_run_never_lands_in_an_existing_one(tmp_path, data_dir):
    assert fit(tmp_path, data_dir, "--run_name=lin").returncode == 0
    multi = ["--model.gate=multiscale", "--model.gate_options={scales: 2}", "--run_name=multi"]
    assert fit(tmp_path, data_dir, *multi).returncode == 0
    lin, other = tmp_path / "lightning_logs/lin", tmp_path / "lightning_logs/multi/checkpoints/last.ckpt"
    before = files(lin)
    result = fit(
        tmp_path,
        data_dir,
        "--run_name=lin",
        "--model.gate=multiscale",
        "--model.gate_options={scales: 2}",
        "--trainer.max_steps=6",  # steps left to train after the checkpoint's 4
        f"--ckpt_path={other}",
        "--trainer.max_steps=8",  # past the checkpoint's step 4: continuing it would train
    )
    assert "already holds a run" in error_of(result) and "would mix two runs" in error_of(result)
    assert files(lin) == before
    # the checkpoint decides the model: a command asking for another gate is refused, naming both
    result = fit(tmp_path, data_dir, "--run_name=new", f"--ckpt_path={other}")
    assert "gate: checkpoint 'multiscale', this command 'linear'" in error_of(result)
    assert not (tmp_path / "lightning_logs/new").exists()
    result = fit(tmp_path, data_dir, "--run_name=lin", "--model.gate=none", "--ckpt_path=last")
    assert "gate: checkpoint 'linear', this command 'none'" in error_of(result)
    assert files(lin) == before


@pytest.mark.slow
def test_a_continued_checkpoint_that_ends_before_validating_names_no_best_checkpoint(tmp_path, data_dir):
    assert fit(tmp_path, data_dir, "--run_name=first").returncode == 0
    other = tmp_path / "lightning_logs/first/checkpoints/last.ckpt"  # at step 4, its best.ckpt beside it
    result = fit(tmp_path, data_dir, "--run_name=cont", f"--ckpt_path={other}", "--trainer.max_steps=5")
    assert result.returncode == 0, result.stderr[-3000:]
    (best,) = [line.split(maxsplit=2)[2] for line in result.stdout.splitlines() if line.startswith("  best checkpoint")]
    assert best.startswith("none: no validation ran")  # not the other run's best.ckpt, which this run never wrote
    assert (tmp_path / "lightning_logs/cont" / runs.LAST).is_file()  # and it can be resumed


@pytest.mark.slow
def test_fast_dev_run_says_it_wrote_nothing_and_leaves_nothing_to_block_the_next_fit(tmp_path, data_dir):
    result = fit(tmp_path, data_dir, "--trainer.fast_dev_run=true")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = result.stdout.strip().splitlines()
    assert summary[0].startswith("ega fit: fast_dev_run ran 1 training step")  # not "finished at step 1 of 1"
    assert not any("--ckpt_path last" in line or "best checkpoint" in line for line in summary)  # nothing to resume
    assert not (tmp_path / "lightning_logs").exists()  # as Lightning's fast_dev_run: no checkpoint, no logs
    result = fit(tmp_path, data_dir)  # the real run starts where the check ran
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.slow
def test_fast_dev_run_of_an_evaluation_keeps_the_last_one_and_claims_no_tensorboard_run(tmp_path, data_dir, checkpoint):
    evaluate = ["validate", f"--ckpt_path={checkpoint}", "--run_name=ev", "--data.max_eval_windows=4"]
    env = {"EGA_DATA_DIR": str(data_dir)}
    assert run_ega(evaluate, tmp_path, env=env).returncode == 0
    before = files(tmp_path / "lightning_logs/ev")
    result = run_ega([*evaluate, "--trainer.fast_dev_run=true"], tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "fast_dev_run" in result.stdout and "TensorBoard" not in result.stdout  # it logged nothing
    assert files(tmp_path / "lightning_logs/ev") == before  # the evaluation it did not replace is kept


@pytest.mark.slow
def test_a_run_stopped_before_its_first_last_ckpt_is_started_over_by_one_flag(tmp_path, data_dir):
    # never a last.ckpt (as when killed between the first best.ckpt and the first last.ckpt)
    assert fit(tmp_path, data_dir, "--run_name=r", "--checkpoint_every_n_steps=0").returncode == 0
    run_dir = tmp_path / "lightning_logs/r"
    assert (run_dir / "checkpoints/best.ckpt").is_file() and not (run_dir / runs.LAST).exists()
    before = files(run_dir)
    for args in ([], ["--ckpt_path=last"]):  # both say the same thing: start over with --overwrite
        assert "--overwrite=true" in error_of(fit(tmp_path, data_dir, "--run_name=r", *args))  # runs as given
        assert files(run_dir) == before
    # a mistake beside --overwrite=true is refused before the old run is deleted
    typo = fit(tmp_path, data_dir, "--run_name=r", "--overwrite=true", "--model.n_embd=31")
    assert "must be divisible by model.n_head" in error_of(typo)
    assert files(run_dir) == before
    result = fit(tmp_path, data_dir, "--run_name=r", "--overwrite=true")
    assert result.returncode == 0, result.stderr[-3000:]
    assert event_files(run_dir) == (1, 1)  # the first attempt's events are gone
    assert torch.load(run_dir / runs.LAST, weights_only=True)["global_step"] == 4


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without the accelerator asked for")
def test_an_accelerator_the_machine_lacks_is_one_line_and_leaves_no_run(tmp_path, data_dir):
    result = fit(tmp_path, data_dir, "--run_name=r", "--trainer.accelerator=gpu")
    assert "No supported gpu backend found" in error_of(result)
    assert not (tmp_path / "lightning_logs" / "r").exists()


@pytest.mark.slow
def test_bare_ega_fit_is_the_full_recommended_run(tmp_path, data_dir):
    # no -c at all: EGA-1 on TinyShakespeare at the cpu size with every callback (shrunk here for time)
    tiny = ["--model.n_layer=1", "--model.n_embd=32", "--data.max_eval_windows=4", *SHORT]
    result = run_ega(["fit", *tiny], tmp_path, env={"EGA_DATA_DIR": str(data_dir)})
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "lightning_logs").iterdir()
    assert run_dir.name == "tinyshakespeare-linear-1x4x32-T128-seed1337"
    assert {"best.ckpt", "last.ckpt"} <= {p.name for p in (run_dir / "checkpoints").iterdir()}
    assert (run_dir / "gate_summary.json").is_file()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    tags = events.Tags()
    assert {"gate/tau_mean", "gate/frac_above_tau", "gap", "train_eval/loss", "val/loss"} <= set(tags["scalars"])
    assert "gate/map/layer_0" in tags["images"]  # one image per layer, its heads side by side


@pytest.mark.slow
def test_a_config_is_named_by_its_packaged_path_from_anywhere(tmp_path, data_dir):
    result = run_ega(["fit", "-c", "gate/none.yaml", "-c", "configs/size/cpu.yaml", *TINY, "--print_config"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "gate: none" in result.stdout and "max_steps: 1500" in result.stdout


def test_the_python_api_releases_its_run_directory_when_the_command_ends(tmp_path, data_dir, monkeypatch):
    """EgaCLI without a caller's claim owns its claim: a notebook that fits and then resumes the same run in one
    process is not told that another process holds the run directory."""
    from ega_lightning import CharDataModule, CharLM
    from ega_lightning.commands.lightning_cli import EgaCLI

    from .helpers import SHORT, TINY

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["ega"])
    common = ["--data.data_dir", str(data_dir), *TINY, *SHORT, "--seed_everything=1", "--run_name=nb"]
    first = EgaCLI(CharLM, CharDataModule, auto_configure_optimizers=False, args=["fit", *common])
    assert first.trainer.global_step == 2
    again = ["fit", *common, "--trainer.max_steps=4", "--ckpt_path=last"]
    second = EgaCLI(CharLM, CharDataModule, auto_configure_optimizers=False, args=again)
    assert second.trainer.global_step == 4
    assert runs.try_lock(tmp_path / "lightning_logs" / "nb") is not None  # and nothing holds it afterwards
