"""The report's figures, chosen: which numbers each draws (every section's curves and tau by initialisation; each
study's own, such as the leaderboard's and the tau landscape's, its `study.Study.figures`, in its section or, with
none, in its group's), drawn by `plots` and saved as PNG beside REPORT.md."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ega_lightning.experiments import paper, plots
from ega_lightning.experiments.comparisons import Table, tau_trajectory
from ega_lightning.experiments.study import Drawn, Measured, ReportInputs
from ega_lightning.experiments.text import slug
from ega_lightning.io import atomic_file


def _curves(table: Table, tag: str) -> plots.Curves:
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
            fig = plots.curves_figure(curves, ylabel, f"{table.title}: {suffix}")
            out.append((caption, f"{base}-{'val_loss' if tag == 'val/loss' else 'gap'}.png", fig))
    gated = table.finished_gates
    if len({v.hp("tau_init") for v in gated}) > 1:
        lines = []
        for v in gated:
            tau_init = v.hp("tau_init")
            seeds = [tau_trajectory(r, tau_init) for r in v.done if r.scalars.get("gate/tau_mean")]
            if seeds:
                lines.append((f"{v.label} (tau_init {tau_init})", seeds))
        if lines:
            out.append(
                ("tau by initialisation", f"{base}-tau.png", plots.tau_figure(lines, paper.TAU, f"{table.title}: tau"))
            )
    return out


def save_png(fig: Any, path: Path) -> str:
    """Writes a report figure (atomically) and returns its file name, as REPORT.md links it."""
    with atomic_file(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    return path.name


def draw(out: Path, inputs: ReportInputs, measured: Sequence[Measured]) -> tuple[dict[str, Drawn], dict[str, Drawn]]:
    """Every figure of the report saved into ``out``: each table's (by its title), and each study's (by its name).
    A study with no section of its own draws its figures in its group's: under its first table's title."""
    drawn: dict[str, Drawn] = {}
    for table in inputs.tables:
        for caption, name, fig in table_figures(table):
            drawn.setdefault(table.title, []).append((caption, save_png(fig, out / name)))
    by_study: dict[str, Drawn] = {}
    for m in measured:
        if m.study.figures is None:
            continue
        saved = [(caption, save_png(fig, out / name)) for caption, name, fig in m.study.figures(inputs, m.data)]
        tables = inputs.tables_of(m.study.groups or ()) if m.study.section is None else ()
        (drawn.setdefault(tables[0].title, []) if tables else by_study.setdefault(m.study.name, [])).extend(saved)
    return drawn, by_study
