"""The part every energy gate shares: causal z-normalisation, the sigmoid gate, tau and alpha.

A gate maps the LayerNorm-ed hidden state x (B, T, C) that feeds an attention
layer to a log-gate (B, nh, T): one value per head and key position, added to
that key's attention logits (EGA_SPEC.md section 2). Subclasses only say how the
per-head energy e is estimated.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from ega_lightning.gates import fused
from ega_lightning.gates.slots import KeyBias

ZNORM_EPS = 1e-5
# "prefix": the causal z-norm of EGA_SPEC.md section 2 (the default). "window": statistics of the whole
# window, a DIAGNOSTIC that leaks the future (the leak audit of the paper's +0.103): never for generation.
ZNORM_MODES = ("prefix", "window")
# Options every gate takes besides its own __init__'s, with their defaults; `build_gate` applies them.
# fused_arithmetic: the z-norm and the sigmoid as `gates.fused`'s nodes (False: autograd's graph of the same
# operators, the same values; the tests compare the two, and a bench builds either)
COMMON_OPTIONS: dict[str, Any] = {"znorm": "prefix", "learn_tau": True, "fused_arithmetic": True}


def _wide(t: torch.Tensor) -> torch.Tensor:
    """t in fp32, the gates' precision under any autocast; a float64 t (a float64 model, the tests' exact
    comparisons) stays float64."""
    return t if t.dtype == torch.float64 else t.float()


def _bound_is(obj: Any, name: str, cls: type) -> bool:
    """Whether ``obj.name`` is ``cls.name`` bound to obj (not an override in a subclass or on obj itself)."""
    return getattr(getattr(obj, name), "__func__", None) is getattr(cls, name)


@dataclass
class PrefixStats:
    """Running statistics of a prefix e_1..e_n of the energy, per (B, nh): what z-normalising
    later positions needs. Sums are of c = e - e_1 (see `_znorm_continue`)."""

    first: torch.Tensor  # (B, nh, 1): e_1
    count: int
    total: torch.Tensor  # (B, nh, 1): sum of c
    total_sq: torch.Tensor  # (B, nh, 1): sum of c^2


def _scaled(centred: torch.Tensor, var: torch.Tensor, std_floor: float | None) -> torch.Tensor:
    """z from the centred energy and its variance: / sqrt(var + 1e-5) (ours), or / max(std, std_floor) (the
    author's, `gates.author`)."""
    if std_floor is None:
        return centred / torch.sqrt(var + ZNORM_EPS)
    # max(std, floor) as sqrt(max(var, floor^2)): the same value, but a zero variance (always at the first
    # position) gets a zero gradient, where sqrt's at 0 would make it NaN
    return centred / torch.sqrt(var.clamp_min(std_floor**2))


def _znorm_continue(
    e: torch.Tensor, prefix: PrefixStats | None, std_floor: float | None = None
) -> tuple[torch.Tensor, PrefixStats]:
    """z of new positions e (B, nh, t) that follow `prefix` (None: e starts the sequence)."""
    # z is shift-invariant; centring on the first value keeps the running sums small in fp32
    first = e[..., :1] if prefix is None else prefix.first
    c = e - first
    start, total, total_sq = (0, 0.0, 0.0) if prefix is None else (prefix.count, prefix.total, prefix.total_sq)
    n = torch.arange(start + 1, start + e.shape[-1] + 1, device=e.device, dtype=e.dtype)
    s, sq = total + c.cumsum(-1), total_sq + c.square().cumsum(-1)
    mean = s / n
    var = (sq / n - mean.square()).clamp_min(0.0)
    z = _scaled(c - mean, var, std_floor)
    return z, PrefixStats(first, start + e.shape[-1], s[..., -1:], sq[..., -1:])


def _znorm_next(
    e: torch.Tensor, prefix: PrefixStats, std_floor: float | None = None
) -> tuple[torch.Tensor, PrefixStats]:
    """`_znorm_continue` for one new position e (B, nh, 1), bit for bit: a one-element cumsum is the
    element itself and the count a Python number, which saves the arange and both cumsums of
    every cached generation step."""
    n = prefix.count + 1
    c = e - prefix.first
    s, sq = prefix.total + c, prefix.total_sq + c.square()
    mean = s / n
    var = (sq / n - mean.square()).clamp_min(0.0)
    z = _scaled(c - mean, var, std_floor)
    return z, PrefixStats(prefix.first, n, s, sq)


def causal_znorm(e: torch.Tensor) -> torch.Tensor:
    """z_j = (e_j - mean(e_1..e_j)) / sqrt(var(e_1..e_j) + 1e-5) along the last dim; z_1 = 0.

    Population variance over the prefix. Position j sees only positions <= j.
    """
    return _znorm_continue(e, None)[0]


def window_znorm(e: torch.Tensor) -> torch.Tensor:
    """z_j = (e_j - mean(e_1..e_T)) / sqrt(var(e_1..e_T) + 1e-5) along the last dim, population variance.

    NOT causal: every position sees the statistics of the whole window, later positions included.
    """
    mean = e.mean(-1, keepdim=True)
    var = e.var(-1, unbiased=False, keepdim=True)
    return (e - mean) / torch.sqrt(var + ZNORM_EPS)


@dataclass
class GateState:
    """What a gate carries between generation steps: its last inputs and the energy's prefix statistics."""

    # (B, receptive_field - 1, C): the inputs later energies still depend on; their input_projection
    # (B, receptive_field - 1, m) instead when the layer hands the gate its projection (see `step`)
    x_tail: torch.Tensor
    prefix: PrefixStats


class Gate(KeyBias):
    """g_j = sigmoid(alpha_h (z_j - tau_h)) with z the causal z-norm of a per-head energy e_j.

    The energy gates (the EGA family and users' gates): a key bias b = log g <= 0 (see `slots`), added as
    it is, with the attention layer's fused paths and the z-norm's statistics as generation state.

    Every gate has the per-head scalars ``tau`` (threshold) and ``alpha`` (scale);
    ``params_per_layer`` gives a gate's exact parameter count per attention layer.
    ``receptive_field`` is how many positions (the current one included) the energy
    at a position depends on; cached generation keeps that many inputs per layer.

    A gate whose energy starts with a linear map p = x W^T (EGA-1, EGA-K) exposes it as
    ``input_projection``: the attention layer then computes p in the same matmul as Q, K, V
    and hands it to ``forward(x, p)``, which goes on with ``energy_from_projection(p)``.

    In training, ``normalise``, ``log_gate_from_z`` and ``energy_from_projection`` run again in
    backward (see `Recomputed`): they must be deterministic and read no tensors but their input
    and the gate's own parameters.
    """

    receptive_field: int = 1
    znorm: str = "prefix"  # see ZNORM_MODES; an evaluation may switch it (CharLM's eval_znorm)
    # None: z divides by sqrt(var + 1e-5) (EGA_SPEC.md section 2); a number: by max(std, std_floor), the
    # author's formula (`gates.author`), in both z-norms and in cached generation
    std_floor: float | None = None
    # K > 1: a mixture of K gates per head (the author's EGA-K). energy() then returns (B, K nh, T), row
    # k nh + h the energy of head h's k-th gate; tau and alpha hold one value per row; log_gate_from_z
    # maps z (B, K nh, T) to one log g (B, nh, T) per head
    energies_per_head: int = 1
    # True: model.tau_init and model.alpha_init initialise the gate (CharLM merges them into its options).
    # False: the gate has defaults of its own (the author's alpha_init 2.0), set in gate_options; the model's
    # reach it only when moved from CharLM's defaults 0.0 and 1.0 (see module.check_arguments)
    model_init: bool = True
    # the z-norm and the sigmoid as `gates.fused`'s nodes (COMMON_OPTIONS; `set_common_options` sets it per gate)
    fused_arithmetic: bool = True

    def __init__(self, n_embd: int, n_head: int, tau_init: float = 0.0, alpha_init: float = 1.0) -> None:
        super().__init__(n_embd, n_head)
        for name, value in (("tau_init", tau_init), ("alpha_init", alpha_init)):
            if not math.isfinite(value):  # a NaN gate would fail every check as if the gate were wrong
                raise ValueError(f"gate option {name} must be a finite number, got {value!r}.")
        self.tau = nn.Parameter(torch.full((n_head,), float(tau_init)))
        self.alpha = nn.Parameter(torch.full((n_head,), float(alpha_init)))

    def set_common_options(self, znorm: str = "prefix", learn_tau: bool = True, fused_arithmetic: bool = True) -> None:
        """The options of COMMON_OPTIONS. learn_tau=False keeps tau at tau_init: still a parameter
        (same state_dict), but without gradient, so the optimizer never moves it. fused_arithmetic=False: the
        z-norm and the sigmoid as autograd's graph (`gates.fused`'s nodes compute the same values)."""
        if znorm not in ZNORM_MODES:
            raise ValueError(f"gate option znorm must be one of {', '.join(ZNORM_MODES)}, got {znorm!r}.")
        for name, value in (("learn_tau", learn_tau), ("fused_arithmetic", fused_arithmetic)):
            if not isinstance(value, bool):
                raise ValueError(f"gate option {name} must be true or false, got {value!r}.")
        self.znorm, self.fused_arithmetic = znorm, fused_arithmetic
        self.tau.requires_grad_(learn_tau)

    def _fused_arithmetic(self) -> bool:
        """Whether the z-norm and the sigmoid run as `gates.fused`'s nodes: as ``fused_arithmetic``, chosen when the
        gate was built, says; per call only whether this call is compiled (a condition of the run): the compiler
        fuses autograd's graph of them itself (and chooses what its backward recomputes)."""
        return self.fused_arithmetic and not torch.compiler.is_compiling()

    def normalise(self, e: torch.Tensor) -> torch.Tensor:
        """z (B, nh, T) of the energy e (B, nh, T), as ``znorm`` says."""
        if self._fused_arithmetic():  # one autograd node, the same z (`gates.fused`)
            return fused.ZNorm.apply(e, self.znorm, ZNORM_EPS, self.std_floor)
        if self.std_floor is not None:
            if self.znorm == "prefix":
                return _znorm_continue(e, None, self.std_floor)[0]
            # the author's: population std over the window, floored; T = 1 gives e - e = 0, their z
            std = e.std(-1, keepdim=True, correction=0).clamp_min(self.std_floor)
            return (e - e.mean(-1, keepdim=True)) / std
        return causal_znorm(e) if self.znorm == "prefix" else window_znorm(e)

    @abstractmethod
    def energy(self, x: torch.Tensor) -> torch.Tensor:
        """Per-head energy (B, nh, T) of the LayerNorm-ed hidden state x (B, T, C) ((B, K nh, T) for a
        mixture of K gates per head, see ``energies_per_head``)."""

    def input_projection(self) -> nn.Linear | None:
        """The linear map the energy starts with, if any (see the class docstring)."""
        return None

    def energy_from_projection(self, p: torch.Tensor) -> torch.Tensor:
        """Energy (B, nh, T) from p = input_projection()(x) (B, T, m); only for gates that have one."""
        raise NotImplementedError(f"{type(self).__name__} has no input projection")

    def z(self, x: torch.Tensor) -> torch.Tensor:
        """Z-normalised energy (B, nh, T) (causally, unless znorm says otherwise), in fp32 even under autocast."""
        with torch.autocast(x.device.type, enabled=False):
            return self.normalise(_wide(self.energy(_wide(x))))

    def step(
        self, x: torch.Tensor, state: GateState | None, projection: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, GateState]:
        """log g (B, nh, t) of t new positions x (B, t, C) that follow `state` (None: x starts the sequence).

        The incremental form of `forward` for cached generation: the energy needs the last
        `receptive_field` inputs, the z-norm only the prefix statistics. With `projection`, x's
        `input_projection` (B, t, m) precomputed (the attention layer folds it into its Q/K/V
        matmul), the energy comes from it and the state keeps projections, not inputs: a cache
        must then pass it at every step.
        """
        if self.znorm != "prefix":  # `ega generate` refuses such a model before it gets here
            raise ValueError(f"Cached generation needs the causal z-norm; this gate has znorm={self.znorm!r}.")
        # entering torch.autocast costs as much as a small op: only when there is an autocast to leave
        autocast = torch.is_autocast_enabled(x.device.type)
        with torch.autocast(x.device.type, enabled=False) if autocast else nullcontext():
            new = _wide(x) if projection is None else _wide(projection)  # (B, t, C) or (B, t, m)
            t, R = new.shape[1], self.receptive_field
            # (B, R - 1 + t, .); with R = 1 there is no tail to prepend
            window = new if state is None or R == 1 else torch.cat([state.x_tail, new], dim=1)
            e = self.energy(window) if projection is None else self.energy_from_projection(window)
            e = _wide(e if R == 1 else e[..., -t:])  # (B, nh, t)
            if state is not None and t == 1:  # the usual generation step
                z, prefix = _znorm_next(e, state.prefix, self.std_floor)
            else:
                z, prefix = _znorm_continue(e, None if state is None else state.prefix, self.std_floor)
            tail = window[:, max(0, window.shape[1] - (R - 1)) :] if state is None or R > 1 else state.x_tail
            return self.log_gate_from_z(z), GateState(tail, prefix)

    def log_gate_from_z(self, z: torch.Tensor) -> torch.Tensor:
        # log sigmoid(a) = -softplus(-a), stable for large |a|
        return -F.softplus(-self.alpha[:, None] * (z - self.tau[:, None]))

    def _fused_znorm_log_gate(self) -> bool:
        """Whether log g of the energy runs as `fused.ZNormLogGate`. A gate with its own z-norm or sigmoid (the
        author's mixture, a user's gate) keeps them: the fused node computes these two methods' formulas, not
        whatever a subclass puts in their place."""
        own = _bound_is(self, "normalise", Gate) and _bound_is(self, "log_gate_from_z", Gate)
        return own and self._fused_arithmetic()

    def log_gate_from_energy(self, e: torch.Tensor) -> torch.Tensor:
        """log g (B, nh, T) from the energy e (B, nh, T)."""
        e = _wide(e)
        if self._fused_znorm_log_gate():
            return fused.ZNormLogGate.apply(e, self.tau, self.alpha, self.znorm, ZNORM_EPS, self.std_floor)
        return self.log_gate_from_z(self.normalise(e))

    def log_gate_from_projection(self, p: torch.Tensor) -> torch.Tensor:
        """log g (B, nh, T) from p = input_projection()(x) (B, T, m)."""
        return self.log_gate_from_energy(self.energy_from_projection(_wide(p)))

    def energy_is_projection(self) -> bool:
        """Whether ``energy_from_projection(p)`` is p's transpose (B, nh, T) itself (EGA-1)."""
        return False

    def fused_log_gate(self) -> bool:
        """Whether ``log_gate_from_projection(p)`` is `fused.ZNormLogGate` of p's transpose with this gate's
        tau, alpha, znorm and std_floor, and nothing else: what lets the padded layout compute the channel
        as one function (`model.fused.FusedGateChannel`)."""
        # the methods as this instance has them (an instance attribute may replace one: the bench's ablation)
        plain = all(_bound_is(self, name, Gate) for name in ("log_gate_from_projection", "log_gate_from_energy"))
        return plain and self.energy_is_projection() and self._fused_znorm_log_gate()

    def set_identity(self) -> bool:
        with torch.no_grad():
            self.alpha.zero_()  # g = sigmoid(0): the same factor on every key
        return True

    def forward(self, x: torch.Tensor, projection: torch.Tensor | None = None) -> torch.Tensor:
        """log g (B, nh, T) in fp32 from x (B, T, C), or from its precomputed `input_projection` (B, T, m)."""
        with torch.autocast(x.device.type, enabled=False):
            e = self.energy(_wide(x)) if projection is None else self.energy_from_projection(_wide(projection))
            # no backward to prepare for; or the compiler's partitioner chooses what to recompute itself
            if not torch.is_grad_enabled() or torch.compiler.is_compiling():
                return self.log_gate_from_energy(e)
            # the z-norm and the sigmoid would keep about eight (B, nh, T) intermediates per layer for
            # backward, most of a gated model's extra activation memory: backward recomputes them from e
            return Recomputed.apply(self.log_gate_from_energy, e, *self.parameters())


class Recomputed(torch.autograd.Function):
    """``fn(source)``, keeping only `source` for backward, where fn's graph is built again and differentiated.

    The recomputation runs the same operators in the same order, so values and gradients equal those of
    the plain graph bit for bit; fn must be deterministic given its input (no dropout). `params` are the
    parameters fn may read (as module attributes): their gradients come back as this function's.
    """

    @staticmethod
    def forward(
        ctx: Any, fn: Callable[[torch.Tensor], torch.Tensor], source: torch.Tensor, *params: nn.Parameter
    ) -> torch.Tensor:
        ctx.fn, ctx.params = fn, params
        ctx.save_for_backward(source)
        return fn(source)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (source,) = ctx.saved_tensors
        source_grad, param_grads = recompute_grads(ctx.fn, source, ctx.params, grad)
        return None, source_grad, *param_grads


def recompute_grads(
    fn: Callable[[torch.Tensor], torch.Tensor],
    source: torch.Tensor,
    params: tuple[nn.Parameter, ...],
    grad: torch.Tensor,
) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """Gradients of <fn(source), grad> with respect to source and to each of params (None where a
    parameter has no gradient or fn does not read it): fn's graph built again, then differentiated."""
    leaf = source.detach().requires_grad_()
    trained = [p for p in params if p.requires_grad]
    # as in the forward pass, whatever autocast backward runs under (the gates compute in fp32)
    with torch.enable_grad(), torch.autocast(source.device.type, enabled=False):
        out = fn(leaf)
    grads = iter(torch.autograd.grad(out, [leaf, *trained], grad, allow_unused=True))
    source_grad = next(grads)
    return source_grad, [next(grads) if p.requires_grad else None for p in params]
