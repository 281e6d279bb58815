"""The ``ega`` command: Lightning's CLI (fit / validate / test) wired for CharLM and CharDataModule."""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn, TextIO

import yaml
from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from ega_lightning import commands, runs, summary
from ega_lightning.callbacks import LastCheckpoint
from ega_lightning.checkpoint_io import load_checkpoint
from ega_lightning.data import CharDataModule
from ega_lightning.errors import (
    DEBUG_ENV,
    UserError,
    exit_refused,
    machine_refusal,
    print_user_error,
)
from ega_lightning.module import RUNTIME_KEYS, SHAPE_KEYS, CharLM, NonFiniteLossError, check_model_matches

PACKAGED_CONFIGS = Path(__file__).resolve().parent / "configs"
# What `ega fit` with no -c runs: the README's main job, EGA-1 on TinyShakespeare at the cpu size, with
# every callback. Any -c file or flag overrides these, as later files override earlier ones.
DEFAULT_CONFIGS = ("base.yaml", "size/cpu.yaml", "corpus/tinyshakespeare.yaml", "gate/linear.yaml")
LIGHTNING_SUBCOMMANDS = commands.LIGHTNING_COMMANDS

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
            path = run_dir_of(config) / runs.LAST
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
        run_dir = run_dir_of(config)
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
        missing = runs.missing_dirs(run_dir)
        if self.subcommand == "fit":
            global _LOCK
            _LOCK = runs.lock(run_dir)  # held until the process ends
        _register_undo(run_dir, runs.snapshot(run_dir), missing)
        if self.subcommand == "fit":
            _check_fit_target(run_dir, config.ckpt_path, config.overwrite)

    def after_fit(self) -> None:
        if self.trainer.is_global_zero:
            print(summary.fit_summary(self.trainer, self._run_dir, _TYPED), flush=True)

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

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except UserError:
            raise
        except ValueError as err:  # the constructors' argument checks: a user's mistake, said in one line
            raise UserError(str(err)) from err
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


def default_run_name(config: Namespace) -> str:
    """e.g. ``tinyshakespeare-multiscale_scales2-4x4x128-T128-seed1337``, ``ptb-fox+output_headwise-...``."""
    m = config.model
    gate = "_".join([m.gate, *(f"{k}{v}" for k, v in sorted((m.gate_options or {}).items()))])
    if m.get("output_gate", "none") != "none":
        gate += f"+{m.output_gate}"
    return f"{config.data.corpus}-{gate}-{m.n_layer}x{m.n_head}x{m.n_embd}-T{m.block_size}-seed{config.data.seed}"


def _as_list(value: Any) -> list[Any]:
    if value is None or isinstance(value, bool):
        return []
    return value if isinstance(value, list) else [value]


def _is_model_checkpoint(callback: Any) -> bool:
    return isinstance(callback, Namespace) and str(callback.get("class_path", "")).endswith("ModelCheckpoint")


def run_dir_of(config: Namespace) -> Path:
    if config.run_name:  # empty or None: the default name
        runs.check_run_name(config.run_name)
    return Path(config.runs_dir) / (config.run_name or default_run_name(config))


def typed_model_keys(argv: list[str]) -> set[str]:
    """The model-defining arguments (``SHAPE_KEYS``) a command line sets: ``--model.<key>`` flags and the
    ``model:`` section of its -c files (already resolved to paths, see `resolve_config_args`)."""
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


def _check_fit_target(run_dir: Path, ckpt_path: str | None, overwrite: bool) -> None:
    """Never silently overwrite a run, never silently restart one, never mix two in one directory."""
    state = runs.fit_state(run_dir)
    last = run_dir / runs.LAST
    if overwrite:
        if ckpt_path:
            raise UserError("--overwrite=true starts the run over, so it cannot go with --ckpt_path; drop one of them.")
        runs.clear_outputs(run_dir)
        return
    start_over = "start it over with --overwrite=true (deletes what it wrote), or start a separate run with --run_name"
    if ckpt_path == "last":
        if state is runs.FitState.FRESH:
            raise UserError(
                f"--ckpt_path last, but there is no run to resume in {run_dir} (no {runs.LAST}). Check --run_name "
                "(and the config that derives it), or drop --ckpt_path to start the run."
            )
        if state is runs.FitState.STALE:
            raise UserError(
                f"--ckpt_path last, but the run in {run_dir} stopped before it wrote its first {runs.LAST}, so "
                f"there is nothing to resume: drop --ckpt_path and {start_over}."
            )
        runs.remove_temporaries(run_dir)
        return
    if ckpt_path is not None:
        if state is not runs.FitState.FRESH and Path(ckpt_path).resolve() != last.resolve():
            raise UserError(
                f"the run directory {run_dir} already holds a run, and {ckpt_path} is not its {runs.LAST}: "
                "continuing another checkpoint there would mix two runs. Start a separate run with "
                "--run_name <new name>, or resume this one with --ckpt_path last."
            )
        return
    if state is runs.FitState.RESUME:
        raise UserError(
            f"the run directory {run_dir} already holds a run (with {runs.LAST}). Resume it with --ckpt_path last, "
            f"{start_over} <new name>."
        )
    if state is runs.FitState.STALE:
        names = ", ".join(p.name for p in runs.outputs(run_dir)[:3])
        raise UserError(
            f"the run directory {run_dir} holds what a run wrote before it stopped ({names}, ...) but no "
            f"{runs.LAST}, so it cannot be resumed: {start_over} <new name>."
        )


_TYPED: list[str] = []  # the command line as the user typed it (for the resume line of fit's summary)
_LOCK: TextIO | None = None  # the run directory's lock, held by `ega fit` until the process exits
_UNDO: tuple[Path, set[Path], list[Path]] | None = None  # what to remove when the command fails on a user error


def _register_undo(run_dir: Path, before: set[Path], missing: list[Path]) -> None:
    global _UNDO
    _UNDO = (run_dir, before, missing)


def _undo() -> None:
    """After a user error: remove what this command wrote, so nothing half-written stays behind."""
    global _UNDO, _LOCK
    if _UNDO is None:
        return
    run_dir, before, missing = _UNDO
    _UNDO = None
    runs.undo_new(run_dir, before, missing)
    if _LOCK is not None:
        _LOCK.close()
        _LOCK = None


def resolve_config(name: str) -> str:
    """A -c value: a file that exists as given, else the packaged config of that name.

    ``gate/db4.yaml`` and ``configs/gate/db4.yaml`` both name the packaged file; a local file of the
    same path wins (so a checkout's configs/, or your own edited copy, is what runs).
    """
    if Path(name).is_file():
        return name
    if Path(name).is_dir():
        found = sorted(str(p.relative_to(name)) for p in Path(name).rglob("*.yaml"))[:4]
        raise UserError(
            f"-c {name} is a directory; -c takes one config file"
            + (f", e.g. one of those in it: {', '.join(found)}." if found else ".")
        )
    for candidate in (name, name.removeprefix("configs/")):
        packaged = PACKAGED_CONFIGS / candidate
        if packaged.is_file():
            return str(packaged)
    shipped = sorted(str(p.relative_to(PACKAGED_CONFIGS)) for p in PACKAGED_CONFIGS.rglob("*.yaml"))
    raise UserError(
        f"config file {name} not found (relative paths are resolved against {Path.cwd()}). Give a file path, "
        f"or a packaged config: {', '.join(s for s in shipped if not s.startswith('sweeps/'))}."
    )


def _check_yaml(path: str) -> bool:
    """Whether a config file sets anything (False: empty, or only comments); a UserError if it is no config."""
    try:
        content = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(
            f"config file {path} is not valid YAML{where}: {problem}. Fix the file and run again."
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"config file {path} cannot be read: {err}.") from None
    if content is not None and not isinstance(content, dict):
        raise UserError(
            f"config file {path} holds a {type(content).__name__}, not a mapping of options: write it as "
            "`model:`, `data:`, `trainer:` ... sections, as the packaged configs are (e.g. gate/db4.yaml)."
        )
    return content is not None


def resolve_config_args(argv: list[str]) -> list[str]:
    """The command line with every -c/--config value resolved (packaged names) and checked as YAML."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-c", "--config") and i + 1 < len(argv):
            path = resolve_config(argv[i + 1])
            out += [arg, path] if _check_yaml(path) else []  # an empty config sets nothing
            i += 2
            continue
        if arg.startswith("--config="):
            path = resolve_config(arg.split("=", 1)[1])
            arg = f"--config={path}" if _check_yaml(path) else ""
        if arg in _FLOAT_FLAGS and i + 1 < len(argv):  # --model.lr inf
            out += [arg, _NON_FINITE.get(argv[i + 1].lower(), argv[i + 1])]
            i += 2
            continue
        out += [_yaml_float(arg)] if arg else []
        i += 1
    return out


_FLOAT_FLAGS = tuple(
    f"--model.{name}" for name, p in inspect.signature(CharLM.__init__).parameters.items() if p.annotation == "float"
)
_NON_FINITE = {"nan": ".nan", "inf": ".inf", "+inf": ".inf", "-inf": "-.inf", "infinity": ".inf", "-infinity": "-.inf"}


def _yaml_float(arg: str) -> str:
    """``--model.tau_init=nan`` as YAML spells it (``.nan``), so that the model's check says what is wrong with
    it, rather than the parser, which reads ``nan`` as a string."""
    flag, _, value = arg.partition("=")
    if flag in _FLOAT_FLAGS and value.lower() in _NON_FINITE:
        return f"{flag}={_NON_FINITE[value.lower()]}"
    return arg


def main(args: Any = None) -> None:
    argv = list(sys.argv[1:] if args is None else args)
    if "--debug" in argv:  # anywhere on the line: show tracebacks (also for DDP's re-executed ranks)
        argv.remove("--debug")
        os.environ[DEBUG_ENV] = "1"
    if not argv or argv[0] in ("-h", "--help") or argv[0] in commands.COMMANDS.keys() - LIGHTNING_SUBCOMMANDS:
        return commands.main(argv)  # the overview and the tools, which need no Lightning
    command = argv[0] if argv and argv[0] in LIGHTNING_SUBCOMMANDS else "fit"
    defaults = [str(PACKAGED_CONFIGS / name) for name in DEFAULT_CONFIGS]
    # Lightning turns Ctrl-C into exit status 1, as for a crash: remember that it was one
    interrupted: list[int] = []

    def on_sigint(signum: int, frame: Any) -> None:
        interrupted.append(signum)
        raise KeyboardInterrupt

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the caller ignores Ctrl-C
        signal.signal(signal.SIGINT, on_sigint)
    try:
        _TYPED[:] = argv
        summary.quiet_lightning()
        resolved = resolve_config_args(argv)
        if args is None:  # from the shell: DDP re-executes sys.argv, so it carries the resolved line
            sys.argv[1:] = resolved
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
                sub: {"default_config_files": defaults, "description": commands.COMMANDS[sub][1]}
                for sub in LIGHTNING_SUBCOMMANDS
            },
            args=None if args is None else resolved,
        )
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
        _undo()
        print_user_error(command, err)
        raise SystemExit(2) from None
    except (KeyboardInterrupt, SystemExit) as err:
        if not interrupted or (isinstance(err, SystemExit) and err.code != 1):
            raise
        print(f"ega {command}: interrupted (Ctrl-C). {_keep_or_undo(command)}", file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT) from None
    except NonFiniteLossError as err:  # the run's own outcome, not a bug: its checkpoints are kept
        print_user_error(command, err)
        raise SystemExit(1) from None
    except Exception as err:
        refusal = machine_refusal(err)
        if refusal is None:
            raise
        exit_refused(command, refusal, _keep_or_undo(command))


def _keep_or_undo(command: str) -> str:
    """After a stop the command did not choose (Ctrl-C, a refused write): a run that can be resumed is kept,
    else what this command wrote is removed, so that nothing blocks the next try; says which."""
    if command == "fit" and _UNDO is not None and runs.fit_state(_UNDO[0]) is runs.FitState.RESUME:
        return f"The run in {_UNDO[0]} is kept: resume it with the same command and --ckpt_path last."
    with contextlib.suppress(OSError):  # a read-only filesystem refuses the removals; it holds nothing new either
        _undo()
    return "What this command had written is removed, so the same command starts afresh."


if __name__ == "__main__":
    main()
