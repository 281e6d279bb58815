"""The pipeline's own cost: a model's training step inside `ega fit` (Lightning, the callbacks, logger and
data of the default configs) against the bare forward + backward + AdamW step of the same model, the
nanoGPT-style loop, paired step by step in the fit's own process (`bare_step.PairedBareStep`).

`ega fit` runs as the documented ``python -m ega_lightning.cli fit`` with the size's and the gate's
configs, the callback appended to the configured ones, and its run directory in a temporary folder; a
library does not import a command, and a fit in a process of its own is the fit a user runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from ega_lightning.bench.harness import MODEL_OPTIONS, paired_summary
from ega_lightning.bench.settings import size_settings
from ega_lightning.errors import UserError

CALLBACK = "ega_lightning.bench.bare_step.PairedBareStep"


def fit_command(
    size: str, configs: Path, gate: dict[str, Any], device: torch.device, args: argparse.Namespace, folder: Path
) -> list[str]:
    """The `ega fit` line of one pipeline row: the configs' base, the size, the gate's model options as
    flags (those the gate table's models take), this bench's steps, device, precision and seed."""
    line = [sys.executable, "-m", "ega_lightning.cli", "fit"]
    for config in (configs / "base.yaml", configs / "size" / f"{size}.yaml"):
        line += ["-c", str(config)] if config.is_file() else []
    for key, value in gate.items():
        if key in MODEL_OPTIONS:
            line.append(f"--model.{key}={value if isinstance(value, str) else json.dumps(value)}")
    line += [
        f"--trainer.max_steps={args.warmup + args.repeats + 1}",  # the last step closes the last interval
        f"--trainer.accelerator={device.type}",
        f"--trainer.precision={args.precision}",
        f"--seed_everything={args.seed}",
        f"--runs_dir={folder / 'runs'}",
        f"--trainer.callbacks+={CALLBACK}",
        f"--trainer.callbacks.init_args.out={folder / 'timings.json'}",
        f"--trainer.callbacks.init_args.warmup={args.warmup}",
        f"--trainer.callbacks.init_args.repeats={args.repeats}",
    ]
    if device.index is not None:
        line.append(f"--trainer.devices=[{device.index}]")
    if args.batch_size:
        line.append(f"--data.batch_size={args.batch_size}")
    return line


def pipeline_overhead(
    size: str, configs: Path, name: str, gate: dict[str, Any], device: torch.device, args: argparse.Namespace
) -> dict[str, Any]:
    """One row: `ega fit`'s step and the bare step of the gate `name` at `size`, their medians, the
    per-step ratio (median, quartiles) and the ratio of their total times (which counts the steps that log)."""
    shape, _ = size_settings(configs, size)
    with tempfile.TemporaryDirectory(prefix="ega-bench-fit-") as folder:
        line = fit_command(size, configs, gate, device, args, Path(folder))
        print(f"[{size}] {name} inside `ega fit` against its bare step: {args.repeats} repeats", flush=True)
        done = subprocess.run(line, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
            raise UserError(
                f"`ega fit` for the pipeline's row ({size}, {name}) stopped with exit status {done.returncode}; "
                f"its last lines:\n{tail}\n(run without --pipeline for the other tables; the fit reads the corpus "
                "from data.data_dir or $EGA_DATA_DIR)."
            )
        timings = json.loads((Path(folder) / "timings.json").read_text())
    fit, bare = timings.pop("fit_s"), timings.pop("bare_s")
    ratio, quartiles = paired_summary(fit, bare)
    return {
        "size": size,
        "shape": shape,
        "gate": name,
        "fit_median_ms": 1e3 * statistics.median(fit),
        "bare_median_ms": 1e3 * statistics.median(bare),
        "time_ratio": ratio,
        "time_ratio_q1_q3": quartiles,
        "total_ratio": sum(fit) / sum(bare),
        "repeats": len(fit),
        "fit_s": fit,
        "bare_s": bare,
        **timings,
    }
