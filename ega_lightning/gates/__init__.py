"""Attention gates by name, entry point or import path. Importing this package registers every shipped gate."""

from ega_lightning.gates import alibi, author, fox, linear, multiscale, output, wavelet  # noqa: F401  (registers them)
from ega_lightning.gates.base import ZNORM_MODES, Gate, GateState, causal_znorm, window_znorm
from ega_lightning.gates.registry import (
    NO_GATE,
    SLOTS,
    GateError,
    ResolvedGate,
    build_gate,
    check_gate_options,
    gate_class,
    gate_names,
    gate_options,
    gate_params_per_layer,
    register_gate,
    resolve_gate,
)
from ega_lightning.gates.slots import KeyBias, OutputGate, relative_bias

__all__ = [
    "NO_GATE",
    "SLOTS",
    "ZNORM_MODES",
    "Gate",
    "GateError",
    "GateState",
    "KeyBias",
    "OutputGate",
    "ResolvedGate",
    "build_gate",
    "causal_znorm",
    "check_gate_options",
    "gate_class",
    "gate_names",
    "gate_options",
    "gate_params_per_layer",
    "register_gate",
    "relative_bias",
    "resolve_gate",
    "window_znorm",
]
