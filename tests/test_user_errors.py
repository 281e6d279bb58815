"""Every user mistake through the real `ega` command: one paragraph, no traceback, non-zero exit, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .conftest import TINY_MODEL, run_ega
from .helpers import scalars

pytestmark = pytest.mark.slow

TINY = [*(f"--model.{k}={v}" for k, v in TINY_MODEL.items()), "--data.batch_size=4", "--data.max_eval_windows=4"]
SHORT = ["--trainer.max_steps=2", "--trainer.val_check_interval=2", "--trainer.enable_progress_bar=false"]


def written(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, data_dir) -> Path:
    """A tiny trained run's best.ckpt."""
    cwd = tmp_path_factory.mktemp("ckpt")
    result = run_ega(["fit", *TINY, *SHORT, "--run_name=tiny"], cwd, env={"EGA_DATA_DIR": str(data_dir)})
    assert result.returncode == 0, result.stderr[-3000:]
    return cwd / "lightning_logs/tiny/checkpoints/best.ckpt"


def corrupt_dir(tmp_path: Path, text: bytes | None) -> Path:
    """A data directory whose tinyshakespeare/input.txt holds ``text`` (None: no file)."""
    root = tmp_path / "corpora"
    (root / "tinyshakespeare").mkdir(parents=True)
    if text is not None:
        (root / "tinyshakespeare/input.txt").write_bytes(text)
    return root


def bad_yaml(tmp_path: Path) -> str:
    path = tmp_path / "broken.yaml"
    path.write_text("model:\n  n_layer: 2\n   n_head: [\n")
    return str(path)


# (id, arguments, message fragment); `{tmp}` and `{ckpt}` are filled in per test
ROWS = [
    ("unknown corpus", ["fit", "--data.corpus=wikitext"], "Unknown corpus 'wikitext'. Available corpora: ptb"),
    ("unknown gate", ["fit", "--model.gate=wavelet"], "Unknown gate 'wavelet'. Registered gates: none,"),
    ("unknown option", ["fit", "--model.gate_options={scales: 2}"], "Gate 'linear' does not take option(s) scales"),
    ("indivisible heads", ["fit", "--model.n_embd=31"], "model.n_embd (31) must be divisible by model.n_head (2)"),
    ("batch size 0", ["fit", "--data.batch_size=0"], "data.batch_size must be a positive integer, got 0."),
    ("learning rate 0", ["fit", "--model.lr=0"], "model.lr must be positive, got 0.0."),
    ("tau_init nan", ["fit", "--model.tau_init=.nan"], "model.tau_init must be a finite number, got nan."),
    ("max_steps 0", ["fit", "--trainer.max_steps=0"], "trainer.max_steps is 0; set a positive number"),
    ("block too large", ["fit", "--model.block_size=200000"], "block_size 200000 is larger than the val split"),
    ("config missing", ["fit", "-c", "gate/nosuch.yaml"], "config file gate/nosuch.yaml not found"),
    ("yaml broken", ["fit", "-c", "{yaml}"], "broken.yaml is not valid YAML (line 3"),
    ("resume nothing", ["fit", "--ckpt_path=last"], "--ckpt_path last, but there is no run to resume"),
    ("validate missing ckpt", ["validate", "--ckpt_path=nope.ckpt"], "--ckpt_path nope.ckpt: no such file"),
    ("validate random bytes", ["validate", "--ckpt_path={random}"], "is not a checkpoint that ega-lightning wrote"),
    ("validate truncated", ["validate", "--ckpt_path={truncated}"], "is not a checkpoint that ega-lightning wrote"),
    ("generate random bytes", ["generate", "--ckpt_path={random}"], "is not a checkpoint that ega-lightning wrote"),
    ("checkpoint of another size", ["validate", "--ckpt_path={ckpt}", "--model.n_embd=64"], "n_embd: checkpoint 32"),
    ("corpus missing offline", ["fit", "--data.data_dir={empty}"], "could not be downloaded from"),
    ("corpus altered", ["fit", "--data.data_dir={altered}"], "truncated, altered or a different version"),
    ("corpus empty", ["fit", "--data.data_dir={emptyfile}"], "is empty"),
    ("corpus not utf-8", ["fit", "--data.data_dir={latin1}"], "truncated, altered or a different version"),
]


@pytest.mark.parametrize(("args", "message"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_a_mistake_gets_one_paragraph_no_traceback_and_leaves_nothing(args, message, tmp_path, data_dir, checkpoint):
    cwd = tmp_path / "work"
    cwd.mkdir()
    blob = checkpoint.read_bytes()
    (tmp_path / "random.ckpt").write_bytes(os.urandom(4096))
    (tmp_path / "truncated.ckpt").write_bytes(blob[: len(blob) // 2])
    fill = {
        "{ckpt}": str(checkpoint),
        "{random}": str(tmp_path / "random.ckpt"),
        "{truncated}": str(tmp_path / "truncated.ckpt"),
        "{yaml}": bad_yaml(tmp_path),
        "{empty}": str(corrupt_dir(tmp_path / "a", None)),
        "{altered}": str(corrupt_dir(tmp_path / "b", b"First Citizen:\nnot the real file\n")),
        "{emptyfile}": str(corrupt_dir(tmp_path / "c", b"")),
        "{latin1}": str(corrupt_dir(tmp_path / "d", "Caf\xe9 de Paris\n".encode("latin-1"))),
    }
    for placeholder, value in fill.items():
        args = [a.replace(placeholder, value) for a in args]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    # no proxy reaches anything: a download fails at once, as on an offline machine
    env = {"EGA_DATA_DIR": str(data_dir), "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
    command = args[:1] + ([] if args[0] == "generate" else [*TINY, *SHORT]) + args[1:]
    result = run_ega(command, cwd, env=env, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr + result.stdout
    error_lines = [line for line in result.stderr.splitlines() if line.startswith(f"ega {args[0]}: error: ")]
    assert len(error_lines) == 1, result.stderr[-3000:]
    assert message in error_lines[0]
    assert written(cwd) == []  # no run directory, no config, no event file, no data directory
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # and nothing else was touched


def test_debug_shows_the_traceback_on_request(tmp_path, data_dir):
    result = run_ega(["fit", "--model.n_embd=30", "--debug"], tmp_path, env={"EGA_DATA_DIR": str(data_dir)})
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "ega fit: error: model.n_embd (30)" in result.stderr


def test_generate_streams_and_ctrl_c_keeps_what_was_generated(tmp_path, checkpoint):
    cmd = [sys.executable, "-m", "ega_lightning.cli", "generate", f"--ckpt_path={checkpoint}", "--prompt=AB"]
    proc = subprocess.Popen(
        [*cmd, "--max_new_tokens=100000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
    )
    first = proc.stdout.read(40)  # arrives while the generation is still running: it streams
    assert proc.poll() is None and first.startswith(b"AB") and len(first) == 40
    proc.send_signal(2)  # SIGINT, as Ctrl-C
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert b"Traceback" not in err and b"interrupted after" in err
    n = int(err.split(b"interrupted after ")[1].split()[0])
    # every token counted was printed (the last one perhaps not, if Ctrl-C came while it was written)
    assert n >= 38 and len(first + out) >= n + 1


def test_validate_takes_the_runtime_attention_from_the_command_not_the_checkpoint(tmp_path, checkpoint, data_dir):
    env = {"EGA_DATA_DIR": str(data_dir)}
    losses = {}
    for attention in ("fused", "reference"):
        run = ["validate", f"--ckpt_path={checkpoint}", f"--model.attention={attention}", f"--run_name={attention}"]
        result = run_ega([*run, "--data.max_eval_windows=4"], tmp_path, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        run_dir = tmp_path / f"lightning_logs/{attention}"
        assert f"attention: {attention}" in (run_dir / "config_validate.yaml").read_text()
        (losses[attention],) = scalars(run_dir, "val/loss").values()
    assert losses["fused"] == pytest.approx(losses["reference"], abs=1e-4)
    assert torch.load(checkpoint, weights_only=True)["hyper_parameters"]["attention"] == "fused"
