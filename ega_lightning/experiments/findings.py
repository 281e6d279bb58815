"""Findings: what the runs say about each claim of the paper, as data (no prose, no I/O).

Every verdict comes from one decision rule of `rules`, applied here and nowhere else; a finding of a
family (`rules.FAMILIES`) takes its verdict from its interval at the family's Bonferroni level
(:func:`correct`), the nominal interval kept beside it.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from ega_lightning.experiments import paper
from ega_lightning.experiments.comparisons import (
    Entry,
    Row,
    RunData,
    Table,
    Variant,
    device,
    difference,
    find_reference,
    leaderboard,
)
from ega_lightning.experiments.landscapes import Evaluation
from ega_lightning.experiments.rules import (
    FLAT,
    LEVEL_WIDTH,
    TAU_STEP,
    Verdict,
    best_rule,
    control_rule,
    cost_rule,
    equivalence_rule,
    figure_rule,
    forgets_rule,
    frozen_rule,
    growth_rule,
    level_rule,
    lower_rule,
    mechanism_rule,
    seeds_to_decide,
    tail_rule,
    worse_rule,
)
from ega_lightning.experiments.stats import (
    LEVEL,
    Difference,
    Summary,
    bonferroni_level,
    compare,
    half_width,
    mean_interval,
    pooled_std,
    summarize,
    widen,
)

# ----------------------------------------------------------------------------- findings


@dataclass(frozen=True)
class Finding:
    """One measured statement: ``kind`` says what was measured (the renderer's key), ``claim`` which
    claim of the paper it tests (a key of `paper.CLAIM`, None for our own observations).

    A finding with a verdict keeps the ``rule`` that gave it and the intervals it ``reads`` (each named
    by the comparison it is, so that a family counts a comparison two verdicts read once): `correct`
    re-reads them at the family's Bonferroni level, `seeds_needed` projects them to more seeds."""

    kind: str
    section: str  # the report section (group) with the evidence
    corpus: str
    regime: str  # the model, budget, size and device it was measured with
    subject: str  # e.g. "EGA-1 `linear`"
    against: str | None  # e.g. "baseline `none`"
    ours: Difference | Summary | None  # the nominal 95% interval
    paper: float | None
    verdict: Verdict | None
    claim: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    family: str | None = None  # a key of FAMILIES
    corrected: Difference | None = None  # ``ours`` at the family's Bonferroni level (set by `correct`)
    seeds_needed: int | None = None  # an undecided verdict: the paired seeds that would decide it
    rule: Callable[..., Verdict] | None = field(default=None, compare=False, repr=False)
    reads: tuple[tuple[str, Difference | None], ...] = ()


def judged(
    kind: str,
    where: tuple[str, str, str, str, str | None],
    reads: Sequence[tuple[str, Difference | None]],
    rule: Callable[..., Verdict],
    *,
    paper_figure: float | None = None,
    claim: str | None = None,
    detail: dict[str, Any] | None = None,
    family: str | None = None,
    ours: Difference | Summary | None = None,
) -> Finding:
    """A finding whose verdict is ``rule`` of the intervals it ``reads``; ``ours``: the first of them unless given."""
    reads = tuple(reads)
    shown = ours if ours is not None else (reads[0][1] if reads else None)
    verdict = rule(*(d for _, d in reads))
    return Finding(kind, *where, shown, paper_figure, verdict, claim, detail or {}, family, None, None, rule, reads)


def scale(runs: Sequence[RunData]) -> str:
    """The size, budget and device a verdict was measured at, from the records: '0.82M parameters, 1,500
    steps, CPU'."""
    counts = [r.n_params for r in runs if r.n_params]
    params = list(dict.fromkeys(f"{n / 1e6:.2g}M" for n in (min(counts), max(counts)))) if counts else []
    steps = list(dict.fromkeys(f"{r.max_steps:,}" for r in runs if r.max_steps))
    devices = list(dict.fromkeys(device(r.machine) for r in runs))
    return f"{'–'.join(params) or '?'} parameters, {'/'.join(steps) or '?'} steps, {', '.join(devices) or '?'}"


def regime(v: Variant, *others: Variant | None) -> str:
    if not v.done:
        return "—"
    h = v.done[0].hparams
    model = f"{h.get('n_layer')}×{h.get('n_head')}×{h.get('n_embd')} T{h.get('block_size')}"
    runs = [r for x in (v, *others) if x is not None for r in x.done]
    return f"{v.group} / {v.corpus}: {model}, at {scale(runs)}"


def name(v: Variant) -> str:
    return f"{v.paper_name or v.gate} `{v.label}`"


def pair(a: Variant | str, b: Variant | str) -> str:
    """A comparison's name, whichever side comes first."""
    names = sorted(x if isinstance(x, str) else f"{x.group}/{x.label}" for x in (a, b))
    return " vs ".join(names)


def code_of(*variants: Variant | None) -> dict[str, Any]:
    """Which code the sides of a comparison ran: per side, each fingerprint and the seeds that ran it;
    ``flag`` ``different`` when a run's code is known not to be today's, ``unknown`` when a run's code is
    not established (`comparisons.code_status`), None when every run ran today's code."""
    sides, flagged = [], []
    for v in variants:
        if v is None or not v.done:  # a side with no finished run ran no code
            continue
        by_fingerprint: dict[str, list[int]] = {}
        for r in v.done:
            by_fingerprint.setdefault(r.code["fingerprint"] or "unknown", []).append(r.run.seed)
            if r.code["status"] != "today":
                flagged.append((r.run.run_name, r.code["status"]))
        sides.append({"variant": name(v), "fingerprints": by_fingerprint})
    flag = "different" if any(s == "differs" for _, s in flagged) else ("unknown" if flagged else None)
    return {"sides": sides, "flag": flag, "runs": [run for run, _ in flagged]}


def _ega1_findings(table: Table, row: Row) -> list[Finding]:
    v, base = row.variant, row.baseline
    assert base is not None
    where = (table.group, table.corpus, regime(v, base), name(v), f"baseline `{base.label}`")
    code = code_of(v, base)
    out = []
    d = row.diffs["final_val_loss"]
    figure = paper.IMPROVEMENT.get(table.corpus)
    means = {"means": (v.summary("final_val_loss").mean, base.summary("final_val_loss").mean), "code": code}
    if figure is not None:
        rule = partial(figure_rule, figure=figure)
        reads = [(pair(v, base), d)]
        claim = f"improvement:{table.corpus}"
        out.append(judged("improvement", where, reads, rule, paper_figure=figure, claim=claim, detail=means))
    else:
        out.append(Finding("improvement", *where, d, None, None, None, means))
    best = row.diffs["best_val_loss"]
    compared = [*v.done, *base.done]
    if best is not None and any(r.metrics["best_val_loss"] < r.metrics["final_val_loss"] for r in compared):
        # past its best the final loss measures overfitting as well: the best is given beside it
        out.append(Finding("best_val_loss", *where, best, None, None))
    gap = row.diffs["final_gap"]
    if gap is not None:
        base_gap = base.summary("final_gap").mean
        overfits = None if base_gap is None else base_gap >= paper.OVERFIT_GAP
        detail = {"baseline_gap": base_gap, "gap": v.summary("final_gap").mean, "paper_regime": overfits, "code": code}
        rule = partial(figure_rule, figure=paper.GAP_REDUCTION)
        reads = [(f"gap: {pair(v, base)}", gap)]
        out.append(judged("gap", where, reads, rule, paper_figure=paper.GAP_REDUCTION, claim="gap", detail=detail))
    for metric, key, figure in (
        ("final_tau_mean", "tau", paper.TAU),
        ("final_frac_above_tau", "frac_above_tau", paper.FRAC_ABOVE_TAU),
    ):
        values = list(v.by_seed(metric).values())
        if values:
            detail = {"code": code_of(v)}
            if key == "tau":
                tracked = [r.metrics["tau_converged"] for r in v.done if r.metrics.get("tau_converged") is not None]
                detail |= {"settled": sum(tracked), "tracked": len(tracked)}
            rule = partial(level_rule, figure=figure, width=LEVEL_WIDTH[key])
            reads = [(f"{key}: {v.group}/{v.label}", mean_interval(values))]
            own = (*where[:3], name(v), None)
            out.append(judged(key, own, reads, rule, paper_figure=figure, claim=key, detail=detail))
    return out


def rerun_of(v: Variant, variants: list[Variant]) -> Variant | None:
    """The variant that ``v`` repeats run for run (same hyper-parameters, seeds and budget) on more seeds:
    a rerun kept for its checkpoints is evidence for nothing its original does not already give."""

    def runs(x: Variant) -> dict[int, str]:
        # keys that later code added at their defaults (None, compile) are no difference in what was trained
        def same(r: RunData) -> dict[str, Any]:
            return {k: v for k, v in r.hparams.items() if v is not None and k != "compile"}

        return {r.run.seed: repr(sorted({**same(r), "max_steps": r.max_steps}.items())) for r in x.done}

    own = runs(v)
    for other in variants:
        theirs = runs(other) if other is not v and len(other.done) > len(v.done) else {}
        if own and all(theirs.get(seed) == config for seed, config in own.items()):
            return other
    return None


def _rerun_findings(table: Table, variants: list[Variant]) -> list[Finding]:
    """A rerun row says what it repeats and whether its final val loss came out bit for bit the same."""
    out = []
    for v in (r.variant for r in table.rows):
        original = rerun_of(v, variants) if v.done else None
        if original is None:
            continue
        ours, theirs = v.by_seed("final_val_loss"), original.by_seed("final_val_loss")
        detail = {
            "of": name(original),
            "of_group": original.group,
            "seeds": sorted(ours),
            "identical": all(ours[s] == theirs.get(s) for s in ours),
            "largest_difference": max(abs(ours[s] - theirs[s]) for s in ours if s in theirs),
            "code": code_of(v, original),
        }
        out.append(
            Finding(
                "rerun", table.group, table.corpus, regime(v), name(v), name(original), None, None, None, None, detail
            )
        )
    return out


def _ablation_findings(table: Table, variants: list[Variant]) -> list[Finding]:
    done = [r.variant for r in table.rows if r.variant.done and rerun_of(r.variant, variants) is None]
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
    if ega1 is not None:
        others = [v for v in ranked if v.paper_name and v is not ega1 and v.gate != "none"]
        reads = [(pair(v, ega1), difference(v, ega1, "final_val_loss")) for v in others]
        in_paper = [v for v in ranked if v.paper_name]
        detail = {"rank": in_paper.index(ega1) + 1, "of": len(in_paper), "code": code_of(*in_paper)}
        out.append(
            judged(
                "ablation_best",
                (*where, name(ega1), None),
                reads,
                lambda *diffs: best_rule(list(diffs)),
                claim="ablation:best",
                detail=detail,
                family="ablation",
            )
        )
    for v in (v for v in ranked if v.paper_name in paper.ABLATION):
        _, against = paper.ABLATION[v.paper_name or ""]
        ref = find_reference(v, against, variants)
        d = difference(ref, v, "final_val_loss")
        rule = equivalence_rule if against == "none" else worse_rule
        out.append(
            judged(
                "ablation_pair",
                (table.group, table.corpus, regime(v, ref), name(v), name(ref) if ref else against),
                [(pair(v, ref or against), d)],
                rule,
                claim=f"ablation:{v.paper_name}",
                detail={"code": code_of(v, ref)},
                family="ablation",
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
    where = (
        table.group,
        table.corpus,
        regime(rows[0].variant, *(x for r in rows for x in (r.variant, r.baseline))),
        "EGA-1",
        "baseline",
    )
    if not seeds:
        return [Finding("context", *where, None, None, Verdict.NO_DATA, "context", {"seeds": []})]
    by_block = [(r.variant.hp("block_size"), difference(r.baseline, r.variant, metric, seeds)) for r in rows]

    def per_seed(row: Row) -> dict[int, float]:
        base, own = row.baseline.by_seed(metric), row.variant.by_seed(metric)
        return {s: base[s] - own[s] for s in seeds}

    longest, shortest = per_seed(rows[-1]), per_seed(rows[0])
    contrast = compare(longest, shortest)
    grows = all(a.estimate < b.estimate for (_, a), (_, b) in itertools.pairwise(by_block))
    code = code_of(*(x for r in rows for x in (r.variant, r.baseline)))
    detail = {"seeds": sorted(seeds), "by_block": by_block, "monotone": grows, "code": code}
    reads = [(f"context: {table.group} longest − shortest block", contrast)]
    return [judged("context", where, reads, growth_rule, claim="context", detail=detail, family="context")]


DEFAULT_TAU_INIT = 0.0  # CharLM's default: the learned-tau EGA-1 every other initialisation is paired with


def _slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of ys on xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / math.fsum((x - mx) ** 2 for x in xs)


def _tau_init_findings(table: Table) -> list[Finding]:
    """Final tau and loss by tau_init on the seeds every initialisation ran (a one-seed row beside a
    3-seed mean would put seed noise into the spread), and each initialisation paired by seed with
    the default tau_init's run. Where every tau was learned, whether tau forgets where it started
    (rules.RULES['forgets']): per seed, the slope of final tau on tau_init."""
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
    inits = [float(v.hp("tau_init")) for v in gated]
    slopes = {
        s: _slope(inits, [v.by_seed("final_tau_mean")[s] for v in gated])
        for s in sorted(seeds)
        if all(s in v.by_seed("final_tau_mean") for v in gated)
    }
    detail = {
        "seeds": sorted(seeds),
        "taus": taus,
        "tau_span": max(finals) - min(finals) if finals else None,
        "init_span": max(inits) - min(inits),
        "losses": losses,
        "loss_span": max(loss_means) - min(loss_means) if len(loss_means) > 1 else None,
        "paired": paired,
        "reference": reference.hp("tau_init") if reference else None,
        "scatter": (init, scatter) if scatter.std else None,
        "slopes": slopes,
        "code": code_of(*gated),
    }
    where = (table.group, table.corpus, regime(gated[0], *gated), "EGA-1", None)
    if not all(trained_as_in_paper(v) for v in gated) or not slopes:  # a frozen tau cannot forget anything
        return [Finding("tau_init", *where, None, paper.TAU, None, None, detail)]
    reads = [(f"tau_init slope: {table.group}", mean_interval(list(slopes.values())))]
    return [
        judged(
            "tau_init",
            where,
            reads,
            forgets_rule,
            paper_figure=paper.TAU,
            claim="tau_init",
            detail=detail,
            family="tau_init",
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
        detail["code"] = code_of(v, ref)
        against = name(ref) if ref else "learned tau (no finished run)"
        where = (table.group, table.corpus, regime(v, ref), name(v), against)
        reads = [(pair(v, ref or against), d)]
        out.append(judged("frozen_tau", where, reads, frozen_rule, claim="tau", detail=detail, family="frozen"))
    return out


DIAGNOSTICS = "diagnostics"  # the report section of measurements that test no claim


def _peer_findings(table: Table) -> list[Finding]:
    """Each peer's own claim, a lower loss than the baseline (rules.RULES['lower']); a peer with no finished run
    still counts in its family, which is declared with the study."""
    out = []
    for row in table.rows:
        v, base = row.variant, row.baseline
        if v.gate not in paper.PEERS:
            continue
        peer = paper.PEERS[v.gate]
        against = f"baseline `{base.label}`" if base else "baseline"
        where = (table.group, table.corpus, regime(v, base), f"{peer.name} `{v.label}`", against)
        reads = [(pair(v, base or "baseline"), row.diffs["final_val_loss"])]
        detail = {"source": peer.source, "code": code_of(v, base)}
        out.append(judged("peer", where, reads, lower_rule, claim=f"peer:{v.gate}", detail=detail, family="peers"))
    return out


LEADERBOARD = "leaderboard"  # the report section of the leaderboard and its positive control


def entry_name(e: Entry) -> str:
    peer = paper.PEERS.get(e.variant.gate)
    return f"{peer.name if peer else e.variant.paper_name or e.variant.gate} `{e.variant.label}`"


def control_finding(baseline: Variant | None, entries: list[Entry]) -> list[Finding]:
    """The positive control over the leaderboard (rules.RULES['control']), with the difference the protocol
    resolves at each number of paired seeds the leaderboard has."""
    if baseline is None or not entries:
        return []
    reads = [(pair(e.variant.label, f"baseline/{baseline.label}"), e.diff) for e in entries]
    level = bonferroni_level(len(reads))  # one finding reads the family: its k is its own reads
    pooled = pooled_std([e.diff for e in entries])
    ns = sorted({e.diff.n for e in entries if e.diff is not None and e.diff.low is not None})
    resolution = (
        {n: {"nominal": half_width(pooled[0], n), "family": half_width(pooled[0], n, level)} for n in ns}
        if pooled
        else {}
    )
    best = entries[0] if entries[0].diff is not None else None
    detail = {
        "threshold": paper.POSITIVE_CONTROL,
        "best": entry_name(best) if best else None,
        "pooled_std": pooled[0] if pooled else None,
        "pooled_df": pooled[1] if pooled else None,
        "resolution": resolution,
        "gates": len(entries),
        "finished": sum(e.diff is not None for e in entries),
        "code": code_of(baseline, *(e.variant for e in entries)),
    }
    where = (LEADERBOARD, baseline.corpus, regime(baseline, *(e.variant for e in entries)), "every gate", None)
    ours = best.diff if best else None
    return [judged("control", where, reads, control_rule, claim="control", detail=detail, family="control", ours=ours)]


def _leak_findings(table: Table, variants: list[Variant], evaluations: Sequence[Evaluation]) -> list[Finding]:
    """A gate z-normalised over the whole window against the paper's figure, as trained (it sees a
    little of the future); the leak's own increment over causal EGA-1 (paired by seed); and, as a
    diagnostic, the same final checkpoints evaluated with the causal prefix z."""
    out = []
    for row in table.rows:
        v, base = row.variant, row.baseline
        if not v.done or base is None or _options(v).get("znorm") != "window":
            continue
        figure = paper.IMPROVEMENT.get(table.corpus)
        causal = learned_reference(v, variants)
        where = (table.group, table.corpus, regime(v, base), name(v), f"baseline `{base.label}`")
        d = row.diffs["final_val_loss"]
        detail = {
            "causal": difference(base, causal, "final_val_loss") if causal else None,
            "causal_subject": name(causal) if causal else None,
            "code": code_of(v, base, causal),
        }
        if figure is not None:
            rule = partial(figure_rule, figure=figure)
            claim = f"improvement:{table.corpus}"
            out.append(
                judged(
                    "leak",
                    where,
                    [(pair(v, base), d)],
                    rule,
                    paper_figure=figure,
                    claim=claim,
                    detail=detail,
                    family="leak",
                )
            )
        else:
            out.append(Finding("leak", *where, d, None, None, None, detail))
        if causal is not None:
            increment = difference(causal, v, "final_val_loss")  # (baseline − leak) − (baseline − causal), by seed
            against = (table.group, table.corpus, regime(v, causal), name(v), name(causal))
            inc = Finding("leak_increment", *against, increment, None, None, None, {"code": code_of(v, causal)})
            out.append(replace(inc, family="leak", reads=((pair(v, causal), increment),)))
        seeds = {r.run.run_name: r.run.seed for r in v.done}
        prefix = [e for e in evaluations if e.run in seeds and e.final and e.eval_znorm == "prefix" and e.whole_split]
        trained = [e for e in evaluations if e.run in seeds and e.final and e.as_trained]
        evaluated = {seeds[e.run]: e.loss for e in prefix}
        baseline = base.by_seed("final_val_loss")
        d_causal = compare(baseline, evaluated) if evaluated and baseline else None

        def above(evals: list[Evaluation], key: str = "frac_above_tau") -> float | None:
            return statistics.fmean(e.mean(key) for e in evals) if evals else None

        detail = {
            "seeds": sorted(evaluated),
            "above_causal": above(prefix),
            "above_trained": above(trained),
            "normal_tail": above(trained, "normal_tail"),
            "trained_as": name(v),
        }
        out.append(
            Finding(
                "leak_causal",
                DIAGNOSTICS,
                table.corpus,
                where[2],
                name(v),
                where[4],
                d_causal,
                figure,
                None,
                None,
                detail,
            )
        )
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


def tail_findings(tables: list[Table], variants: list[Variant], evaluations: Sequence[Evaluation]) -> list[Finding]:
    """The tail identity of every gate of the ablation and of the leak audit (each set of runs once):
    one value per seed from its recorded gate summary (rules.RULES['tail']); beside it, as a figure, the heads
    of its final checkpoints that `ega landscape` evaluated as trained (a rerun's stand for its original's)."""
    chosen: dict[tuple[str, ...], Variant] = {}
    for table in tables:
        ablation = any(r.variant.paper_name in paper.ABLATION for r in table.rows)
        for v in (r.variant for r in table.rows):
            read = v.gate != "none" and v.done and (ablation or _options(v).get("znorm") == "window")
            if read and rerun_of(v, variants) is None:
                chosen.setdefault(tuple(sorted(r.run.run_name for r in v.done)), v)
    out = []
    for runs, v in chosen.items():
        values = v.by_seed("final_tail_gap")
        if not values:
            continue
        reruns = [
            w
            for w in variants
            if (o := rerun_of(w, variants)) is not None and {r.run.run_name for r in o.done} == set(runs)
        ]
        names = set(runs) | {r.run.run_name for w in reruns for r in w.done}
        heads = [e for e in evaluations if e.final and e.as_trained and e.run in names]
        gaps = [g for e in heads for g in e.tail_gaps()]
        above = v.by_seed("final_frac_above_tau")
        detail = {
            "znorm": _options(v).get("znorm", "prefix"),
            "seeds": sorted(values),
            "frac_above_tau": statistics.fmean(above[s] for s in values),
            "normal_tail": statistics.fmean(above[s] - values[s] for s in values),
            "heads": len(gaps),
            "heads_interval": mean_interval(gaps) if gaps else None,
            "heads_runs": [e.run for e in heads],
            "max_abs_gap": max((abs(g) for g in gaps), default=None),
            "code": code_of(v),
        }
        reads = [(f"tail: {v.group}/{v.label}", mean_interval(list(values.values())))]
        where = (TAU_SECTION, v.corpus, regime(v), name(v), None)
        out.append(judged("tail", where, reads, tail_rule, claim="frac_above_tau", detail=detail, family="tail"))
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
    """Which of the two explanations of a tau that does not move the data support (rules.RULES['mechanism'])."""
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
    verdict = mechanism_rule([f.verdict for f in frozen], minimum)
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
    frozen_runs = [r for v in variants if not _options(v).get("learn_tau", True) for r in v.done]
    regime_text = f"EGA-1 final checkpoints ({len(ega1)}) and frozen-tau runs, at {scale(frozen_runs)}"
    # undecided for want of a frozen-tau verdict: the seeds that the slowest of them needs
    needed = [f.seeds_needed for f in frozen if f.verdict is Verdict.TOO_FEW_SEEDS]
    seeds = max(needed) if verdict is Verdict.TOO_FEW_SEEDS and needed and None not in needed else None
    return [
        Finding(
            "tau_mechanism",
            TAU_SECTION,
            corpus,
            regime_text,
            "EGA-1",
            None,
            None,
            paper.TAU,
            verdict,
            "tau",
            detail,
            seeds_needed=seeds,
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


def seeds_needed(f: Finding) -> int | None:
    """For an undecided verdict: the paired seeds at which its rule would decide (`rules.seeds_to_decide`),
    None when it cannot be projected (no rule, one seed, an unpaired interval)."""
    if f.verdict is not Verdict.TOO_FEW_SEEDS or f.rule is None or not f.reads:
        return None
    level = f.corrected.level if f.corrected is not None else LEVEL
    return seeds_to_decide(f.rule, [d for _, d in f.reads], level)


def correct(found: list[Finding]) -> list[Finding]:
    """Every finding of a family at the family's Bonferroni level: its intervals widened to 1 − 0.05 / k,
    k the distinct comparisons the family reads (in one section and corpus), its verdict re-read from
    them; the nominal verdict is kept in ``detail``. Then each undecided verdict's seeds_needed."""
    families: dict[tuple[str, str, str], set[str]] = {}
    for f in found:
        if f.family is not None:
            families.setdefault((f.family, f.section, f.corpus), set()).update(key for key, _ in f.reads)
    out = []
    for f in found:
        if f.family is not None:
            k = len(families[(f.family, f.section, f.corpus)])
            level = bonferroni_level(k)
            wide = [widen(d, level) for _, d in f.reads]
            nominal = f.verdict.value if f.verdict is not None else None
            verdict = f.rule(*wide) if f.rule is not None else None
            corrected = wide[0] if len(wide) == 1 else None
            detail = {**f.detail, "family_k": k, "family_level": level, "nominal_verdict": nominal}
            detail["seeds_nominal"] = seeds_needed(f)  # f is still the nominal finding here
            f = replace(f, verdict=verdict, corrected=corrected, detail=detail)
        out.append(replace(f, seeds_needed=seeds_needed(f)))
    return out


def findings(tables: list[Table], variants: list[Variant], evaluations: Sequence[Evaluation] = ()) -> list[Finding]:
    """Every finding, section by section; a comparison shared by sections (``also_in``) is made once.
    ``evaluations``: the checkpoints `ega landscape` evaluated (the leak audit's causal evaluation,
    the heads beside the tail identity, the tau mechanism). Families are corrected (`correct`) before
    the tau mechanism reads the frozen-tau verdicts."""
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
        out += _rerun_findings(table, variants) + _peer_findings(table)
    out += control_finding(*leaderboard(variants))
    out = correct(out + tail_findings(tables, variants, evaluations))
    return out + mechanism_finding(out, evaluations, variants)


def claims(found: list[Finding]) -> list[tuple[paper.Claim, Finding | None]]:
    """One row per claim of the paper and regime it was measured in; a claim nothing measured gets None."""
    rows: list[tuple[paper.Claim, Finding | None]] = []
    for claim in paper.CLAIMS:
        matching = [f for f in found if f.claim == claim.key]
        rows += [(claim, f) for f in matching] if matching else [(claim, None)]
    return rows
