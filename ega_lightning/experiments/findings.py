"""Findings: what the runs say about each claim of the paper, as data (no prose, no I/O).

Every verdict comes from one decision rule below, applied here and nowhere else; the report's
method note states the same rules (:data:`RULES`). All intervals are 95% Student-t intervals of
differences paired by seed over the seeds both sides share (see `stats.compare`).
"""

from __future__ import annotations

import enum
import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ega_lightning.experiments import paper
from ega_lightning.experiments.comparisons import Row, Table, Variant, difference, find_reference
from ega_lightning.experiments.landscapes import Evaluation
from ega_lightning.experiments.stats import LEVEL, Difference, Summary, compare, mean_interval, summarize

MARGIN = 0.02  # nats/char: differences whose whole interval lies within ±MARGIN count as "about equal"
# nats/char: a checkpoint's loss is deterministic (the whole validation split), so a much finer line
# than the seed margin tells a flat landscape from a minimum
FLAT = MARGIN / 4
TAIL_MARGIN = 0.03  # fraction of keys: "above tau" within 3 points of 1 - Phi(tau) counts as the normal tail
TAU_STEP = 0.5  # the tau shift at which the landscape is read (both signs)


class Verdict(enum.Enum):
    REPRODUCED = "reproduced"
    NOT_REPRODUCED = "not reproduced"
    TOO_FEW_SEEDS = "too few seeds to tell"
    CONSISTENT = "consistent"
    NOT_CONSISTENT = "not consistent"
    HOLDS = "holds"
    DOES_NOT_HOLD = "does not hold"
    NO_DATA = "no finished runs"
    WEAK_GRADIENT = "(a) weak gradient"
    CO_ADAPTATION = "(b) co-adaptation"
    NEITHER = "neither"


RULES = {
    "figure": (
        "a paper figure (a difference or a level) is **reproduced** when our 95% interval holds it, "
        "**not reproduced** when it lies outside; **too few seeds to tell** with one seed, or when the interval "
        "of a difference holds both the paper's figure and 0."
    ),
    "worse": (
        "a gate is worse than EGA-1 (**holds**) when the whole interval of EGA-1 − gate lies below 0, "
        "**does not hold** when it lies above 0, else **too few seeds to tell**."
    ),
    "equivalent": (
        f"a gate is about the baseline (**consistent**) when the whole interval of baseline − gate lies within "
        f"±{MARGIN} nats/char (an equivalence margin of about twice the seed-to-seed std of the short runs); "
        "**not consistent** when the interval excludes 0 and leaves the margin; else **too few seeds to tell**."
    ),
    "best": (
        "EGA-1 is the best of the ablation (**holds**) when every other paper gate's interval of gate − EGA-1 "
        "lies above 0; **does not hold** when any lies below 0 (that gate is measurably better); "
        "else **too few seeds to tell**."
    ),
    "grows": (
        "the advantage grows with context (**holds**) when the interval of (Δ at the longest block − Δ at the "
        f"shortest), per seed, lies above 0; **does not hold** when its upper end is below +{MARGIN} (any growth "
        "is within the equivalence margin); else **too few seeds to tell**."
    ),
    "frozen": (
        "freezing tau at its initial value changes nothing (**consistent**) when the whole interval of "
        f"learned − frozen (same tau_init, paired by seed) lies within ±{MARGIN}; **not consistent** when it "
        "excludes 0 and leaves the margin; else **too few seeds to tell**."
    ),
    "tail": (
        "the fraction of keys above tau is what a standard normal z gives (**holds**) when the 95% interval, "
        "over the model's heads, of measured − (1 − Φ(tau)) lies within "
        f"±{100 * TAIL_MARGIN:.0f} points; **does not hold** when it excludes 0 and leaves that margin; "
        "else **too few seeds to tell**."
    ),
    "mechanism": (
        "why tau does not move, read from EGA-1's final checkpoint and the frozen-tau runs: **neither** "
        "mechanism when freezing tau is not consistent with learning it (tau's training matters); else "
        f"**(b) co-adaptation** when moving every tau by ±{TAU_STEP} raises the loss by more than {FLAT} on "
        "both sides (the trained tau sits at a minimum the rest of the network built around it), and "
        "**(a) weak gradient** when it does not (the loss does not hold tau where it is, yet tau stays): "
        "**too few seeds to tell** while a frozen-tau comparison is undecided or missing."
    ),
    "cost": (
        "no measurable cost (**holds**) when the interquartile range of `ega bench`'s per-repetition step-time "
        "ratio EGA-1 / baseline holds 1, **does not hold** when it lies above 1."
    ),
}


# ----------------------------------------------------------------------------- the rules


def figure_rule(d: Difference | None, figure: float, null: float | None = 0.0) -> Verdict:
    """``null``: the value of no effect for a difference (0), None for a level (tau)."""
    if d is None:
        return Verdict.NO_DATA
    if d.low is None or d.high is None:
        return Verdict.TOO_FEW_SEEDS
    inside = d.low <= figure <= d.high
    if inside and null is not None and d.low <= null <= d.high:
        return Verdict.TOO_FEW_SEEDS
    return Verdict.REPRODUCED if inside else Verdict.NOT_REPRODUCED


def worse_rule(d: Difference | None) -> Verdict:
    """``d`` = EGA-1 − gate (final val loss)."""
    if d is None:
        return Verdict.NO_DATA
    if d.low is None or d.high is None:
        return Verdict.TOO_FEW_SEEDS
    if d.high < 0:
        return Verdict.HOLDS
    if d.low > 0:
        return Verdict.DOES_NOT_HOLD
    return Verdict.TOO_FEW_SEEDS


def equivalence_rule(d: Difference | None, margin: float = MARGIN) -> Verdict:
    """``d`` = baseline − gate (final val loss)."""
    if d is None:
        return Verdict.NO_DATA
    if d.low is None or d.high is None:
        return Verdict.TOO_FEW_SEEDS
    if -margin <= d.low and d.high <= margin:
        return Verdict.CONSISTENT
    if d.excludes_zero:
        return Verdict.NOT_CONSISTENT
    return Verdict.TOO_FEW_SEEDS


def best_rule(diffs: list[Difference | None]) -> Verdict:
    """``diffs``: gate − EGA-1 for every other gate of the paper's ablation."""
    known = [d for d in diffs if d is not None]
    if not known:
        return Verdict.NO_DATA
    if any(d.high is not None and d.high < 0 for d in known):
        return Verdict.DOES_NOT_HOLD
    if len(known) == len(diffs) and all(d.low is not None and d.low > 0 for d in known):
        return Verdict.HOLDS
    return Verdict.TOO_FEW_SEEDS


def growth_rule(contrast: Difference | None, margin: float = MARGIN) -> Verdict:
    """``contrast``: (Δ at the longest block − Δ at the shortest), per seed."""
    if contrast is None:
        return Verdict.NO_DATA
    if contrast.low is None or contrast.high is None:
        return Verdict.TOO_FEW_SEEDS
    if contrast.low > 0:
        return Verdict.HOLDS
    if contrast.high < margin:
        return Verdict.DOES_NOT_HOLD
    return Verdict.TOO_FEW_SEEDS


def cost_rule(q1: float | None, q3: float | None) -> Verdict:
    if q1 is None or q3 is None:
        return Verdict.NO_DATA
    return Verdict.HOLDS if q1 <= 1.0 <= q3 else Verdict.DOES_NOT_HOLD


# ----------------------------------------------------------------------------- findings


@dataclass(frozen=True)
class Finding:
    """One measured statement: ``kind`` says what was measured (the renderer's key), ``claim`` which
    claim of the paper it tests (a key of `paper.CLAIM`, None for our own observations)."""

    kind: str
    section: str  # the report section (group) with the evidence
    corpus: str
    regime: str  # the model and budget it was measured with
    subject: str  # e.g. "EGA-1 `linear`"
    against: str | None  # e.g. "baseline `none`"
    ours: Difference | Summary | None
    paper: float | None
    verdict: Verdict | None
    claim: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def regime(v: Variant) -> str:
    if not v.done:
        return "—"
    h = v.done[0].hparams
    steps = v.done[0].max_steps
    model = f"{h.get('n_layer')}×{h.get('n_head')}×{h.get('n_embd')} T{h.get('block_size')}"
    return f"{v.group} / {v.corpus}: {model}, {steps} steps"


def name(v: Variant) -> str:
    return f"{v.paper_name or v.gate} `{v.label}`"


def _ega1_findings(table: Table, row: Row) -> list[Finding]:
    v, base = row.variant, row.baseline
    assert base is not None
    where = (table.group, table.corpus, regime(v), name(v), f"baseline `{base.label}`")
    out = []
    d = row.diffs["final_val_loss"]
    figure = paper.IMPROVEMENT.get(table.corpus)
    out.append(
        Finding(
            "improvement",
            *where,
            d,
            figure,
            figure_rule(d, figure) if figure is not None else None,
            f"improvement:{table.corpus}" if figure is not None else None,
            {"means": (v.summary("final_val_loss").mean, base.summary("final_val_loss").mean)},
        )
    )
    best = row.diffs["best_val_loss"]
    compared = [*v.done, *base.done]
    if best is not None and any(r.metrics["best_val_loss"] < r.metrics["final_val_loss"] for r in compared):
        # past its best the final loss measures overfitting as well: the best is given beside it
        out.append(Finding("best_val_loss", *where, best, None, None))
    gap = row.diffs["final_gap"]
    if gap is not None:
        base_gap = base.summary("final_gap").mean
        overfits = None if base_gap is None else base_gap >= paper.OVERFIT_GAP
        out.append(
            Finding(
                "gap",
                *where,
                gap,
                paper.GAP_REDUCTION,
                figure_rule(gap, paper.GAP_REDUCTION),
                "gap",
                {"baseline_gap": base_gap, "gap": v.summary("final_gap").mean, "paper_regime": overfits},
            )
        )
    for metric, key, figure in (
        ("final_tau_mean", "tau", paper.TAU),
        ("final_frac_above_tau", "frac_above_tau", paper.FRAC_ABOVE_TAU),
    ):
        values = list(v.by_seed(metric).values())
        if values:
            ours = mean_interval(values)
            detail = {}
            if key == "tau":
                tracked = [r.metrics["tau_converged"] for r in v.done if r.metrics.get("tau_converged") is not None]
                detail = {"settled": sum(tracked), "tracked": len(tracked)}
            out.append(Finding(key, *where[:4], None, ours, figure, figure_rule(ours, figure, None), key, detail))
    return out


def _ablation_findings(table: Table, variants: list[Variant]) -> list[Finding]:
    done = [r.variant for r in table.rows if r.variant.done]
    if not any(v.paper_name in paper.ABLATION for v in done):
        return []
    # the baseline and EGA-1 the ablation is measured against may live in another group (e.g. main)
    refs = [find_reference(v, gate, variants) for v in done for gate in ("none", "linear") if v.gate != gate]
    pool = list({id(v): v for v in [*done, *(r for r in refs if r is not None)]}.values())
    mean = {id(v): v.summary("final_val_loss").mean for v in pool}
    ranked = sorted(pool, key=lambda v: mean[id(v)] if mean[id(v)] is not None else math.inf)
    ega1 = next((v for v in ranked if v.gate == "linear" and v.paper_name), None)
    where = (table.group, table.corpus, regime(ega1 or done[0]))
    ranking = [(name(v), v.group, mean[id(v)]) for v in ranked]
    out = [Finding("ablation_ranking", *where, "", None, None, None, None, None, {"ranking": ranking})]
    pairs = [v for v in ranked if v.paper_name in paper.ABLATION]
    k = len(pairs)  # the ablation's comparisons, for the Bonferroni note
    adjusted_level = 1 - (1 - LEVEL) / max(k, 1)
    if ega1 is not None:
        others = [v for v in ranked if v.paper_name and v is not ega1 and v.gate != "none"]
        diffs = [difference(v, ega1, "final_val_loss") for v in others]
        in_paper = [v for v in ranked if v.paper_name]
        rank = in_paper.index(ega1) + 1
        out.append(
            Finding(
                "ablation_best",
                *where,
                name(ega1),
                None,
                None,
                None,
                best_rule(diffs),
                "ablation:best",
                {"rank": rank, "of": len(in_paper)},
            )
        )
    for v in pairs:
        _, against = paper.ABLATION[v.paper_name or ""]
        ref = find_reference(v, against, variants)
        d = difference(ref, v, "final_val_loss")
        rule = equivalence_rule if against == "none" else worse_rule
        wide = difference(ref, v, "final_val_loss", level=adjusted_level)
        detail = {"bonferroni_level": adjusted_level, "bonferroni_verdict": rule(wide).value, "comparisons": k}
        out.append(
            Finding(
                "ablation_pair",
                table.group,
                table.corpus,
                regime(v),
                name(v),
                name(ref) if ref else against,
                d,
                None,
                rule(d),
                f"ablation:{v.paper_name}",
                detail,
            )
        )
    return out


def _context_findings(table: Table) -> list[Finding]:
    """EGA-1 − baseline at each block size, on the seeds every block size ran: a 3-seed mean set
    beside single seeds would put seed noise into the trend."""
    rows = [r for r in table.rows if r.variant.gate == "linear" and r.diffs["final_val_loss"] is not None]
    blocks = {r.variant.hp("block_size") for r in rows}
    if len(blocks) < 2 or len(blocks) < len(rows):  # a context study: one EGA-1 per block size
        return []
    metric = "final_val_loss"
    seeds = set.intersection(*(set(r.variant.by_seed(metric)) & set(r.baseline.by_seed(metric)) for r in rows))
    rows.sort(key=lambda r: r.variant.hp("block_size"))
    where = (table.group, table.corpus, regime(rows[0].variant), "EGA-1", "baseline")
    if not seeds:
        return [Finding("context", *where, None, None, Verdict.NO_DATA, "context", {"seeds": []})]
    by_block = [(r.variant.hp("block_size"), difference(r.baseline, r.variant, metric, seeds)) for r in rows]

    def per_seed(row: Row) -> dict[int, float]:
        base, own = row.baseline.by_seed(metric), row.variant.by_seed(metric)
        return {s: base[s] - own[s] for s in seeds}

    longest, shortest = per_seed(rows[-1]), per_seed(rows[0])
    contrast = compare(longest, shortest)
    grows = all(a.estimate < b.estimate for (_, a), (_, b) in itertools.pairwise(by_block))
    detail = {"seeds": sorted(seeds), "by_block": by_block, "monotone": grows}
    return [Finding("context", *where, contrast, None, growth_rule(contrast), "context", detail)]


DEFAULT_TAU_INIT = 0.0  # CharLM's default: the learned-tau EGA-1 every other initialisation is paired with


def _tau_init_findings(table: Table) -> list[Finding]:
    """Final tau and loss by tau_init on the seeds every initialisation ran (a one-seed row beside a
    3-seed mean would put seed noise into the spread), and each initialisation paired by seed with
    the default tau_init's run."""
    gated = [r.variant for r in table.rows if r.variant.gate != "none" and r.variant.done]
    if len({v.hp("tau_init") for v in gated}) < 2:
        return []
    metric = "final_val_loss"
    seeds = set.intersection(*(set(v.by_seed(metric)) for v in gated))

    def shared(v: Variant, key: str) -> Summary:
        return summarize([x for s, x in v.by_seed(key).items() if s in seeds])

    taus = [(v.hp("tau_init"), name(v), shared(v, "final_tau_mean")) for v in gated]
    losses = [(v.hp("tau_init"), shared(v, metric)) for v in gated]
    finals = [s.mean for _, _, s in taus if s.mean is not None]
    loss_means = [s.mean for _, s in losses if s.mean is not None]
    reference = next((v for v in gated if v.hp("tau_init") == DEFAULT_TAU_INIT), None)
    paired = [(v.hp("tau_init"), difference(reference, v, metric)) for v in gated if reference and v is not reference]
    # the only yardstick while the rows share one seed: how far the seeds of one initialisation scatter
    init, scatter = max(((v.hp("tau_init"), v.summary(metric)) for v in gated), key=lambda pair: pair[1].n)
    detail = {
        "seeds": sorted(seeds),
        "taus": taus,
        "tau_span": max(finals) - min(finals) if finals else None,
        "losses": losses,
        "loss_span": max(loss_means) - min(loss_means) if len(loss_means) > 1 else None,
        "paired": paired,
        "reference": reference.hp("tau_init") if reference else None,
        "scatter": (init, scatter) if scatter.std else None,
    }
    return [
        Finding(
            "tau_init", table.group, table.corpus, regime(gated[0]), "EGA-1", None, None, paper.TAU, None, None, detail
        )
    ]


def _options(v: Variant) -> dict[str, Any]:
    return v.hp("gate_options") or {}


def learned_reference(v: Variant, variants: list[Variant]) -> Variant | None:
    """The gate of ``v`` as the paper trains it (tau learned, z over the causal prefix), from the same
    tau_init, in the same regime: what a frozen-tau or whole-window variant is set against."""
    candidates = [
        x
        for x in variants
        if x is not v
        and x.done
        and x.gate == v.gate
        and x.regime == v.regime
        and x.hp("tau_init") == v.hp("tau_init")
        and trained_as_in_paper(x)
    ]
    return candidates[0] if candidates else None


def trained_as_in_paper(v: Variant) -> bool:
    """tau learned and z over the causal prefix: not a frozen-tau or whole-window diagnostic."""
    return bool(_options(v).get("learn_tau", True)) and _options(v).get("znorm", "prefix") == "prefix"


def _frozen_tau_findings(table: Table, variants: list[Variant]) -> list[Finding]:
    out = []
    for v in (r.variant for r in table.rows):
        if not v.done or _options(v).get("learn_tau", True):
            continue
        ref = learned_reference(v, variants)
        d = difference(ref, v, "final_val_loss")
        detail = {
            "tau_init": v.hp("tau_init"),
            "frozen_loss": v.summary("final_val_loss").mean,
            "learned_loss": ref.summary("final_val_loss").mean if ref else None,
            "learned_tau": ref.summary("final_tau_mean").mean if ref else None,
        }
        against = name(ref) if ref else "learned tau (no finished run)"
        out.append(
            Finding(
                "frozen_tau",
                table.group,
                table.corpus,
                regime(v),
                name(v),
                against,
                d,
                None,
                equivalence_rule(d),
                "tau",
                detail,
            )
        )
    return out


def _leak_findings(table: Table, variants: list[Variant], evaluations: Sequence[Evaluation]) -> list[Finding]:
    """A gate z-normalised over the whole window against the paper's figure: as trained (it sees a
    little of the future) and the same final checkpoints evaluated with the causal prefix z."""
    out = []
    for row in table.rows:
        v, base = row.variant, row.baseline
        if not v.done or base is None or _options(v).get("znorm") != "window":
            continue
        figure = paper.IMPROVEMENT.get(table.corpus)
        claim = f"improvement:{table.corpus}" if figure is not None else None
        causal = learned_reference(v, variants)
        where = (table.group, table.corpus, regime(v), name(v), f"baseline `{base.label}`")
        d = row.diffs["final_val_loss"]
        detail = {
            "causal": difference(base, causal, "final_val_loss") if causal else None,
            "causal_subject": name(causal) if causal else None,
        }
        verdict = figure_rule(d, figure) if figure is not None else None
        out.append(Finding("leak", *where, d, figure, verdict, claim, detail))
        seeds = {r.run.run_name: r.run.seed for r in v.done}
        evaluated = {
            seeds[e.run]: e.loss
            for e in evaluations
            if e.run in seeds and e.final and e.eval_znorm == "prefix" and e.whole_split
        }
        baseline = base.by_seed("final_val_loss")
        d_causal = compare(baseline, evaluated) if evaluated and baseline else None
        verdict = figure_rule(d_causal, figure) if figure is not None else None
        out.append(Finding("leak_causal", *where, d_causal, figure, verdict, claim, {"seeds": sorted(evaluated)}))
    return out


def primary_rows(table: Table) -> list[Row]:
    """EGA-1 against its baseline where a section is a head-to-head (one EGA-1 row, the baseline in
    the section itself): the main comparison of each regime. Sections with several EGA-1 rows are
    studies (context, tau_init); those that borrow their baseline (a frozen tau, a leak audit, a
    rerun for its checkpoints) test something else."""
    linear = [r for r in table.rows if r.variant.gate == "linear" and r.variant.done]
    if len(linear) != 1 or linear[0].baseline is None or linear[0].baseline.group != table.group:
        return []
    return linear


# ----------------------------------------------------------------------------- the tau landscape

TAU_SECTION = "tau landscape"
# the tau mechanism is read on EGA-1 and shown beside one wavelet gate (the report's figures use the same pair)
MECHANISM_GATES = ("linear", "db2")


def tail_rule(d: Difference | None, margin: float = TAIL_MARGIN) -> Verdict:
    """``d``: measured fraction above tau − (1 − Phi(tau)), over heads."""
    equal = equivalence_rule(d, margin)
    return {Verdict.CONSISTENT: Verdict.HOLDS, Verdict.NOT_CONSISTENT: Verdict.DOES_NOT_HOLD}.get(equal, equal)


def tail_findings(evaluations: Sequence[Evaluation]) -> list[Finding]:
    """Per gate and z-normalisation: the heads of every final checkpoint as trained, pooled."""
    groups: dict[tuple[str, str, str, str], list[Evaluation]] = {}
    for e in evaluations:
        if e.final and e.as_trained:
            options = {k: v for k, v in e.gate_options.items() if k != "znorm"}  # e.g. multiscale's scales
            groups.setdefault((e.corpus, e.gate, repr(sorted(options.items())), e.trained_znorm), []).append(e)
    out = []
    for (corpus, gate, _, znorm), evals in groups.items():
        gaps = [g for e in evals for g in e.tail_gaps()]
        d = mean_interval(gaps)
        detail = {
            "znorm": znorm,
            "runs": [e.run or e.source for e in evals],
            "heads": len(gaps),
            "max_abs_gap": max(abs(g) for g in gaps),
            "frac_above_tau": math.fsum(e.mean("frac_above_tau") for e in evals) / len(evals),
            "normal_tail": math.fsum(e.mean("normal_tail") for e in evals) / len(evals),
        }
        subject = f"{paper.paper_name(gate, evals[0].gate_options) or gate} `{gate}`"
        split = "the whole" if all(e.whole_split for e in evals) else "part of the"
        where = f"final checkpoints ({len(evals)}), {split} validation split"
        out.append(
            Finding("tail", TAU_SECTION, corpus, where, subject, None, d, None, tail_rule(d), "frac_above_tau", detail)
        )
    return out


def grad_norm_ratio(variants: list[Variant]) -> float | None:
    """Median over the logged steps of EGA-1 runs trained as in the paper: |grad tau| / |grad energy projection|."""
    ratios = []
    ega1 = [v for v in variants if v.gate == "linear" and trained_as_in_paper(v)]
    for r in {id(r): r for v in ega1 for r in v.done}.values():
        tau = dict(r.scalars.get("gate/grad_norm/tau", []))
        energy = dict(r.scalars.get("gate/grad_norm/energy", []))
        ratios += [tau[s] / energy[s] for s in tau if energy.get(s)]
    return statistics.median(ratios) if ratios else None


def mechanism_finding(
    found: list[Finding], evaluations: Sequence[Evaluation], variants: list[Variant]
) -> list[Finding]:
    """Which of the two explanations of a tau that does not move the data support (RULES['mechanism'])."""
    frozen = [f for f in found if f.kind == "frozen_tau"]
    shown = [
        e
        for e in evaluations
        if e.gate in MECHANISM_GATES and e.as_trained and e.trained_znorm == "prefix" and TAU_STEP in e.tau_shifts
    ]
    ega1 = [e for e in shown if e.gate == "linear" and e.final and e.gate_options.get("learn_tau", True)]
    if not frozen and not ega1:
        return []
    minimum = [e.shift_cost(-TAU_STEP) > FLAT and e.shift_cost(TAU_STEP) > FLAT for e in ega1]
    if any(f.verdict is Verdict.NOT_CONSISTENT for f in frozen):
        verdict = Verdict.NEITHER
    elif not frozen or not ega1 or any(f.verdict is not Verdict.CONSISTENT for f in frozen) or len(set(minimum)) > 1:
        verdict = Verdict.TOO_FEW_SEEDS
    else:
        verdict = Verdict.CO_ADAPTATION if minimum[0] else Verdict.WEAK_GRADIENT
    detail = {
        "checkpoints": [
            {
                "label": e.label,
                "gate": e.gate,
                "step": e.step,
                "final": e.final,
                "tau_shift_cost": e.tau_shift_costs,
                "alpha_scale_cost": e.alpha_scale_costs,
            }
            for e in shown
        ],
        "frozen": [(f.subject, f.verdict.value if f.verdict else None) for f in frozen],
        "grad_norm_ratio": grad_norm_ratio(variants),
    }
    corpus = ega1[0].corpus if ega1 else frozen[0].corpus
    regime_text = f"EGA-1 final checkpoints ({len(ega1)}) and frozen-tau runs"
    return [
        Finding(
            "tau_mechanism", TAU_SECTION, corpus, regime_text, "EGA-1", None, None, paper.TAU, verdict, "tau", detail
        )
    ]


def cost_finding(bench: dict[str, Any] | None, source: str) -> Finding:
    """The paper's cost claim against `ega bench`: sweep runs are timed on a shared machine, the bench side by side."""
    row = None
    size = None
    for entry in (bench or {}).get("sizes", []):
        if "linear" in entry.get("rows", {}):
            row, size = entry["rows"]["linear"], entry.get("size")
            break
    q1, q3 = (row or {}).get("time_ratio_q1_q3") or (None, None)
    ours = None if row is None else Summary(row.get("time_ratio"), None, int(row.get("repeats") or 0))
    detail = {"q1": q1, "q3": q3, "size": size, "source": source}
    return Finding(
        "cost",
        "cost",
        "",
        f"`ega bench`, {size} size",
        "EGA-1",
        "baseline",
        ours,
        None,
        cost_rule(q1, q3),
        "cost",
        detail,
    )


def findings(tables: list[Table], variants: list[Variant], evaluations: Sequence[Evaluation] = ()) -> list[Finding]:
    """Every finding, section by section; a comparison shared by sections (``also_in``) is made once.
    ``evaluations``: the checkpoints `ega landscape` evaluated (the leak audit's causal evaluation,
    the tail identity, the tau mechanism)."""
    out: list[Finding] = []
    said: set[tuple[str, ...]] = set()
    for table in tables:
        for row in primary_rows(table):
            compared = tuple(sorted(r.run.run_name for r in [*row.variant.done, *row.baseline.done]))
            if compared not in said:
                said.add(compared)
                out += _ega1_findings(table, row)
        out += _ablation_findings(table, variants) + _tau_init_findings(table) + _context_findings(table)
        out += _frozen_tau_findings(table, variants) + _leak_findings(table, variants, evaluations)
    return out + tail_findings(evaluations) + mechanism_finding(out, evaluations, variants)


def claims(found: list[Finding]) -> list[tuple[paper.Claim, Finding | None]]:
    """One row per claim of the paper and regime it was measured in; a claim nothing measured gets None."""
    rows: list[tuple[paper.Claim, Finding | None]] = []
    for claim in paper.CLAIMS:
        matching = [f for f in found if f.claim == claim.key]
        rows += [(claim, f) for f in matching] if matching else [(claim, None)]
    return rows
