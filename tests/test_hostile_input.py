"""Hostile but fair input through the real `ega`: a leak at one position, the machine refusing writes, Ctrl-C.

The rows of plain user mistakes are in tests/test_user_errors.py; these need more than one command line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from ega_lightning.errors import MACHINE_REFUSED

from .helpers import REPO, SHORT, TINY, run_ega, write_gate_package

pytestmark = pytest.mark.slow

FAULTS = Path(__file__).resolve().parent / "faults"  # a sitecustomize that refuses writes (see its docstring)


def env_for(data_dir: Path, fault: str | None = None) -> dict[str, str]:
    paths = [str(FAULTS)] if fault else []
    env = {"EGA_DATA_DIR": str(data_dir), "PYTHONPATH": os.pathsep.join([*paths, str(REPO)])}
    return {**env, "EGA_TEST_FAULT": fault} if fault else env


def error_line(result: subprocess.CompletedProcess, command: str) -> str:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith(f"ega {command}: error: ")]
    return line


def test_check_gate_fails_a_gate_whose_leak_reaches_one_position(tmp_path):
    args = ["check-gate", "tests.hostile_gates.ReflectConvGate", "--only", "causal"]
    result = run_ega(args, tmp_path, env={"PYTHONPATH": str(REPO)})
    assert result.returncode == 1, result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if line.split()[1:2] == ["causal"]]
    assert line.startswith("FAIL") and "changing token 2 moved the log-gate" in line
    assert "flex_attention called without torch.compile" not in result.stderr  # the check's own business


# (id, fault, extra arguments, what the error names, whether the run is kept for a resume)
REFUSALS = [
    ("read-only runs dir", "EROFS:*/lightning_logs*", [], "Read-only file system", False),
    ("disk full, no last.ckpt yet", "ENOSPC:*/checkpoints/*", [], "No space left on device", False),
    ("disk full after a last.ckpt", "ENOSPC:*best.ckpt*", ["--checkpoint_every_n_steps=1"], "No space left", True),
]


@pytest.mark.parametrize(("fault", "extra", "says", "kept"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_a_refused_write_is_one_paragraph_with_its_own_status_and_blocks_nothing(
    fault, extra, says, kept, tmp_path, data_dir
):
    args = ["fit", *TINY, *SHORT, *extra, "--run_name=r"]
    result = run_ega(args, tmp_path, env=env_for(data_dir, fault))
    assert result.returncode == MACHINE_REFUSED, result.stderr[-3000:]
    line = error_line(result, "fit")
    assert "the machine refused to write" in line and says in line
    assert list(tmp_path.rglob("*.tmp")) == []
    if not kept:  # nothing of the run is left: the same command starts afresh
        assert sorted(tmp_path.iterdir()) == []
        return
    assert "is kept: resume it with the same command and --ckpt_path last" in line
    checkpoints = tmp_path / "lightning_logs/r/checkpoints"
    (checkpoints / ".best.ckpt.k1ll3d.tmp").write_bytes(b"half a checkpoint")  # as a kill during a save leaves
    resumed = run_ega([*args, "--ckpt_path=last"], tmp_path, env=env_for(data_dir))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best.ckpt", "last.ckpt"]


@pytest.mark.parametrize("container", [False, True], ids=["host", "container"])
def test_a_runs_folder_of_another_owner_is_one_paragraph_naming_the_owner_and_the_fix(container, tmp_path, data_dir):
    # issue 42: a bind-mounted runs folder not owned by the image's uid 1000 said only "Permission denied"
    if os.geteuid() != 0:
        pytest.skip("giving the runs folder to another owner takes root")
    runs = tmp_path / "lightning_logs"
    runs.mkdir()
    os.chown(runs, 4242, 4242)
    env = env_for(data_dir, f"EACCES:{runs}/*")  # what uid 4242's folder refuses anyone else; root is not refused
    env["EGA_CONTAINER"] = "1" if container else ""  # as docker/Dockerfile sets it
    result = run_ega(["fit", *TINY, *SHORT, "--run_name=r"], tmp_path, env=env)
    assert result.returncode == MACHINE_REFUSED, result.stderr[-3000:]
    line = error_line(result, "fit")
    assert f"{runs} belongs to uid 4242 (gid 4242) and ega runs as uid 0" in line
    if container:
        assert f"Mount a named volume there instead (docker run -v ega-runs:{runs} ...)" in line
        assert "or run the container as the folder's owner (docker run --user 4242:4242 ...)" in line
    else:
        assert "make it writable for uid 0 (chown or chmod), or write elsewhere" in line and "docker" not in line
    assert list(runs.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["lightning_logs"]


def test_ctrl_c_during_fit_exits_130_with_the_resume_hint(tmp_path, data_dir):
    slow = ["--trainer.callbacks+=tests.helpers.SleepEachStep", "--checkpoint_every_n_steps=1"]
    cmd = [sys.executable, "-m", "ega_lightning.cli", "fit", *TINY, "--trainer.max_steps=500", *slow, "--run_name=r"]
    env = {**os.environ, **env_for(data_dir)}
    # Ctrl-C as in a terminal's foreground (a shell's background job, pytest's perhaps, inherits it ignored)
    terminal = {"preexec_fn": lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)}
    run = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **terminal
    )
    last = tmp_path / "lightning_logs/r/checkpoints/last.ckpt"
    deadline = time.time() + 240
    while not last.is_file():
        assert run.poll() is None and time.time() < deadline, "the run ended before it could be interrupted"
        time.sleep(0.1)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=240)
    assert run.returncode == 130 and "Traceback" not in err, err[-3000:]
    assert f"ega fit: interrupted (Ctrl-C). The run in {Path('lightning_logs/r')} is kept" in err
    assert "--ckpt_path last" in err.splitlines()[-1]
    assert torch.load(last, weights_only=True)["global_step"] >= 1


def test_run_files_are_readable_as_the_umask_says(checkpoint):
    mask = os.umask(0)
    os.umask(mask)
    run_dir = checkpoint.parents[1]
    modes = {str(p.relative_to(run_dir)): p.stat().st_mode & 0o777 for p in run_dir.rglob("*") if p.is_file()}
    assert {"checkpoints/best.ckpt", "checkpoints/last.ckpt", "gate_summary.json", "config.yaml"} <= modes.keys()
    assert modes == dict.fromkeys(modes, 0o666 & ~mask)


def test_a_gate_that_turns_nan_is_named_and_no_checkpoint_is_claimed(tmp_path, data_dir):
    # NaN from the second training forward of the gate: step 1 of the run, before any checkpoint
    env = env_for(data_dir)
    args = ["fit", *TINY, *SHORT, "--model.gate=tests.hostile_gates.NanAfterGate", "--run_name=r"]
    result = run_ega(args, tmp_path, env=env)
    assert result.returncode == 1
    line = error_line(result, "fit")
    assert line.startswith("ega fit: error: Training stopped at step 1: the gradient norm is nan")
    assert "the gate's energy (`ega check-gate tests.hostile_gates.NanAfterGate` checks" in line
    assert "No checkpoint was written before this step." in line and "kept" not in line
    assert not (tmp_path / "lightning_logs/r/checkpoints").exists() or not any(
        (tmp_path / "lightning_logs/r/checkpoints").iterdir()
    )


def test_one_broken_entry_point_hides_no_other_gate(tmp_path):
    site = write_gate_package(
        tmp_path / "site", {"broken": "my_pkg.nothere:Gate1", "mine": "my_pkg.gates:AbsEnergyGate"}
    )
    result = run_ega(["gates"], tmp_path, env={"PYTHONPATH": os.pathsep.join([str(site), str(REPO)])})
    assert result.returncode == 0, result.stderr[-3000:]
    listed = {line.split()[0] for line in result.stdout.splitlines()[1:] if line.strip() and ":" not in line}
    assert {"none", "linear", "db2", "mine"} <= listed and "broken" not in listed
    (warning,) = [line for line in result.stderr.splitlines() if line.startswith("ega gates: warning: ")]
    assert "Gate 'broken' is an entry point of the package my-pkg 0.1" in warning


def test_sweep_checks_every_run_as_ega_fit_would_before_the_first_starts(tmp_path, data_dir):
    """Issue 40: an unknown gate, a mistyped flag, a gate module that is not there and max_steps 0 in a spec's args
    passed the spec check; each run then started and failed in turn, leaving sweep.log and .lock behind. Now
    `ega sweep` (and --dry_run) lists every problem at once, exit 2, and nothing runs."""
    tiny = [*TINY, *SHORT]
    spec = {
        "name": "hostile",
        "args": tiny,
        "runs": [
            {"name": "fine", "configs": ["gate/linear.yaml"], "seeds": [1, 2]},
            {"name": "unknown-gate", "configs": [], "seeds": [1, 2], "args": ["--model.gate=wavelet"]},
            {"name": "typo", "configs": [], "seeds": [1], "args": ["--model.gat=linear"]},
            {"name": "no-module", "configs": [], "seeds": [1], "args": ["--model.gate=no_such_module.MyGate"]},
            {"name": "no-steps", "configs": [], "seeds": [3], "args": ["--trainer.max_steps=0"]},
        ],
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    for dry in ([], ["--dry_run"]):
        result = run_ega(
            ["sweep", "spec.yaml", "--runs_dir=runs", "--records_dir=records", *dry],
            tmp_path,
            env={"EGA_DATA_DIR": str(data_dir)},
            timeout=120,
        )
        assert result.returncode == 2, result.stdout + result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
        lines = result.stderr.splitlines()
        assert lines[0] == "ega sweep: error: invalid sweep spec, nothing was run:"
        problems = lines[1:]
        assert len(problems) == 4, lines  # one per distinct (configs, args) that fails, every one at once
        assert (
            "(unknown-gate: unknown-gate-seed1, unknown-gate-seed2): ega fit would refuse it: Unknown gate 'wavelet'"
            in problems[0]
        )
        assert "(typo: typo-seed1)" in problems[1] and "--model.gat=linear" in problems[1]
        assert "(no-module: no-module-seed1)" in problems[2] and "no module 'no_such_module'" in problems[2]
        assert "(no-steps: no-steps-seed3)" in problems[3] and "trainer.max_steps is 0" in problems[3]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]  # no run directory, log, lock or record


def test_a_resume_that_would_mix_two_runs_under_one_name_is_refused_and_its_own_command_resumes(tmp_path, data_dir):
    """Issue 52: a resume with another batch size, seed, evaluation set, precision, a max_steps below its step, or
    another run's last.ckpt continued the run as asked, and config.yaml recorded only the second set-up."""
    env = env_for(data_dir)
    run = ["fit", *TINY, "--trainer.val_check_interval=2", "--trainer.enable_progress_bar=false"]
    for name, seed in (("a", 1), ("b", 2)):
        made = run_ega(
            [*run, "--trainer.max_steps=4", f"--seed_everything={seed}", f"--run_name={name}"], tmp_path, env
        )
        assert made.returncode == 0, made.stderr[-3000:]
    run_dir = tmp_path / "lightning_logs/a"
    resume = [*run, "--seed_everything=1", "--run_name=a", "--ckpt_path=last"]
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    for extra, says in [
        (["--trainer.max_steps=6", "--data.batch_size=8"], "data.batch_size: checkpoint 4, this command 8"),
        (["--trainer.max_steps=6", "--seed_everything=7"], "seed_everything: checkpoint 1, this command 7"),
        (["--trainer.max_steps=6", "--data.max_eval_windows=64"], "data.max_eval_windows: checkpoint 4, this command"),
        (["--trainer.max_steps=6", "--trainer.precision=bf16-mixed"], "trainer.precision: checkpoint '32-true', this"),
        (["--trainer.max_steps=2"], "is at step 4 (its last.ckpt) and trainer.max_steps is 2"),
    ]:
        refused = run_ega([*resume, *extra], tmp_path, env)
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert says in error_line(refused, "fit")
        assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before  # config.yaml too
    own = run_ega([*resume, "--trainer.max_steps=4"], tmp_path, env)  # the same command, another day
    assert own.returncode == 0 and "finished at step 4 of 4" in own.stdout, own.stderr[-3000:]
    longer = run_ega([*resume, "--trainer.max_steps=6"], tmp_path, env)  # a raised max_steps trains on
    assert longer.returncode == 0 and "finished at step 6 of 6" in longer.stdout, longer.stderr[-3000:]

    other = tmp_path / "lightning_logs/b/checkpoints/last.ckpt"  # a's checkpoint copied over b's
    other.write_bytes((run_dir / "checkpoints/last.ckpt").read_bytes())
    copied = run_ega(
        [*run, "--trainer.max_steps=8", "--seed_everything=2", "--run_name=b", "--ckpt_path=last"], tmp_path, env
    )
    assert copied.returncode == 2, copied.stderr[-3000:]
    line = error_line(copied, "fit")
    assert (
        "run_name: checkpoint 'a', this command 'b'" in line and "seed_everything: checkpoint 1, this command 2" in line
    )


def test_check_gate_passes_no_property_on_nan_and_fails_a_gate_that_reads_its_batch(tmp_path):
    """Issue 52: a gate whose outputs are all NaN passed causal and cached_equals_recompute (NaN is never larger than
    a tolerance), and one that centres its energy on the batch mean passed every property."""
    env = {"PYTHONPATH": str(REPO)}
    only = ["--only", "causal", "cached_equals_recompute"]
    nan = run_ega(["check-gate", "tests.hostile_gates.NanEnergyGate", *only], tmp_path, env=env)
    assert nan.returncode == 1, nan.stderr[-3000:]
    lines = {line.split()[1]: line for line in nan.stdout.splitlines() if line.startswith(("PASS", "FAIL"))}
    assert lines.keys() == {"causal", "cached_equals_recompute"}
    assert all(line.startswith("FAIL") and " NaN of " in line for line in lines.values()), nan.stdout

    batch = run_ega(["check-gate", "tests.hostile_gates.BatchStatsGate"], tmp_path, env=env)
    assert batch.returncode == 1, batch.stderr[-3000:]
    failed = [line for line in batch.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].split()[1] == "batch_independent", batch.stdout
    assert "moved sequence 0's log-gate" in failed[0] and "reads other sequences of its batch" in failed[0]
    assert run_ega(["check-gate", "linear", "--only", "batch_independent"], tmp_path, env=env).returncode == 0
