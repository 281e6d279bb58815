"""Seeds derived from integers (run seed, rank, step), so randomness depends only on where a run is."""

from __future__ import annotations

import numpy as np


def derive_seed(*keys: int) -> int:
    """A well-mixed 64-bit seed from non-negative integers; the same keys always give the same seed."""
    hi, lo = np.random.SeedSequence(list(keys)).generate_state(2)
    return int(hi) << 32 | int(lo)
