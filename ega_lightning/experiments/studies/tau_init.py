"""The tau_init study: does tau converge regardless of its initialisation? Final tau and loss by tau_init on
the seeds every initialisation ran, each initialisation paired by seed with the default one, and per seed
the slope of final tau on tau_init (rules.forgets_rule)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import ClassVar

from ega_lightning.experiments import paper, prose
from ega_lightning.experiments.comparisons import Table, Variant, difference, reference
from ega_lightning.experiments.findings import Finding, Where, code_of, judged, measured_with, name
from ega_lightning.experiments.stats import Difference, Summary, mean_interval, summarize
from ega_lightning.experiments.study import Study
from ega_lightning.experiments.text import fmt_summary, interval_text, seed_list

DEFAULT_TAU_INIT = 0.0  # CharLM's default: the learned-tau EGA-1 every other initialisation is paired with


@dataclass(frozen=True, kw_only=True)
class TauInit(Finding):
    """Where tau ends from each initialisation; its verdict (where every tau was learned) reads the slope."""

    kind: ClassVar[str] = "tau_init"
    measures: ClassVar[tuple[str, ...]] = ("tau_init",)
    interval_format: ClassVar[tuple[float, int, bool]] = (1.0, 3, False)
    cell_words: ClassVar[tuple[str, str]] = ("slope of final tau on tau_init ", "")
    seeds: list[int]  # the seeds every initialisation ran
    taus: list[tuple[float, str, Summary]]  # (tau_init, variant, final tau over those seeds)
    tau_span: float | None  # of the final means
    init_span: float
    losses: list[tuple[float, Summary]]  # (tau_init, final val loss over those seeds)
    loss_span: float | None
    paired: list[tuple[float, Difference | None]]  # (tau_init, default tau_init − it, paired by seed)
    reference: float | None  # the default tau_init, where it ran
    scatter: tuple[float, Summary] | None  # the seed-to-seed std of the initialisation with most seeds
    slopes: dict[int, float]  # seed -> least-squares slope of final tau on tau_init


@prose.measured.register
def say_tau_init(f: TauInit) -> str:
    """Final tau by initialisation, then the final val loss (its spread against the seeds' own), then the slope."""
    if not f.seeds:
        return "Final tau and loss by initialisation: no seed ran every initialisation, so no like-for-like view."
    taus = "; ".join(f"tau_init {init} → {fmt_summary(s)}" for init, _, s in f.taus)
    text = f"Final tau by initialisation ({seed_list(f.seeds)}, which every initialisation ran): {taus}"
    if f.tau_span is not None:
        text += f"; the final means span {f.tau_span:.3f} (paper ≈ {paper.TAU} regardless)"
    losses = "; ".join(f"tau_init {init} {fmt_summary(s)}" for init, s in f.losses)
    text += f". Final val loss by initialisation: {losses}"
    if f.loss_span is not None:
        text += f"; the means span {f.loss_span:.3f}"
        if f.scatter is not None:
            init, s = f.scatter
            ratio = f.loss_span / (s.std or math.nan)
            text += f", {ratio:.1f}× the seed-to-seed std of tau_init {init} ({s.std:.3f} over {s.n} seeds)"
    if f.paired:
        pairs = "; ".join(f"tau_init {init} {interval_text(d)}" for init, d in f.paired)
        text += f". Paired by seed with tau_init {f.reference}, its loss − each: {pairs}"
    if f.interval is not None:
        slopes = ", ".join(f"seed {s} {v:.3f}" for s, v in f.slopes.items())
        text += (
            f". Slope of final tau on tau_init, per seed ({slopes}): {interval_text(f.interval, signed=False)}; "
            f"tau converges regardless of its initialisation{prose.verdict_text(f)}"
        )
    return text + "."


@prose.claim_subject.register
def tau_init_subject(f: TauInit) -> str:
    return f"EGA-1 from tau_init {', '.join(str(init) for init, _, _ in f.taus)}"


def _slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of ys on xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / math.fsum((x - mx) ** 2 for x in xs)


def findings(table: Table) -> list[Finding]:
    """Final tau and loss by tau_init on the seeds every initialisation ran (a one-seed row beside a
    3-seed mean would put seed noise into the spread), and each initialisation paired by seed with
    the default tau_init's run. Where every tau was learned, whether tau forgets where it started
    (rules.PROSE['forgets']): per seed, the slope of final tau on tau_init."""
    gated = [r.variant for r in table.rows if r.variant.gated and r.variant.done]
    if len({v.hp("tau_init") for v in gated}) < 2:
        return []
    seeds = set.intersection(*(set(v.by_seed("final_val_loss")) for v in gated))
    inits = [float(v.hp("tau_init")) for v in gated]
    slopes = {
        s: _slope(inits, [v.by_seed("final_tau_mean")[s] for v in gated])
        for s in sorted(seeds)
        if all(s in v.by_seed("final_tau_mean") for v in gated)
    }
    measured = {**_by_initialisation(gated, seeds), "init_span": max(inits) - min(inits), "slopes": slopes}
    measured |= {"paper": paper.TAU, "code": code_of(*gated)}
    where = Where(table.group, table.corpus, measured_with(gated[0], *gated), "EGA-1", None)
    if not all(v.as_in_paper for v in gated) or not slopes:  # a frozen tau cannot forget anything
        return [TauInit(**where._asdict(), **measured)]
    reads = [(f"tau_init slope: {table.group}", mean_interval(list(slopes.values())))]
    return [judged(TauInit, where, reads, claim="tau_init", family="tau_init", **measured)]


def _by_initialisation(gated: list[Variant], seeds: set[int]) -> dict[str, object]:
    """Final tau and loss of each initialisation over ``seeds``, their spans, the pairs with the default."""
    metric = "final_val_loss"

    def shared(v: Variant, key: str) -> Summary:
        return summarize([x for s, x in v.by_seed(key).items() if s in seeds])

    taus = [(v.hp("tau_init"), name(v), shared(v, "final_tau_mean")) for v in gated]
    losses = [(v.hp("tau_init"), shared(v, metric)) for v in gated]
    finals = [s.mean for _, _, s in taus if s.mean is not None]
    loss_means = [s.mean for _, s in losses if s.mean is not None]
    # the study's named reference (`comparisons.reference`): the same gate at the default tau_init
    default = next((v for v in gated if v.hp("tau_init") == DEFAULT_TAU_INIT), None)
    paired = [
        (v.hp("tau_init"), difference(reference(v, gated, lambda x: x is default), v, metric))
        for v in gated
        if default and v is not default
    ]
    # the only yardstick while the rows share one seed: how far the seeds of one initialisation scatter
    init, scatter = max(((v.hp("tau_init"), v.summary(metric)) for v in gated), key=lambda pair: pair[1].n)
    return {
        "seeds": sorted(seeds),
        "taus": taus,
        "tau_span": max(finals) - min(finals) if finals else None,
        "losses": losses,
        "loss_span": max(loss_means) - min(loss_means) if len(loss_means) > 1 else None,
        "paired": paired,
        "reference": default.hp("tau_init") if default else None,
        "scatter": (init, scatter) if scatter.std else None,
    }


GROUPS = ("tau_init", "frozen_tau")  # the spec groups whose tables it is handed: EGA-1 from several tau_init
STUDY = Study("tau_init", groups=GROUPS, table_findings=lambda table, inputs: findings(table))
