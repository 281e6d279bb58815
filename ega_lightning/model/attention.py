"""Causal self-attention, plain or gated: the layer's formula first, its fast paths after it.

A layer may have a key gate (``gate``) and an output gate (``output_gate``), see `gates.slots`:

- an energy gate (EGA_SPEC.md section 2) multiplies each key's attention weight by its gate g_j in
  (0, 1] and renormalises: a'_ij = a_ij g_j / sum_k<=i a_ik g_k;
- a key bias that is not an energy gate (ALiBi, FoX) adds b_j - b_i to the logits, in fp32 (the same
  softmax as adding b_j);
- an output gate multiplies each head's output before c_proj.

``attention=reference`` computes exactly that, written out below (`CausalSelfAttention.forward`): the
tests' ground truth. The other paths compute the same faster and sit after it ("The fast paths"), each
tested against the reference (tests/test_model.py, test_runtime_paths.py, test_peer_gates.py):

- ``fused`` (the default): plain attention on the fused causal SDPA kernel; an energy gate's log g rides
  in an extra query/key channel of that kernel (`model.fused`), traced as concatenations under
  torch.compile (`_gated_compiled`);
- ``flex``: the gate as a FlexAttention ``score_mod`` (`model.flex`);
- cached generation: the keys and values of earlier positions kept in a `LayerCache` (`model.cache`).

Every path takes a key bias in one of two forms, by one rule (`fused.rides_channel`): as b_j in the
padded channel, like log g (a learnable bias, FoX, where the channel is fp32), or as the relative (t, T)
mask b_j - b_i (a fixed bias, ALiBi, and any key bias under bf16/fp16, where the channel would round
FoX's b_j ~ 90-590 by 0.5-4).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as hooks

from ega_lightning.gates import Gate, KeyBias, OutputGate, relative_bias
from ega_lightning.model import flex, fused
from ega_lightning.model.cache import LayerCache, built_once_per_cache
from ega_lightning.model.flex import flex_biased_attention, flex_gated_attention
from ega_lightning.model.fused import (
    LOG_GATE_FLOOR,
    GatedQKV,
    key_channel,
    key_channel_of,
    pad_width,
    padded_proj_weight,
    padded_qkv_weights,
    qkv_heads,
)

ATTENTION_IMPLS = ("fused", "reference", "flex")


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


# the author's floor under a renormalised row's sum (`dropout_first_attention_reference`): a row whose every kept
# key dropout dropped is all zeros, so its output is 0, not NaN
RENORMALISE_FLOOR = 1e-8


def dropout_first_attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, dropout_p: float = 0.0
) -> torch.Tensor:
    """The author's order: dropout on the attention weights first, then times the gate, then renormalise.

    q, k, v (B, nh, T, hs); g (B, nh, T) -> (B, nh, T, hs). a'_ij = d_ij a_ij g_j / max(sum_k d_ik a_ik g_k,
    1e-8) with d the dropout mask scaled by 1 / (1 - p): the renormalisation also undoes dropout's scaling.
    At p = 0 it is `gated_attention_reference` (up to the floor, which only a row of gates < 1e-8 reaches).
    """
    T, hs = q.shape[-2], q.shape[-1]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)  # (B, nh, T, T)
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
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
    """Multi-head causal self-attention with an optional gate on the keys and one on the output."""

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        dropout: float,
        bias: bool,
        gate: KeyBias | None,
        impl: str = "fused",
        output_gate: OutputGate | None = None,
        qkv_bias: bool | None = None,
        dropout_before_gate: bool = False,
    ) -> None:
        """``qkv_bias``: c_attn's bias (None: as ``bias``, which c_proj keeps). ``dropout_before_gate``: the
        author's order, attention dropout before the energy gate and the renormalisation
        (`dropout_first_attention_reference`); it needs an energy gate, and with dropout in training the
        reference implementation (`forward`), the one that materialises the weights dropout acts on."""
        super().__init__()
        if impl not in ATTENTION_IMPLS:
            raise ValueError(f"Unknown attention implementation {impl!r}; choose one of {ATTENTION_IMPLS}.")
        if dropout_before_gate and not isinstance(gate, Gate):
            raise ValueError("dropout_before_gate orders dropout and an energy gate; this layer has no energy gate.")
        self.n_head, self.n_embd, self.dropout, self.impl = n_head, n_embd, dropout, impl
        self.dropout_before_gate = dropout_before_gate
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias if qkv_bias is None else qkv_bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)
        self.gate = gate
        self.output_gate = output_gate
        # extra channels per head of the fused layout; None: `pad_width` of the input's device.
        # Tests set 8 to run the CUDA layout on CPU.
        self.pad_width: int | None = None

    def forward(self, x: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        """x: the LayerNorm-ed hidden state (B, T, C) -> (B, T, C).

        The reference is written out here; every other implementation, and cached generation (x holds
        the positions that follow the cached ones, and the cache is extended), takes `_fast`.
        """
        dropout_p = self.dropout if self.training else 0.0
        if self.impl != "reference" or cache is not None:
            # with no dropout both orders are one formula, which the fast paths compute
            if self.dropout_before_gate and dropout_p > 0:
                raise ValueError(
                    f"dropout_before_gate with attention dropout {dropout_p} trains on attention=reference only: "
                    f"the {self.impl} path never materialises the weights that dropout acts on."
                )
            return self.resid_dropout(self._fast(x, cache, dropout_p))
        q, k, v = self._heads(x)  # (B, nh, T, hs) each
        if self.gate is None:
            y = gated_attention_reference(q, k, v, None, dropout_p)  # softmax(q k^T / sqrt(hs)), j <= i
        elif isinstance(self.gate, Gate):
            g = self.gate(x).exp()  # (B, nh, T): the gate of each key, from its log g
            if self.dropout_before_gate:
                y = dropout_first_attention_reference(q, k, v, g, dropout_p)  # d_ij a_ij g_j, renormalised
            else:
                y = gated_attention_reference(q, k, v, g, dropout_p)  # a_ij g_j, renormalised
        else:
            b = self.gate(x)  # (B or 1, nh, T), fp32
            y = biased_attention_reference(q, k, v, relative_bias(b, b), dropout_p)  # + b_j - b_i
        return self.resid_dropout(self._project(y, x))  # (B, T, C)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """q, k, v (3, B, nh, T, hs) of x (B, T, C), as views of c_attn's output."""
        B, T, C = x.shape
        return self.c_attn(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)

    def _project(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """c_proj of the heads' outputs y (B, nh, T, hs), times the output gate's factor of x if there is one."""
        if self.output_gate is not None:
            y = y * self.output_gate(x)  # (B, nh, T, 1) or (B, nh, T, hs)
        B, nh, T, hs = y.shape
        return self.c_proj(y.transpose(1, 2).reshape(B, T, nh * hs))

    # ------------------------------------------------------------------------------------------------
    # The fast paths: the same attention as `forward`'s reference, computed on fused kernels, padded
    # layouts, FlexAttention or a cache.

    def _fast(self, x: torch.Tensor, cache: LayerCache | None, dropout_p: float) -> torch.Tensor:
        """What `forward` computes before the residual dropout (B, T, C), by the path for this gate,
        implementation and cache: a key gate's bias in the padded channel or as the relative mask, as
        `fused.rides_channel` says (the one rule), then FlexAttention, the compiled layout or the padded
        matmul."""
        if self.gate is None:
            q, k, v = self._heads(x)  # (B, nh, T, hs)
            return self._project(self._attend(q, k, v, cache, dropout_p), x)
        if not fused.rides_channel(self.gate, x):
            return self._project(self._key_biased(x, cache, dropout_p), x)
        if self.impl == "flex" and cache is None:
            q, k, v = self._heads(x)  # (B, nh, T, hs)
            return self._project(flex_gated_attention(q, k, v, self._bias(x), dropout_p, self._floor), x)
        if cache is None and torch.compiler.is_compiling():
            return self._gated_compiled(x, dropout_p)
        q, k, v = self._gated_qkv(x, cache)  # 3 x (B, nh, T, hs + width)
        y = self._attend(q, k, v, cache, dropout_p)
        if self.output_gate is not None:  # the gate's factor is per true channel: y back to hs of them
            return self._project(y[..., : self.n_embd // self.n_head], x)
        return self._project_padded(y, cache)

    @property
    def _floor(self) -> float | None:
        """The least value of the padded channel: an energy gate's log g is clamped (`fused.LOG_GATE_FLOOR`),
        another key bias's b goes in as it is."""
        return LOG_GATE_FLOOR if isinstance(self.gate, Gate) else None

    def _bias(self, x: torch.Tensor) -> torch.Tensor:
        """The key gate's per-key bias (B, nh, T) in fp32, for the padded channel: log g, or a key bias's b
        (which may be (1, nh, T)) expanded to the batch."""
        b = self.gate(x)
        return b if isinstance(self.gate, Gate) else b.expand(x.shape[0], -1, -1)

    def _key_biased(self, x: torch.Tensor, cache: LayerCache | None, dropout_p: float) -> torch.Tensor:
        """Attention (B, nh, T, hs) with a key bias's relative term b_j - b_i (see `gates.slots`) in fp32,
        where `fused.rides_channel` keeps it out of the padded channel.

        SDPA takes the (t, T) term as its additive mask, in the kernel's dtype: relative, the term is
        0 on the diagonal and small near it, so bf16 keeps what matters of it.
        """
        q, k, v = self._heads(x)  # (B, nh, T, hs)
        if cache is None:
            b = self.gate(x)  # (B or 1, nh, T), fp32
            if self.impl == "flex":
                return flex_biased_attention(q, k, v, b, dropout_p)
            keys = b
        else:
            b, cache.gate = self.gate.step(x, cache.gate)  # b of the new positions only
            keys = cache.append_bias(b)  # (B or 1, nh, T_cached + T)
            k, v = cache.append(k, v)
        bias = relative_bias(b, keys)  # (B or 1, nh, T, T_all), -inf above the diagonal
        if self.impl == "reference":
            return biased_attention_reference(q, k, v, bias, dropout_p)
        scale = 1.0 / math.sqrt(self.n_embd // self.n_head)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), dropout_p=dropout_p, scale=scale)

    def _gated_compiled(self, x: torch.Tensor, dropout_p: float) -> torch.Tensor:
        """The fused layout as `torch.compile` traces it: q', k', v' concatenated from q, k, v and the
        gate's channel, y sliced back to hs channels for c_proj.

        Eager, the padded matmul and its in-place write of log g save copies; traced, the compiler turns
        that write into a copy of the whole Q/K/V buffer (forward and backward) and cannot fuse it, while
        it fuses these concatenations and the slice into its own kernels (`ega bench --compile`).
        """
        B, T, C = x.shape
        nh, hs = self.n_head, C // self.n_head
        width = self.pad_width or pad_width(x.device)
        q, k, v = self._heads(x)  # (B, nh, T, hs)
        channel = key_channel(self._bias(x), hs, q.dtype, self._floor).transpose(1, 2)[..., None]  # (B, nh, T, 1)
        zeros = channel.new_zeros(B, nh, T, width - 1)
        q = torch.cat([q, torch.ones_like(channel), zeros], dim=-1)  # (B, nh, T, hs + width)
        k = torch.cat([k, channel, zeros], dim=-1)
        v = torch.cat([v, channel.new_zeros(B, nh, T, width)], dim=-1)
        y = self._attend(q, k, v, None, dropout_p)[..., :hs]  # (B, nh, T, hs)
        return self._project(y, x)

    def _gated_qkv(self, x: torch.Tensor, cache: LayerCache | None) -> tuple[torch.Tensor, ...]:
        """q' = [q, 1], k' = [k, b sqrt(hs)], v' = [v, 0], each (B, nh, T, hs + width), from one matmul; b is
        the key gate's bias (an energy gate's log g).

        The Q/K/V weight gets `width` extra output rows per head (zero weights; bias 1 for q's,
        0 for k's and v's), so the padded buffer comes straight out of the matmul, with no copy
        forward or backward. k's extra row carries the gate's energy projection when the gate
        has a foldable one (EGA-1), which the gate reads before its log g overwrites that channel.
        """
        B, T, C = x.shape
        nh, hs = self.n_head, C // self.n_head
        layout = (T, nh, hs, hs + (self.pad_width or pad_width(x.device)))
        projection = self._folded_projection(x)  # (nh, C) or None
        # `GatedQKV` calls the gate's arithmetic, not the module, when it folds: a gate with hooks (the
        # gate callbacks' probes) takes the plain path, so that its hooks see every call
        hooked = projection is not None and has_hooks(self.gate)
        if fused.COPY_FREE_WRITE and cache is None and torch.is_grad_enabled() and not hooked:
            if projection is not None:  # the gate reads its projection from the channel that its log g overwrites
                log_gate, source = self.gate.log_gate_from_projection, None
            else:
                log_gate, source = _identity, self._bias(x)
            weight, bias, floor = self.c_attn.weight, self.c_attn.bias, self._floor
            params = self.gate.parameters()
            x = x.reshape(B * T, C)
            return GatedQKV.apply(x, weight, bias, projection, layout, floor, log_gate, source, *params)
        weight, bias = built_once_per_cache(
            cache, "qkv", lambda: padded_qkv_weights(self.c_attn.weight, self.c_attn.bias, projection, layout)
        )
        qkv = F.linear(x, weight, bias)  # (B, T, 3 nh d)
        channel = key_channel_of(qkv, layout)  # (B, T, nh): the energy projection if folded
        folded = channel.clone() if projection is not None else None  # copied: log g overwrites the channel below
        if not isinstance(self.gate, Gate) and cache is None:  # a key bias's b
            log_g = self._bias(x)
        elif not isinstance(self.gate, Gate):  # with a cache, the b of the new keys only
            log_g, cache.gate = self.gate.step(x, cache.gate)
        elif cache is not None:  # only the new keys' gates, from the gate's incremental state
            log_g, cache.gate = self.gate.step(x, cache.gate, folded)
        else:
            log_g = self.gate(x, folded)  # (B, nh, T), fp32
        channel.copy_(key_channel(log_g, hs, qkv.dtype, self._floor))
        return tuple(qkv_heads(qkv, layout).unbind(0))

    def _folded_projection(self, x: torch.Tensor) -> torch.Tensor | None:
        """An energy gate's projection weight (nh, C) if the Q/K/V matmul computes it (folds it), else None."""
        projection = self.gate.input_projection() if isinstance(self.gate, Gate) else None
        # under autocast the gate keeps its own fp32 projection, so its energy stays exact
        if projection is None or projection.out_features != self.n_head or torch.is_autocast_enabled(x.device.type):
            return None
        return projection.weight

    def _attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: LayerCache | None, dropout_p: float
    ) -> torch.Tensor:
        """SDPA of (B, nh, T, d) q, k, v, scaled by the true head size; with a cache, over all cached keys."""
        scale = 1.0 / math.sqrt(self.n_embd // self.n_head)
        if cache is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale)
        t_new = q.shape[2]
        k, v = cache.append(k, v)  # (B, nh, T_cached + t_new, d)
        if t_new == 1:  # one new query sees every key: no mask needed
            return F.scaled_dot_product_attention(q, k, v, scale=scale)
        # new query i sits at position T_all - t_new + i and sees every key up to it
        positions = torch.arange(cache.length, device=q.device)
        visible = positions[None, :] <= positions[cache.length - t_new :, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=scale)

    def _project_padded(self, y: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        """c_proj of y' = [y, 0] (B, nh, T, hs + width): v's extra channel is 0, so y's is too.

        Slicing y back to hs channels would copy it (and keep the copy for backward); instead
        c_proj's weight gets a zero column per extra channel.
        """
        B, nh, T, d = y.shape
        weight = built_once_per_cache(cache, "proj", lambda: padded_proj_weight(self.c_proj.weight, nh, d))
        return F.linear(y.transpose(1, 2).reshape(B, T, nh * d), weight, self.c_proj.bias)


def available_attention_impls() -> tuple[str, ...]:
    """The ATTENTION_IMPLS this torch can run: without FlexAttention, all but ``flex``."""
    return tuple(impl for impl in ATTENTION_IMPLS if impl != "flex" or flex.has_flex_attention())


def has_hooks(module: nn.Module) -> bool:
    """Whether calling `module` would run hooks of its own or global module hooks: the one test of a
    "hooked" (probed) gate, for the paths that would skip calling it (the copy-free write, the compiled model)."""
    own = (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks, module._backward_pre_hooks)
    every = (hooks._global_forward_hooks, hooks._global_forward_pre_hooks, hooks._global_backward_hooks)
    return any(bool(h) for h in (*own, *every))


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


__all__ = [
    "ATTENTION_IMPLS",
    "CausalSelfAttention",
    "available_attention_impls",
    "biased_attention_reference",
    "dropout_first_attention_reference",
    "gated_attention_reference",
    "has_hooks",
]
