"""Seeds derived from integers (run seed, rank, step), so randomness depends only on where a run is."""

from __future__ import annotations

import argparse

import numpy as np


def derive_seed(*keys: int) -> int:
    """A well-mixed 64-bit seed from non-negative integers; the same keys always give the same seed."""
    hi, lo = np.random.SeedSequence(list(keys)).generate_state(2)
    return int(hi) << 32 | int(lo)


def seed_argument(text: str) -> int:
    """argparse type of the tools' --seed: an integer torch.manual_seed takes, said as a usage error if not."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{value} is not in [0, 2**63)")
    return value
