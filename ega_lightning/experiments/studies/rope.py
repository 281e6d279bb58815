"""The RoPE study (issue 56): every gate on a modern baseline, and each design beyond its training length.

configs/sweeps/rope.yaml trains, at the cpu size under our recipe, the RoPE baseline and four designs set against
it (the study names that reference: no other run is), paired by seed: EGA-1 with RoPE, FoX and ALiBi each in its
paper's design (no position embedding) and the baseline with no position signal at all. The family `rope` reads
each design against the RoPE baseline on the final val loss; the family `beyond` reads, since the protocol's
amendment of 2026-12-07 (issue 68), each design's same final checkpoint in windows of 2 and 4 times its block: its
mean loss at the block's last 32 positions minus at every position past the block, in the same windows
(`scripts/seed_runner.py --beyond_the_block 2 4`, results/beyond-the-block/); the window contrast it replaced (loss
on windows of the block − on the longer windows) is kept beside it as a figure with no label. Both are read once,
when every planned run (and evaluation) is in; before that each finding gives its intervals with no label.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ega_lightning.experiments import comparisons, engine, plots, protocol
from ega_lightning.experiments.comparisons import Variant
from ega_lightning.experiments.findings import Finding, Where, code_of, measured_with
from ega_lightning.experiments.paper import Claim
from ega_lightning.experiments.stats import compare
from ega_lightning.experiments.study import Drawn, Figure, ReportInputs, Study

TITLE = "Every design on the RoPE baseline, and beyond its training block"
GROUP = "rope"  # the spec group (configs/sweeps/rope.yaml) and the protocol's family of the gains
BEYOND = "beyond"  # the protocol's family of the evaluations beyond the block
KIND = "beyond_the_block"  # its findings' kind: the engine's `Compared`, said by its TEMPLATES row
REFERENCE = "rope-none"  # the variant every design is set against: the RoPE baseline
# spec variant -> the design, as the claims table names it; the protocol plans each variant's seeds
DESIGNS = {
    "rope-linear": "EGA-1 with RoPE",
    "fox-nopos": "FoX in its paper's design (no position embedding)",
    "alibi-nopos": "ALiBi in its paper's design (no position embedding)",
    "none-nopos": "the baseline with no position signal (the causal mask alone)",
}
NAMES = {REFERENCE: "the RoPE baseline", **DESIGNS}
FACTORS = (2, 4)  # the evaluation windows, in training blocks
BINS = 32  # the points along a window in the loss-by-position figures
EDGE = engine.EDGE  # past the block: the block's last positions it reads (the engine's sentences name them too)


def is_reference(x: Variant) -> bool:
    """The study's reference by its label and a RoPE position: a learned-position `none` is never a RoPE design's."""
    return x.label == REFERENCE and x.hp("position") == "rope"


# the study's table and results.json's groups read every design against the reference the protocol names, FoX and
# ALiBi without positions and the baseline with no position signal too (their position signal part of the design)
comparisons.NAMED_REFERENCES[GROUP] = (is_reference, ("position",))

# the findings past the block are the study's own reading (no comparison of the protocol): the claims they judge
engine.JUDGES[KIND] = tuple(f"beyond:{label}" for label in NAMES)

CLAIMS = (
    *(
        Claim(f"rope:{label}", f"{name}: a lower final val loss than the RoPE baseline", "—")
        for label, name in DESIGNS.items()
    ),
    *(
        Claim(f"beyond:{label}", f"{name}: a lower loss past its training block than at the block's end", "—")
        for label, name in NAMES.items()
    ),
)


@dataclass(frozen=True)
class Measured:
    """The study's variants by label (those the report reads), each run's loss on longer windows, and how many of
    the planned runs are in."""

    variants: dict[str, Variant]
    beyond: dict[tuple[str, int], dict[int, float]]  # (variant, window length) -> seed -> loss
    by_position: dict[tuple[str, int], dict[int, tuple[float, ...]]]  # (variant, window length) -> seed -> curve
    runs_in: int
    runs_planned: int
    evaluations_in: int  # beyond the block: one per planned run and length
    evaluations_planned: int

    @property
    def complete(self) -> bool:
        return self.runs_in >= self.runs_planned and self.evaluations_in >= self.evaluations_planned


def measure(inputs: ReportInputs) -> Measured | None:
    """The study's variants and their evaluations beyond the block; None where the report reads none of them."""
    variants = {v.label: v for v in inputs.variants if v.group == GROUP and v.label in NAMES}
    if not variants:
        return None
    evaluated = {(e.run_name, e.eval_block_size): e for e in inputs.beyond_the_block}
    beyond: dict[tuple[str, int], dict[int, float]] = {}
    by_position: dict[tuple[str, int], dict[int, tuple[float, ...]]] = {}
    for label, v in variants.items():
        runs = {r.run.seed: r.run.run_name for r in v.done}
        for length in (factor * _block(v) for factor in FACTORS):
            found = {s: evaluated[(name, length)] for s, name in runs.items() if (name, length) in evaluated}
            beyond[(label, length)] = {s: e.loss for s, e in found.items()}
            by_position[(label, length)] = {s: e.by_position for s, e in found.items()}
    families = protocol.current().families
    planned = dict(families[GROUP].planned_seeds) if GROUP in families else {}
    runs_in = sum(min(len(v.done), planned.get(_entry(v), 0)) for v in variants.values())
    evaluations_in = sum(
        min(len(seeds), planned.get(_entry(variants[label]), 0)) for (label, _), seeds in beyond.items()
    )
    total = sum(planned.values())
    return Measured(variants, beyond, by_position, runs_in, total, evaluations_in, total * len(FACTORS))


def findings(data: Measured) -> list[Finding]:
    """One finding per design and length beyond the block: judged by the protocol's rule once every planned run and
    evaluation is in, else its intervals with no label. Each design against the RoPE baseline is the protocol's
    comparison, read by `engine` (`STUDY`)."""
    out: list[Finding] = []
    for label, v in data.variants.items():
        block = _block(v)
        for factor in FACTORS:
            length = factor * block
            longer = data.beyond[(label, length)]
            own = {s: x for s, x in v.by_seed("final_val_loss").items() if s in longer}
            contrast = compare(own, longer) if own and longer else None
            curves = data.by_position[(label, length)]
            edge = {s: float(np.mean(c[block - EDGE : block])) for s, c in curves.items()}
            past = {s: float(np.mean(c[block:])) for s, c in curves.items()}
            diff = compare(edge, past) if edge and past else None
            where = Where(GROUP, v.corpus, measured_with(v), f"{NAMES[label]} `{label}`", None)
            read = ((f"{label} T{length}: positions {block - EDGE + 1}–{block} − {block + 1}–{length}", diff),)
            # the window contrast's label at the family's level, which this measure replaced: `Compared.family_read`
            details = {"block_size": block, "eval_block_size": length, "window_contrast": contrast, "replaces": None}
            measured = {"family": BEYOND, "code": code_of(v), "details": details}
            measured |= {"runs_in": data.evaluations_in, "runs_planned": data.evaluations_planned}
            out.append(engine.judge(KIND, where, read, claim=f"beyond:{label}", read=data.complete, **measured))
    return out


def _block(v: Variant) -> int:
    """The training block of a variant's runs (its first finished run's; the cpu size's 128 before any)."""
    return int(v.done[0].hparams.get("block_size") or 128) if v.done else 128


def _entry(v: Variant) -> str:
    return v.runs[0].run.entry if v.runs else ""


# ----------------------------------------------------------------------------- its section and figures


def figures(inputs: ReportInputs, data: Measured | None) -> list[Figure]:
    """For each length beyond the block that some run was evaluated at, the loss along the window, one line per
    design (its mean over seeds, the band its min and max), the training block dashed: the measure FoX's and ALiBi's
    papers report. Each point is the mean over a `BINS`-th of the window (8 positions at 256, 16 at 512): one
    position's mean over the split's few hundred windows varies by ~0.1 nats, about the gaps between the designs."""
    if data is None:
        return []
    block = _block(next(iter(data.variants.values())))
    out: list[Figure] = []
    for length in sorted({length for _, length in data.by_position}):
        width = max(1, length // BINS)
        middles = [(start + 1 + min(start + width, length)) / 2 for start in range(0, length, width)]
        curves = [
            (label, middles, binned(np.array([seeds[s] for s in sorted(seeds)]), width))  # (seeds, bins)
            for label in NAMES
            if (seeds := data.by_position.get((label, length)))
        ]
        if curves:
            title = f"Loss along windows of {length} (trained on {block}; means over {width} positions)"
            fig = plots.curves_figure(curves, "val loss (nats/char)", title, "position in the window", block)
            out.append((f"loss by position, windows of {length}", f"{GROUP}-beyond-T{length}.png", fig))
    return out


def binned(curves: np.ndarray, width: int) -> np.ndarray:
    """Each row's mean over consecutive runs of ``width`` positions (the last run may be shorter)."""
    return np.stack([curves[:, i : i + width].mean(axis=1) for i in range(0, curves.shape[1], width)], axis=1)


def section(inputs: ReportInputs, data: Measured | None, found: Sequence[Finding], drawn: Drawn) -> list[str]:
    """The study's findings, each as its sentence, and its figures; nothing where the report read none of its runs."""
    if data is None:
        return []
    state = (
        "every planned run and evaluation is in"
        if data.complete
        else f"**{data.runs_in} of {data.runs_planned} planned runs and {data.evaluations_in} of "
        f"{data.evaluations_planned} planned evaluations are in**: no label is read before the last"
    )
    mine = [f for f in found if f.kind in ("rope_gain", KIND)]
    return [
        f"## {TITLE}",
        "",
        f"Each design against the RoPE baseline `{REFERENCE}`, the reference this study names (family `{GROUP}`), and "
        f"past the block (family `{BEYOND}`, the amendment of 2026-12-07: exploratory): in windows of "
        f"{' and '.join(f'{f}×' for f in FACTORS)} its block, each design's final checkpoints' mean loss at the "
        f"block's last {EDGE} positions minus at every position past the block, paired over seeds; both read three "
        "ways against the loss margin (past the block: lower by more than the margin reads past its block, within it "
        f"holds its loss, higher by more does not extrapolate): {state}. Beside each, the window contrast the "
        "measure replaced (the loss on windows of the block − on the longer windows, taken on other text): how much "
        "the window's length moves the mean, a figure with no label, since it is positive for any model that merely "
        "holds its loss past its block.",
        "",
        *(f"- {engine.measured(f)}" for f in mine if f.kind != KIND),
        "",
        *(f"- {engine.measured(f)}" for f in mine if f.kind == KIND),
        "",
        *(f"![{caption}]({file})" for caption, file in drawn),
        "",
    ]


# it reads the variants of the spec group `rope` (`ReportInputs.variants`), not its tables: the study names its
# reference, so no table's baseline enters
STUDY = Study(
    "rope",
    claims=CLAIMS,
    measure=measure,
    findings=lambda inputs, data, read: engine.family_findings(inputs, GROUP) + findings(data) if data else [],
    section=section,
    figures=figures,
)
