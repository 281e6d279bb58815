"""`ega landscape`: the loss around each checkpoint's learned tau and alpha, written as one JSON.

    ega landscape --ckpt_path lightning_logs/ts-linear-seed1/checkpoints/step250.ckpt \\
        --ckpt_path lightning_logs/ts-linear-seed1/checkpoints/last.ckpt --out results/landscape/ts-linear-seed1.json

What is measured is the library `ega_lightning.tau_landscape` (its docstring says what each number is); the
JSON's format is the report's reader's, `ega_lightning.experiments.landscape_results`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ega_lightning.errors import CommandParser, UserError
from ega_lightning.experiments.landscape_results import FORMAT
from ega_lightning.io import write_atomic
from ega_lightning.tau_landscape import ALPHA_SCALES, TAU_SHIFTS, Z_EDGES, evaluate_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(
        prog="ega landscape",
        description="Validation loss with tau shifted and alpha scaled, the fraction above tau per head and "
        "the z histogram, from checkpoints; writes one JSON.",
    )
    parser.add_argument("--ckpt_path", action="append", required=True, help="a checkpoint (repeat for several)")
    parser.add_argument("--out", required=True, help="the JSON to write, e.g. results/landscape/ts-linear-seed1.json")
    parser.add_argument("--max_eval_windows", type=int, default=256, help="validation windows (0: the whole split)")
    parser.add_argument("--eval_batch_size", type=int, default=64, help="windows per forward pass (default 64)")
    parser.add_argument("--eval_znorm", choices=("prefix", "window"), default=None, help="default: as trained")
    parser.add_argument("--data_dir", default=None, help="default: $EGA_DATA_DIR, else ./data")
    args = parser.parse_args(argv)
    if args.max_eval_windows < 0 or args.eval_batch_size < 1:
        parser.error("--max_eval_windows must be >= 0 and --eval_batch_size >= 1")
    try:
        checkpoints = [
            evaluate_checkpoint(
                Path(p), args.max_eval_windows or None, args.eval_batch_size, args.data_dir, args.eval_znorm
            )
            for p in args.ckpt_path
        ]
    except UserError as err:  # one paragraph, nothing written
        print(f"ega landscape: error: {err}", file=sys.stderr)
        return 2
    result = {
        "format": FORMAT,
        "tau_shifts": list(TAU_SHIFTS),
        "alpha_scales": list(ALPHA_SCALES),
        "z_edges": list(Z_EDGES),
        "max_eval_windows": args.max_eval_windows or None,
        "checkpoints": checkpoints,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, json.dumps(result, indent=1) + "\n")
    for c in checkpoints:
        print(f"{c['name']} (step {c['step']}): val loss {c['loss']:.4f} on {c['windows']} windows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
