"""Report figures: functions of arrays that return a matplotlib Figure (no pyplot state, no files)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # matplotlib is imported by the figures themselves: `ega report --help` starts without it
    from matplotlib.figure import Figure

# one curve of a figure: (label, steps, values per seed (seeds x steps))
Curves = Sequence[tuple[str, Sequence[int], np.ndarray]]


def curves_figure(
    curves: Curves, ylabel: str, title: str, xlabel: str = "step (TensorBoard x-axis)", mark_x: float | None = None
) -> Figure:
    """Mean over seeds as a line, min/max over seeds as a band; ``mark_x``: a dashed vertical line there."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    for label, steps, values in curves:
        (line,) = ax.plot(steps, values.mean(axis=0), label=f"{label} (n={len(values)})")
        if len(values) > 1:
            ax.fill_between(steps, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2)
    if mark_x is not None:
        ax.axvline(mark_x, color="grey", linestyle="--", linewidth=1)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def tau_figure(
    lines: Sequence[tuple[str, Sequence[Sequence[tuple[int, float]]]]], paper_tau: float, title: str
) -> Figure:
    """One colour per initialisation, one line per seed; the paper's tau as a dashed line."""
    from matplotlib.figure import Figure

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


# one line of the landscape figure: (label, tau shifts, loss changes, alpha scales, loss changes)
LandscapeLine = tuple[str, Sequence[float], Sequence[float], Sequence[float], Sequence[float]]


def landscape_figure(lines: Sequence[LandscapeLine], title: str) -> Figure:
    """The validation loss around a checkpoint: every tau shifted (left), every alpha scaled (right)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.5))
    left, right = fig.subplots(1, 2)
    for i, (label, shifts, tau_cost, scales, alpha_cost) in enumerate(lines):
        style = {"color": f"C{i}", "marker": "o", "label": label}
        left.plot(shifts, tau_cost, **style)
        right.plot(scales, alpha_cost, **style)
    left.set(xlabel="delta added to every head's tau", ylabel="val loss − val loss as trained (nats/char)")
    right.set(xlabel="factor on every head's alpha (0: plain attention)", ylabel="val loss − as trained")
    for ax in (left, right):
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.grid(alpha=0.3)
    right.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def z_figure(series: Sequence[tuple[str, Sequence[float], Sequence[float]]], title: str) -> Figure:
    """Densities of z (bin centres, density) against the standard normal density."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    for label, centres, density in series:
        ax.step(centres, density, where="mid", label=label)
    x = np.linspace(-4.0, 4.0, 401)
    ax.plot(x, np.exp(-0.5 * x**2) / np.sqrt(2 * np.pi), color="black", linestyle="--", label="N(0, 1)")
    ax.set(xlabel="z (normalised energy of a key)", ylabel="density", xlim=(-4, 4), title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


# one row of a leaderboard panel: (label, estimate, low, high); no interval: low and high None
Point = tuple[str, float, float | None, float | None]
# one panel: (its name, its rows best first, the positive control's threshold where the control reads that board)
Panel = tuple[str, Sequence[Point], float | None]


def leaderboard_figure(panels: Sequence[Panel], paper_figure: float, title: str) -> Figure:
    """One row per gate, best at the top: its estimate and 95% interval (no bar for one seed), against 0, the
    paper's figure and, on a board the positive control reads, its threshold. One panel alone is titled
    ``title``; several stand side by side on one x-axis, each titled by its name, ``title`` above them."""
    from matplotlib.figure import Figure

    rows = max(len(points) for _, points, _ in panels)
    fig = Figure(figsize=(7.5 * len(panels), 1.2 + 0.35 * rows))
    axes = [fig.add_subplot()] if len(panels) == 1 else list(fig.subplots(1, len(panels), sharex=True))
    for ax, (name, points, threshold) in zip(axes, panels, strict=True):
        y = np.arange(len(points))[::-1]
        for yi, (_, estimate, low, high) in zip(y, points, strict=True):
            bar = None if low is None or high is None else [[estimate - low], [high - estimate]]
            ax.errorbar(estimate, yi, xerr=bar, fmt="o", color="C0", capsize=3)
        ax.axvline(0.0, color="grey", linewidth=0.8)
        if threshold is not None:
            ax.axvline(threshold, color="C3", linestyle="--", label=f"positive control {threshold:+.4f}")
        ax.axvline(paper_figure, color="C2", linestyle=":", label=f"paper's EGA-1 {paper_figure:+.3f}")
        ax.set_yticks(y, [label for label, *_ in points])
        ax.set(
            xlabel="baseline − gate, final val loss (nats/char; right: the gate is better)",
            title=title if len(panels) == 1 else name,
        )
        ax.grid(alpha=0.3, axis="x")
        ax.legend(fontsize=8, loc="lower right")
    if len(panels) > 1:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


# one bar of the waterfall: (label, estimate, low, high); no interval: low and high None
Bar = tuple[str, float, float | None, float | None]


def waterfall_figure(steps: Sequence[Bar], totals: Sequence[Bar], margin: float, title: str) -> Figure:
    """A waterfall from 0 (the baseline): each step a bar from the sum of those before it, its interval drawn
    around its own end; then each total (the sum the steps reach, and any other comparison with the same
    baseline) as a bar from 0 with its interval, hatched. The loss margin at ±``margin`` around 0."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4.8))
    ax = fig.add_subplot()
    start = 0.0
    labels = ["A\nbaseline"]
    ax.plot([-0.4, 0.4], [0.0, 0.0], color="black", linewidth=2)
    for i, (label, estimate, low, high) in enumerate(steps, 1):
        colour = "C2" if estimate >= 0 else "C3"
        ax.bar(i, estimate, bottom=start, color=colour, alpha=0.7, width=0.7)
        if low is not None and high is not None:
            end = start + estimate
            ax.errorbar(i, end, yerr=[[estimate - low], [high - estimate]], color="black", capsize=4)
        ax.plot([i - 0.35, i + 1.35], [start + estimate] * 2, color="grey", linewidth=0.8, linestyle=":")
        start += estimate
        labels.append(label)
    for j, (label, estimate, low, high) in enumerate(totals, len(steps) + 1):
        ax.bar(j, estimate, color="C0", alpha=0.7, width=0.7, hatch="//")
        if low is not None and high is not None:
            ax.errorbar(j, estimate, yerr=[[estimate - low], [high - estimate]], color="black", capsize=4)
        labels.append(label)
    ax.axhspan(-margin, margin, color="grey", alpha=0.15, label=f"loss margin ±{margin}")
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set(ylabel="loss(A) − loss, cumulative (nats/char; up: lower loss)", title=title)
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig
