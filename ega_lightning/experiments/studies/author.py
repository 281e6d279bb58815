"""What in the author's EGA makes its gain (issue 50): the author's EGA-1 as published against their baseline, at
their phase-1 size and recipe (configs/sweeps/author.yaml), its gain taken apart into four paired steps that sum to
it seed by seed, and the author's EGA-4 against the same baseline (phase 1's own comparison).

"X − Y" is loss(Y) − loss(X), positive when X has the lower loss; A to F are the spec's six variants (`VARIANTS`):
B − A = (B − C: the leak) + (C − D: the order) + (D − E: the gate's form) + (E − A: our gate's gain). The loss read
is the recorded val/loss (the author's estimate: 50 random batches); the whole validation split of the same final
checkpoints (`whole_split`) is read beside it, exploratory. The family `author` is read once, when every planned run
is finished (the protocol's fixed stopping rule): until then each row says how many runs are in, and no label.

Plain data in (`measure`: per-seed losses, both evaluations), plain data out (`as_json`), prose from the results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from ega_lightning.experiments import engine, paper, plots, protocol, whole_split
from ega_lightning.experiments.comparisons import RECIPE_DEFAULTS, SHAPE_KEYS, Variant, shape, shape_text
from ega_lightning.experiments.findings import Finding, Where, code_of, measured_with, pair
from ega_lightning.experiments.stats import Difference, bonferroni_level, compare, summarize, widen
from ega_lightning.experiments.study import Drawn, Figure, ReportInputs, Study
from ega_lightning.experiments.text import anchor, fmt_interval, fmt_summary, how, interval_cell, num, seed_count

GROUP = "author"  # the spec group (configs/sweeps/author.yaml) and the protocol's family
TITLE = "What in the author's EGA makes its gain"
AUTHORS, OURS = "the author's", "ours, in the author's model and recipe"  # which EGA a verdict is about

# letter -> (spec variant, what it is); the protocol plans each variant's seeds by the same names
VARIANTS = {
    "A": ("author-none", "the baseline (the author's model, no gate)"),
    "B": ("author-ega1", "the author's EGA-1 as published (z over the whole window, dropout first)"),
    "C": ("author-ega1-prefix", "B with the causal z over the prefix"),
    "D": ("author-ega1-gatefirst", "C with the gate and the renormalisation before dropout"),
    "E": ("author-linear", "our EGA-1 (`linear`) in the author's model and recipe"),
    "F": ("author-ega4", "the author's EGA-4 as published (a mixture of 4 gates, z over the whole window)"),
}
# (X, Y, what X − Y measures, which EGA), in the waterfall's order from A up, then B − A and F − A; its kind and
# claim are the protocol's comparison of X against Y (`compared`), which this table only words
STEPS = (
    ("E", "A", "our gate's gain", OURS),
    ("D", "E", "the gate's form: the author's gate against our `linear`", AUTHORS),
    ("C", "D", "the order: dropout before the gate and the renormalisation against after", AUTHORS),
    ("B", "C", "the leak: z over the whole window against the causal prefix", AUTHORS),
    ("B", "A", "the author's EGA-1's gain", AUTHORS),
    ("F", "A", "the author's EGA-4's gain (phase 1's own comparison)", AUTHORS),
)
TELESCOPING = "ABCDE"  # the variants of B − A's steps: their seeds are the seeds every one of them finished
KINDS = ("author_gain", "author_step")  # its findings' (the engine's `Compared`, its sentences templates)
engine.EVIDENCE |= dict.fromkeys(KINDS, f"[{TITLE}](#{anchor(TITLE)})")  # the claims table links its section


@dataclass(frozen=True)
class Side:
    """One variant of the study: per seed its recorded val/loss (the author's estimate) and its whole-split loss."""

    letter: str
    label: str
    what: str
    non_causal: bool  # z over the whole window: a key's gate reads later characters
    estimate: dict[int, float]
    whole: dict[int, float]
    runs: list[str]  # its finished runs
    attention: str = RECIPE_DEFAULTS["attention"]  # the attention path its runs trained on (reference | fused)


@dataclass(frozen=True)
class Step:
    """X − Y = loss(Y) − loss(X), per seed and as intervals: nominal 95%, at the family's level, over the whole
    split (95%, exploratory), and how far the author's estimate moves it from the whole split's (95%)."""

    x: str
    y: str
    kind: str
    what: str
    ega: str
    seeds: list[int]
    per_seed: dict[int, float]
    diff: Difference | None
    family: Difference | None
    whole: Difference | None
    moved: Difference | None

    @property
    def key(self) -> str:
        return f"{self.x} − {self.y}"


@dataclass(frozen=True)
class Decomposition:
    """The study over one corpus of the group: its sides, its steps, and how many of its planned runs are in."""

    corpus: str
    size: str  # the size and budget it ran at (from the records; before any: from its configs)
    sides: dict[str, Side]
    steps: list[Step]
    runs_in: int
    runs_planned: int
    variants: dict[str, Variant]  # kept for the code and the regime of its findings (not in results.json)

    @property
    def complete(self) -> bool:
        return self.runs_in >= self.runs_planned


# ----------------------------------------------------------------------------- the findings


def compared(x: str, y: str) -> protocol.Comparison:
    """The protocol's comparison of the variant lettered ``x`` against ``y`` (a KeyError for one it does not name)."""
    named = {(c.x, c.y): c for c in protocol.current().comparisons[GROUP]}
    return named[(f"{GROUP}/{VARIANTS[x][0]}", f"{GROUP}/{VARIANTS[y][0]}")]


def findings(d: Decomposition) -> list[Finding]:
    """One finding per step of ``d`` (the engine's, its sentence a template of kind `author_gain` / `author_step`):
    judged by the protocol's rule once every planned run is in, else its intervals with no label."""
    out: list[Finding] = []
    for s in d.steps:
        x, y = d.variants[s.x], d.variants[s.y]
        regime = measured_with(x, y) if x.done and y.done else f"{GROUP} / {d.corpus}: {d.size} (planned)"
        where = Where(GROUP, d.corpus, regime, f"{s.x} `{d.sides[s.x].label}`", f"{s.y} `{d.sides[s.y].label}`")
        claim = compared(s.x, s.y).claim
        # what the step measured, the study's size, and whether a side reads later characters
        details = {k: getattr(s, k) for k in ("key", "what", "ega", "seeds", "per_seed", "whole", "moved")}
        details |= {"size": d.size, "non_causal": d.sides[s.x].non_causal or d.sides[s.y].non_causal}
        # B − A is the paper's own comparison (its +0.103): its size is read against that figure, as every effect is
        figure = paper.IMPROVEMENT.get(d.corpus) if (s.x, s.y) == ("B", "A") else None
        counts = {"runs_in": d.runs_in, "runs_planned": d.runs_planned, "code": code_of(x, y), "details": details}
        reads = ((pair(x, y), s.diff),)
        out.append(
            engine.judge(s.kind, where, reads, claim=claim, read=d.complete, family=GROUP, paper=figure, **counts)
        )
    return out


# ----------------------------------------------------------------------------- what it measures


def _planned_size(v: Variant) -> str:
    """The size and budget a variant's configs set (its first run's, later files over earlier), '?' unread."""
    model: dict[str, Any] = {}
    trainer: dict[str, Any] = {}
    for c in v.runs[0].run.configs if v.runs else ():
        try:
            config = yaml.safe_load(Path(c).read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        model |= config.get("model") or {}
        trainer |= config.get("trainer") or {}
    if not set(SHAPE_KEYS) <= set(model) or "max_steps" not in trainer:
        return "?"
    return f"{shape_text(shape(model))}, {trainer['max_steps']:,} steps"


def _size(variants: Sequence[Variant]) -> str:
    done = [r for v in variants for r in v.done]
    if not done:
        return _planned_size(variants[0]) if variants else "?"
    steps = "/".join(f"{n:,}" for n in sorted({r.max_steps for r in done if r.max_steps}))
    return f"{shape_text(shape(done[0].hparams))}, {steps} steps"


def _paired(sides: Mapping[str, Side], x: str, y: str, seeds: Sequence[int], whole: bool = False) -> dict[int, float]:
    """loss(Y) − loss(X) per seed, on ``seeds`` (the whole split's where ``whole``; a seed without it is left out)."""
    lx, ly = (sides[x].whole, sides[y].whole) if whole else (sides[x].estimate, sides[y].estimate)
    return {s: ly[s] - lx[s] for s in seeds if s in lx and s in ly}


def _interval(per_seed: Mapping[int, float]) -> Difference | None:
    return compare(dict(per_seed), {s: 0.0 for s in per_seed}) if per_seed else None


def decomposition(inputs: ReportInputs, corpus: str) -> Decomposition | None:
    """The study on ``corpus``: None where the report reads no variant of it."""
    found = {v.label: v for v in inputs.variants if v.group == GROUP and v.corpus == corpus}
    if not all(label in found for label, _ in VARIANTS.values()):
        return None
    variants = {letter: found[label] for letter, (label, _) in VARIANTS.items()}
    whole = {w.run_name: w.loss for w in inputs.whole_split}
    sides = {}
    for letter, (label, what) in VARIANTS.items():
        v = variants[letter]
        options = v.options if v.done else (v.runs[0].gate_options or {})
        runs = {r.run.seed: r.run.run_name for r in v.done}
        over_whole = {seed: whole[name] for seed, name in runs.items() if name in whole}
        non_causal = options.get("znorm") == "window"
        path = str(v.hp("attention") or RECIPE_DEFAULTS["attention"])
        sides[letter] = Side(
            letter, label, what, non_causal, v.by_seed("final_val_loss"), over_whole, list(runs.values()), path
        )
    shared = sorted(set.intersection(*(set(sides[x].estimate) for x in TELESCOPING)))
    level = bonferroni_level(len(STEPS), protocol.current().level)  # the family's k: each comparison of `STEPS` once
    steps = []
    for x, y, what, ega in STEPS:
        kind = compared(x, y).kind
        seeds = shared if x in TELESCOPING else sorted(set(sides[x].estimate) & set(sides[y].estimate))
        per_seed = _paired(sides, x, y, seeds)
        over_whole = _paired(sides, x, y, seeds, whole=True)
        moved = _interval({s: per_seed[s] - over_whole[s] for s in over_whole})
        diff = _interval(per_seed)
        steps.append(
            Step(x, y, kind, what, ega, seeds, per_seed, diff, widen(diff, level), _interval(over_whole), moved)
        )
    families = protocol.current().families
    planned = families[GROUP].planned_seeds if GROUP in families else {}
    runs_in = sum(min(len(variants[x].done), planned.get(label, 0)) for x, (label, _) in VARIANTS.items())
    size = _size(list(variants.values()))
    return Decomposition(corpus, size, sides, steps, runs_in, sum(planned.values()), variants)


def measure(inputs: ReportInputs) -> list[Decomposition]:
    corpora = dict.fromkeys(v.corpus for v in inputs.variants if v.group == GROUP)
    return [d for c in corpora if (d := decomposition(inputs, c)) is not None]


# ----------------------------------------------------------------------------- its section, figure and JSON


def _step_line(s: Step, f: Finding | None, seeds: Sequence[int]) -> str:
    label = engine.verdict_cell(f) if f is not None else "—"
    cells = [
        f"{s.key}" + (" (= the sum of the four steps)" if s.key == "B − A" else ""),
        s.what,
        *(num(s.per_seed.get(seed), 4, True) for seed in seeds),
        interval_cell(s.diff),
        interval_cell(s.family),
        label,
        interval_cell(s.whole),
        interval_cell(s.moved),
    ]
    return "| " + " | ".join(cells) + " |"


def _side_line(side: Side) -> str:
    moved = _interval({s: side.estimate[s] - side.whole[s] for s in side.whole if s in side.estimate})
    cells = [
        f"{side.letter} `{side.label}`",
        side.what,
        "whole window (**non-causal**)" if side.non_causal else "causal",
        f"{len(side.estimate)}",
        fmt_summary(summarize(list(side.estimate.values())), 4),
        fmt_summary(summarize(list(side.whole.values())), 4) if side.whole else "—",
        fmt_interval(moved, digits=4),
    ]
    return "| " + " | ".join(cells) + " |"


# the test that holds our model, on each attention path, to the author's forward and gradients in float64 (tests/)
PATHS_HELD_BY = "tests/test_author_ega.py::test_our_author_configuration_computes_the_authors_forward_and_gradients"


def _paths(d: Decomposition, s: Step) -> dict[str, Any]:
    """The attention path each side of a step trained on, and where they differ the test that holds both paths to
    the author's forward (the step then measures what it names, not the path)."""
    x, y = d.sides[s.x].attention, d.sides[s.y].attention
    return {s.x: x, s.y: y, "held_by": PATHS_HELD_BY if x != y else None}


def _path_line(d: Decomposition, s: Step) -> str:
    """Beside a step whose sides trained on different attention paths: that both compute the author's forward."""
    paths = _paths(d, s)
    if paths["held_by"] is None:
        return ""
    return (
        f"{s.key} also switches the attention path: {s.x} trains on the {paths[s.x]} path, {s.y} on the "
        f"{paths[s.y]} one. Both compute the author's forward: `{paths['held_by']}` holds our model on each path "
        "(reference and fused, z over the prefix and over the whole window) to the author's own forward, loss and "
        "every gradient in float64 (relative error below 1e-10), so the step measures what it names, not the "
        "path (beyond float32 rounding, which differs between the paths as between machines).\n"
    )


def _moved_line(d: Decomposition) -> str:
    """Whether the author's 50-batch estimate moves the steps from the whole split's, in words from the numbers."""
    moved = [s for s in d.steps if s.moved is not None]
    if not moved:
        return (
            "The whole validation split: no evaluation of these checkpoints is committed yet "
            f"(results/{whole_split.DIRNAME}/<run>.json), so no step is read beside it."
        )
    largest = max(moved, key=lambda s: abs(s.moved.estimate) if s.moved else 0.0)
    m = protocol.current().margin("loss")
    return (
        "Does the author's estimate move the number? Per step, the estimate's difference − the whole split's, paired "
        "by seed (95%): " + "; ".join(f"{s.key} {fmt_interval(s.moved, digits=4)}" for s in moved) + f". The "
        f"largest, {largest.key}, moves it by {num(largest.moved.estimate if largest.moved else None, 4, True)}, "
        f"against the loss margin ±{m} (exploratory: no label)."
    )


def _leak_lines(d: Decomposition, leak: Sequence[Finding]) -> list[str]:
    """B − C beside the leak study's increment (`leak_increment`: EGA-1 z over the whole window against causal
    EGA-1, our gate and recipe): the same step, the author's gate and recipe against ours."""
    step = next(s for s in d.steps if s.key == "B − C")
    ours = [f for f in leak if f.kind == "leak_increment" and f.corpus == d.corpus]
    here = f"{fmt_interval(step.family)} (family {GROUP}, {how(step.diff)})" if step.diff else "not yet measured"
    theirs = [
        f"- The leak study's step ({f.subject} against causal {f.against}, our gate and recipe, {f.regime}): "
        f"{fmt_interval(f.corrected or f.interval)} (family {f.family}, {how(f.interval)})."
        for f in ours
    ]
    return [
        f"- B − C here (the author's gate, dropout first, the author's recipe, {d.size}): {here}.",
        *(theirs or ["- The leak study (configs/sweeps/short.yaml's group `leak`) is not in this report."]),
    ]


def section(inputs: ReportInputs, data: list[Decomposition], found: Sequence[Finding], drawn: Drawn) -> list[str]:
    lines: list[str] = []
    for d in data:
        mine = {f.details["key"]: f for f in found if f.kind in KINDS and f.corpus == d.corpus}
        seeds = sorted({s for step in d.steps for s in step.seeds})
        level = bonferroni_level(len(STEPS), protocol.current().level)
        state = (
            f"all {d.runs_planned} planned runs are in"
            if d.complete
            else f"**{d.runs_in} of {d.runs_planned} planned runs are in**: no label is read before the last"
        )
        lines += [
            f"## {TITLE}",
            "",
            f"The author's EGA at the author's phase-1 size and recipe ({d.size}, {d.corpus}; the paper's table: "
            f"{paper.TABLE_SIZE}), paired by seed: "
            + "; ".join(f"{s.letter} {s.what}" + (" (non-causal)" if s.non_causal else "") for s in d.sides.values())
            + ". X − Y = loss(Y) − loss(X), positive when X has the lower loss; per seed the four steps E − A, D − E, "
            "C − D and B − C sum to B − A. The loss is the recorded val/loss at the last step, the author's estimate "
            f"(the mean of 50 random batches); one family, k = {len(STEPS)}, each interval at {100 * level:.2f}%, read "
            f"three ways against the loss margin, once, when every planned run is finished: {state}. The whole "
            "validation split of the same final checkpoints is read beside it, exploratory (no label).",
            "",
        ]
        lines += [f"![{caption}]({file})" for caption, file in drawn if d.corpus in file] + [""]
        head = ["step", "what it measures", *(f"seed {s}" for s in seeds), "95%", "family level", "label"]
        head += ["whole split (95%, exploratory)", "estimate − whole split (95%)"]
        lines += [
            "| " + " | ".join(head) + " |",
            "|---|---|" + "---:|" * len(seeds) + "---|---|---|---|---|",
            *(_step_line(s, mine.get(s.key), seeds) for s in d.steps),
            "",
            "| variant | what | z | seeds | the author's estimate (50 random batches) | whole split | "
            "estimate − whole split (95%) |",
            "|---|---|---|---:|---|---|---|",
            *(_side_line(s) for s in d.sides.values()),
            "",
            *(line for s in d.steps if (line := _path_line(d, s))),
            _moved_line(d),
            "",
            "The leak, in the author's EGA and in ours:",
            "",
            *_leak_lines(d, [f for f in found if f.kind == "leak_increment"]),
            "",
        ]
    return lines


def _bar(s: Step) -> plots.Bar:
    """A step as the waterfall draws it: its interval at the family's level, labelled by what it measures."""
    d = s.family
    assert d is not None
    short = s.what.split(":")[0].split(" (")[0].removesuffix("'s gain")
    return (f"{s.key}\n{short}", d.estimate, d.low, d.high)


def figures(inputs: ReportInputs, data: list[Decomposition]) -> list[Figure]:
    """The waterfall of each corpus with a seed every variant of B − A finished: A, then E − A, D − E, C − D,
    B − C, ending at B − A, and F − A beside it, each with its interval at the family's level."""
    out = []
    for d in data:
        by_key = {s.key: s for s in d.steps}
        if by_key["B − A"].diff is None:
            continue

        steps = [_bar(s) for s in d.steps if s.kind == "author_step"]
        totals = [_bar(by_key["B − A"])] + ([_bar(by_key["F − A"])] if by_key["F − A"].diff is not None else [])
        level = bonferroni_level(len(STEPS), protocol.current().level)
        title = (
            f"The author's EGA-1 from their baseline A to B, step by step ({d.corpus}, {d.size}; "
            f"{seed_count(len(by_key['B − A'].seeds))}, intervals at {100 * level:.2f}%)"
        )
        fig = plots.waterfall_figure(steps, totals, protocol.current().margin("loss"), title)
        out.append(("the author's EGA-1's gain, step by step", f"{GROUP}-{d.corpus}-waterfall.png", fig))
    return out


def as_json(inputs: ReportInputs, data: list[Decomposition]) -> list[dict[str, Any]]:
    """results.json's ``author``: each corpus's sides and steps, per seed and as intervals."""
    return [
        {
            **{k: getattr(d, k) for k in ("corpus", "size", "runs_in", "runs_planned")},
            "variants": {x: replace(s, runs=sorted(s.runs)) for x, s in d.sides.items()},
            "steps": [{"key": s.key, **vars(s), "paths": _paths(d, s)} for s in d.steps],
        }
        for d in data
    ]


# it reads the variants of the spec group `author` (`ReportInputs.variants`), not its tables, and the leak study's
# findings from the report's (its section sets B − C beside them)
STUDY = Study(
    "author",
    families=(GROUP,),
    measure=measure,
    findings=lambda inputs, data, read: [f for d in data for f in findings(d)],
    section=section,
    figures=figures,
    json=as_json,
)
