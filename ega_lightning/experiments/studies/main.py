"""The head-to-head study: EGA-1 against its baseline in a section of its own (main on each corpus, and long
at another budget): the paper's improvement, its narrower generalization gap, where tau ends and the share
of keys above it. Where a run trained long enough to overfit (configs/sweeps/long.yaml), the final val loss
measures overfitting as well, so the best val loss is given beside it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ega_lightning.experiments import paper, prose
from ega_lightning.experiments.comparisons import Row, Table, Variant
from ega_lightning.experiments.findings import Code, Finding, Where, code_of, judged, measured_with, name, pair
from ega_lightning.experiments.rules import LEVEL_MARGIN, Verdict, margin_of
from ega_lightning.experiments.stats import mean_interval
from ega_lightning.experiments.study import ReportInputs, Study
from ega_lightning.experiments.text import fmt_interval, how, interval_text, num


@dataclass(frozen=True, kw_only=True)
class Improvement(Finding):
    """Baseline − EGA-1 on the final val loss, against the paper's figure for the corpus (where it has one)."""

    kind: ClassVar[str] = "improvement"
    measures: ClassVar[tuple[str, ...]] = tuple(f"improvement:{corpus}" for corpus in paper.IMPROVEMENT)
    loss: float | None  # EGA-1's mean final val loss
    baseline_loss: float | None


@prose.measured.register
def say_improvement(f: Improvement) -> str:
    d = f.interval
    text = f"{f.subject} vs {f.against}: final val loss {num(f.loss)} vs {num(f.baseline_loss)}, Δ {interval_text(d)}"
    if f.paper is not None and d is not None:
        text += f"; paper {f.paper:+.3f}, of which this is {100 * d.estimate / f.paper:.0f}%"
    return text + prose.verdict_text(f) + "."


@dataclass(frozen=True, kw_only=True)
class Gap(Finding):
    """Baseline − EGA-1 on the generalization gap, against the paper's reduction."""

    kind: ClassVar[str] = "gap"
    measures: ClassVar[tuple[str, ...]] = ("gap",)
    baseline_gap: float | None
    gap: float | None
    paper_regime: bool | None  # the baseline's gap passes the paper's overfitting line (None: not logged)

    def size_regime(self) -> bool:
        """The paper's reduction is a claim about its overfitting regime: its size is read only there."""
        return self.paper_regime is not False


@prose.measured.register
def say_gap(f: Gap) -> str:
    overfits = f.paper_regime
    where = (
        "no baseline gap logged"
        if overfits is None
        else f"the baseline's gap {num(f.baseline_gap)} "
        + ("passes" if overfits else "stays below")
        + f" {paper.OVERFIT_GAP}: {'' if overfits else 'not '}the paper's overfitting regime"
    )
    return (
        f"Generalization gap (val − train loss), baseline − EGA-1: {interval_text(f.interval)}; paper "
        f"{paper.GAP['none']} − {paper.GAP['linear']} = {paper.GAP_REDUCTION:+.3f}; {where}{prose.verdict_text(f)}."
    )


@prose.regime_text.register
def gap_regime(f: Gap) -> str:
    return (
        f" (the baseline's gap {num(f.baseline_gap)} stays below the paper's overfitting line "
        f"{paper.OVERFIT_GAP}; its baseline's was {paper.GAP['none']})"
    )


@dataclass(frozen=True, kw_only=True)
class Tau(Finding):
    """Where EGA-1's tau ends, over seeds, against the paper's level."""

    kind: ClassVar[str] = "tau"
    measures: ClassVar[tuple[str, ...]] = ("tau",)
    interval_format: ClassVar[tuple[float, int, bool]] = (1.0, 3, False)
    settled: int  # seeds whose TauTracker saw tau settle
    tracked: int  # seeds with a TauTracker verdict


@prose.measured.register
def say_tau(f: Tau) -> str:
    extra = f"; TauTracker saw it settle in {f.settled} of {f.tracked} seeds" if f.tracked else ""
    ours = interval_text(f.interval, signed=False)
    return f"Final tau of {f.subject}: {ours}; paper ≈ {paper.TAU}{extra}{prose.verdict_text(f)}."


@dataclass(frozen=True, kw_only=True)
class FracAboveTau(Finding):
    """The share of validation keys above tau at the end, over seeds, against the paper's level."""

    kind: ClassVar[str] = "frac_above_tau"
    measures: ClassVar[tuple[str, ...]] = ("frac_above_tau",)
    interval_format: ClassVar[tuple[float, int, bool]] = (100.0, 1, False)
    cell_words: ClassVar[tuple[str, str]] = ("", "%")


@prose.measured.register
def say_frac_above_tau(f: FracAboveTau) -> str:
    d = f.interval
    return (
        f"Validation keys above tau: {fmt_interval(d, signed=False, scale=100, digits=1)}% ({how(d)}); "
        f"paper {100 * paper.FRAC_ABOVE_TAU:.0f}%{prose.verdict_text(f)}."
    )


@dataclass(frozen=True, kw_only=True)
class BestValLoss(Finding):
    """EGA-1 − baseline on each run's lowest val loss; no verdict reads it."""

    kind: ClassVar[str] = "best_val_loss"


@prose.measured.register
def say_best_val_loss(f: BestValLoss) -> str:
    return (
        f"Best val loss (each run's lowest; the val loss rose after it in some runs), {f.subject} vs "
        f"{f.against}: Δ {interval_text(f.interval)}."
    )


def primary_rows(table: Table) -> list[Row]:
    """EGA-1 against its baseline where a section of `GROUPS` is a head-to-head: one EGA-1 row, its baseline in
    the section itself (a row borrowing its baseline from another section tests something else)."""
    linear = [r for r in table.rows if r.variant.gate == "linear" and r.variant.done]
    if len(linear) != 1 or linear[0].baseline is None or linear[0].baseline.group != table.group:
        return []
    return linear


def findings(table: Table, row: Row) -> list[Finding]:
    """The head-to-head of one primary row: the improvement, the best val loss where runs overfit
    (`long`), the gap, and the two levels of EGA-1's tau."""
    v, base = row.variant, row.baseline
    assert base is not None
    where = Where(table.group, table.corpus, measured_with(v, base), name(v), f"baseline `{base.label}`")
    code = code_of(v, base)
    d = row.diffs["final_val_loss"]
    figure = paper.IMPROVEMENT.get(table.corpus)
    means = {"loss": v.summary("final_val_loss").mean, "baseline_loss": base.summary("final_val_loss").mean}
    if leak := non_causal(v, base):  # its val loss reads later characters: no verdict on the paper's claim
        claimed = {"paper": figure, "claim": f"improvement:{table.corpus}"} if figure is not None else {}
        common = {**claimed, "code": code, "verdict": Verdict.NOT_TESTABLE, "not_testable": leak}
        gap = (
            [
                Gap(
                    **where._asdict(),
                    ours=row.diffs["final_gap"],
                    paper=paper.GAP_REDUCTION,
                    claim="gap",
                    code=code,
                    verdict=Verdict.NOT_TESTABLE,
                    not_testable=leak,
                    baseline_gap=None,
                    gap=None,
                    paper_regime=None,
                )
            ]
            if row.diffs["final_gap"] is not None
            else []
        )
        return [Improvement(**where._asdict(), ours=d, **common, **means), *gap]
    if figure is not None:
        claim = f"improvement:{table.corpus}"
        out: list[Finding] = [
            judged(Improvement, where, [(pair(v, base), d)], paper=figure, claim=claim, code=code, **means)
        ]
    else:
        out = [Improvement(**where._asdict(), ours=d, code=code, **means)]
    return out + _best_val_loss(where, row) + _gap(where, row, code) + _levels(where, v)


def non_causal(*sides: Variant) -> str | None:
    """Why the head-to-head of ``sides`` tests no claim of the paper, where a side's evaluation is not causal (z over
    the whole window: ``--model.eval_znorm=window`` in a `main` entry, or a gate trained so); None where both are."""
    leaky = [s for s in sides if not s.causal_evaluation]
    if not leaky:
        return None
    return (
        f"{', '.join(f'`{s.label}`' for s in leaky)} evaluated z over the whole window (model.eval_znorm or the "
        "gate's znorm: window), a non-causal evaluation whose gate reads later characters: its val loss is no causal "
        "loss, and the paper's claim is about one"
    )


def _best_val_loss(where: Where, row: Row) -> list[Finding]:
    """The best val loss beside the final one, where some run of the head-to-head rose past its best."""
    assert row.baseline is not None
    best = row.diffs["best_val_loss"]
    compared = [*row.variant.done, *row.baseline.done]
    if best is None or not any(r.metrics["best_val_loss"] < r.metrics["final_val_loss"] for r in compared):
        return []
    return [BestValLoss(**where._asdict(), ours=best)]


def _gap(where: Where, row: Row, code: Code) -> list[Finding]:
    v, base = row.variant, row.baseline
    gap = row.diffs["final_gap"]
    if gap is None or base is None:
        return []
    base_gap = base.summary("final_gap").mean
    overfits = None if base_gap is None else base_gap >= paper.OVERFIT_GAP
    measured = {"baseline_gap": base_gap, "gap": v.summary("final_gap").mean, "paper_regime": overfits}
    if base_gap is not None and base_gap < paper.GAP_REDUCTION:
        why = (
            f"the baseline's own gap {num(base_gap)} is smaller than the paper's reduction "
            f"{paper.GAP_REDUCTION:+.3f}: no gate can narrow it by that much"
        )
        common = {"paper": paper.GAP_REDUCTION, "claim": "gap", "code": code, **measured}
        return [Gap(**where._asdict(), ours=gap, verdict=Verdict.NOT_TESTABLE, not_testable=why, **common)]
    reads = [(f"gap: {pair(v, base)}", gap)]
    return [judged(Gap, where, reads, paper=paper.GAP_REDUCTION, claim="gap", code=code, **measured)]


def _levels(where: Where, v: Variant) -> list[Finding]:
    """Where tau ends and the share of keys above it, each against the paper's level (rules.level_rule)."""
    own = where._replace(subject=name(v), against=None)
    tracked = [r.metrics["tau_converged"] for r in v.done if r.metrics.get("tau_converged") is not None]
    out: list[Finding] = []
    for cls, metric, claim, figure, extra in (
        (Tau, "final_tau_mean", "tau", paper.TAU, {"settled": sum(tracked), "tracked": len(tracked)}),
        (FracAboveTau, "final_frac_above_tau", "frac_above_tau", paper.FRAC_ABOVE_TAU, {}),
    ):
        if values := list(v.by_seed(metric).values()):
            level = {"figure": figure, "width": margin_of(LEVEL_MARGIN[claim])}
            reads = [(f"{claim}: {v.group}/{v.label}", mean_interval(values))]
            out.append(judged(cls, own, reads, rule_args=level, paper=figure, claim=claim, code=code_of(v), **extra))
    return out


def _compared(row: Row) -> tuple[str, ...]:
    """The runs a head-to-head compares: a comparison shared by sections (``also_in``) is made once."""
    assert row.baseline is not None
    return tuple(sorted(r.run.run_name for r in [*row.variant.done, *row.baseline.done]))


def table_findings(table: Table, inputs: ReportInputs) -> list[Finding]:
    """The head-to-head of each primary row of ``table`` that no earlier table of its groups compared already."""
    tables = inputs.tables_of(GROUPS)
    index = next((i for i, t in enumerate(tables) if t is table), len(tables))
    said = {_compared(r) for t in tables[:index] for r in primary_rows(t)}
    out: list[Finding] = []
    for row in primary_rows(table):
        if _compared(row) not in said:
            said.add(_compared(row))
            out += findings(table, row)
    return out


GROUPS = ("main", "long")  # the spec groups whose tables it is handed: head-to-heads, EGA-1 and its baseline
STUDY = Study("main", groups=GROUPS, table_findings=table_findings)
