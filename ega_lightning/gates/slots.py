"""The two places a gate can sit in an attention layer, as two base classes.

- A **key bias** (`KeyBias`, ``model.gate``) adds a per-key term to every query's logits. Here b is a
  per-key bias (B or 1, nh, T) and the logit of query i for key j <= i becomes

      s_ij + b_j - b_i

  Within one query's softmax b_i is a constant, so this is exactly "add b_j"; subtracting it keeps the added
  term relative and small near the diagonal, where it matters, whatever the size of b itself (FoX's b_j
  grows like 0.69 j). The attention layer adds b_j as it is, in its padded query/key channel, where b is
  learnable (that channel and its kernel in fp32, which keeps it, under bf16 too), and b_j - b_i otherwise
  (`ega_lightning.model.fused.rides_channel`, the one rule). ALiBi and FoX's forget gate are key biases. The
  energy gates of the EGA family (`ega_lightning.gates.Gate`) are key biases too, with b = log g <= 0 added
  as it is: they take their own fused paths in the attention layer and keep tau, alpha and the z-norm.
- An **output gate** (`OutputGate`, ``model.output_gate``) multiplies the attention's output per head,
  before the output projection: y'_i = y_i * sigmoid(x_i W) (Qiu et al. 2025, position G1).

A model may have one of each. Each gate carries only its own parameters and generation state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
from torch import nn


class SlotGate(nn.Module, ABC):
    """What every gate of either slot has: its layer's shape, its exact parameter count, an optional penalty."""

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_embd, self.n_head = n_embd, n_head

    @classmethod
    @abstractmethod
    def params_per_layer(cls, n_embd: int, n_head: int, **options: Any) -> int:
        """Exact number of parameters this gate adds to one attention layer, for these init options."""

    def penalty(self) -> torch.Tensor | None:
        """An extra training loss term (e.g. a constraint on learned filters), or None."""
        return None

    # What TensorBoard shows of the gate, logged at every validation by the `TauTracker` callback as
    # ``gate/<name>/layer_L/head_H`` and drawn per layer in the run's Custom Scalars layout: name -> chart title.
    # A gate of your own adds its names here and returns them from `diagnostics` (and `derived`).
    diagnostic_titles: ClassVar[dict[str, str]] = {}

    def diagnostics(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per head (nh,) sums over the B * T positions of the layer's LayerNorm-ed input x (B, T, C) of each
        quantity the gate reports; the callback divides them by the positions seen over the validation."""
        return {}

    @classmethod
    def derived(cls, means: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Quantities computed from the validation means of `diagnostics` (each (n_layer, nh)), e.g. FoX's memory."""
        return {}

    def describe(self) -> str | None:
        """What the gate fixes once (ALiBi's slopes), logged as text at the start of fit; None: nothing."""
        return None


class KeyBias(SlotGate):
    """A per-key bias b (B or 1, nh, T) on the attention logits, applied relatively: s_ij + b_j - b_i.

    A bias with parameters to learn is added as b_j in an fp32 layer (see the module docstring), so its
    rounding there is fp32's at |b_j|: 6e-5 at 590, FoX's -C_j at T = 256 with f = 0.1.

    ``step`` is the incremental form of ``forward`` for cached generation, ``state`` whatever the gate
    carries between steps (None before the first).
    """

    receptive_field: int = 1

    @abstractmethod
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """b (B or 1, nh, T) in fp32 from the LayerNorm-ed hidden state x (B, T, C)."""

    @abstractmethod
    def step(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """b (B or 1, nh, t) of t new positions x (B, t, C) that follow ``state``, and the new state."""

    def set_identity(self) -> bool:
        """Sets the gate to plain attention (b constant over keys), if it has such a setting; False if not."""
        return False


class OutputGate(SlotGate):
    """A factor on the attention output of each head, from the layer's LayerNorm-ed input x."""

    @abstractmethod
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The factor (B, nh, T, 1) or (B, nh, T, hs) from x (B, T, C); position i reads only x_i."""


def relative_bias(b_queries: torch.Tensor, b_keys: torch.Tensor) -> torch.Tensor:
    """(B or 1, nh, t, T) fp32: b_j - b_i for the t last positions i of the T keys j, -inf where j > i."""
    t, T = b_queries.shape[-1], b_keys.shape[-1]
    bias = b_keys.float()[..., None, :] - b_queries.float()[..., :, None]  # (., nh, t, T)
    positions = torch.arange(T, device=b_keys.device)
    future = positions[None, :] > positions[T - t :, None]  # (t, T)
    return bias.masked_fill(future, float("-inf"))
