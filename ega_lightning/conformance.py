"""Does a gate keep the promises the model relies on? One checker, for `ega check-gate` and for tests.

    from ega_lightning.conformance import check_gate
    report = check_gate("my_gates.AbsEnergyGate")  # a name, import path or Gate subclass, and its options
    assert report.passed, report.format()

Every property is checked on a small fp32 CPU model (2 layers x 2 heads x 32, T = 32, by default; `ega check-gate`
at T = 128, the shipped block)
with tau = 0.3, alpha = 2 for an energy gate, and a key bias's or output gate's weights drawn with
std 0.3 (away from the defaults, so the gate visibly acts). Each property is checked for the kinds of
gate it concerns (energy gate, key bias, output gate; see `gates.slots`):

- causal: changing token t, for every position t of the window, never moves a gate's output (log-gate,
  bias or factor), an attention layer's output or a logit before t (bit for bit, on each attention path
  this torch has: fused, reference, and flex from torch 2.5 on), in evaluation and in training mode;
- batch_independent: changing the other sequences of a batch of 8 (eval and train mode) never moves a sequence's
  gate output, attention outputs or logits (a gate that normalises with statistics over the batch makes a
  sequence's result depend on what it is batched with, and an evaluation's numbers on its batch size);
- alpha_zero_is_baseline (energy gates): at alpha = 0 the model equals the baseline with the same shared weights;
- identity_is_baseline (key biases): at its identity setting (ALiBi's slopes 0, FoX's forget bias +inf)
  the model equals the baseline;
- fused_equals_reference: the fused attention path equals the spec's formula, in values and gradients;
- cached_equals_recompute: cached generation gives the logits of recomputing the window (a
  ``receptive_field`` smaller than what the energy reads shows here);
- params_per_layer: the documented count equals the gate's parameters, at two layer shapes;
- fp32_under_autocast (key gates): under bf16 autocast the log-gate or bias is fp32 and equals the fp32 computation;
- finite_on_constant_input: the gate's outputs and gradients are finite for a constant and a zero input.

No property passes on a gate output or logit that is NaN or infinite anywhere in its check: a comparison with
NaN is never "larger than the tolerance", so such a check would pass on nothing.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ega_lightning.errors import UserError
from ega_lightning.gates.base import Gate
from ega_lightning.gates.registry import GateSpec, build_gate, check_gate_options, gate_class, qualified_name
from ega_lightning.gates.slots import KeyBias, OutputGate
from ega_lightning.generation import next_token_logits
from ega_lightning.model import GPT, GPTConfig, available_attention_impls

ACTIVE = {"tau_init": 0.3, "alpha_init": 2.0}  # away from the defaults: the gate visibly acts
ACTIVE_STD = 0.3  # a key bias's or output gate's weights: as large as training makes them
ENERGY, KEY_BIAS, OUTPUT = "energy gate", "key bias", "output gate"


# what the gate's output is called, by kind
GATE_OUTPUT = {ENERGY: "log-gate", KEY_BIAS: "bias", OUTPUT: "output gate's factor"}


def gate_kind(cls: type) -> str:
    if issubclass(cls, Gate):
        return ENERGY
    return OUTPUT if issubclass(cls, OutputGate) else KEY_BIAS


TOLERANCE = 1e-5  # fp32: two orders above the rounding of the shipped gates' paths


@dataclass(frozen=True)
class Shape:
    """The model the properties are checked on."""

    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    block_size: int = 32
    vocab_size: int = 16
    position: str = "learned"  # the model's position encoding (`GPTConfig.position`): the gate under rope or none


@dataclass(frozen=True)
class PropertyResult:
    name: str
    passed: bool
    detail: str  # what was measured, or what went wrong

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name:<25} {self.detail}"


@dataclass
class Conformance:
    """The results of `check_gate`, one per property, in a fixed order."""

    gate: str
    options: dict[str, Any]
    shape: Shape
    results: list[PropertyResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failed(self) -> list[str]:
        return [r.name for r in self.results if not r.passed]

    def __getitem__(self, name: str) -> PropertyResult:
        return next(r for r in self.results if r.name == name)

    def format(self) -> str:
        s = self.shape
        head = (
            f"gate {self.gate}, options {self.options or '{}'}: "
            f"{s.n_layer} layers x {s.n_head} heads x {s.n_embd}, T = {s.block_size}, fp32 CPU"
            + ("" if s.position == "learned" else f", position {s.position}")
        )
        n_failed = len(self.failed)
        verdict = "all passed" if not n_failed else f"{n_failed} failed: {', '.join(self.failed)}"
        return "\n".join([head, *(r.line() for r in self.results), f"{len(self.results)} properties, {verdict}."])


@dataclass
class _Context:
    gate: GateSpec
    options: dict[str, Any]
    shape: Shape
    seed: int
    kind: str = ENERGY

    @property
    def slot(self) -> str:
        return "output_gate" if self.kind == OUTPUT else "gate"

    def gate_options(self, **override: float) -> dict[str, Any]:
        return {**ACTIVE, **self.options, **override} if self.kind == ENERGY else dict(self.options)

    def model(self, attention: str = "fused", gated: bool = True, **override: float) -> GPT:
        s = self.shape
        torch.manual_seed(self.seed)  # the same shared weights for every model of one check
        key = self.gate if gated and self.slot == "gate" else "none"
        cfg = GPTConfig(
            vocab_size=s.vocab_size,
            block_size=s.block_size,
            n_layer=s.n_layer,
            n_head=s.n_head,
            n_embd=s.n_embd,
            dropout=0.0,
            gate=key,
            gate_options=self.gate_options(**override) if key != "none" else {},
            attention=attention,
            output_gate=self.gate if gated and self.slot == "output_gate" else "none",
            position=s.position,
        )
        model = GPT(cfg).eval()
        if gated and self.kind != ENERGY:
            self._activate([*model.gates, *model.output_gates])
        return model

    def _activate(self, gates: list[Any]) -> None:
        generator = torch.Generator().manual_seed(self.seed)
        with torch.no_grad():
            for gate in gates:
                for p in gate.parameters():
                    p.copy_(torch.randn(p.shape, generator=generator) * ACTIVE_STD)

    def layer_gate(self, n_embd: int | None = None, n_head: int | None = None) -> KeyBias | OutputGate:
        torch.manual_seed(self.seed)
        n_embd, n_head = n_embd or self.shape.n_embd, n_head or self.shape.n_head
        gate = build_gate(self.gate, n_embd, n_head, slot=self.slot, **self.gate_options())
        assert gate is not None
        if self.kind != ENERGY:
            self._activate([gate])
        return gate

    def tokens(self, batch: int, length: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed)
        return torch.randint(0, self.shape.vocab_size, (batch, length), generator=generator)


@contextmanager
def _gate_calls(model: GPT) -> Iterator[list[tuple[Any, torch.Tensor, torch.Tensor]]]:
    """Records (gate, input x, output) of every gate call inside the block: log-gate or bias (B, nh, T) of a
    key gate, factor (B, nh, T, 1 or hs) of an output gate."""
    calls: list[tuple[Any, torch.Tensor, torch.Tensor]] = []

    def hook(module: Any, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        calls.append((module, args[0].detach(), out.detach()))

    handles = [g.register_forward_hook(hook) for g in [*model.gates, *model.output_gates]]
    try:
        yield calls
    finally:
        for h in handles:
            h.remove()


@contextmanager
def _layer_outputs(model: GPT) -> Iterator[list[torch.Tensor]]:
    """Records the output (B, T, C) of every attention layer inside the block."""
    outputs: list[torch.Tensor] = []
    handles = [b.attn.register_forward_hook(lambda m, a, out: outputs.append(out.detach())) for b in model.blocks]
    try:
        yield outputs
    finally:
        for h in handles:
            h.remove()


@contextmanager
def _non_finite_outputs() -> Iterator[list[str]]:
    """Inside the block, what first came out NaN or infinite of a gate (log-gate, bias, factor) or of a model (its
    logits), anywhere: one sentence each."""
    found: list[str] = []

    def hook(module: Any, args: Any, out: Any) -> None:
        if not isinstance(out, torch.Tensor) or not out.is_floating_point():
            return
        try:
            if torch.isfinite(out).all():
                return
        except RuntimeError:  # inside a transform (FlexAttention's vmap): the other paths show the same output
            return
        if isinstance(module, GPT):
            found.append(f"the logits are {_non_finite_kind(out)}")
        elif isinstance(module, KeyBias | OutputGate):
            found.append(f"the gate's {GATE_OUTPUT[gate_kind(type(module))]} is {_non_finite_kind(out)}")

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        yield found
    finally:
        handle.remove()


def _non_finite_kind(value: torch.Tensor) -> str:
    nan = int(torch.isnan(value).sum())
    inf = int(torch.isinf(value).sum())
    parts = [f"{nan} NaN" if nan else "", f"{inf} infinite" if inf else ""]
    return f"{' and '.join(p for p in parts if p)} of {value.numel()} values"


# the modes a model is checked in: evaluation, and training (a gate may compute otherwise there: statistics over the
# batch or the window in training only); each forward in training mode is seeded alike, so any randomness of the
# gate's own is the same on both sides of a comparison
MODES = ("eval", "train")


def _in_mode(model: GPT, mode: str) -> GPT:
    return model.train(mode == "train")


def _traced(model: GPT, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """What the causal property compares, each with the position on dim 0: log-gates, layer outputs, logits."""
    torch.manual_seed(0)  # the same draws for a gate's own randomness in training mode, on both sides
    with torch.no_grad(), _gate_calls(model) as calls, _layer_outputs(model) as layers:
        logits = model(idx)
    return {
        # the position: a key gate's last dim, an output gate's last but one (ALiBi's bias has batch 1)
        "gate output": torch.stack(
            [out.movedim(-2 if isinstance(g, OutputGate) else -1, 0).flatten(1) for g, _, out in calls], dim=1
        ),  # (T, n_layer, .)
        "attention output": torch.stack(layers).movedim(2, 0),  # (T, n_layer, B, C)
        "logits": logits.movedim(1, 0),  # (T, B, V)
    }


def _causal(ctx: _Context) -> tuple[bool, str]:
    # Every position of the window in turn, each on every attention path: a leak may reach one
    # position only (a reflect-padded convolution lets position 0 read x_2, which the prefix
    # statistics carry to position 1 alone), so a sample of positions is not enough.
    T, V = ctx.shape.block_size, ctx.shape.vocab_size
    label = {"gate output": GATE_OUTPUT[ctx.kind]}
    for mode in MODES:  # a gate may read the future in training only (issue 72)
        for attention in available_attention_impls():
            model = _in_mode(ctx.model(attention), mode)
            idx = ctx.tokens(2, T)
            before = _traced(model, idx)
            for t in range(1, T):
                changed = idx.clone()
                changed[:, t] = (changed[:, t] + 1) % V
                after = _traced(model, changed)
                for what in before:
                    # (t,): the largest change at each earlier position
                    moved = (before[what][:t] - after[what][:t]).flatten(1).abs().amax(1)
                    if (moved > 0).any():
                        first = int(torch.nonzero(moved)[0])
                        return False, (
                            f"changing token {t} moved the {label.get(what, what)} at {int((moved > 0).sum())} of "
                            f"the {t} positions before it (the first: {first}) by up to {moved.max().item():.3g} "
                            f"({attention} attention, {mode} mode): the gate reads the future" + _window_hint(ctx)
                        )
    paths = ", ".join(available_attention_impls())
    return True, (
        f"changing token t, for every t < {T}, left every earlier {GATE_OUTPUT[ctx.kind]}, attention output and logit "
        f"bit-identical ({paths}; eval and train mode)"
    )


def _window_hint(ctx: _Context) -> str:
    """Where the leak is when the options name it: the z-norm over the whole window."""
    if ctx.kind != ENERGY or ctx.gate_options().get("znorm") != "window":
        return ""
    return (
        " (gate option znorm: window takes z's mean and std over the whole window, later positions included; "
        "znorm: prefix is the causal z-norm)"
    )


def _batch_independent(ctx: _Context) -> tuple[bool, str]:
    # A gate that normalises its energy with statistics over the batch (a batch norm's mean) passes causal, since
    # every sequence keeps its own past; but sequence 0's gate then moves with what the other sequences hold.
    T, V, B = ctx.shape.block_size, ctx.shape.vocab_size, BATCH
    label = {"gate output": GATE_OUTPUT[ctx.kind]}
    worst = 0.0
    for mode in MODES:  # a batch norm reads the batch in training mode only
        for attention in available_attention_impls():
            model = _in_mode(ctx.model(attention), mode)
            idx = ctx.tokens(B, T)
            others = idx.clone()
            others[1:] = (others[1:] + torch.arange(1, B)[:, None]) % V  # every other sequence changed, 0 kept
            before, after = _first_sequence(model, idx), _first_sequence(model, others)
            for what in before:
                moved = (before[what] - after[what]).abs().max().item()
                worst = max(worst, moved)
                if moved > TOLERANCE * max(1.0, before[what].abs().max().item()):
                    return False, (
                        f"changing the other {B - 1} sequences of a batch of {B} moved sequence 0's "
                        f"{label.get(what, what)} by up to {moved:.3g} ({attention} attention, {mode} mode): the gate "
                        "reads other sequences of its batch (statistics over the batch?), so a sequence's result "
                        "depends on what it is batched with"
                    )
    return True, (
        f"changing the other {B - 1} sequences of a batch of {B} moved sequence 0's outputs by at most {worst:.2g} "
        "(eval and train mode)"
    )


# the batch the batch_independent property checks: a gate that reads other sequences only in a batch of 4 or more
# (a batch statistic it skips below that) passed a batch of 3 (issue 72)
BATCH = 8


def _first_sequence(model: GPT, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """Sequence 0's gate outputs (every layer's, flattened; ALiBi's bias has batch 1), attention outputs and logits."""
    torch.manual_seed(0)  # the same draws for a gate's own randomness in training mode, on both sides
    with torch.no_grad(), _gate_calls(model) as calls, _layer_outputs(model) as layers:
        logits = model(idx)
    return {
        "gate output": torch.cat([out[0].flatten() for _, _, out in calls]),
        "attention output": torch.stack([out[0] for out in layers]),  # (n_layer, T, C)
        "logits": logits[0],  # (T, V)
    }


def _equals_baseline(ctx: _Context, at_setting: Callable[[str], GPT | None], setting: str) -> tuple[bool, str]:
    """The gated model at ``setting`` (``at_setting(attention)``, None: the gate has no such setting) against
    the baseline with the same shared weights, on every attention path."""
    diffs = []
    for attention in available_attention_impls():
        gated, baseline = at_setting(attention), ctx.model(attention, gated=False)
        if gated is None:
            return True, f"no {setting} (set_identity returns False): nothing to compare"
        missing, unexpected = baseline.load_state_dict(gated.state_dict(), strict=False)
        outside = [k for k in unexpected if ".gate." not in k]
        if missing or outside:
            return False, f"the gated model's shared weights differ from the baseline's: {missing + outside}"
        idx = ctx.tokens(3, ctx.shape.block_size)
        with torch.no_grad():
            diffs.append((gated(idx) - baseline(idx)).abs().max().item())
    ok = max(diffs) <= TOLERANCE
    measured = f"max |logits - baseline| {diffs[0]:.2g} fused, {diffs[1]:.2g} reference (tolerance {TOLERANCE:g})"
    return ok, measured if ok else f"{measured}: at {setting} the gate still changes attention"


def _alpha_zero_is_baseline(ctx: _Context) -> tuple[bool, str]:
    return _equals_baseline(ctx, lambda attention: ctx.model(attention, alpha_init=0.0), "alpha = 0")


def _identity_is_baseline(ctx: _Context) -> tuple[bool, str]:
    def at_identity(attention: str) -> GPT | None:
        model = ctx.model(attention)
        return model if all(g.set_identity() for g in model.gates) else None

    return _equals_baseline(ctx, at_identity, "its identity setting")


def _fused_equals_reference(ctx: _Context) -> tuple[bool, str]:
    fused, reference = ctx.model("fused"), ctx.model("reference")
    reference.load_state_dict(fused.state_dict())
    idx = ctx.tokens(3, ctx.shape.block_size + 1)
    outputs = []
    for model in (fused, reference):
        logits = model(idx[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten()).backward()
        outputs.append((logits.detach(), dict(model.named_parameters())))
    (a, params_a), (b, params_b) = outputs
    value = (a - b).abs().max().item()
    grad, worst = 0.0, ""
    for name, p in params_a.items():
        ga, gb = p.grad, params_b[name].grad
        if (ga is None) != (gb is None):
            return False, f"{name} gets a gradient on one path only (fused: {ga is not None})"
        if ga is not None:
            # relative to the gradient's own scale: a gate's gradients can be large or tiny
            d = ((ga - gb).abs().max() / gb.abs().max().clamp_min(1.0)).item()
            if d > grad:
                grad, worst = d, name
    ok = value <= TOLERANCE and grad <= TOLERANCE
    detail = f"max |fused - reference| {value:.2g} in logits, {grad:.2g} in gradients (relative"
    detail += f", {worst})" if worst else ")"
    return ok, f"{detail}, tolerance {TOLERANCE:g}" if ok else f"{detail}: the fused path computes another function"


def _receptive_field_hint(gate: Gate, length: int) -> str:
    """What the energy reads, measured in float64 by changing one input: the hint for a cache that disagrees."""
    stated = f"receptive_field = {gate.receptive_field}"
    try:
        g = copy.deepcopy(gate).double()
        t = length // 4
        x = torch.randn(1, length, g.n_embd, dtype=torch.float64)
        changed = x.clone()
        changed[:, t] += 1.0
        with torch.no_grad():
            energy = g.energy(x)
            moved = (g.energy(changed) - energy).abs().amax(dim=(0, 1)) > 1e-9 * energy.abs().max()  # (T,)
    except Exception:  # a gate that does not run in float64: no hint, the failure stands on its own
        return stated
    if moved[:t].any():
        return f"{stated}, and the energy reads later positions (see causal)"
    span = int(torch.nonzero(moved).max()) - t + 1 if moved.any() else 1
    if span <= gate.receptive_field:
        return stated
    if span == length - t:
        return f"the energy at j reads at least {span} positions back but {stated}: bound its window and set it"
    return f"the energy at j reads the last {span} positions but {stated}: set receptive_field = {span}"


def _cached_equals_recompute(ctx: _Context) -> tuple[bool, str]:
    model = ctx.model("fused")
    block = ctx.shape.block_size
    idx = ctx.tokens(2, 5)
    steps = next_token_logits(model, idx, use_cache=True)
    worst = 0.0
    with torch.no_grad():
        step = next(steps)
        for i in range(2 * block + block // 2):  # fills the window and rebuilds the cache at least once
            recomputed = model(step.window)[:, -1]
            diff = (step.logits - recomputed).abs().max().item()
            worst = max(worst, diff)
            if diff > TOLERANCE * max(1.0, recomputed.abs().max().item()):
                return False, (
                    f"at step {i} (window of {step.window.shape[1]} tokens) the cached logits differ from "
                    f"recomputing the window by {diff:.3g}"
                    + (f"; {_receptive_field_hint(model.gates[0], block)}" if ctx.kind == ENERGY else "")
                )
            idx = torch.cat([idx, step.logits.argmax(-1, keepdim=True)], dim=1)
            step = steps.send(idx)
    return True, f"{2 * block + block // 2} steps, the cache rebuilt once: max |cached - recomputed| {worst:.2g}"


def _params_per_layer(ctx: _Context) -> tuple[bool, str]:
    cls = gate_class(ctx.gate)
    assert cls is not None
    found = []
    for n_embd, n_head in ((ctx.shape.n_embd, ctx.shape.n_head), (48, 3)):
        counted = sum(p.numel() for p in ctx.layer_gate(n_embd, n_head).parameters())
        documented = cls.params_per_layer(n_embd, n_head, **ctx.gate_options())
        if counted != documented:
            return False, f"at n_embd {n_embd}, n_head {n_head}: params_per_layer says {documented}, counted {counted}"
        found.append(f"{counted} at {n_embd}x{n_head}")
    return True, "documented = counted: " + ", ".join(found)


def _fp32_under_autocast(ctx: _Context) -> tuple[bool, str]:
    model = ctx.model("fused")
    idx = ctx.tokens(2, ctx.shape.block_size)
    with torch.no_grad(), _gate_calls(model) as calls, torch.autocast("cpu", dtype=torch.bfloat16):
        model(idx)
    worst = 0.0
    for gate, x, out in calls:
        with torch.no_grad():
            exact = gate(x.float())
            with torch.autocast("cpu", dtype=torch.bfloat16):
                stepped, _ = gate.step(x, None)
        for what, got in (("forward", out), ("step", stepped)):
            if got.dtype != torch.float32:
                return False, f"under bf16 autocast the gate's {what} returns {got.dtype}: compute it in fp32"
            worst = max(worst, (got - exact).abs().max().item())
    ok = worst <= 1e-6
    detail = f"{GATE_OUTPUT[ctx.kind]} fp32 (forward and step); max |autocast - fp32| {worst:.2g}"
    return ok, detail if ok else f"{detail}: part of the gate runs in bf16 under autocast"


def _finite_on_constant_input(ctx: _Context) -> tuple[bool, str]:
    gate = ctx.layer_gate()
    T, C = ctx.shape.block_size, ctx.shape.n_embd
    vector = torch.randn(C, generator=torch.Generator().manual_seed(ctx.seed))
    for label, x in (("a constant input", vector.expand(2, T, C).clone()), ("a zero input", torch.zeros(2, T, C))):
        gate.zero_grad()
        x.requires_grad_(True)
        out, name = gate(x), GATE_OUTPUT[ctx.kind]
        values = [("energy", gate.energy(x))] if ctx.kind == ENERGY else []
        values.append((name, out))
        if ctx.kind != OUTPUT:
            values.append((f"step's {name}", gate.step(x.detach(), None)[0]))
        if out.requires_grad:  # ALiBi's bias reads no input and has no parameter: nothing to differentiate
            out.sum().backward()
            values.append(("dx", x.grad))
        for what, value in values:
            if value is None or not torch.isfinite(value).all():
                return False, f"the {what} is not finite for {label}"
        for name, p in gate.named_parameters():
            if p.grad is not None and not torch.isfinite(p.grad).all():
                return False, f"the gradient of {name} is not finite for {label}"
    return True, "the gate's outputs and gradients finite for a constant and a zero input"


ALL_KINDS = (ENERGY, KEY_BIAS, OUTPUT)
# each property with the kinds of gate it concerns
PROPERTIES: dict[str, tuple[Callable[[_Context], tuple[bool, str]], tuple[str, ...]]] = {
    "causal": (_causal, ALL_KINDS),
    "batch_independent": (_batch_independent, ALL_KINDS),
    "alpha_zero_is_baseline": (_alpha_zero_is_baseline, (ENERGY,)),
    "identity_is_baseline": (_identity_is_baseline, (KEY_BIAS,)),
    "fused_equals_reference": (_fused_equals_reference, ALL_KINDS),
    "cached_equals_recompute": (_cached_equals_recompute, ALL_KINDS),
    "params_per_layer": (_params_per_layer, ALL_KINDS),
    "fp32_under_autocast": (_fp32_under_autocast, (ENERGY, KEY_BIAS)),
    "finite_on_constant_input": (_finite_on_constant_input, ALL_KINDS),
}


def check_gate(
    gate: GateSpec,
    options: dict[str, Any] | None = None,
    shape: Shape | None = None,
    seed: int = 0,
    properties: list[str] | None = None,
) -> Conformance:
    """Checks a gate configuration (a name, import path or Gate subclass, with its gate options).

    Raises `GateError` (a UserError) when the gate cannot be found or built with these options;
    a property that raises counts as failed, with the exception in its detail. The caller's
    random state is left as it was.
    """
    options = dict(options or {})
    shape = shape or Shape()
    unknown = sorted(set(properties or []) - PROPERTIES.keys())
    if unknown:
        raise UserError(f"Unknown propert(y/ies) {', '.join(unknown)}; the properties are {', '.join(PROPERTIES)}.")
    cls = gate_class(gate)
    if cls is None:
        raise UserError("The baseline 'none' has no gate to check; name a gate, e.g. linear or my_gates.MyGate.")
    name = gate if isinstance(gate, str) else qualified_name(gate)
    ctx = _Context(gate, options, shape, seed, gate_kind(cls))
    its_own = [prop for prop, (_, kinds) in PROPERTIES.items() if ctx.kind in kinds]
    foreign = [prop for prop in properties or [] if prop not in its_own]
    if foreign:  # checked nowhere, it would pass in silence: "0 properties, all passed"
        article = "an" if ctx.kind[0] in "aeiou" else "a"
        concerns = "; ".join(f"{prop}: {' or '.join(PROPERTIES[prop][1])} only" for prop in foreign)
        raise UserError(
            f"--only {' '.join(foreign)}: {name} is {article} {ctx.kind}, which has no such property ({concerns}). "
            f"The properties of {article} {ctx.kind}: {', '.join(its_own)}."
        )
    check_gate_options(gate, ctx.gate_options())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tensors this small only lose time to threads (a lot of it on a busy machine)
    try:
        # eager FlexAttention on CPU warns that it is not compiled: the check runs it for its values only
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            try:
                ctx.layer_gate()
            except Exception as err:
                raise UserError(f"Gate {name!r} cannot be built with options {options}: {err}") from err
            ctx.model()  # checks the energy's shape: one line here, not the same failure in every property
            report = Conformance(name, options, shape)
            for prop, (check, kinds) in PROPERTIES.items():
                if (properties and prop not in properties) or ctx.kind not in kinds:
                    continue
                try:
                    with _non_finite_outputs() as non_finite:
                        passed, detail = check(ctx)
                    if passed and non_finite:  # NaN compares as no difference: the check measured nothing
                        passed, detail = False, f"{non_finite[0]}, so nothing was measured ({detail})"
                except Exception as err:  # the gate's own code failed inside the check: that is the finding
                    passed, detail = False, f"raised {type(err).__name__}: {err}"
                report.results.append(PropertyResult(prop, passed, detail))
    finally:
        torch.set_num_threads(threads)
    return report
