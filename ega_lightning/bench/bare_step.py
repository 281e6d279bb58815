"""The callback `ega bench --pipeline` appends to an `ega fit`: between Lightning's training steps it times
one bare step (forward + backward + AdamW step, `harness.Contender`, what the gate table times) of a copy
of the same model on the batch Lightning is about to train on, and the time of each of Lightning's loop
iterations around it, so the two are paired step by step in one process.

A loop iteration of `ega fit` runs from one ``on_train_batch_start`` to the next, minus the bare step in
between: the training step with every callback's hooks, the logging, gradient clipping, the learning-rate
schedule and fetching the next batch. The timings go to ``out`` (JSON) at the end of training.
"""

from __future__ import annotations

import inspect
import json
import time
from typing import Any

import lightning as L
import torch

from ega_lightning.bench.harness import Contender, sync
from ega_lightning.io import write_atomic


class PairedBareStep(L.Callback):
    """Steps ``[warmup, warmup + repeats)`` of the fit, each paired with a bare step just before it;
    ``ega fit`` needs ``trainer.max_steps = warmup + repeats + 1`` (the last step closes the last interval)."""

    def __init__(self, out: str, warmup: int = 2, repeats: int = 7) -> None:
        self.out, self.warmup, self.repeats = out, warmup, repeats
        self.fit_s: list[float] = []
        self.bare: Contender | None = None
        self._started: float | None = None  # when the step under way began (after its bare step)
        self._step = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # the same model as Lightning's, from its hyper-parameters and its weights before the first step
        model_class = type(pl_module)
        accepted = inspect.signature(model_class.__init__).parameters  # hparams also hold the CLI's bookkeeping
        self._model = model_class(**{k: v for k, v in pl_module.hparams.items() if k in accepted})
        self._model.to(pl_module.device)
        self._model.load_state_dict(pl_module.state_dict())
        self._model.train()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, *args: Any) -> None:
        device = pl_module.device
        sync(device)
        now = time.perf_counter()
        if self._started is not None and self._timed(self._step - 1):
            self.fit_s.append(now - self._started)
        if self._step < self.warmup + self.repeats:
            if self.bare is None:
                self.bare = Contender("bare", self._model, batch, str(trainer.precision))
            self.bare.batch = batch  # the batch Lightning's step trains on next
            self.bare.step(record=self._timed(self._step))
        self._step += 1
        sync(device)
        self._started = time.perf_counter()

    def _timed(self, step: int) -> bool:
        return self.warmup <= step < self.warmup + self.repeats

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        timings = {
            "fit_s": self.fit_s,
            "bare_s": [] if self.bare is None else self.bare.times,
            "steps": trainer.global_step,
            "precision": str(trainer.precision),
            "batch_shape": list(self.bare.batch[0].shape) if self.bare is not None else None,
            # what ran in the fit's steps: every callback (the configs', ega's, Lightning's) and logger
            "callbacks": sorted(type(c).__name__ for c in trainer.callbacks if c is not self),
            "loggers": [type(logger).__name__ for logger in trainer.loggers],
            "gradient_clip_val": trainer.gradient_clip_val,
            "threads": torch.get_num_threads(),
        }
        write_atomic(self.out, json.dumps(timings, indent=2) + "\n")
