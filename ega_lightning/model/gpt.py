"""A GPT-style character decoder (after nanoGPT's model.py) with pluggable attention gates."""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
from torch import nn

from ega_lightning.gates import SLOTS, Gate, GateError, KeyBias, OutputGate, ResolvedGate, resolve_gate
from ega_lightning.gates.registry import describe_error, is_builtin
from ega_lightning.model import flex
from ega_lightning.model.attention import CausalSelfAttention
from ega_lightning.model.cache import LayerCache
from ega_lightning.model.config import GPTConfig
from ega_lightning.model.flex import FlexAttention
from ega_lightning.model.fused import FusedAttention
from ega_lightning.model.position import Position, build_position

# The attention layer of each ``model.attention``, chosen once when the model is built: the same attention,
# computed by the formula (the reference) or faster; tests/test_model.py and friends hold each to the reference.
ATTENTION: dict[str, type[CausalSelfAttention]] = {
    "fused": FusedAttention,
    "reference": CausalSelfAttention,
    "flex": FlexAttention,
}
ATTENTION_IMPLS = tuple(ATTENTION)


def attention_layer(
    cfg: GPTConfig,
    gate: KeyBias | None = None,
    output_gate: OutputGate | None = None,
    position: Position | None = None,
) -> CausalSelfAttention:
    """One attention layer of the model ``cfg`` describes, on the path ``cfg.attention`` names; ``position``: the
    model's position encoding (None: the layer builds its own of ``cfg.position``)."""
    if cfg.attention not in ATTENTION:
        raise ValueError(f"Unknown attention implementation {cfg.attention!r}; choose one of {ATTENTION_IMPLS}.")
    check_attention_options(cfg.attention, cfg.attention_options)
    return ATTENTION[cfg.attention](cfg, gate, output_gate, position, **cfg.attention_options)


def attention_options(impl: str) -> tuple[str, ...]:
    """The options the path ``impl`` takes when it is built (its class's keyword-only arguments)."""
    parameters = inspect.signature(ATTENTION[impl].__init__).parameters.values()
    return tuple(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)


def check_attention_options(impl: str, options: dict[str, Any]) -> None:
    """A ValueError naming an option the path ``impl`` does not take, with the ones it does."""
    unknown = sorted(set(options) - set(attention_options(impl)))
    if unknown:
        takes = ", ".join(attention_options(impl)) or "none"
        raise ValueError(
            f"model.attention_options {', '.join(unknown)}: not an option of the {impl} path (its options: {takes})."
        )


def available_attention_impls() -> tuple[str, ...]:
    """The ATTENTION_IMPLS this torch can run: without FlexAttention, all but ``flex``."""
    return tuple(impl for impl in ATTENTION_IMPLS if impl != "flex" or flex.has_flex_attention())


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


def _spec(cfg: GPTConfig, slot: str) -> tuple[str | type, dict[str, Any]]:
    """The gate a slot is given, and its options."""
    return (cfg.gate, cfg.gate_options) if slot == "gate" else (cfg.output_gate, {})


def resolve_gates(cfg: GPTConfig) -> dict[str, ResolvedGate]:
    """Each slot's gate (see `gates.slots`), resolved once for the model and its options checked."""
    resolved = {}
    for slot in SLOTS:
        spec, options = _spec(cfg, slot)
        resolved[slot] = resolve_gate(spec, slot)
        if resolved[slot].cls is not None:  # the baseline ignores options
            resolved[slot].check_options(options)
    return resolved


def _user_gate_failed(gate: ResolvedGate, what: str, err: Exception) -> GateError:
    return GateError(
        f"Gate {gate.name!r}: {what} raised {describe_error(err)}. "
        f"Fix the gate; `ega check-gate {gate.name}` checks it."
    )


def _build_gate(cfg: GPTConfig, gates: dict[str, ResolvedGate], slot: str) -> KeyBias | OutputGate | None:
    """One layer's gate in ``slot``; a user's gate whose constructor raises is a GateError naming where."""
    gate = gates[slot]
    try:
        return gate.build(cfg.n_embd, cfg.n_head, **_spec(cfg, slot)[1])
    except GateError:
        raise
    except Exception as err:
        if gate.cls is None or is_builtin(gate.cls):  # a bug of ours: the traceback
            raise
        what = f"{gate.cls.__name__}(n_embd={cfg.n_embd}, n_head={cfg.n_head}, ...)"
        raise _user_gate_failed(gate, what, err) from err


def _check_energy_shape(gate: Gate, cfg: GPTConfig, resolved: ResolvedGate) -> None:
    """The energy must be (B, n_head, T): said once here, not as a size mismatch deep inside attention."""
    T, C = cfg.block_size, cfg.n_embd
    x = torch.linspace(-1.0, 1.0, T * C).view(1, T, C)
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):  # no effect on the run's random stream
            energy = gate.energy(x)
            shape = tuple(energy.shape)
    except Exception as err:
        if is_builtin(type(gate)):
            raise
        raise _user_gate_failed(resolved, f"energy(x) for x of shape (B, T, C) = (1, {T}, {C})", err) from err
    _check_floating(energy, "energy(x)", resolved)
    rows = gate.energies_per_head * cfg.n_head  # n_head, or K n_head for a mixture of K gates per head
    expected = (1, rows, T)
    if shape != expected:
        transposed = shape == (1, T, rows)
        hint = " (it looks like (B, T, n_head): transpose it with .transpose(1, 2))" if transposed else ""
        name = resolved.name
        raise GateError(
            f"Gate {name!r}: energy(x) returned shape {shape} for x of shape (B, T, C) = (1, {T}, {C}); it "
            f"must return (B, n_head, T) = {expected}, one energy per head and position{hint}. Fix the gate; "
            f"`ega check-gate {name}` checks it."
        )


def _check_floating(value: torch.Tensor, what: str, resolved: ResolvedGate) -> None:
    """A gate's output must be a floating-point tensor: an integer one carries no gradient to the gate's weights, and
    the z-normalisation and attention fail on it deep inside a step."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return
    dtype = value.dtype if isinstance(value, torch.Tensor) else type(value).__name__
    raise GateError(
        f"Gate {resolved.name!r}: {what} returned {dtype}, not a floating-point tensor: an integer "
        "output carries no gradient to the gate's weights, and attention cannot use it. Return it in x's dtype "
        f"(drop .long() or .int()); `ega check-gate {resolved.name}` checks it."
    )


def _check_output_shape(gate: OutputGate, cfg: GPTConfig, resolved: ResolvedGate) -> None:
    """The factor must be (B, n_head, T, 1) or (B, n_head, T, head_size): said once here, not as a size mismatch
    (or a silent broadcast) deep inside attention."""
    T, C, nh = cfg.block_size, cfg.n_embd, cfg.n_head
    x = torch.linspace(-1.0, 1.0, T * C).view(1, T, C)
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):  # no effect on the run's random stream
            factor = gate(x)
            shape = tuple(factor.shape)
    except Exception as err:
        if is_builtin(type(gate)):
            raise
        raise _user_gate_failed(resolved, f"forward(x) for x of shape (B, T, C) = (1, {T}, {C})", err) from err
    _check_floating(factor, "forward(x)", resolved)
    per_head, per_channel = (1, nh, T, 1), (1, nh, T, C // nh)
    if shape not in (per_head, per_channel):
        transposed = len(shape) == 4 and shape[:3] == (1, T, nh)
        hint = " (it looks like (B, T, n_head, ...): transpose it with .transpose(1, 2))" if transposed else ""
        name = resolved.name
        raise GateError(
            f"Gate {name!r}: forward(x) returned shape {shape} for x of shape (B, T, C) = (1, {T}, {C}); it must "
            f"return (B, n_head, T, 1) = {per_head} or (B, n_head, T, head_size) = {per_channel}, one factor per "
            f"head and position (or per head, position and channel){hint}. Fix the gate; `ega check-gate {name}` "
            "checks it."
        )


class Block(nn.Module):
    """Pre-LayerNorm transformer block; the gate reads the same ln_1(x) that feeds Q/K/V."""

    def __init__(self, cfg: GPTConfig, gates: dict[str, ResolvedGate], position: Position) -> None:
        super().__init__()
        gate, output_gate = _build_gate(cfg, gates, "gate"), _build_gate(cfg, gates, "output_gate")
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = attention_layer(cfg, gate, output_gate, position)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        """x (B, T, C) -> (B, T, C); with a `cache`, x holds the positions that follow the cached ones."""
        x = x + self.attn(self.ln_1(x), cache)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig, gates: dict[str, ResolvedGate] | None = None) -> None:
        """``gates``: each slot's gate as `resolve_gates` gives it for ``cfg`` (a caller that has resolved
        them already passes them on); None: resolved here."""
        super().__init__()
        if cfg.n_embd % cfg.n_head != 0:
            raise ValueError(f"n_embd ({cfg.n_embd}) must be divisible by n_head ({cfg.n_head}).")
        self.cfg = cfg
        self.position = build_position(cfg)  # the one encoding: the embedding's and every attention layer's
        self.resolved_gates = resolve_gates(cfg) if gates is None else gates
        init_seed = int(torch.randint(2**62, ()).item())  # drawn before any module consumes the RNG
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        # the encoding's parameters (the learned embedding's), under nanoGPT's name and after wte, as they always were;
        # an encoding without any has no wpe (nor its init's draws)
        self.wpe = self.position.module()
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, self.resolved_gates, self.position) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self._init_weights(init_seed)
        if self.gates and isinstance(self.gates[0], Gate):  # every layer's gate is of one class
            _check_energy_shape(self.gates[0], cfg, self.resolved_gates["gate"])
        if self.output_gates:
            _check_output_shape(self.output_gates[0], cfg, self.resolved_gates["output_gate"])

    def _init_weights(self, seed: int) -> None:
        """nanoGPT's init: N(0, 0.02) weights, zero biases, residual projections scaled by 1/sqrt(2 n_layer)
        (unscaled with ``scale_residual_init`` False, the author's init).

        Shared weights, key-gate weights and output-gate weights come from three generators seeded from
        one draw of the global RNG, so a gated model and the baseline built from the same seed start from
        identical shared weights (and see the same batches): a paired comparison, only the gate differs.
        An output gate beside a key gate leaves the key gate's weights as they are without it.
        """
        shared, gates = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)
        outputs = torch.Generator().manual_seed(seed + 2)
        generator = {id(m): gates for gate in self.gates for m in gate.modules()}
        generator |= {id(m): outputs for gate in self.output_gates for m in gate.modules()}
        for name, module in self.named_modules():
            if name == "lm_head" or not isinstance(module, nn.Linear | nn.Embedding):
                continue  # lm_head is tied to wte
            scaled = self.cfg.scale_residual_init and name.endswith("c_proj")
            std = 0.02 / math.sqrt(2 * self.cfg.n_layer) if scaled else 0.02
            nn.init.normal_(module.weight, mean=0.0, std=std, generator=generator.get(id(module), shared))
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    @property
    def gates(self) -> list[KeyBias]:
        """The key gates (the ``gate`` slot), one per layer; [] for the baseline."""
        return [b.attn.gate for b in self.blocks if b.attn.gate is not None]

    @property
    def output_gates(self) -> list[OutputGate]:
        return [b.attn.output_gate for b in self.blocks if b.attn.output_gate is not None]

    def gate_parameter_count(self) -> int:
        """What the gates add: n_layer * the documented params_per_layer of each slot's gate."""
        cfg, gates = self.cfg, self.resolved_gates
        key = gates["gate"].params_per_layer(cfg.n_embd, cfg.n_head, **cfg.gate_options)
        return cfg.n_layer * (key + gates["output_gate"].params_per_layer(cfg.n_embd, cfg.n_head))

    def new_cache(self) -> list[LayerCache]:
        return [LayerCache(self.cfg.block_size) for _ in self.blocks]

    def forward(self, idx: torch.Tensor, cache: list[LayerCache] | None = None) -> torch.Tensor:
        """idx (B, T) character ids -> logits (B, T, vocab_size).

        With a `cache` (from `new_cache`), idx continues the cached sequence and the cache is extended. With a
        position encoding that `extrapolates` (rope, none), T may exceed block_size (evaluation beyond the training
        length); a cache still holds block_size positions.
        """
        start = cache[0].length if cache else 0
        x = self.wte(idx)  # (B, T, C)
        embedded = self.position.embed(idx, start)  # (T, C) or None
        x = self.drop(x if embedded is None else x + embedded)
        for i, block in enumerate(self.blocks):
            x = block(x, cache[i] if cache else None)
        return self.lm_head(self.ln_f(x))  # (B, T, V)
