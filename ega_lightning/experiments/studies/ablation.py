"""The ablation study: the paper's gates ranked by final val loss, whether EGA-1 is the best of them, and each
paper row against the row the paper sets it against (worse than EGA-1, or about the baseline)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

from ega_lightning.experiments import paper, prose
from ega_lightning.experiments.comparisons import Table, Variant, difference, gate_is, reference, rerun_of
from ega_lightning.experiments.findings import Finding, Where, code_of, judged, label, measured_with, name, pair
from ega_lightning.experiments.rules import margin_of
from ega_lightning.experiments.stats import LEVEL, widen
from ega_lightning.experiments.study import Study
from ega_lightning.experiments.text import interval_text, num


@dataclass(frozen=True, kw_only=True)
class Ranking(Finding):
    """Every gate of the ablation (and the rows it borrows) by mean final val loss, lowest first."""

    kind: ClassVar[str] = "ablation_ranking"
    ranking: list[tuple[str, str, float | None]]  # (name, group, mean final val loss)


@prose.measured.register
def say_ranking(f: Ranking) -> str:
    ranking = ", ".join(f"{n}{'' if group == f.section else f' ({group})'} {num(mean)}" for n, group, mean in f.ranking)
    return f"Ranking by final val loss, lowest first: {ranking}."


@dataclass(frozen=True, kw_only=True)
class Best(Finding):
    """Whether EGA-1 is the best of the paper's rows (rules.best_rule over every other paper gate − EGA-1)."""

    kind: ClassVar[str] = "ablation_best"
    measures: ClassVar[tuple[str, ...]] = ("ablation:best",)
    rank: int  # EGA-1's place among the paper's rows by mean final val loss (seed counts differ: not the verdict's)
    paper_rows: int
    others: list[str]  # the paper gates it reads against EGA-1, in the order of its ``reads``
    beating: list[str] | None = None  # `beaten_by`, once its family is read (`family_read`)

    def beaten_by(self) -> list[str]:
        """The gates better than EGA-1 by more than the loss margin, each at the family's level (`rules.best_rule`)."""
        level = self.family_level if self.family_level is not None else LEVEL
        wide = [widen(d, level) for _, d in self.reads]
        return [
            g
            for g, d in zip(self.others, wide, strict=True)
            if d is not None and d.high is not None and d.high < -margin_of("loss")
        ]

    def family_read(self) -> Best:
        return dataclasses.replace(self, beating=self.beaten_by())


@prose.ours_cell.register
def best_cell(f: Best) -> str:
    """What the verdict rests on, in words: the gates that beat EGA-1, paired seed by seed."""
    beaten, m = f.beaten_by(), margin_of("loss")
    if beaten:
        names = " and ".join([", ".join(beaten[:-1]), beaten[-1]] if len(beaten) > 1 else beaten)
        return f"{names} beat{'s' if len(beaten) == 1 else ''} it by more than {m} (paired, family level)"
    return f"no paper gate beats it by more than {m} (paired, family level)"


@prose.measured.register
def say_best(f: Best) -> str:
    return f"EGA-1 best of the paper's gates: {best_cell(f)}{prose.verdict_text(f)}."


@dataclass(frozen=True, kw_only=True)
class Pair(Finding):
    """One paper row against the row the paper sets it against: worse than EGA-1, or about the baseline."""

    kind: ClassVar[str] = "ablation_pair"
    measures: ClassVar[tuple[str, ...]] = tuple(f"ablation:{row}" for row in paper.ABLATION)


@prose.measured.register
def say_pair(f: Pair) -> str:
    claim = paper.CLAIM[f.claim or ""].text if f.claim in paper.CLAIM else f.subject
    return f"{claim}: {f.against} − {f.subject} {interval_text(f.interval)}{prose.verdict_text(f)}."


prose.claim_subject.register(Pair, label)  # its claim names no comparison: the row says which


def findings(table: Table, variants: list[Variant]) -> list[Finding]:
    """The ranking, EGA-1 best, and each paper row's own claim, for a section of the ablation's groups (`GROUPS`:
    the report hands it no other, so it does not look for paper rows to know it applies)."""
    done = [r.variant for r in table.rows if r.variant.done and rerun_of(r.variant, variants) is None]
    if not done:  # nothing finished yet: nothing to rank
        return []
    # the baseline and EGA-1 the ablation is measured against may live in another group (e.g. main)
    refs = [reference(v, variants, gate_is(gate)) for v in done for gate in ("none", "linear") if v.gate != gate]
    pool = list({id(v): v for v in [*done, *(r for r in refs if r is not None)]}.values())
    mean = {id(v): v.summary("final_val_loss").mean for v in pool}
    ranked = sorted(pool, key=lambda v: mean[id(v)] if mean[id(v)] is not None else math.inf)
    ega1 = next((v for v in ranked if v.gate == "linear" and v.paper_name), None)
    where = Where(table.group, table.corpus, measured_with(ega1 or done[0]), "", None)
    ranking = [(name(v), v.group, mean[id(v)]) for v in ranked]
    out: list[Finding] = [Ranking(**where._asdict(), ranking=ranking)]
    if ega1 is not None:
        others = [v for v in ranked if v.paper_name and v is not ega1 and v.gated]
        reads = [(pair(v, ega1), difference(v, ega1, "final_val_loss")) for v in others]
        in_paper = [v for v in ranked if v.paper_name]
        code = code_of(*in_paper, compared=[(v, ega1) for v in others])
        rank = {"rank": in_paper.index(ega1) + 1, "paper_rows": len(in_paper), "code": code}
        rank["others"] = [v.paper_name or v.label for v in others]
        # measured with every gate it reads, not EGA-1's runs alone (EGA-4 has more parameters)
        best = where._replace(subject=name(ega1), regime=measured_with(ega1, *others))
        out.append(judged(Best, best, reads, claim="ablation:best", family="ablation", **rank))
    return out + [_pair(table, v, variants) for v in ranked if v.paper_name in paper.ABLATION]


def _pair(table: Table, v: Variant, variants: list[Variant]) -> Finding:
    _, against = paper.ABLATION[v.paper_name or ""]
    ref = reference(v, variants, gate_is(against))
    where = Where(table.group, table.corpus, measured_with(v, ref), name(v), name(ref) if ref else against)
    reads = [(pair(v, ref or against), difference(ref, v, "final_val_loss"))]
    claim = f"ablation:{v.paper_name}"
    return judged(Pair, where, reads, claim=claim, family="ablation", code=code_of(v, ref))


GROUPS = ("ablation",)  # the spec groups whose tables it is handed: the paper's gate ranking
STUDY = Study("ablation", groups=GROUPS, table_findings=lambda table, inputs: findings(table, list(inputs.variants)))
