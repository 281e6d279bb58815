"""The studies of the report, one module each: its typed findings, its decision rule applied (`rules`), its
sentences and table cells. :func:`findings` gathers every finding, section by section, in the report's order.

- `main`: EGA-1 against its baseline in a head-to-head section (improvement, gap, where tau ends);
  `long`: the best val loss beside the final one where runs overfit
- `ablation`: the paper's gates ranked, EGA-1 best, each paper row's own claim
- `tau_init`, `frozen_tau`, `context`: where tau ends by initialisation, a tau never trained, the block size
- `leak`: z over the whole window, as trained and evaluated causally
- `reruns`: runs repeated for their checkpoints (no verdict)
- `peers`: other papers' gates, each for its own claim
- `leaderboard`: every gate side by side and the positive control
- `landscape`: the tail identity and the tau mechanism, from the evaluated checkpoints
- `cost`: the gate's step time, from `ega bench`

A claim is added in `paper` (its text and figure) and in the study that measures it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ega_lightning.experiments.comparisons import Table, Variant
from ega_lightning.experiments.findings import Finding, correct
from ega_lightning.experiments.landscape_results import Evaluation
from ega_lightning.experiments.studies import (
    ablation,
    context,
    frozen_tau,
    landscape,
    leaderboard,
    leak,
    main,
    peers,
    reruns,
    tau_init,
)


def findings(
    tables: list[Table],
    variants: list[Variant],
    evaluations: Sequence[Evaluation] = (),
    board: leaderboard.Board | None = None,
) -> list[Finding]:
    """Every finding, section by section; a comparison shared by sections (``also_in``) is made once.
    ``board``: the leaderboard of ``variants`` when the caller has built it for its own table.
    ``evaluations``: the checkpoints `ega landscape` evaluated (the leak audit's causal evaluation,
    the heads beside the tail identity, the tau mechanism). Families are corrected (`findings.correct`)
    before the tau mechanism reads the frozen-tau verdicts."""
    out: list[Finding] = []
    said: set[tuple[str, ...]] = set()
    for table in tables:
        for row in main.primary_rows(table):
            assert row.baseline is not None
            compared = tuple(sorted(r.run.run_name for r in [*row.variant.done, *row.baseline.done]))
            if compared not in said:
                said.add(compared)
                out += main.findings(table, row)
        out += ablation.findings(table, variants) + tau_init.findings(table) + context.findings(table)
        out += frozen_tau.findings(table, variants) + leak.findings(table, variants, evaluations)
        out += reruns.findings(table, variants) + peers.findings(table)
    out += leaderboard.control_finding(*(board if board is not None else leaderboard.leaderboard(variants)))
    out = correct(out + landscape.tail_findings(tables, variants, evaluations))
    return out + landscape.mechanism_finding(out, evaluations, variants)
