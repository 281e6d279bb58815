"""The command line of `ega fit`, `validate` and `test`: Lightning's parser as `ega` builds it (`cli_options`,
`EgaCommands`, `EgaArgumentParser`), and `problems`, which lists what `ega fit` would refuse of a command line
(the parser's errors, the model's and the data's argument checks, the run plan's refusals), building and writing
nothing: `ega sweep` asks it of every run of a spec before the first starts."""

from __future__ import annotations

import functools
import re
import sys
import typing
from typing import Any, NoReturn

from jsonargparse import ArgumentError
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from ega_lightning import run_policy
from ega_lightning.config_files import DEFAULT_CONFIGS, PACKAGED_CONFIGS, not_a_mapping, resolve_config_args
from ega_lightning.data import CharDataModule
from ega_lightning.errors import UserError, paragraph
from ega_lightning.module import CharLM, check_arguments

# Lightning's subcommands that `ega` offers (no predict); the dispatcher's table names lightning_cli for each
LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test")
# the model's float arguments, whose non-finite values a command line may spell as nan / inf
FLOAT_FLAGS = tuple(f"--model.{name}" for name, hint in typing.get_type_hints(CharLM.__init__).items() if hint is float)

# The default logger, also when no config file names one; the CLI points it at the run directory.
TENSORBOARD_LOGGER = {
    "class_path": "ega_lightning.callbacks.RunLogger",
    "init_args": {"save_dir": "lightning_logs", "default_hp_metric": False},
}


def _seed_for_data(seed: bool | int) -> int:
    if isinstance(seed, bool):
        raise ValueError(paragraph("seed_is_an_integer", seed=seed))
    return seed


class EgaArgumentParser(LightningArgumentParser):
    """Lightning's parser; its errors are one paragraph that names the flag and where --help is, not the usage."""

    def add_method_arguments(self, class_type: type, method_name: str, *args: Any, **kwargs: Any) -> list[str]:
        # the subcommands' arguments (Trainer.fit's, .validate's, .test's) are added through this method
        added = super().add_method_arguments(class_type, method_name, *args, **kwargs)
        if method_name in ("validate", "test"):  # the headline is printed at the end; --verbose=true: every metric
            self.set_defaults(verbose=False)
        return added

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error:
            super().error(message, ex)  # raises: the caller handles it
        parser = getattr(ex, "subcommand_parser", None) or self
        command = next((c for c in LIGHTNING_SUBCOMMANDS if parser.prog.split()[-1:] == [c]), "fit")
        text = parser_message(message)
        key = re.search(r'Parser key "([^"]+)"', text)
        where = f"--{key.group(1)}: " if key else ""
        help = f"see `ega {command} --help` for the accepted options and values."
        print(f"ega {command}: error: {text}\n{where}{help}", file=sys.stderr)
        self.exit(2)


def one_line(message: str) -> str:
    return " ".join(line.strip() for line in message.strip().splitlines())


# jsonargparse's words for a link whose source is no option (the data module's vocab is a property, linked at
# instantiation): `ega` says refusals.yaml's vocab_given instead
VOCAB_LINK = 'Linked "model.vocab" must be given via "data.vocab"'
# jsonargparse's words for a link whose source a section given as null removed (`model: null` in a -c file: the link
# model.block_size -> data.block_size finds no key), and what `ega` says instead (as for `trainer: null`)
SECTION_GONE = re.compile(r'Key "(model|data)\.[A-Za-z_]+" not found in namespace')


def parser_message(message: str) -> str:
    """The parser's error as one line, in ega's words where jsonargparse's would name an option that is not there."""
    text = one_line(message)
    if VOCAB_LINK in text:
        return paragraph("vocab_given")
    gone = SECTION_GONE.search(text)
    return not_a_mapping(gone.group(1), "null") if gone else text


class EgaCommands:
    """What `ega`'s LightningCLIs share (EgaCLI, and the parser that `problems` reads with; before LightningCLI
    among the bases): the subcommands `ega` offers (no predict), and its own arguments."""

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {k: v for k, v in LightningCLI.subcommands().items() if k in LIGHTNING_SUBCOMMANDS}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """`ega`'s own arguments beside Lightning's, and the links between the model's, the data's and the seed."""
        parser.add_argument(
            "--run_name",
            type=str | None,
            default=None,
            help="Directory name of the run under --runs_dir (default: derived from corpus, gate, size and seed).",
        )
        parser.add_argument("--runs_dir", type=str, default="lightning_logs", help="Where runs are written.")
        parser.add_argument(
            "--checkpoint_every_n_steps",
            type=int,
            default=100,
            help="Write <run>/checkpoints/last.ckpt every N optimizer steps and at the end of fit (0: never).",
        )
        parser.add_argument(
            "--overwrite",
            type=bool,
            default=False,
            help="fit: delete what an earlier run wrote into the run directory and start it over.",
        )
        parser.add_argument(
            "--allow_world_size_change",
            type=bool,
            default=False,
            help="fit --ckpt_path last: resume with another number of processes (num_nodes x devices) than the "
            "checkpoint's; the run then differs from one trained in a single world.",
        )
        parser.link_arguments("model.block_size", "data.block_size")
        parser.link_arguments("seed_everything", "data.seed", compute_fn=_seed_for_data)
        parser.link_arguments("data.vocab", "model.vocab", apply_on="instantiate")


def cli_options(descriptions: dict[str, str] | None = None, exit_on_error: bool = True) -> dict[str, Any]:
    """The LightningCLI arguments of `ega fit/validate/test` (beside the classes, the callback and the args)."""
    defaults = [str(PACKAGED_CONFIGS / name) for name in DEFAULT_CONFIGS]
    own = {} if exit_on_error else {"exit_on_error": False}  # the parser's and each subcommand's
    subparsers = {
        sub: {"default_config_files": defaults, "description": (descriptions or {}).get(sub), **own}
        for sub in LIGHTNING_SUBCOMMANDS
    }
    return {
        "seed_everything_default": 1337,
        "trainer_defaults": {"logger": TENSORBOARD_LOGGER},
        "auto_configure_optimizers": False,
        "parser_class": EgaArgumentParser,
        "parser_kwargs": {**own, **subparsers},
    }


class _Built(Exception):  # the parser of a `_ParserOnly`, raised where it would parse
    pass


class _ParserOnly(EgaCommands, LightningCLI):
    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        raise _Built(parser)


@functools.cache
def _parser() -> LightningArgumentParser:
    """Lightning's parser as EgaCLI sets it up, before it parses."""
    try:
        _ParserOnly(CharLM, CharDataModule, args=[], **cli_options(exit_on_error=False))
    except _Built as built:
        return built.args[0]
    raise AssertionError("LightningCLI parsed without asking parse_arguments")  # pragma: no cover


def problems(argv: list[str]) -> list[str]:
    """What `ega fit` would refuse of the command line ``argv`` (``fit`` first, as `ega fit` takes it) before it
    trains, each as the sentence it prints; empty: none. Builds no model and writes nothing. A run directory's
    state (a run there, its lock) is not asked: it is each run's to find."""
    try:
        resolved = resolve_config_args(argv, FLOAT_FLAGS)
        config = _parser().parse_args(resolved)
    except (ArgumentError, UserError, ValueError) as err:
        return [parser_message(str(err))]
    command = config.get("subcommand")
    config, found = config[command], []

    def plan() -> None:
        request = run_policy.read_request(command, config, resolved)
        found.extend(run_policy.refusals(request, run_policy.decide(request)))

    # the data module's argument checks (the corpus's name, the batch sizes) read no file before setup
    checks = (lambda: check_arguments(config.model.as_dict()), lambda: CharDataModule(**config.data.as_dict()), plan)
    for check in checks:
        try:
            check()
        except ValueError as err:  # UserError too
            found.append(one_line(str(err)))
    return found
