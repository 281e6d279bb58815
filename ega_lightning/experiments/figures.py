"""Report figures: functions of arrays that return a matplotlib Figure (no pyplot state, no files)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

# one curve of a figure: (label, steps, values per seed (seeds x steps))
Curves = Sequence[tuple[str, Sequence[int], np.ndarray]]


def curves_figure(curves: Curves, ylabel: str, title: str) -> Figure:
    """Mean over seeds as a line, min/max over seeds as a band."""
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    for label, steps, values in curves:
        (line,) = ax.plot(steps, values.mean(axis=0), label=f"{label} (n={len(values)})")
        if len(values) > 1:
            ax.fill_between(steps, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2)
    ax.set(xlabel="step (TensorBoard x-axis)", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def tau_figure(
    lines: Sequence[tuple[str, Sequence[Sequence[tuple[int, float]]]]], paper_tau: float, title: str
) -> Figure:
    """One colour per initialisation, one line per seed; the paper's tau as a dashed line."""
    fig = Figure(figsize=(9, 4.5))
    ax = fig.add_subplot()
    for i, (label, seeds) in enumerate(lines):
        for j, points in enumerate(seeds):
            ax.plot(
                [s for s, _ in points],
                [v for _, v in points],
                color=f"C{i}",
                alpha=0.8,
                marker=".",
                label=label if j == 0 else None,
            )
    ax.axhline(paper_tau, color="grey", linestyle="--", label=f"paper ≈ {paper_tau}")
    ax.set(xlabel="step (step 0: tau_init)", ylabel="gate/tau_mean (one line per seed)", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the plot: the lines span it
    fig.tight_layout()
    return fig
