"""The generalization gap: validation loss minus the training loss measured the same way."""

from __future__ import annotations

import math

import lightning as L
import torch
import torch.nn.functional as F

from ega_lightning.data.datamodule import RandomEvalBatches, SequentialWindows


class GeneralizationGap(L.Callback):
    """At every validation: ``train_eval/loss`` on a fixed set of training windows, in eval mode
    (no dropout), as many windows as the validation evaluates; and ``gap = val/loss - train_eval/loss``.

    The training windows are evenly spaced over the training split and the same at every
    check and for every model (with ``data.random_eval_batches``, the author's evaluation, as many random
    batches of the training split as of the validation split, drawn as those are). Under DDP each rank
    evaluates its share and the sums are reduced.

    Args:
        max_windows: cap on the number of training windows (default: the validation set's size).
    """

    def __init__(self, max_windows: int | None = None) -> None:
        self.max_windows = max_windows

    def _windows(self, trainer: L.Trainer) -> SequentialWindows | RandomEvalBatches:
        dm = trainer.datamodule
        if dm.random_eval_batches is not None:  # the author's: as many random batches of train as of val
            return dm.eval_windows("train")
        n_val = SequentialWindows(dm.splits["val"], dm.block_size, dm.eval_batch_size, dm.max_eval_windows).num_windows
        n = min(n_val, self.max_windows or n_val)
        # a trainer told to evaluate fewer batches (fast_dev_run, limit_val_batches) gets as few training windows:
        # a fast_dev_run at the paper's size otherwise evaluates a whole split's worth of them
        evaluated = sum(trainer.num_val_batches) * dm.eval_batch_size * trainer.world_size
        if math.isfinite(evaluated):
            n = min(n, int(evaluated))
        return SequentialWindows(
            dm.splits["train"], dm.block_size, dm.eval_batch_size, n, trainer.global_rank, trainer.world_size
        )

    @torch.no_grad()
    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        totals = torch.zeros(2, device=pl_module.device, dtype=torch.float64)  # loss sum, targets
        # callback hooks run outside the precision plugin's autocast: enter it for this pass
        with trainer.precision_plugin.forward_context():
            for x, y in self._windows(trainer):
                x, y = x.to(pl_module.device), y.to(pl_module.device)
                logits = pl_module(x)
                totals[0] += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").double()
                totals[1] += y.numel()
        totals = trainer.strategy.reduce(totals, reduce_op="sum")  # every rank, no rank-zero block
        train_loss = (totals[0] / totals[1]).item()
        val_loss = pl_module.val_loss.compute().item()  # the module logs the same value as val/loss
        pl_module.log_dict(
            {"train_eval/loss": train_loss, "train_eval/bpc": train_loss / math.log(2), "gap": val_loss - train_loss},
            sync_dist=True,  # equal on every rank: the mean is a no-op (silences a warning)
        )
