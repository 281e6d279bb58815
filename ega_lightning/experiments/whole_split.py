"""The whole-split losses of final checkpoints as plain data, for the report (which builds no model itself).

A study whose recorded val/loss is another estimate than ours (the author's 50 random batches, issue 50) is read
beside the loss of the same final checkpoint over the whole validation split. `scripts/seed_runner.py
--whole_split` writes one JSON per run (`ega validate` of its last.ckpt, the loss at full precision from its
event file): ``{"run_name", "step", "val_loss_whole_split", "command", "cpu"}``, committed as
``results/author-whole-split/<run>.json`` (beside the records). Every JSON there is read here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ega_lightning.errors import UserError

T = TypeVar("T")
DIRNAME = "author-whole-split"  # beside the records directory: results/author-whole-split/
SEED_RUNNER = "python scripts/seed_runner.py SPEC --seeds N ..."  # what writes these evaluations, with its flag


@dataclass(frozen=True)
class WholeSplit:
    """One final checkpoint's loss over the whole validation split (nats/char)."""

    run_name: str
    step: int  # the checkpoint's last training step, counted from 0
    loss: float
    cpu: str  # the machine it was evaluated on


def load(directory: Path) -> list[WholeSplit]:
    """Every JSON in ``directory`` (none when it does not exist), in file order; a :class:`UserError` for one
    that is not what `scripts/seed_runner.py --whole_split` writes, or whose file name is not its run's."""
    what = "a whole-split evaluation of the run its name gives"
    return load_each(directory, _whole_split, what, f"{SEED_RUNNER} --whole_split")


def _whole_split(path: Path, result: dict[str, Any]) -> WholeSplit:
    loss = float(result["val_loss_whole_split"])
    if not math.isfinite(loss):
        raise ValueError(f"val_loss_whole_split is {loss}")
    if result["run_name"] != path.stem:
        raise ValueError(f"it names the run {result['run_name']!r}")
    return WholeSplit(str(result["run_name"]), int(result["step"]), loss, str(result.get("cpu") or "?"))


def load_each(directory: Path, parse: Callable[[Path, dict[str, Any]], T], what: str, writer: str) -> list[T]:
    """``parse`` of each JSON in ``directory`` (none when it does not exist), in file order: what the command
    ``writer`` writes. A :class:`UserError` names a file that is not ``what`` (a ValueError, KeyError or TypeError of
    ``parse``), and the way out."""
    out: list[T] = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            out.append(parse(path, json.loads(path.read_text())))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UserError(
                f"{path} is not {what} ({type(err).__name__}: {err}). Write it again with `{writer}` or remove it."
            ) from None
    return out
