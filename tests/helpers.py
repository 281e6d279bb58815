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


def tiny_checkpoint(ckpt_dir, data_dir, steps: int = 3, keep: int | None = 2, **model_options):
    """Trains a test-size CharLM for `steps` steps and keeps its step-`keep` checkpoint; returns (module, path)."""
    from ega_lightning import CharDataModule, CharLM
    from ega_lightning.callbacks import KeepCheckpointAt
    from ega_lightning.checkpoint_io import AtomicCheckpointIO

    from .conftest import TINY_MODEL

    torch.manual_seed(0)
    dm = CharDataModule("tinyshakespeare", data_dir=str(data_dir), block_size=TINY_MODEL["block_size"], batch_size=4)
    lm = CharLM(dm.vocab, **{**TINY_MODEL, **model_options}, warmup_steps=1)
    trainer = L.Trainer(
        max_steps=steps,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[AtomicCheckpointIO()],
        callbacks=[KeepCheckpointAt(steps=[keep], dirpath=str(ckpt_dir))] if keep else [],
    )
    trainer.fit(lm, dm)
    return lm, ckpt_dir / f"step{keep}.ckpt" if keep else None
