"""EGA-K: K learned linear energy projections of causal moving averages of x (the paper's EGA-2, EGA-4)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ega_lightning.gates.base import Gate
from ega_lightning.gates.registry import register_gate


def causal_moving_average(x: torch.Tensor, window: int) -> torch.Tensor:
    """xbar_j = mean(x_{j-window+1}, ..., x_j) along the last dim; position j sees only positions <= j.

    DECISION (EGA_SPEC.md section 3 leaves it open): the first window - 1 positions
    average over the positions they have, x_1..x_j, rather than over zero padding, so
    every xbar_j is an average of real tokens and keeps the scale of x.
    """
    if window == 1:
        return x  # exactly, not up to the rounding of a cumsum difference: K = 1 is then bit-identical to EGA-1
    T = x.shape[-1]
    window = min(window, T)  # the same average (every start clamps to 0), and 2**k stays an int64 for any k
    csum = torch.cat([torch.zeros_like(x[..., :1]), x.cumsum(-1)], dim=-1)  # (..., T + 1), csum[i] = x_1 + .. + x_i
    end = torch.arange(1, T + 1, device=x.device)  # window (start, end] in csum indices
    start = (end - window).clamp_min(0)
    return (csum[..., end] - csum[..., start]) / (end - start).to(x.dtype)


@register_gate("multiscale")
class MultiScaleGate(Gate):
    """EGA-K: e_{h,j} = sum_{k=0}^{K-1} w_{h,k} . xbar^(k)_j, xbar^(k) the causal moving average over 2^k tokens.

    K = ``scales`` (EGA-2: K = 2, EGA-4: K = 4); K = 1 is EGA-1, the ``linear`` gate.
    Parameters: K d + 2 per head (w_{h,0..K-1} in R^d, tau_h, alpha_h), so n_head (K d + 2)
    per layer. The energy at j depends on the last 2^(K-1) positions.
    """

    def __init__(
        self, n_embd: int, n_head: int, tau_init: float = 0.0, alpha_init: float = 1.0, scales: int = 2
    ) -> None:
        super().__init__(n_embd, n_head, tau_init, alpha_init)
        if isinstance(scales, bool) or not isinstance(scales, int) or scales < 1:
            raise ValueError(f"multiscale gate: scales must be an integer >= 1, got {scales!r}.")
        self.scales = scales
        self.receptive_field = 2 ** (scales - 1)
        self.proj = nn.Linear(n_embd, scales * n_head, bias=False)  # row k * n_head + h is w_{h,k}

    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, scales: int = 2, **options: Any) -> int:
        return n_head * (scales * n_embd + 2)

    def input_projection(self) -> nn.Linear:
        return self.proj

    def energy_from_projection(self, p: torch.Tensor) -> torch.Tensor:
        B, T, _ = p.shape
        p = p.view(B, T, self.scales, self.n_head).permute(0, 2, 3, 1)  # (B, K, nh, T)
        return sum(causal_moving_average(p[:, k], 2**k) for k in range(self.scales))  # (B, nh, T)

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        # w . mean(x) = mean(w . x): projecting first averages K * nh channels instead of K * C
        return self.energy_from_projection(self.proj(x))
