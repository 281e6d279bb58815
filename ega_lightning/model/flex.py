"""The flex path (`FlexAttention`): the key gate as a FlexAttention ``score_mod``, no padded channel.

The same attention as `attention.gated_attention_reference` (an energy gate: softmax_j(q_i.k_j / sqrt(hs) +
log g_j)) and `attention.biased_attention_reference` (a key bias: + b_j - b_i), over a causal block mask; a
key bias adds b_j or b_j - b_i as `fused.rides_channel` says, as the fused path does. For CUDA, where it is
compiled; on CPU torch's FlexAttention has no backward, so there it only evaluates (under no_grad).
FlexAttention came with torch 2.5: the project also runs on 2.4, without it.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable
from typing import Any

import torch

from ega_lightning.model import fused
from ega_lightning.model.fused import LOG_GATE_FLOOR, FusedAttention, channel_floor, per_key_bias


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


def _refuse_what_flex_cannot(q: torch.Tensor, bias: torch.Tensor, dropout_p: float, *rest: torch.Tensor) -> None:
    """Attention dropout and CPU training, which torch's FlexAttention has not: each said with the way out."""
    if dropout_p > 0:
        raise ValueError(
            "model.attention=flex has no attention dropout (FlexAttention takes none); "
            "train with model.attention=fused, or with model.dropout=0."
        )
    if not q.is_cuda and torch.is_grad_enabled() and any(t.requires_grad for t in (q, bias, *rest)):
        raise ValueError(
            "model.attention=flex trains only on CUDA: torch's FlexAttention has no backward on CPU. "
            "Use model.attention=fused (the default), the same attention on the SDPA kernel."
        )


def flex_gated_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_g: torch.Tensor,
    dropout_p: float = 0.0,
    floor: float | None = LOG_GATE_FLOOR,
) -> torch.Tensor:
    """q, k, v (B, nh, T, hs); log_g (B or 1, nh, T) -> (B, nh, T, hs): softmax_j(q_i.k_j / sqrt(hs) + log g_j), j <= i.

    ``log_g`` is a per-key bias added as it is: an energy gate's log g, clamped at `floor` as the fused
    path's channel clamps it, or (``floor`` None) a key bias's b where `fused.rides_channel` says so."""
    _refuse_what_flex_cannot(q, log_g, dropout_p, k, v)
    T, hs = q.shape[-2], q.shape[-1]
    flex_attention = _flex(q.device.type)[0]
    if floor is not None:
        log_g = log_g.clamp_min(floor)  # as the fused path, so the two agree on gated-out keys
    log_g = log_g.expand(q.shape[0], -1, -1)

    def add_log_gate(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor):
        return score + log_g[b, h, kv_idx]

    block_mask = _causal_block_mask(T, q.device)
    return flex_attention(q, k, v, score_mod=add_log_gate, block_mask=block_mask, scale=1.0 / math.sqrt(hs))


def flex_biased_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: torch.Tensor, dropout_p: float = 0.0
) -> torch.Tensor:
    """q, k, v (B, nh, T, hs); b (B or 1, nh, T) a key bias -> softmax_j(q_i.k_j / sqrt(hs) + b_j - b_i), j <= i."""
    _refuse_what_flex_cannot(q, b, dropout_p, k, v)
    T, hs = q.shape[-2], q.shape[-1]
    flex_attention = _flex(q.device.type)[0]
    b = b.expand(q.shape[0], -1, -1)

    def add_relative_bias(
        score: torch.Tensor, bi: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ):
        return score + (b[bi, h, kv_idx] - b[bi, h, q_idx])

    block_mask = _causal_block_mask(T, q.device)
    return flex_attention(q, k, v, score_mod=add_relative_bias, block_mask=block_mask, scale=1.0 / math.sqrt(hs))


class FlexAttention(FusedAttention):
    """`CausalSelfAttention`'s attention with the key gate's bias as FlexAttention's ``score_mod``: b_j where
    `fused.rides_channel` says channel, b_j - b_i where it says relative; without a key gate, the fused path."""

    impl = "flex"

    def attend(self, x: torch.Tensor, dropout_p: float) -> torch.Tensor:
        if self.gate is None:
            return super().attend(x, dropout_p)
        q, k, v = self.heads(x)  # (B, nh, T, hs)
        if fused.rides_channel(self.gate, x, self.fp32_kernel):
            y = flex_gated_attention(q, k, v, per_key_bias(self.gate, x), dropout_p, channel_floor(self.gate))
        else:
            y = flex_biased_attention(q, k, v, self.gate(x), dropout_p)
        return self.project(y, x)
