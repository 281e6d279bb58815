"""Test-only Lightning callbacks, importable by the real CLI as `tests.helpers.<name>` (PYTHONPATH=repo)."""

import time

import lightning as L
import torch


class SleepEachStep(L.Callback):
    """Slows training down so a test can kill the process in the middle of it."""

    def __init__(self, seconds: float = 0.3) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, *args, **kwargs) -> None:
        time.sleep(self.seconds)


class PoisonLossAt(L.Callback):
    """Makes the gradients NaN at one step, as a diverging run would."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_step == self.step:
            for p in pl_module.parameters():
                if p.grad is not None:
                    p.grad.fill_(torch.nan)
