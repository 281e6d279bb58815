"""The cost study: the paper's claim that the gate has no measurable cost, read from `ega bench` (the sweep's
runs are timed on a shared machine; the bench times EGA-1 and the baseline side by side)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ega_lightning.experiments.findings import Finding
from ega_lightning.experiments.rules import cost_rule
from ega_lightning.experiments.stats import Summary
from ega_lightning.experiments.text import num

NO_BENCH = "docs/cost.md"  # the evidence where no `ega bench` result was found


@dataclass(frozen=True, kw_only=True)
class Cost(Finding):
    """EGA-1's step time over the baseline's, `ega bench`'s median and quartiles over repetitions."""

    kind: ClassVar[str] = "cost"
    q1: float | None
    q3: float | None
    size: str | None  # the size it was timed at
    source: str  # the bench's table, relative to the report

    def ours_cell(self) -> str:
        if not isinstance(self.ours, Summary):
            return "no `ega bench` result"
        return f"step time ×{num(self.ours.mean)} (quartiles {num(self.q1)}–{num(self.q3)})"

    def evidence(self) -> str:
        return f"[{self.source}]({self.source})"


def read_bench(path: Path | None, records_dir: Path, out: Path) -> tuple[dict[str, Any] | None, str]:
    """The `ega bench` result the cost claim is read from, and its table's path relative to ``out``: ``path``,
    else the first beside the records that times EGA-1's training step; the full table
    (bench-<device>-<precision>.json) before the tables of one mode (-compile, -generation)."""
    found = sorted(records_dir.parent.glob("bench-*.json"), key=lambda p: (p.stem.count("-"), p.name))
    for candidate in [path] if path else found:
        try:
            result = json.loads(candidate.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if path or any("linear" in size.get("rows", {}) for size in result.get("sizes", [])):
            return result, os.path.relpath(candidate.with_suffix(".md"), out)
    return None, NO_BENCH


def cost_finding(bench: dict[str, Any] | None, source: str) -> Finding:
    """The paper's cost claim against `ega bench`'s first size that times EGA-1 (rules.cost_rule)."""
    row = None
    size = None
    for entry in (bench or {}).get("sizes", []):
        if "linear" in entry.get("rows", {}):
            row, size = entry["rows"]["linear"], entry.get("size")
            break
    q1, q3 = (row or {}).get("time_ratio_q1_q3") or (None, None)
    ours = None if row is None else Summary(row.get("time_ratio"), None, int(row.get("repeats") or 0))
    return Cost(
        section="cost",
        corpus="",
        regime=f"`ega bench`, {size} size",
        subject="EGA-1",
        against="baseline",
        ours=ours,
        verdict=cost_rule(q1, q3),
        claim="cost",
        q1=q1,
        q3=q3,
        size=size,
        source=source,
    )
