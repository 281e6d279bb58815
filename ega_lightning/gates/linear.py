"""EGA-1: one learned linear energy projection per head (the paper's best gate)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ega_lightning.gates.base import Gate
from ega_lightning.gates.registry import register_gate


@register_gate("linear")
class LinearGate(Gate):
    """EGA-1: e_{h,j} = w_h . x_j.

    Parameters: d + 2 per head (w_h in R^d, tau_h, alpha_h), so n_head (d + 2) per layer.
    The bias b_h of the paper's projection is omitted: the z-normalisation cancels it.
    """

    def __init__(self, n_embd: int, n_head: int, tau_init: float = 0.0, alpha_init: float = 1.0) -> None:
        super().__init__(n_embd, n_head, tau_init, alpha_init)
        self.proj = nn.Linear(n_embd, n_head, bias=False)  # row h is w_h

    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, **options: Any) -> int:
        return n_head * (n_embd + 2)

    def input_projection(self) -> nn.Linear:
        return self.proj

    def energy_from_projection(self, p: torch.Tensor) -> torch.Tensor:
        return p.transpose(1, 2)  # (B, T, nh) -> (B, nh, T)

    def energy_is_projection(self) -> bool:
        return getattr(self.energy_from_projection, "__func__", None) is LinearGate.energy_from_projection

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return self.energy_from_projection(self.proj(x))
