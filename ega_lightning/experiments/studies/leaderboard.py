"""The leaderboard and its positive control: every gate at the TinyShakespeare cpu size side by side (the EGA
ablation of configs/sweeps/short.yaml and its peers of configs/sweeps/peers.yaml), each against the baseline,
its runs pooled over every section that shows its configuration; and whether any gate reaches half the
paper's gain here (rules.control_rule), with the smallest difference the protocol resolves."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ega_lightning.config_files import SIZE_KEYS
from ega_lightning.experiments import paper, plots, prose
from ega_lightning.experiments.comparisons import Variant, difference, reference
from ega_lightning.experiments.findings import Finding, Where, code_of, judged, measured_with, pair
from ega_lightning.experiments.stats import Difference, bonferroni_level, half_width, pooled_std, widen
from ega_lightning.experiments.studies.cost import Bench, Timed, timed_gates
from ega_lightning.experiments.study import Drawn, Figure, ReportInputs, Study
from ega_lightning.experiments.text import fmt_interval, how, interval_cell, interval_text, num

LEADERBOARD = "leaderboard"  # the report section of the leaderboard and its positive control
LEADERBOARD_CORPUS = "tinyshakespeare"
LEADERBOARD_GROUPS = ("ablation", "peers")  # the spec groups it reads, as its `STUDY` declares them


@dataclass
class Entry:
    """One gate of the leaderboard: its runs pooled over every section that shows its configuration."""

    variant: Variant  # pooled (group "leaderboard")
    groups: list[str]  # the sections it comes from
    diff: Difference | None  # baseline − gate, final val loss, paired by seed
    params_added: int | None  # its parameters minus the baseline's, both as their records count them
    timed: Timed | None  # its step time over the baseline's, from `ega bench` at the leaderboard's size
    band: int | None = None  # its rank band (`rank_bands`); None: no difference to rank by

    @property
    def name(self) -> str:
        peer = paper.PEERS.get(self.variant.gate)
        return f"{peer.name if peer else self.variant.paper_name or self.variant.gate} `{self.variant.label}`"


Board = tuple[Variant | None, list[Entry]]  # the pooled baseline and the leaderboard (`leaderboard`)


def same_configuration(v: Variant, variants: list[Variant]) -> list[Variant]:
    """The variants of every section that show ``v``'s configuration (label, gate and setup), ``v`` among them."""
    return [x for x in variants if (x.label, x.corpus, x.gate, x.setup_key) == (v.label, v.corpus, v.gate, v.setup_key)]


def pooled(v: Variant, variants: list[Variant]) -> Variant:
    """``v`` with the runs of every section that shows its configuration: EGA-1 of the ablation (seeds
    1-3) takes the main table's seeds 4-5 too. One run listed by two sections counts once."""
    runs = {r.run.run_name: r for x in same_configuration(v, variants) for r in x.runs}
    return Variant("leaderboard", v.corpus, v.label, list(runs.values()))


def leaderboard(variants: list[Variant], found: Sequence[Bench] = ()) -> Board:
    """The pooled baseline and one entry per gate configuration of `LEADERBOARD_GROUPS` on its corpus, largest
    baseline − gate first (gates without a difference last, in spec order). A finished gate trained in
    another setup than the baseline (model, data, steps) is left out: it measures something else. Step
    times come from the `ega bench` results ``found`` at the baseline's shape, not from the runs: the sweep's
    runs share the machine, so their throughput measures the machine's load as much as the gate."""
    listed = [v for v in variants if v.group in LEADERBOARD_GROUPS and v.corpus == LEADERBOARD_CORPUS and v.gated]
    first = next((r for v in listed if (r := reference(v, variants)) is not None), None)
    baseline = pooled(first, variants) if first is not None else None
    shape = {k: baseline.hp(k) for k in SIZE_KEYS} if baseline else {}  # `ega bench` names a size by shape and batch
    timed = timed_gates(list(found), shape, baseline.hp("batch_size")) if baseline else {}
    entries: dict[str, Entry] = {}
    for v in listed:
        if v.label in entries or (v.done and baseline is not None and reference(v, [baseline]) is None):
            continue
        own = pooled(v, variants)
        from_groups = [x.group for x in same_configuration(v, variants)]
        base_params = baseline.n_params if baseline is not None else None
        added = own.n_params - base_params if own.n_params is not None and base_params is not None else None
        diff = difference(baseline, own, "final_val_loss")
        entries[v.label] = Entry(own, list(dict.fromkeys(from_groups)), diff, added, timed.get(v.label))
    ranked = sorted(entries.values(), key=lambda e: -e.diff.estimate if e.diff is not None else math.inf)
    rank_bands(ranked)
    return baseline, ranked


def rank_bands(ranked: list[Entry]) -> None:
    """Sets each ranked entry's band: walking down from the best, a gate joins the current band while its paired
    difference to the band's first gate includes 0 at the control family's level (k: the gates ranked), else it
    opens the next band. Gates without a difference get none."""
    known = [e for e in ranked if e.diff is not None]
    level = bonferroni_level(len(known))
    band, first = 0, None
    for e in known:
        if first is not None:
            d = widen(difference(e.variant, first.variant, "final_val_loss"), level)  # gate − first: > 0, first better
            if d is None or d.low is None or d.high is None or d.low > 0 or d.high < 0:
                first = None
        if first is None:
            band, first = band + 1, e
        e.band = band


def paired_seeds(baseline: Variant, v: Variant) -> list[int]:
    metric = "final_val_loss"
    return sorted(set(baseline.by_seed(metric)) & set(v.by_seed(metric)))


# ----------------------------------------------------------------------------- the positive control


@dataclass(frozen=True)
class Resolution:
    """The half-width of a paired interval over n seeds with the leaderboard's pooled std."""

    nominal: float  # at 95%
    family: float  # at the control family's level


@dataclass(frozen=True, kw_only=True)
class Control(Finding):
    """Some gate of the leaderboard with its whole interval of baseline − gate above the threshold."""

    kind: ClassVar[str] = "control"
    measures: ClassVar[tuple[str, ...]] = ("control",)
    threshold: float
    best: str | None  # the gate with the largest difference
    pooled_std: float | None  # of the per-seed differences of every gate
    pooled_df: int | None
    resolution: dict[int, Resolution]  # paired seeds n -> the difference the protocol resolves
    gates: int
    finished: int  # gates with finished runs


def _resolution(f: Control) -> str:
    """The smallest difference the positive control's protocol resolves, at each number of paired seeds."""
    if not f.resolution:
        return "no gate has two paired seeds: no resolution yet"
    nominal = ", ".join(f"±{num(h.nominal)} at {n} seeds" for n, h in f.resolution.items())
    family = ", ".join(f"±{num(h.family)} at {n}" for n, h in f.resolution.items())
    at_family = f"; at the family's {prose.level(f)}: {family}" if f.family_level is not None else ""
    return f"resolves {nominal} (95%, pooled paired std {num(f.pooled_std, 4)}){at_family}"


@prose.measured.register
def say_control(f: Control) -> str:
    best = f"the best, {f.best}: {interval_text(f.interval)}" if f.best else "no gate finished"
    return (
        f"Positive control over the {f.gates} gates of the leaderboard ({f.finished} with finished runs), "
        f"threshold {f.threshold:+.4f}: {best}; {_resolution(f)}{prose.verdict_text(f)}."
    )


@prose.ours_cell.register
def control_cell(f: Control) -> str:
    best = f"best: {f.best} {fmt_interval(f.interval)}, {how(f.interval)}" if f.best else "—"
    return f"{best}; {_resolution(f)}"


@prose.claim_subject.register
def control_subject(f: Control) -> str:
    return f"{f.finished} of {f.gates} leaderboard gates with finished runs"


def control_finding(baseline: Variant | None, entries: list[Entry]) -> list[Finding]:
    """The positive control over the leaderboard (rules.PROSE['control']), with the difference the protocol
    resolves at each number of paired seeds the leaderboard has."""
    if baseline is None or not entries:
        return []
    reads = [(pair(e.variant.label, f"baseline/{baseline.label}"), e.diff) for e in entries]
    level = bonferroni_level(len(reads))  # one finding reads the family: its k is its own reads
    pooled = pooled_std([e.diff for e in entries])
    ns = sorted({e.diff.n for e in entries if e.diff is not None and e.diff.low is not None})
    resolution = (
        {n: Resolution(half_width(pooled[0], n), half_width(pooled[0], n, level)) for n in ns} if pooled else {}
    )
    best = entries[0] if entries[0].diff is not None else None
    measured = {
        "threshold": paper.POSITIVE_CONTROL,
        "best": best.name if best else None,
        "pooled_std": pooled[0] if pooled else None,
        "pooled_df": pooled[1] if pooled else None,
        "resolution": resolution,
        "gates": len(entries),
        "finished": sum(e.diff is not None for e in entries),
        "code": code_of(baseline, *(e.variant for e in entries), compared=[(baseline, e.variant) for e in entries]),
    }
    where = Where(
        LEADERBOARD, baseline.corpus, measured_with(baseline, *(e.variant for e in entries)), "every gate", None
    )
    ours = best.diff if best else None
    return [judged(Control, where, reads, claim="control", family="control", ours=ours, **measured)]


# ----------------------------------------------------------------------------- the section's words and table


def describe(baseline: Variant) -> str:
    """What the leaderboard shows, as its section opens."""
    return (
        f"Every gate of the sections {', '.join(LEADERBOARD_GROUPS)} on {baseline.corpus} against the baseline "
        f"`{baseline.label}` ({len(baseline.done)} finished seeds), each gate's runs pooled over every section "
        "that shows its configuration; sorted by baseline − gate, largest first. The step time is `ega bench`'s at "
        "the baseline's model size and batch, on an idle machine (median of the per-repetition ratios to the "
        "baseline, quartiles in brackets; its table linked): the sweep's runs shared the machine, so their own "
        "throughput is no measure of a gate's cost. — where no bench timed the gate. Rank bands: walking down "
        "from the best, a gate joins the current band while its paired difference to the band's first gate "
        "includes 0 at the control family's level (each interval at 1 − 0.05/k, k the gates ranked), else it opens "
        "the next band; gates of one band are not told apart by these seeds."
    )


TABLE_HEAD = (
    "| rank | band | gate | from | seeds paired | baseline − gate [95% CI] | half-width | params added | step time × "
    "(gate / baseline, `ega bench`) |\n|---:|---:|---|---|---|---|---:|---:|---|"
)


def table_line(rank: int, e: Entry, baseline: Variant) -> str:
    """One gate as a row of the leaderboard table."""
    d = e.diff
    seeds = paired_seeds(baseline, e.variant)
    cells = [
        str(rank) if d is not None else "—",
        str(e.band) if e.band is not None else "—",
        e.name,
        ", ".join(e.groups),
        f"{len(seeds)} ({', '.join(map(str, seeds))})" if seeds else f"0 of {len(e.variant.runs)} finished",
        interval_cell(d),
        num((d.high - d.low) / 2) if d is not None and d.low is not None and d.high is not None else "—",
        f"{e.params_added:+,}" if e.params_added is not None else "—",
        f"[{e.timed.cell()}]({e.timed.source})" if e.timed is not None else "—",
    ]
    return "| " + " | ".join(cells) + " |"


def leaderboard_section(inputs: ReportInputs, board: Board, found: Sequence[Finding], drawn: Drawn) -> list[str]:
    """Every gate at the TinyShakespeare cpu size against the baseline, best first, and the positive control."""
    baseline, entries = board
    if baseline is None or not entries:
        return []
    lines = [
        f"## {LEADERBOARD}",
        "",
        describe(baseline),
        "",
        *(f"- {prose.sentence(f)}" for f in found if f.section == LEADERBOARD),
        "",
        TABLE_HEAD,
        *(table_line(i, e, baseline) for i, e in enumerate(entries, 1)),
        "",
    ]
    for caption, file in drawn:
        lines += [f"![{caption}]({file})", ""]
    return lines


def board_figure(inputs: ReportInputs, board: Board) -> list[Figure]:
    """(caption, file name, figure): every finished gate of the leaderboard with its 95% interval."""
    shown = [(e.variant.label, e.diff) for e in board[1] if e.diff is not None]
    if not shown:
        return []
    points = [(label, d.estimate, d.low, d.high) for label, d in shown]
    fig = plots.leaderboard_figure(
        points,
        paper.POSITIVE_CONTROL,
        paper.IMPROVEMENT[LEADERBOARD_CORPUS],
        f"{LEADERBOARD_CORPUS}: baseline − gate (final val loss, paired by seed)",
    )
    return [("leaderboard", f"{LEADERBOARD}-{LEADERBOARD_CORPUS}.png", fig)]


def as_json(inputs: ReportInputs, board: Board) -> dict[str, Any] | None:
    """The leaderboard as results.json holds it (None without a baseline)."""
    baseline, entries = board
    if baseline is None:
        return None
    return {
        "baseline": {"variant": baseline.label, "seeds": sorted(baseline.by_seed("final_val_loss"))},
        "rows": [
            {
                "variant": e.variant.label,
                "gate": e.variant.gate,
                "name": e.name,
                "groups": e.groups,
                "runs": [r.run.run_name for r in e.variant.runs],
                "seeds_paired": paired_seeds(baseline, e.variant),
                "diff_final_val_loss": e.diff,
                "params_added": e.params_added,
                "step_time_ratio": e.timed,
                "band": e.band,
            }
            for e in entries
        ],
    }


STUDY = Study(
    "leaderboard",
    groups=LEADERBOARD_GROUPS,
    measure=lambda inputs: leaderboard(list(inputs.variants), inputs.benches),
    findings=lambda inputs, board, read: control_finding(*board),
    section=leaderboard_section,
    section_first=True,
    figures=board_figure,
    json=as_json,
)
