"""The engine: a study is data. The registered protocol states each family's comparisons (configs/protocol.yaml,
the amendment of issue 69 or a family's own `comparisons:`); this module reads them and takes records to findings.

Design. Each comparison is "x against y" by variant (spec group / variant name, on each corpus x ran, y on the same
corpus), the metric it reads per run by name (:data:`METRICS`, a registry of functions of a variant's finished runs:
seed -> value), its sign ``y - x`` (positive when x has the lower metric), its kind and claim, and the words the
report names its sides by. The engine pairs x with the reference the protocol declares by seed (`stats.compare`:
Student-t over the shared seeds, Welch where none), applies the protocol's rule for the kind and claim
(`rules.registered`), and gives one :class:`Compared` finding per comparison and corpus; the family's Bonferroni
level, the seeds needed and the registration are then read for it as for every finding (`findings.correct`,
`findings.conclude`). A comparison marked ``once`` is judged only when every run its family plans is in (the
protocol's fixed stopping rule); before that it carries its interval and how many runs are in, and no label. What
a finding says comes from :data:`TEMPLATES`, sentences keyed by kind (else by rule), from which its section's line
and its row of the claims table are written.

A new study whose metrics exist is its family, verdict kind and comparisons in the protocol, and its sweep file:
`family_findings` reads it where a study names the family (`studies.family`). A new metric is one function
registered with :func:`metric`; one read at the lengths a comparison names (`at:`, past the block) takes the length
as a third argument; one read over several variants of a side's group (the context family's growth, from the
shortest block to the longest) names them with it (:class:`Span`), so the finding's code and its registration count
the runs its interval reads. What a kind states beside its interval (the leak's causal Δ, the tail's
heads) is :data:`BESIDE`, and the claim a kind tests where its lines name none :data:`PAPER`, both by kind.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ega_lightning.experiments import paper, plots, protocol
from ega_lightning.experiments.bench import BENCH_RUN, bench_device
from ega_lightning.experiments.beyond_the_block import BeyondTheBlock
from ega_lightning.experiments.comparisons import (
    Table,
    Variant,
    difference,
    diverged_rule,
    learned,
    reference,
    rerun_of,
    split_text,
)
from ega_lightning.experiments.findings import (
    DIAGNOSTICS,
    NOT_DATED,
    NOT_IN_RESULTS,
    Code,
    Finding,
    Registration,
    Where,
    amendment_of,
    code_of,
    measured_with,
    name,
    pair,
    plain_label,
)
from ega_lightning.experiments.paper import paper_name
from ega_lightning.experiments.rules import (
    BEFORE,
    NOT_PAPER_REGIME,
    TAU_STEP,
    Verdict,
    cost_device,
    margin_of,
    max_seeds,
    min_repetitions,
    registered,
)
from ega_lightning.experiments.stats import LEVEL, Summary, compare, mean_interval, median_interval, summarize, widen
from ega_lightning.experiments.study import ReportInputs
from ega_lightning.experiments.text import (
    anchor,
    fmt_bounds,
    fmt_interval,
    fmt_summary,
    how,
    interval_text,
    num,
    seed_count,
    seed_list,
    slug,
)

# a variant's finished runs (and, for a comparison that names them, one of its lengths `at:`) -> seed -> value
Metric = Callable[..., dict[int, float]]


@dataclass(frozen=True)
class Span:
    """A metric of a side read over several variants of its group, not over the side alone: which they are
    (``variants``, in order; none where the metric does not apply: no finding), the name of its interval among the
    finding's reads, and what the finding states beside it (``details``, of x's and y's variants and the seeds they
    share). The first and the last variant of each side are those whose runs enter its interval."""

    variants: Callable[[Variant, ReportInputs], list[Variant]]
    along: str  # the hyperparameter the variants differ in: x's and y's must be at the same values
    read: str  # its interval's name ({group}: x's spec group)
    details: Callable[[list[Variant], list[Variant], list[int]], dict[str, Any]]


METRICS: dict[str, Metric] = {}
SPANS: dict[str, Span] = {}  # metric -> the variants it reads, where not the side alone
PAIRED: set[str] = set()  # the metrics that are a difference within each run: read alone, a paired interval


def metric(key: str, span: Span | None = None, paired: bool = False) -> Callable[[Metric], Metric]:
    """Registers a metric under ``key``, the name a comparison of the protocol reads it by (with its ``span``, where
    it reads several variants of a side's group; ``paired``, where each value is a difference of two measurements
    of one run)."""

    def register(fn: Metric) -> Metric:
        METRICS[key] = fn
        if span is not None:
            SPANS[key] = span
        if paired:
            PAIRED.add(key)
        return fn

    return register


def _recorded(key: str) -> Metric:
    return lambda v, inputs: v.by_seed(key)


for _key in ("final_val_loss", "best_val_loss", "final_gap", "final_tau_mean", "final_frac_above_tau"):
    metric(_key)(_recorded(_key))  # what each run's record holds (`comparisons.run_metrics`)
metric("tail_gap")(_recorded("final_tail_gap"))  # share of keys above tau − (1 − Φ(tau)), its last gate summary


@metric("tau_init")
def tau_init(v: Variant, inputs: ReportInputs) -> dict[int, float]:
    """Where each run's tau started (a frozen tau: where it is held)."""
    return {r.run.seed: float(x) for r in v.done if (x := r.hparams.get("tau_init")) is not None}


@metric("whole_split_loss")
def whole_split_loss(v: Variant, inputs: ReportInputs) -> dict[int, float]:
    """Each final checkpoint's loss over the whole validation split (results/whole-split/)."""
    by_run = {e.run_name: e.loss for e in inputs.whole_split}
    return {r.run.seed: by_run[r.run.run_name] for r in v.done if r.run.run_name in by_run}


def _by_block(v: Variant, inputs: ReportInputs) -> list[Variant]:
    """The finished variants of v's gate in its group and corpus, shortest block first: one per block size, and at
    least two (else none)."""
    same = [x for x in inputs.variants if (x.group, x.corpus, x.gate) == (v.group, v.corpus, v.gate) and x.done]
    blocks = {x.hp("block_size") for x in same}
    return sorted(same, key=lambda x: x.hp("block_size")) if len(blocks) == len(same) > 1 else []


def _growth_details(xs: list[Variant], ys: list[Variant], seeds: list[int]) -> dict[str, Any]:
    """y − x at each block size on the seeds every block size ran (a 3-seed mean beside single seeds would put seed
    noise into the trend), and whether it grows with every longer block."""
    at = {y.hp("block_size"): y for y in ys}
    by_block = [
        (x.hp("block_size"), difference(at.get(x.hp("block_size")), x, "final_val_loss", set(seeds))) for x in xs
    ]
    steps = itertools.pairwise(d for _, d in by_block)
    grows = all(a is not None and b is not None and a.estimate < b.estimate for a, b in steps)
    return {"seeds": seeds, "by_block": by_block, "monotone": grows}


@metric("growth", Span(_by_block, "block_size", "context: {group} longest − shortest block", _growth_details))
def growth(v: Variant, inputs: ReportInputs) -> dict[int, float]:
    """The final val loss of v's gate at the longest block of its group minus at the shortest, per seed every block
    size ran: y − x of it is (y − x at the longest block) − (y − x at the shortest)."""
    blocks = [b.by_seed("final_val_loss") for b in _by_block(v, inputs)]
    seeds = set.intersection(*(set(b) for b in blocks)) if blocks else set()
    return {s: blocks[-1][s] - blocks[0][s] for s in sorted(seeds)}


def _by_tau_init(v: Variant, inputs: ReportInputs) -> list[Variant]:
    """The finished gated variants of v's section and corpus in its table's order, at two tau_init or more (else
    none)."""
    table = next((t for t in inputs.tables if (t.group, t.corpus) == (v.group, v.corpus)), None)
    gated = table.finished_gates if table is not None else []
    return gated if len({x.hp("tau_init") for x in gated}) > 1 else []


def _slopes(xs: list[Variant]) -> dict[int, float]:
    """Per seed every variant ran, the least-squares slope of final tau on tau_init."""
    inits, taus = [float(x.hp("tau_init")) for x in xs], [x.by_seed("final_tau_mean") for x in xs]
    seeds = set.intersection(*(set(x.by_seed("final_val_loss")) for x in xs))
    mx, out = statistics.fmean(inits), {}
    for s in (s for s in sorted(seeds) if all(s in t for t in taus)):
        ys = [t[s] for t in taus]
        my = statistics.fmean(ys)
        out[s] = math.fsum((a - mx) * (b - my) for a, b in zip(inits, ys, strict=True))
        out[s] /= math.fsum((a - mx) ** 2 for a in inits)
    return out


def _tau_init_details(xs: list[Variant], ys: list[Variant], seeds: list[int]) -> dict[str, Any]:
    """Final tau and loss by tau_init on the seeds every initialisation ran (a one-seed row beside a 3-seed mean
    would put seed noise into the spread), each paired by seed with the default tau_init (0.0, CharLM's), and the
    seed-to-seed std of the initialisation with most seeds: the only yardstick while the rows share one seed."""
    shared = set.intersection(*(set(v.by_seed("final_val_loss")) for v in xs))

    def on_shared(v: Variant, key: str) -> Summary:
        return summarize([x for s, x in v.by_seed(key).items() if s in shared])

    taus = [(v.hp("tau_init"), name(v), on_shared(v, "final_tau_mean")) for v in xs]
    losses = [(v.hp("tau_init"), on_shared(v, "final_val_loss")) for v in xs]
    finals, means = [s.mean for *_, s in taus if s.mean is not None], [s.mean for _, s in losses if s.mean is not None]
    default = next((v for v in xs if v.hp("tau_init") == 0.0), None)
    paired = [(v.hp("tau_init"), difference(default, v, "final_val_loss")) for v in xs if default and v is not default]
    init, scatter = max(((v.hp("tau_init"), v.summary("final_val_loss")) for v in xs), key=lambda p: p[1].n)
    inits = [float(v.hp("tau_init")) for v in xs]
    return {
        "paper": paper.TAU,
        "seeds": sorted(shared),
        "taus": taus,
        "tau_span": max(finals) - min(finals) if finals else None,
        "init_span": max(inits) - min(inits),
        "losses": losses,
        "loss_span": max(means) - min(means) if len(means) > 1 else None,
        "paired": paired,
        "reference": default.hp("tau_init") if default else None,
        "scatter": (init, scatter) if scatter.std else None,
        "slopes": _slopes(xs),
    }


@metric("tau_init_slope", Span(_by_tau_init, "tau_init", "tau_init slope: {group}", _tau_init_details))
def tau_init_slope(v: Variant, inputs: ReportInputs) -> dict[int, float]:
    """Per seed every initialisation of v's section ran, the slope of final tau on tau_init (`_slopes`); none where
    a tau was held (a frozen tau cannot forget where it started)."""
    xs = _by_tau_init(v, inputs)
    return _slopes(xs) if xs and all(x.as_in_paper for x in xs) else {}


# past the block (the amendment of 2026-12-07, issue 68): the loss at the block's last `EDGE` positions minus at every
# position past it, of the same windows
EDGE = 32


def block_of(v: Variant) -> int:
    """The training block of a variant's runs (its first finished run's; the cpu size's 128 before any)."""
    return int(v.done[0].hparams.get("block_size") or 128) if v.done else 128


def _evaluated(v: Variant, inputs: ReportInputs, at: int) -> dict[int, BeyondTheBlock]:
    """Seed -> the evaluation of v's final checkpoint in windows of ``at`` blocks (results/beyond-the-block/)."""
    found = {(e.run_name, e.eval_block_size): e for e in inputs.beyond_the_block}
    named = {r.run.seed: (r.run.run_name, at * block_of(v)) for r in v.done}
    return {s: found[key] for s, key in sorted(named.items()) if key in found}


@metric("loss_past_block", paired=True)
def loss_past_block(v: Variant, inputs: ReportInputs, at: int) -> dict[int, float]:
    """Each final checkpoint's mean loss at its block's last `EDGE` positions minus at every position past the
    block, in the same windows of ``at`` blocks: positive where it reads the context beyond its block."""
    block = block_of(v)
    return {
        s: float(np.mean(e.by_position[block - EDGE : block])) - float(np.mean(e.by_position[block:]))
        for s, e in _evaluated(v, inputs, at).items()
    }


# kind -> the claim its comparisons test where their lines name none, and the paper's figure of it, on x's corpus
PAPER = {
    "leak": lambda corpus: (f"improvement:{corpus}", paper.IMPROVEMENT.get(corpus)),
    "tail": lambda corpus: ("frac_above_tau", None),
    "tau_mechanism": lambda corpus: ("tau", paper.TAU),  # no comparison: `studies.tau_mechanism`
    "control": lambda corpus: ("control", None),  # read over the leaderboard: `studies.leaderboard`
}


Beside = tuple[dict[str, Any], list[Variant]]  # what a finding states beside its interval; the variants it reads


def _causal(x: Variant, y: Variant | None, inputs: ReportInputs) -> Beside:
    """Beside the leak as trained: baseline − causal EGA-1 (x's gate from its tau_init as the paper trains it)."""
    causal = reference(x, list(inputs.variants), learned(x))
    if causal is None:
        return {"causal": None, "causal_subject": None}, []
    return {"causal": difference(y, causal, "final_val_loss"), "causal_subject": name(causal)}, [causal]


def _heads(x: Variant, y: Variant | None, inputs: ReportInputs) -> Beside:
    """Beside the tail identity per seed: the means over seeds of the share above tau and of 1 − Φ(tau), and, as
    a figure only, the heads of x's final checkpoints `ega landscape` evaluated as trained (a rerun's stand for
    its original's)."""
    values, above, variants = x.by_seed("final_tail_gap"), x.by_seed("final_frac_above_tau"), list(inputs.variants)
    runs = {r.run.run_name for r in x.done}
    reruns = [w for w in variants if (o := rerun_of(w, variants)) and {r.run.run_name for r in o.done} == runs]
    names = runs | {r.run.run_name for w in reruns for r in w.done}
    heads = [e for e in inputs.evaluations if e.final and e.as_trained and e.run in names]
    gaps = [g for e in heads for g in e.tail_gaps()]
    return {
        "znorm": x.options.get("znorm", "prefix"),
        "seeds": sorted(values),
        "frac_above_tau": statistics.fmean(above[s] for s in values),
        "normal_tail": statistics.fmean(above[s] - values[s] for s in values),
        "heads": len(gaps),
        "heads_interval": mean_interval(gaps) if gaps else None,
        "heads_runs": [e.run for e in heads],
        "max_abs_gap": max((abs(g) for g in gaps), default=None),
    }, []


@metric("prefix_eval_loss")
def prefix_eval_loss(v: Variant, inputs: ReportInputs) -> dict[int, float]:
    """Each final checkpoint's loss over the whole validation split evaluated with the causal prefix z (`ega
    landscape --eval_znorm prefix`): a model trained with z over the whole window, read causally."""
    seeds = {r.run.run_name: r.run.seed for r in v.done}
    evals = [e for e in inputs.evaluations if e.run in seeds and e.final and e.eval_znorm == "prefix" and e.whole_split]
    return {seeds[e.run]: e.loss for e in evals}


def leak_evaluated(table: Table, inputs: ReportInputs) -> list[Finding]:
    """Baseline − each whole-window variant of ``table``'s final checkpoints evaluated with the causal prefix z: a
    diagnostic (no claim, no family), with the share of keys above tau evaluated so and as trained."""
    out: list[Finding] = []
    for row in (r for r in table.rows if r.variant.done and r.baseline and r.variant.options.get("znorm") == "window"):
        v, base = row.variant, row.baseline
        evaluated, baseline = prefix_eval_loss(v, inputs), base.by_seed("final_val_loss")
        runs = {r.run.run_name for r in v.done}
        evals = [e for e in inputs.evaluations if e.run in runs and e.final]
        prefix = [e for e in evals if e.eval_znorm == "prefix" and e.whole_split]
        trained = [e for e in evals if e.as_trained]

        def above(found: list[Any], key: str = "frac_above_tau") -> float | None:
            return statistics.fmean(e.mean(key) for e in found) if found else None

        where = Where(DIAGNOSTICS, table.corpus, measured_with(v, base), name(v), f"baseline `{base.label}`")
        details = {"seeds": sorted(evaluated), "above_causal": above(prefix), "above_trained": above(trained)}
        details |= {"normal_tail": above(trained, "normal_tail"), "trained_as": name(v)}
        ours = compare(baseline, evaluated) if evaluated and baseline else None
        paper_figure = paper.IMPROVEMENT.get(table.corpus)
        out.append(Compared(kind="leak_causal", **where._asdict(), ours=ours, paper=paper_figure, details=details))
    return out


def reruns(table: Table, inputs: ReportInputs) -> list[Finding]:
    """Each variant of ``table`` that repeats another run for run, kept for its checkpoints: what it repeats, and
    whether its final val loss came out bit for bit the same. No verdict reads it."""
    out: list[Finding] = []
    for v in (r.variant for r in table.rows if r.variant.done):
        if (original := rerun_of(v, list(inputs.variants))) is None:
            continue
        ours, theirs = v.by_seed("final_val_loss"), original.by_seed("final_val_loss")
        where = Where(table.group, table.corpus, measured_with(v), name(v), name(original))
        details = {"original_group": original.group, "seeds": sorted(ours)}
        details |= {"identical": all(ours[s] == theirs.get(s) for s in ours)}
        details |= {"largest_difference": max(abs(ours[s] - theirs[s]) for s in ours if s in theirs)}
        out.append(Compared(kind="rerun", **where._asdict(), code=code_of(v, original), details=details))
    return out


@dataclass(frozen=True, kw_only=True)
class Compared(Finding):
    """One comparison the protocol names, as measured: the finding of every family on the engine. ``details``: what
    its template says beside the interval (a peer's paper), written into results.json beside its fields."""

    runs_in: int | None = None  # a family read once: its planned runs that are in, and all it plans
    runs_planned: int | None = None
    details: dict[str, Any] = field(default_factory=dict, metadata=NOT_IN_RESULTS)

    @property
    def interim(self) -> bool:
        return self.runs_planned is not None and (self.runs_in or 0) < self.runs_planned

    @property
    def tests_claim(self) -> bool:
        """Whether it tests its claim itself (a row of the claims table); a step of a decomposition (the author's
        B − C, ...) reads the claim's comparison apart and tests nothing: its own section holds it."""
        return self.kind not in STEP_OF

    @property
    def interval_format(self) -> tuple[float, int, bool]:
        """(scale, digits, signed): how its intervals are written in the claims table and its family's text."""
        return INTERVAL_FORMATS.get(self.kind, (1.0, 3, True))

    def size_regime(self) -> bool:
        """The paper's reduction of the gap is a claim about its overfitting regime: its size is read only there."""
        return self.details.get("paper_regime") is not False

    def family_read(self) -> Compared:
        """The rule `best`: the gates ahead of x by more than the loss margin at the family's level (`others`, in
        the order of its reads), once its family has read them; the rule `control`: its best gate's interval at the
        family's level, the level its label reads (`best_family`). A measure that replaced another (past the block:
        its ``window_contrast``): the label its rule gives the one replaced at the family's level (``replaces``)."""
        if self.rule_name == "control" and self.interval is not None and self.family_level is not None:
            return dataclasses.replace(
                self, details=self.details | {"best_family": widen(self.interval, self.family_level)}
            )
        replaced = self.details.get("window_contrast")
        if replaced is not None and self.rule is not None and self.verdict is not None and self.family_level:
            return dataclasses.replace(
                self, details=self.details | {"replaces": self.rule(widen(replaced, self.family_level)).value}
            )
        if self.rule_name != "best":
            return self
        wide = [widen(d, self.family_level or LEVEL) for _, d in self.reads]
        ahead = zip(self.details["others"], wide, strict=True)
        beating = [g for g, d in ahead if d is not None and d.high is not None and d.high < -margin_of("loss")]
        return dataclasses.replace(self, details=self.details | {"beating": beating})

    def to_dict(self) -> dict[str, Any]:
        """results.json's fields: the finding's, the counts where it is read once, then its details."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata.get("results", True)}
        del out["kind"]  # results.json writes it first (`results_json.results`)
        if self.runs_planned is None:  # a family read at any time: no counts
            del out["runs_in"], out["runs_planned"]
        return out | self.details


def variants_named(
    inputs: ReportInputs, ref: str, corpus: str | None = None, table: Table | None = None
) -> list[Variant]:
    """The variants ``ref`` names (group/label) on ``corpus``; `group/each ...`: one finding over the variants of a
    section (its metric's span), named by the first finished gate of ``table`` (which the study hands it)."""
    group, label = ref.split("/", 1)
    if label.startswith("each ") and table is not None:
        return table.finished_gates[:1]
    return [v for v in inputs.variants if (v.group, v.label) == (group, label) and corpus in (None, v.corpus)]


def _entry(v: Variant) -> str:
    return v.runs[0].run.entry if v.runs else ""


def _runs_in(inputs: ReportInputs, family: str, comparisons: list[protocol.Comparison]) -> tuple[int, int]:
    """The runs of the family's variants that are in, each variant counted up to the seeds planned for it, and all
    the family plans; read at lengths (`at:`), its evaluations: one per planned run and length."""
    planned = protocol.current().families[family].planned_seeds
    sides = dict.fromkeys((n, c.metric, c.at) for c in comparisons for n in (c.x, c.y) if n is not None)

    def counted(v: Variant, key: str, at: tuple[int, ...]) -> int:  # an evaluation is of a finished run
        return min(len(METRICS[key](v, inputs, *at)) if at else len(v.done), planned.get(_entry(v), 0))

    runs_in = sum(counted(v, key, at) for n, key, at in sides for v in variants_named(inputs, n))
    return runs_in, sum(planned.values()) * len({c.at for c in comparisons})


def expanded(c: protocol.Comparison) -> list[protocol.Comparison]:
    """The comparisons ``c`` names, one by one. x `<group>/each design and <label>`: the variant ``label`` (named as
    the comparisons whose y it is name it), then each design the protocol compares in ``group`` (the x of its
    comparisons, named as they name it), each testing the claim `<family>:<variant>`. Its lengths `at:` (in
    training blocks): one comparison per length, read once as its family's runs are (an evaluation is of a finished
    run: its family plans one per run and length)."""
    group, label = c.x.split("/", 1)
    sides = {c.x: (c.name, c.claim)}
    if label.startswith("each design"):
        stated = [o for items in protocol.current().comparisons.values() for o in items]
        named = {o.y: o.y_name for o in stated if o.y is not None and o.y_name}
        names = {x: named.get(x) for x in (f"{group}/{ref}" for ref in label.split(" and ")[1:])}
        names |= {o.x: names.get(o.x, o.name) for o in stated if o.group == group and not o.label.startswith("each ")}
        sides = {x: (name, c.claim or f"{c.family}:{x.split('/', 1)[1]}") for x, name in names.items()}
    return [
        dataclasses.replace(c, x=x, name=name, claim=claim, at=at, once=c.once or bool(at))
        for x, (name, claim) in sides.items()
        for at in [(a,) for a in c.at] or [()]
    ]


def family_findings(inputs: ReportInputs, family: str, table: Table | None = None) -> list[Finding]:
    """One finding per comparison the protocol names for ``family`` (`expanded`) and corpus its x ran on (those of
    ``table``'s section and corpus alone, where given), in the protocol's order; none for a comparison whose x the
    report did not read."""
    comparisons = [e for c in protocol.current().comparisons.get(family, ()) for e in expanded(c)]
    counted = _runs_in(inputs, family, comparisons) if any(c.once for c in comparisons) else None
    out: list[Finding] = []
    joint: dict[tuple[str, str | None], tuple[protocol.Comparison, list[Any]]] = {}
    for c in comparisons:
        if c.metric in READINGS:  # its sides are a file's rows, not runs
            out.append(READINGS[c.metric](c, inputs))
            continue
        for x in variants_named(inputs, c.x, table.corpus if table is not None else None, table):
            if table is not None and x.group != table.group:
                continue
            y = next(iter(variants_named(inputs, c.y, x.corpus)), None) if c.y is not None else None
            span = SPANS.get(c.metric)
            xs = span.variants(x, inputs) if span is not None else [x]
            ys = span.variants(y, inputs) if span is not None and y is not None else [y]
            if not xs:  # the metric does not apply to this section (one block size): nothing to compare
                continue
            values = METRICS[c.metric]
            own, ref = values(x, inputs, *c.at), values(y, inputs, *c.at) if y is not None else {}
            if span is None and not c.y and not own and not c.once:  # x alone, nothing read (nor to count): no finding
                continue
            aligned = span is None or y is None or [v.hp(span.along) for v in xs] == [v.hp(span.along) for v in ys]
            # no y: x's metric alone, its one-sample interval (against zero or a figure)
            alone = partial(mean_interval, method="paired" if c.metric in PAIRED else "mean")
            d = (compare(ref, own) if ref else alone(list(own.values()))) if own and (ref or not c.y) else None
            d = d if aligned else None
            claim, figure = _claim(c, x.corpus)
            if figure is not None and d is None:  # the paper's claim is read where both sides have values
                continue
            sides = {"x": x, "y": y}
            shown = {k: _mean(sides[spec.split(".", 1)[0]], spec.split(".", 1)[1], inputs) for k, spec in c.show}
            beside, also = BESIDE[c.kind](x, y, inputs, *c.at) if c.kind in BESIDE else ({}, [])
            details = ({"source": c.source} if c.source else {}) | shown | beside
            if isinstance(c.figure, int | float):  # the paper's figure of the difference, said beside it
                details["paper_figure"] = c.figure
            if span is None:
                subject = f"{c.name} `{x.label}`" if c.name else name(x)
                against = f"{c.y_name} `{c.y.split('/', 1)[1]}`" if c.y_name and c.y else (name(y) if y else c.y)
                where = Where(x.group, x.corpus, measured_with(x, y), subject, against)
                code = code_of(x, y, *also, compared=[(x, y) if c.y else (x,)])
                read_as = pair(y or c.y, x) if c.y else f"{x.group}/{x.label}"
                read_as = read_as if c.metric == "final_val_loss" else f"{c.kind}: {read_as}"  # its loss: unnamed
                read_as = READS[c.kind](x, details) if c.kind in READS else read_as
            else:  # named by the gates, not by one variant of each; each side's ends enter the interval
                both = [v for at in itertools.zip_longest(xs, ys) for v in at if v is not None]
                against = (y.paper_name or y.gate) if y is not None else c.y
                where = Where(x.group, x.corpus, measured_with(xs[0], *both), x.paper_name or x.gate, against)
                ends = [[xs[-1], (ys or [None])[-1], xs[0], (ys or [None])[0]]] if c.y else None  # no y: every x
                code = code_of(*both, compared=ends)
                read_as = span.read.format(group=x.group)
                details |= span.details(xs, ys, sorted(set(own) & set(ref)))
                if not own and not c.y:  # nothing its metric reads here (a tau held): what it shows, no verdict
                    out.append(Compared(kind=c.kind, **where._asdict(), code=code, details=details))
                    continue
            measured: dict[str, Any] = {"family": family, "code": code, "details": details}
            if c.once and counted is not None:
                measured |= {"runs_in": counted[0], "runs_planned": counted[1]}
            if (e := protocol.current().verdicts.get(c.kind)) is not None and e.rule_for(c.claim) == "best":
                joint.setdefault((c.kind, c.claim), (c, []))[1].append((x, y, d))  # read at once: `_best`
                continue
            if figure is not None and (why := _untestable(c.kind, figure, x, y, details)):
                found = Compared(kind=c.kind, **where._asdict(), ours=d, paper=figure, claim=claim, code=code)
                out.append(dataclasses.replace(found, details=details, verdict=Verdict.NOT_TESTABLE, not_testable=why))
                continue
            if claim is None and claims(c):
                out.append(Compared(kind=c.kind, **where._asdict(), ours=d, code=code, details=details))
                continue  # a claim of the paper on a corpus it gives no figure for: shown, not judged
            if c.kind in PAPER:  # a claim its lines name none of, tested on x's corpus
                claim, figure = PAPER[c.kind](x.corpus)
            reads = ((read_as, d),)
            # a kind the protocol gives no rule (the leak's increment) is read by its family, with no label
            read = e is not None and not (c.once and counted is not None and counted[0] < counted[1])
            out.append(judge(c.kind, where, reads, claim=claim, read=read, paper=figure, **measured))
    sides = [v for c in comparisons for n in (c.x, c.y) if n is not None for v in variants_named(inputs, n)]
    for c, items in joint.values():
        out += _best(inputs, c, items, sides)
    return out


def _best(inputs: ReportInputs, c: protocol.Comparison, items: list[Any], sides: list[Variant]) -> list[Finding]:
    """The rule `best` reads x (EGA-1) against every other gate its claim names at once: one finding, its reads in
    order of the gates' mean metric, with x's place among the family's sides that have a paper name; before it the
    ranking by that mean of every gate of x's section and the sides it borrows, which states no verdict."""
    x = items[0][0]
    table = next(t for t in inputs.tables if (t.group, t.corpus) == (x.group, x.corpus))
    done = [r.variant for r in table.rows if r.variant.done and rerun_of(r.variant, list(inputs.variants)) is None]
    pool = list({id(v): v for v in [*done, *(v for v in sides if v.corpus == x.corpus and v.done)]}.values())
    mean = {id(v): _mean(v, c.metric, inputs) for v in pool}
    ranked = sorted(pool, key=lambda v: mean[id(v)] if mean[id(v)] is not None else math.inf)
    where = Where(x.group, x.corpus, measured_with(x if x.done or not ranked else ranked[0]), "", None)
    ranking = {"ranking": [(name(v), v.group, mean[id(v)]) for v in ranked]}
    out: list[Finding] = [Compared(kind="ablation_ranking", **where._asdict(), details=ranking)] if ranked else []
    read = sorted((i for i in items if i[1] in ranked), key=lambda i: ranked.index(i[1]))
    if not x.done or not read:
        return out
    others, in_paper = [y for _, y, _ in read], [v for v in ranked if v.paper_name]
    details = {
        "rank": in_paper.index(x) + 1,
        "paper_rows": len(in_paper),
        "others": [y.paper_name or y.label for y in others],
    }
    best = where._replace(subject=name(x), regime=measured_with(x, *others))
    code, reads = code_of(*in_paper, compared=[(y, x) for y in others]), [(pair(y, x), d) for _, y, d in read]
    return [*out, judge(c.kind, best, reads, claim=c.claim, family=c.family, code=code, details=details)]


def _mean(v: Variant | None, key: str, inputs: ReportInputs) -> float | None:
    """The mean over a side's seeds of a metric (None: no side, or no value)."""
    return summarize(list(METRICS[key](v, inputs).values())).mean if v is not None else None


def claims(c: protocol.Comparison) -> list[str]:
    """The claims a comparison tests: those it names (`expanded`), else its kind's claims of the paper
    (`paper.FIGURE`: the kind, or the kind on a corpus: `improvement:ptb`), each on its own corpus."""
    named = list(dict.fromkeys(e.claim for e in expanded(c) if e.claim is not None))
    return named or [k for k in paper.FIGURE if k.split(":")[0] == c.kind]


def _claim(c: protocol.Comparison, corpus: str) -> tuple[str | None, float | None]:
    """The claim a comparison tests on ``corpus`` and the paper's figure it is read against (a claim it names: none)."""
    if c.claim is not None:
        return c.claim, None
    claim = next((k for k in claims(c) if k in (c.kind, f"{c.kind}:{corpus}")), None)
    return claim, paper.FIGURE.get(claim or "")


def _untestable(kind: str, figure: float, x: Variant, y: Variant | None, details: dict[str, Any]) -> str | None:
    """Why a comparison cannot test the paper's claim here: a side whose val loss reads later characters (the paper's
    claims are of causal losses), or the protocol's condition for its kind (`testable:`); None where it can."""
    if leaky := [s for s in (x, y) if s is not None and not s.causal_evaluation]:
        return (
            f"{', '.join(f'`{s.label}`' for s in leaky)} evaluated z over the whole window (model.eval_znorm or the "
            "gate's znorm: window), a non-causal evaluation whose gate reads later characters: its val loss is no "
            "causal loss, and the paper's claim is about one"
        )
    base, covers = details.get("baseline_gap"), protocol.current().verdicts[kind].testable
    if covers == "baseline_gap_covers_reduction" and base is not None and base < figure:
        return (
            f"the baseline's own gap {num(base)} is smaller than the paper's reduction {figure:+.3f}: no gate can "
            "narrow it by that much"
        )
    return None


def _losses(x: Variant, y: Variant | None, inputs: ReportInputs) -> Beside:
    return {"loss": x.summary("final_val_loss").mean, "baseline_loss": y and y.summary("final_val_loss").mean}, []


def _gap(x: Variant, y: Variant | None, inputs: ReportInputs) -> Beside:
    """The sides' gaps, and whether y's is in the paper's overfitting regime."""
    assert y is not None  # a gap is read only where both sides logged one (`family_findings`)
    base = y.summary("final_gap").mean
    return {"baseline_gap": base, "gap": x.summary("final_gap").mean, "paper_regime": base >= paper.OVERFIT_GAP}, []


def _settled(x: Variant, y: Variant | None, inputs: ReportInputs) -> Beside:
    tracked = [r.metrics["tau_converged"] for r in x.done if r.metrics.get("tau_converged") is not None]
    return {"settled": sum(tracked), "tracked": len(tracked)}, []


def _window_contrast(x: Variant, y: Variant | None, inputs: ReportInputs, at: int) -> Beside:
    """Beside past the block: its windows, and the measure it replaced, the window contrast (loss on windows of the
    block − on windows of ``at`` blocks, per seed; `Compared.family_read` gives the label it would read)."""
    longer = {s: e.loss for s, e in _evaluated(x, inputs, at).items()}
    own = {s: value for s, value in x.by_seed("final_val_loss").items() if s in longer}
    contrast = compare(own, longer) if own and longer else None
    block = block_of(x)
    return {"block_size": block, "eval_block_size": at * block, "window_contrast": contrast, "replaces": None}, []


def _past_the_block_read(x: Variant, details: dict[str, Any]) -> str:
    block, length = details["block_size"], details["eval_block_size"]
    return f"{x.label} T{length}: positions {block - EDGE + 1}–{block} − {block + 1}–{length}"


# kind -> its interval's name among a finding's reads, of x and its details, where not the sides' names
READS = {"beyond_the_block": _past_the_block_read}

# kind -> what a comparison of it states beside its interval (results.json writes it beside its fields), and the
# variants that reads beside x and y: of x, y, the inputs (and its length `at:`, where it names one)
BESIDE: dict[str, Callable[..., Beside]] = {
    "improvement": _losses,
    "gap": _gap,
    "tau": _settled,
    "leak": _causal,
    "tail": _heads,
    "beyond_the_block": _window_contrast,
}


def judge(kind: str, where: Where, reads: Any, *, claim: str | None, read: bool = True, **measured: Any) -> Compared:
    """A finding of ``kind`` whose verdict is the protocol's rule for its kind and claim (`rules.registered`) of the
    intervals it ``reads`` (the first of them is its ``ours``); ``read`` False: its intervals with no rule applied,
    a family read once before its last planned run is in."""
    reads = tuple(reads)
    found = Compared(
        kind=kind, **where._asdict(), ours=reads[0][1] if reads else None, claim=claim, reads=reads, **measured
    )
    if not read:
        return found
    name, rule = registered(kind, claim)
    if name == "level":  # a level is read against the paper's figure, told apart within its kind's margin
        rule = partial(rule, figure=found.paper, width=margin_of(protocol.current().verdicts[kind].margins[0]))
    return dataclasses.replace(found, verdict=rule(*(d for _, d in reads)), rule=rule)


# ----------------------------------------------------------------------------- a reading of a file, not of runs

# A comparison whose sides are rows of a file beside the records (`ega bench`'s table), not variants with runs: its
# metric names a reading of :data:`READINGS`, (the comparison, the inputs) -> its finding, which reads its values by
# the interval method its rule names (:data:`INTERVALS`, beside `stats.compare`'s t) and applies that rule.
# rule -> the interval it reads: the cost's, of per-repetition ratios a shared machine skews, is distribution-free
INTERVALS: dict[str, Callable[[list[float]], tuple[float, float]]] = {"cost": median_interval}


def step_time_ratio(c: protocol.Comparison, inputs: ReportInputs) -> Compared:
    """`ega bench`'s step time of x's gate over the baseline's per repetition, at the bench's first size that times
    x (the bench `bench.read_bench` chose), by its median's interval; the rule `cost` reads it with the repetitions
    and the device (another device than the claim's: its ratio said, the claim untested). The claim it tests is its
    kind's own (paper.CLAIM)."""
    result, source = inputs.bench
    gate, claim = c.x.split("/", 1)[1], c.claim or c.kind
    entry = next((e for e in (result or {}).get("sizes", []) if gate in e.get("rows", {})), {})
    row = entry.get("rows", {}).get(gate)
    got = row or {}
    reps, ratios = int(got.get("repeats") or 0), [float(r) for r in got.get("time_ratios") or []]
    rule_name, rule = registered(c.kind, claim)
    ci = INTERVALS[rule_name](ratios) if len(ratios) >= 2 else None
    device = bench_device(result or {}, source)
    verdict = Verdict.NO_DATA if row is None else rule(*ci, reps, device) if ci else Verdict.TOO_FEW_SEEDS
    ours = None if row is None else Summary(got.get("time_ratio"), None, reps)
    q1, q3 = got.get("time_ratio_q1_q3") or (None, None)
    named = ((result or {}).get("environment") or {}).get("device_name")
    details = {"q1": q1, "q3": q3, "median_ci": ci, "repetitions": reps, "kernel_floor": got.get("kernel_floor")}
    details |= {"size": entry.get("size"), "source": source, "device": device, "device_name": named}
    untested, on = None, cost_device().upper()
    if verdict is Verdict.NOT_TESTABLE:
        untested = (
            f"×{num(ours.mean if ours else None)} on {device.upper()}: {named or 'not named'}, {reps} repetitions; "
            f"the paper's {on} claim is untested, no {on} bench is committed"
        )
    amendment = amendment_of(rule_name)
    before = BEFORE[amendment.issue][rule_name](*ci, reps) if amendment is not None and ci else verdict  # any device
    amended = {"amended_from": plain_label(before), "amended_by": amendment.issue} if before is not verdict else {}
    subject, against = paper_name(gate, None) or gate, paper_name(c.y.split("/", 1)[1], None) if c.y else None
    return Compared(
        **Where(c.family, "", f"`ega bench`, {entry.get('size')} size", subject, against)._asdict(),
        kind=c.kind,
        ours=ours,
        verdict=verdict,
        claim=claim,
        not_testable=untested,
        code=Code([], None, [], [BENCH_RUN]) if result is not None else None,
        details=details,
        **amended,
    )


READINGS: dict[str, Callable[[protocol.Comparison, ReportInputs], Compared]] = {"step_time_ratio": step_time_ratio}


# ----------------------------------------------------------------------------- a family no study module reads


@dataclass(frozen=True)
class Unplaced:
    """Families of the protocol the engine reads (those no study of the report places, `studies.PLACED`, and whose
    comparisons read registered metrics: a new study, read with no Python of its own), with the claims their
    comparisons test."""

    families: tuple[str, ...]
    claims: tuple[paper.Claim, ...]


def family_claims(families: tuple[str, ...]) -> Unplaced:
    """``families`` with the claims their comparisons test that the paper does not make, as the claims table states
    them (:data:`CLAIMS`, by kind), in the protocol's order."""
    p = protocol.current()
    claims = {
        e.claim: paper.Claim(
            e.claim, CLAIMS.get(e.kind, CLAIMS["lower"]).format(x=e.name or e.x, y=e.y_name or e.y), "—"
        )
        for name in families
        for c in p.comparisons[name]
        for e in expanded(c)
        if e.claim is not None and e.claim not in paper.CLAIM
    }
    return Unplaced(families, tuple(claims.values()))


def unplaced(placed: set[str]) -> Unplaced:
    """The families not in ``placed`` whose every comparison reads a metric of :data:`METRICS`, and their claims."""
    items = protocol.current().comparisons.items()
    return family_claims(
        tuple(name for name, cs in items if name not in placed and cs and all(c.metric in METRICS for c in cs))
    )


# ----------------------------------------------------------------------------- what a finding says

# a new family's claims, as the claims table states them, by kind of verdict (`lower`: any other)
CLAIMS = {"lower": "{x}: a lower final val loss than {y}"}
CLAIMS |= {"beyond_the_block": "{x}: a lower loss past its training block than at the block's end"}

# kind (or rule) -> (its section's sentence with an interval, without one, its subject in the claims table); the
# fields: subject, against, interval, verdict (`verdict_text`), state (how many planned runs are in), each of
# its details, and the paper's words of a peer's claim
TEMPLATES: dict[str, tuple[str, str, str] | str] = {
    "peer": (
        "{subject} ({source}) vs {against}: baseline − gate {interval}; its own claim, a {peer_claim}{verdict}.",
        "{subject} ({source}) vs {against}: no finished run yet; its own claim, a {peer_claim}{verdict}.",
        "{subject} vs {against}",
    ),
    "rope_gain": (
        "{subject} against {against}, the RoPE baseline − the design: {interval}{verdict}.",
        "{subject} against {against}, the RoPE baseline − the design: {state}.",
        "{subject} against {against}",
    ),
    "frozen_tau": (
        "{subject} (tau held at its tau_init {tau_init}, never trained) vs {against}: learned − frozen {interval}; "
        "final val loss {frozen_loss:num} frozen, {learned_loss:num} learned, whose tau ended at {learned_tau:num}"
        "{verdict}.",
        "{subject} (tau held at its tau_init {tau_init}, never trained) vs {against}: no finished run yet.",
        "{subject}, never trained, vs {against}: learned − frozen",
    ),
    "context": (
        "Δ by block size ({seeds:seeds}, which every block size ran): {by_block:blocks}; {monotone:grows}. Longest − "
        "shortest block: {interval}; the advantage grows with context{verdict}.",
        "{subject} by block size: no seed ran every block size, so no like-for-like comparison.",
        "",
    ),
    "ablation_pair": ("{claim_text}: {against} − {subject} {interval}{verdict}.",) * 2 + ("{subject} vs {against}",),
    "ablation_best": ("EGA-1 best of the paper's gates: {beating:beaten}{verdict}.",) * 2 + ("",),
    "tau_init": (
        "{seeds:by_init}. Slope of final tau on tau_init, per seed ({slopes:per_seed}): {interval}; tau converges "
        "regardless of its initialisation{verdict}.",
        "{seeds:by_init}.",
        "EGA-1 from tau_init {taus:inits}",
    ),
    "ablation_ranking": ("Ranking by final val loss, lowest first: {ranking:ranking}.",) * 2 + ("",),
    "paper_gain": (
        "{subject} against {against}, at the paper's size: loss(y) − loss(x) {interval}, the paper's "
        "{paper_figure:signed} (one seed, fp16 on a GPU){verdict}.",
        "{subject} against {against}, at the paper's size: {state}; the paper's {paper_figure:signed}.",
        "{subject} against {against}, at the paper's size",
    ),
    "paper_step": (
        "{subject} against {against}, at the paper's size: loss(y) − loss(x) {interval}{verdict}.",
        "{subject} against {against}, at the paper's size: {state}.",
        "{subject} against {against}, at the paper's size",
    ),
    "leak": (
        "Leak audit: {subject} (z from the whole window's mean and variance, so each key's gate reads later "
        "characters) vs {against}, as trained: Δ {interval}; paper {paper:signed}{causal:causal}{verdict}.",
        "Leak audit: {subject} vs {against}: {state}.",
        "leak audit: {subject}, z over the whole window, as trained",
    ),
    "leak_increment": (
        "The leak's own increment, {subject} against causal {against} (Δ as trained − causal Δ, per seed): {interval}.",
        "The leak's own increment, {subject} against causal {against}: {state}.",
        "",
    ),
    "leak_causal": (
        "{subject}'s final checkpoints (trained with z over the whole window) evaluated with the causal prefix z "
        "(`ega landscape --eval_znorm prefix`, whole validation split, {seeds:seeds}) vs {against}: Δ {interval}. "
        "A train/test mismatch, not a measure of EGA{above_causal:opened}. No verdict reads it, and its nearness in "
        "size to the paper's figure means nothing.",
        "{subject}'s checkpoints evaluated with the causal prefix z: not evaluated yet (`ega landscape "
        "--eval_znorm prefix --max_eval_windows 0 --ckpt_path <run>/checkpoints/last.ckpt "
        "--out results/landscape/<run>-prefix.json`).",
        "",
    ),
    "rerun": (
        "{subject} reruns {against} (group {original_group}) at {seeds:seeds} with the same configuration, kept for "
        "its checkpoints: {identical:same}. Evidence for nothing its original does not give: no verdict reads it.",
    )
    * 2
    + ("",),
    "tail": (
        "{subject}, z over the {znorm}: {frac_above_tau:pct} of keys above tau against {normal_tail:pct} = 1 − Φ(tau) "
        "(means over seeds of the gate summaries recorded during training); measured − normal in points, one value "
        "per seed: {interval}{verdict}.{heads_interval:heads}",
    )
    * 2
    + ("is it 1 − Φ(tau)? {subject}, z over the {znorm}, one value per seed",),
    "tau_mechanism": (
        "Why tau does not move. Loss change with every tau shifted (nats/char): {checkpoints:shifts}"
        "{frozen:frozen}{grad_norm_ratio:ratio}{verdict}{meaning}.",
    )
    * 2
    + ("why tau does not move: mechanism (a) or (b)",),
    "cost": ("{subject} against {against}, `ega bench`: {repetitions:timed}{verdict}.",) * 2 + ("",),
    "control": (
        "Positive control over the {gates} gates of the leaderboard ({finished} with finished runs), threshold "
        "{threshold:+.4f}: the best, {best}: {interval}; {resolution:resolves}{verdict}.",
        "Positive control over the {gates} gates of the leaderboard ({finished} with finished runs), threshold "
        "{threshold:+.4f}: no gate finished; {resolution:resolves}{verdict}.",
        "{finished} of {gates} leaderboard gates with finished runs",
    ),
    "beyond_the_block": (
        "{subject}, {eval_block_size:past_the_block}: {interval}{verdict}.{window_contrast:contrast}",
        "{subject}, {eval_block_size:past_the_block}: {state}.{window_contrast:contrast}",
        "{subject}: {eval_block_size:past_the_block}, its block {block_size}",
    ),
    "author_gain": (
        "{key}, {what} ({subject} against {against}{non_causal:window}): {interval}, the author's estimate (50 "
        "random batches){whole:whole}{verdict}.",
        "{key}, {what} ({subject} against {against}{non_causal:window}): {state}.",
        "EGA: {ega}. {key}, {what} ({subject} against {against}){non_causal:window}; at the author's phase-1 size "
        "{size}, not the paper's {table_size}",
    ),
    # one sentence, with its interval or not; no subject of its own in the claims table
    "improvement": "{subject} vs {against}: final val loss {loss:num} vs {baseline_loss:num}, Δ {interval}; the "
    "paper's {paper:signed}{verdict}.",
    "best_val_loss": "Best val loss (each run's lowest; the val loss rose after it in some runs), {subject} vs "
    "{against}: Δ {interval}.",
    "gap": "Generalization gap (val − train loss), baseline − EGA-1: {interval}; the paper's {paper:signed} "
    f"({paper.GAP['none']} − {paper.GAP['linear']}); the baseline's gap {{baseline_gap:num}}, "
    "{paper_regime:overfit}{verdict}.",
    "tau": "Final tau of {subject}: {interval}; paper ≈ {paper}; {tracked:settled}{verdict}.",
    "frac_above_tau": "Validation keys above tau, %: {interval}; paper {paper:percent}{verdict}.",
    "effect": (
        "{subject} against {against}: {interval}{verdict}.",
        "{subject} against {against}: {state}.",
        "{subject} against {against}",
    ),
}
# a step's kind -> the kind of the whole it takes apart: said alike, tested by the whole (its section holds it)
STEP_OF = {"author_step": "author_gain"}
# kind -> what its claims-table cell writes before and after its interval
CELL_WORDS = {"context": ("Δ(longest) − Δ(shortest) ", ""), "tau_init": ("slope of final tau on tau_init ", "")}
CELL_WORDS |= {"tail": ("measured − (1 − Φ(tau)) ", " points"), "frac_above_tau": ("", "%")}
# kind -> its cell, where words, not its interval
CELLS = {"ablation_best": "{beating:beaten}", "tau_mechanism": "{checkpoints:mechanism}", "cost": "{repetitions:timed}"}
CELLS |= {"control": "{best:best}; {resolution:resolves}"}
# kind -> (scale, digits, signed) of its intervals, where not (1, 3, signed): a slope is no difference, no sign
INTERVAL_FORMATS = {"tau_init": (1.0, 3, False), "tail": (100.0, 1, True), "tau": (1.0, 3, False)}
INTERVAL_FORMATS |= {"frac_above_tau": (100.0, 1, False)}
MEANING = {  # a mechanism's verdict, what it means
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
EVIDENCE = {"cost": "[{source}]({source})"}  # kind -> its link in the claims table, where not to its section


def _by_init(seeds: list[int], f: Compared) -> str:
    """Final tau, then the final val loss (its spread against the seeds' own), by initialisation, then the pairs."""
    d = f.details
    if not seeds:
        return "Final tau and loss by initialisation: no seed ran every initialisation, so no like-for-like view"
    taus = "; ".join(f"tau_init {init} → {fmt_summary(s)}" for init, _, s in d["taus"])
    text = f"Final tau by initialisation ({seed_list(seeds)}, which every initialisation ran): {taus}"
    if d["tau_span"] is not None:
        text += f"; the final means span {d['tau_span']:.3f} (paper ≈ {paper.TAU} regardless)"
    text += ". Final val loss by initialisation: " + "; ".join(f"tau_init {i} {fmt_summary(s)}" for i, s in d["losses"])
    if d["loss_span"] is not None:
        text += f"; the means span {d['loss_span']:.3f}"
        if d["scatter"] is not None:
            init, s = d["scatter"]
            ratio = d["loss_span"] / (s.std or math.nan)
            text += f", {ratio:.1f}× the seed-to-seed std of tau_init {init} ({s.std:.3f} over {s.n} seeds)"
    if d["paired"]:
        pairs = "; ".join(f"tau_init {init} {interval_text(x)}" for init, x in d["paired"])
        text += f". Paired by seed with tau_init {d['reference']}, its loss − each: {pairs}"
    return text


def _opened(causal: float | None, f: Compared) -> str:
    """The share of keys above tau of the leaky checkpoints evaluated causally, against as trained."""
    trained, tail = f.details["above_trained"], f.details["normal_tail"]
    if causal is None or trained is None or tail is None:
        return ""
    return (
        f": evaluated causally, {100 * causal:.0f}% of keys land above tau, against {100 * trained:.0f}% as trained "
        f"(1 − Φ(tau) = {100 * tail:.0f}%), so the gates open where training never had them open"
    )


def _heads_text(d: Any, f: Compared) -> str:
    if d is None:
        return ""
    runs = ", ".join(f"`{r}`" for r in f.details["heads_runs"])
    return (
        f" As a figure only (heads of one model are not independent): over the {f.details['heads']} heads of {runs} "
        f"evaluated by `ega landscape`, {fmt_interval(d, scale=100, digits=1)} points, the largest "
        f"{100 * (f.details['max_abs_gap'] or 0.0):.1f}."
    )


def _shifts(checkpoints: list[dict[str, Any]], f: Compared) -> str:
    parts = [
        f"`{c['label']}`: tau shifted by "
        + ", ".join(f"{num(delta, 2, True)}: {num(cost, 4, True)}" for delta, cost in c["tau_shift_cost"].items())
        + f"; alpha × 0: {num(c['alpha_scale_cost'].get(0.0), 3, True)}"
        for c in checkpoints
    ]
    return "; ".join(parts) or "no checkpoint evaluated yet"


def _frozen(frozen: list[tuple[str, Verdict | None]]) -> str:
    return ", ".join(f"{s}: {v.value if v is not None else None}" for s, v in frozen)


def _mechanism_cell(checkpoints: list[dict[str, Any]], f: Compared) -> str:
    """The final EGA-1 checkpoints' loss change at tau ∓ the step the rule reads, and the frozen-tau verdicts."""
    final = [c["tau_shift_cost"] for c in checkpoints if c["final"] and c["gate"] == "linear"]
    costs = "; ".join(
        f"tau {-TAU_STEP:+}: {num(c[-TAU_STEP], 4, True)}, {TAU_STEP:+}: {num(c[TAU_STEP], 4, True)}" for c in final
    )
    return "; ".join(part for part in (costs, _frozen(f.details["frozen"])) if part) or "—"


def _ratio(ratio: float | None, f: Compared) -> str:
    if ratio is None:
        return ""
    return (
        f". Median |grad tau| / |grad energy projection| over the logged steps of EGA-1's "
        f"{len(f.details['grad_norm_runs'])} runs under our recipe (learned positions, tau learned, z over the causal "
        f"prefix; the author's recipe's and the RoPE study's runs not read): {ratio:.3g}"
    )


def _timed(reps: int, f: Compared) -> str:
    """A bench's ratio: its median, quartiles and the median's interval, its repetitions, the design's floor."""
    if f.ours is None:
        return "no `ega bench` result"
    d, short = f.details, f" (the protocol reads one bench of at least {min_repetitions()})"
    ci = f", median's 95% CI {num(d['median_ci'][0])}–{num(d['median_ci'][1])}" if d["median_ci"] else ""
    floor = f"; kernel floor ×{num(d['kernel_floor'])}" if d["kernel_floor"] is not None else ""
    return f"step time ×{num(f.ours.mean)} (quartiles {num(d['q1'])}–{num(d['q3'])}{ci}), {reps} repetitions" + (
        (short if reps < min_repetitions() else "") + floor
    )


def _resolves(resolution: dict[int, Any], f: Compared) -> str:
    """The smallest difference the positive control's protocol resolves, at each number of paired seeds."""
    if not resolution:
        return "no gate has two paired seeds: no resolution yet"
    nominal = ", ".join(f"±{num(h.nominal)} at {n} seeds" for n, h in resolution.items())
    family = ", ".join(f"±{num(h.family)} at {n}" for n, h in resolution.items())
    at_family = f"; at the family's {level(f)}: {family}" if f.family_level is not None else ""
    return f"resolves {nominal} (95%, pooled paired std {num(f.details['pooled_std'], 4)}){at_family}"


def _beaten(names: list[str] | None, f: Compared) -> str:
    m, names = margin_of("loss"), names or []
    if not names:
        return f"no paper gate beats it by more than {m} (paired, family level)"
    joined = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    return f"{joined} beat{'s' if len(names) == 1 else ''} it by more than {m} (paired, family level)"


# how a template writes a detail, by its format spec (of the value and the finding's section): ``{x:num}`` as
# `text.num` (3 digits; None: a dash), ...
FORMATS: dict[str, Callable[[Any, Any], str]] = {
    "num": lambda x, _: num(x),
    "signed": lambda x, _: num(x, 3, True),
    "percent": lambda x, _: f"{100 * x:.0f}%",
    "overfit": lambda past, _: f"{'past' if past else 'below'} the paper's overfitting line {paper.OVERFIT_GAP}",
    "settled": lambda n, f: (
        f"TauTracker saw it settle in {f.details['settled']} of {n} seeds" if n else "no TauTracker"
    ),
    "by_init": _by_init,
    "per_seed": lambda slopes, _: ", ".join(f"seed {s} {v:.3f}" for s, v in slopes.items()),
    "inits": lambda taus, _: ", ".join(str(init) for init, _, _ in taus),
    "seeds": lambda seeds, _: seed_list(seeds),
    "blocks": lambda by_block, _: "; ".join(f"T{block} {fmt_interval(d)}" for block, d in by_block),
    "grows": lambda grows, _: "grows with every longer block" if grows else "not monotone",
    "beaten": _beaten,
    "pct": lambda x, _: f"{100 * x:.1f}%",
    "heads": _heads_text,
    "shifts": _shifts,
    "frozen": lambda frozen, _: f". Frozen tau vs learned: {_frozen(frozen)}" if frozen else "",
    "ratio": _ratio,
    "mechanism": _mechanism_cell,
    "causal": lambda d, f: "" if d is None else f"; causal {f.details['causal_subject']}: Δ {interval_text(d)}",
    "opened": _opened,
    "same": lambda same, f: (
        "bit for bit the same final val loss"
        if same
        else f"final val loss differs by up to {f.details['largest_difference']:.2e}"
    ),
    "timed": _timed,
    "resolves": _resolves,
    "best": lambda best, f: f"best: {best} {fmt_interval(f.interval)}, {how(f.interval)}" if best else "—",
    "window": lambda yes, _: "; **non-causal** (z over the whole window: a key's gate reads later characters)" * yes,
    "whole": lambda d, _: f"; over the whole validation split {fmt_interval(d)} (exploratory)" if d else "",
    "ranking": lambda ranking, f: ", ".join(
        f"{n}{'' if group == f.section else f' ({group})'} {num(mean)}" for n, group, mean in ranking
    ),
}


# past the block (`loss_past_block`): what each of its labels says, and what its label names beside it
PAST_THE_BLOCK = {
    Verdict.HOLDS: "reads past its block",
    Verdict.NEGLIGIBLE: "holds its loss",
    Verdict.DOES_NOT_HOLD: "does not extrapolate",
    Verdict.TOO_FEW_SEEDS: "undecided",
}
LABELS = {"beyond_the_block": "{verdict:reading}{replaces:replaced}"}  # kind -> its words after its label
COUNTED = {"beyond_the_block": "planned evaluations"}  # kind -> what its ``runs_in`` counts, where not runs


def _past_the_block(length: int, f: Compared) -> str:
    block = f.details["block_size"]
    return f"loss at positions {block - EDGE + 1}–{block} − at positions {block + 1}–{length} of windows of {length}"


FORMATS |= {
    "past_the_block": _past_the_block,
    "contrast": lambda d, f: (
        f" The window contrast beside it (loss on windows of {f.details['block_size']} − on windows of "
        f"{f.details['eval_block_size']}: how much the window's length moves the mean, descriptive, no label): "
        f"{interval_text(d)}."
        if d is not None
        else ""
    ),
    "reading": lambda verdict, _: f" ({PAST_THE_BLOCK[verdict]})" if verdict in PAST_THE_BLOCK else "",
    "replaced": lambda was, _: f"; in place of the window contrast's **{was}** (exploratory)" if was else "",
}


def _template(f: Compared) -> tuple[str, str, str]:
    t = TEMPLATES.get(STEP_OF.get(f.kind, f.kind)) or TEMPLATES.get(f.rule_name or "") or TEMPLATES["effect"]
    return (t, t, "") if isinstance(t, str) else t


class _Number:
    """A value a template formats: by a spec of :data:`FORMATS`, else as it is."""

    def __init__(self, value: Any, finding: Compared) -> None:
        self.value, self.finding = value, finding

    def __format__(self, spec: str) -> str:
        return FORMATS[spec](self.value, self.finding) if spec in FORMATS else format(self.value, spec)


def _fields(f: Compared) -> dict[str, Any]:
    said = state(f) if f.runs_planned is not None else "no finished run yet"
    (scale, digits, signed), d = f.interval_format, f.interval
    return {
        "subject": f.subject,
        "against": f.against,
        "interval": interval_text(d, signed, scale, digits) if d is not None else "",
        "verdict": verdict_text(f) + interim(f),
        "meaning": f": {MEANING[f.verdict]}" if f.verdict in MEANING else "",
        "state": said,
        "peer_claim": paper.PEER_CLAIM,
        "table_size": paper.TABLE_SIZE,
        "claim_text": paper.CLAIM[f.claim].text if f.claim in paper.CLAIM else f.subject,
        "paper": _Number(f.paper, f),
        **{k: _Number(v, f) for k, v in f.details.items()},
    }


def interim(f: Compared) -> str:
    """A label read at fewer paired seeds than its family plans for its sides (issue 72), said beside it."""
    families = protocol.current().families
    if f.verdict is None or f.code is None or f.family not in families:
        return ""
    planned = families[f.family].planned_seeds
    entries = {re.sub(r"-seed\d+$", "", run) for run in f.code.read}
    want = min((planned[e] for e in entries if e in planned), default=0)
    n = f.interval.n if f.interval is not None else 0
    return f" (interim: {n} of {want} seeds)" if n < want else ""


# ----------------------------------------------------------------------------- a finding's sentence and its row

# the margin each rule reads an interval against (its lines at ±; the protocol's names), where the family's
# interval is printed
MARGINS = {name: ("loss",) for name in ("effect", "lower", "worse", "best", "grows", "equivalent", "frozen")}
MARGINS |= {"tail": ("tail",), "forgets": ("tau_keep",)}


def measured(f: Compared) -> str:
    """What was measured and its verdict, as its section says it (its template)."""
    with_interval, without, _ = _template(f)
    return (with_interval if f.interval is not None else without).format(**_fields(f))


def sentence(f: Compared) -> str:
    """The finding as it reads in its section: what was measured and its verdict, then its family's correction,
    the seeds that would decide it, the seeds its sides lost to divergence and the code its sides ran."""
    seeds = seeds_text(f)
    extras = [family_sentence(f), seeds.capitalize() + "." if seeds else ""]
    if f.code is not None and f.code.diverged:  # how its verdict treats them: the protocol's rule
        runs = ", ".join(f"`{r}`" for r in f.code.diverged)
        extras.append(f"⚠ Diverged (final val loss not finite): {runs}; {diverged_rule()}.")
    return " ".join([measured(f), *(x for x in [*extras, code_sentence(f)] if x)])


def verdict_text(f: Compared) -> str:
    """The verdict as a sentence ends with it; a family read once, before its last run is in: how many are."""
    if f.interim:
        return f"; {state(f)}"
    return f" — {label_text(f)}" if f.verdict is not None else ""


def verdict_label(f: Compared) -> str:
    """The verdict in bold; an effect's two readings (direction, size); why a claim is not testable."""
    if f.verdict is None:
        return ""
    if f.not_testable:
        return f"**{f.verdict.value}** ({f.not_testable})"
    if f.rule_name != "effect" or f.verdict in (Verdict.NO_DATA,):
        return f"**{f.verdict.value}**"
    m = f.magnitude
    if m is None or m.reading is None:
        return f"effect **{f.verdict.value}**"
    if m.reading == NOT_PAPER_REGIME:  # a gap's size is not read (`Compared.size_regime`)
        return (
            f"effect **{f.verdict.value}**, size **{m.reading}** (the baseline's gap "
            f"{num(f.details.get('baseline_gap'))} stays below the paper's overfitting line {paper.OVERFIT_GAP}; its "
            f"baseline's was {paper.GAP['none']})"
        )
    ends = f" [{100 * m.low:.0f}%, {100 * m.high:.0f}%]" if m.low is not None and m.high is not None else ""
    return f"effect **{f.verdict.value}**, size **{m.reading}** ({100 * m.fraction:.0f}%{ends} of the paper's)"


def label_text(f: Compared) -> str:
    """Its label, and what its kind says after it (:data:`LABELS`, of its verdict and details)."""
    label = verdict_label(f)
    words = {"verdict": _Number(f.verdict, f), **{k: _Number(v, f) for k, v in f.details.items()}}
    return label + LABELS[f.kind].format(**words) if label and f.kind in LABELS else label


def state(f: Compared) -> str:
    """How many of a family's planned runs are in, before the protocol reads it."""
    counted = COUNTED.get(f.kind, "planned runs")
    if not f.runs_in:
        return f"no run finished yet (0 of {f.runs_planned} {counted} in)"
    n = f.interval.n if f.interval is not None else 0  # the seeds its interval pairs, before the label is read
    return (
        (f"{seed_count(n)}: no label; " if n else "")
        + f"not read yet: {f.runs_in} of {f.runs_planned} {counted} in (the protocol reads the family "
        "once, when all are finished)"
    )


def corrected_text(f: Compared) -> str:
    scale, digits, signed = f.interval_format
    d = f.corrected

    def prints_as(end: float | None, line: float) -> bool:  # ``end``, not ``line`` itself, prints as ``line``
        return end is not None and end != line and round(end * scale, digits) == round(line * scale, digits)

    # an end that would print as the margin it decides against gets the digits that show on which side it lies
    lines = [s * margin_of(m) for m in MARGINS.get(f.rule_name or "", ()) for s in (1, -1)]
    while d is not None and digits < 6 and any(prints_as(end, line) for end in (d.low, d.high) for line in lines):
        digits += 1
    return fmt_interval(d, signed=signed, scale=scale, digits=digits)


def family_sentence(f: Compared) -> str:
    if f.family is None:
        return ""
    text = f"Bonferroni over the {f.family} family (k = {f.family_k}): each interval at {level(f)}"
    if f.corrected is not None:
        text += f", this one {corrected_text(f)}"
    return text + "."  # its label reads this level alone: no nominal-95% label is set beside it


def level(f: Compared, digits: int = 2) -> str:
    return f"{100 * (f.family_level or 0.0):.{digits}f}%"


def code_sentence(f: Compared) -> str:
    if f.code is None or not f.code.sides:
        return ""
    sides = "; ".join(
        f"{side.variant} "
        + ", ".join(f"{fp[:8]} ({seed_list(seeds)})" for fp, seeds in side.fingerprints.items())  # 'unknown' is shorter
        for side in f.code.sides
    )
    machines = ""
    if f.code.split:
        seeds = ", ".join(map(str, f.code.split))
        machines = (
            f" ⚠ Seed(s) {seeds} pair runs made on different machines, so the difference measures the machines "
            "as well (rounding differs between them)."
        )
    if f.code.flag is None:
        return f"Code (fingerprint): {sides}.{machines}"
    runs = ", ".join(f"`{r}`" for r in f.code.runs)
    return f"Code (fingerprint): {sides}. ⚠ {f.code.flag}: not today's code for {runs}.{machines}"


def seeds_text(f: Compared) -> str:
    def count(n: int) -> str:
        return f"> {max_seeds()}" if n > max_seeds() else f"{n}"

    if f.seeds_needed is None:
        return ""
    spread = ""
    if f.seeds_range is not None and f.seeds_range != (f.seeds_needed, f.seeds_needed):
        low, high = f.seeds_range
        spread = f"; {count(low)} to {count(high)} with the std at the ends of its 95% interval"
    power = f"{100 * protocol.current().power:.0f}%"
    likely = f", most likely as **{f.seeds_verdict.value}**" if f.seeds_verdict is not None else ""
    return f"{count(f.seeds_needed)} paired seeds would decide it with {power} probability{likely}{spread}"


def ours_cell(f: Compared) -> str:
    """Its interval in the claims table: its kind's words where it has them (:data:`CELLS`, :data:`CELL_WORDS`)."""
    if f.kind in CELLS:
        return CELLS[f.kind].format(**_fields(f))
    d = f.interval
    if d is None:
        return "—"
    (scale, digits, signed), (before, after) = f.interval_format, CELL_WORDS.get(f.kind, ("", ""))
    return f"{before}{fmt_interval(d, signed=signed, scale=scale, digits=digits)}{after}, {how(d)}"


def claim_subject(f: Compared) -> str:
    """What a row of the claims table measured, where it is not the claim's own comparison."""
    return _template(f)[2].format(**_fields(f))


def family_cell(f: Compared) -> str:
    """The interval a family's verdict reads (Bonferroni), or what the verdict reads where it reads several."""
    if f.family is None:
        return "—"
    where = f"{f.family}, k = {f.family_k}, {level(f, 1)}"
    return where if f.corrected is None else f"{corrected_text(f)} ({where})"


def verdict_cell(f: Compared) -> str:
    if f.interim:
        return f"**{state(f)}**"
    seeds = seeds_text(f)
    return (label_text(f) or "**None**") + (f" ({seeds})" if seeds else "")


def registration_text(r: Registration) -> str:
    if r.mark == NOT_DATED:
        return f"{NOT_DATED} (git history cannot date the protocol here)"
    mark = r.mark
    if r.mark == "partly registered":
        mark = f"partly registered ({r.after} of {r.runs} runs after the rule)"
    if r.amended is not None:
        # ``fixed`` is the amendment's date unless a later edit of the level re-dated the label (issue 72: "the
        # amendment of 2026-12-07", the level edit's date, which no amendment has)
        of = "" if r.level_was is not None else f" of {r.fixed[:10]}"
        mark += f"; the amendment{of} changed its label (was: {r.amended})"
    if r.level_was is not None:
        mark += f"; the edit of the family-wise level ({r.fixed[:10]}) changed its label (was: {r.level_was})"
    return mark


def registration_cell(f: Compared) -> str:
    if f.confirmatory is False:
        return "exploratory (not confirmatory)"
    text = registration_text(f.registration) if f.registration is not None else "—"
    pending = f.code.pending if f.code is not None else []
    if pending and f.verdict is not None:
        done = len(f.code.read) if f.code is not None else 0
        text += f"; interim: {done} of {done + len(pending)} planned runs finished (the protocol reads it at all)"
    return text


def code_cell(f: Compared) -> str:
    if f.code is None or not f.code.sides:
        return "—"
    machines = f"; {split_text(f.code.split)}" if f.code.split else ""
    if f.code.flag is None:
        return "today's" + machines
    runs = f.code.runs
    return f"⚠ {f.code.flag} ({len(runs)} run{'s' if len(runs) > 1 else ''})" + machines


def evidence(f: Compared) -> str:
    """The link to the evidence: its kind's (:data:`EVIDENCE`), else its section."""
    return EVIDENCE[f.kind].format(**_fields(f)) if f.kind in EVIDENCE else f"[{f.section}](#{anchor(f.section)})"


# ----------------------------------------------------------------------------- what is drawn beside a family

# A figure kind reads what the protocol states beside a family's comparisons (an amendment's `figures:`): one entry
# (a dict of the protocol's words) and the report's inputs -> a `Drawing`. It reads every seed that is in and gives
# no label: a family's labels are its comparisons'. A new figure kind is one function registered with `figure_kind`.


@dataclass(frozen=True)
class Drawing:
    """One figure kind's reading: results.json's entry (``data``), its section's lines, and its figure (caption,
    file name, matplotlib figure; None: nothing to draw)."""

    family: str
    kind: str
    data: dict[str, Any]
    lines: list[str]
    figure: Any = None


FigureKind = Callable[[str, dict[str, Any], ReportInputs], Drawing]
FIGURES: dict[str, FigureKind] = {}


def figure_kind(key: str) -> Callable[[FigureKind], FigureKind]:
    """Registers a figure kind under ``key``, the `kind` an entry of the protocol's `figures:` names."""

    def register(fn: FigureKind) -> FigureKind:
        FIGURES[key] = fn
        return fn

    return register


def _runs(ref: str, inputs: ReportInputs) -> list[Any]:
    """The finished runs of a side (spec group / variant), on every corpus it ran."""
    return [r for v in variants_named(inputs, ref) for r in v.done]


@figure_kind("curve_difference")
def curve_difference(family: str, e: dict[str, Any], inputs: ReportInputs) -> Drawing:
    """y − x of a logged scalar at each step both sides logged, per seed they share: how a final difference came."""
    xs = {r.run.seed: dict(r.scalars.get(e["metric"], [])) for r in _runs(e["x"], inputs)}
    ys = {r.run.seed: dict(r.scalars.get(e["metric"], [])) for r in _runs(e["y"], inputs)}
    by_seed = {
        s: {step: ys[s][step] - xs[s][step] for step in sorted(set(xs[s]) & set(ys[s]))}
        for s in sorted(set(xs) & set(ys))
    }
    by_seed = {s: d for s, d in by_seed.items() if d}
    data = {"name": e["name"], "x": e["x"], "y": e["y"], "metric": e["metric"], "figure": e.get("figure")}
    data["by_seed"] = {str(s): [[step, d] for step, d in points.items()] for s, points in by_seed.items()}
    if not by_seed:
        done = f"{len(xs)} run(s) of x, {len(ys)} of y finished"
        return Drawing(family, "curve_difference", data, [f"- {e['name']} over steps: not yet recorded ({done})."])
    steps = sorted(set.intersection(*(set(d) for d in by_seed.values())))
    values = np.array([[by_seed[s][step] for step in steps] for s in by_seed])
    last = ", ".join(f"seed {s} {num(d[max(d)], 4, True)} at step {max(d)}" for s, d in by_seed.items())
    paper_figure = f"; the paper's {num(e['figure'], 3, True)}" if e.get("figure") is not None else ""
    line = f"- {e['name']} of `{e['metric']}` at each step both logged ({seed_list(list(by_seed))}): {last}"
    line += f"{paper_figure}. Drawn per step below; no label (the comparisons' labels are read once, at every seed)."
    fig = plots.curves_figure([(e["name"], steps, values)], f"difference of {e['metric']}", f"{family}: {e['name']}")
    ax = fig.axes[0]
    ax.axhline(0.0, color="black", linewidth=0.8)
    if e.get("figure") is not None:
        ax.axhline(e["figure"], color="grey", linestyle="--", linewidth=1, label="the paper")
    caption, file = f"{e['name']} over steps", f"{family}-{slug(e['name'])}.png"
    return Drawing(family, "curve_difference", data, [line], (caption, file, fig))


@figure_kind("against_figure")
def against_figure(family: str, e: dict[str, Any], inputs: ReportInputs) -> Drawing:
    """x's metric per seed beside a figure of the paper, within ``tolerance`` where the protocol registers one."""
    x = next(iter(variants_named(inputs, e["x"])), None)
    values = METRICS[e["metric"]](x, inputs) if x is not None else {}
    tolerance = e.get("tolerance")
    rows = [{"seed": s, "value": v, "minus_figure": v - e["figure"]} for s, v in sorted(values.items())]
    for row in rows:
        if tolerance is not None:
            row["within_tolerance"] = abs(row["minus_figure"]) <= tolerance
    data = {"name": e["name"], "x": e["x"], "figure": e["figure"], "tolerance": tolerance, "seeds": rows}
    beside = f"{e['figure_name']} {e['figure']}" + (f" (registered tolerance ±{tolerance})" if tolerance else "")
    if not rows:
        return Drawing(family, "against_figure", data, [f"- {e['name']} beside {beside}: not yet recorded."])
    said = "; ".join(
        f"seed {r['seed']} {num(r['value'], 4)}, {num(r['minus_figure'], 4, True)}"
        + ("" if tolerance is None else " (within it)" if r["within_tolerance"] else " (**outside it**)")
        for r in rows
    )
    return Drawing(family, "against_figure", data, [f"- {e['name']} beside {beside}: {said}."])


@figure_kind("scrambled_future")
def scrambled_future(family: str, e: dict[str, Any], inputs: ReportInputs) -> Drawing:
    """The leak measured directly (scripts/scrambled_future.py): checkpoint x's loss before each cut with the text
    after it scrambled, minus unscrambled, per cut and in total with its interval over windows, beside the causal
    control's; a figure of it per position."""
    path = Path(e["file"])
    data: dict[str, Any] = {"name": e["name"], "file": e["file"], "x": e["x"], "control": e["control"]}
    command = f"python scripts/scrambled_future.py <{e['x']}>/checkpoints/last.ckpt <{e['control']}>/... --out {path}"
    if not path.is_file():
        return Drawing(
            family, "scrambled_future", data, [f"- The leak at {e['name']}: not yet measured (`{command}`)."]
        )
    made = json.loads(path.read_text(encoding="utf-8"))
    by_run = {c["run"]: c for c in made["checkpoints"]}
    sides = [(role, by_run[run]) for role, run in (("x", e["x"]), ("control", e["control"])) if run in by_run]
    cpu = made.get("cpu")
    cpu = f"{cpu.get('model')} ({cpu.get('capability')})" if isinstance(cpu, dict) else cpu
    data |= {"command": made.get("command"), "cpu": cpu, "readings": {}}
    said = []
    for role, c in sides:
        t = c["total"]
        data["readings"][role] = {"run": c["run"], "cuts": c["cuts"], "total": t}
        cuts = "; ".join(f"cut {r['cut']} {_leak_interval(r)}" for r in c["cuts"])
        what = "the causal control" if role == "control" else "z over the whole window"
        said.append(f"`{c['run']}` ({what}): {cuts}; every cut {_leak_interval(t)}")
    missing = [run for run in (e["x"], e["control"]) if run not in by_run]
    total = sides[0][1]["total"] if sides else {"windows": 0, "level": 0.95}
    lines = [
        f"- The leak at {e['name']} (loss before the cut with the text from it on scrambled − as it is, nats/char, "
        f"mean over {total['windows']} windows, {100 * total['level']:.0f}% interval over windows; "
        f"`{made.get('command')}`, {cpu}): "
        + " / ".join(said)
        + (f"; not in the file: {', '.join(missing)}" if missing else "")
        + ". No label: a causal model's is 0."
    ]
    curves = [
        (f"{c['run']} cut {r['cut']}", list(range(r["cut"])), np.array([r["delta_by_position"]]))
        for _, c in sides
        for r in c["cuts"]
    ]
    fig = (
        plots.curves_figure(curves, "loss scrambled − true", f"the leak, {e['name']}", xlabel="position")
        if curves
        else None
    )
    file = f"{family}-leak-{slug(path.stem)}.png"
    return Drawing(
        family, "scrambled_future", data, lines, (f"the leak per position, {e['name']}", file, fig) if fig else None
    )


def _leak_interval(r: dict[str, Any]) -> str:
    return fmt_bounds(r["delta"], r["low"], r["high"], digits=4)


def drawings(inputs: ReportInputs) -> list[Drawing]:
    """Every entry of the protocol's `figures:`, read by its kind, family by family."""
    return [
        FIGURES[e["kind"]](family, e, inputs) for family, items in protocol.current().figures.items() for e in items
    ]


def drawings_section(inputs: ReportInputs, data: list[Drawing], found: Any, drawn: list[tuple[str, str]]) -> list[str]:
    """Each family's section of what is drawn beside its comparisons: each reading, and its figure."""
    files = dict(drawn)
    out: list[str] = []
    for family in dict.fromkeys(d.family for d in data):
        # its comparisons' sentences are its group's section's (`report_markdown.section`), not repeated here
        out += [f"## {family}: beside its comparisons", ""]
        for d in (d for d in data if d.family == family):
            out += d.lines
            if d.figure is not None and d.figure[0] in files:
                out += ["", f"![{d.figure[0]}]({files[d.figure[0]]})", ""]
        out.append("")
    return out
