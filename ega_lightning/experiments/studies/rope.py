"""The RoPE study (issue 56): every gate on a modern baseline, and each design beyond its training length.

configs/sweeps/rope.yaml trains, at the cpu size under our recipe, the RoPE baseline and four designs set against
it (the study names that reference: no other run is), paired by seed: EGA-1 with RoPE, FoX and ALiBi each in its
paper's design (no position embedding) and the baseline with no position signal at all. Its families are read by
`engine`, once every planned run (and evaluation) is in: `rope` each design against the RoPE baseline on the final
val loss, `beyond` each design's final checkpoint past its training block (`engine.loss_past_block`, in windows of 2
and 4 blocks, `scripts/seed_runner.py --beyond_the_block 2 4`, results/beyond-the-block/), each testing a claim the
protocol names (`engine.family_claims`). What is left here is no comparison: the reference the study's table reads,
and the loss along the longer windows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ega_lightning.experiments import comparisons, engine, plots
from ega_lightning.experiments.comparisons import Variant
from ega_lightning.experiments.study import Figure, ReportInputs, Study

GROUP = "rope"  # the spec group (configs/sweeps/rope.yaml) and the protocol's family of the gains
BEYOND = "beyond"  # the protocol's family of the evaluations beyond the block
REFERENCE = "rope-none"  # the variant every design is set against: the RoPE baseline
# the designs set against it, by spec variant (the protocol names and plans each)
DESIGNS = ("rope-linear", "fox-nopos", "alibi-nopos", "none-nopos")
VARIANTS = (REFERENCE, *DESIGNS)
BINS = 32  # the points along a window in the loss-by-position figures


def is_reference(x: Variant) -> bool:
    """The study's reference by its label and a RoPE position: a learned-position `none` is never a RoPE design's."""
    return x.label == REFERENCE and x.hp("position") == "rope"


# the study's table and results.json's groups read every design against the reference the protocol names, FoX and
# ALiBi without positions and the baseline with no position signal too (their position signal part of the design)
comparisons.NAMED_REFERENCES[GROUP] = (is_reference, ("position",))


def figures(inputs: ReportInputs, data: Any = None) -> list[Figure]:
    """For each length beyond the block that some run was evaluated at, the loss along the window, one line per
    design (its mean over seeds, the band its min and max), the training block dashed: the measure FoX's and ALiBi's
    papers report. Each point is the mean over a `BINS`-th of the window (8 positions at 256, 16 at 512): one
    position's mean over the split's few hundred windows varies by ~0.1 nats, about the gaps between the designs."""
    variants = [v for v in inputs.variants if v.group == GROUP and v.label in VARIANTS]
    runs = {r.run.run_name: (v.label, r.run.seed) for v in variants for r in v.done}
    by_position: dict[int, dict[str, dict[int, tuple[float, ...]]]] = {}  # length -> variant -> seed -> curve
    for e in (e for e in inputs.beyond_the_block if e.run_name in runs):
        label, seed = runs[e.run_name]
        by_position.setdefault(e.eval_block_size, {}).setdefault(label, {})[seed] = e.by_position
    out: list[Figure] = []
    for length, curves in sorted(by_position.items()):
        block, width = engine.block_of(variants[0]), max(1, length // BINS)
        middles = [(start + 1 + min(start + width, length)) / 2 for start in range(0, length, width)]
        drawn = [
            (label, middles, binned(np.array([seeds[s] for s in sorted(seeds)]), width))  # (seeds, bins)
            for label in VARIANTS
            if (seeds := curves.get(label))
        ]
        title = f"Loss along windows of {length} (trained on {block}; means over {width} positions)"
        fig = plots.curves_figure(drawn, "val loss (nats/char)", title, "position in the window", block)
        out.append((f"loss by position, windows of {length}", f"{GROUP}-beyond-T{length}.png", fig))
    return out


def binned(curves: np.ndarray, width: int) -> np.ndarray:
    """Each row's mean over consecutive runs of ``width`` positions (the last run may be shorter)."""
    return np.stack([curves[:, i : i + width].mean(axis=1) for i in range(0, curves.shape[1], width)], axis=1)


# its findings are its families' (`engine`); its figures are drawn in its group's section, under its findings there
STUDY = Study(
    "rope",
    groups=(GROUP,),
    families=(GROUP, BEYOND),
    measure=lambda inputs: engine.family_claims((GROUP, BEYOND)),  # the claims its comparisons test
    findings=lambda inputs, data, read: [
        *engine.family_findings(inputs, GROUP),
        *engine.family_findings(inputs, BEYOND),
    ],
    figures=figures,
)
