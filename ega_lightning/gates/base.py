"""The part every energy gate shares: causal z-normalisation, the sigmoid gate, tau and alpha.

A gate maps the LayerNorm-ed hidden state x (B, T, C) that feeds an attention
layer to a log-gate (B, nh, T): one value per head and key position, added to
that key's attention logits (EGA_SPEC.md section 2). Subclasses only say how the
per-head energy e is estimated.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def causal_znorm(e: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """z_j = (e_j - mean(e_1..e_j)) / sqrt(var(e_1..e_j) + eps) along the last dim; z_1 = 0.

    Population variance over the prefix. Position j sees only positions <= j.
    """
    # z is shift-invariant; centring on the first value keeps the running sums small in fp32
    e = e - e[..., :1]
    n = torch.arange(1, e.shape[-1] + 1, device=e.device, dtype=e.dtype)
    mean = e.cumsum(-1) / n
    var = (e.square().cumsum(-1) / n - mean.square()).clamp_min(0.0)
    return (e - mean) / torch.sqrt(var + eps)


class Gate(nn.Module, ABC):
    """g_j = sigmoid(alpha_h (z_j - tau_h)) with z the causal z-norm of a per-head energy e_j.

    Every gate has the per-head scalars ``tau`` (threshold) and ``alpha`` (scale);
    ``params_per_layer`` gives a gate's exact parameter count per attention layer.
    ``receptive_field`` is how many positions (the current one included) the energy
    at a position depends on; cached generation keeps that many inputs per layer.
    """

    receptive_field: int = 1

    def __init__(self, n_embd: int, n_head: int, tau_init: float = 0.0, alpha_init: float = 1.0) -> None:
        super().__init__()
        self.n_embd, self.n_head = n_embd, n_head
        self.tau = nn.Parameter(torch.full((n_head,), float(tau_init)))
        self.alpha = nn.Parameter(torch.full((n_head,), float(alpha_init)))

    @classmethod
    @abstractmethod
    def params_per_layer(cls, n_embd: int, n_head: int, **options: Any) -> int:
        """Exact number of parameters this gate adds to one attention layer, for these init options."""

    @abstractmethod
    def energy(self, x: torch.Tensor) -> torch.Tensor:
        """Per-head energy (B, nh, T) of the LayerNorm-ed hidden state x (B, T, C)."""

    def z(self, x: torch.Tensor) -> torch.Tensor:
        """Causally z-normalised energy (B, nh, T), computed in fp32 even under autocast."""
        with torch.autocast(x.device.type, enabled=False):
            return causal_znorm(self.energy(x.float()).float())

    def log_gate_from_z(self, z: torch.Tensor) -> torch.Tensor:
        # log sigmoid(a) = -softplus(-a), stable for large |a|
        return -F.softplus(-self.alpha[:, None] * (z - self.tau[:, None]))

    def penalty(self) -> torch.Tensor | None:
        """An extra training loss term (e.g. a constraint on learned filters), or None."""
        return None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """log g (B, nh, T) in fp32."""
        with torch.autocast(x.device.type, enabled=False):
            return self.log_gate_from_z(self.z(x))
