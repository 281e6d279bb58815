"""How many TensorBoard tags a run logs, by size and gate: a 4-step `ega fit` of each (validations at steps 2 and 4,
two validation windows) into a scratch directory, then its event files read back.

    python scripts/tensorboard_tags.py                      # cpu and paper sizes, EGA-1, the baseline and FoX
    python scripts/tensorboard_tags.py --sizes cpu --gates linear

Prints one line per run: scalar tags, image tags, text and other tensor tags.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

SHORT = ["--trainer.max_steps=4", "--trainer.val_check_interval=2", "--data.max_eval_windows=2", "--data.batch_size=2"]
SHORT += ["--trainer.enable_progress_bar=false", "--checkpoint_every_n_steps=0"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["cpu", "paper"])
    parser.add_argument("--gates", nargs="+", default=["linear", "none", "fox"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        for size in args.sizes:
            for gate in args.gates:
                name = f"{size}-{gate}"
                cmd = [sys.executable, "-m", "ega_lightning.cli", "fit", "-c", f"size/{size}.yaml"]
                cmd += [f"--model.gate={gate}", *SHORT, f"--run_name={name}"]
                subprocess.run(cmd, cwd=work, check=True, capture_output=True, env={**os.environ})
                events = EventAccumulator(str(Path(work) / "lightning_logs" / name))
                events.Reload()
                tags = events.Tags()
                print(
                    f"{name}: {len(tags['scalars'])} scalar tags, {len(tags['images'])} image tags, "
                    f"{len(tags['tensors'])} text/other tags",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
