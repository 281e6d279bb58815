"""A gate of your own, and a broken copy of it: see docs/your-own-gate.md.

Put this file in the directory you run `ega` from (or its directory on PYTHONPATH), then
`ega check-gate my_gates.AbsEnergyGate` and `ega fit --model.gate=my_gates.AbsEnergyGate`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ega_lightning.gates import Gate


class AbsEnergyGate(Gate):
    """e_{h,j} = sum_c u_{h,c} |x_{c,j}|: a learned per-head weighting of the magnitudes at position j.

    Parameters: d + 2 per head (u_h in R^d, tau_h, alpha_h), so n_head (d + 2) per layer.
    The energy reads position j only, so ``receptive_field`` keeps its default of 1.
    """

    def __init__(self, n_embd: int, n_head: int, tau_init: float = 0.0, alpha_init: float = 1.0) -> None:
        super().__init__(n_embd, n_head, tau_init, alpha_init)
        self.u = nn.Linear(n_embd, n_head, bias=False)  # row h is u_h

    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, **options: Any) -> int:
        return n_head * (n_embd + 2)

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return self.u(x.abs()).transpose(1, 2)  # (B, T, nh) -> (B, nh, T)


class LeakyAbsEnergyGate(AbsEnergyGate):
    """Deliberately wrong, to show what `ega check-gate` catches: x is centred on its mean over the
    whole window before the magnitudes are taken, and that mean includes positions after j. Such a
    gate trains (to a loss that looks better than it is) but reads the future."""

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return super().energy(x - x.mean(dim=1, keepdim=True))  # (B, T, C) centred over all of T: a leak
