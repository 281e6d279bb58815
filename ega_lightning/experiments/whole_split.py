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
from collections.abc import Callable, Mapping, Sequence
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


def cpu_model_of(described: str) -> str:
    """The CPU model an evaluation's ``cpu`` ("AMD EPYC (AVX512)") or a record's ``machine`` ("AMD EPYC x2 + GPU;
    Linux-...; torch ...") names."""
    first = described.split(";")[0].split(" + ")[0].strip()
    if first.endswith(")") and " (" in first:
        return first.rsplit(" (", 1)[0]
    head, _, cores = first.rpartition(" x")
    return head if head and cores.isdigit() else first


@dataclass(frozen=True)
class Ran:
    """What a run's record says of where and how far it ran: what an evaluation of its final checkpoint is checked
    against (`check_against_records`)."""

    seed: int
    max_steps: int | None
    machine: str | None
    spec: str = ""  # the spec it is of: a seed of one spec runs in one sitting, on one CPU kind (another spec's seed
    # of the same number is another sitting)


def check_against_records(found: Sequence[tuple[Any, Path]], records: Mapping[str, Ran]) -> None:
    """Raises :class:`UserError` for an evaluation (a `WholeSplit` or a `BeyondTheBlock`, with its file) that is
    not of its run's final checkpoint as the run's record gives it: its ``step`` is not the record's last (max_steps -
    1), its ``cpu`` is of another CPU model than the machine the record ran on, or another CPU kind than the seed's
    other evaluations of its spec (a seed's runs and evaluations run on one kind). A file edited to another step or CPU
    would otherwise move a label; an evaluation of a run no record gives is left as it is."""
    kinds: dict[tuple[str, int], tuple[str, Path]] = {}
    for it, path in found:
        ran = records.get(it.run_name)
        if ran is None:
            continue
        if isinstance(ran.max_steps, int) and it.step != ran.max_steps - 1:
            raise UserError(
                f"{path} is an evaluation at step {it.step}, but the record of {it.run_name} ends at step "
                f"{ran.max_steps - 1} (max_steps {ran.max_steps}): it is not of the run's final checkpoint. Write it "
                f"again from the final checkpoint with `{SEED_RUNNER}`, or remove it."
            )
        if ran.machine and it.cpu != "?" and cpu_model_of(it.cpu) != cpu_model_of(ran.machine):
            raise UserError(
                f"{path} was evaluated on {it.cpu}, but {it.run_name} ran on {cpu_model_of(ran.machine)} (its record's "
                f"machine): a seed's runs and their evaluations run on one CPU kind. Write it again on the seed's CPU "
                f"kind with `{SEED_RUNNER}`, or remove it."
            )
        first = kinds.setdefault((ran.spec, ran.seed), (it.cpu, path))
        if it.cpu != first[0]:
            raise UserError(
                f"{path} was evaluated on {it.cpu}, but {first[1]} (of the same spec's seed {ran.seed}) on "
                f"{first[0]}: a seed's evaluations run on one CPU kind. Write the one of another kind again on the "
                f"seed's kind with `{SEED_RUNNER}`, or remove it."
            )
