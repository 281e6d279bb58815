"""The leaderboard and its positive control: every gate at the TinyShakespeare cpu size side by side, each against the
baseline, its runs pooled over every section that shows its configuration; and whether any gate reaches half the
paper's gain here (rules.control_rule), with the smallest difference the protocol resolves. Which gates it ranks
is the protocol's: the spec groups of the families its `leaderboard:` names (the EGA ablation of
configs/sweeps/short.yaml and its peers of configs/sweeps/peers.yaml), which the control reads, and the gates of
each family whose own entry says `leaderboard: true` (a user's gate), each against the reference its comparison
names and outside the control. Beside it, once the
RoPE study (configs/sweeps/rope.yaml) is in the report, a second board: each of its designs against the RoPE
baseline the study names, ranked the same way (no control reads it)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ega_lightning.config_files import SIZE_KEYS
from ega_lightning.experiments import engine, paper, plots, protocol
from ega_lightning.experiments.bench import Bench, Timed, timed_gates
from ega_lightning.experiments.comparisons import Variant, difference, reference
from ega_lightning.experiments.findings import Finding, Where, code_of, measured_with
from ega_lightning.experiments.stats import Difference, bonferroni_level, half_width, pooled_std, widen
from ega_lightning.experiments.studies import rope
from ega_lightning.experiments.study import Drawn, Figure, ReportInputs, Study
from ega_lightning.experiments.text import interval_cell, num

LEADERBOARD = "leaderboard"  # the report section of the leaderboard and its positive control
LEADERBOARD_CORPUS = "tinyshakespeare"


def control_groups() -> tuple[str, ...]:
    """The spec groups whose gates the leaderboard ranks against its pooled baseline and the positive control
    reads: those of the comparisons' x of each family the protocol's `leaderboard:` names."""
    p = protocol.current()
    return tuple(dict.fromkeys(c.group for family in p.leaderboard for c in p.comparisons.get(family, ())))


def own_references() -> dict[tuple[str, str], str]:
    """(group, variant) of each gate a family ranks with `leaderboard: true` -> the reference its comparison names."""
    p = protocol.current()
    return {
        (c.group, c.label): c.y
        for name, family in p.families.items()
        if family.leaderboard
        for c in p.comparisons.get(name, ())
        if c.y is not None
    }


@dataclass
class Entry:
    """One gate of the leaderboard: its runs pooled over every section that shows its configuration."""

    variant: Variant  # pooled (group "leaderboard")
    groups: list[str]  # the sections it comes from
    diff: Difference | None  # baseline − gate, final val loss, paired by seed
    params_added: int | None  # its parameters minus the baseline's, both as their records count them
    timed: Timed | None  # its step time over the baseline's, from `ega bench` at the leaderboard's size
    band: int | None = None  # its rank band (`rank_bands`); None: no difference to rank by
    against: Variant | None = None  # the reference its family names (`own_references`); None: the board's baseline

    @property
    def name(self) -> str:
        peer = paper.PEERS.get(self.variant.gate)
        return f"{peer.name if peer else self.variant.paper_name or self.variant.gate} `{self.variant.label}`"


Board = tuple[Variant | None, list[Entry]]  # the pooled baseline and the leaderboard (`leaderboard`)


@dataclass(frozen=True)
class Panel:
    """One board of the leaderboard: the designs it ranks, what they are set against, and the benches that time
    them."""

    name: str  # its panel of the figure, and the sub-heading of its table where it has one
    designs: Callable[[Variant], bool]  # the variants it ranks
    # its reference, as `comparisons.reference` reads them (None: the gate-less variant of the same setup)
    named: Callable[[Variant], bool] | None = None
    apart_from: tuple[str, ...] = ()  # the recipe keys a design may differ in from its reference
    position: str = "learned"  # the position encoding of the benches that time it (`bench.bench_position`)
    # the row of such a bench that times a design (None: none can); the learned board's labels are gate configs
    bench_row: Callable[[Variant], str | None] = lambda v: v.label


LEARNED = Panel(
    "learned positions",
    lambda v: (
        v.corpus == LEADERBOARD_CORPUS
        and v.gated
        and (v.group in control_groups() or (v.group, v.label) in own_references())
    ),
)
ROPE = Panel(
    "RoPE baseline",
    lambda v: v.group == rope.GROUP and v.corpus == LEADERBOARD_CORPUS and v.label in rope.DESIGNS,
    named=rope.is_reference,
    # the study asks whether a design, its position signal part of it, beats the RoPE model: FoX and ALiBi without
    # positions are set against it on purpose (the protocol's family `rope`)
    apart_from=("position",),
    position="rope",
    # `ega bench --position rope` runs every model with RoPE: its rows (gate configs) time the RoPE designs alone
    bench_row=lambda v: v.gate if v.hp("position") == "rope" else None,
)


@dataclass(frozen=True)
class Boards:
    """What the leaderboard measures: the board of learned positions (the positive control's) and the RoPE one."""

    learned: Board
    rope: Board


def same_configuration(v: Variant, variants: list[Variant]) -> list[Variant]:
    """The variants of every section that show ``v``'s configuration (label, gate and setup), ``v`` among them."""
    return [x for x in variants if (x.label, x.corpus, x.gate, x.setup_key) == (v.label, v.corpus, v.gate, v.setup_key)]


def pooled(v: Variant, variants: list[Variant]) -> Variant:
    """``v`` with the runs of every section that shows its configuration: EGA-1 of the ablation (seeds
    1-3) takes the main table's seeds 4-5 too. One run listed by two sections counts once."""
    runs = {r.run.run_name: r for x in same_configuration(v, variants) for r in x.runs}
    return Variant("leaderboard", v.corpus, v.label, list(runs.values()))


def leaderboard(variants: list[Variant], found: Sequence[Bench] = (), panel: Panel = LEARNED) -> Board:
    """The pooled baseline and one entry per design of ``panel`` (by default every gate the protocol ranks on its
    corpus, `control_groups` and `own_references`), largest baseline − design first (those without a difference
    last, in spec order). A finished design trained in another setup than the baseline (model, data, steps) is left
    out: it measures something else. A gate its own family ranks is set against the reference that family names,
    and its family's variants pool into no other: a user's baseline runs are not the board's. Step times come from
    the `ega bench` results ``found`` at the baseline's shape and position, not from the runs: the sweep's runs
    share the machine, so their throughput measures the machine's load as much as the gate."""
    listed = [v for v in variants if panel.designs(v)]
    named = own_references() if panel is LEARNED else {}
    own_groups = {g for key, y in named.items() for g in (key[0], y.split("/", 1)[0])}
    shared = [v for v in variants if v.group not in own_groups]  # what the board's baseline and its gates pool

    def reference_of(v: Variant, among: Sequence[Variant]) -> Variant | None:
        return reference(v, among, panel.named, panel.apart_from)

    first = next((r for v in listed if v.group not in own_groups and (r := reference_of(v, shared)) is not None), None)
    baseline = pooled(first, shared) if first is not None else None
    shape = {k: baseline.hp(k) for k in SIZE_KEYS} if baseline else {}  # `ega bench` names a size by shape and batch
    timed = timed_gates(list(found), shape, baseline.hp("batch_size"), panel.position) if baseline else {}
    entries: dict[str, Entry] = {}
    for v in listed:
        y = named.get((v.group, v.label))
        against = next((x for x in variants if f"{x.group}/{x.label}" == y and x.corpus == v.corpus), None)
        base = against if y is not None else baseline
        if v.label in entries or (
            y is None and v.done and baseline is not None and reference_of(v, [baseline]) is None
        ):
            continue
        pool = variants if y is not None else shared
        own = pooled(v, pool)
        from_groups = [x.group for x in same_configuration(v, pool)]
        base_params = base.n_params if base is not None else None
        added = own.n_params - base_params if own.n_params is not None and base_params is not None else None
        diff = difference(base, own, "final_val_loss")
        row = panel.bench_row(v)
        timing = timed.get(row) if row else None
        entries[v.label] = Entry(own, list(dict.fromkeys(from_groups)), diff, added, timing, against=against)
    ranked = sorted(entries.values(), key=lambda e: -e.diff.estimate if e.diff is not None else math.inf)
    # the bands read the control family's level (its `reads:`): k its gates with a difference, a family's own not
    rank_bands(ranked, sum(e.diff is not None and e.against is None for e in ranked))
    return baseline, ranked


def measure(variants: list[Variant], found: Sequence[Bench] = ()) -> Boards:
    """Both boards of the leaderboard, each ranked and banded on its own."""
    return Boards(leaderboard(variants, found, LEARNED), leaderboard(variants, found, ROPE))


def rank_bands(ranked: list[Entry], k: int) -> None:
    """Sets each ranked entry's band: walking down from the best, a gate joins the current band while its paired
    difference to the band's first gate includes 0 at 1 − 0.05/k (k: the gates of the control family ranked on
    this board, the family's level; the RoPE board's: its own), else it opens the next band. Gates without a
    difference get none."""
    known = [e for e in ranked if e.diff is not None]
    level = bonferroni_level(k)
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


def control_finding(baseline: Variant | None, entries: list[Entry]) -> list[Finding]:
    """The positive control over the leaderboard (rules.PROSE['control']), with the difference the protocol
    resolves at each number of paired seeds the leaderboard has."""
    entries = [e for e in entries if e.against is None]  # its family as registered: a family's own gates are not in it
    if baseline is None or not entries:
        return []
    # each read named as its value is taken: the baseline's loss minus the gate's
    reads = [(f"baseline/{baseline.label} − {e.variant.label}", e.diff) for e in entries]
    level = bonferroni_level(len(reads))  # one finding reads the family: its k is its own reads
    pooled = pooled_std([e.diff for e in entries])
    ns = sorted({e.diff.n for e in entries if e.diff is not None and e.diff.low is not None})
    resolution = (
        {n: Resolution(half_width(pooled[0], n), half_width(pooled[0], n, level)) for n in ns} if pooled else {}
    )
    best = entries[0] if entries[0].diff is not None else None
    details = {  # results.json's keys; best_family: the best gate's interval at the family's level, once read
        "threshold": paper.POSITIVE_CONTROL,
        "best": best.name if best else None,
        "pooled_std": pooled[0] if pooled else None,
        "pooled_df": pooled[1] if pooled else None,
        "resolution": resolution,
        "gates": len(entries),
        "finished": sum(e.diff is not None for e in entries),
        "best_family": None,
    }
    code = code_of(baseline, *(e.variant for e in entries), compared=[(baseline, e.variant) for e in entries])
    where = Where(
        LEADERBOARD, baseline.corpus, measured_with(baseline, *(e.variant for e in entries)), "every gate", None
    )
    # its interval, the first read, is the best gate's: entries come ranked, those with a difference first
    claim, _ = engine.PAPER["control"](baseline.corpus)
    return [engine.judge("control", where, reads, claim=claim, family="control", code=code, details=details)]


# ----------------------------------------------------------------------------- the section's words and table


def describe(baseline: Variant, entries: list[Entry]) -> str:
    """What the leaderboard shows, as its section opens."""
    groups = [g for g in control_groups() if any(g in e.groups for e in entries if e.against is None)]
    own = [f"`{e.variant.label}`" for e in entries if e.against is not None]
    others = (
        f" The gates {', '.join(own)} are ranked by their own family (the protocol's `leaderboard: true`), each "
        "against the reference it names (the seeds paired with it), banded with the others at the control "
        "family's level and outside the positive control."
        if own
        else ""
    )
    return (
        f"Every gate of the sections {', '.join(groups)} on {baseline.corpus} against the baseline "
        f"`{baseline.label}` ({len(baseline.done)} finished seeds), each gate's runs pooled over every section "
        "that shows its configuration; sorted by baseline − gate, largest first. The step time is `ega bench`'s at "
        "the baseline's model size and batch, on an idle machine (median of the per-repetition ratios to the "
        "baseline, quartiles in brackets; its table linked): the sweep's runs shared the machine, so their own "
        "throughput is no measure of a gate's cost. — where no bench timed the gate. Rank bands: walking down "
        "from the best, a gate joins the current band while its paired difference to the band's first gate "
        "includes 0 at the control family's level (each interval at 1 − 0.05/k, k the gates ranked), else it opens "
        f"the next band; gates of one band are not told apart by these seeds.{others}"
    )


def table_head(design: str = "gate", baseline: str = "baseline", bench: str = "`ega bench`") -> str:
    """The leaderboard table's head, naming what a board ranks and what against."""
    return (
        f"| rank | band | {design} | from | seeds paired | {baseline} − {design} [95% CI] | half-width | params added "
        f"| step time × ({design} / {baseline}, {bench}) |\n|---:|---:|---|---|---|---|---:|---:|---|"
    )


def describe_rope(baseline: Variant, ranked: int) -> str:
    """What the RoPE board shows, as its sub-section opens: one sentence."""
    return (
        f"Each design of the RoPE study (section {rope.GROUP}) on {baseline.corpus} against the RoPE baseline "
        f"`{baseline.label}` ({len(baseline.done)} finished seeds), the reference the study names, never a "
        "learned-position baseline, ranked and banded as above with k its own ranked designs "
        f"(k = {ranked}), its step time from an `ega bench --position rope` at the baseline's size (— where none "
        "timed the design at its own position encoding)."
    )


def table_line(rank: int, e: Entry, baseline: Variant) -> str:
    """One gate as a row of the leaderboard table."""
    d = e.diff
    seeds = paired_seeds(e.against or baseline, e.variant)
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


def rope_lines(board: Board) -> list[str]:
    """The RoPE board under its own sub-heading; nothing before the report reads a finished RoPE baseline."""
    baseline, entries = board
    if baseline is None or not entries:
        return []
    ranked = sum(e.diff is not None for e in entries)
    return [
        f"### {ROPE.name}",
        "",
        describe_rope(baseline, ranked),
        "",
        table_head("design", "RoPE baseline", "`ega bench --position rope`"),
        *(table_line(i, e, baseline) for i, e in enumerate(entries, 1)),
        "",
    ]


def leaderboard_section(inputs: ReportInputs, boards: Boards, found: Sequence[Finding], drawn: Drawn) -> list[str]:
    """Every gate at the TinyShakespeare cpu size against the baseline, best first, and the positive control; then
    the RoPE board where the report has one."""
    baseline, entries = boards.learned
    rope_board = rope_lines(boards.rope)
    if (baseline is None or not entries) and not rope_board:
        return []
    lines = [f"## {LEADERBOARD}", ""]
    if baseline is not None and entries:
        lines += [
            describe(baseline, entries),
            "",
            *(f"- {engine.sentence(f)}" for f in found if f.section == LEADERBOARD),
            "",
            table_head(),
            *(table_line(i, e, baseline) for i, e in enumerate(entries, 1)),
            "",
        ]
    lines += rope_board
    for caption, file in drawn:
        lines += [f"![{caption}]({file})", ""]
    return lines


def points(board: Board) -> list[plots.Point]:
    """Every finished design of a board with its 95% interval, best first."""
    return [(e.variant.label, e.diff.estimate, e.diff.low, e.diff.high) for e in board[1] if e.diff is not None]


def board_figure(inputs: ReportInputs, boards: Boards) -> list[Figure]:
    """(caption, file name, figure): every finished gate of the leaderboard with its 95% interval; the RoPE board's
    designs in a panel beside it where one has finished."""
    drawn = ((LEARNED, boards.learned, paper.POSITIVE_CONTROL), (ROPE, boards.rope, None))  # the control reads one
    panels: list[plots.Panel] = [(p.name, shown, control) for p, board, control in drawn if (shown := points(board))]
    if not panels:
        return []
    fig = plots.leaderboard_figure(
        panels,
        paper.IMPROVEMENT[LEADERBOARD_CORPUS],
        f"{LEADERBOARD_CORPUS}: baseline − gate (final val loss, paired by seed)",
    )
    return [("leaderboard", f"{LEADERBOARD}-{LEADERBOARD_CORPUS}.png", fig)]


def as_json(inputs: ReportInputs, boards: Boards) -> dict[str, Any] | None:
    """The leaderboard as results.json holds it, the RoPE board under ``rope`` where it has entries (None without
    either)."""
    learned, rope_board = board_json(boards.learned), board_json(boards.rope)
    if rope_board is None or not rope_board["rows"]:
        return learned
    return {**(learned or {}), "rope": rope_board}


def board_json(board: Board) -> dict[str, Any] | None:
    """One board as results.json holds it (None without a baseline)."""
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
                "seeds_paired": paired_seeds(e.against or baseline, e.variant),
                "diff_final_val_loss": e.diff,
                "params_added": e.params_added,
                "step_time_ratio": e.timed,
                "band": e.band,
            }
            | ({"against": f"{e.against.group}/{e.against.label}"} if e.against is not None else {})
            for e in entries
        ],
    }


STUDY = Study(
    "leaderboard",
    families=("control",),
    measure=lambda inputs: measure(list(inputs.variants), inputs.benches),
    # the protocol registered the control on the learned board: the RoPE one neither joins its family nor its k
    findings=lambda inputs, boards, read: control_finding(*boards.learned),
    section=leaderboard_section,
    section_first=True,
    figures=board_figure,
    json=as_json,
)
