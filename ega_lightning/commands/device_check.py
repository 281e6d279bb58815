"""`python -m ega_lightning.device_check`: the attention paths against the reference on one device.

The comparisons are the library `ega_lightning.attention_paths` (its docstring says what is compared
and within which bounds); this module parses the command line, prints one row per comparison and exits
1 on any mismatch. bf16 is compared on CUDA, on CPU only when asked for: the check is meant for CUDA
(`scripts/gpu_check.sh`); the tests run it on CPU. A torch without FlexAttention (before 2.5) compares
the other two paths and says so.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from ega_lightning import attention_paths
from ega_lightning.devices import usable_device
from ega_lightning.errors import UserError
from ega_lightning.model import available_attention_impls
from ega_lightning.seeding import seed_argument


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ega_lightning.device_check", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--gates",
        nargs="+",
        default=["none", "linear", "multiscale", "db2", "morlet_param", "alibi", "fox", "output_headwise"],
        help="gate names: key gates and output gates alike",
    )
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None, help="default: on CUDA")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seed", type=seed_argument, default=0)
    parser.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    try:
        device = usable_device(args.device)
    except UserError as err:  # run as `python -m`, not through `ega`: said here
        parser.error(str(err))
    bf16 = device.type == "cuda" if args.bf16 is None else args.bf16
    rows = [
        row for gate in args.gates for row in attention_paths.compare_paths(gate, device, bf16, args.batch, args.seed)
    ]
    print(f"{'gate':<20}{'path':<11}{'dtype':<10}{'values':>22}{'gradients':>22}  verdict")
    for r in rows:
        grad = "-" if r["grad_err"] is None else f"{r['grad_err']:.2e} <= {r['grad_bound']:.1e}"
        values = f"{r['value_err']:.2e} <= {r['value_bound']:.1e}"
        print(
            f"{r['gate']:<20}{r['impl']:<11}{r['dtype']:<10}{values:>22}{grad:>22}  {'ok' if r['ok'] else 'MISMATCH'}"
        )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": str(device), "rows": rows}, indent=2) + "\n")
    failed = [r for r in rows if not r["ok"]]
    # the last line is the GPU check's verdict: it says what was not compared
    has_flex = "flex" in available_attention_impls()
    skipped = "" if has_flex else f" (flex not compared: torch {torch.__version__} has no FlexAttention)"
    print(f"{len(rows) - len(failed)} of {len(rows)} comparisons within bounds on {device}{skipped}")
    return 1 if failed else 0
