"""``last.ckpt``, the checkpoint a run resumes from, written only where a resume loses nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Checkpoint

from ega_lightning.lightning_private import align_logging_step, validation_follows

# ega's record of the run that saved a checkpoint, by the config's dotted keys, which `ega fit --ckpt_path last`
# compares with the command's (run_policy.CONTINUED): a resume continues one run, never another's checkpoint.
RUN_KEY = "ega_run"


class LastCheckpoint(Checkpoint):
    """Writes ``<dirpath>/last.ckpt`` every ``every_n_steps`` optimizer steps and at the end of fit.

    Lightning's ``ModelCheckpoint(save_last=True, every_n_train_steps=N)`` saves before the step's validation, which
    a run resumed from it never runs (its val/loss point, tau history entry and a best.ckpt are lost). Here a step
    that validates is saved after its validation, once every callback has taken it in (a Checkpoint subclass runs
    after the other callbacks)."""

    def __init__(self, dirpath: str | Path, every_n_steps: int) -> None:
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be >= 1, got {every_n_steps}.")
        self.dirpath = Path(dirpath)
        self.every_n_steps = every_n_steps
        self._pending = False  # a save deferred to the end of this step's validation
        self._saved_step = -1
        self._started = False  # this fit's first batch began

    def _save(self, trainer: L.Trainer) -> None:
        # what was logged goes to disk first: a run killed after this save resumes past those points and never
        # logs them again (TensorBoard buffers events for up to two minutes)
        for logger in trainer.loggers:
            logger.save()
        # the full state, through the trainer's CheckpointIO (atomic), on every rank
        trainer.save_checkpoint(self.dirpath / "last.ckpt", weights_only=False)
        self._saved_step = trainer.global_step

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        # every checkpoint of the run (best.ckpt too), whichever callback saves it
        checkpoint[RUN_KEY] = {
            "run_name": self.dirpath.parent.name,
            "trainer.precision": str(trainer.precision),
            "trainer.accumulate_grad_batches": trainer.accumulate_grad_batches,
        }

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        # a resume from a last.ckpt written at the end of a fit (on_train_epoch_end, after Lightning's logging step
        # moved on) is moved on once more by Lightning's restart: its points would be stamped a step late
        if not self._started:
            self._started = True
            align_logging_step(trainer)

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step % self.every_n_steps or trainer.global_step == self._saved_step:
            return
        if validation_follows(trainer):
            self._pending = True
        else:
            self._save(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._pending and not trainer.sanity_checking:
            self._pending = False
            self._save(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # the end of fit (max_steps): the final state, unless this step's save already wrote it
        if trainer.global_step != self._saved_step:
            self._save(trainer)
