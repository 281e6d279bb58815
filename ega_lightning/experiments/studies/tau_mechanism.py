"""The tau mechanism study (named ``landscape``, its key of results.json), read from the checkpoints
`ega landscape` evaluated and from the gate summaries the runs recorded: is the share of keys above tau what a
standard normal z gives (the tail identity), and why does tau not move (weak gradient or co-adaptation)? With
the table of the evaluated checkpoints."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ega_lightning.experiments import paper, plots, prose
from ega_lightning.experiments.comparisons import Table, Variant, rerun_of
from ega_lightning.experiments.findings import Finding, Where, code_of, judged, measured_with, name, scale
from ega_lightning.experiments.landscape_results import Evaluation
from ega_lightning.experiments.rules import TAU_STEP, Verdict, margin_of, registered
from ega_lightning.experiments.stats import Difference, mean_interval
from ega_lightning.experiments.study import Drawn, Figure, ReportInputs, Study
from ega_lightning.experiments.text import fmt_interval, how, num

TAU_SECTION = "tau landscape"
DESCRIPTION = (
    "Read from `results/landscape/*.json`, written by `ega landscape` from checkpoints (which are not committed). "
    "Every loss is over the whole validation split unless the table says otherwise; costs are the loss "
    "minus the loss as trained, in nats/char."
)
# the spec groups whose tables the tail identity reads (`group:` / `also_in:` of configs/sweeps/*.yaml): the paper's
# gates (the ablation) and z over the whole window (the leak audit)
TAIL_GROUPS = ("ablation", "leak")
# the tau mechanism is read on EGA-1 and shown beside one wavelet gate (the report's figures use the same pair)
MECHANISM_GATES = ("linear", "db2")


@dataclass(frozen=True, kw_only=True)
class Tail(Finding):
    """Measured share of keys above tau − (1 − Φ(tau)), one value per seed (rules.tail_rule); the heads of
    the checkpoints `ega landscape` evaluated beside it, as a figure only."""

    kind: ClassVar[str] = "tail"
    measures: ClassVar[tuple[str, ...]] = ("frac_above_tau",)
    interval_format: ClassVar[tuple[float, int, bool]] = (100.0, 1, True)
    cell_words: ClassVar[tuple[str, str]] = ("measured − (1 − Φ(tau)) ", " points")
    znorm: str  # z over the causal prefix or the whole window
    seeds: list[int]
    frac_above_tau: float  # mean over seeds of the recorded share of keys above tau
    normal_tail: float  # mean over seeds of 1 − Φ(tau)
    heads: int  # heads of the evaluated checkpoints
    heads_interval: Difference | None
    heads_runs: list[str]
    max_abs_gap: float | None  # the largest gap of one head


@prose.measured.register
def say_tail(f: Tail) -> str:
    d = f.interval
    text = (
        f"{f.subject}, z over the {f.znorm}: {100 * f.frac_above_tau:.1f}% of keys above tau "
        f"against {100 * f.normal_tail:.1f}% = 1 − Φ(tau) (means over seeds of the gate summaries "
        f"recorded during training); measured − normal, one value per seed: {fmt_interval(d, scale=100, digits=1)} "
        f"points ({how(d)}){prose.verdict_text(f)}."
    )
    if f.heads_interval is None:
        return text
    runs = ", ".join(f"`{r}`" for r in f.heads_runs)
    return text + (
        f" As a figure only (heads of one model are not independent): over the {f.heads} heads "
        f"of {runs} evaluated by `ega landscape`, {fmt_interval(f.heads_interval, scale=100, digits=1)} "
        f"points, the largest {100 * (f.max_abs_gap or 0.0):.1f}."
    )


@prose.claim_subject.register
def tail_subject(f: Tail) -> str:
    return f"is it 1 − Φ(tau)? {f.subject}, z over the {f.znorm}, one value per seed"


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint the mechanism shows: the loss change with every tau shifted and every alpha scaled."""

    label: str
    gate: str
    step: int | None
    final: bool
    tau_shift_cost: dict[float, float]
    alpha_scale_cost: dict[float, float]


MEANING = {
    Verdict.WEAK_GRADIENT: (
        "the loss does not hold tau where it ends, so tau ends about where it started and a final tau near "
        f"{paper.TAU} reflects its initialisation more than the data"
    ),
    Verdict.CO_ADAPTATION: (
        "each tau sits at a minimum that the rest of the network built around it, so any initialisation ends at "
        f"its own minimum and a final tau near {paper.TAU} reflects its initialisation more than the data"
    ),
    Verdict.NEITHER: "training tau changes the loss, so where tau ends carries information",
}


@dataclass(frozen=True, kw_only=True)
class TauMechanism(Finding):
    """Which of the two explanations of a tau that does not move the data support (rules.mechanism_rule)."""

    kind: ClassVar[str] = "tau_mechanism"
    measures: ClassVar[tuple[str, ...]] = ("tau",)
    checkpoints: list[Checkpoint]
    frozen: list[tuple[str, Verdict | None]]  # each frozen-tau comparison and its verdict
    grad_norm_ratio: float | None  # median |grad tau| / |grad energy projection| of EGA-1 under our recipe
    grad_norm_runs: list[str] = field(default_factory=list)  # the runs that median reads (`grad_norm_ratio`)


def _frozen(f: TauMechanism) -> str:
    return ", ".join(f"{s}: {v.value if v is not None else None}" for s, v in f.frozen)


@prose.measured.register
def say_tau_mechanism(f: TauMechanism) -> str:
    parts = []
    for c in f.checkpoints:
        shifts = ", ".join(f"{num(delta, 2, True)}: {num(cost, 4, True)}" for delta, cost in c.tau_shift_cost.items())
        alpha = num(c.alpha_scale_cost.get(0.0), 3, True)
        parts.append(f"`{c.label}`: tau shifted by {shifts}; alpha × 0: {alpha}")
    text = "Why tau does not move. Loss change with every tau shifted (nats/char): " + (
        "; ".join(parts) if parts else "no checkpoint evaluated yet"
    )
    if f.frozen:
        text += ". Frozen tau vs learned: " + _frozen(f)
    if f.grad_norm_ratio is not None:
        text += (
            f". Median |grad tau| / |grad energy projection| over the logged steps of EGA-1's {len(f.grad_norm_runs)} "
            f"runs under our recipe (learned positions, tau learned, z over the causal prefix; the author's recipe's "
            f"and the RoPE study's runs not read): {f.grad_norm_ratio:.3g}"
        )
    meaning = MEANING.get(f.verdict) if f.verdict else None
    return text + prose.verdict_text(f) + (f": {meaning}." if meaning else ".")


@prose.ours_cell.register
def tau_mechanism_cell(f: TauMechanism) -> str:
    final = [c for c in f.checkpoints if c.final and c.gate == "linear"]
    costs = "; ".join(
        f"tau {-TAU_STEP:+}: {num(c.tau_shift_cost[-TAU_STEP], 4, True)}, "
        f"{TAU_STEP:+}: {num(c.tau_shift_cost[TAU_STEP], 4, True)}"
        for c in final
    )
    return "; ".join(part for part in (costs, _frozen(f)) if part) or "—"


@prose.claim_subject.register
def tau_mechanism_subject(f: TauMechanism) -> str:
    return "why tau does not move: mechanism (a) or (b)"


# ----------------------------------------------------------------------------- the findings


def tail_findings(tables: list[Table], variants: list[Variant], evaluations: Sequence[Evaluation]) -> list[Finding]:
    """The tail identity of every gate of ``tables`` (the report's: those of `TAIL_GROUPS`, the ablation and the
    leak audit), each set of runs once: one value per seed from its recorded gate summary (rules.PROSE['tail']);
    beside it, as a figure, the heads of its final checkpoints that `ega landscape` evaluated as trained (a
    rerun's stand for its original's)."""
    chosen: dict[tuple[str, ...], Variant] = {}
    for table in tables:
        for v in (r.variant for r in table.rows):
            if v.gated and v.done and rerun_of(v, variants) is None:
                chosen.setdefault(tuple(sorted(r.run.run_name for r in v.done)), v)
    return [_tail(v, set(runs), variants, evaluations) for runs, v in chosen.items() if v.by_seed("final_tail_gap")]


def _tail(v: Variant, runs: set[str], variants: list[Variant], evaluations: Sequence[Evaluation]) -> Finding:
    values = v.by_seed("final_tail_gap")
    reruns = [
        w for w in variants if (o := rerun_of(w, variants)) is not None and {r.run.run_name for r in o.done} == runs
    ]
    names = runs | {r.run.run_name for w in reruns for r in w.done}
    heads = [e for e in evaluations if e.final and e.as_trained and e.run in names]
    gaps = [g for e in heads for g in e.tail_gaps()]
    above = v.by_seed("final_frac_above_tau")
    measured = {
        "znorm": v.options.get("znorm", "prefix"),
        "seeds": sorted(values),
        "frac_above_tau": statistics.fmean(above[s] for s in values),
        "normal_tail": statistics.fmean(above[s] - values[s] for s in values),
        "heads": len(gaps),
        "heads_interval": mean_interval(gaps) if gaps else None,
        "heads_runs": [e.run for e in heads],
        "max_abs_gap": max((abs(g) for g in gaps), default=None),
    }
    reads = [(f"tail: {v.group}/{v.label}", mean_interval(list(values.values())))]
    where = Where(TAU_SECTION, v.corpus, measured_with(v), name(v), None)
    claim = {"claim": "frac_above_tau", "family": "tail", "code": code_of(v)}
    return judged(Tail, where, reads, **claim, **measured)


OTHER_RECIPES = ("author",)  # spec groups trained under another recipe than ours (the author's, issue 50)


def grad_norm_ratio(variants: list[Variant]) -> tuple[float | None, list[str]]:
    """Median over the logged steps of EGA-1 runs trained as in the paper under our recipe (learned positions, tau
    learned, z over the causal prefix; not the author's recipe's runs, nor the RoPE study's): |grad tau| / |grad
    energy projection|, and the runs it reads (those that logged both norms)."""
    ratios, read = [], []
    ega1 = [v for v in variants if v.gate == "linear" and v.as_in_paper and v.group not in OTHER_RECIPES]
    for r in {r.run.run_name: r for v in ega1 for r in v.done}.values():
        tau = dict(r.scalars.get("gate/grad_norm/tau", []))
        energy = dict(r.scalars.get("gate/grad_norm/energy", []))
        own = [tau[s] / energy[s] for s in tau if energy.get(s)]
        ratios += own
        read += [r.run.run_name] if own else []
    return (statistics.median(ratios) if ratios else None), sorted(read)


def mechanism_finding(
    found: list[Finding], evaluations: Sequence[Evaluation], variants: list[Variant]
) -> list[Finding]:
    """Which of the two explanations of a tau that does not move the data support (rules.PROSE['mechanism']),
    from EGA-1's final checkpoints trained and evaluated causally and the frozen-tau verdicts in ``found``."""
    frozen = [f for f in found if f.kind == "frozen_tau"]
    shown = [
        e
        for e in evaluations
        if e.gate in MECHANISM_GATES and e.as_trained and e.trained_znorm == "prefix" and TAU_STEP in e.tau_shifts
    ]
    ega1 = [e for e in shown if e.gate == "linear" and e.final and e.gate_options.get("learn_tau", True)]
    if not frozen and not ega1:
        return []
    flat = margin_of("flat")
    minimum = [e.shift_cost(-TAU_STEP) > flat and e.shift_cost(TAU_STEP) > flat for e in ega1]
    _, mechanism_rule = registered(TauMechanism.kind, "tau")
    verdict = mechanism_rule([f.verdict for f in frozen], minimum)
    checkpoints = [Checkpoint(e.label, e.gate, e.step, e.final, e.tau_shift_costs, e.alpha_scale_costs) for e in shown]
    frozen_runs = [r for v in variants if not v.options.get("learn_tau", True) for r in v.done]
    # undecided for want of a frozen-tau verdict: the seeds that the slowest of them needs
    needed = [f.seeds_needed for f in frozen if f.verdict is Verdict.TOO_FEW_SEEDS]
    known = [n for n in needed if n is not None]
    seeds = max(known) if verdict is Verdict.TOO_FEW_SEEDS and known and len(known) == len(needed) else None
    # the verdict those seeds would most likely reach: the same rule on the frozen-tau verdicts each would most
    # likely reach at them (each projection's own), the landscape's reading as it is
    likely_frozen = [f.seeds_verdict if f.verdict is Verdict.TOO_FEW_SEEDS else f.verdict for f in frozen]
    likely = (
        mechanism_rule(likely_frozen, minimum)
        if seeds is not None and all(v is not None for v in likely_frozen)
        else None
    )
    regime = f"EGA-1 final checkpoints ({len(ega1)}) and frozen-tau runs, at {scale(frozen_runs)}"
    ratio, ratio_runs = grad_norm_ratio(variants)
    mechanism = TauMechanism(
        **Where(TAU_SECTION, ega1[0].corpus if ega1 else frozen[0].corpus, regime, "EGA-1", None)._asdict(),
        paper=paper.TAU,
        verdict=verdict,
        claim="tau",
        seeds_needed=seeds,
        seeds_verdict=likely,
        checkpoints=checkpoints,
        frozen=[(f.subject, f.verdict) for f in frozen],
        grad_norm_ratio=ratio,
        grad_norm_runs=ratio_runs,
    )
    return [mechanism]


# ----------------------------------------------------------------------------- the table of checkpoints

TABLE_HEAD = (
    "| checkpoint | gate | z trained / evaluated | val loss | tau −1 / −0.5 / +0.5 / +1 | alpha ×0 / ×0.5 / ×2 "
    "| mean tau | above tau | 1 − Φ(tau) |\n|---|---|---|---|---|---|---|---|---|"
)


def table_line(e: Evaluation) -> str:
    """One evaluated checkpoint as a row of the landscape table."""

    def costs(values: list[float]) -> str:
        return " / ".join(num(v, 3, True) for v in values)

    taus = [e.shift_cost(d) for d in (-1.0, -0.5, 0.5, 1.0) if d in e.tau_shifts]
    alphas = [e.alpha_cost(a) for a in (0.0, 0.5, 2.0) if a in e.alpha_scales]
    cells = [
        f"`{e.run}/{e.checkpoint}` (step {e.step})" if e.run else f"`{e.source}` {e.checkpoint}",
        e.gate,
        f"{e.trained_znorm} / {e.eval_znorm}",
        f"{num(e.loss, 4)}{'' if e.whole_split else ' (part of the split)'}",
        costs(taus),
        costs(alphas),
        num(e.mean("tau")),
        f"{100 * e.mean('frac_above_tau'):.1f}%",
        f"{100 * e.mean('normal_tail'):.1f}%",
    ]
    return "| " + " | ".join(cells) + " |"


# ----------------------------------------------------------------------------- its section, figures and JSON


def landscape_section(inputs: ReportInputs, data: None, found: Sequence[Finding], drawn: Drawn) -> list[str]:
    """The checkpoints `ega landscape` evaluated: the tau mechanism and the tail identity (none: no section)."""
    if not inputs.evaluations and not any(f.section == TAU_SECTION for f in found):
        return []
    lines = [
        f"## {TAU_SECTION}",
        "",
        DESCRIPTION,
        "",
        *(f"- {prose.sentence(f)}" for f in found if f.section == TAU_SECTION),
        "",
    ]
    if inputs.evaluations:
        lines += [TABLE_HEAD, *(table_line(e) for e in inputs.evaluations), ""]
    for caption, file in drawn:
        lines += [f"![{caption}]({file})", ""]
    return lines


def landscape_figures(inputs: ReportInputs, data: None) -> list[Figure]:
    """(caption, file name, figure): the tau/alpha landscape of every checkpoint of MECHANISM_GATES trained
    and evaluated with the causal prefix z, and the z distributions of their final checkpoints as
    trained, one line per gate and z-normalisation."""
    out = []
    # the study's pair (EGA-1 and one wavelet gate) when evaluated; the table beside lists every checkpoint
    shown_gates = {e.gate for e in inputs.evaluations} & set(MECHANISM_GATES) or {e.gate for e in inputs.evaluations}
    evaluations = [e for e in inputs.evaluations if e.gate in shown_gates]
    causal = [e for e in evaluations if e.as_trained and e.trained_znorm == "prefix"]
    if causal:
        lines = [
            (
                e.label,
                e.tau_shifts,
                list(e.tau_shift_costs.values()),
                e.alpha_scales,
                list(e.alpha_scale_costs.values()),
            )
            for e in causal
        ]
        fig = plots.landscape_figure(lines, "validation loss around the trained tau and alpha")
        out.append(("tau and alpha landscape", "landscape-tau-alpha.png", fig))
    shown: dict[tuple[str, str], Evaluation] = {}
    for e in evaluations:
        if e.final and e.as_trained:
            shown.setdefault((e.gate, e.trained_znorm), e)
    if shown:
        series = [(f"{e.gate}, z over the {e.trained_znorm} ({e.run})", *e.z_density()) for e in shown.values()]
        out.append(("z distributions", "landscape-z.png", plots.z_figure(series, "z of every key, all heads")))
    return out


def evaluation_dict(e: Evaluation) -> dict[str, Any]:
    """An evaluated checkpoint as results.json holds it (the keys of its costs as strings: `results_json.jsonable`)."""
    keys = ("source", "run", "checkpoint", "step", "gate", "trained_znorm", "eval_znorm", "whole_split", "loss")
    costs = {"tau_shift_cost": e.tau_shift_costs, "alpha_scale_cost": e.alpha_scale_costs}
    means = {
        "tau_mean": e.mean("tau"),
        "frac_above_tau": e.mean("frac_above_tau"),
        "normal_tail": e.mean("normal_tail"),
    }
    return {k: getattr(e, k) for k in keys} | costs | means


def _findings(inputs: ReportInputs, data: None, read: Mapping[str, Sequence[Finding]]) -> list[Finding]:
    """The tail identity, then the tau mechanism, which reads the frozen-tau verdicts corrected for their family."""
    tails = tail_findings(list(inputs.tables_of(TAIL_GROUPS)), list(inputs.variants), inputs.evaluations)
    return tails + mechanism_finding(list(read["frozen_tau"]), inputs.evaluations, list(inputs.variants))


STUDY = Study(
    "landscape",
    groups=TAIL_GROUPS,
    reads=("frozen_tau",),
    findings=_findings,
    section=landscape_section,
    figures=landscape_figures,
    json=lambda inputs, data: [evaluation_dict(e) for e in inputs.evaluations],
)
