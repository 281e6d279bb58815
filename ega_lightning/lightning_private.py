"""Every use of Lightning's private API in ega_lightning, made here behind a public name, each with why no public
hook serves (checked against lightning ``LIGHTNING_CHECKED``). tests/test_lightning_private.py holds each row of
``PRIVATE_USES`` to the installed Lightning (the name, its signature, the call order relied on), so an upgrade that
changes one fails a test, and fails on another module that names a private attribute of Lightning or jsonargparse.
A new private use gets a row here and a test there; a row no code uses any more is deleted.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger

LIGHTNING_CHECKED = "2.6.6"


@dataclass(frozen=True)
class PrivateUse:
    name: str  # the private name, as its module and attributes spell it in Lightning
    used_by: str  # where ega_lightning uses it
    why: str  # why no public hook does it
    # a behaviour relied on, never called or read (the function of ``used_by``, in this module, relies on it)
    relied_on: bool = False


PRIVATE_USES = (
    PrivateUse(
        "lightning.pytorch.cli.LightningCLI._parse_ckpt_path",
        "PlannedCheckpointMerge, EgaCLI's base (commands/lightning_cli.py): an override",
        "Lightning merges the hyper-parameters of every --ckpt_path into the model's config, between "
        "parse_arguments and before_instantiate_classes, with no switch: EgaCLI runs that merge only where "
        "the run plan says (not for `last`, which Lightning would read as a file of that name).",
    ),
    PrivateUse(
        "lightning.fabric.loggers.tensorboard.TensorBoardLogger._kwargs",
        "purge_from (EgaCLI.instantiate_classes, on resume)",
        "the SummaryWriter's keyword arguments, purge_step among them, are only given at construction, and "
        "the logger is built from the config that config.yaml records: setting it there would record it.",
    ),
    PrivateUse(
        "lightning.pytorch.loops.fit_loop._FitLoop._data_fetcher",
        "validation_follows (callbacks/last.py: LastCheckpoint)",
        "the training loop's data fetcher, which _should_check_val_fx takes.",
    ),
    PrivateUse(
        "lightning.pytorch.loops.training_epoch_loop._TrainingEpochLoop._should_check_val_fx",
        "validation_follows (callbacks/last.py: LastCheckpoint)",
        "whether the step that just ended is followed by a validation: no public hook says it before the "
        "validation starts, and copying the rule would drift from Lightning's.",
    ),
    PrivateUse(
        "lightning.pytorch.loops.training_epoch_loop._TrainingEpochLoop._batches_that_stepped",
        "align_logging_step (callbacks/last.py: LastCheckpoint, at the first batch of a fit)",
        "the step logged metrics are stamped at: restored from the checkpoint, then moved on by one more on "
        "restart where the checkpoint was written at the end of a fit (issue 72: a run resumed to a raised "
        "max_steps stamped every later point, its final val/loss too, a step after an uninterrupted run's). No "
        "public setter or hook sets it.",
    ),
    PrivateUse(
        "lightning.pytorch.trainer.trainer.Trainer._signal_connector",
        "set_sigterm_handler (callbacks/stop.py: StopSignals.take_under_ddp, from AgreeingDDPStrategy's agreement)",
        "the Trainer's signal connector, whose SIGTERM handler is set below: the Trainer takes no handler.",
    ),
    PrivateUse(
        "lightning.pytorch.trainer.connectors.signal_connector._SignalConnector._sigterm_notifier_fn",
        "set_sigterm_handler (callbacks/stop.py: StopSignals.take_under_ddp, under DDP only)",
        "Lightning's SIGTERM handler broadcasts from inside the handler, at whatever point of its step the signal "
        "finds each rank, and no switch turns that off: under DDP a rank then waits in a collective the other "
        "ranks never join (issue 41). Set on the instance, it is what the Trainer installs instead.",
    ),
    PrivateUse(
        "lightning.pytorch.strategies.launchers.subprocess_script._SubprocessScriptLauncher.procs",
        "take_launcher_children (callbacks/stop.py: AgreedStop, on rank 0 of Lightning's own launcher)",
        "the ranks the launcher started, in the list its child observer shares: the observer SIGKILLs rank 0 "
        "and every child as soon as one child exits non-zero (143 too), and has no public switch.",
    ),
    PrivateUse(
        "lightning.pytorch.strategies.launchers.subprocess_script._SubprocessScriptLauncher._call_children_scripts",
        "line_for_every_rank (commands/lightning_cli.py: main, on the line from the shell)",
        "Lightning's DDP launcher starts the other ranks by re-executing the line as typed (sys.argv) with a copy of "
        "rank 0's environment, and takes no command line of its own: rank 0 hands on the line it resolved in that "
        "environment, so that every rank parses the line rank 0 parsed (and sys.argv stays the user's).",
        relied_on=True,
    ),
    PrivateUse(
        "lightning.pytorch.utilities._pytree",
        "PYTREE_MODULE (summary.quiet_lightning: the module pattern of a warnings filter)",
        "torch's LeafSpec deprecation is raised inside this module; the filter names it so that the same "
        "warning from anywhere else still shows.",
    ),
)


def purge_from(logger: Any, step: int) -> None:
    """A TensorBoard logger drops its events from ``step`` on (SummaryWriter's ``purge_step``; unless its config sets
    one); any other logger is left as it is."""
    if isinstance(logger, TensorBoardLogger) and logger._kwargs.get("purge_step") is None:
        logger._kwargs["purge_step"] = step


def align_logging_step(trainer: Any) -> None:
    """The step Lightning stamps logged metrics at, set to the optimizer steps taken, as in a fit never interrupted."""
    trainer.fit_loop.epoch_loop._batches_that_stepped = trainer.global_step


def validation_follows(trainer: Any) -> bool:
    """Whether the training step that just ended is followed by a validation (asked at on_train_batch_end)."""
    loop, fetcher = trainer.fit_loop, trainer.fit_loop._data_fetcher
    return bool(trainer.enable_validation and fetcher is not None and loop.epoch_loop._should_check_val_fx(fetcher))


# what the ranks that Lightning's DDP launcher starts inherit from rank 0, where it leaves the line it resolved
HANDED_TO_THE_RANKS = "os.environ.copy()"
RESOLVED_ENV = "EGA_RESOLVED_LINE"


def line_for_every_rank(argv: list[str], resolve: Callable[[list[str]], list[str]]) -> list[str]:
    """``resolve(argv)``, or, in a rank that Lightning's DDP launcher started for the same line (it re-executes
    sys.argv), the line that rank 0 resolved: every rank parses the one line, not a second reading of its files."""
    handed = json.loads(os.environ.get(RESOLVED_ENV) or "{}")
    if handed.get("typed") == argv:
        return list(handed["resolved"])
    resolved = resolve(argv)
    os.environ[RESOLVED_ENV] = json.dumps({"typed": argv, "resolved": resolved})
    return resolved


# the name of Lightning's private pytree module as a warnings filter's ``module`` pattern (a regular expression)
PYTREE_MODULE = r"lightning\.pytorch\.utilities\._pytree"


class PlannedCheckpointMerge:
    """A LightningCLI base (before LightningCLI among the bases) whose merge of the hyper-parameters of
    ``--ckpt_path`` into the model's config runs only where ``merges_checkpoint_hparams`` says."""

    def merges_checkpoint_hparams(self) -> bool:
        return True

    def _parse_ckpt_path(self) -> None:
        if self.merges_checkpoint_hparams():
            super()._parse_ckpt_path()  # type: ignore[misc]  # LightningCLI's, next in the subclass's bases


def set_sigterm_handler(trainer: Any, handler: Any) -> None:
    """``handler`` becomes what the Trainer installs for SIGTERM (after the strategy's setup_environment)."""
    trainer._signal_connector._sigterm_notifier_fn = handler


def take_launcher_children(trainer: Any) -> list[subprocess.Popen[bytes]]:
    """On rank 0 of Lightning's own launcher, the ranks it started, taken out of the list its child observer shares
    (emptied, the observer ends at its next look). Elsewhere (another launcher, none): []."""
    procs = getattr(trainer.strategy.launcher, "procs", None)
    if not isinstance(procs, list):
        return []
    children, procs[:] = list(procs), []
    return children
