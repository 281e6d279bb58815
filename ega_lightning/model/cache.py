"""Cached generation's state: one `LayerCache` per attention layer, which each attention class fills on its own
layout (litgpt's ``input_pos``: `CausalSelfAttention.forward(x, cache)`; the reference path keeps its keys as they
are, the fused one on its padded layout).

With a rotating position encoding (RoPE) the new positions are rotated as the positions after the cached ones
(``cache.length`` on), and the cached keys keep the rotation they were stored with; a fresh cache (generation's
rebuild from the last half-window, `generation.next_token_logits`) numbers its window from 0 again, which changes
no logit beyond float rounding: RoPE's q_m . k_n depends on m - n alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ega_lightning.gates import GateState


@dataclass
class LayerCache:
    """One layer's state during generation: keys and values on the layer's path's layout (the fused path's gated
    keys carry the log-gate channel, fixed once computed since the gate is causal), the key gate's per-key value
    where the path keeps it apart (`bias`), and the gate's own state. The buffers hold `capacity` positions,
    filled in place."""

    capacity: int
    k: torch.Tensor | None = None  # (B, nh, capacity, d); positions [0, length) are filled
    v: torch.Tensor | None = None
    length: int = 0
    gate: GateState | Any = None  # the key gate's generation state
    bias: torch.Tensor | None = None  # (B or 1, nh, capacity): the cached keys' b (or log g, the reference path's)
    weights: dict[str, Any] = field(default_factory=dict)  # padded weights, built once per generation

    def reuse(self, name: str, build: Callable[[], Any]) -> Any:
        """``build()`` the first time ``name`` is asked for, the stored result after that: in generation the
        weights do not change."""
        if name not in self.weights:
            self.weights[name] = build()
        return self.weights[name]

    def append_bias(self, b: torch.Tensor) -> torch.Tensor:
        """Stores a key bias's b (B or 1, nh, t) of the new keys (before `append` counts them); returns all so far."""
        if self.bias is None:
            self.bias = b.new_empty(*b.shape[:2], self.capacity)
        end = self.length + b.shape[-1]
        self.bias[..., self.length : end] = b
        return self.bias[..., :end]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Stores new keys and values (B, nh, t, d); returns all of them so far."""
        if self.k is None:
            self.k = k.new_empty(*k.shape[:2], self.capacity, k.shape[3])
            self.v = v.new_empty(*v.shape[:2], self.capacity, v.shape[3])
        end = self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"The cache holds {self.capacity} positions; {end} do not fit. Start a new cache.")
        self.k[:, :, self.length : end] = k
        self.v[:, :, self.length : end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]
