"""Rotary position embedding (RoPE; Su et al., RoFormer, 2021), the rotate-half form of GPT-NeoX and LLaMA (HF).

Channel i of a head (0 <= i < hs / 2) is paired with channel i + hs / 2, and the pair at position m is rotated by
the angle m theta_i, theta_i = 10000^(-2i / hs) (RoFormer's base):

    rope(x)_m = x_m cos(m theta) + rotate_half(x_m) sin(m theta),   rotate_half([x1, x2]) = [-x2, x1].

RoFormer writes the pairs interleaved, (2i, 2i + 1); the rotate-half form pairs (i, i + hs / 2), a fixed
permutation of the channels of q and k that a learned Q/K projection absorbs: a model trained in one form is not
loadable in the other, so this project states the one it uses. Only q and k are rotated, so q_m . k_n depends on
m - n alone: positions that restart at any offset (a fresh generation cache) give the same logits.
"""

from __future__ import annotations

import torch

ROPE_BASE = 10_000.0


def rope_angles(positions: torch.Tensor, hs: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The rotation angles m theta_i (T, hs / 2) of the positions m (T,), for a head of size hs, in ``dtype``."""
    inv_freq = ROPE_BASE ** (-torch.arange(0, hs, 2, device=positions.device, dtype=dtype) / hs)
    return positions.to(dtype)[:, None] * inv_freq[None, :]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] over the last dimension, split in halves."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, start: int = 0, width: int | None = None) -> torch.Tensor:
    """x (B, nh, T, d) with its first ``width`` channels (None: all d) rotated as the positions start .. start +
    T - 1; channels past ``width`` (the fused path's padded gate channel) are left as they are."""
    T, d = x.shape[-2], x.shape[-1]
    hs = d if width is None else width
    # the angles in fp32 at least, the product in x's dtype: a bf16 angle would be off by whole radians at m ~ 500
    dtype = torch.promote_types(x.dtype, torch.float32)
    angles = rope_angles(torch.arange(start, start + T, device=x.device), hs, dtype)  # (T, hs / 2)
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1).to(x.dtype)  # (T, hs)
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1).to(x.dtype)
    head = x if width is None else x[..., :hs]
    rotated = head * cos + rotate_half(head) * sin  # (B, nh, T, hs)
    return rotated if width is None or width == d else torch.cat([rotated, x[..., hs:]], dim=-1)


__all__ = ["ROPE_BASE", "apply_rope", "rope_angles", "rotate_half"]
