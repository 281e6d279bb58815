"""`ega gates`: every gate the CLI can see (built-in, from installed packages' entry points), its slot and its cost.

ega gates                              # all of them, at the cpu size's layer shape (n_embd 128, 4 heads)
ega gates my_gates.AbsEnergyGate       # your own, by import path
ega gates --n_embd 256 --n_head 8      # parameters per layer at the paper size
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import Any

from ega_lightning.errors import CommandParser, UserError
from ega_lightning.gates.base import Gate
from ega_lightning.gates.registry import (
    NO_GATE,
    entry_point_gates,
    gate_names,
    is_builtin,
    registered_gates,
    resolve_gate,
)


@dataclass(frozen=True)
class GateInfo:
    name: str
    slot: str  # the model argument it is given as: gate or output_gate
    source: str  # built-in, the package of an entry point, or the module of an import path
    paper_row: str
    params_per_layer: str
    receptive_field: str
    options: str
    summary: str  # the docstring's first line


def _paper_row(name: str, defaults: dict[str, Any]) -> str:
    # the report's mapping: one place says which gate configuration is which row of the paper
    from ega_lightning.experiments.paper import paper_name

    return paper_name(name, defaults) or "-"


def describe(name: str, n_embd: int, n_head: int) -> GateInfo:
    """One gate at a layer shape; options at their defaults."""
    if name == NO_GATE:
        return GateInfo(NO_GATE, "gate", "built-in", "baseline", "0", "-", "-", "plain causal attention")
    gate = resolve_gate(name)  # once: a name may scan the entry points or import a module
    cls, slot = gate.cls, gate.slot
    assert cls is not None
    entry_points = entry_point_gates()
    source = "built-in" if is_builtin(cls) else cls.__module__
    if name in entry_points:
        source = f"entry point of {entry_points[name].package}"
    options = gate.options()
    defaults = {k: v for k, v in options.items() if v is not inspect.Parameter.empty}
    shown = ", ".join(f"{k}={v!r}" if k in defaults else f"{k} (required)" for k, v in options.items())
    try:
        params = str(gate.params_per_layer(n_embd, n_head, **defaults))
        gate.check_options(defaults)
        built = gate.build(n_embd, n_head, **defaults)
        receptive_field = str(getattr(built, "receptive_field", "-"))
    except Exception as err:  # required options, or a gate that needs another shape
        params = receptive_field = f"? ({type(err).__name__})"
    summary = (inspect.getdoc(cls) or "").split("\n")[0]
    row = _paper_row(name, defaults) if issubclass(cls, Gate) else "peer"
    return GateInfo(name, slot, source, row, params, receptive_field, shown or "-", summary)


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(prog="ega gates", description=__doc__.split("\n\n")[0])
    parser.add_argument("gates", nargs="*", help="names or import paths to describe (default: every gate found)")
    parser.add_argument("--n_embd", type=int, default=128, help="layer width for the parameter count (default: cpu)")
    parser.add_argument("--n_head", type=int, default=4, help="heads for the parameter count (default: cpu)")
    args = parser.parse_args(argv)
    if args.n_head < 1 or args.n_embd < 1 or args.n_embd % args.n_head:
        parser.error(f"--n_embd ({args.n_embd}) must be a positive multiple of --n_head ({args.n_head})")
    try:
        names = args.gates or gate_names()
    except UserError as err:  # installed packages that clash: the built-in gates are still there
        print(f"ega gates: warning: {err}", file=sys.stderr)
        names = [NO_GATE, *(name for name, cls in sorted(registered_gates().items()) if is_builtin(cls))]
    infos, broken = [], []
    for name in names:
        try:
            infos.append(describe(name, args.n_embd, args.n_head))
        except UserError as err:
            broken.append(str(err))
    for err in broken:  # one broken package does not hide the other gates; a gate you named is an error
        print(f"ega gates: {'error' if args.gates else 'warning'}: {err}", file=sys.stderr)
    if args.gates and broken:
        return 2
    header = ("gate", "slot", "source", "paper row", f"params/layer ({args.n_embd}x{args.n_head})", "receptive field")
    rows = [header] + [(i.name, i.slot, i.source, i.paper_row, i.params_per_layer, i.receptive_field) for i in infos]
    widths = [max(len(r[k]) for r in rows) for k in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    print()
    for i in infos:
        print(f"{i.name}: {i.summary}\n    options: {i.options}; as --model.{i.slot}={i.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
