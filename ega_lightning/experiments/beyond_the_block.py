"""Final checkpoints evaluated beyond their training length, as plain data, for the report (which builds no model).

Issue 56's length extrapolation: a model with RoPE or no position embedding is evaluated on windows of 2 and 4 times
its training block. `scripts/seed_runner.py --beyond_the_block 2 4` writes one JSON per run and length (`ega validate
--data.eval_block_size`, the loss at full precision from its event file): ``{"run_name", "step", "eval_block_size",
"val_loss", "loss_by_position", "command", "cpu"}``, committed as ``results/beyond-the-block/<run>-T<L>.json``
(beside the records). Every JSON there is read here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ega_lightning.experiments.whole_split import SEED_RUNNER, load_each

DIRNAME = "beyond-the-block"  # beside the records directory: results/beyond-the-block/


@dataclass(frozen=True)
class BeyondTheBlock:
    """One final checkpoint's loss over the validation split in windows of ``eval_block_size`` (nats/char)."""

    run_name: str
    step: int  # the checkpoint's last training step, counted from 0
    eval_block_size: int
    loss: float
    by_position: tuple[float, ...]  # the mean loss at each position 1..eval_block_size
    cpu: str  # the machine it was evaluated on


def load(directory: Path) -> list[BeyondTheBlock]:
    """Every JSON in ``directory`` (none when it does not exist), in file order; a :class:`UserError` for one that
    is not what `scripts/seed_runner.py --beyond_the_block` writes, or whose file name is not its run's and length's."""
    what = "an evaluation beyond the block of the run and length its name gives"
    return load_each(directory, _beyond_the_block, what, f"{SEED_RUNNER} --beyond_the_block 2 4")


def _beyond_the_block(path: Path, result: dict[str, Any]) -> BeyondTheBlock:
    length, loss = int(result["eval_block_size"]), float(result["val_loss"])
    by_position = tuple(float(v) for v in result["loss_by_position"])
    if not math.isfinite(loss) or not all(map(math.isfinite, by_position)):
        raise ValueError("a loss is not finite")
    if len(by_position) != length:
        raise ValueError(f"{len(by_position)} positions' losses for windows of {length}")
    if f"{result['run_name']}-T{length}" != path.stem:
        raise ValueError(f"it names the run {result['run_name']!r} at windows of {length}")
    run, step, cpu = str(result["run_name"]), int(result["step"]), str(result.get("cpu") or "?")
    return BeyondTheBlock(run, step, length, loss, by_position, cpu)
