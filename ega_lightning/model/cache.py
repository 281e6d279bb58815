"""Cached generation: the key/value cache (one `LayerCache` per attention layer) and the attention of the
positions that follow the cached ones (`cached_attention`), on the padded layout of `model.fused`
whichever path (``model.attention``) the model was built with.

With RoPE the new positions are rotated as the positions after the cached ones (``cache.length`` on), and the
cached keys keep the rotation they were stored with; a fresh cache (generation's rebuild from the last
half-window, `generation.next_token_logits`) numbers its window from 0 again, which changes no logit beyond
float rounding: RoPE's q_m . k_n depends on m - n alone."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ega_lightning.gates import Gate, GateState, relative_bias
from ega_lightning.model import fused
from ega_lightning.model.attention import CausalSelfAttention
from ega_lightning.model.fused import (
    channel_floor,
    folded_projection,
    full_precision_kernel,
    pad_width,
    padded_proj_weight,
    padded_qkv_weights,
    project_padded,
    refuse_dropout_first,
    rotate_padded,
    write_key_channel,
)


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


def cached_attention(layer: CausalSelfAttention, x: torch.Tensor, cache: LayerCache) -> torch.Tensor:
    """What ``layer`` computes for x (B, t, C), the LayerNorm-ed hidden state of the t positions that follow
    the cached ones, over every cached key -> (B, t, C); the cache is extended by the new keys and values,
    and the key gate's state by the new positions (the gate's `step`)."""
    dropout_p = layer.dropout if layer.training else 0.0
    refuse_dropout_first(layer, dropout_p, "cached")
    hs = layer.n_embd // layer.n_head
    kernel32 = getattr(layer, "fp32_kernel", True)  # the fused path's option (`FusedAttention`); else its default
    if layer.gate is None:
        q, k, v = layer.heads(x, cache.length)  # (B, nh, t, hs), RoPE at the positions after the cached ones
        y = layer.project(_attend(q, k, v, cache, hs), x)
    elif not fused.rides_channel(layer.gate, x, kernel32):
        y = layer.project(_key_biased(layer, x, cache, dropout_p), x)
    else:
        q, k, v = rotate_padded(layer, *_gated_qkv(layer, x, cache), start=cache.length)  # 3 x (B, nh, t, hs + width)
        y = _attend(q, k, v, cache, hs)
        if layer.output_gate is not None:  # the gate's factor is per true channel: y back to hs of them
            y = layer.project(y[..., :hs], x)
        else:
            weight = cache.reuse("proj", lambda: padded_proj_weight(layer.c_proj.weight, layer.n_head, y.shape[-1]))
            y = project_padded(y, layer.c_proj, weight)
    return layer.resid_dropout(y)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: LayerCache, hs: int) -> torch.Tensor:
    """SDPA of (B, nh, t, d) new q, k, v over every cached key and the new ones, scaled by the true head size."""
    scale = 1.0 / math.sqrt(hs)
    t_new = q.shape[2]
    k, v = cache.append(k, v)  # (B, nh, T_cached + t_new, d)
    if t_new == 1:  # one new query sees every key: no mask needed
        visible = None
    else:  # new query i sits at position T_all - t_new + i and sees every key up to it
        positions = torch.arange(cache.length, device=q.device)
        visible = positions[None, :] <= positions[cache.length - t_new :, None]
    with full_precision_kernel(q):  # fp32 q, k, v under autocast (`fused.fp32_kernel`) stay fp32
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=scale)


def _key_biased(layer: CausalSelfAttention, x: torch.Tensor, cache: LayerCache, dropout_p: float) -> torch.Tensor:
    """Attention (B, nh, t, hs) with a key bias's relative term b_j - b_i over the cached keys and the new ones,
    where `fused.rides_channel` keeps it out of the padded channel; the cache keeps the keys' b."""
    q, k, v = layer.heads(x, cache.length)  # (B, nh, t, hs)
    b, cache.gate = layer.gate.step(x, cache.gate)  # b of the new positions only
    keys = cache.append_bias(b)  # (B or 1, nh, T_cached + t)
    k, v = cache.append(k, v)
    bias = relative_bias(b, keys)  # (B or 1, nh, t, T_all), -inf above the diagonal
    scale = 1.0 / math.sqrt(layer.n_embd // layer.n_head)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), dropout_p=dropout_p, scale=scale)


def _gated_qkv(layer: CausalSelfAttention, x: torch.Tensor, cache: LayerCache) -> tuple[torch.Tensor, ...]:
    """q', k', v' (B, nh, t, hs + width) of the new positions on the padded layout (`fused.FusedAttention`'s
    `_gated_qkv`), k's channel holding the new keys' log g (or b) from the gate's incremental state."""
    _, T, C = x.shape
    nh, hs = layer.n_head, C // layer.n_head
    layout = (T, nh, hs, hs + (layer.pad_width or pad_width(x.device)))
    gate, projection = layer.gate, folded_projection(layer.gate, nh, x)  # (nh, C) or None
    weight, bias = cache.reuse(
        "qkv", lambda: padded_qkv_weights(layer.c_attn.weight, layer.c_attn.bias, projection, layout)
    )

    def log_gate(folded: torch.Tensor | None) -> torch.Tensor:  # only the new keys' gates
        log_g, cache.gate = gate.step(x, cache.gate, folded) if isinstance(gate, Gate) else gate.step(x, cache.gate)
        return log_g

    qkv = F.linear(x, weight, bias)
    if fused.fp32_kernel(gate, x, getattr(layer, "fp32_kernel", True)):
        qkv = qkv.float()
    return write_key_channel(qkv, layout, channel_floor(gate), projection is not None, log_gate)
