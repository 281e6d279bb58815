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


def validate_tiny(model: L.LightningModule, data_dir, callbacks: list[L.Callback]) -> dict[str, float]:
    """One `trainer.validate` of a TINY_MODEL-shaped model on 40 TinyShakespeare windows; the logged metrics."""
    from ega_lightning import CharDataModule

    from .conftest import TINY_MODEL

    dm = CharDataModule(
        corpus="tinyshakespeare",
        data_dir=str(data_dir),
        block_size=TINY_MODEL["block_size"],
        batch_size=4,
        eval_batch_size=16,
        max_eval_windows=40,
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    return trainer.validate(model, datamodule=dm, verbose=False)[0]
