"""The head-to-head study: EGA-1 against its baseline in a section of its own (main on each corpus, and long at another
budget): the protocol's families improvement, gap and levels, read by `engine`. Where a run trained long enough to
overfit (configs/sweeps/long.yaml), the final val loss measures overfitting as well, so the best val loss is given
beside it."""

from __future__ import annotations

from ega_lightning.experiments import engine, protocol
from ega_lightning.experiments.comparisons import Table
from ega_lightning.experiments.findings import Finding, Where, measured_with, name
from ega_lightning.experiments.stats import compare
from ega_lightning.experiments.study import ReportInputs, Study


def best_val_loss(table: Table, inputs: ReportInputs) -> list[Finding]:
    """y − x on each run's lowest val loss, for each improvement comparison of ``table`` where some run of it rose
    past its best; no verdict reads it."""
    out: list[Finding] = []
    for c in protocol.current().comparisons["improvement"]:
        for x in (x for x in engine.variants_named(inputs, c.x, table.corpus) if x.group == table.group and x.done):
            y = next(iter(engine.variants_named(inputs, c.y or "", x.corpus)), None)
            runs = [*x.done, *(y.done if y is not None else [])]
            ref, own = (y.by_seed("best_val_loss") if y is not None else {}), x.by_seed("best_val_loss")
            if ref and own and any(r.metrics["best_val_loss"] < r.metrics["final_val_loss"] for r in runs):
                assert y is not None
                where = Where(x.group, x.corpus, measured_with(x, y), name(x), name(y))
                out.append(engine.Compared(kind="best_val_loss", **where._asdict(), ours=compare(ref, own)))
    return out


def table_findings(table: Table, inputs: ReportInputs) -> list[Finding]:
    """The improvement, the best val loss where runs overfit (`long`), the gap, and the two levels of EGA-1's tau."""
    found = {family: engine.family_findings(inputs, family, table) for family in ("improvement", "gap", "levels")}
    return [*found["improvement"], *best_val_loss(table, inputs), *found["gap"], *found["levels"]]


STUDY = Study("main", groups=("main", "long"), families=("improvement", "gap", "levels"), table_findings=table_findings)
