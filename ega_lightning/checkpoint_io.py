"""Checkpoint files that are either complete or absent: a kill during a save never corrupts one."""

from __future__ import annotations

from typing import Any

import torch
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ega_lightning.io import atomic_file


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
