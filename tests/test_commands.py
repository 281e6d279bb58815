"""`ega` introduces itself: every command listed with one line, every option with help, a start without Lightning."""

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from ega_lightning import commands

TOOLS = [name for name in commands.COMMANDS if name not in commands.LIGHTNING_COMMANDS]

# In one fresh process, in this order: `ega --help` and the tools that need no torch, then the others.
# Each --help is asked through `ega`'s own main; what it imported is read from sys.modules after it.
PROBE = """
import json, sys
from ega_lightning import commands
HEAVY = ("torch", "lightning", "matplotlib", "scipy")
seen = {}
for argv in (["--help"], ["sweep", "--help"], ["report", "--help"], *[[t, "--help"] for t in sys.argv[1:]]):
    try:
        commands.main(argv)
    except SystemExit as stop:
        assert stop.code == 0, (argv, stop.code)
    seen[" ".join(argv)] = [m for m in HEAVY if m in sys.modules]
print(json.dumps(seen))
"""


def test_help_starts_without_lightning_and_the_light_tools_without_torch():
    torch_tools = [t for t in TOOLS if t not in ("sweep", "report")]
    out = subprocess.run([sys.executable, "-c", PROBE, *torch_tools], capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen["--help"] == seen["sweep --help"] == seen["report --help"] == []
    assert all("lightning" not in seen[f"{t} --help"] for t in torch_tools), seen


def test_ega_help_lists_every_command_with_one_line_and_no_predict(capsys):
    with pytest.raises(SystemExit) as stop:
        commands.main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    listed = out.split("commands:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[0] for line in listed] == list(commands.COMMANDS)
    assert all(len(line.split()) > 3 for line in listed)  # a name, then a line that says what it does
    assert "predict" not in out


def test_ega_alone_shows_the_commands_and_fails(capsys):
    with pytest.raises(SystemExit) as stop:
        commands.main([])
    assert stop.value.code == 2 and "commands:" in capsys.readouterr().err


def test_lightning_cli_offers_exactly_fit_validate_test():
    from ega_lightning.commands.lightning_cli import EgaCLI

    assert tuple(EgaCLI.subcommands()) == commands.LIGHTNING_COMMANDS


class Parsed(Exception):
    pass


@pytest.mark.parametrize("tool", TOOLS)
def test_every_option_of_every_tool_has_help(tool, monkeypatch):
    parsers: list[argparse.ArgumentParser] = []

    def capture(self, *args, **kwargs):
        parsers.append(self)
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(Parsed):
        importlib.import_module(commands.COMMANDS[tool][0]).main([])
    (parser,) = parsers
    silent = [a.option_strings or [a.dest] for a in parser._actions if not a.help]
    assert silent == []


def test_a_reader_that_goes_away_ends_a_tool_quietly():
    """`ega gates | head -1`: the pipe closes before the table is written; no traceback, exit 141 as a shell's."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ega_lightning.commands", "gates"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # before the command has printed anything (it imports torch first)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err
