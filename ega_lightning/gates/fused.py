"""The gates' z-norm and log-sigmoid as two autograd functions with hand-written backward passes.

Autograd's graph of the causal z-norm and the log-sigmoid (`base._znorm_continue`, `Gate.log_gate_from_z`)
is about twenty element-wise nodes on (B, nh, T) tensors; on a CPU at the sizes EGA trains, each costs
more in the engine's and Python's overhead than in arithmetic, and backward pays that twice (it rebuilds
the graph from the saved energy, see `base.Recomputed`, then walks it). Here each is one node:

- `ZNorm`: z of the energy e (B, R, T), the causal prefix or the whole window, divided by
  sqrt(var + eps) (ours, EGA_SPEC.md section 2) or by max(std, std_floor) (the author's);
- `ZNormLogGate`: log g = log sigmoid(alpha_h (z_j - tau_h)) of e, the z-norm and the sigmoid in one node.

The forward passes run the reference's operators in the reference's order, so z and log g are the
reference's to fp32's last bit (bit for bit where the CPU's kernels take one vector path for a strided and a
contiguous operand, as AVX2's do; an element may round one ulp apart where they do not, as AVX-512's); the
backward passes are the same derivative written out (so their rounding, not
their value, differs from autograd's). tests/test_fused_gate.py holds them to the formula in float64
(gradcheck) and to the autograd path in fp32. `base.Gate` chooses them (its ``fused_arithmetic`` option).

They keep their intermediates for backward: in training they are built inside `base.Recomputed`'s (and
`model.fused.GatedQKV`'s) recomputation, which frees them as soon as backward has used them, so a
step keeps only the energy, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


def _reverse_cumsum(t: torch.Tensor) -> torch.Tensor:
    """sum_{k >= j} t_k along the last dim: what a cumulative sum's backward hands position j."""
    return t.flip(-1).cumsum(-1).flip(-1)


def znorm_forward(
    e: torch.Tensor, mode: str, eps: float, std_floor: float | None
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """z (B, R, T) of e (B, R, T) and what backward needs: the operators of `base._znorm_continue` (prefix) and
    `base.Gate.normalise` (window) in their order, so z is theirs bit for bit."""
    # the energy usually arrives as a transposed view of (B, T, R) (EGA-1's projection): every element-wise
    # operator and cumulative sum below runs several times faster (6x at the paper size) on rows of T, and
    # gives the same values to the last bit (AVX-512's kernels may round an element one ulp apart)
    rows = e.contiguous()  # (B, R, T)
    if mode == "prefix":
        # centred on e_1: z is shift-invariant, and the running sums stay small
        c = rows - rows[..., :1]  # (B, R, T)
        n = torch.arange(1, e.shape[-1] + 1, device=e.device, dtype=e.dtype)  # (T,): the prefix's length
        mean = c.cumsum(-1) / n
        raw = c.square().cumsum(-1) / n - mean.square()  # the prefix's variance, before rounding's floor at 0
        var = raw.clamp_min(0.0)
        centred = c - mean
        # D, the denominator's square: var + eps (ours), or max(std, floor)^2 (the author's, see base._scaled)
        squared = var + eps if std_floor is None else var.clamp_min(std_floor**2)
        denominator = torch.sqrt(squared)
    else:  # the window's mean and variance of e as given: a reduction's order follows the layout
        n, c = None, rows
        mean = e.mean(-1, keepdim=True)  # (B, R, 1)
        centred = rows - mean
        if std_floor is None:
            raw, squared = None, e.var(-1, unbiased=False, keepdim=True) + eps
            denominator = torch.sqrt(squared)
        else:  # the author's: the population std itself (kept as raw), floored
            raw, squared = e.std(-1, keepdim=True, correction=0), None
            denominator = raw.clamp_min(std_floor)
    z = centred / denominator
    return z, (c, n, mean, raw, squared, denominator, z)


def znorm_backward(gz: torch.Tensor, saved: tuple[torch.Tensor, ...], std_floor: float | None) -> torch.Tensor:
    """The gradient (B, R, T) of <z, gz> with respect to e, from `znorm_forward`'s saved tensors."""
    c, n, mean, raw, squared, denominator, z = saved
    gu = gz / denominator  # through z = u / d, u the centred energy
    if n is None:  # the window: u = e - mean(e), d = sqrt(mean(u^2) + eps) or max(std, floor)
        # d(d)/de_i = u_i / (T d) (ours: the same, with d^2 = var + eps); zero where the floor holds d
        gd_over_d = (gz * z).mean(-1, keepdim=True) / denominator  # (B, R, 1): -sum_j gz_j u_j / d^2, over T d
        if std_floor is not None:
            gd_over_d = gd_over_d * (raw >= std_floor)
        return gu - gu.mean(-1, keepdim=True) - z * gd_over_d
    # the prefix: d = sqrt(D), D = var + eps or max(var, floor^2), var = max(raw, 0). clamp_min passes the
    # gradient where its input is at or above its floor: raw >= 0, and for the author's D raw >= floor^2 too
    keep = raw >= (0.0 if std_floor is None else std_floor**2)
    # dz/dD = -z / (2 D): h = gz z / D is -2 x the gradient into var (a multiplication by the mask: where()
    # with a scalar is 5x slower on CPU)
    h = (gz * z).div_(squared).mul_(keep)
    # var = sq / n - mean^2, mean = s / n, u = c - mean; s and sq the cumulative sums of c and c^2.
    # Into mean: -gu - 2 mean gvar = -(gu - mean h); into s: that / n; into sq: gvar / n = -h / (2 n)
    into_sums = torch.stack([torch.addcmul(gu, mean, h, value=-1.0), h]).div_(n)  # (2, B, R, T), negated
    sums = _reverse_cumsum(into_sums)  # position i takes every later position's: the cumsums' backward
    ge = torch.addcmul(gu - sums[0], c, sums[1], value=-1.0)  # into c: gu + s's + 2 c sq's
    # c = e - e_1: e_1 takes minus the whole gradient besides its own (zero up to rounding: z is shift-invariant)
    ge[..., 0] -= ge.sum(-1)
    return ge


class ZNorm(torch.autograd.Function):
    """z = the z-norm of e (B, R, T) along T (``mode`` prefix or window; ``std_floor`` None: / sqrt(var + eps),
    else / max(std, std_floor)), one autograd node."""

    @staticmethod
    def forward(ctx: Any, e: torch.Tensor, mode: str, eps: float, std_floor: float | None) -> torch.Tensor:
        z, saved = znorm_forward(e, mode, eps, std_floor)
        ctx.std_floor = std_floor
        ctx.save_for_backward(*saved)  # z among them: an output, which ctx must not hold itself
        return z

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, gz: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return znorm_backward(gz.contiguous(), ctx.saved_tensors, ctx.std_floor), None, None, None


class ZNormLogGate(torch.autograd.Function):
    """log g = -softplus(-alpha_h (z_j - tau_h)) (B, R, T), z = `ZNorm` of e (B, R, T); tau, alpha (R,): the
    z-norm and `Gate.log_gate_from_z` in one autograd node."""

    @staticmethod
    def forward(
        ctx: Any,
        e: torch.Tensor,
        tau: torch.Tensor,
        alpha: torch.Tensor,
        mode: str,
        eps: float,
        std_floor: float | None,
    ) -> torch.Tensor:
        z, saved = znorm_forward(e, mode, eps, std_floor)
        shifted = z - tau[:, None]  # (B, R, T)
        a = alpha[:, None] * shifted
        ctx.std_floor = std_floor
        ctx.save_for_backward(alpha, shifted, a, *saved)
        return -F.softplus(-a)  # log sigmoid(a), stable for large |a|, as Gate.log_gate_from_z

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        alpha, shifted, a, *saved = ctx.saved_tensors
        grad = grad.contiguous()  # (B, R, T) rows, as forward's: the gradient may come as a transposed view
        needs = ctx.needs_input_grad
        e_grad, tau_grad, alpha_grad = log_gate_backward(grad, alpha, shifted, a, saved, ctx.std_floor, needs[:3])
        return e_grad, tau_grad, alpha_grad, None, None, None


def log_gate_backward(
    grad: torch.Tensor,
    alpha: torch.Tensor,
    shifted: torch.Tensor,
    a: torch.Tensor,
    saved: Sequence[torch.Tensor],
    std_floor: float | None,
    needs: Sequence[bool],
) -> tuple[torch.Tensor | None, ...]:
    """The gradients (e's, tau's, alpha's; None where ``needs`` says no) of <log g, grad>, log g =
    `ZNormLogGate` of e, from what its forward computed (grad: (B, R, T) rows)."""
    ga = grad * torch.sigmoid(-a)  # d log sigmoid(a) / da = 1 - sigmoid(a)
    gshifted = ga * alpha[:, None]
    alpha_grad = (ga * shifted).sum((0, 2)) if needs[2] else None
    tau_grad = -gshifted.sum((0, 2)) if needs[1] else None
    e_grad = znorm_backward(gshifted, tuple(saved), std_floor) if needs[0] else None
    return e_grad, tau_grad, alpha_grad


def log_gate_channel(
    e: torch.Tensor,
    tau: torch.Tensor,
    alpha: torch.Tensor,
    znorm: tuple[str, float, float | None],
    floor: float,
    scale: float,
    grad: torch.Tensor | None = None,
    needs: Sequence[bool] = (True, True, True),
) -> torch.Tensor | tuple[torch.Tensor | None, ...]:
    """What the padded layout's key channel holds for an energy gate, from its energy e (B, R, T) rows:
    max(log g, floor) scale (B, R, T), log g = `ZNormLogGate` of e (znorm: its mode, eps and std_floor), by
    the operators of ``key_channel(ZNormLogGate.apply(e, ...), ...)`` in their order (the same values bit for bit).

    With ``grad`` (B, R, T) rows, the channel's gradient: forward again, then the gradients (e's, tau's,
    alpha's; None where ``needs`` says no) of <channel, grad> as autograd's graph of those operators
    computes them (its multiplication, clamp_min's backward, then the node's), with no graph: what
    `model.fused.GatedQKV`'s backward takes in place of building one and differentiating it.
    """
    z, saved = znorm_forward(e, *znorm)
    shifted = z - tau[:, None]  # (B, R, T)
    a = alpha[:, None] * shifted
    log_g = -F.softplus(-a)
    if grad is None:
        return log_g.clamp_min_(floor).mul_(scale)
    grad = grad * scale
    # clamp_min's backward: the gradient where log g >= floor, 0 below (as autograd's, a where)
    grad = torch.where(log_g >= floor, grad, 0.0)
    return log_gate_backward(grad, alpha, shifted, a, saved, znorm[2], needs)


__all__ = [
    "ZNorm",
    "ZNormLogGate",
    "log_gate_backward",
    "log_gate_channel",
    "znorm_backward",
    "znorm_forward",
]
