"""`ega fit`, `ega validate` and `ega test`: Lightning's CLI wired for CharLM and CharDataModule.

The run directory's policy is `ega_lightning.runs` (one :class:`~ega_lightning.runs.RunClaim` per
command), the -c files' resolution `ega_lightning.config_files`; this module wires them into the CLI
and says each outcome in one paragraph.
"""

from __future__ import annotations

import inspect
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

import yaml
from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from ega_lightning import runs, summary
from ega_lightning.callbacks import LastCheckpoint
from ega_lightning.checkpoint_io import load_checkpoint
from ega_lightning.config_files import DEFAULT_CONFIGS, PACKAGED_CONFIGS, resolve_config_args
from ega_lightning.data import CharDataModule
from ega_lightning.errors import (
    DEBUG_ENV,
    UserError,
    exit_refused,
    machine_refusal,
    print_user_error,
)
from ega_lightning.module import RUNTIME_KEYS, SHAPE_KEYS, CharLM, NonFiniteLossError, check_model_matches

# Lightning's subcommands that `ega` offers (no predict); the dispatcher's table names this module for each
LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test")
# the model's float arguments, whose non-finite values a command line may spell as nan / inf
FLOAT_FLAGS = tuple(
    f"--model.{name}" for name, p in inspect.signature(CharLM.__init__).parameters.items() if p.annotation == "float"
)

# The default logger, also when no config file names one; the CLI points it at the run directory.
TENSORBOARD_LOGGER = {
    "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
    "init_args": {"save_dir": "lightning_logs", "default_hp_metric": False},
}


def _seed_for_data(seed: bool | int) -> int:
    if isinstance(seed, bool):
        raise ValueError(
            f"seed_everything is {seed}; set an integer (e.g. --seed_everything=1337): "
            "the training windows are drawn from it, so a run must have a fixed seed to be resumable."
        )
    return seed


class SaveRunConfig(SaveConfigCallback):
    """Saves the resolved config into the run directory: ``config.yaml`` for fit, ``config_<stage>.yaml`` else.

    Overwriting is on because a resumed fit re-saves the same run's config.
    """

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        stage = getattr(stage, "value", stage)  # TrainerFn or str
        self.config_filename = "config.yaml" if stage == "fit" else f"config_{stage}.yaml"
        super().setup(trainer, pl_module, stage)


class EgaArgumentParser(LightningArgumentParser):
    """Lightning's parser; its errors are one paragraph that names the flag and where --help is, not the usage."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error:
            super().error(message, ex)  # raises: the caller handles it
        parser = getattr(ex, "subcommand_parser", None) or self
        command = next((c for c in LIGHTNING_SUBCOMMANDS if parser.prog.split()[-1:] == [c]), "fit")
        text = " ".join(line.strip() for line in message.strip().splitlines())
        key = re.search(r'Parser key "([^"]+)"', text)
        where = f"--{key.group(1)}: " if key else ""
        print(
            f"ega {command}: error: {text}\n{where}see `ega {command} --help` for the accepted options and values.",
            file=sys.stderr,
        )
        self.exit(2)


class EgaCLI(LightningCLI):
    """Lightning's CLI for CharLM and CharDataModule, with `ega`'s run directories, checks and summaries.

    ``claim`` is this command's claim on its run directory (the lock, what to undo): the caller keeps it,
    to undo on a failure; without one (the Python API) the CLI makes its own and releases it when the
    subcommand ends. ``command_line`` is the command as the user typed it (fit's summary repeats it).
    """

    def __init__(
        self, *args: Any, claim: runs.RunClaim | None = None, command_line: list[str] | None = None, **kwargs: Any
    ) -> None:
        self._command_line = list(command_line or [])
        self._claim = runs.RunClaim() if claim is None else claim
        try:
            super().__init__(*args, **kwargs)  # parses, instantiates and runs the subcommand
        finally:
            if claim is None:  # a notebook fits, then resumes the same run in one process: no lock kept
                self._claim.release()

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {k: v for k, v in LightningCLI.subcommands().items() if k in LIGHTNING_SUBCOMMANDS}  # no predict

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs: Any) -> LightningArgumentParser:
        parser = super()._prepare_subcommand_parser(klass, subcommand, **kwargs)
        if subcommand in ("validate", "test"):  # the headline is printed at the end; --verbose=true: every metric
            parser.set_defaults(verbose=False)
        return parser

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
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
        parser.link_arguments("model.block_size", "data.block_size")
        parser.link_arguments("seed_everything", "data.seed", compute_fn=_seed_for_data)
        parser.link_arguments("data.vocab", "model.vocab", apply_on="instantiate")

    def _parse_ckpt_path(self) -> None:
        """What a checkpoint decides: the model (from its hyper-parameters) and its corpus; not how it runs.

        Lightning overwrites every model argument with the checkpoint's. Here, a model-defining argument
        (``SHAPE_KEYS``) that the command sets to another value than the checkpoint's is an error that
        names both: for ``fit`` every one (a resumed or continued run trains the model its config
        describes), for ``validate``/``test`` those the user typed (a flag or a -c file), whatever their
        value: the merged config cannot tell a flag given at its default from one not given. A
        runtime argument (``RUNTIME_KEYS``) keeps the command's value. The corpus follows the checkpoint.
        """
        subcommand = self.config.get("subcommand")
        config = self.config.get(subcommand) if subcommand else None
        ckpt_path = config.get("ckpt_path") if config else None
        if not ckpt_path:
            return
        if ckpt_path == "last":
            if subcommand != "fit":
                raise UserError(
                    f"--ckpt_path last resumes `ega fit`; give `ega {subcommand}` a checkpoint file, "
                    "e.g. --ckpt_path lightning_logs/<run>/checkpoints/best.ckpt."
                )
            path = runs.run_dir_of(config) / runs.LAST
            if not path.is_file():
                return  # the fit guard says what to do
        else:
            path = Path(ckpt_path)
        ckpt = load_checkpoint(path)
        if ckpt_path == "last":
            self._resume_step = ckpt.get("global_step")
        saved = ckpt["hyper_parameters"]
        asked = config.model.clone()
        keys = SHAPE_KEYS if subcommand == "fit" else typed_model_keys(self._typed)
        check_model_matches(saved, asked, keys, source=str(path), asker="this command")
        if ckpt_path != "last":  # a run resumed from its own last.ckpt already has the right config
            super()._parse_ckpt_path()
        config = self.config[subcommand]
        for key in RUNTIME_KEYS:
            if key in asked:
                config.model[key] = asked[key]
        corpus = ckpt.get("datamodule_hyper_parameters", {}).get("corpus")
        if corpus is not None:
            config.data.corpus = corpus

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        self._typed = list(sys.argv[1:] if args is None else args)  # what the user typed, for _parse_ckpt_path
        super().parse_arguments(parser, args)

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        if self.subcommand == "fit" and (config.trainer.max_steps is None or config.trainer.max_steps < 1):
            raise UserError(
                f"trainer.max_steps is {config.trainer.max_steps}; set a positive number of optimizer steps "
                "(--trainer.max_steps=N): the learning-rate schedule and the data are step-based."
            )
        interval = config.trainer.val_check_interval
        if isinstance(interval, int | float) and interval <= 0:
            raise UserError(
                f"trainer.val_check_interval is {interval}; set a positive number of optimizer steps between "
                "evaluations (--trainer.val_check_interval=N)."
            )
        if config.checkpoint_every_n_steps < 0:
            raise UserError(f"checkpoint_every_n_steps must be >= 0 (0: never), got {config.checkpoint_every_n_steps}.")
        run_dir = runs.run_dir_of(config)
        if self.subcommand in ("validate", "test") and config.run_name is None and config.ckpt_path:
            ckpt_dir = Path(config.ckpt_path).parent
            if ckpt_dir.name == "checkpoints":  # evaluate into the run the checkpoint belongs to
                run_dir = ckpt_dir.parent
        config.trainer.default_root_dir = str(run_dir)
        for logger in _as_list(config.trainer.logger):
            if isinstance(logger, Namespace) and "init_args" in logger:
                args = logger.init_args
                # one fixed directory per run: no version_N, so `--ckpt_path last` finds the run's checkpoints
                for key, value in (("save_dir", str(run_dir.parent)), ("name", run_dir.name), ("version", "")):
                    if key in args:
                        args[key] = value
        for callback in _as_list(config.trainer.callbacks):
            if _is_model_checkpoint(callback) and callback.init_args.get("dirpath") is None:
                callback.init_args.dirpath = str(run_dir / "checkpoints")
        not_a_dir = next((d for d in (run_dir, *run_dir.parents) if d.exists() and not d.is_dir()), None)
        if not_a_dir is not None:
            raise UserError(
                f"{not_a_dir} is a file, so the run directory {run_dir} cannot be made there. Give --runs_dir "
                "(and --run_name) a directory, or a path that does not exist yet."
            )
        self._run_dir = run_dir
        if rank_zero_only.rank != 0:  # the other ranks of a DDP run write into rank 0's run, under its lock
            return
        self._claim.claim(run_dir, fit=self.subcommand == "fit")  # fit: the lock, held until the command ends
        if self.subcommand == "fit":
            runs.check_fit_target(run_dir, config.ckpt_path, config.overwrite)
            self._clear_run_dir = bool(config.overwrite)  # once the classes are built: every argument checked

    def after_fit(self) -> None:
        if self.trainer.is_global_zero:
            print(summary.fit_summary(self.trainer, self._run_dir, self._command_line), flush=True)

    def after_validate(self) -> None:
        self._print_evaluation("validate")

    def after_test(self) -> None:
        self._print_evaluation("test")

    def _print_evaluation(self, stage: str) -> None:
        if self.trainer.is_global_zero:
            metrics, ckpt_path = self.trainer.callback_metrics, self.config[stage].ckpt_path
            run_dir = self._run_dir if self.trainer.logger is not None else None
            print(summary.evaluation_summary(stage, metrics, ckpt_path, run_dir, self.datamodule.corpus.name))

    _resume_step: int | None = None  # the global step of the last.ckpt a fit resumes
    _clear_run_dir = False  # fit --overwrite=true: the old run is deleted once the classes are built

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except UserError:
            raise
        except (ValueError, MisconfigurationException) as err:  # the constructors' argument checks (the
            # Trainer's: an accelerator this machine lacks): a user's mistake, said in one line
            raise UserError(str(err)) from err
        if self._clear_run_dir:
            runs.clear_outputs(self._run_dir)
        for logger in self.trainer.loggers if self._resume_step is not None else []:
            if isinstance(logger, TensorBoardLogger) and logger._kwargs.get("purge_step") is None:
                # what the stopped process logged from this step on is logged again: TensorBoard drops the old
                # events (SummaryWriter's purge_step), so no step shows twice
                logger._kwargs["purge_step"] = self._resume_step

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        every = self._get(self.config, "checkpoint_every_n_steps")
        if every == 0 or self.subcommand not in ("fit", None):
            return super().instantiate_trainer(**kwargs)
        # last.ckpt on a step schedule (and at the end), apart from best.ckpt, which follows val/loss
        last = LastCheckpoint(self._run_dir / "checkpoints", every_n_steps=every)
        self.trainer_defaults = {**self.trainer_defaults, "callbacks": [last]}  # appended to the configured ones
        return super().instantiate_trainer(**kwargs)


def _as_list(value: Any) -> list[Any]:
    if value is None or isinstance(value, bool):
        return []
    return value if isinstance(value, list) else [value]


def _is_model_checkpoint(callback: Any) -> bool:
    return isinstance(callback, Namespace) and str(callback.get("class_path", "")).endswith("ModelCheckpoint")


def typed_model_keys(argv: list[str]) -> set[str]:
    """The model-defining arguments (``SHAPE_KEYS``) a command line sets: ``--model.<key>`` flags and the
    ``model:`` section of its -c files (already resolved to paths, see `config_files.resolve_config_args`)."""
    typed: set[str] = set()
    for i, arg in enumerate(argv):
        if arg.startswith("--model."):
            typed.add(arg.removeprefix("--model.").split("=", 1)[0].split(".", 1)[0])
        config = argv[i + 1] if arg in ("-c", "--config") and i + 1 < len(argv) else None
        if arg.startswith("--config="):
            config = arg.split("=", 1)[1]
        if config is not None:
            model = (yaml.safe_load(Path(config).read_text()) or {}).get("model")
            typed |= set(model) if isinstance(model, dict) else set()
    return typed & set(SHAPE_KEYS)


def main(args: list[str] | None = None, descriptions: dict[str, str] | None = None) -> None:
    """Runs ``fit``/``validate``/``test`` (``args``: the whole line, the subcommand first; None: ``sys.argv``,
    which DDP re-executes); ``descriptions``: each subcommand's line for its ``--help``."""
    argv = list(sys.argv[1:] if args is None else args)
    if "--debug" in argv:  # anywhere on the line: show tracebacks (also for DDP's re-executed ranks)
        argv.remove("--debug")
        os.environ[DEBUG_ENV] = "1"
    command = argv[0] if argv and argv[0] in LIGHTNING_SUBCOMMANDS else "fit"
    # Lightning turns Ctrl-C into exit status 1, as for a crash: remember that it was one
    interrupted: list[int] = []

    def on_sigint(signum: int, frame: Any) -> None:
        interrupted.append(signum)
        raise KeyboardInterrupt

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the caller ignores Ctrl-C
        signal.signal(signal.SIGINT, on_sigint)
    with runs.RunClaim() as claim:  # the run directory's lock, held until the command ends
        try:
            _run_cli(argv, args is None, descriptions or {}, claim)
        except SIGTERMException:
            # Lightning stops on SIGTERM (preemption, a job's time limit, `kill`) with exit status 0, so a
            # caller (`ega sweep`, a job script) would take the cut-short run for a finished one.
            print(
                "ega: stopped by SIGTERM before the end; resume the run from its newest checkpoint with "
                "`--ckpt_path last` (same command and --run_name).",
                file=sys.stderr,
            )
            raise SystemExit(128 + signal.SIGTERM) from None
        except UserError as err:
            claim.undo()
            print_user_error(command, err)
            raise SystemExit(2) from None
        except (KeyboardInterrupt, SystemExit) as err:
            if not interrupted or (isinstance(err, SystemExit) and err.code != 1):
                raise
            print(f"ega {command}: interrupted (Ctrl-C). {claim.keep_or_undo(command == 'fit')}", file=sys.stderr)
            raise SystemExit(128 + signal.SIGINT) from None
        except NonFiniteLossError as err:  # the run's own outcome, not a bug: its checkpoints are kept
            print_user_error(command, err)
            raise SystemExit(1) from None
        except Exception as err:
            refusal = machine_refusal(err)
            if refusal is None:
                raise
            exit_refused(command, refusal, claim.keep_or_undo(command == "fit"))


def _run_cli(argv: list[str], from_shell: bool, descriptions: dict[str, str], claim: runs.RunClaim) -> None:
    """Lightning's CLI on the command line ``argv`` (the -c files resolved first), with `ega`'s defaults."""
    summary.quiet_lightning()
    resolved = resolve_config_args(argv, FLOAT_FLAGS)
    if from_shell:  # DDP re-executes sys.argv, so it carries the resolved line
        sys.argv[1:] = resolved
    defaults = [str(PACKAGED_CONFIGS / name) for name in DEFAULT_CONFIGS]
    EgaCLI(
        CharLM,
        CharDataModule,
        seed_everything_default=1337,
        trainer_defaults={"logger": TENSORBOARD_LOGGER},
        auto_configure_optimizers=False,
        save_config_callback=SaveRunConfig,
        save_config_kwargs={"overwrite": True},
        parser_class=EgaArgumentParser,
        parser_kwargs={
            sub: {"default_config_files": defaults, "description": descriptions.get(sub)}
            for sub in LIGHTNING_SUBCOMMANDS
        },
        args=None if from_shell else resolved,
        claim=claim,
        command_line=argv,
    )
