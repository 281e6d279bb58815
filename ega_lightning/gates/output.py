"""The output gate of "Gated Attention for LLMs" (Qiu et al., NeurIPS 2025, position G1), headwise and elementwise."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from ega_lightning.gates.registry import register_gate
from ega_lightning.gates.slots import OutputGate


class _Diagnosed(OutputGate):
    """An output gate's mean factor per head, for TensorBoard."""

    diagnostic_titles: ClassVar[dict[str, str]] = {"output_gate": "output gate factor (mean over positions)"}

    def diagnostics(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"output_gate": self(x).float().mean(dim=-1).sum(dim=(0, 2))}  # (B, nh, T, 1 or hs) -> (nh,)


@register_gate("output_headwise")
class HeadwiseOutputGate(_Diagnosed):
    """Output gate, headwise: y_h,i * sigmoid(x_i . w_h), one factor per head and position.

    x is the layer's LayerNorm-ed input; W in R^{C x nh}, no bias: n_embd n_head parameters per layer.
    """

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__(n_embd, n_head)
        self.proj = nn.Linear(n_embd, n_head, bias=False)

    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, **options: Any) -> int:
        return n_embd * n_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.proj(x)).transpose(1, 2)[..., None]  # (B, nh, T, 1)


@register_gate("output_elementwise")
class ElementwiseOutputGate(_Diagnosed):
    """Output gate, elementwise: y_i * sigmoid(x_i W), one factor per channel and position.

    x is the layer's LayerNorm-ed input; W in R^{C x C}, no bias: n_embd^2 parameters per layer.
    """

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__(n_embd, n_head)
        self.proj = nn.Linear(n_embd, n_embd, bias=False)

    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, **options: Any) -> int:
        return n_embd * n_embd

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        return torch.sigmoid(self.proj(x)).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
