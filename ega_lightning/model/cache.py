"""The key/value cache of cached generation: one `LayerCache` per attention layer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ega_lightning.gates import GateState


@dataclass
class LayerCache:
    """One layer's state during generation: keys and values as the kernel sees them (a gated
    layer's keys carry the log-gate channel, fixed once computed since the gate is causal)
    and the gate's own state. The key/value buffers hold `capacity` positions, filled in place."""

    capacity: int
    k: torch.Tensor | None = None  # (B, nh, capacity, d); positions [0, length) are filled
    v: torch.Tensor | None = None
    length: int = 0
    gate: GateState | Any = None  # the key gate's generation state
    bias: torch.Tensor | None = None  # (B or 1, nh, capacity): a key bias's b of the cached keys
    weights: dict[str, Any] = field(default_factory=dict)  # padded weights, built once per generation

    def reuse(self, name: str, build: Callable[[], Any]) -> Any:
        """``build()`` the first time ``name`` is asked for, the stored result after that."""
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


def built_once_per_cache(cache: LayerCache | None, name: str, build: Callable[[], Any]) -> Any:
    """build() in training, where the weights change every step; in generation, where they do not, the
    cache's copy (built on its first step)."""
    return build() if cache is None else cache.reuse(name, build)
