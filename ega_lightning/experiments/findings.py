"""Findings: what the runs say about each claim of the paper, as data (no prose, no I/O).

Every verdict comes from one decision rule below, applied here and nowhere else; the report's
method note states the same rules (:data:`RULES`). All intervals are 95% Student-t intervals of
differences paired by seed over the seeds both sides share (see `stats.compare`).
"""

from __future__ import annotations

import enum
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from ega_lightning.experiments import paper
from ega_lightning.experiments.comparisons import Row, Table, Variant, difference, find_reference
from ega_lightning.experiments.stats import LEVEL, Difference, Summary, compare, mean_interval

MARGIN = 0.02  # nats/char: differences whose whole interval lies within ±MARGIN count as "about equal"


class Verdict(enum.Enum):
    REPRODUCED = "reproduced"
    NOT_REPRODUCED = "not reproduced"
    TOO_FEW_SEEDS = "too few seeds to tell"
    CONSISTENT = "consistent"
    NOT_CONSISTENT = "not consistent"
    HOLDS = "holds"
    DOES_NOT_HOLD = "does not hold"
    NO_DATA = "no finished runs"


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


def _tau_init_findings(table: Table) -> list[Finding]:
    gated = [r.variant for r in table.rows if r.variant.gate != "none" and r.variant.done]
    if len({v.hp("tau_init") for v in gated}) < 2:
        return []
    taus = [(v.hp("tau_init"), name(v), v.summary("final_tau_mean")) for v in gated]
    losses = [(v.hp("tau_init"), v.summary("final_val_loss")) for v in gated]
    finals = [s.mean for _, _, s in taus if s.mean is not None]
    loss_means = [s.mean for _, s in losses if s.mean is not None]
    # the only yardstick for single-seed rows: how far seeds of one initialisation scatter
    init, scatter = max(losses, key=lambda pair: pair[1].n)
    detail = {
        "taus": taus,
        "tau_span": max(finals) - min(finals) if finals else None,
        "losses": losses,
        "loss_span": max(loss_means) - min(loss_means) if len(loss_means) > 1 else None,
        "scatter": (init, scatter) if scatter.std else None,
    }
    return [
        Finding(
            "tau_init", table.group, table.corpus, regime(gated[0]), "EGA-1", None, None, paper.TAU, None, None, detail
        )
    ]


def primary_rows(table: Table) -> list[Row]:
    """EGA-1 against its baseline where a section is a head-to-head (one EGA-1 row): the main
    comparison of each regime; sections with several EGA-1 rows are studies (context, tau_init)."""
    linear = [r for r in table.rows if r.variant.gate == "linear" and r.variant.done]
    return [r for r in linear if r.baseline is not None] if len(linear) == 1 else []


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


def findings(tables: list[Table], variants: list[Variant]) -> list[Finding]:
    """Every finding, section by section; a comparison shared by sections (``also_in``) is made once."""
    out: list[Finding] = []
    said: set[tuple[str, ...]] = set()
    for table in tables:
        for row in primary_rows(table):
            compared = tuple(sorted(r.run.run_name for r in [*row.variant.done, *row.baseline.done]))
            if compared not in said:
                said.add(compared)
                out += _ega1_findings(table, row)
        out += _ablation_findings(table, variants) + _tau_init_findings(table) + _context_findings(table)
    return out


def claims(found: list[Finding]) -> list[tuple[paper.Claim, Finding | None]]:
    """One row per claim of the paper and regime it was measured in; a claim nothing measured gets None."""
    rows: list[tuple[paper.Claim, Finding | None]] = []
    for claim in paper.CLAIMS:
        matching = [f for f in found if f.claim == claim.key]
        rows += [(claim, f) for f in matching] if matching else [(claim, None)]
    return rows
