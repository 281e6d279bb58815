"""The context study (an open hypothesis, not the paper's claim): does EGA-1's advantage over the baseline
grow with the block size? Read on the seeds every block size ran."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import ClassVar

from ega_lightning.experiments import prose
from ega_lightning.experiments.comparisons import Row, Table, difference
from ega_lightning.experiments.findings import Finding, Where, code_of, judged, measured_with
from ega_lightning.experiments.rules import Verdict
from ega_lightning.experiments.stats import Difference, compare
from ega_lightning.experiments.study import Study
from ega_lightning.experiments.text import fmt_interval, how, interval_text, seed_list


@dataclass(frozen=True, kw_only=True)
class Context(Finding):
    """(Δ at the longest block − Δ at the shortest), per seed, with Δ at each block size beside it."""

    kind: ClassVar[str] = "context"
    measures: ClassVar[tuple[str, ...]] = ("context",)
    seeds: list[int]  # the seeds every block size ran
    by_block: list[tuple[int, Difference | None]] | None = None  # (block size, baseline − EGA-1)
    monotone: bool | None = None  # Δ grows with every longer block


@prose.measured.register
def say_context(f: Context) -> str:
    if f.ours is None:
        return "EGA-1 by block size: no seed ran every block size, so no like-for-like comparison."
    parts = "; ".join(f"T{block} {fmt_interval(diff)}" for block, diff in f.by_block or [])
    return (
        f"Δ by block size ({seed_list(f.seeds)}, which every block size ran): {parts}; "
        f"{'grows with every longer block' if f.monotone else 'not monotone'}. "
        f"Longest − shortest block: {interval_text(f.interval)}; the advantage grows with context"
        f"{prose.verdict_text(f)}."
    )


@prose.ours_cell.register
def context_cell(f: Context) -> str:
    if f.ours is None:
        return "no seed ran every block size"
    return f"Δ(longest) − Δ(shortest) {fmt_interval(f.interval)}, {how(f.interval)}"


def findings(table: Table) -> list[Finding]:
    """EGA-1 − baseline at each block size, on the seeds every block size ran: a 3-seed mean set
    beside single seeds would put seed noise into the trend."""
    rows = [r for r in table.rows if r.variant.gate == "linear" and r.diffs["final_val_loss"] is not None]
    blocks = {r.variant.hp("block_size") for r in rows}
    if len(blocks) < 2 or len(blocks) < len(rows):  # a context study: one EGA-1 per block size
        return []
    metric = "final_val_loss"
    seeds = set.intersection(*(set(r.variant.by_seed(metric)) & set(r.baseline.by_seed(metric)) for r in rows))
    rows.sort(key=lambda r: r.variant.hp("block_size"))
    sides = [x for r in rows for x in (r.variant, r.baseline)]
    where = Where(table.group, table.corpus, measured_with(rows[0].variant, *sides), "EGA-1", "baseline")
    if not seeds:
        return [Context(**where._asdict(), verdict=Verdict.NO_DATA, claim="context", seeds=[])]
    by_block = [(r.variant.hp("block_size"), difference(r.baseline, r.variant, metric, seeds)) for r in rows]

    def per_seed(row: Row) -> dict[int, float]:
        base, own = row.baseline.by_seed(metric), row.variant.by_seed(metric)
        return {s: base[s] - own[s] for s in seeds}

    contrast = compare(per_seed(rows[-1]), per_seed(rows[0]))
    grows = all(a.estimate < b.estimate for (_, a), (_, b) in itertools.pairwise(by_block))
    reads = [(f"context: {table.group} longest − shortest block", contrast)]
    # the registration counts the runs whose seeds enter the interval it reads: the longest and the shortest block's
    # (the blocks between them are shown, `by_block`, and enter no interval its label rests on)
    ends = [[rows[-1].variant, rows[-1].baseline, rows[0].variant, rows[0].baseline]]
    code = code_of(*sides, compared=ends)
    measured = {"seeds": sorted(seeds), "by_block": by_block, "monotone": grows, "code": code}
    return [judged(Context, where, reads, claim="context", family="context", **measured)]


GROUPS = ("context",)  # the spec groups whose tables it is handed: EGA-1 and the baseline at several block sizes
STUDY = Study("context", groups=GROUPS, table_findings=lambda table, inputs: findings(table))
