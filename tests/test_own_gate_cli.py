"""A user's own gate through the real `ega` command, from a directory holding only my_gates.py."""

import json
import os
import shutil

import pytest
import torch
import yaml

from ega_lightning.conformance import ENERGY, PROPERTIES

from .helpers import CONFIGS, REPO, run_ega, write_gate_package

pytestmark = pytest.mark.slow

TINY = "--model.n_layer=2 --model.n_head=2 --model.n_embd=32 --model.block_size=32 --data.batch_size=4"
TINY += " --data.max_eval_windows=4 --trainer.max_steps=4 --trainer.val_check_interval=2"
TINY += " --trainer.enable_progress_bar=false"
CONFIG_FILES = [CONFIGS / "base.yaml", CONFIGS / "size/cpu.yaml", CONFIGS / "corpus/tinyshakespeare.yaml"]
COMPOSE = [arg for path in CONFIG_FILES for arg in ("-c", str(path))]


@pytest.fixture(scope="module")
def own_gate_run(tmp_path_factory, data_dir):
    work = tmp_path_factory.mktemp("own_gate")
    shutil.copy(REPO / "examples" / "my_gates.py", work)
    args = ["fit", *COMPOSE, *TINY.split(), "--model.gate=my_gates.AbsEnergyGate", "--run_name=abs"]
    result = run_ega(args, cwd=work, env={"EGA_DATA_DIR": str(data_dir)})
    assert result.returncode == 0, result.stderr[-4000:]
    return work, work / "lightning_logs" / "abs"


def test_fit_trains_the_gate_and_records_its_import_path(own_gate_run):
    _, run_dir = own_gate_run
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["model"]["gate"] == "my_gates.AbsEnergyGate"
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert ckpt["hyper_parameters"]["gate"] == "my_gates.AbsEnergyGate" and ckpt["global_step"] == 4
    weights = ckpt["state_dict"]["model.blocks.1.attn.gate.u.weight"]  # AbsEnergyGate's own parameter
    assert weights.shape == (2, 32) and torch.isfinite(weights).all()


def test_validate_and_generate_from_its_checkpoint_in_new_processes(own_gate_run, data_dir):
    work, run_dir = own_gate_run
    best = str(run_dir / "checkpoints" / "best.ckpt")
    env = {"EGA_DATA_DIR": str(data_dir)}
    validated = run_ega(["validate", "--ckpt_path", best, "--data.max_eval_windows=4"], cwd=work, env=env)
    assert validated.returncode == 0, validated.stderr[-4000:]
    assert "val/loss" in validated.stdout
    args = ["generate", "--ckpt_path", best, "--prompt", "ROMEO:", "--max_new_tokens", "20", "--temperature", "0"]
    sampled = run_ega(args, cwd=work)
    assert sampled.returncode == 0, sampled.stderr[-4000:]
    assert sampled.stdout.startswith("ROMEO:") and len(sampled.stdout) == len("ROMEO:") + 20 + 1


def test_a_checkpoint_whose_gate_module_is_missing_says_which_and_how(own_gate_run, tmp_path):
    _, run_dir = own_gate_run
    result = run_ega(["generate", "--ckpt_path", str(run_dir / "checkpoints" / "best.ckpt")], cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "no module 'my_gates' to import it from" in result.stderr
    assert "Run `ega` from the directory that holds my_gates.py" in result.stderr


def test_check_gate_passes_the_example_and_names_what_the_leaking_copy_breaks(own_gate_run):
    work, _ = own_gate_run
    good = run_ega(["check-gate", "my_gates.AbsEnergyGate"], cwd=work)
    assert good.returncode == 0, good.stdout + good.stderr
    rows = [line.split()[:2] for line in good.stdout.splitlines()[1:-1]]
    assert rows == [["PASS", name] for name, (_, kinds) in PROPERTIES.items() if ENERGY in kinds]
    leaky = run_ega(["check-gate", "my_gates.LeakyAbsEnergyGate"], cwd=work)
    assert leaky.returncode == 1
    failed = [line.split()[1] for line in leaky.stdout.splitlines() if line.startswith("FAIL")]
    assert failed == ["causal", "cached_equals_recompute"]


def test_an_entry_point_gate_is_listed_and_trains_by_name_in_a_sweep(tmp_path, data_dir):
    site = write_gate_package(tmp_path / "site", {"mine": "my_pkg.gates:AbsEnergyGate"})
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    listed = run_ega(["gates"], cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr[-3000:]
    row = next(line.split() for line in listed.stdout.splitlines() if line.startswith("mine "))
    assert row == ["mine", "gate", "entry", "point", "of", "my-pkg", "0.1", "-", "520", "1"]  # 4 heads x (128 + 2)
    (tmp_path / "mine.yaml").write_text("model:\n  gate: mine\n")
    spec = {
        "name": "own",
        "configs": [str(p) for p in CONFIG_FILES],
        "args": TINY.split(),
        "runs": [{"name": "mine", "configs": ["mine.yaml"], "seeds": [1]}],
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    env["EGA_DATA_DIR"] = str(data_dir)
    swept = run_ega(["sweep", "spec.yaml", "--runs_dir", "runs"], cwd=tmp_path, env=env)
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
    assert json.loads((tmp_path / "runs" / "mine-seed1" / "DONE").read_text())["returncode"] == 0
    ckpt = torch.load(tmp_path / "runs" / "mine-seed1" / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["hyper_parameters"]["gate"] == "mine" and "model.blocks.0.attn.gate.u.weight" in ckpt["state_dict"]
