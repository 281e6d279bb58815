"""Every user mistake through the real `ega` command: one paragraph, no traceback, non-zero exit, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .conftest import REPO, SHORT, TINY, run_ega
from .helpers import scalars

pytestmark = pytest.mark.slow


def written(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def corrupt_dir(tmp_path: Path, text: bytes | None) -> Path:
    """A data directory whose tinyshakespeare/input.txt holds ``text`` (None: no file)."""
    root = tmp_path / "corpora"
    (root / "tinyshakespeare").mkdir(parents=True)
    if text is not None:
        (root / "tinyshakespeare/input.txt").write_bytes(text)
    return root


def with_gate(checkpoint: Path, gate: str, path: Path) -> Path:
    """A copy of ``checkpoint`` that names another gate, as one trained with a gate no longer installed."""
    ckpt = torch.load(checkpoint, weights_only=True)
    ckpt["hyper_parameters"]["gate"] = gate
    torch.save(ckpt, path)
    return path


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


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
    # a defining flag typed at its default value is still compared with the checkpoint (a db2 run, 2 layers)
    ("gate flag at its default", ["validate", "--ckpt_path={ckpt}", "--model.gate=linear"], "gate: checkpoint 'db2'"),
    ("n_layer flag at its default", ["test", "--ckpt_path={ckpt}", "--model.n_layer=4"], "n_layer: checkpoint 2, th"),
    ("run name leaves the runs dir", ["fit", "--runs_dir=x/runs", "--run_name=../escape"], "'../escape' is not a run"),
    ("run name is a path", ["fit", "--run_name=a/b"], "must not be '.' or '..', nor contain '/'"),
    ("block_size 1, z-norm gate", ["fit", "--model.block_size=1"], "with one position z is 0 everywhere"),
    ("gate __init__ raises", ["fit", "--model.gate=tests.hostile_gates.RaisingInitGate"], "raised RuntimeError: my"),
    ("gate energy wrong shape", ["fit", "--model.gate=tests.hostile_gates.WrongShapeGate"], "(1, 2, 32), one energy"),
    ("check-gate wrong shape", ["check-gate", "tests.hostile_gates.WrongShapeGate"], "must return (B, n_head, T)"),
    ("bench unknown size", ["bench", "--sizes", "nosuch"], "no model size 'nosuch' in"),
    ("val_check_interval 0", ["fit", "--trainer.val_check_interval=0"], "trainer.val_check_interval is 0; set a"),
    ("generate, no such device", ["generate", "--ckpt_path={ckpt}", "--device", "cuda:99"], "cannot be used on this"),
    ("runs_dir is a file", ["fit", "--runs_dir={file}"], "is a file, so the run directory"),
    ("tau_init nan, as typed", ["fit", "--model.tau_init=nan"], "model.tau_init must be a finite number, got nan."),
    ("alpha_init -inf", ["fit", "--model.alpha_init=-inf"], "model.alpha_init must be a finite number, got -inf."),
    ("learning rate inf", ["fit", "--model.lr=inf"], "model.lr must be a finite number, got inf."),
    ("wrong type", ["fit", "--model.n_layer=two"], "Parser key \"model.n_layer\": Expected a <class 'int'>"),
    ("unknown flag", ["fit", "--nosuch=1"], "unrecognized arguments: --nosuch=1"),
    ("gate_options a list", ["fit", "--model.gate_options=[1, 2]"], 'Parser key "model.gate_options"'),
    ("config a YAML list", ["fit", "-c", "{listyaml}"], "list.yaml holds a list, not a mapping of options"),
    ("config a directory", ["fit", "-c", "{confdir}"], "is a directory; -c takes one config file"),
    ("gate's package uninstalled", ["generate", "--ckpt_path={powerg}"], "Unknown gate 'powerg'. Registered gates"),
    (
        "output gate as key gate",
        ["fit", "--model.gate=output_headwise"],
        "give it as model.output_gate, not model.gate",
    ),
    ("key bias as output gate", ["fit", "--model.output_gate=fox"], "'fox' is a key bias: give it as model.gate"),
    # an empty config sets nothing: the command goes on (to a mistake of its own)
    ("empty config", ["fit", "-c", "{emptyyaml}", "--trainer.max_steps=0"], "trainer.max_steps is 0; set a positive"),
]
LIGHTNING = ("fit", "validate", "test")  # the rows of these commands run at the test size


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
        "{file}": str(tmp_path / "random.ckpt"),
        "{listyaml}": str(write(tmp_path / "list.yaml", "- model\n- data\n")),
        "{emptyyaml}": str(write(tmp_path / "empty.yaml", "# all comments\n# model:\n")),
        "{confdir}": str(tmp_path / "a"),
        "{powerg}": str(with_gate(checkpoint, "powerg", tmp_path / "powerg.ckpt")),
    }
    for placeholder, value in fill.items():
        args = [a.replace(placeholder, value) for a in args]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    # no proxy reaches anything: a download fails at once, as on an offline machine
    env = {"EGA_DATA_DIR": str(data_dir), "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])  # tests.hostile_gates
    command = args[:1] + ([*TINY, *SHORT] if args[0] in LIGHTNING else []) + args[1:]
    result = run_ega(command, cwd, env=env, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr + result.stdout
    error_lines = [line for line in result.stderr.splitlines() if line.startswith(f"ega {args[0]}: error: ")]
    assert len(error_lines) == 1, result.stderr[-3000:]
    assert message in error_lines[0]
    if "powerg" in message:  # and the way out for a gate that came from a package
        assert "(entry point group ega_lightning.gates) needs that package installed" in error_lines[0]
    assert "usage:" not in result.stderr  # one paragraph, not the parser's whole usage
    assert written(cwd) == []  # no run directory, no config, no event file, no data directory
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # and nothing else was touched


def test_a_parser_error_ends_in_a_line_naming_the_flag_and_where_help_is(tmp_path, data_dir):
    result = run_ega(["fit", "--data.batch_size=1.5"], tmp_path, env={"EGA_DATA_DIR": str(data_dir)})
    assert result.returncode == 2
    assert result.stderr.splitlines()[-2:] == [
        "ega fit: error: Parser key \"data.batch_size\": Expected a <class 'int'>. Got value: 1.5",
        "--data.batch_size: see `ega fit --help` for the accepted options and values.",
    ]


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
