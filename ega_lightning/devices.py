"""The torch device a tool was asked for, checked once where its arguments are read."""

from __future__ import annotations

import torch

from ega_lightning.errors import UserError


def usable_device(name: str) -> torch.device:
    """``name`` as a torch device this machine has; a UserError saying which it has otherwise (a device it
    lacks fails here, not deep in loading a model or after a benchmark)."""
    try:
        device = torch.device(name)
        torch.empty(0, device=device)
        if device.type in NO_DATA:
            raise RuntimeError(f"a {device.type} tensor holds no data: no weights load there, nothing is computed")
    except (RuntimeError, AssertionError) as err:  # an unknown name, a missing device; torch without CUDA asserts
        raise UserError(
            f"--device {name} cannot be used on this machine ({str(err).splitlines()[0]}). "
            f"Use --device cpu{', or cuda' if torch.cuda.is_available() else ''}."
        ) from None
    return device


# torch's device types that hold shapes but no values: a tool's model cannot run there
NO_DATA = ("meta",)
