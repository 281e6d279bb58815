"""The run's TensorBoard logger: Lightning's, without the constant ``epoch`` tag, and able to stamp an evaluation
of a checkpoint at that checkpoint's step in a run directory of its own (``<run>/validate``, ``<run>/test``)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.core.saving import save_hparams_to_yaml
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only


class RunLogger(TensorBoardLogger):
    """TensorBoardLogger with three changes.

    - No ``epoch`` scalar: the training data is one endless stream, so Lightning's epoch is 0 throughout and
      its card would open every dashboard with a flat line.
    - ``eval_step``: when set (by `ega validate` / `ega test`, from the checkpoint they evaluate), every
      metric is stamped at that step, the step at which the training run logged the same checkpoint's
      validation, instead of Lightning's 0 for an evaluation; with ``sub_dir`` the evaluation is a run of
      its own beside the training run, whose curves it never touches.
    - ``hparams.yaml`` is the model this fit built, as config.yaml is: Lightning writes it only where there is none,
      so a resume that ran another attention path kept the first fit's beside a config.yaml with the second's.
    """

    def __init__(self, *args: Any, eval_step: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.eval_step = eval_step

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        kept = {k: v for k, v in metrics.items() if k != "epoch"}
        super().log_metrics(kept, step if self.eval_step is None else self.eval_step)

    @rank_zero_only
    def save(self) -> None:
        super().save()
        path = Path(self.log_dir) / self.NAME_HPARAMS_FILE
        if not self.hparams or not path.is_file():
            return
        # written beside it and compared: a resume that changed nothing leaves the file's bytes as they were
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        fresh = Path(name)
        try:
            save_hparams_to_yaml(fresh, self.hparams)
            if fresh.read_bytes() != path.read_bytes():
                fresh.chmod(path.stat().st_mode & 0o777)  # mkstemp's 0600: the run's files keep the umask's
                os.replace(fresh, path)
        finally:
            fresh.unlink(missing_ok=True)
