"""The ``ega`` command's front door: the list of commands, and each one handed to its module.

One thin module per command in this package parses its command line and calls the library below;
``fit``, ``validate`` and ``test`` share ``lightning_cli`` (Lightning's CLI). Only the chosen command's
module is imported, so ``ega --help`` and the tools' ``--help`` start without Lightning (and
``ega report``/``ega sweep`` without torch).
"""

from __future__ import annotations

import importlib
import os
import sys

from ega_lightning.allocator import keep_freed_memory
from ega_lightning.errors import DEBUG_ENV, end_command, in_ega_terms

# name: (module with a main(argv), one line for `ega --help`); fit/validate/test are Lightning's
COMMANDS = {
    "fit": (
        "ega_lightning.commands.lightning_cli",
        "train a model (Lightning CLI: -c configs, --model.*, --data.*, --trainer.*)",
    ),
    "validate": (
        "ega_lightning.commands.lightning_cli",
        "evaluate a checkpoint on the validation split: loss, bpc, tau",
    ),
    "test": ("ega_lightning.commands.lightning_cli", "evaluate a checkpoint on the test split"),
    "generate": ("ega_lightning.commands.generate", "sample text from a checkpoint"),
    "bench": (
        "ega_lightning.commands.bench",
        "time and measure the memory of every gate's training and generation steps",
    ),
    "sweep": ("ega_lightning.experiments.sweep", "run the runs of a sweep spec, resumably, recording each one"),
    "report": ("ega_lightning.commands.report", "summarise recorded sweeps into results/ and REPORT.md"),
    "gates": ("ega_lightning.commands.gates", "list the gates and their options"),
    "check-gate": ("ega_lightning.commands.check_gate", "check a gate (built in or yours) against EGA's contract"),
    "landscape": (
        "ega_lightning.commands.landscape",
        "the loss around each checkpoint's learned tau and alpha (one JSON)",
    ),
}
LIGHTNING_COMMANDS = ("fit", "validate", "test")


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {line}" for name, (_, line) in COMMANDS.items()]
    return "\n".join(
        [
            "usage: ega <command> [options]",
            "",
            "Train, evaluate and compare Energy-Gated Attention language models.",
            "",
            "commands:",
            *lines,
            "",
            "`ega <command> --help` lists the command's options. With no -c, fit/validate/test start from the",
            "packaged configs (`ega fit --print_config` shows them resolved); -c takes a file or a packaged name,",
            "e.g. -c gate/db4.yaml. --debug anywhere on the line shows the traceback of an error.",
        ]
    )


def main(args: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if args is None else args)
    keep_freed_memory()  # a training step's freed activations reused, not faulted in again (allocator.py)
    if "--debug" in argv:  # anywhere on the line: show tracebacks (also for DDP's re-executed ranks)
        argv.remove("--debug")
        os.environ[DEBUG_ENV] = "1"
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        raise SystemExit(0 if argv else 2)
    if argv[0] not in COMMANDS or argv[0] in LIGHTNING_COMMANDS:  # Lightning's parser says what is wrong
        from ega_lightning.commands import lightning_cli

        # None from the shell: lightning_cli.main reads (and, for DDP, rewrites) sys.argv itself
        return lightning_cli.main(args, {name: COMMANDS[name][1] for name in LIGHTNING_COMMANDS})
    try:
        code = importlib.import_module(COMMANDS[argv[0]][0]).main(argv[1:])
        sys.stdout.flush()  # here, where a closed pipe is caught, not at the interpreter's exit
    except BaseException as err:  # errors.EXITS says which ones end the command, and how
        if isinstance(err, BrokenPipeError):  # `ega gates | head`: nothing more goes to the reader that has gone
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        end_command(argv[0], in_ega_terms(err))
        raise
    if code:
        raise SystemExit(code)
