"""Keeping the checkpoint of chosen steps, e.g. an early one to compare with the final model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L


class KeepCheckpointAt(L.Callback):
    """Writes ``<dirpath>/step<N>.ckpt`` when training reaches optimizer step N, for every N in ``steps``.

    The checkpoint is the full training state (resumable, loadable by every `ega` command) and is
    written through the trainer's checkpoint plugin (atomic with ``AtomicCheckpointIO``, as in
    configs/base.yaml), after the step and before that step's validation. A resumed run that goes
    through step N again writes the same file again. Nothing here is part of the resumed state.

    Args:
        steps: the optimizer steps to keep, e.g. ``[250]``.
        dirpath: where to write; default ``<run>/checkpoints`` (the trainer's ``default_root_dir``).
    """

    def __init__(self, steps: list[int], dirpath: str | None = None) -> None:
        if not steps or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in steps):
            raise ValueError(f"KeepCheckpointAt: steps must be a non-empty list of positive integers, got {steps!r}.")
        self.steps, self.dirpath = sorted(set(steps)), dirpath
        self._last_saved: int | None = None  # with gradient accumulation a step ends several batches

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        step = trainer.global_step
        if step in self.steps and step != self._last_saved:
            self._last_saved = step
            directory = Path(self.dirpath) if self.dirpath else Path(trainer.default_root_dir) / "checkpoints"
            # the full state, resumable; every rank calls it, rank 0 writes
            trainer.save_checkpoint(directory / f"step{step}.ckpt", weights_only=False)
