"""Checkpoint files that are either complete or absent: a kill during a save never corrupts one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ega_lightning.errors import UserError
from ega_lightning.io import atomic_file


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """A checkpoint written by `ega fit`, loaded without running any code from the file.

    Raises:
        UserError: the file is missing, is not a checkpoint (random bytes, another program's file), or
            is truncated; never the advice to load it with ``weights_only=False``.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--ckpt_path {path}: no such file. Give a checkpoint of a run, e.g. {_EXAMPLE}.")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises many types here (pickle, zip, EOF, its own unpickler errors)
        raise UserError(
            f"{path} is not a checkpoint that ega-lightning wrote, or it is truncated or corrupt "
            f"({type(err).__name__}). Use a checkpoint of a run, e.g. {_EXAMPLE}; a run killed during a save "
            "keeps its previous last.ckpt intact."
        ) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "hyper_parameters" not in ckpt:
        raise UserError(
            f"{path} loads, but it is not a checkpoint that `ega fit` wrote (no state_dict or hyper_parameters). "
            f"Use a checkpoint of a run, e.g. {_EXAMPLE}."
        )
    return ckpt


_EXAMPLE = "lightning_logs/<run>/checkpoints/best.ckpt"


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes a temporary file beside the target, fsyncs it, then renames it over the target.

    The rename is atomic on a POSIX filesystem, and the temporary file is in the target's own
    directory (Lightning's default goes through a temporary file in /tmp, which becomes a
    non-atomic copy when /tmp is another filesystem, e.g. in a container with a mounted volume).
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} does not take storage_options, got {storage_options!r}.")
        with atomic_file(path, "wb") as fh:
            torch.save(checkpoint, fh)
