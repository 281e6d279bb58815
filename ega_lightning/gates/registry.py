"""Every way a config names a gate, resolved here and only here.

``--model.gate=<gate>`` (a key bias: an energy gate, ALiBi, FoX) and ``--model.output_gate=<gate>`` (an output
gate) take, in this order:

- a registered name: the built-in gates (``linear``, ``db4``, ...) and any class decorated with
  ``@register_gate("name")`` in code that has been imported;
- the name of an entry point in the group ``ega_lightning.gates`` of an installed package
  (``[project.entry-points."ega_lightning.gates"] mine = "my_pkg.gates:MyGate"``), imported on first use;
- an import path to a `Gate`, `KeyBias` or `OutputGate` subclass, ``my_gates.AbsEnergyGate`` or ``my_pkg.gates:MyGate``,
  importable from the current directory or the environment.

A checkpoint keeps the string it was trained with, so a fresh process finds the class the same way.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ega_lightning.errors import UserError
from ega_lightning.gates.base import COMMON_OPTIONS, Gate
from ega_lightning.gates.slots import KeyBias, OutputGate

NO_GATE = "none"
ENTRY_POINT_GROUP = "ega_lightning.gates"
AnyGate = KeyBias | OutputGate
_GATES: dict[str, type[AnyGate]] = {}

GateSpec = str | type[AnyGate]  # a name or import path, or the class itself (Python callers)
# the model argument of each slot, and the base class a gate in it subclasses
SLOTS: dict[str, type[AnyGate]] = {"gate": KeyBias, "output_gate": OutputGate}


class GateError(UserError, ValueError):
    """A gate that cannot be found, built or registered as asked (a ValueError, as before the registry grew)."""


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _definition(cls: type) -> tuple[str, str]:
    """Where a class is defined: (source file, qualified name inside it). The same file imported under
    two module names (``my_gates`` and ``examples.my_gates``), or reloaded, gives the same definition."""
    try:
        source = os.path.realpath(inspect.getfile(cls))
    except (TypeError, OSError):  # defined in __main__ of an interactive session, or built dynamically
        source = cls.__module__
    return source, cls.__qualname__


def _where(cls: type) -> str:
    return f"{qualified_name(cls)} ({_definition(cls)[0]})"


def is_builtin(cls: type) -> bool:
    return cls.__module__.startswith("ega_lightning.")


def register_gate(name: str) -> Callable[[type[AnyGate]], type[AnyGate]]:
    """Class decorator: ``@register_gate("abs_energy")`` makes the class available as ``gate="abs_energy"``.

    Registering the same definition again (its module imported under a second name, or reloaded)
    is a no-op that keeps the newest class; a different class under a taken name is an error.
    """
    if not name or name == NO_GATE or any(c in name for c in ".: "):
        raise GateError(
            f"Cannot register a gate as {name!r}: {NO_GATE!r} is the baseline, and names with '.', ':' or "
            "spaces read as import paths. Pick a short name such as 'abs_energy'."
        )

    def add(cls: type[AnyGate]) -> type[AnyGate]:
        _require_gate_class(cls, f"@register_gate({name!r})")
        known = _GATES.get(name)
        if known is not None and _definition(known) != _definition(cls):
            raise GateError(
                f"Two gates claim the name {name!r}: {_where(known)} and {_where(cls)}. "
                f"Rename one of them (@register_gate(...)), or name your own by import path instead."
            )
        _GATES[name] = cls
        cls.registry_name = name
        return cls

    return add


# ----------------------------------------------------------------------------- entry points


@dataclass(frozen=True)
class EntryPointGate:
    """A gate an installed package declares, before it is imported."""

    name: str
    value: str  # "module:Class"
    package: str  # "my-pkg 0.1"

    def load(self) -> type[AnyGate]:
        try:
            obj = importlib.metadata.EntryPoint(self.name, self.value, ENTRY_POINT_GROUP).load()
        except Exception as err:  # the package's own code: anything can go wrong in it
            raise GateError(
                f"Gate {self.name!r} is an entry point of the package {self.package} ({self.value}), but importing "
                f"it failed: {describe_error(err)}. Fix or reinstall {self.package}, or uninstall it."
            ) from err
        cls = _require_gate_class(obj, f"Entry point {self.name!r} of the package {self.package} ({self.value})")
        register_gate(self.name)(cls)
        return cls


def entry_point_gates() -> dict[str, EntryPointGate]:
    """The gates installed packages declare, by name (nothing is imported). Conflicts are errors."""
    found: dict[str, list[EntryPointGate]] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        package = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "(unknown package)"
        found.setdefault(ep.name, []).append(EntryPointGate(ep.name, ep.value, package))
    gates = {}
    for name, eps in sorted(found.items()):
        builtin = _GATES.get(name)
        if name == NO_GATE or (builtin is not None and is_builtin(builtin)):
            raise GateError(
                f"The package {eps[0].package} declares a gate named {name!r} (entry point group "
                f"{ENTRY_POINT_GROUP}, {eps[0].value}), but {name!r} is a built-in gate. Rename the entry point "
                f"in that package's pyproject.toml and reinstall it, or uninstall it."
            )
        if len({ep.value for ep in eps}) > 1:
            listed = "; ".join(sorted(f"{ep.package}: {ep.value}" for ep in eps))
            raise GateError(
                f"Two installed packages declare a gate named {name!r} (entry point group {ENTRY_POINT_GROUP}): "
                f"{listed}. Rename the entry point in one of them and reinstall it, or uninstall one."
            )
        gates[name] = eps[0]
    return gates


# ----------------------------------------------------------------------------- import paths


def describe_error(err: BaseException) -> str:
    """``SyntaxError: invalid syntax (my_gates.py, line 3)``: the error and where it was raised, in one line."""
    if isinstance(err, SyntaxError):
        return f"{type(err).__name__}: {err.msg} ({err.filename}, line {err.lineno})"
    frames = traceback.extract_tb(err.__traceback__)
    where = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {err}{where}"


def _ensure_cwd_importable() -> None:
    # `python -m` puts the working directory on sys.path, the `ega` script does not; appended, so a
    # stray file there never shadows an installed module
    if not {"", ".", os.getcwd()} & set(sys.path):
        sys.path.append(os.getcwd())


def _import_path(path: str) -> type[AnyGate]:
    """The Gate subclass at ``module.Class`` or ``module:Class``."""
    module_name, _, attr = path.rpartition(":") if ":" in path else path.rpartition(".")
    if not module_name or not attr:
        raise GateError(f"Gate {path!r} is not an import path: write module.Class, e.g. my_gates.AbsEnergyGate.")
    _ensure_cwd_importable()
    importlib.invalidate_caches()  # a module written since the directory was last read
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is None or not (module_name == err.name or module_name.startswith(err.name + ".")):
            raise GateError(
                f"Gate {path!r}: importing {module_name} failed: {describe_error(err)}. "
                "Install the missing module, or fix the import."
            ) from err
        raise GateError(
            f"Unknown gate {path!r}: it is not a registered gate ({', '.join(gate_names())}), and there is "
            f"no module {module_name!r} to import it from (looked in the current directory {os.getcwd()} and "
            f"on sys.path). Run `ega` from the directory that holds {module_name.replace('.', '/')}.py, or add "
            "that directory to PYTHONPATH; a checkpoint trained with this gate needs the same module to load."
        ) from err
    except Exception as err:  # the user's module raised while being imported
        raise GateError(
            f"Gate {path!r}: importing {module_name} failed: {describe_error(err)}. Fix the module and run again."
        ) from err
    if not hasattr(module, attr):
        found = sorted(
            n
            for n, o in vars(module).items()
            if isinstance(o, type) and issubclass(o, KeyBias | OutputGate) and o not in (Gate, KeyBias, OutputGate)
        )
        raise GateError(
            f"Gate {path!r}: the module {module_name} ({getattr(module, '__file__', '?')}) has no {attr!r}; "
            f"the Gate subclasses it defines: {', '.join(found) or 'none'}."
        )
    return _require_gate_class(getattr(module, attr), f"Gate {path!r}")


def _require_gate_class(obj: Any, what: str) -> type[AnyGate]:
    if not (isinstance(obj, type) and issubclass(obj, KeyBias | OutputGate)):
        kind = f"the class {qualified_name(obj)}" if isinstance(obj, type) else f"a {type(obj).__name__}"
        raise GateError(
            f"{what} is {kind}, not a subclass of ega_lightning.gates.Gate. A gate is a class that "
            "subclasses Gate and implements energy(x) and params_per_layer (see docs/your-own-gate.md); "
            "a key bias or an output gate subclasses ega_lightning.gates.KeyBias or OutputGate."
        )
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(obj.__abstractmethods__))
        raise GateError(f"{what} is the abstract class {qualified_name(obj)}: implement {missing} in a subclass.")
    return obj


# ----------------------------------------------------------------------------- lookups


def registered_gates() -> dict[str, type[AnyGate]]:
    """The gates registered so far (the built-in ones, and those of code imported), by name."""
    return dict(_GATES)


def gate_names(kind: type | None = None) -> list[str]:
    """``none``, the registered names and the entry points' names (these not imported yet); with ``kind``
    (e.g. `Gate`, `KeyBias`, `OutputGate`), ``none`` and the registered gates of that kind only."""
    if kind is not None:
        return [NO_GATE, *sorted(name for name, cls in _GATES.items() if issubclass(cls, kind))]
    return [NO_GATE, *sorted(set(_GATES) | set(entry_point_gates()))]


def gate_class(gate: GateSpec) -> type[AnyGate] | None:
    """The class a gate name, entry point or import path names; None for the baseline ``none``."""
    if isinstance(gate, type):
        return _require_gate_class(gate, f"The gate {qualified_name(gate)}")
    if gate == NO_GATE:
        return None
    if gate in _GATES:
        return _GATES[gate]
    entry_points = entry_point_gates()
    if gate in entry_points:
        return entry_points[gate].load()
    if "." in gate or ":" in gate:
        return _import_path(gate)
    raise GateError(
        f"Unknown gate {gate!r}. Registered gates: {', '.join(gate_names())}. "
        "A gate of your own is named by its import path, e.g. --model.gate=my_gates.AbsEnergyGate; one an "
        f"installed package declared (entry point group {ENTRY_POINT_GROUP}) needs that package installed."
    )


def gate_options(gate: GateSpec) -> dict[str, Any]:
    """The options a gate accepts besides the layer shape (n_embd, n_head), with their defaults
    (``inspect.Parameter.empty`` where there is none): its __init__'s, then COMMON_OPTIONS (every gate's)."""
    return resolve_gate(gate).options()


def _options_of(cls: type[AnyGate]) -> dict[str, Any]:
    params = inspect.signature(cls.__init__).parameters.values()
    own = {
        p.name: p.default
        for p in params
        if p.name not in ("self", "n_embd", "n_head") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    return {**own, **COMMON_OPTIONS} if issubclass(cls, Gate) else own


def check_gate_options(gate: GateSpec, options: dict[str, Any]) -> None:
    resolve_gate(gate).check_options(options)


@dataclass(frozen=True)
class ResolvedGate:
    """A gate as a config names it (``spec``) and the class that name resolved to, once: a model resolves
    each slot's gate one time and builds every layer's gate from it (resolving a name may scan the
    installed packages' entry points or import a module)."""

    spec: GateSpec
    cls: type[AnyGate] | None  # None: the baseline ``none``

    @property
    def name(self) -> str:
        """The gate as messages name it: the config's string, or a class's import path."""
        return self.spec if isinstance(self.spec, str) else qualified_name(self.spec)

    @property
    def slot(self) -> str:
        """The slot the class fits (see SLOTS); ``gate`` for the baseline."""
        if self.cls is None:
            return "gate"
        return next(slot for slot, base in SLOTS.items() if issubclass(self.cls, base))

    def options(self) -> dict[str, Any]:
        """The options the gate accepts besides the layer shape, with their defaults (see `gate_options`)."""
        return {} if self.cls is None else _options_of(self.cls)

    def check_options(self, options: dict[str, Any]) -> None:
        cls = self.cls
        params = [] if cls is None else inspect.signature(cls.__init__).parameters.values()
        if any(p.kind == p.VAR_KEYWORD for p in params):
            return  # takes **options: the class checks them itself
        accepted = [] if cls is None else list(_options_of(cls))
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise GateError(
                f"Gate {self.name!r} does not take option(s) {', '.join(unknown)}; "
                f"it accepts: {', '.join(accepted) or 'no options'}."
            )

    def build(self, n_embd: int, n_head: int, **options: Any) -> AnyGate | None:
        """A new gate module for one attention layer, or None for ``none``; options as `check_options` passed them."""
        if self.cls is None:
            return None
        common = {k: options.pop(k) for k in list(options) if k in COMMON_OPTIONS}
        module = self.cls(n_embd, n_head, **options)
        if isinstance(module, Gate):
            module.set_common_options(**common)
        return module

    def params_per_layer(self, n_embd: int, n_head: int, **options: Any) -> int:
        own = {k: v for k, v in options.items() if k not in COMMON_OPTIONS}  # they add no parameter
        return 0 if self.cls is None else self.cls.params_per_layer(n_embd, n_head, **own)


def resolve_gate(gate: GateSpec, slot: str | None = None) -> ResolvedGate:
    """The class ``gate`` names (one `gate_class` call), checked to fit ``slot`` when one is given."""
    resolved = ResolvedGate(gate, gate_class(gate))
    if slot is not None and resolved.cls is not None and not issubclass(resolved.cls, SLOTS[slot]):
        other = resolved.slot
        raise GateError(
            f"{resolved.name!r} is {'an output gate' if other == 'output_gate' else 'a key bias'}: give it as "
            f"model.{other}, not model.{slot} (e.g. --model.{other}={resolved.name})."
        )
    return resolved


def build_gate(gate: GateSpec, n_embd: int, n_head: int, slot: str = "gate", **options: Any) -> AnyGate | None:
    """A new gate module for one attention layer's ``slot``, or None for ``none``."""
    resolved = resolve_gate(gate, slot)
    if resolved.cls is None:
        return None
    resolved.check_options(options)
    return resolved.build(n_embd, n_head, **options)


def gate_params_per_layer(gate: GateSpec, n_embd: int, n_head: int, **options: Any) -> int:
    return resolve_gate(gate).params_per_layer(n_embd, n_head, **options)
