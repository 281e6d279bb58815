"""The leak, measured directly (issue 67): each checkpoint's loss before a cut with the text after it scrambled.

    PYTHONPATH=. python scripts/scrambled_future.py RUN/checkpoints/last.ckpt [...] --windows 512 \\
        --out results/leak/phase1-seed1.json

For every checkpoint: windows of its block from the validation split (the same windows and donor text for every
checkpoint, drawn from a fixed seed), cut at a quarter, a half and three quarters of the block (or --cuts), the inputs
from each cut on replaced by text from elsewhere in the split, and the loss at the positions before the cut read
against their true targets beside the same positions unscrambled (`ega_lightning.scrambled_future`). A causal model's
delta is 0; the author's z-norm over the whole window (gate/author.yaml) moves by what its gate reads of the future.
Prints one line per checkpoint and cut and writes every figure, per position too, to --out (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ega_lightning import host
from ega_lightning.io import write_atomic
from ega_lightning.scrambled_future import DONOR_SEED, as_data, draw_windows, read_cuts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--windows", type=int, default=512, help="validation windows (default 512)")
    parser.add_argument("--cuts", type=int, nargs="*", help="cut positions (default: T/4, T/2, 3T/4)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--data_dir", default=None, help="the corpora (default: $EGA_DATA_DIR, else ./data)")
    parser.add_argument("--out", type=Path, help="a JSON of every figure")
    args = parser.parse_args(argv)
    from ega_lightning.data import CharDataModule
    from ega_lightning.module import CharLM

    results = []
    for path in args.checkpoints:
        if not path.is_file():
            print(f"{path}: no such checkpoint; give the last.ckpt of a run written by `ega fit`.", file=sys.stderr)
            return 2
        ckpt = torch.load(path, weights_only=True, map_location="cpu")
        lm = CharLM.load_from_checkpoint(path, map_location="cpu").eval()
        corpus = ckpt.get("datamodule_hyper_parameters", {}).get("corpus", "tinyshakespeare")
        block = lm.hparams.block_size
        dm = CharDataModule(corpus, data_dir=args.data_dir or os.environ.get("EGA_DATA_DIR"), block_size=block)
        dm.setup()
        windows, donors = draw_windows(dm.splits["val"], block, args.windows)
        cuts = args.cuts or [block // 4, block // 2, 3 * block // 4]
        readings, total = read_cuts(lm, windows, donors, cuts, args.batch_size)
        run = path.parent.parent.name if path.parent.name == "checkpoints" else path.stem
        for r in readings:
            print(
                f"{run} step {ckpt.get('global_step')}: cut {r.cut}: loss before it {r.loss_true:.4f} -> "
                f"{r.loss_scrambled:.4f} scrambled, delta {r.delta:+.4f} [{r.low:+.4f}, {r.high:+.4f}]",
                flush=True,
            )
        print(f"{run}: every cut, delta {total.delta:+.4f} [{total.low:+.4f}, {total.high:+.4f}]", flush=True)
        hparams = lm.hparams
        results.append(
            {
                "run": run,
                "step": ckpt.get("global_step"),
                "gate": hparams.gate,
                "gate_options": dict(hparams.gate_options or {}),
                "attention": hparams.attention,
                "block_size": block,
                "corpus": corpus,
                **as_data(readings, total),
            }
        )
    if args.out:
        capability = torch.backends.cpu.get_cpu_capability()
        made = {
            "command": "python scripts/scrambled_future.py "
            + " ".join(
                [f"<runs_dir>/{r['run']}/checkpoints/last.ckpt" for r in results]
                + [f"--windows {args.windows}"]
                + ([f"--cuts {' '.join(map(str, args.cuts))}"] if args.cuts else [])
            ),
            "windows_seed": DONOR_SEED,
            "cpu": host.cpu_kind(capability),
            "torch": torch.__version__,
            "checkpoints": results,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.out, json.dumps(made, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
