"""Gates by name, so configs name a gate with a string (``--model.gate=linear``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ega_lightning.gates.base import COMMON_OPTIONS, Gate

NO_GATE = "none"
_GATES: dict[str, type[Gate]] = {}


def register_gate(name: str) -> Callable[[type[Gate]], type[Gate]]:
    def add(cls: type[Gate]) -> type[Gate]:
        if name in _GATES or name == NO_GATE:
            raise ValueError(f"A gate named {name!r} is already registered.")
        _GATES[name] = cls
        cls.registry_name = name
        return cls

    return add


def gate_names() -> list[str]:
    return [NO_GATE, *sorted(_GATES)]


def gate_class(name: str) -> type[Gate] | None:
    """The class registered as `name`; None for the baseline ``none``."""
    if name == NO_GATE:
        return None
    if name not in _GATES:
        raise ValueError(f"Unknown gate {name!r}. Registered gates: {', '.join(gate_names())}.")
    return _GATES[name]


def gate_option_names(name: str) -> list[str]:
    """The options a gate accepts besides the layer shape (n_embd, n_head): its __init__'s and COMMON_OPTIONS."""
    cls = gate_class(name)
    if cls is None:
        return []
    own = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "n_embd", "n_head")]
    return [*own, *COMMON_OPTIONS]


def check_gate_options(name: str, options: dict[str, Any]) -> None:
    accepted = gate_option_names(name)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"Gate {name!r} does not take option(s) {', '.join(unknown)}; "
            f"it accepts: {', '.join(accepted) or 'no options'}."
        )


def build_gate(name: str, n_embd: int, n_head: int, **options: Any) -> Gate | None:
    """A new gate module for one attention layer, or None for ``none``."""
    cls = gate_class(name)
    if cls is None:
        return None
    check_gate_options(name, options)
    common = {k: options.pop(k) for k in list(options) if k in COMMON_OPTIONS}
    gate = cls(n_embd, n_head, **options)
    gate.set_common_options(**common)
    return gate


def gate_params_per_layer(name: str, n_embd: int, n_head: int, **options: Any) -> int:
    cls = gate_class(name)
    own = {k: v for k, v in options.items() if k not in COMMON_OPTIONS}  # they add no parameter
    return 0 if cls is None else cls.params_per_layer(n_embd, n_head, **own)
