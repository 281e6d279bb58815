"""The ``ega`` command: Lightning's CLI (fit / validate / test) wired for CharLM and CharDataModule."""

from __future__ import annotations

import importlib
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from jsonargparse import Namespace
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ega_lightning.data import CharDataModule
from ega_lightning.module import CharLM

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


class EgaCLI(LightningCLI):
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
        parser.link_arguments("model.block_size", "data.block_size")
        parser.link_arguments("seed_everything", "data.seed", compute_fn=_seed_for_data)
        parser.link_arguments("data.vocab", "model.vocab", apply_on="instantiate")

    def _parse_ckpt_path(self) -> None:
        """Lightning takes the model's hyper-parameters from --ckpt_path; take its corpus too.

        A model only fits the corpus whose vocabulary it was trained on, so
        `ega test --ckpt_path X` evaluates on X's corpus without being told.
        """
        super()._parse_ckpt_path()
        config = self.config.get(self.config.get("subcommand") or "")
        ckpt_path = config.get("ckpt_path") if config else None
        if ckpt_path and Path(ckpt_path).is_file():
            ckpt = torch.load(ckpt_path, weights_only=True, map_location="cpu")
            corpus = ckpt.get("datamodule_hyper_parameters", {}).get("corpus")
            if corpus is not None:
                config.data.corpus = corpus

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        run_dir = Path(config.runs_dir) / (config.run_name or default_run_name(config))
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
        if self.subcommand == "fit":
            _check_fit_target(run_dir / "checkpoints", config.ckpt_path)
        if config.checkpoint_every_n_steps < 0:
            raise SystemExit(f"error: checkpoint_every_n_steps must be >= 0, got {config.checkpoint_every_n_steps}.")
        self._run_dir = run_dir

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        every = self._get(self.config, "checkpoint_every_n_steps")
        if every == 0 or self.subcommand not in ("fit", None):
            return super().instantiate_trainer(**kwargs)
        # last.ckpt on a step schedule (and at the end), apart from best.ckpt, which follows val/loss
        last = ModelCheckpoint(
            dirpath=self._run_dir / "checkpoints",
            save_top_k=0,
            save_last=True,
            every_n_train_steps=every,
            save_on_train_epoch_end=True,
        )
        self.trainer_defaults = {**self.trainer_defaults, "callbacks": [last]}  # appended to the configured ones
        return super().instantiate_trainer(**kwargs)


def default_run_name(config: Namespace) -> str:
    """e.g. ``tinyshakespeare-multiscale_scales2-4x4x128-T128-seed1337``."""
    m = config.model
    gate = "_".join([m.gate, *(f"{k}{v}" for k, v in sorted((m.gate_options or {}).items()))])
    return f"{config.data.corpus}-{gate}-{m.n_layer}x{m.n_head}x{m.n_embd}-T{m.block_size}-seed{config.data.seed}"


def _as_list(value: Any) -> list[Any]:
    if value is None or isinstance(value, bool):
        return []
    return value if isinstance(value, list) else [value]


def _is_model_checkpoint(callback: Any) -> bool:
    return isinstance(callback, Namespace) and str(callback.get("class_path", "")).endswith("ModelCheckpoint")


def _check_fit_target(ckpt_dir: Path, ckpt_path: str | None) -> None:
    """Never silently overwrite a run, never silently restart one."""
    existing = sorted(ckpt_dir.glob("*.ckpt")) if ckpt_dir.is_dir() else []
    if ckpt_path == "last" and not (ckpt_dir / "last.ckpt").is_file():
        raise SystemExit(
            f"error: --ckpt_path last, but there is no {ckpt_dir / 'last.ckpt'} to resume from. "
            "Check --run_name (and the config that derives it), or drop --ckpt_path to start a new run."
        )
    if ckpt_path is None and existing:
        raise SystemExit(
            f"error: the run directory {ckpt_dir.parent} already holds checkpoints ({existing[0].name}, ...). "
            "Resume it with --ckpt_path last, start a separate run with --run_name <new name>, "
            f"or delete {ckpt_dir.parent}."
        )


# subcommands with their own argparse CLIs: Lightning's parser knows only fit/validate/test
TOOLS = {
    "generate": "ega_lightning.generate",
    "bench": "ega_lightning.bench",
    "sweep": "ega_lightning.experiments.sweep",
    "report": "ega_lightning.experiments.report",
    "gates": "ega_lightning.gates.listing",
    "check-gate": "ega_lightning.gates.conformance",
}


def main(args: Any = None) -> None:
    argv = sys.argv[1:] if args is None else args
    if isinstance(argv, list) and argv and argv[0] in TOOLS:
        code = importlib.import_module(TOOLS[argv[0]]).main(argv[1:])
        if code:
            raise SystemExit(code)
        return
    if isinstance(argv, list) and argv[:1] in (["-h"], ["--help"]):
        print(
            "Also: `ega generate` (sample from a checkpoint), `ega bench` (gate cost), "
            "`ega sweep` (run a sweep spec), `ega report` (summarise one), `ega gates` (list the gates), "
            "`ega check-gate` (check one). Each takes --help.\n"
        )
    try:
        EgaCLI(
            CharLM,
            CharDataModule,
            seed_everything_default=1337,
            trainer_defaults={"logger": TENSORBOARD_LOGGER},
            auto_configure_optimizers=False,
            save_config_callback=SaveRunConfig,
            save_config_kwargs={"overwrite": True},
            args=args,
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


if __name__ == "__main__":
    main()
