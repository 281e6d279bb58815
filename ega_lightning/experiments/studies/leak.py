"""The leak audit: EGA-1 with z normalised over the whole window (each key's gate reads a little of the
future) against the paper's figure as trained; the leak's own increment over causal EGA-1; and, as a
diagnostic, the same final checkpoints evaluated with the causal prefix z (`ega landscape`)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ega_lightning.experiments import paper, prose
from ega_lightning.experiments.comparisons import Row, Table, Variant, difference, learned, reference
from ega_lightning.experiments.findings import DIAGNOSTICS, Finding, Where, code_of, judged, measured_with, name, pair
from ega_lightning.experiments.landscape_results import Evaluation
from ega_lightning.experiments.stats import Difference, compare
from ega_lightning.experiments.study import Study
from ega_lightning.experiments.text import interval_text, num, seed_list


@dataclass(frozen=True, kw_only=True)
class Leak(Finding):
    """Baseline − the whole-window gate, as trained, against the paper's figure; causal EGA-1's Δ beside it."""

    kind: ClassVar[str] = "leak"
    measures: ClassVar[tuple[str, ...]] = tuple(f"improvement:{corpus}" for corpus in paper.IMPROVEMENT)
    causal: Difference | None  # baseline − causal EGA-1
    causal_subject: str | None


@prose.measured.register
def say_leak(f: Leak) -> str:
    text = (
        f"Leak audit: {f.subject} (z from the whole window's mean and variance, so each key's gate reads "
        f"later characters) vs {f.against}, as trained: Δ {interval_text(f.interval)}; paper {num(f.paper, 3, True)}"
    )
    if f.causal is not None:
        text += f"; causal {f.causal_subject}: Δ {interval_text(f.causal)}"
    return text + prose.verdict_text(f) + "."


@prose.claim_subject.register
def leak_subject(f: Leak) -> str:
    return f"leak audit: {f.subject}, z over the whole window, as trained"


@dataclass(frozen=True, kw_only=True)
class LeakIncrement(Finding):
    """Causal EGA-1 − the whole-window gate, paired by seed: the leak's own share of Δ (read by the family)."""

    kind: ClassVar[str] = "leak_increment"


@prose.measured.register
def say_leak_increment(f: LeakIncrement) -> str:
    return (
        f"The leak's own increment, {f.subject} against causal {f.against} (Δ as trained − causal Δ, "
        f"per seed): {interval_text(f.interval)}."
    )


@dataclass(frozen=True, kw_only=True)
class LeakCausal(Finding):
    """Baseline − the whole-window gate's final checkpoints evaluated with the causal prefix z: a diagnostic."""

    kind: ClassVar[str] = "leak_causal"
    seeds: list[int]  # the seeds evaluated
    above_causal: float | None  # share of keys above tau, evaluated causally
    above_trained: float | None  # as trained
    normal_tail: float | None  # 1 − Φ(tau), as trained
    trained_as: str


@prose.measured.register
def say_leak_causal(f: LeakCausal) -> str:
    d = f.interval
    if d is None:
        return (
            f"{f.subject}'s checkpoints evaluated with the causal prefix z: not evaluated yet "
            "(`ega landscape --eval_znorm prefix --max_eval_windows 0 --ckpt_path <run>/checkpoints/last.ckpt "
            "--out results/landscape/<run>-prefix.json`)."
        )
    text = (
        f"{f.subject}'s final checkpoints (trained with z over the whole window) evaluated with the causal "
        f"prefix z (`ega landscape --eval_znorm prefix`, whole validation split, {seed_list(f.seeds)}) vs "
        f"{f.against}: Δ {interval_text(d)}. A train/test mismatch, not a measure of EGA"
    )
    if f.above_causal is not None and f.above_trained is not None and f.normal_tail is not None:
        text += (
            f": evaluated causally, {100 * f.above_causal:.0f}% of keys land above tau, against "
            f"{100 * f.above_trained:.0f}% as trained (1 − Φ(tau) = {100 * f.normal_tail:.0f}%), so the "
            "gates open where training never had them open"
        )
    return text + ". No verdict reads it, and its nearness in size to the paper's figure means nothing."


def findings(table: Table, variants: list[Variant], evaluations: Sequence[Evaluation]) -> list[Finding]:
    """For each whole-window variant of the section: the audit as trained, its increment over causal
    EGA-1 (where one ran), and the causal evaluation of its checkpoints."""
    out: list[Finding] = []
    for row in table.rows:
        v, base = row.variant, row.baseline
        if not v.done or base is None or v.options.get("znorm") != "window":
            continue
        causal = reference(v, variants, learned(v))
        where = Where(table.group, table.corpus, measured_with(v, base), name(v), f"baseline `{base.label}`")
        out.append(_as_trained(table, row, where, causal))
        if causal is not None:
            increment = difference(causal, v, "final_val_loss")  # (baseline − leak) − (baseline − causal), by seed
            against = Where(table.group, table.corpus, measured_with(v, causal), name(v), name(causal))
            reads = ((pair(v, causal), increment),)
            code = code_of(v, causal)
            out.append(LeakIncrement(**against._asdict(), ours=increment, family="leak", reads=reads, code=code))
        out.append(_causal_evaluation(where, v, base, evaluations))
    return out


def _as_trained(table: Table, row: Row, where: Where, causal: Variant | None) -> Finding:
    v, base = row.variant, row.baseline
    d = row.diffs["final_val_loss"]
    measured = {
        "causal": difference(base, causal, "final_val_loss") if causal else None,
        "causal_subject": name(causal) if causal else None,
        "code": code_of(v, base, causal, compared=[(v, base)]),
    }
    figure = paper.IMPROVEMENT.get(table.corpus)
    if figure is None:
        return Leak(**where._asdict(), ours=d, **measured)
    claim = f"improvement:{table.corpus}"
    return judged(Leak, where, [(pair(v, base), d)], paper=figure, claim=claim, family="leak", **measured)


def _causal_evaluation(where: Where, v: Variant, base: Variant, evaluations: Sequence[Evaluation]) -> Finding:
    """The leaky checkpoints evaluated with the causal prefix z (a diagnostic: no verdict reads it)."""
    seeds = {r.run.run_name: r.run.seed for r in v.done}
    prefix = [e for e in evaluations if e.run in seeds and e.final and e.eval_znorm == "prefix" and e.whole_split]
    trained = [e for e in evaluations if e.run in seeds and e.final and e.as_trained]
    evaluated = {seeds[e.run]: e.loss for e in prefix}
    baseline = base.by_seed("final_val_loss")

    def above(evals: list[Evaluation], key: str = "frac_above_tau") -> float | None:
        return statistics.fmean(e.mean(key) for e in evals) if evals else None

    return LeakCausal(
        **where._replace(section=DIAGNOSTICS)._asdict(),
        ours=compare(baseline, evaluated) if evaluated and baseline else None,
        paper=paper.IMPROVEMENT.get(where.corpus),
        seeds=sorted(evaluated),
        above_causal=above(prefix),
        above_trained=above(trained),
        normal_tail=above(trained, "normal_tail"),
        trained_as=name(v),
    )


GROUPS = ("leak",)  # the spec groups whose tables it is handed: z over the whole window
STUDY = Study(
    "leak",
    groups=GROUPS,
    table_findings=lambda table, inputs: findings(table, list(inputs.variants), inputs.evaluations),
)
