"""Every user mistake through the real `ega` command: one paragraph, no traceback, non-zero exit, nothing written.

The table's rows each run `python -m ega_lightning.cli` in a process of its own, forked from one that has imported
the CLI (tests/ega_zygote.py): the same command line, cwd, environment and exit status, without each row's ~3 s of
imports."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from .ega_zygote import run_ega_forked
from .helpers import REPO, SHORT, TINY, TINY_MODEL, run_ega, scalars


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


def bench_configs(root: Path, size: str, n_head: int, block_size: int) -> Path:
    """A configs directory for `ega bench --configs`: the gate none and one size, 1 layer of n_embd 32."""
    for sub in ("size", "gate"):
        (root / sub).mkdir(parents=True)
    (root / "gate/none.yaml").write_text("model:\n  gate: none\n")
    model = f"model:\n  n_layer: 1\n  n_head: {n_head}\n  n_embd: 32\n  block_size: {block_size}\n"
    (root / f"size/{size}.yaml").write_text(model + "data:\n  batch_size: 2\n")
    return root


def odd_size_configs(tmp_path: Path) -> Path:
    """A configs directory whose size odd has n_head 3 and n_embd 32."""
    return bench_configs(tmp_path / "odd_configs", "odd", n_head=3, block_size=16)


def block_size_one_configs(tmp_path: Path) -> Path:
    """A configs directory whose size one has block_size 1."""
    return bench_configs(tmp_path / "one_configs", "one", n_head=2, block_size=1)


def nested_aliases(path: Path, levels: int = 9) -> Path:
    """A config of under 300 bytes whose YAML aliases expand to 4**levels values, under a key no option has."""
    lines = ["  a0: &a0 [x, x, x, x]"] + [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 4)}]" for i in range(1, levels)]
    return write(path, "bogus:\n" + "\n".join(lines) + "\n")


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def bad_yaml(tmp_path: Path) -> str:
    path = tmp_path / "broken.yaml"
    path.write_text("model:\n  n_layer: 2\n   n_head: [\n")
    return str(path)


DOC = REPO / "docs" / "bad-input.md"
LIGHTNING = ("fit", "validate", "test")  # the commands that would train, were a mistake not caught
SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")  # a markdown code span, `...` or ``... `ega` ...``
# ` ...`: text left out (its space too: "options ..." stands for "options: write it as ..."); `<dir>`: a value
# of the run (not <class 'int'>)
HOLE = re.compile(r" ?\.\.\.|<[a-z][^<>'`]*>")


def table() -> list[list[str]]:
    """The cells (input, command, what you see) of every row of the table in docs/bad-input.md."""
    lines = [line.strip() for line in DOC.read_text().splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[1:]]  # lines[0]: the header


def leading_spans(cell: str) -> list[str]:
    """The code spans that open a cell, one after another separated by " / " (the rest of the cell is prose)."""
    spans = []
    while match := SPAN.match(cell):
        spans.append(match.group(2).strip())
        cell = cell[match.end() :]
        if not cell.startswith(" / "):
            break
        cell = cell[3:]
    return spans


def cases() -> list[tuple[str, str]]:
    """(command, message) of every command the table shows: the i-th command prints the i-th message, the
    last message is also what the commands after it print."""
    found = []
    for _, command_cell, seen in table():
        commands = [span for span in leading_spans(command_cell) if span.startswith("ega ")]
        messages = leading_spans(seen)
        found += [(command, messages[min(i, len(messages) - 1)]) for i, command in enumerate(commands)]
    return found


def pattern(message: str, fill: dict[str, str]) -> str:
    """The message as a regular expression: a hole the command filled is that value, any other hole any text."""
    parts = []
    for literal, hole in zip(HOLE.split(message), [*HOLE.findall(message), None], strict=True):
        parts.append(re.escape(literal))
        if hole is not None:
            parts.append(re.escape(fill[hole]) if hole in fill else ".*?" if hole.endswith("...") else ".+?")
    return "".join(parts)


def test_every_row_of_the_table_is_run_here_or_names_its_test():
    rows = table()
    assert len(rows) >= 30 and all(len(row) == 3 for row in rows), rows
    for what, command_cell, seen in rows:
        commands = [span for span in leading_spans(command_cell) if span.startswith("ega ")]
        messages = leading_spans(seen)
        assert messages, f"{what}: no message"
        assert not commands or len(messages) <= len(commands), f"{what}: more messages than commands"
        if not commands:  # a row that needs more than one command line: the test that holds it
            tests = [span for span in leading_spans(command_cell) if span.startswith("tests/")]
            assert tests and all((REPO / t.split("::")[0]).is_file() for t in tests), f"{what}: no command, no test"


@pytest.mark.slow
@pytest.mark.parametrize(("command", "message"), cases(), ids=[c for c, _ in cases()])
def test_a_mistake_gets_one_paragraph_no_traceback_and_leaves_nothing(command, message, tmp_path, data_dir, checkpoint):
    cwd = tmp_path / "work"
    cwd.mkdir()
    blob = checkpoint.read_bytes()
    (tmp_path / "random.ckpt").write_bytes(os.urandom(4096))
    (tmp_path / "truncated.ckpt").write_bytes(blob[: len(blob) // 2])
    # the table's placeholders, each a file or directory of this test
    fill = {
        "<checkpoint>": str(checkpoint),
        "<random bytes>": str(tmp_path / "random.ckpt"),
        "<half a checkpoint>": str(tmp_path / "truncated.ckpt"),
        "<broken.yaml>": bad_yaml(tmp_path),
        "<list.yaml>": str(write(tmp_path / "list.yaml", "- model\n- data\n")),
        "<all-comment.yaml>": str(write(tmp_path / "empty.yaml", "# all comments\n# model:\n")),
        "<a file>": str(tmp_path / "random.ckpt"),
        "<no corpus there>": str(corrupt_dir(tmp_path / "a", None)),
        "<a directory>": str(tmp_path / "a"),
        "<an altered corpus>": str(corrupt_dir(tmp_path / "b", b"First Citizen:\nnot the real file\n")),
        "<an empty corpus>": str(corrupt_dir(tmp_path / "c", b"")),
        "<a latin-1 corpus>": str(corrupt_dir(tmp_path / "d", "Caf\xe9 de Paris\n".encode("latin-1"))),
        "<a checkpoint of the gate powerg>": str(with_gate(checkpoint, "powerg", tmp_path / "powerg.ckpt")),
        "<model.yaml>": str(write(tmp_path / "model.yaml", "n_embd: 64\n")),
        "<its model.yaml>": str(write(tmp_path / "its.yaml", yaml.safe_dump({"model": {**TINY_MODEL, "gate": "db2"}}))),
        "<a corpus that is a directory>": str(corrupt_dir(tmp_path / "e", None)),
        "<a 300-character name>": "r" * 300,
        "<configs with a size of n_head 3>": str(odd_size_configs(tmp_path)),
        "<configs with a size of block_size 1>": str(block_size_one_configs(tmp_path)),
        "<a config with trainer null>": str(write(tmp_path / "trainer-null.yaml", "trainer: null\n")),
        "<a config with model null>": str(write(tmp_path / "model-null.yaml", "model: null\n")),
        "<a config with data null>": str(write(tmp_path / "data-null.yaml", "data: null\n")),
        "<a config with no callbacks>": str(write(tmp_path / "no-callbacks.yaml", "trainer:\n  callbacks: []\n")),
        "<a config of nested aliases>": str(nested_aliases(tmp_path / "aliases.yaml")),
    }
    (tmp_path / "e/corpora/tinyshakespeare/input.txt").mkdir()
    filled = HOLE.sub(lambda hole: shlex.quote(fill[hole.group()]), command)  # a placeholder not here: KeyError
    args = shlex.split(filled)[1:]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    # no proxy reaches anything: a download fails at once, as on an offline machine
    env = {"EGA_DATA_DIR": str(data_dir), "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])  # tests.hostile_gates
    # a row that failed to fail would stop after two steps (its own arguments come after these)
    # forked from a zygote that has imported the CLI (tests/ega_zygote.py): each row stops before training
    result = run_ega_forked(args[:1] + (SHORT if args[0] in LIGHTNING else []) + args[1:], cwd, env=env, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr + result.stdout
    error_lines = [line for line in result.stderr.splitlines() if line.startswith(f"ega {args[0]}: error: ")]
    assert len(error_lines) == 1, result.stderr[-3000:]
    assert re.search(pattern(message, fill), error_lines[0]), (
        f"docs/bad-input.md says\n{message}\nega says\n{error_lines[0]}"
    )
    assert "usage:" not in result.stderr  # one paragraph, not the parser's whole usage
    assert written(cwd) == []  # no run directory, no config, no event file, no data directory
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # and nothing else was touched


@pytest.mark.slow
def test_a_parser_error_ends_in_a_line_naming_the_flag_and_where_help_is(tmp_path, data_dir):
    result = run_ega(["fit", "--data.batch_size=1.5"], tmp_path, env={"EGA_DATA_DIR": str(data_dir)})
    assert result.returncode == 2
    assert result.stderr.splitlines()[-2:] == [
        "ega fit: error: Parser key \"data.batch_size\": Expected a <class 'int'>. Got value: 1.5",
        "--data.batch_size: see `ega fit --help` for the accepted options and values.",
    ]


@pytest.mark.slow
def test_debug_shows_the_traceback_on_request(tmp_path, data_dir):
    result = run_ega(["fit", "--model.n_embd=30", "--debug"], tmp_path, env={"EGA_DATA_DIR": str(data_dir)})
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "ega fit: error: model.n_embd (30)" in result.stderr


@pytest.mark.slow
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


@pytest.mark.slow
def test_validate_takes_the_runtime_attention_from_the_command_not_the_checkpoint(tmp_path, checkpoint, data_dir):
    env = {"EGA_DATA_DIR": str(data_dir)}
    losses = {}
    for attention in ("fused", "reference"):
        run = ["validate", f"--ckpt_path={checkpoint}", f"--model.attention={attention}", f"--run_name={attention}"]
        result = run_ega([*run, "--data.max_eval_windows=4"], tmp_path, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        run_dir = tmp_path / f"lightning_logs/{attention}/validate"  # the evaluation's own run, beside --run_name's
        assert f"attention: {attention}" in (run_dir / "config_validate.yaml").read_text()
        (losses[attention],) = scalars(run_dir, "val/loss").values()
    assert losses["fused"] == pytest.approx(losses["reference"], abs=1e-4)
    assert torch.load(checkpoint, weights_only=True)["hyper_parameters"]["attention"] == "fused"


@pytest.mark.slow
def test_a_resume_refuses_optimizer_values_its_checkpoint_would_override(tmp_path, checkpoint, data_dir):
    """`--ckpt_path last` restores the optimizer and its schedule: a new lr or weight decay, by a flag or an edited
    config.yaml, is refused and the run is left as it was; the run's own config resumes."""
    run_dir = tmp_path / "lightning_logs" / "tiny"
    shutil.copytree(checkpoint.parent.parent, run_dir)
    saved = torch.load(run_dir / "checkpoints/last.ckpt", weights_only=True)["hyper_parameters"]
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    edited = write(tmp_path / "edited.yaml", yaml.safe_dump({**config, "model": {**config["model"], "lr": 0.5}}))
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    env = {"EGA_DATA_DIR": str(data_dir)}
    run = ["fit", *TINY, *SHORT, "--model.gate=db2", "--run_name=tiny", "--ckpt_path=last"]
    for args, key, value in [
        ([*run, "--model.lr=0.5"], "lr", 0.5),
        ([*run, "--model.weight_decay=0.9"], "weight_decay", 0.9),
        (["fit", "-c", str(edited), "--ckpt_path=last"], "lr", 0.5),
    ]:
        result = run_ega(args, tmp_path, env=env)
        assert result.returncode == 2, result.stderr[-3000:]
        assert "Traceback" not in result.stderr
        (line,) = [line for line in result.stderr.splitlines() if line.startswith("ega fit: error: ")]
        assert f"({key}: checkpoint {saved[key]!r}, this command {value!r})" in line
        assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    own = ["fit", "-c", str(run_dir / "config.yaml"), "--trainer.max_steps=4", "--ckpt_path=last"]
    resumed = run_ega(own, tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    last = torch.load(run_dir / "checkpoints/last.ckpt", weights_only=True)
    assert last["global_step"] == 4 and last["lr_schedulers"][0]["base_lrs"] == [saved["lr"]] * 2
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["lr"] == saved["lr"]


@pytest.mark.slow
def test_ega_data_dir_naming_a_file_gets_one_paragraph_and_leaves_nothing(tmp_path):
    cwd = tmp_path / "work"
    cwd.mkdir()
    not_a_dir = tmp_path / "data.txt"
    not_a_dir.write_text("not a directory\n")
    result = run_ega(["fit", *SHORT], cwd, env={"EGA_DATA_DIR": str(not_a_dir)})
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr + result.stdout
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("ega fit: error: ")]
    assert len(error_lines) == 1 and f"EGA_DATA_DIR {not_a_dir} is a file, not a directory" in error_lines[0]
    assert written(cwd) == []  # not even the run directory's .lock


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="Lightning runs 16-mixed on a GPU as asked")
def test_a_precision_lightning_would_replace_is_refused_not_recorded(tmp_path, data_dir):
    """Issue 52: `--trainer.precision=16-mixed` on a CPU trained in bf16 and recorded 16-mixed in config.yaml."""
    result = run_ega(
        ["fit", *TINY, *SHORT, "--trainer.precision=16-mixed"], tmp_path, env={"EGA_DATA_DIR": str(data_dir)}
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("ega fit: error: ")]
    assert "trainer.precision is 16-mixed, which Lightning does not run on this accelerator" in line
    assert "it would run bf16-mixed in its place" in line and "--trainer.precision=bf16-mixed" in line
    assert written(tmp_path) == []


@pytest.mark.slow
def test_a_forked_command_ends_as_the_same_command_in_a_new_interpreter(tmp_path, data_dir):
    """tests/ega_zygote.py against `run_ega`: the same status, stdout and stderr for a refusal (2), a listing (0)
    and --debug's traceback."""
    env = {"EGA_DATA_DIR": str(data_dir)}
    for args in (["fit", "--model.n_embd=30"], ["gates"], ["fit", "--model.n_embd=30", "--debug"]):
        new, forked = run_ega(args, tmp_path, env=env), run_ega_forked(args, tmp_path, env=env)
        assert (forked.returncode, forked.stdout, forked.stderr) == (new.returncode, new.stdout, new.stderr), args
        assert new.returncode == (0 if args == ["gates"] else 2) and (new.stdout if args == ["gates"] else new.stderr)
