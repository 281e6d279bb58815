"""The position encodings: objects, as the gates are. `GPT` builds one (``model.position`` names it in `POSITIONS`)
and hands it to every attention layer; the model calls ``embed`` on the token ids, every attention path ``rotate``
on its queries and keys. A new encoding is one `Position` subclass and one `register_position`.

- ``learned`` (the default, what every committed record ran): nanoGPT's absolute embedding ``wpe``, added to the
  token embedding; no embedding past block_size;
- ``rope``: RoPE (Su et al., RoFormer, 2021), q and k rotated by their position, in the rotate-half form of
  GPT-NeoX and LLaMA (HF);
- ``none``: no position signal but the causal mask (and a key gate's bias if it has one: ALiBi's and FoX's papers'
  design; ALiBi is a gate here, not a position encoding).

With rope or none a model reads windows longer than block_size (length extrapolation).

RoPE: channel i of a head (0 <= i < hs / 2) is paired with channel i + hs / 2, and the pair at position m is rotated
by the angle m theta_i, theta_i = 10000^(-2i / hs) (RoFormer's base):

    rope(x)_m = x_m cos(m theta) + rotate_half(x_m) sin(m theta),   rotate_half([x1, x2]) = [-x2, x1].

RoFormer writes the pairs interleaved, (2i, 2i + 1); the rotate-half form pairs (i, i + hs / 2), a fixed
permutation of the channels of q and k that a learned Q/K projection absorbs: a model trained in one form is not
loadable in the other, so this project states the one it uses. Only q and k are rotated, so q_m . k_n depends on
m - n alone: positions that restart at any offset (a fresh generation cache) give the same logits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import nn

if TYPE_CHECKING:
    from ega_lightning.model.config import GPTConfig

ROPE_BASE = 10_000.0


class Position:
    """A position encoding, built once per model from its `GPTConfig`.

    ``embed(idx, start)``: what is added to the token embedding of ids idx (B, T) at the positions start ..
    start + T - 1, (T, C), or None; ``rotate(q, k, start)``: q and k (B, nh, T, hs) at those positions as the
    attention sees them. An encoding with parameters makes them in ``module`` (GPT registers it as ``wpe``, so the
    learned embedding keeps its state-dict key and the init draws' order); one without has none.
    """

    name: ClassVar[str]  # set by `register_position`
    # whether ``rotate`` changes q and k (the padded layout skips the call, and its copies, where it does not)
    rotates: ClassVar[bool] = False
    # whether windows longer than block_size can be read (nothing in the encoding ends at block_size)
    extrapolates: ClassVar[bool] = True

    def __init__(self, cfg: GPTConfig) -> None:
        self.cfg = cfg

    @classmethod
    def refusal(cls, n_embd: int, n_head: int) -> str | None:
        """Why a model of this shape cannot take the encoding (a sentence naming the way out), or None."""
        return None

    def module(self) -> nn.Module | None:
        """The encoding's parameters, made once (the model's init draws them in the order it registers them)."""
        return None

    def embed(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor | None:
        return None

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        return q, k


POSITIONS: dict[str, type[Position]] = {}


def register_position(name: str) -> Callable[[type[Position]], type[Position]]:
    """A class decorator: ``model.position=<name>`` builds the class."""

    def register(cls: type[Position]) -> type[Position]:
        cls.name = name
        POSITIONS[name] = cls
        return cls

    return register


def position_class(name: str) -> type[Position]:
    """The encoding ``name`` registers; a ValueError listing the registered ones for another name."""
    if name not in POSITIONS:
        raise ValueError(f"model.position must be one of {tuple(POSITIONS)}, got {name!r}.")
    return POSITIONS[name]


def build_position(cfg: GPTConfig) -> Position:
    """The encoding ``cfg.position`` names, for a model of ``cfg``; a ValueError where it cannot take the shape."""
    if cfg.position not in POSITIONS:
        raise ValueError(f"Unknown position encoding {cfg.position!r}; choose one of {tuple(POSITIONS)}.")
    cls = POSITIONS[cfg.position]
    refusal = cls.refusal(cfg.n_embd, cfg.n_head)
    if refusal is not None:
        raise ValueError(refusal)
    return cls(cfg)


@register_position("learned")
class LearnedPosition(Position):
    """nanoGPT's learned absolute embedding (``wpe``), added to the token embedding: block_size positions."""

    extrapolates = False

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg)
        self.wpe: nn.Embedding | None = None

    def module(self) -> nn.Embedding:
        if self.wpe is None:
            self.wpe = nn.Embedding(self.cfg.block_size, self.cfg.n_embd)
        return self.wpe

    def embed(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor:
        end = start + idx.shape[1]
        if end > self.cfg.block_size:
            raise ValueError(f"Sequence of length {end} is longer than block_size {self.cfg.block_size}.")
        return self.module()(torch.arange(start, end, device=idx.device))  # (T, C)


@register_position("rope")
class RotaryPosition(Position):
    """RoPE (see the module docstring): q and k rotated by their positions, base `ROPE_BASE`."""

    rotates = True

    @classmethod
    def refusal(cls, n_embd: int, n_head: int) -> str | None:
        if (n_embd // n_head) % 2 == 0:
            return None
        return (
            f"model.position=rope rotates pairs of channels, so the head size n_embd / n_head must be even; it is "
            f"{n_embd} / {n_head} = {n_embd // n_head}. Change model.n_embd or model.n_head."
        )

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        return apply_rope(q, start), apply_rope(k, start)


@register_position("none")
class NoPosition(Position):
    """No position signal but the causal mask (and a key gate's bias, if the gate has one)."""


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


def rotate_true_channels(
    position: Position, q: torch.Tensor, k: torch.Tensor, hs: int, start: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k of a padded layout (B, nh, T, hs + width) with their first hs channels rotated by ``position`` and the
    rest (the fused path's channel: q's 1, k's key bias) as they are; as they are where the encoding rotates nothing."""
    if not position.rotates:
        return q, k
    q_true, k_true = position.rotate(q[..., :hs], k[..., :hs], start)
    return torch.cat([q_true, q[..., hs:]], dim=-1), torch.cat([k_true, k[..., hs:]], dim=-1)


__all__ = [
    "POSITIONS",
    "ROPE_BASE",
    "LearnedPosition",
    "NoPosition",
    "Position",
    "RotaryPosition",
    "apply_rope",
    "build_position",
    "position_class",
    "register_position",
    "rope_angles",
    "rotate_half",
    "rotate_true_channels",
]
