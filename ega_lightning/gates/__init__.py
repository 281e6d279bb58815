"""Energy gates by name, entry point or import path. Importing this package registers every shipped gate."""

from ega_lightning.gates import linear, multiscale, wavelet  # noqa: F401  (importing registers the gates)
from ega_lightning.gates.base import ZNORM_MODES, Gate, GateState, causal_znorm, window_znorm
from ega_lightning.gates.registry import (
    NO_GATE,
    GateError,
    build_gate,
    check_gate_options,
    gate_class,
    gate_names,
    gate_options,
    gate_params_per_layer,
    register_gate,
)

__all__ = [
    "NO_GATE",
    "ZNORM_MODES",
    "Gate",
    "GateError",
    "GateState",
    "build_gate",
    "causal_znorm",
    "check_gate_options",
    "gate_class",
    "gate_names",
    "gate_options",
    "gate_params_per_layer",
    "register_gate",
    "window_znorm",
]
