"""Hyper-parameters in TensorBoard's HPARAMS tab, next to each run's `val/loss`."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from torch.utils.tensorboard.summary import hparams


def _flatten(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        elif isinstance(value, (bool, int, float, str)):
            flat[name] = value
        elif value is not None:
            flat[name] = str(value)
    return flat


class HParamsSummary(L.Callback):
    """Writes the model and data hyper-parameters once, with `metrics` as the HPARAMS tab's columns.

    The columns show each metric's latest logged value, so `val/loss` reads as the final one.
    Lightning only writes this summary when it is given metrics, and it would also log them as
    a bogus scalar at step 0; this writes the summary alone.
    """

    def __init__(self, metrics: list[str] | None = None) -> None:
        self.metrics = metrics or ["val/loss", "val/bpc"]

    @rank_zero_only
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        params = {"model": dict(pl_module.hparams)}
        if trainer.datamodule is not None:
            params["data"] = dict(trainer.datamodule.hparams)
        params["model"].pop("vocab", None)  # a long string of symbols, not a hyper-parameter to compare
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                writer = logger.experiment.file_writer
                for summary in hparams(_flatten(params), dict.fromkeys(self.metrics, 0.0)):
                    writer.add_summary(summary)
