"""The run's TensorBoard logger: Lightning's, without the constant ``epoch`` tag, and able to stamp an evaluation
of a checkpoint at that checkpoint's step in a run directory of its own (``<run>/validate``, ``<run>/test``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only


class RunLogger(TensorBoardLogger):
    """TensorBoardLogger with two changes.

    - No ``epoch`` scalar: the training data is one endless stream, so Lightning's epoch is 0 throughout and
      its card would open every dashboard with a flat line.
    - ``eval_step``: when set (by `ega validate` / `ega test`, from the checkpoint they evaluate), every
      metric is stamped at that step, the step at which the training run logged the same checkpoint's
      validation, instead of Lightning's 0 for an evaluation; with ``sub_dir`` the evaluation is a run of
      its own beside the training run, whose curves it never touches.
    """

    def __init__(self, *args: Any, eval_step: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.eval_step = eval_step

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        kept = {k: v for k, v in metrics.items() if k != "epoch"}
        super().log_metrics(kept, step if self.eval_step is None else self.eval_step)
