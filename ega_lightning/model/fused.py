"""The fused path (`FusedAttention`, the default): the reference's attention on the fused causal SDPA kernel,
with a per-key bias in one extra query/key channel (the padded layout).

The identity a'_ij = softmax_j(q_i.k_j / sqrt(hs) + log g_j) (EGA_SPEC.md section 2) lets the gate ride
in the Q/K/V themselves: q' = [q, 1], k' = [k, log g sqrt(hs)], v' = [v, 0], padded to a head size the
kernel likes (`pad_width`), so attention stays on the fused causal SDPA kernel. The extra channels come
out of the Q/K/V matmul itself (`padded_qkv_weights`; in training `GatedQKV`, which saves the copies
autograd's graph would make); c_proj takes y' = [y, 0] through zero columns (`padded_proj_weight`).
`FusedAttention` runs it in training, evaluation and cached generation (`FusedAttention.cached`); the tests hold
each to the reference formula (`attention.CausalSelfAttention`).

Any key bias b_j can ride the channel the same way (softmax_j(s_ij + b_j) = softmax_j(s_ij + b_j - b_i)):
`rides_channel` is the one rule of which bias does (the others take the relative (t, T) mask b_j - b_i), and
`fp32_kernel` of where the channel needs fp32 to keep b_j (a learned key bias under bf16/fp16).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from ega_lightning.gates import Gate, KeyBias, OutputGate, relative_bias
from ega_lightning.gates.base import ZNORM_EPS, recompute_grads
from ega_lightning.gates.fused import log_gate_channel
from ega_lightning.model.attention import CausalSelfAttention
from ega_lightning.model.cache import LayerCache
from ega_lightning.model.config import GPTConfig
from ega_lightning.model.position import Position, rotate_true_channels
from ega_lightning.model.torch_private import has_hooks

# exp(-30) ~ 1e-13: a key gated that far down is already gone, and bf16 keeps the
# clamped value to within its usual relative precision.
LOG_GATE_FLOOR = -30.0


def pad_width(device: torch.device) -> int:
    """Extra channels per head of the fused layout: CUDA's fused kernels want a head size that is a
    multiple of 8, the CPU kernel takes any (and is fastest with one)."""
    return 8 if device.type == "cuda" else 1


# The channel's dtypes that keep a key bias of the size a window reaches: FoX's b_j = -C_j grows like 0.69 j
# at initialisation and to ~590 at T = 256 with forget gates at f = 0.1, where fp32's spacing is 6e-5 and
# bf16's 4 (0.5 already at 64-128).
EXACT_CHANNEL_DTYPES = (torch.float32, torch.float64)


def channel_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype of the Q/K/V buffer (and so of the padded channel) that the layer's input x makes:
    autocast's where it is on for x's device (it runs the Q/K/V matmul), x's own otherwise."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


def rides_channel(gate: KeyBias, x: torch.Tensor, fp32_kernel: bool = True) -> bool:
    """The one rule of how a key gate's per-key bias reaches the attention kernel, for every path of the
    layer (training, evaluation, the compiled model, cached generation, FlexAttention's ``score_mod``):
    in the padded query/key channel, added as b_j (True), or as the relative (t, T) mask b_j - b_i (False).

    - An energy gate (`Gate`): the channel, always. Its log g lies in [LOG_GATE_FLOOR, 0], which bf16
      keeps to its relative precision.
    - Another key bias with parameters to learn (FoX): the channel, in evaluation and generation as in
      training, so that all of them round alike; under bf16/fp16 with the kernel in fp32 (`fp32_kernel`), unless
      the layer was built with ``fp32_kernel`` False (`FusedAttention`), where it takes the mask there.
      A mask that needs a gradient sends SDPA off its fused kernel (on CPU 2.2x the kernel's time in fp32
      and 2.7x the bf16 step at the `paper` size, with the (T, T) scores and the mask's gradient kept).
    - A key bias without parameters to learn (ALiBi's fixed slopes, a frozen gate): the mask, which then
      needs no gradient, so SDPA keeps its fused kernel at head size hs.
    """
    if isinstance(gate, Gate):
        return True
    learnable = any(p.requires_grad for p in gate.parameters())
    return learnable and (fp32_kernel or channel_dtype(x) in EXACT_CHANNEL_DTYPES)


def fp32_kernel(gate: KeyBias, x: torch.Tensor, allowed: bool = True) -> bool:
    """Whether a layer whose key bias rides the channel runs its attention kernel in fp32: a key bias that
    is not an energy gate's (FoX) where the channel's dtype would be bf16/fp16. The Q/K/V matmul still runs
    in that dtype; its buffer is cast to fp32 (q, k, v as that matmul rounded them) and the channel written
    there. In a bf16 kernel the channel's spacing reaches 4-16 at FoX's b_j sqrt(hs) of a window (values off,
    tests/test_peer_gates.py::test_fox_in_bf16_needs_the_fp32_kernel), and b's gradient, a column sum of the
    scores' gradient, would come back rounded per key before FoX's forget gates take its suffix sums, which
    cancel: a second bf16 channel holding b's remainder would mend the values; the gradient would still come
    back rounded. ``allowed``: the layer's ``fp32_kernel`` option (False: such a bias takes the mask instead)."""
    exact = channel_dtype(x) in EXACT_CHANNEL_DTYPES
    return not isinstance(gate, Gate) and rides_channel(gate, x, allowed) and not exact


def key_channel(bias: torch.Tensor, hs: int, dtype: torch.dtype, floor: float | None = LOG_GATE_FLOOR) -> torch.Tensor:
    """What k's extra channel holds: b sqrt(hs) (B, T, nh) from a per-key bias b (B, nh, T), an energy gate's
    log g clamped at `floor` (None: a key bias, as it is), so that q's 1 times it, scaled by 1 / sqrt(hs)
    like every logit, adds b."""
    if floor is not None:
        bias = bias.clamp_min(floor)
    return (bias * math.sqrt(hs)).transpose(1, 2).to(dtype)


# The padded Q/K/V buffer's rows are 3 nh d elements rounded up to a multiple of this (zero weights and bias
# after the heads): MKL's fp32 GEMM on AVX2 runs a row of 3 nh d = 396 (the `cpu` size's 4 heads of 33) about
# 20% slower than one of 400 or 384, for the same values bit for bit. 1: rows of 3 nh d.
ROW_ALIGN = 8


def buffer_width(layout: tuple[int, int, int, int]) -> int:
    """The padded Q/K/V buffer's row length: 3 nh d rounded up to `ROW_ALIGN`; layout = (T, nh, hs, d)."""
    used = 3 * layout[1] * layout[3]
    return -(-used // ROW_ALIGN) * ROW_ALIGN


def qkv_heads(qkv: torch.Tensor, layout: tuple[int, int, int, int]) -> torch.Tensor:
    """The view (3, B, nh, T, d) of q', k', v' in the padded Q/K/V buffer (B T, width) or (B, T, width), its rows'
    first 3 nh d elements (see `buffer_width`); layout = (T, nh, hs, d): the true head size hs and the padded one d."""
    T, nh, _, d = layout
    if qkv.shape[-1] != 3 * nh * d:
        qkv = qkv[..., : 3 * nh * d]
    return qkv.view(-1, T, 3, nh, d).permute(2, 0, 3, 1, 4)


def key_channel_of(qkv: torch.Tensor, layout: tuple[int, int, int, int]) -> torch.Tensor:
    """The view (B, T, nh) of k's first extra channel in the padded Q/K/V buffer (see `qkv_heads`)."""
    return qkv_heads(qkv, layout)[1, ..., layout[2]].transpose(1, 2)


def rows_of_t(channel: torch.Tensor) -> torch.Tensor:
    """A copy of the channel (B, T, nh) laid out as rows of T, (B, nh, T) in memory: the gate's energy is
    its transpose, which the z-norm's cumulative sums and element-wise work then read without another copy
    (`gates.fused`); the same values as ``channel.clone()``."""
    return channel.transpose(1, 2).contiguous().transpose(1, 2)


def padded_qkv_weights(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    projection: torch.Tensor | None,
    layout: tuple[int, int, int, int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused layout's Q/K/V weight (width, C) and bias (width,) from c_attn's weight (3 C, C) and bias:
    per head, d - hs extra rows with zero weights, bias 1 in q's first (q' = [q, 1]) and 0 elsewhere,
    and k's first holding `projection` (nh, C), the gate's energy projection, when it is folded; then
    zero rows up to the buffer's width (`buffer_width`)."""
    _, nh, hs, d = layout
    C, width = weight.shape[1], buffer_width(layout)
    padded = weight.new_zeros(width, C)
    heads = padded[: 3 * nh * d].view(3, nh, d, C)
    heads[:, :, :hs] = weight.view(3, nh, hs, C)
    if projection is not None:
        heads[1, :, hs] = projection
    padded_bias = weight.new_zeros(width)
    bias_heads = padded_bias[: 3 * nh * d].view(3, nh, d)
    if bias is not None:
        bias_heads[..., :hs] = bias.view(3, nh, hs)
    bias_heads[0, :, hs] = 1.0
    return padded, padded_bias


def padded_proj_weight(weight: torch.Tensor, nh: int, d: int) -> torch.Tensor:
    """c_proj's weight (C, C) with d - hs zero columns after each head's hs: (C, nh d), for y' = [y, 0]."""
    C = weight.shape[0]
    return F.pad(weight.view(C, nh, C // nh), (0, d - C // nh)).view(C, nh * d)


class RecomputedChannel:
    """What k's extra channel holds, ``key_channel(log_gate(source), hs, dtype, floor)`` (B, T, nh), for
    `GatedQKV`: ``values`` forward; ``grads`` rebuilds that graph from ``source`` in backward and
    differentiates it (see `Recomputed`), so its intermediates are not kept. ``params``: the parameters
    log_gate reads (as module attributes), whose gradients it returns."""

    def __init__(
        self, log_gate: Callable[[torch.Tensor], torch.Tensor], hs: int, floor: float | None, params: tuple
    ) -> None:
        self.log_gate, self.hs, self.floor, self.params = log_gate, hs, floor, params

    def values(self, source: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return key_channel(self.log_gate(source), self.hs, dtype, self.floor)

    def grads(self, source: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """The gradients (source's, each of params') of <channel, grad>, grad (B, T, nh)."""
        return recompute_grads(lambda s: self.values(s, grad.dtype), source, self.params, grad)


class FusedGateChannel:
    """`RecomputedChannel` for an energy gate whose log g of its folded projection p (B, T, nh) is
    `ZNormLogGate` of p's transpose (EGA-1, `Gate.fused_log_gate`): the channel max(log g, floor) sqrt(hs)
    as one function of the energy forward and backward (`gates.fused.log_gate_channel`, the same values and
    gradients bit for bit), which backward runs again and differentiates by hand, building no graph."""

    def __init__(self, gate: Gate, hs: int, floor: float) -> None:
        self.tau, self.alpha, self.znorm = gate.tau, gate.alpha, (gate.znorm, ZNORM_EPS, gate.std_floor)
        self.floor, self.scale, self.params = floor, math.sqrt(hs), (gate.tau, gate.alpha)

    def values(self, source: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        e = source.transpose(1, 2)  # (B, nh, T) rows: the energy
        return log_gate_channel(e, self.tau, self.alpha, self.znorm, self.floor, self.scale).transpose(1, 2)

    def grads(self, source: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        needs = (True, self.tau.requires_grad, self.alpha.requires_grad)
        rows = grad.transpose(1, 2).contiguous()  # (B, nh, T)
        e_grad, *param_grads = log_gate_channel(
            source.transpose(1, 2), self.tau, self.alpha, self.znorm, self.floor, self.scale, rows, needs
        )
        return e_grad.transpose(1, 2), param_grads


class GatedQKV(torch.autograd.Function):
    """Training's gated Q/K/V: the padded matmul x W'^T + b' (B T, width), log g written into k's extra
    channel, q', k', v' (B, nh, T, d) returned as views of that buffer; values and gradients equal those
    of autograd's graph of the same operators (`padded_qkv_weights`, F.linear, an in-place write, the
    views) bit for bit.

    That graph costs backward two copies of the buffer's gradient (the stack of the q, k, v gradients,
    then its reshape), a third for the in-place write (CopySlices), the padded weights' own nodes and,
    when the gate read its projection from the channel first, a zero-filled buffer-sized gradient and its
    sum. Here the padded weights are built from the parameters (c_attn's weight and bias, the gate's
    projection when folded) outside autograd, and backward gathers the q, k, v gradients into one buffer
    (one copy), replaces the channel's gradient, runs the matmul's backward on it and hands each parameter
    its rows. The channel holds ``channel.values(source)`` (`RecomputedChannel`, `FusedGateChannel`), with
    `source` the channel's projection (None: read it here) or a log g computed outside (or a key bias's b,
    with its floor None: see `key_channel`); backward has ``channel.grads`` recompute it from `source`, so
    its intermediates are not kept either. Under autocast the matmul runs in autocast's dtype, as
    autocast would run it, and the gradients come back in the inputs' dtypes.
    """

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        projection: torch.Tensor | None,
        layout: tuple[int, int, int, int],
        buffer_dtype: torch.dtype | None,
        channel_fn: RecomputedChannel | FusedGateChannel,
        source: torch.Tensor | None,
        *params: nn.Parameter,
    ) -> tuple[torch.Tensor, ...]:
        # x (B T, C); weight (3 C, C), bias (3 C,): c_attn's; projection (nh, C) or None
        ctx.dtypes = tuple(None if t is None else t.dtype for t in (x, weight, bias, projection))
        padded, padded_bias = padded_qkv_weights(weight, bias, projection, layout)  # (width, C), (width,)
        if torch.is_autocast_enabled(x.device.type):
            dtype = torch.get_autocast_dtype(x.device.type)
            x, padded, padded_bias = x.to(dtype), padded.to(dtype), padded_bias.to(dtype)
        with torch.autocast(x.device.type, enabled=False):
            qkv = torch.addmm(padded_bias, x, padded.t())  # (B T, width)
            if buffer_dtype is not None and qkv.dtype != buffer_dtype:  # `fp32_kernel`: q, k, v as rounded
                qkv = qkv.to(buffer_dtype)
            channel = key_channel_of(qkv, layout)  # (B, T, nh)
            ctx.folded = source is None
            if ctx.folded:
                source = rows_of_t(channel)  # the energy projection, before log g overwrites it
            channel.copy_(channel_fn.values(source, qkv.dtype))
        ctx.layout, ctx.channel_fn = layout, channel_fn
        # a key bias's b given as it is (no floor, log_gate the identity) makes a channel linear in b: its
        # gradient needs b's shape, not b, so b is not kept (autograd's graph keeps nothing of it either)
        linear = not ctx.folded and channel_fn.floor is None
        ctx.source_like = (source.shape, source.dtype) if linear else None
        ctx.save_for_backward(x, padded, None if linear else source)
        return tuple(qkv_heads(qkv, layout).unbind(0))  # 3 x (B, nh, T, d)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, padded, source = ctx.saved_tensors
        if ctx.source_like is not None:  # any b of that shape: the channel is linear in it
            source = x.new_zeros(ctx.source_like[0], dtype=ctx.source_like[1])
        layout = ctx.layout
        _, nh, hs, d = layout
        used = 3 * nh * d
        # (B T, 3 nh d): the buffer's gradient, in rows of the buffer's width (`buffer_width`) whose last
        # elements (the alignment) nothing reads or writes; the matmuls below take it with K = 3 nh d, as
        # autograd's graph of the unaligned buffer would (a longer K may sum in another order)
        grad = grads[0].new_empty(x.shape[0], padded.shape[0])[:, :used]  # the buffer's dtype
        padded = padded[:used]
        for part, g in zip(qkv_heads(grad, layout), grads, strict=True):
            part.copy_(g)
        channel = key_channel_of(grad, layout)  # (B, T, nh)
        source_grad, param_grads = ctx.channel_fn.grads(source, channel)
        if ctx.folded:  # the write made the channel's own gradient 0; the read gives it the projection's
            channel.copy_(source_grad)
            source_grad = None
        else:
            channel.zero_()
        if grad.dtype != x.dtype:  # an fp32 buffer of a bf16 matmul (`fp32_kernel`): its cast's backward
            grad = grad.to(x.dtype)
        # addmm's backward as autograd runs it, then each parameter's rows of the padded gradients
        needs = ctx.needs_input_grad
        x_grad = grad.mm(padded) if needs[0] else None
        weight_grad = projection_grad = bias_grad = None
        if needs[1] or needs[3]:
            padded_grad = grad.t().mm(x).view(3, nh, d, -1)  # (3, nh, d, C)
            weight_grad = padded_grad[:, :, :hs].reshape(3 * nh * hs, -1)
            projection_grad = padded_grad[1, :, hs] if needs[3] else None  # (nh, C)
        if needs[2]:
            bias_grad = grad.sum(0).view(3, nh, d)[..., :hs].flatten()
        matmul = zip((x_grad, weight_grad, bias_grad, projection_grad), ctx.dtypes, strict=True)
        matmul_grads = (g if g is None or g.dtype == t else g.to(t) for g, t in matmul)
        return *matmul_grads, None, None, None, source_grad, *param_grads


# ------------------------------------------------------------------------------------------------
# The layer's parts on the padded layout, shared by `FusedAttention`'s training and cached generation


def channel_floor(gate: KeyBias) -> float | None:
    """The least value of the padded channel: an energy gate's log g is clamped (`LOG_GATE_FLOOR`), another
    key bias's b goes in as it is."""
    return LOG_GATE_FLOOR if isinstance(gate, Gate) else None


def per_key_bias(gate: KeyBias, x: torch.Tensor) -> torch.Tensor:
    """The key gate's per-key bias (B, nh, T) in fp32, for the padded channel: log g, or a key bias's b (which
    may be (1, nh, T)) expanded to the batch."""
    b = gate(x)
    return b if isinstance(gate, Gate) else b.expand(x.shape[0], -1, -1)


def folded_projection(gate: KeyBias, n_head: int, x: torch.Tensor) -> torch.Tensor | None:
    """An energy gate's projection weight (nh, C) if the Q/K/V matmul computes it (folds it), else None."""
    projection = gate.input_projection() if isinstance(gate, Gate) else None
    # under autocast the gate keeps its own fp32 projection, so its energy stays exact
    if projection is None or projection.out_features != n_head or torch.is_autocast_enabled(x.device.type):
        return None
    return projection.weight


def write_key_channel(
    qkv: torch.Tensor,
    layout: tuple[int, int, int, int],
    floor: float | None,
    folded: bool,
    log_gate: Callable[[torch.Tensor | None], torch.Tensor],
) -> tuple[torch.Tensor, ...]:
    """q', k', v' (B, nh, T, d), views of the padded Q/K/V buffer ``qkv`` (B, T, 3 nh d) with k's extra channel
    overwritten by ``log_gate(projection)`` (B, nh, T) (log g, or a key bias's b): ``projection`` (B, T, nh) is
    what the matmul wrote into that channel, the gate's energy projection, when it is ``folded``; else None."""
    channel = key_channel_of(qkv, layout)  # (B, T, nh)
    projection = rows_of_t(channel) if folded else None  # copied: log g overwrites the channel below
    channel.copy_(key_channel(log_gate(projection), layout[2], qkv.dtype, floor))
    return tuple(qkv_heads(qkv, layout).unbind(0))


def full_precision_kernel(q: torch.Tensor) -> contextlib.AbstractContextManager:
    """Where q is fp32 under autocast (`fp32_kernel`), autocast off for the kernel, which it would run in
    its lower dtype; elsewhere nothing."""
    device = q.device.type
    if q.dtype == torch.float32 and torch.is_autocast_enabled(device):
        return torch.autocast(device, enabled=False)
    return contextlib.nullcontext()


def project_padded(y: torch.Tensor, c_proj: nn.Linear, weight: torch.Tensor | None = None) -> torch.Tensor:
    """c_proj of y' = [y, 0] (B, nh, T, d) -> (B, T, C): v's extra channel is 0, so y's is too.

    Slicing y back to hs channels would copy it (and keep the copy for backward); instead c_proj's weight
    gets a zero column per extra channel (``weight``, when built already: generation builds it once).
    """
    B, nh, T, d = y.shape
    weight = padded_proj_weight(c_proj.weight, nh, d) if weight is None else weight
    return F.linear(y.transpose(1, 2).reshape(B, T, nh * d), weight, c_proj.bias)


def refuse_dropout_first(layer: CausalSelfAttention, dropout_p: float, path: str) -> None:
    """The author's order (dropout before the gate) with dropout in training, on a path that can neither
    materialise the weights dropout acts on nor take its keep mask (FlexAttention); with no dropout both orders are
    one formula, computed there."""
    if layer.cfg.dropout_before_gate and dropout_p > 0:
        raise ValueError(
            f"dropout_before_gate with attention dropout {dropout_p} trains on attention=reference or fused only: "
            f"the {path} path never materialises the weights that dropout acts on."
        )


def dropout_keep(shape: torch.Size, p: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The keep mask (B, nh, T, T) of dropout on the attention weights, True where a weight is kept: drawn with the
    generator calls F.dropout makes on the reference path's weights of that dtype (``bernoulli_(1 - p)`` of a
    tensor of their shape), so that one seed drops the same weights on both paths."""
    return torch.empty(shape, dtype=dtype, device=device).bernoulli_(1 - p).bool()


def attend_cached(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: LayerCache, hs: int) -> torch.Tensor:
    """SDPA of (B, nh, t, d) new q, k, v over every cached key and the new ones, scaled by the true head size."""
    scale = 1.0 / math.sqrt(hs)
    t_new = q.shape[2]
    k, v = cache.append(k, v)  # (B, nh, T_cached + t_new, d)
    if t_new == 1:  # one new query sees every key: no mask needed
        visible = None
    else:  # new query i sits at position T_all - t_new + i and sees every key up to it
        positions = torch.arange(cache.length, device=q.device)
        visible = positions[None, :] <= positions[cache.length - t_new :, None]
    with full_precision_kernel(q):  # fp32 q, k, v under autocast (`fp32_kernel`) stay fp32
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=scale)


def rotate_padded(
    layer: CausalSelfAttention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q' = [rot(q), 1, 0..], k' = [rot(k), b sqrt(hs), 0..] of the padded q' = [q, 1, 0..], k' = [k, b sqrt(hs), 0..]
    (B, nh, T, hs + width), the positions start .. start + T - 1, rot the layer's position encoding (`Position`).

    Only the true channels turn: q'.k' = rot(q).rot(k) + b sqrt(hs), so the identity of the padded layout
    (softmax_j(rot(q_i).rot(k_j) / sqrt(hs) + b_j)) holds with a rotation as without.
    """
    q, k = rotate_true_channels(layer.position, q, k, layer.n_embd // layer.n_head, start)
    return q, k, v


class FusedAttention(CausalSelfAttention):
    """`CausalSelfAttention`'s attention on the fused causal SDPA kernel: a key gate's bias in the padded
    channel or as the relative mask, as `rides_channel` says (the one rule)."""

    impl = "fused"

    def __init__(
        self,
        cfg: GPTConfig,
        gate: KeyBias | None = None,
        output_gate: OutputGate | None = None,
        position: Position | None = None,
        *,
        copy_free_write: bool = True,
        fused_channel: bool = True,
        fp32_kernel: bool = True,
    ) -> None:
        """The paths of the same values, chosen when the model is built (``model.attention_options``; a bench builds
        the variant it times, the tests hold each to the default):

        - ``copy_free_write``: training's gated Q/K/V matmul as `GatedQKV`; False: autograd's own graph of F.linear
          and an in-place write (the path generation and probed gates take), equal to it bit for bit;
        - ``fused_channel``: `GatedQKV` computes EGA-1's channel as `FusedGateChannel` (forward and a hand-written
          backward, no graph); False: as `RecomputedChannel` (the gate's graph rebuilt in backward), equal to it;
        - ``fp32_kernel``: a learned key bias (FoX) under bf16/fp16 rides the channel with the kernel in fp32
          (`fp32_kernel`); False: it takes the relative (T, T) mask there, which rounds otherwise
          (scripts/paired_steps.py times one against the other).
        """
        super().__init__(cfg, gate, output_gate, position)
        self.copy_free_write, self.fused_channel, self.fp32_kernel = copy_free_write, fused_channel, fp32_kernel

    def forward(self, x: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        """x: the LayerNorm-ed hidden state (B, T, C) -> (B, T, C); with a `cache`, x holds the positions that
        follow the cached ones (`cached`)."""
        dropout_p = self.dropout if self.training else 0.0
        return self.resid_dropout(self.attend(x, dropout_p) if cache is None else self.cached(x, cache, dropout_p))

    def cached(self, x: torch.Tensor, cache: LayerCache, dropout_p: float = 0.0) -> torch.Tensor:
        """What `attend` computes for x (B, t, C), the t positions that follow the cached ones, over every cached
        key -> (B, t, C), on the padded layout: the cache is extended by the new keys (their channel holding the
        key gate's bias) and values, and the key gate's state by the new positions (the gate's `step`)."""
        refuse_dropout_first(self, dropout_p, "cached")
        hs = self.n_embd // self.n_head
        if self.gate is None:
            q, k, v = self.heads(x, cache.length)  # (B, nh, t, hs), at the positions after the cached ones
            return self.project(attend_cached(q, k, v, cache, hs), x)
        if not rides_channel(self.gate, x, self.fp32_kernel):
            return self.project(self._cached_key_biased(x, cache, dropout_p), x)
        qkv = self._cached_gated_qkv(x, cache)
        q, k, v = rotate_padded(self, *qkv, start=cache.length)  # 3 x (B, nh, t, hs + width)
        y = attend_cached(q, k, v, cache, hs)
        if self.output_gate is not None:  # the gate's factor is per true channel: y back to hs of them
            return self.project(y[..., :hs], x)
        weight = cache.reuse("proj", lambda: padded_proj_weight(self.c_proj.weight, self.n_head, y.shape[-1]))
        return project_padded(y, self.c_proj, weight)

    def _cached_key_biased(self, x: torch.Tensor, cache: LayerCache, dropout_p: float) -> torch.Tensor:
        """Attention (B, nh, t, hs) with a key bias's relative term b_j - b_i over the cached keys and the new ones,
        where `rides_channel` keeps it out of the padded channel; the cache keeps the keys' b."""
        q, k, v = self.heads(x, cache.length)  # (B, nh, t, hs)
        b, cache.gate = self.gate.step(x, cache.gate)  # b of the new positions only
        keys = cache.append_bias(b)  # (B or 1, nh, T_cached + t)
        k, v = cache.append(k, v)
        bias = relative_bias(b, keys)  # (B or 1, nh, t, T_all), -inf above the diagonal
        scale = 1.0 / math.sqrt(self.n_embd // self.n_head)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), dropout_p=dropout_p, scale=scale)

    def _cached_gated_qkv(self, x: torch.Tensor, cache: LayerCache) -> tuple[torch.Tensor, ...]:
        """q', k', v' (B, nh, t, hs + width) of the new positions on the padded layout (`_gated_qkv`), k's channel
        holding the new keys' log g (or b) from the gate's incremental state; the padded weights built once."""
        _, T, C = x.shape
        nh, hs = self.n_head, C // self.n_head
        layout = (T, nh, hs, hs + (self.pad_width or pad_width(x.device)))
        gate, projection = self.gate, folded_projection(self.gate, nh, x)  # (nh, C) or None
        weight, bias = cache.reuse(
            "qkv", lambda: padded_qkv_weights(self.c_attn.weight, self.c_attn.bias, projection, layout)
        )

        def log_gate(folded: torch.Tensor | None) -> torch.Tensor:  # only the new keys' gates
            step = gate.step(x, cache.gate, folded) if isinstance(gate, Gate) else gate.step(x, cache.gate)
            log_g, cache.gate = step
            return log_g

        qkv = F.linear(x, weight, bias)
        if fp32_kernel(gate, x, self.fp32_kernel):
            qkv = qkv.float()
        return write_key_channel(qkv, layout, channel_floor(gate), projection is not None, log_gate)

    def attend(self, x: torch.Tensor, dropout_p: float) -> torch.Tensor:
        """What `forward` computes before the residual dropout (B, T, C), by the form of the key gate."""
        if self.gate is None:
            q, k, v = self.heads(x)  # (B, nh, T, hs)
            return self.project(self.causal(q, k, v, dropout_p), x)
        if not rides_channel(self.gate, x, self.fp32_kernel):
            return self.project(self._key_biased(x, dropout_p), x)
        if torch.compiler.is_compiling():
            return self._gated_compiled(x, dropout_p)
        q, k, v = rotate_padded(self, *self._gated_qkv(x))  # 3 x (B, nh, T, hs + width)
        y = self.causal(q, k, v, dropout_p, self.dropout_first)
        if self.output_gate is not None:  # the gate's factor is per true channel: y back to hs of them
            return self.project(y[..., : self.n_embd // self.n_head], x)
        return project_padded(y, self.c_proj)

    @property
    def dropout_first(self) -> bool:
        """Whether attention dropout comes before the energy gate and the renormalisation (the author's order)."""
        return self.cfg.dropout_before_gate

    def causal(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float, dropout_first: bool = False
    ) -> torch.Tensor:
        """Causal SDPA of (B, nh, T, d) q, k, v, scaled by the true head size; with ``dropout_first`` (the author's
        order, `attention.dropout_first_attention_reference`) its dropout as a keep mask.

        The author's order drops weights of softmax(s), multiplies by g and renormalises each row: d_ij a_ij g_j /
        sum_k d_ik a_ik g_k, with the log g of the padded channel in s, is the softmax of s over the kept keys
        alone, dropout's 1 / (1 - p) cancelling. So the kernel takes the keep mask (and the causal one) as its
        boolean mask, with no dropout of its own. A row whose every key is dropped gives 0, as the reference's floor
        does; the two differ only where a row's kept mass d a g lies below the reference's floor (1e-8) or a log g
        below the channel's clamp (`LOG_GATE_FLOOR`): scripts/dropout_first_floor.py counts both on a checkpoint.
        """
        scale = 1.0 / math.sqrt(self.n_embd // self.n_head)
        with full_precision_kernel(q):
            if not (dropout_first and dropout_p > 0):
                return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale)
            B, nh, T, _ = q.shape
            keep = dropout_keep(torch.Size((B, nh, T, T)), dropout_p, q.dtype, q.device)  # (B, nh, T, T)
            keep &= torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=scale)

    def _key_biased(self, x: torch.Tensor, dropout_p: float) -> torch.Tensor:
        """Attention (B, nh, T, hs) with a key bias's relative term b_j - b_i (see `gates.slots`) in fp32,
        where `rides_channel` keeps it out of the padded channel.

        SDPA takes the (T, T) term as its additive mask, in the kernel's dtype: relative, the term is
        0 on the diagonal and small near it, so bf16 keeps what matters of it.
        """
        q, k, v = self.heads(x)  # (B, nh, T, hs)
        b = self.gate(x)  # (B or 1, nh, T), fp32
        bias = relative_bias(b, b)  # (B or 1, nh, T, T), -inf above the diagonal
        scale = 1.0 / math.sqrt(self.n_embd // self.n_head)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), dropout_p=dropout_p, scale=scale)

    def _gated_compiled(self, x: torch.Tensor, dropout_p: float) -> torch.Tensor:
        """The padded layout as `torch.compile` traces it: q', k', v' concatenated from q, k, v and the
        gate's channel, y sliced back to hs channels for c_proj.

        Eager, the padded matmul and its in-place write of log g save copies; traced, the compiler turns
        that write into a copy of the whole Q/K/V buffer (forward and backward) and cannot fuse it, while
        it fuses these concatenations and the slice into its own kernels (`ega bench --compile`).
        """
        B, T, C = x.shape
        nh, hs = self.n_head, C // self.n_head
        width = self.pad_width or pad_width(x.device)
        q, k, v = self.heads(x)  # (B, nh, T, hs)
        if fp32_kernel(self.gate, x, self.fp32_kernel):
            q, k, v = q.float(), k.float(), v.float()
        channel = key_channel(per_key_bias(self.gate, x), hs, q.dtype, channel_floor(self.gate))  # (B, T, nh)
        channel = channel.transpose(1, 2)[..., None]  # (B, nh, T, 1)
        zeros = channel.new_zeros(B, nh, T, width - 1)
        q = torch.cat([q, torch.ones_like(channel), zeros], dim=-1)  # (B, nh, T, hs + width)
        k = torch.cat([k, channel, zeros], dim=-1)
        v = torch.cat([v, channel.new_zeros(B, nh, T, width)], dim=-1)
        y = self.causal(q, k, v, dropout_p, self.dropout_first)[..., :hs]  # (B, nh, T, hs)
        return self.project(y, x)

    def _gated_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
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
        projection = folded_projection(self.gate, nh, x)  # (nh, C) or None
        floor = channel_floor(self.gate)
        # The options chose the path when the model was built; what is left to choose per call depends on the
        # call: backward to come (grad mode), the input's dtype, and hooks, which the gate callbacks' probes attach
        # after the build. `GatedQKV` calls the gate's arithmetic, not the module, when it folds: a gate with hooks
        # takes the plain path, so that its hooks see every call
        hooked = projection is not None and has_hooks(self.gate)
        kernel32 = fp32_kernel(self.gate, x, self.fp32_kernel)
        if self.copy_free_write and torch.is_grad_enabled() and not hooked:
            if projection is not None:  # the gate reads its projection from the channel that its log g overwrites
                source = None
                if self.fused_channel and self.gate.fused_log_gate() and x.dtype in EXACT_CHANNEL_DTYPES:
                    channel_fn = FusedGateChannel(self.gate, hs, floor)
                else:
                    log_gate, params = self.gate.log_gate_from_projection, tuple(self.gate.parameters())
                    channel_fn = RecomputedChannel(log_gate, hs, floor, params)
            else:
                source = per_key_bias(self.gate, x)
                channel_fn = RecomputedChannel(_identity, hs, floor, tuple(self.gate.parameters()))
            weight, bias = self.c_attn.weight, self.c_attn.bias
            buffer_dtype = torch.float32 if kernel32 else None
            x = x.reshape(B * T, C)
            return GatedQKV.apply(
                x, weight, bias, projection, layout, buffer_dtype, channel_fn, source, *channel_fn.params
            )
        qkv = F.linear(x, *padded_qkv_weights(self.c_attn.weight, self.c_attn.bias, projection, layout))
        if kernel32:
            qkv = qkv.float()
        if isinstance(self.gate, Gate):
            return write_key_channel(qkv, layout, floor, projection is not None, lambda p: self.gate(x, p))
        return write_key_channel(qkv, layout, floor, False, lambda _: per_key_bias(self.gate, x))


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t
