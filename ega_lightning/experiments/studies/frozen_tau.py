"""The frozen-tau study: EGA-1 with tau held at its initial value, never trained, against EGA-1 that learns
tau from the same tau_init (learned − frozen, paired by seed): does training tau change the loss?"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ega_lightning.experiments import prose
from ega_lightning.experiments.comparisons import Table, Variant, difference, learned, reference
from ega_lightning.experiments.findings import Finding, Where, code_of, judged, measured_with, name, pair
from ega_lightning.experiments.study import Study
from ega_lightning.experiments.text import interval_text, num


@dataclass(frozen=True, kw_only=True)
class FrozenTau(Finding):
    """Learned − frozen tau on the final val loss (rules.frozen_rule)."""

    kind: ClassVar[str] = "frozen_tau"
    measures: ClassVar[tuple[str, ...]] = ("tau",)
    tau_init: float | None  # where tau is held
    frozen_loss: float | None  # mean final val loss of the frozen runs
    learned_loss: float | None
    learned_tau: float | None  # where the learned tau ended


@prose.measured.register
def say_frozen_tau(f: FrozenTau) -> str:
    return (
        f"{f.subject} (tau held at its tau_init {f.tau_init}, never trained) vs {f.against}: "
        f"learned − frozen {interval_text(f.interval)}; final val loss {num(f.frozen_loss)} frozen, "
        f"{num(f.learned_loss)} learned, whose tau ended at {num(f.learned_tau)}{prose.verdict_text(f)}."
    )


@prose.claim_subject.register
def frozen_tau_subject(f: FrozenTau) -> str:
    return f"{f.subject}, never trained, vs {f.against}: learned − frozen"


def findings(table: Table, variants: list[Variant]) -> list[Finding]:
    """Each frozen-tau variant of the section against its learned reference (`comparisons.learned`)."""
    out: list[Finding] = []
    for v in (r.variant for r in table.rows):
        if not v.done or v.options.get("learn_tau", True):
            continue
        ref = reference(v, variants, learned(v))
        measured = {
            "tau_init": v.hp("tau_init"),
            "frozen_loss": v.summary("final_val_loss").mean,
            "learned_loss": ref.summary("final_val_loss").mean if ref else None,
            "learned_tau": ref.summary("final_tau_mean").mean if ref else None,
        }
        against = name(ref) if ref else "learned tau (no finished run)"
        where = Where(table.group, table.corpus, measured_with(v, ref), name(v), against)
        reads = [(pair(v, ref or against), difference(ref, v, "final_val_loss"))]
        family = {"claim": "tau", "family": "frozen", "code": code_of(v, ref)}
        out.append(judged(FrozenTau, where, reads, **family, **measured))
    return out


GROUPS = ("frozen_tau",)  # the spec groups whose tables it is handed: a tau never trained
STUDY = Study("frozen_tau", groups=GROUPS, table_findings=lambda table, inputs: findings(table, list(inputs.variants)))
