"""`ega bench`: what each gate costs, measured side by side in one process.

For every model size and gate config: the time of one training step (forward, backward,
AdamW step), interleaved across gates and repeated, reported as median with min and max,
the ratio to the baseline ``none``, tokens per second and memory; then our baseline against
a nanoGPT-style model written here; then generation speed with and without the KV cache; with
--pipeline, what `ega fit` costs over the bare training step (Lightning, callbacks, logging, data).

    ega bench                               # cpu and paper sizes, every gate config, this machine
    ega bench --sizes cpu --repeats 9 --precision bf16-mixed --device cuda
    ega bench --sizes cpu --gates linear --compile   # also every gate under torch.compile, compile time apart
    ega bench --generation_only --gates linear --generation_repeats 5   # KV cache against recompute only
    ega bench --gates none linear --no_generation --pipeline   # also each step inside `ega fit` against it bare

The measuring is the library `ega_lightning.bench`; this module parses the command line and writes
the JSON and the Markdown.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from ega_lightning.bench.harness import PRECISIONS
from ega_lightning.bench.run import benchmark
from ega_lightning.bench.settings import gate_settings, size_settings
from ega_lightning.bench.table import to_markdown
from ega_lightning.config_files import configs_dir
from ega_lightning.devices import usable_device
from ega_lightning.errors import CommandParser, UserError
from ega_lightning.io import write_atomic
from ega_lightning.model.config import POSITIONS
from ega_lightning.seeding import seed_argument


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="ega bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["cpu", "paper"], help="model sizes from configs/size/")
    parser.add_argument("--gates", nargs="+", default=None, help="gate configs from configs/gate/ (default: all)")
    parser.add_argument(
        "--configs",
        type=Path,
        default=None,
        help="the configs directory (size/, gate/); default: ./configs if there, else the packaged configs",
    )
    parser.add_argument("--repeats", type=int, default=7, help="timed repetitions per contender, >= 3 (default 7)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before timing (default 2)")
    parser.add_argument("--batch_size", type=int, default=None, help="override the size's batch size")
    parser.add_argument("--precision", choices=PRECISIONS, default=PRECISIONS[0], help="default 32-true")
    parser.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="default: cuda if there is one, else cpu",
    )
    parser.add_argument("--seed", type=seed_argument, default=1337, help="seed of every model's weights (default 1337)")
    parser.add_argument("--generation_sizes", nargs="+", default=["cpu", "paper"], help="sizes for generation")
    parser.add_argument("--new_tokens", type=int, default=256, help="tokens per generation timing (default 256)")
    parser.add_argument("--no_generation", action="store_true", help="skip the generation tables")
    parser.add_argument(
        "--generation_repeats",
        type=int,
        default=1,
        help="time cached and recomputed generation this many times each, alternating; medians",
    )
    parser.add_argument(
        "--generation_only",
        action="store_true",
        help="only the generation tables, in bench-<device>-<precision>-generation.json and .md",
    )
    parser.add_argument(
        "--position",
        choices=POSITIONS,
        default=None,
        help="every model's position encoding, the baseline's too (default: each gate config's own, else learned)",
    )
    parser.add_argument("--compile", action="store_true", help="also time every gate (and the reference) compiled")
    parser.add_argument(
        "--pipeline",
        action="store_true",
        help="also time each gate's step inside `ega fit` (Lightning, every callback of the default configs; "
        "reads the corpus) against its bare forward + backward + AdamW step, paired in the fit's process",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("results"), help="where the JSON and Markdown go (default results)"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the tables --out already holds for this device and precision (without it they are kept: "
        "results/ holds committed ones)",
    )
    return parser


def at_position(gates: dict[str, dict[str, Any]], position: str, named: list[str] | None) -> dict[str, dict[str, Any]]:
    """Every gate's settings at ``position`` (--position), less the configs that set their own, other position: a
    row is named by its config, and fox_nopos timed with learned positions is no FoX without positions (issue 72:
    such rows ran with learned positions under their nopos name). Named in --gates, they are refused; of the
    default list (every config) they are left out, saying so."""
    own = {name: s["position"] for name, s in gates.items() if s.get("position") not in (None, position)}
    if refused := sorted(own.keys() & set(named or [])):
        configs = ", ".join(f"{name} (position {own[name]})" for name in refused)
        raise UserError(
            f"--position {position} would replace the position of {configs}, whose config sets its own: its row "
            f"would be named for a design that did not run. Leave {', '.join(refused)} out of --gates to time the "
            f"others at {position}, or drop --position to time each config as it is."
        )
    if own:
        print(
            f"ega bench: --position {position}: left out {', '.join(sorted(own))}, whose configs set another "
            f"position (their rows would be named for a design that did not run).",
            file=sys.stderr,
        )
    return {name: {**settings, "position": position} for name, settings in gates.items() if name not in own}


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.repeats < 3:
        parser.error("--repeats must be at least 3 for a median with min and max to mean anything")
    if args.compile and args.warmup < 1:
        parser.error("--compile needs --warmup >= 1: compilation happens in the first step, which is not timed")
    if args.new_tokens < 1:  # a timing of no tokens would publish 0, or a negative rate
        parser.error(f"--new_tokens must be positive, got {args.new_tokens}")
    if args.batch_size is not None and args.batch_size < 1:
        parser.error(f"--batch_size must be positive (or left out: each size's own), got {args.batch_size}")
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0, got {args.warmup}")
    if args.generation_repeats < 1:
        parser.error(f"--generation_repeats must be positive, got {args.generation_repeats}")
    if args.generation_only and (args.no_generation or args.compile or args.pipeline):
        parser.error(
            "--generation_only times generation alone: it takes neither --no_generation, --compile nor --pipeline"
        )
    if args.out.exists() and not args.out.is_dir():  # said before the benchmark, not after it
        raise UserError(f"--out {args.out} is a file; give the tables a directory (it is made if missing).")
    if args.configs is None:
        args.configs = configs_dir()
    for size in {*([] if args.generation_only else args.sizes), *([] if args.no_generation else args.generation_sizes)}:
        size_settings(args.configs, size)  # every size named before any is timed
    device = usable_device(args.device)
    # its own files: a generation-only run does not overwrite the full tables
    stem = f"bench-{device.type}-{args.precision}" + ("-compile" if args.compile else "")
    stem += "-generation" if args.generation_only else ""
    held = [p for p in (args.out / f"{stem}.json", args.out / f"{stem}.md") if p.exists()]
    if held and not args.overwrite:  # said before the benchmark (issue 72: committed tables replaced in silence)
        raise UserError(
            f"--out {args.out} already holds {' and '.join(p.name for p in held)}, which this bench would replace "
            "(results/ holds the committed ones the report reads). Give another --out, or --overwrite to replace them."
        )
    gates = gate_settings(args.configs, args.gates)
    if args.position is not None:  # each gate against the baseline of the same position encoding
        gates = at_position(gates, args.position, args.gates)
    started = datetime.now(UTC)
    result = benchmark(args, gates, device, " ".join(["ega bench", *argv]), started)
    markdown = to_markdown(result)
    print(markdown)
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out / f"{stem}.json", json.dumps(result, indent=2) + "\n")
    write_atomic(args.out / f"{stem}.md", markdown)
    print(f"wrote {args.out / stem}.json and .md ({math.ceil((datetime.now(UTC) - started).total_seconds())} s)")


if __name__ == "__main__":
    main()
