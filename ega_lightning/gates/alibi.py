"""ALiBi (Press et al. 2022) as a key bias: a fixed linear penalty on the distance to the key."""

from __future__ import annotations

from typing import Any

import torch

from ega_lightning.gates.registry import register_gate
from ega_lightning.gates.slots import KeyBias


@register_gate("alibi")
class ALiBi(KeyBias):
    """ALiBi: logits - m_h (i - j), slopes m_h = 2^(-8h/nh) for heads h = 1..nh; no parameters.

    As a per-key bias b_j = m_h j (the -m_h i is constant within query i's softmax). The learned
    absolute positions of the model stay (ALiBi's paper drops them), so the bias is the only difference
    to the baseline. Slopes 0 is plain attention.
    """

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__(n_embd, n_head)
        h = torch.arange(1, n_head + 1, dtype=torch.float32)
        # derived from n_head alone: not in the state dict
        self.register_buffer("slopes", torch.exp2(-8.0 * h / n_head), persistent=False)

    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, **options: Any) -> int:
        return 0

    def _bias(self, start: int, t: int) -> torch.Tensor:
        positions = torch.arange(start, start + t, device=self.slopes.device, dtype=torch.float32)
        return (self.slopes[:, None] * positions)[None]  # (1, nh, t)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._bias(0, x.shape[1])

    def step(self, x: torch.Tensor, state: int | None) -> tuple[torch.Tensor, int]:
        start = state or 0  # the state is the number of positions seen
        return self._bias(start, x.shape[1]), start + x.shape[1]

    def describe(self) -> str:
        return "ALiBi slopes m_h per head: " + ", ".join(f"{m:.4g}" for m in self.slopes.tolist())

    def set_identity(self) -> bool:
        self.slopes.zero_()
        return True
