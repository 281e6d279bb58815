"""Causal self-attention, plain or gated: the formula, written out (the reference path).

A layer may have a key gate (``gate``) and an output gate (``output_gate``), see `gates.slots`:

- an energy gate (EGA_SPEC.md section 2) multiplies each key's attention weight by its gate g_j in
  (0, 1] and renormalises: a'_ij = a_ij g_j / sum_k<=i a_ik g_k;
- a key bias that is not an energy gate (ALiBi, FoX) adds b_j - b_i to the logits, in fp32 (the same
  softmax as adding b_j);
- an output gate multiplies each head's output before c_proj.

`CausalSelfAttention` (``attention=reference``) computes exactly that: the tests' ground truth. The
fast paths compute the same faster, each a subclass chosen when the model is built (`gpt.ATTENTION`) and
tested against this one (tests/test_model.py, test_runtime_paths.py, test_peer_gates.py):

- `fused.FusedAttention` (``fused``, the default): the fused causal SDPA kernel; an energy gate's log g
  rides in an extra query/key channel of that kernel (the padded layout, `model.fused`);
- `flex.FlexAttention` (``flex``): the gate as a FlexAttention ``score_mod`` (`model.flex`);
- cached generation: each path's ``forward(x, cache)``, the keys and values of earlier positions kept in a
  `LayerCache` on the path's own layout (here q, k, v as `heads` gives them, the key gate's per-key value beside).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ega_lightning.gates import Gate, KeyBias, OutputGate, relative_bias
from ega_lightning.model.cache import LayerCache
from ega_lightning.model.config import GPTConfig
from ega_lightning.model.position import Position, build_position


def gated_attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None, dropout_p: float = 0.0
) -> torch.Tensor:
    """q (B, nh, t, hs), k, v (B, nh, T, hs): the last t of T positions query them all; g (B, nh, T) gate values or
    None -> (B, nh, t, hs)."""
    t, T, hs = q.shape[-2], k.shape[-2], q.shape[-1]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)  # (B, nh, t, T)
    causal = torch.ones(t, T, dtype=torch.bool, device=q.device).tril(T - t)  # query i sits at position T - t + i
    att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
    if g is not None:
        att = att * g[:, :, None, :].to(att.dtype)  # a_ij g_j
        att = att / att.sum(dim=-1, keepdim=True)  # renormalise over k <= i
    att = F.dropout(att, p=dropout_p)
    return att @ v


# the author's floor under a renormalised row's sum (`dropout_first_attention_reference`): a row whose every kept
# key dropout dropped is all zeros, so its output is 0, not NaN
RENORMALISE_FLOOR = 1e-8


def dropout_first_attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, dropout_p: float = 0.0
) -> torch.Tensor:
    """The author's order: dropout on the attention weights first, then times the gate, then renormalise.

    q (B, nh, t, hs), k, v (B, nh, T, hs) (the last t of T positions query them all); g (B, nh, T) -> (B, nh, t,
    hs). a'_ij = d_ij a_ij g_j / max(sum_k d_ik a_ik g_k, 1e-8) with d the dropout mask scaled by 1 / (1 - p): the
    renormalisation also undoes dropout's scaling. At p = 0 it is `gated_attention_reference` (up to the floor,
    which only a row of gates < 1e-8 reaches).
    """
    t, T, hs = q.shape[-2], k.shape[-2], q.shape[-1]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)  # (B, nh, t, T)
    causal = torch.ones(t, T, dtype=torch.bool, device=q.device).tril(T - t)
    att = F.dropout(att.masked_fill(~causal, float("-inf")).softmax(dim=-1), p=dropout_p)
    att = att * g[:, :, None, :].to(att.dtype)  # d_ij a_ij g_j
    att = att / att.sum(dim=-1, keepdim=True).clamp_min(RENORMALISE_FLOOR)
    return att @ v


def biased_attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, dropout_p: float = 0.0
) -> torch.Tensor:
    """q (B, nh, t, hs), k, v (B, nh, T, hs); bias (B or 1, nh, t, T) added to the logits, -inf where masked."""
    att = (q @ k.transpose(-2, -1)).float() / math.sqrt(q.shape[-1]) + bias  # (B, nh, t, T), fp32
    att = F.dropout(att.softmax(dim=-1), p=dropout_p)
    return att.to(v.dtype) @ v


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with an optional gate on the keys and one on the output: the reference
    path, which materialises the (T, T) weights. Every option comes from the model's `GPTConfig`."""

    impl: ClassVar[str] = "reference"  # the name model.attention gives this path

    def __init__(
        self,
        cfg: GPTConfig,
        gate: KeyBias | None = None,
        output_gate: OutputGate | None = None,
        position: Position | None = None,
    ) -> None:
        """``position``: the model's position encoding (`GPT` builds one and hands it to every layer; None: one of
        ``cfg.position`` of the layer's own, for a layer built alone). Held as a plain attribute, not a submodule,
        so the parameters of the learned one stay the model's ``wpe``."""
        super().__init__()
        if cfg.dropout_before_gate and not isinstance(gate, Gate):
            raise ValueError("dropout_before_gate orders dropout and an energy gate; this layer has no energy gate.")
        self.cfg = cfg
        self.n_head, self.n_embd, self.dropout = cfg.n_head, cfg.n_embd, cfg.dropout
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.qkv_has_bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.gate = gate
        self.output_gate = output_gate
        self.position = build_position(cfg) if position is None else position
        # extra channels per head of the padded layout that the fused path and cached generation run (`model.fused`);
        # None: `fused.pad_width` of the input's device. Tests set 8 to run the CUDA layout on CPU.
        self.pad_width: int | None = None

    def forward(self, x: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        """x: the LayerNorm-ed hidden state (B, T, C) -> (B, T, C); with a `cache`, x holds the positions that
        follow the cached ones (`cached`)."""
        dropout_p = self.dropout if self.training else 0.0
        if cache is not None:
            return self.resid_dropout(self.cached(x, cache, dropout_p))
        q, k, v = self.heads(x)  # (B, nh, T, hs) each
        if self.gate is None:
            y = gated_attention_reference(q, k, v, None, dropout_p)  # softmax(q k^T / sqrt(hs)), j <= i
        elif isinstance(self.gate, Gate):
            g = self.gate(x).exp()  # (B, nh, T): the gate of each key, from its log g
            if self.cfg.dropout_before_gate:
                y = dropout_first_attention_reference(q, k, v, g, dropout_p)  # d_ij a_ij g_j, renormalised
            else:
                y = gated_attention_reference(q, k, v, g, dropout_p)  # a_ij g_j, renormalised
        else:
            b = self.gate(x)  # (B or 1, nh, T), fp32
            y = biased_attention_reference(q, k, v, relative_bias(b, b), dropout_p)  # + b_j - b_i
        return self.resid_dropout(self.project(y, x))  # (B, T, C)

    def cached(self, x: torch.Tensor, cache: LayerCache, dropout_p: float = 0.0) -> torch.Tensor:
        """What `forward` computes (before the residual dropout) for x (B, t, C), the t positions that follow the
        cached ones, over every cached key and the new ones -> (B, t, C): the formulas above, on this path's own
        layout. The cache is extended by the new keys and values as `heads` gives them (rotated at their
        positions), by the key gate's per-key value (an energy gate's log g, a key bias's b) and by its state."""
        q, k, v = self.heads(x, cache.length)  # (B, nh, t, hs), at the positions after the cached ones
        if self.gate is None:
            k, v = cache.append(k, v)  # (B, nh, T, hs): every key so far
            return self.project(gated_attention_reference(q, k, v, None, dropout_p), x)
        b, cache.gate = self.gate.step(x, cache.gate)  # (B or 1, nh, t): the new keys' only
        keys = cache.append_bias(b)  # (B or 1, nh, T)
        k, v = cache.append(k, v)
        if not isinstance(self.gate, Gate):
            y = biased_attention_reference(q, k, v, relative_bias(b, keys), dropout_p)  # + b_j - b_i
        elif self.cfg.dropout_before_gate:
            y = dropout_first_attention_reference(q, k, v, keys.exp(), dropout_p)
        else:
            y = gated_attention_reference(q, k, v, keys.exp(), dropout_p)
        return self.project(y, x)

    def heads(self, x: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v (B, nh, T, hs) each of x (B, T, C), the positions start .. start + T - 1: views of c_attn's
        output, q and k as the position encoding turns them (`model.position`)."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        q, k = self.position.rotate(q, k, start)
        return q, k, v

    def project(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """c_proj of the heads' outputs y (B, nh, T, hs), times the output gate's factor of x if there is one."""
        if self.output_gate is not None:
            y = y * self.output_gate(x)  # (B, nh, T, 1) or (B, nh, T, hs)
        B, nh, T, hs = y.shape
        return self.c_proj(y.transpose(1, 2).reshape(B, T, nh * hs))


__all__ = [
    "CausalSelfAttention",
    "biased_attention_reference",
    "dropout_first_attention_reference",
    "gated_attention_reference",
]
