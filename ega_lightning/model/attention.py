"""Causal self-attention, plain or energy-gated.

Two implementations of the gated attention of EGA_SPEC.md section 2:

- ``reference``: the spec's formula written out. softmax over j <= i, multiply
  by g_j, renormalise. Quadratic memory; the tests' ground truth.
- ``fused``: the identity a'_ij = softmax_j(q_i.k_j / sqrt(hs) + log g_j). The
  log-gate rides in one extra query/key channel, q' = [q, 1] and
  k' = [k, log g * sqrt(hs)], so attention stays on the fused causal SDPA kernel.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ega_lightning.gates import Gate

ATTENTION_IMPLS = ("fused", "reference")

# exp(-30) ~ 1e-13: a key gated that far down is already gone, and bf16 keeps the
# clamped value to within its usual relative precision.
LOG_GATE_FLOOR = -30.0


def gated_attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None, dropout_p: float = 0.0
) -> torch.Tensor:
    """q, k, v (B, nh, T, hs); g (B, nh, T) gate values or None -> (B, nh, T, hs)."""
    T, hs = q.shape[-2], q.shape[-1]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)  # (B, nh, T, T)
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
    if g is not None:
        att = att * g[:, :, None, :].to(att.dtype)  # a_ij g_j
        att = att / att.sum(dim=-1, keepdim=True)  # renormalise over k <= i
    att = F.dropout(att, p=dropout_p)
    return att @ v


def gated_attention_fused(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_g: torch.Tensor, dropout_p: float = 0.0
) -> torch.Tensor:
    """q, k, v (B, nh, T, hs); log_g (B, nh, T) -> (B, nh, T, hs), on the causal SDPA kernel."""
    hs = q.shape[-1]
    # CUDA's fused kernels want a head size that is a multiple of 8; the CPU kernel takes any.
    extra = 8 if q.is_cuda else 1
    bias = (log_g.clamp_min(LOG_GATE_FLOOR) * math.sqrt(hs)).to(q.dtype)[..., None]  # (B, nh, T, 1)
    q_pad = q.new_zeros(*q.shape[:-1], extra)
    k_pad = k.new_zeros(*k.shape[:-1], extra)
    q_pad[..., 0] = 1.0
    k_pad[..., :1] = bias
    q2 = torch.cat([q, q_pad], dim=-1)  # (B, nh, T, hs + extra)
    k2 = torch.cat([k, k_pad], dim=-1)
    v2 = torch.cat([v, v.new_zeros(*v.shape[:-1], extra)], dim=-1)
    y = F.scaled_dot_product_attention(q2, k2, v2, dropout_p=dropout_p, is_causal=True, scale=1.0 / math.sqrt(hs))
    return y[..., :hs]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with an optional energy gate on the keys."""

    def __init__(
        self, n_embd: int, n_head: int, dropout: float, bias: bool, gate: Gate | None, impl: str = "fused"
    ) -> None:
        super().__init__()
        if impl not in ATTENTION_IMPLS:
            raise ValueError(f"Unknown attention implementation {impl!r}; choose one of {ATTENTION_IMPLS}.")
        self.n_head, self.n_embd, self.dropout, self.impl = n_head, n_embd, dropout, impl
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)
        self.gate = gate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: the LayerNorm-ed hidden state (B, T, C) -> (B, T, C)."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        dropout_p = self.dropout if self.training else 0.0
        if self.gate is None:
            if self.impl == "reference":
                y = gated_attention_reference(q, k, v, None, dropout_p)
            else:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
        else:
            log_g = self.gate(x)  # (B, nh, T), fp32
            if self.impl == "reference":
                y = gated_attention_reference(q, k, v, log_g.exp(), dropout_p)
            else:
                y = gated_attention_fused(q, k, v, log_g, dropout_p)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.resid_dropout(self.c_proj(y))
