"""The report's figures, chosen: which numbers each draws (every section's curves, tau by initialisation, the
leaderboard, the tau landscape and the z distributions), drawn by `figures` and saved as PNG beside REPORT.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ega_lightning.experiments import figures, paper
from ega_lightning.experiments import landscape_results as landscapes
from ega_lightning.experiments.comparisons import Table, tau_trajectory
from ega_lightning.experiments.studies.landscape import MECHANISM_GATES
from ega_lightning.experiments.studies.leaderboard import LEADERBOARD, LEADERBOARD_CORPUS, Entry
from ega_lightning.experiments.text import slug
from ega_lightning.io import atomic_file


def _curves(table: Table, tag: str) -> figures.Curves:
    curves = []
    for row in table.rows:
        series = [dict(r.scalars[tag]) for r in row.variant.done if r.scalars.get(tag)]
        if series:
            steps = sorted(set.intersection(*(set(s) for s in series)))  # points every seed has
            curves.append((row.variant.label, steps, np.array([[s[step] for step in steps] for s in series])))
    return curves


def table_figures(table: Table) -> list[tuple[str, str, Any]]:
    """(caption, file name, figure) for the table's figures: val loss, gap, and tau where the table
    is a tau-initialisation study."""
    base = slug(f"{table.group}-{table.corpus}")
    out = []
    for caption, tag, ylabel, suffix in (
        ("validation loss", "val/loss", "val/loss (nats/char)", "val loss"),
        ("generalization gap", "gap", "gap = val/loss − train_eval/loss", "gap"),
    ):
        curves = _curves(table, tag)
        if curves:
            fig = figures.curves_figure(curves, ylabel, f"{table.title}: {suffix}")
            out.append((caption, f"{base}-{'val_loss' if tag == 'val/loss' else 'gap'}.png", fig))
    gated = [r.variant for r in table.rows if r.variant.gate != "none" and r.variant.done]
    if len({v.hp("tau_init") for v in gated}) > 1:
        lines = []
        for v in gated:
            tau_init = v.hp("tau_init")
            seeds = [tau_trajectory(r, tau_init) for r in v.done if r.scalars.get("gate/tau_mean")]
            if seeds:
                lines.append((f"{v.label} (tau_init {tau_init})", seeds))
        if lines:
            out.append(
                (
                    "tau by initialisation",
                    f"{base}-tau.png",
                    figures.tau_figure(lines, paper.TAU, f"{table.title}: tau"),
                )
            )
    return out


def leaderboard_figure(board: list[Entry]) -> list[tuple[str, str, Any]]:
    """(caption, file name, figure): every finished gate of the leaderboard with its 95% interval."""
    shown = [(e.variant.label, e.diff) for e in board if e.diff is not None]
    if not shown:
        return []
    points = [(label, d.estimate, d.low, d.high) for label, d in shown]
    fig = figures.leaderboard_figure(
        points,
        paper.POSITIVE_CONTROL,
        paper.IMPROVEMENT[LEADERBOARD_CORPUS],
        f"{LEADERBOARD_CORPUS}: baseline − gate (final val loss, paired by seed)",
    )
    return [("leaderboard", f"{LEADERBOARD}-{LEADERBOARD_CORPUS}.png", fig)]


def save_png(fig: Any, path: Path) -> str:
    """Writes a report figure (atomically) and returns its file name, as REPORT.md links it."""
    with atomic_file(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    return path.name


def landscape_figures(evaluations: list[landscapes.Evaluation]) -> list[tuple[str, str, Any]]:
    """(caption, file name, figure): the tau/alpha landscape of every checkpoint of MECHANISM_GATES trained
    and evaluated with the causal prefix z, and the z distributions of their final checkpoints as
    trained, one line per gate and z-normalisation."""
    out = []
    # the study's pair (EGA-1 and one wavelet gate) when evaluated; the table beside lists every checkpoint
    shown_gates = {e.gate for e in evaluations} & set(MECHANISM_GATES) or {e.gate for e in evaluations}
    evaluations = [e for e in evaluations if e.gate in shown_gates]
    causal = [e for e in evaluations if e.as_trained and e.trained_znorm == "prefix"]
    if causal:
        lines = [
            (
                e.label,
                e.tau_shifts,
                list(e.tau_shift_costs.values()),
                e.alpha_scales,
                list(e.alpha_scale_costs.values()),
            )
            for e in causal
        ]
        fig = figures.landscape_figure(lines, "validation loss around the trained tau and alpha")
        out.append(("tau and alpha landscape", "landscape-tau-alpha.png", fig))
    shown: dict[tuple[str, str], landscapes.Evaluation] = {}
    for e in evaluations:
        if e.final and e.as_trained:
            shown.setdefault((e.gate, e.trained_znorm), e)
    if shown:
        series = [(f"{e.gate}, z over the {e.trained_znorm} ({e.run})", *e.z_density()) for e in shown.values()]
        out.append(("z distributions", "landscape-z.png", figures.z_figure(series, "z of every key, all heads")))
    return out


Drawn = list[tuple[str, str]]  # (caption, file name) of each figure saved, as REPORT.md links it


def draw(
    out: Path, tables: list[Table], evaluations: list[landscapes.Evaluation], board: list[Entry]
) -> tuple[dict[str, Drawn], Drawn, Drawn]:
    """Every figure of the report saved into ``out``: each table's (by its title), the landscape's, the
    leaderboard's."""
    drawn: dict[str, Drawn] = {}
    for table in tables:
        for caption, name, fig in table_figures(table):
            drawn.setdefault(table.title, []).append((caption, save_png(fig, out / name)))
    landscape_drawn = [(caption, save_png(fig, out / name)) for caption, name, fig in landscape_figures(evaluations)]
    board_drawn = [(caption, save_png(fig, out / name)) for caption, name, fig in leaderboard_figure(board)]
    return drawn, landscape_drawn, board_drawn
