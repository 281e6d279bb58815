"""`ega bench`'s results beside the records: which bench the cost claim reads (`read_bench`; the engine's reading
`step_time_ratio` judges it), the leaderboard's step times (`timed_gates`), and when and on what device a bench ran
(the sweep's runs are timed on a shared machine; the bench times each gate and the baseline side by side)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ega_lightning.errors import UserError
from ega_lightning.experiments.study import Bench
from ega_lightning.experiments.text import num

NO_BENCH = "docs/cost.md"  # the evidence where no `ega bench` result was found


def benches(records_dir: Path, out: Path) -> list[Bench]:
    """Every `ega bench` result beside the records (bench-*.json, and bench-*/bench-*.json of a bench of its
    own gates): the benches of the most repetitions first (the protocol reads one bench of at least
    `rules.min_repetitions`, so a longer bench is never shadowed by a shorter one), then the full tables
    (bench-<device>-<precision>.json) before the tables of one mode (-compile, -generation), then by path.
    Unreadable files, and JSON that is no bench's, are skipped."""
    top = records_dir.parent
    found = [*top.glob("bench-*.json"), *top.glob("bench-*/bench-*.json")]
    loaded = [(_load(p)[0], p) for p in found]
    ordered = sorted(
        ((result, p) for result, p in loaded if result is not None),
        key=lambda item: (-repetitions(item[0]), item[1].stem.count("-"), item[1].relative_to(top).as_posix()),
    )
    return [(result, os.path.relpath(p.with_suffix(".md"), out)) for result, p in ordered]


def repetitions(result: dict[str, Any]) -> int:
    """The most repetitions any training-step row of an `ega bench` result was timed over (0: none)."""
    rows = (row for size in result.get("sizes", []) for row in (size.get("rows") or {}).values())
    return max((int(row.get("repeats") or 0) for row in rows if isinstance(row, dict)), default=0)


def _load(path: Path) -> tuple[dict[str, Any] | None, str]:
    """The `ega bench` result in ``path``, or None and why it is not one."""
    try:
        result = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return None, str(err)
    if isinstance(result, dict) and isinstance(result.get("sizes"), list):
        return result, ""
    return None, "not the JSON object `ega bench --out` writes"


def read_bench(path: Path | None, records_dir: Path, out: Path) -> tuple[dict[str, Any] | None, str]:
    """The `ega bench` result the cost claim is read from, and its table's path relative to ``out``: ``path``,
    else the first of `benches` that times EGA-1's training step against the learned-position baseline (a
    `--position rope` bench sets EGA-1 against another model than the one the claim is about)."""
    if path is not None:  # asked for by name: a path that cannot be read is a mistake, not "no bench"
        result, why = _load(path)
        if result is None:
            raise UserError(
                f"--bench {path} cannot be read ({why}). Give a bench-*.json that `ega bench` wrote, or drop "
                "--bench to read the bench results beside the records."
            )
        return result, os.path.relpath(path.with_suffix(".md"), out)
    for result, source in benches(records_dir, out):
        if bench_position(result) != "learned":
            continue
        if any("linear" in size.get("rows", {}) for size in result.get("sizes", [])):
            return result, source
    return None, NO_BENCH


@dataclass(frozen=True)
class Timed:
    """A gate's training step time over the baseline's as `ega bench` measured it, on an idle machine: the
    median of the per-repetition ratios and their quartiles."""

    ratio: float
    q1: float | None
    q3: float | None
    source: str  # the bench's table, relative to the report

    def cell(self) -> str:
        quartiles = f" ({num(self.q1)}–{num(self.q3)})" if self.q1 is not None and self.q3 is not None else ""
        return f"×{num(self.ratio)}{quartiles}"


def bench_position(result: dict[str, Any]) -> str:
    """The position encoding an `ega bench` result ran its baseline at: its ``position`` (``--position``, which sets
    every model's), else learned, the default (a gate config's own, such as fox_nopos's none, is its row's alone; a
    bench written before the field was kept ran every baseline learned)."""
    return result.get("position") or "learned"


def timed_gates(
    found: list[Bench], shape: dict[str, Any], batch_size: Any, position: str = "learned"
) -> dict[str, Timed]:
    """Each gate's `Timed` from the first bench of ``found`` that timed it at ``shape`` (n_layer, n_head,
    n_embd, block_size), ``batch_size`` and its baseline at ``position`` (`bench_position`), uncompiled (a
    `+compile` row times another path)."""
    timed: dict[str, Timed] = {}
    for result, source in found:
        if bench_position(result) != position:  # its ratios are over another baseline
            continue
        for size in result.get("sizes", []):
            if size.get("shape") != shape or size.get("batch_size") != batch_size:
                continue
            for gate, row in size.get("rows", {}).items():
                if "+" in gate or gate in timed or row.get("time_ratio") is None:
                    continue
                q1, q3 = row.get("time_ratio_q1_q3") or (None, None)
                timed[gate] = Timed(row["time_ratio"], q1, q3, source)
    return timed


def bench_device(result: dict[str, Any], source: str) -> str:
    """``cpu`` or ``gpu``: the device an `ega bench` result timed, from the name `ega bench` gives its file
    (bench-<cpu|cuda>-<precision>...), else from its device's name (a CPU's names its logical cores, `host.cpu_name`);
    ``unknown`` where neither says."""
    name = Path(source).name
    if name.startswith("bench-cuda"):
        return "gpu"
    if name.startswith("bench-cpu"):
        return "cpu"
    device_name = str((result.get("environment") or {}).get("device_name") or "")
    return ("cpu" if "logical cores" in device_name else "gpu") if device_name else "unknown"


BENCH_RUN = "ega bench"  # the name the cost verdict's registration reads the bench's date under


def bench_date(bench: dict[str, Any] | None) -> datetime | None:
    """When an `ega bench` result was made (its ``date``, "YYYY-MM-DD HH:MM UTC"); None when not known."""
    try:
        return datetime.strptime(str((bench or {})["date"]), "%Y-%m-%d %H:%M UTC").replace(tzinfo=UTC)
    except (KeyError, ValueError):
        return None
