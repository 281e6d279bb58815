"""Argument values the tools share: a seed, a torch device. No torch at import (the tools' --help)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ega_lightning.errors import UserError

if TYPE_CHECKING:
    import torch


def seed(text: str) -> int:
    """argparse type of the tools' --seed: an integer torch.manual_seed takes, said as a usage error if not."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{value} is not in [0, 2**63)")
    return value


def usable_device(name: str) -> torch.device:
    """``name`` as a torch device this machine has; a UserError saying which it has otherwise (a device it
    lacks fails here, not deep in loading a model or after a benchmark)."""
    import torch

    try:
        device = torch.device(name)
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as err:  # an unknown name, a missing device; torch without CUDA asserts
        raise UserError(
            f"--device {name} cannot be used on this machine ({str(err).splitlines()[0]}). "
            f"Use --device cpu{', or cuda' if torch.cuda.is_available() else ''}."
        ) from None
    return device
