"""`ega report SPEC.yaml [SPEC2.yaml ...]`: the claims of the paper against the finished runs of sweeps.

Reads each run of the specs through its record (`ega_lightning.experiments.records`): a run
finished under ``--runs_dir`` is read from its directory and its record refreshed, any other from
its record in ``--records_dir`` (default ``results/runs``, whatever ``--out`` is), so the report
regenerates from a fresh clone. Writes ``<out>/REPORT.md`` (a table of the paper's claims with
our verdicts first, then the evidence section by section), ``<out>/results.json`` (every number,
per run and per variant, and every finding with its verdict) and PNG figures. A report over no
finished run writes nothing and fails.

Only finished runs count (``DONE`` or a record; see `ega sweep`); the others are listed as
missing or incomplete and are in no number. Differences are baseline minus variant (positive:
the variant has the lower loss), paired by seed over the seeds both sides ran; the decision rule
of each verdict is stated in the report's method note.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ega_lightning.errors import UserError
from ega_lightning.experiments import figures, landscapes, paper, records, render, results_json, rundirs, studies
from ega_lightning.experiments.comparisons import (
    RunData,
    Table,
    build_tables,
    build_variants,
    code_status,
    device,
    from_record,
    tau_trajectory,
)
from ega_lightning.experiments.spec import Run, collect_runs, load_spec, static_value
from ega_lightning.experiments.studies.cost import cost_finding, read_bench
from ega_lightning.experiments.studies.landscape import MECHANISM_GATES
from ega_lightning.experiments.studies.leaderboard import LEADERBOARD, LEADERBOARD_CORPUS, Entry, leaderboard
from ega_lightning.experiments.text import slug
from ega_lightning.io import atomic_file, write_atomic

RECORDS_DIR = Path("results/runs")
PROVENANCE = "provenance.json"  # beside the records directory: written by scripts/provenance.py


def load_runs(runs: list[Run], runs_dir: Path, records_dir: Path) -> tuple[list[RunData], list[records.Record]]:
    """Every run as RunData; and the records made from run directories just now (to write back)."""
    out, fresh = [], []
    for run in runs:
        loaded = rundirs.load_run(run, runs_dir, records_dir)
        if loaded.record is not None:
            source = rundirs.FROM_EVENT_FILES if loaded.fresh else "record"
            out.append(from_record(run, loaded.record, source))
            if loaded.fresh:
                fresh.append(loaded.record)
            continue
        config = rundirs.static_config(runs_dir / run.run_name)  # a started run saved what it got
        corpus = (config.get("data") or {}).get("corpus") or static_value(run, "data.corpus") or "?"
        gate = (config.get("model") or {}).get("gate") or static_value(run, "model.gate") or "?"
        options = static_value(run, "model.gate_options")
        output_gate = (config.get("model") or {}).get("output_gate") or static_value(run, "model.output_gate")
        out.append(
            RunData(run, loaded.status, loaded.reason, str(corpus), str(gate), options, str(output_gate or "none"))
        )
    return out, fresh


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


def load_provenance(path: Path) -> dict[str, Any] | None:
    """What `scripts/provenance.py` established about the records' code; None when it has not been run."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as err:
        raise UserError(f"{path} cannot be read ({err}): run `python scripts/provenance.py` again.") from None


def _model_text(model: dict[str, Any]) -> str:
    return f"{model.get('n_layer')}×{model.get('n_head')}×{model.get('n_embd')} T{model.get('block_size')}"


def sizes(runs: list[RunData]) -> dict[str, Any]:
    """The sizes (``configs/size/*.yaml``) the finished runs used, with their parameter counts and budgets
    from the records; the sizes beside them that no run used (parameters counted for their baseline);
    the devices the runs ran on."""
    done = [r for r in runs if r.status == "done"]
    used: dict[Path, list[RunData]] = {}
    for r in done:
        for c in r.run.configs:
            if Path(c).parent.name == "size":
                used.setdefault(Path(c).resolve(), []).append(r)
    ran = [
        {
            "size": p.stem,
            "model": sorted({_model_text(r.hparams) for r in rs}),
            "params": sorted({r.n_params for r in rs if r.n_params}),
            "steps": sorted({r.max_steps for r in rs if r.max_steps}),
            "runs": len(rs),
        }
        for p, rs in used.items()
    ]
    not_run = []
    template = {k: v for k, v in done[0].hparams.items() if k != "seed"} if done else {}
    template["output_gate"] = "none"  # the baseline's count: both slots empty
    for p in sorted({q for f in {p.parent for p in used} for q in f.glob("*.yaml")} - set(used)):
        config = yaml.safe_load(p.read_text()) or {}
        model = config.get("model") or {}
        counted = records.count_parameters({**template, **model, "gate": "none", "gate_options": None})
        steps = (config.get("trainer") or {}).get("max_steps")
        not_run.append(
            {"size": p.stem, "model": _model_text(model), "params": counted[0] if counted else None, "steps": steps}
        )
    return {"ran": ran, "not_run": not_run, "devices": sorted({device(r.machine) for r in done})}


def write_report(
    spec_paths: list[Path],
    runs_dir: Path,
    out: Path,
    records_dir: Path = RECORDS_DIR,
    bench: Path | None = None,
) -> tuple[list[RunData], Path]:
    words = ["ega", "report", *map(str, spec_paths), "--runs_dir", str(runs_dir), "--out", str(out)]
    command = shlex.join(words if records_dir == RECORDS_DIR else [*words, "--records_dir", str(records_dir)])
    runs, fresh = load_runs(collect_runs(load_spec(p, check_files=False) for p in spec_paths), runs_dir, records_dir)
    if not any(r.status == "done" for r in runs):
        raise UserError(
            f"no run of {', '.join(map(str, spec_paths))} is finished: none has a DONE under {runs_dir} or a record "
            f"in {records_dir}; nothing was written. Run `ega sweep` first, or point --runs_dir / --records_dir "
            "at where the runs are."
        )
    for record in fresh:  # finished here: keep what the report read in git's reach
        records.write_record(record, records_dir)
    provenance = load_provenance(records_dir.parent / PROVENANCE)
    for r in runs:
        if r.status == "done":
            r.code = code_status(r, provenance)
    variants = build_variants(runs)
    tables = build_tables(variants)
    evaluations = landscapes.load(records_dir.parent / landscapes.DIRNAME)
    found = studies.findings(tables, variants, evaluations)
    found.append(cost_finding(*read_bench(bench, records_dir, out)))
    out.mkdir(parents=True, exist_ok=True)
    drawn: dict[str, list[tuple[str, str]]] = {}
    for table in tables:
        for caption, name, fig in table_figures(table):
            drawn.setdefault(table.title, []).append((caption, save_png(fig, out / name)))
    landscape_drawn = [(caption, save_png(fig, out / name)) for caption, name, fig in landscape_figures(evaluations)]
    baseline, board = leaderboard(variants)
    board_drawn = [(caption, save_png(fig, out / name)) for caption, name, fig in leaderboard_figure(board)]
    report = out / "REPORT.md"
    scale = sizes(runs)
    write_atomic(
        report,
        render.markdown(
            tables,
            runs,
            found,
            drawn,
            command,
            runs_dir,
            evaluations,
            landscape_drawn,
            scale,
            provenance,
            ((baseline, board), board_drawn),
        ),
    )
    payload = results_json.results(tables, runs, found, command, evaluations, scale, (baseline, board))
    write_atomic(out / "results.json", json.dumps(payload, indent=2, allow_nan=False) + "\n")
    return runs, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ega report",
        description=__doc__.split("\n", 1)[1],  # what it reads and writes, and the conventions, as documented above
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("specs", nargs="+", type=Path, help="sweep spec(s) (YAML), as given to `ega sweep`")
    parser.add_argument("--runs_dir", type=Path, default=Path("lightning_logs"), help="where the runs were written")
    parser.add_argument("--out", type=Path, default=Path("results"), help="output directory")
    parser.add_argument(
        "--records_dir",
        type=Path,
        default=RECORDS_DIR,
        help="the runs' records: read for runs not finished under --runs_dir, refreshed for those that are "
        f"(default: {RECORDS_DIR})",
    )
    parser.add_argument(
        "--bench",
        type=Path,
        default=None,
        help="`ega bench` JSON for the cost claim (default: bench-*.json beside the records dir)",
    )
    args = parser.parse_args(argv)
    try:
        runs, report = write_report(args.specs, args.runs_dir, args.out, args.records_dir, args.bench)
    except UserError as err:
        print(f"ega report: error: {err}", file=sys.stderr)
        return 2
    done = sum(r.status == "done" for r in runs)
    print(f"wrote {report} and {args.out / 'results.json'}: {done} of {len(runs)} runs finished.")
    return 0
