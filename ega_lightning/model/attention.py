"""Causal self-attention, plain or gated.

A layer may have a key gate (``gate``) and an output gate (``output_gate``), see `gates.slots`. A key
gate that is not an energy gate (ALiBi, FoX) adds its relative bias b_j - b_i as an explicit fp32 (t, T)
term (see `_key_biased`): exact in bf16 too, where a padded channel holding FoX's b_j ~ 88 would lose
up to 0.5 of it. An output gate multiplies each head's output before c_proj on every path.

Three implementations of the energy-gated attention of EGA_SPEC.md section 2:

- ``reference``: the spec's formula written out. softmax over j <= i, multiply
  by g_j, renormalise. Quadratic memory; the tests' ground truth.
- ``fused``: the identity a'_ij = softmax_j(q_i.k_j / sqrt(hs) + log g_j). The
  log-gate rides in one extra query/key channel, q' = [q, 1] and
  k' = [k, log g * sqrt(hs)] (and v' = [v, 0]), so attention stays on the fused causal
  SDPA kernel. The extra channels come out of the Q/K/V matmul itself (see `_gated_qkv`);
  under torch.compile, out of concatenations the compiler fuses (see `_gated_compiled`).
- ``flex``: the same identity as a FlexAttention ``score_mod`` that adds log g of the key,
  with a causal block mask: no padded channel. For CUDA, where it is compiled; on CPU
  torch's FlexAttention has no backward, so there it only evaluates (under no_grad).
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn.modules import module as hooks

from ega_lightning.gates import Gate, GateState, KeyBias, OutputGate, relative_bias
from ega_lightning.gates.base import recompute_grads

ATTENTION_IMPLS = ("fused", "reference", "flex")

# exp(-30) ~ 1e-13: a key gated that far down is already gone, and bf16 keeps the
# clamped value to within its usual relative precision.
LOG_GATE_FLOOR = -30.0

# Training runs the gated Q/K/V matmul as `_GatedQKV`; False: as autograd's own graph of F.linear and an
# in-place write (the path generation and probed gates take), which the tests hold it equal to bit for bit.
COPY_FREE_WRITE = True


def has_flex_attention() -> bool:
    """Whether this torch has FlexAttention (torch >= 2.5; the project runs on 2.4 without it)."""
    return importlib.util.find_spec("torch.nn.attention.flex_attention") is not None


def require_flex_attention() -> None:
    """Refuses ``flex`` on a torch without FlexAttention, naming the path that does the same."""
    if not has_flex_attention():
        raise ValueError(
            f"model.attention=flex needs FlexAttention, which came with torch 2.5 (this is torch "
            f"{torch.__version__}). Use model.attention=fused (the default), the same attention on the SDPA kernel."
        )


def available_attention_impls() -> tuple[str, ...]:
    """The ATTENTION_IMPLS this torch can run: without FlexAttention, all but ``flex``."""
    return tuple(impl for impl in ATTENTION_IMPLS if impl != "flex" or has_flex_attention())


def pad_width(device: torch.device) -> int:
    """Extra channels per head of the fused layout: CUDA's fused kernels want a head size that is a
    multiple of 8, the CPU kernel takes any (and is fastest with one)."""
    return 8 if device.type == "cuda" else 1


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


def biased_attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, dropout_p: float = 0.0
) -> torch.Tensor:
    """q (B, nh, t, hs), k, v (B, nh, T, hs); bias (B or 1, nh, t, T) added to the logits, -inf where masked."""
    att = (q @ k.transpose(-2, -1)).float() / math.sqrt(q.shape[-1]) + bias  # (B, nh, t, T), fp32
    att = F.dropout(att.softmax(dim=-1), p=dropout_p)
    return att.to(v.dtype) @ v


def _causal(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
    return q_idx >= kv_idx


@functools.cache
def _flex(device_type: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(flex_attention, create_block_mask); compiled on CUDA, where eager FlexAttention would
    materialise the (T, T) scores. Imported here: FlexAttention exists from torch 2.5 on."""
    require_flex_attention()
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    return (torch.compile(flex_attention) if device_type == "cuda" else flex_attention), create_block_mask


@functools.lru_cache(maxsize=8)
def _causal_block_mask(T: int, device: torch.device) -> Any:
    return _flex(device.type)[1](_causal, None, None, T, T, device=device)


def flex_gated_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_g: torch.Tensor, dropout_p: float = 0.0
) -> torch.Tensor:
    """q, k, v (B, nh, T, hs); log_g (B, nh, T) -> (B, nh, T, hs): softmax_j(q_i.k_j / sqrt(hs) + log g_j), j <= i."""
    if dropout_p > 0:
        raise ValueError(
            "model.attention=flex has no attention dropout (FlexAttention takes none); "
            "train with model.attention=fused, or with model.dropout=0."
        )
    if not q.is_cuda and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, log_g)):
        raise ValueError(
            "model.attention=flex trains only on CUDA: torch's FlexAttention has no backward on CPU. "
            "Use model.attention=fused (the default), the same attention on the SDPA kernel."
        )
    T, hs = q.shape[-2], q.shape[-1]
    flex_attention = _flex(q.device.type)[0]
    log_g = log_g.clamp_min(LOG_GATE_FLOOR)  # as the fused path, so the two agree on gated-out keys

    def add_log_gate(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor):
        return score + log_g[b, h, kv_idx]

    block_mask = _causal_block_mask(T, q.device)
    return flex_attention(q, k, v, score_mod=add_log_gate, block_mask=block_mask, scale=1.0 / math.sqrt(hs))


def flex_biased_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """q, k, v (B, nh, T, hs); b (B or 1, nh, T) a key bias -> softmax_j(q_i.k_j / sqrt(hs) + b_j - b_i), j <= i."""
    T, hs = q.shape[-2], q.shape[-1]
    flex_attention = _flex(q.device.type)[0]
    b = b.expand(q.shape[0], -1, -1)

    def add_relative_bias(
        score: torch.Tensor, bi: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ):
        return score + (b[bi, h, kv_idx] - b[bi, h, q_idx])

    block_mask = _causal_block_mask(T, q.device)
    return flex_attention(q, k, v, score_mod=add_relative_bias, block_mask=block_mask, scale=1.0 / math.sqrt(hs))


def _key_channel(log_g: torch.Tensor, hs: int, dtype: torch.dtype) -> torch.Tensor:
    """What k's extra channel holds: log g sqrt(hs) (B, T, nh) from log g (B, nh, T), so that q's 1 times it,
    scaled by 1 / sqrt(hs) like every logit, adds log g."""
    return (log_g.clamp_min(LOG_GATE_FLOOR) * math.sqrt(hs)).transpose(1, 2).to(dtype)


def qkv_heads(qkv: torch.Tensor, layout: tuple[int, int, int, int]) -> torch.Tensor:
    """The view (3, B, nh, T, d) of q', k', v' in the padded Q/K/V buffer (B T, 3 nh d) or (B, T, 3 nh d);
    layout = (T, nh, hs, d): the true head size hs and the padded one d."""
    T, nh, _, d = layout
    return qkv.view(-1, T, 3, nh, d).permute(2, 0, 3, 1, 4)


def _key_channel_of(qkv: torch.Tensor, layout: tuple[int, int, int, int]) -> torch.Tensor:
    """The view (B, T, nh) of k's first extra channel in the padded Q/K/V buffer (see `qkv_heads`)."""
    return qkv_heads(qkv, layout)[1, ..., layout[2]].transpose(1, 2)


def padded_qkv_weights(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    projection: torch.Tensor | None,
    layout: tuple[int, int, int, int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused layout's Q/K/V weight (3 nh d, C) and bias from c_attn's weight (3 C, C) and bias:
    per head, d - hs extra rows with zero weights, bias 1 in q's first (q' = [q, 1]) and 0 elsewhere,
    and k's first holding `projection` (nh, C), the gate's energy projection, when it is folded."""
    _, nh, hs, d = layout
    C = weight.shape[1]
    padded = weight.new_zeros(3 * nh * d, C)
    heads = padded.view(3, nh, d, C)
    heads[:, :, :hs] = weight.view(3, nh, hs, C)
    if projection is not None:
        heads[1, :, hs] = projection
    padded_bias = weight.new_zeros(3 * nh * d)
    bias_heads = padded_bias.view(3, nh, d)
    if bias is not None:
        bias_heads[..., :hs] = bias.view(3, nh, hs)
    bias_heads[0, :, hs] = 1.0
    return padded, padded_bias


def padded_proj_weight(weight: torch.Tensor, nh: int, d: int) -> torch.Tensor:
    """c_proj's weight (C, C) with d - hs zero columns after each head's hs: (C, nh d), for y' = [y, 0]."""
    C = weight.shape[0]
    return F.pad(weight.view(C, nh, C // nh), (0, d - C // nh)).view(C, nh * d)


def _has_hooks(module: nn.Module) -> bool:
    """Whether calling `module` would run hooks of its own or global module hooks."""
    own = (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks, module._backward_pre_hooks)
    every = (hooks._global_forward_hooks, hooks._global_forward_pre_hooks, hooks._global_backward_hooks)
    return any(bool(h) for h in (*own, *every))


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


class _GatedQKV(torch.autograd.Function):
    """Training's gated Q/K/V: the padded matmul x W'^T + b' (B T, 3 nh d), log g written into k's extra
    channel, q', k', v' (B, nh, T, d) returned as views of that buffer; values and gradients equal those
    of autograd's graph of the same operators (`padded_qkv_weights`, F.linear, an in-place write, the
    views) bit for bit.

    That graph costs backward two copies of the buffer's gradient (the stack of the q, k, v gradients,
    then its reshape), a third for the in-place write (CopySlices), the padded weights' own nodes and,
    when the gate read its projection from the channel first, a zero-filled buffer-sized gradient and its
    sum. Here the padded weights are built from the parameters (c_attn's weight and bias, the gate's
    projection when folded) outside autograd, and backward gathers the q, k, v gradients into one buffer
    (one copy), replaces the channel's gradient, runs the matmul's backward on it and hands each parameter
    its rows. log g = `log_gate(source)`, with `source` the channel's projection (None: read it here) or a
    log g computed outside; backward recomputes log g from `source`, so its intermediates are not kept
    either (see `Recomputed`). Under autocast the matmul runs in autocast's dtype, as autocast would run
    it, and the gradients come back in the inputs' dtypes.
    """

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        projection: torch.Tensor | None,
        layout: tuple[int, int, int, int],
        log_gate: Callable[[torch.Tensor], torch.Tensor],
        source: torch.Tensor | None,
        *params: nn.Parameter,
    ) -> tuple[torch.Tensor, ...]:
        # x (B T, C); weight (3 C, C), bias (3 C,): c_attn's; projection (nh, C) or None
        ctx.dtypes = tuple(None if t is None else t.dtype for t in (x, weight, bias, projection))
        padded, padded_bias = padded_qkv_weights(weight, bias, projection, layout)  # (3 nh d, C), (3 nh d,)
        if torch.is_autocast_enabled(x.device.type):
            dtype = torch.get_autocast_dtype(x.device.type)
            x, padded, padded_bias = x.to(dtype), padded.to(dtype), padded_bias.to(dtype)
        with torch.autocast(x.device.type, enabled=False):
            qkv = torch.addmm(padded_bias, x, padded.t())  # (B T, 3 nh d)
            channel = _key_channel_of(qkv, layout)  # (B, T, nh)
            ctx.folded = source is None
            if ctx.folded:
                source = channel.clone()  # the energy projection, before log g overwrites it
            channel.copy_(_key_channel(log_gate(source), layout[2], qkv.dtype))
        ctx.layout, ctx.log_gate, ctx.params = layout, log_gate, params
        ctx.save_for_backward(x, padded, source)
        return tuple(qkv_heads(qkv, layout).unbind(0))  # 3 x (B, nh, T, d)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, padded, source = ctx.saved_tensors
        _, nh, hs, d = ctx.layout
        grad = x.new_empty(x.shape[0], padded.shape[0])  # (B T, 3 nh d): the buffer's gradient
        for part, g in zip(qkv_heads(grad, ctx.layout), grads, strict=True):
            part.copy_(g)
        channel = _key_channel_of(grad, ctx.layout)  # (B, T, nh)
        source_grad, param_grads = recompute_grads(
            lambda s: _key_channel(ctx.log_gate(s), hs, grad.dtype), source, ctx.params, channel
        )
        if ctx.folded:  # the write made the channel's own gradient 0; the read gives it the projection's
            channel.copy_(source_grad)
            source_grad = None
        else:
            channel.zero_()
        # addmm's backward as autograd runs it, then each parameter's rows of the padded gradients
        x_grad = grad.mm(padded) if ctx.needs_input_grad[0] else None
        weight_grad = projection_grad = bias_grad = None
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[3]:
            padded_grad = grad.t().mm(x).view(3, nh, d, -1)  # (3, nh, d, C)
            weight_grad = padded_grad[:, :, :hs].reshape(3 * nh * hs, -1)
            projection_grad = padded_grad[1, :, hs] if ctx.needs_input_grad[3] else None  # (nh, C)
        if ctx.needs_input_grad[2]:
            bias_grad = grad.sum(0).view(3, nh, d)[..., :hs].flatten()
        matmul = zip((x_grad, weight_grad, bias_grad, projection_grad), ctx.dtypes, strict=True)
        return *(g if g is None else g.to(t) for g, t in matmul), None, None, source_grad, *param_grads


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


def _built_once_per_cache(cache: LayerCache | None, name: str, build: Callable[[], Any]) -> Any:
    """build() in training, where the weights change every step; in generation, where they do not, the
    cache's copy (built on its first step)."""
    return build() if cache is None else cache.reuse(name, build)


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
    ) -> None:
        super().__init__()
        if impl not in ATTENTION_IMPLS:
            raise ValueError(f"Unknown attention implementation {impl!r}; choose one of {ATTENTION_IMPLS}.")
        self.n_head, self.n_embd, self.dropout, self.impl = n_head, n_embd, dropout, impl
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)
        self.gate = gate
        self.output_gate = output_gate
        # extra channels per head of the fused layout; None: `pad_width` of the input's device.
        # Tests set 8 to run the CUDA layout on CPU.
        self.pad_width: int | None = None

    def forward(self, x: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        """x: the LayerNorm-ed hidden state (B, T, C) -> (B, T, C).

        With a `cache`, x holds the positions that follow the cached ones, and the cache is extended.
        """
        B, T, C = x.shape
        dropout_p = self.dropout if self.training else 0.0
        if self.gate is not None and not isinstance(self.gate, Gate):
            return self.resid_dropout(self._project(self._key_biased(x, cache, dropout_p), x))
        if self.gate is not None and self.impl == "flex" and cache is None:
            q, k, v = self.c_attn(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
            y = flex_gated_attention(q, k, v, self.gate(x), dropout_p)  # (B, nh, T, hs)
            return self.resid_dropout(self._project(y, x))
        if self.gate is not None and (self.impl != "reference" or cache is not None):
            if cache is None and torch.compiler.is_compiling():
                return self.resid_dropout(self._gated_compiled(x, dropout_p))
            q, k, v = self._gated_qkv(x, cache)  # 3 x (B, nh, T, hs + width)
            y = self._attend(q, k, v, cache, dropout_p)
            if self.output_gate is not None:  # the gate's factor is per true channel: y back to hs of them
                return self.resid_dropout(self._project(y[..., : C // self.n_head], x))
            return self.resid_dropout(self._project_padded(y, cache))
        q, k, v = self.c_attn(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)  # (B, nh, T, hs)
        if self.impl == "reference" and cache is None:
            g = None if self.gate is None else self.gate(x).exp()
            y = gated_attention_reference(q, k, v, g, dropout_p)
        else:
            y = self._attend(q, k, v, cache, dropout_p)
        return self.resid_dropout(self._project(y, x))

    def _project(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """c_proj of the heads' outputs y (B, nh, T, hs), times the output gate's factor of x if there is one."""
        if self.output_gate is not None:
            y = y * self.output_gate(x)  # (B, nh, T, 1) or (B, nh, T, hs)
        B, nh, T, hs = y.shape
        return self.c_proj(y.transpose(1, 2).reshape(B, T, nh * hs))

    def _key_biased(self, x: torch.Tensor, cache: LayerCache | None, dropout_p: float) -> torch.Tensor:
        """Attention (B, nh, T, hs) with a key bias's relative term b_j - b_i (see `gates.slots`) in fp32.

        SDPA takes the (t, T) term as its additive mask, in the kernel's dtype: relative, the term is
        0 on the diagonal and small near it, so bf16 keeps what matters of it.
        """
        B, T, C = x.shape
        q, k, v = self.c_attn(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)  # (B, nh, T, hs)
        if cache is None:
            b = self.gate(x)  # (B or 1, nh, T), fp32
            if self.impl == "flex":
                return flex_biased_attention(q, k, v, b)
            keys = b
        else:
            b, cache.gate = self.gate.step(x, cache.gate)  # b of the new positions only
            keys = cache.append_bias(b)  # (B or 1, nh, T_cached + T)
            k, v = cache.append(k, v)
        bias = relative_bias(b, keys)  # (B or 1, nh, T, T_all), -inf above the diagonal
        if self.impl == "reference":
            return biased_attention_reference(q, k, v, bias, dropout_p)
        scale = 1.0 / math.sqrt(C // self.n_head)
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
        q, k, v = self.c_attn(x).view(B, T, 3, nh, hs).permute(2, 0, 3, 1, 4)  # (B, nh, T, hs)
        channel = _key_channel(self.gate(x), hs, q.dtype).transpose(1, 2)[..., None]  # (B, nh, T, 1)
        zeros = channel.new_zeros(B, nh, T, width - 1)
        q = torch.cat([q, torch.ones_like(channel), zeros], dim=-1)  # (B, nh, T, hs + width)
        k = torch.cat([k, channel, zeros], dim=-1)
        v = torch.cat([v, channel.new_zeros(B, nh, T, width)], dim=-1)
        y = self._attend(q, k, v, None, dropout_p)[..., :hs]  # (B, nh, T, hs)
        return self._project(y, x)

    def _gated_qkv(self, x: torch.Tensor, cache: LayerCache | None) -> tuple[torch.Tensor, ...]:
        """q' = [q, 1], k' = [k, log g sqrt(hs)], v' = [v, 0], each (B, nh, T, hs + width), from one matmul.

        The Q/K/V weight gets `width` extra output rows per head (zero weights; bias 1 for q's,
        0 for k's and v's), so the padded buffer comes straight out of the matmul, with no copy
        forward or backward. k's extra row carries the gate's energy projection when the gate
        has a foldable one (EGA-1), which the gate reads before its log g overwrites that channel.
        """
        B, T, C = x.shape
        nh, hs = self.n_head, C // self.n_head
        layout = (T, nh, hs, hs + (self.pad_width or pad_width(x.device)))
        projection = self._folded_projection(x)  # (nh, C) or None
        # `_GatedQKV` calls the gate's arithmetic, not the module, when it folds: a gate with hooks (the
        # gate callbacks' probes) takes the plain path, so that its hooks see every call
        hooked = projection is not None and _has_hooks(self.gate)
        if COPY_FREE_WRITE and cache is None and torch.is_grad_enabled() and not hooked:
            if projection is not None:  # the gate reads its projection from the channel that its log g overwrites
                log_gate, source = self.gate.log_gate_from_projection, None
            else:
                log_gate, source = _identity, self.gate(x)
            weight, bias = self.c_attn.weight, self.c_attn.bias
            params = self.gate.parameters()
            return _GatedQKV.apply(x.reshape(B * T, C), weight, bias, projection, layout, log_gate, source, *params)
        weight, bias = _built_once_per_cache(
            cache, "qkv", lambda: padded_qkv_weights(self.c_attn.weight, self.c_attn.bias, projection, layout)
        )
        qkv = F.linear(x, weight, bias)  # (B, T, 3 nh d)
        channel = _key_channel_of(qkv, layout)  # (B, T, nh): the energy projection if folded
        folded = channel.clone() if projection is not None else None  # copied: log g overwrites the channel below
        if cache is not None:  # only the new keys' gates, from the gate's incremental state
            log_g, cache.gate = self.gate.step(x, cache.gate, folded)
        else:
            log_g = self.gate(x, folded)  # (B, nh, T), fp32
        channel.copy_(_key_channel(log_g, hs, qkv.dtype))
        return tuple(qkv_heads(qkv, layout).unbind(0))

    def _folded_projection(self, x: torch.Tensor) -> torch.Tensor | None:
        """The gate's energy projection weight (nh, C) if the Q/K/V matmul computes it (folds it), else None."""
        projection = self.gate.input_projection()
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
        weight = _built_once_per_cache(cache, "proj", lambda: padded_proj_weight(self.c_proj.weight, nh, d))
        return F.linear(y.transpose(1, 2).reshape(B, T, nh * d), weight, self.c_proj.bias)
