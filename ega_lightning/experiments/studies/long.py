"""The long study: a head-to-head trained long enough to overfit (configs/sweeps/long.yaml). Past its best
the final val loss measures overfitting as well, so the best val loss is given beside the final one; the
head-to-head's other findings are `main`'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ega_lightning.experiments.comparisons import Row
from ega_lightning.experiments.findings import Finding, Where
from ega_lightning.experiments.text import fmt_interval, how


@dataclass(frozen=True, kw_only=True)
class BestValLoss(Finding):
    """EGA-1 − baseline on each run's lowest val loss; no verdict reads it."""

    kind: ClassVar[str] = "best_val_loss"

    def measured(self) -> str:
        d = self.interval
        return (
            f"Best val loss (each run's lowest; the val loss rose after it in some runs), {self.subject} vs "
            f"{self.against}: Δ {fmt_interval(d)} ({how(d)})."
        )


def best_val_loss(where: Where, row: Row) -> list[Finding]:
    """The best val loss beside the final one, where some run of the head-to-head rose past its best."""
    assert row.baseline is not None
    best = row.diffs["best_val_loss"]
    compared = [*row.variant.done, *row.baseline.done]
    if best is None or not any(r.metrics["best_val_loss"] < r.metrics["final_val_loss"] for r in compared):
        return []
    return [BestValLoss(**where._asdict(), ours=best)]
