"""Reruns kept for their checkpoints (the landscape study's runs, a baseline repeated in a section of its own):
what each repeats, and whether its final val loss came out bit for bit the same. No verdict reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ega_lightning.experiments import prose
from ega_lightning.experiments.comparisons import Table, Variant, rerun_of
from ega_lightning.experiments.findings import Finding, Where, code_of, measured_with, name
from ega_lightning.experiments.study import Study
from ega_lightning.experiments.text import seed_list


@dataclass(frozen=True, kw_only=True)
class Rerun(Finding):
    """A variant that repeats another run for run (``against``: the original)."""

    kind: ClassVar[str] = "rerun"
    original_group: str
    seeds: list[int]
    identical: bool  # every seed's final val loss equals the original's
    largest_difference: float


@prose.measured.register
def say_rerun(f: Rerun) -> str:
    same = (
        "bit for bit the same final val loss"
        if f.identical
        else f"final val loss differs by up to {f.largest_difference:.2e}"
    )
    return (
        f"{f.subject} reruns {f.against} (group {f.original_group}) at {seed_list(f.seeds)} with the same "
        f"configuration, kept for its checkpoints: {same}. Evidence for nothing its original does not give: no "
        "verdict reads it."
    )


def findings(table: Table, variants: list[Variant]) -> list[Finding]:
    """A rerun row says what it repeats and whether its final val loss came out bit for bit the same."""
    out: list[Finding] = []
    for v in (r.variant for r in table.rows):
        original = rerun_of(v, variants) if v.done else None
        if original is None:
            continue
        ours, theirs = v.by_seed("final_val_loss"), original.by_seed("final_val_loss")
        where = Where(table.group, table.corpus, measured_with(v), name(v), name(original))
        out.append(
            Rerun(
                **where._asdict(),
                original_group=original.group,
                seeds=sorted(ours),
                identical=all(ours[s] == theirs.get(s) for s in ours),
                largest_difference=max(abs(ours[s] - theirs[s]) for s in ours if s in theirs),
                code=code_of(v, original),
            )
        )
    return out


GROUPS = ("landscape",)  # the spec groups whose tables it is handed: runs repeated for `ega landscape`
STUDY = Study("reruns", groups=GROUPS, table_findings=lambda table, inputs: findings(table, list(inputs.variants)))
