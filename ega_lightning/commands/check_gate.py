"""`ega check-gate`: does a gate (built in or yours) keep the promises the model relies on?

    ega check-gate my_gates.AbsEnergyGate
    ega check-gate multiscale --options '{scales: 4}'
    ega check-gate alibi --position none     # a gate in a model without position embedding (rope: RoPE)

The checks themselves are the library `ega_lightning.conformance` (its docstring lists the properties),
which tests call directly; this module only parses the command line and prints the report.
"""

from __future__ import annotations

import sys

import yaml

from ega_lightning.conformance import PROPERTIES, Shape, check_gate
from ega_lightning.errors import CommandParser, UserError
from ega_lightning.model.config import POSITIONS
from ega_lightning.seeding import seed_argument

# the command's window: the shipped block (configs/size/*.yaml train at 128 and up), so that a leak or a receptive
# field that only shows past the library's small test window (Shape.block_size, 32) shows here
BLOCK_SIZE = 128


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(prog="ega check-gate", description=__doc__.split("\n\n")[0])
    parser.add_argument("gate", help="a gate name (ega gates lists them) or an import path, e.g. my_gates.MyGate")
    parser.add_argument("--options", default="{}", help="gate options as YAML, e.g. '{scales: 4}'")
    parser.add_argument("--n_layer", type=int, default=Shape.n_layer, help=f"layers (default {Shape.n_layer})")
    parser.add_argument("--n_head", type=int, default=Shape.n_head, help=f"heads (default {Shape.n_head})")
    parser.add_argument("--n_embd", type=int, default=Shape.n_embd, help=f"width (default {Shape.n_embd})")
    parser.add_argument(
        "--block_size", type=int, default=BLOCK_SIZE, help=f"window, >= 8 (default {BLOCK_SIZE}: the shipped block)"
    )
    parser.add_argument(
        "--position",
        choices=POSITIONS,
        default=Shape.position,
        help=f"the model's position encoding: the gate checked under it (default {Shape.position})",
    )
    parser.add_argument("--seed", type=seed_argument, default=0, help="seed of the weights and tokens (default 0)")
    parser.add_argument("--only", nargs="+", default=None, metavar="PROPERTY", help=", ".join(PROPERTIES))
    args = parser.parse_args(argv)
    try:
        options = yaml.safe_load(args.options)
    except yaml.YAMLError as err:
        parser.error(f"--options is not YAML: {err}")
    if not isinstance(options, dict):
        parser.error(f"--options must be a mapping such as '{{scales: 4}}', got {args.options!r}")
    shape = Shape(args.n_layer, args.n_head, args.n_embd, args.block_size, position=args.position)
    if min(args.n_layer, args.n_head, args.n_embd) < 1 or args.n_embd % args.n_head or args.block_size < 8:
        parser.error("the shape needs n_embd divisible by n_head and block_size >= 8")
    try:
        report = check_gate(args.gate, options, shape, args.seed, args.only)
    except UserError as err:
        print(f"ega check-gate: error: {err}", file=sys.stderr)
        return 2
    print(report.format())
    return 0 if report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
