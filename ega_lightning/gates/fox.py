"""FoX, the Forgetting Transformer's forget gate (Lin et al., ICLR 2025; the basic gate, not "FoX Pro")."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ega_lightning.gates.registry import register_gate
from ega_lightning.gates.slots import KeyBias


@register_gate("fox")
class ForgetGate(KeyBias):
    """FoX: f_t = sigmoid(w_h . x_t + b_h) per head; logits + sum_{l=j+1..i} log f_l.

    With C_t = sum_{l<=t} log f_l that sum is C_i - C_j, a per-key bias b_j = -C_j. The paper's
    initialisation: w_h ~ N(0, 0.02) (the model's init of every gate weight), b_h = 0, so f ~ 1/2 and b_j ~
    0.69 j at the start. Computed in fp32 even under autocast: C_j reaches ~88 at j = 128, where a bf16
    value is off by up to 0.5; the layer adds it in its padded channel, as EGA's log g, with that channel and
    its kernel in fp32 under bf16 too (see `KeyBias`). Parameters: n_head (n_embd + 1) per layer. A forget
    bias of +inf (f = 1) is plain attention.
    """

    diagnostic_titles: ClassVar[dict[str, str]] = {
        "forget": "forget gate f (mean over the validation's positions)",
        "memory": "effective memory 1 / (1 − mean f), in positions",
    }

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__(n_embd, n_head)
        self.proj = nn.Linear(n_embd, n_head, bias=True)  # row h is w_h, bias[h] is b_h

    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, **options: Any) -> int:
        return n_head * (n_embd + 1)

    def log_forget(self, x: torch.Tensor) -> torch.Tensor:
        """log f (B, nh, T) in fp32 from x (B, T, C)."""
        with torch.autocast(x.device.type, enabled=False):
            return F.logsigmoid(self.proj(x.float())).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return -self.log_forget(x).cumsum(-1)  # (B, nh, T): -C_j

    def step(self, x: torch.Tensor, state: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.log_forget(x).cumsum(-1)  # (B, nh, t)
        if state is not None:  # the state is C of the last position seen, (B, nh, 1)
            c = state + c
        return -c, c[..., -1:]

    def diagnostics(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"forget": self.log_forget(x).exp().sum(dim=(0, 2))}  # (nh,)

    @classmethod
    def derived(cls, means: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        # a key's weight decays by f per position: about 1 / (1 - f) positions are remembered
        return {"memory": 1.0 / (1.0 - means["forget"]).clamp_min(1e-6)}

    def set_identity(self) -> bool:
        with torch.no_grad():
            self.proj.weight.zero_()
            self.proj.bias.fill_(float("inf"))
        return True
