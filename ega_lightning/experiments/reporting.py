"""A report written: every run of the specs read (`rundirs`), its code established (`provenance`), the
variants compared, every study's findings, the figures, REPORT.md (`render`) and results.json
(`results_json`), into one directory. `ega report` (`experiments.report`) is its command."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from ega_lightning.errors import UserError
from ega_lightning.experiments import (
    landscapes,
    protocol,
    provenance,
    render,
    report_figures,
    results_json,
    rundirs,
    sizes,
    studies,
)
from ega_lightning.experiments.comparisons import RunData, build_tables, build_variants, run_rows
from ega_lightning.experiments.findings import conclude
from ega_lightning.experiments.rules import PROTOCOL
from ega_lightning.experiments.spec import collect_runs, load_spec
from ega_lightning.experiments.studies.cost import BENCH_RUN, bench_date, benches, cost_finding, read_bench
from ega_lightning.experiments.studies.leaderboard import leaderboard
from ega_lightning.io import staged_files, write_atomic

RECORDS_DIR = Path("results/runs")


def write_report(
    spec_paths: list[Path],
    runs_dir: Path,
    out: Path,
    records_dir: Path = RECORDS_DIR,
    bench: Path | None = None,
) -> tuple[list[RunData], Path]:
    """Writes ``out``/REPORT.md, results.json and the figures for the runs of ``spec_paths``; a
    :class:`UserError` (and nothing written) when none of them is finished."""
    words = ["ega", "report", *map(str, spec_paths), "--runs_dir", str(runs_dir), "--out", str(out)]
    command = shlex.join(words if records_dir == RECORDS_DIR else [*words, "--records_dir", str(records_dir)])
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; give the report a directory (it is made if missing).")
    timed = read_bench(bench, records_dir, out)  # a --bench that cannot be read: said before any work
    cost = cost_finding(*timed)
    loaded = rundirs.read_runs(collect_runs(load_spec(p, check_files=False) for p in spec_paths), runs_dir, records_dir)
    # `ega report` refreshes the record of each run it read from its directory: reading wrote nothing
    rundirs.refresh_records(loaded, records_dir)
    if not any(x.status == "done" for x in loaded):
        raise UserError(
            f"no run of {', '.join(map(str, spec_paths))} is finished: none has a DONE under {runs_dir} or a record "
            f"in {records_dir}; nothing was written. Run `ega sweep` first, or point --runs_dir / --records_dir "
            "at where the runs are."
        )
    known = provenance.load(records_dir.parent / provenance.FILE)
    codes = {
        x.run.run_name: provenance.code_status(x.run.run_name, x.record.fingerprint, x.record.hparams or {}, known)
        for x in loaded
        if x.record is not None
    }
    runs = run_rows(loaded, codes)
    variants = build_variants(runs)
    tables = build_tables(variants)
    evaluations = landscapes.load(records_dir.parent / landscapes.DIRNAME)
    board = leaderboard(variants, benches(records_dir, out))
    found = studies.findings(tables, variants, evaluations, board)
    found.append(cost)
    starts = {r.run.run_name: r.started for r in runs} | {BENCH_RUN: bench_date(timed[0])}
    dates = protocol.entry_dates(PROTOCOL)
    found = conclude(found, starts, dates)
    # written beside --out and moved in when whole: a stop before leaves --out as it was (its other files too)
    with staged_files(out) as stage:
        drawn, landscape_drawn, board_drawn = report_figures.draw(stage, tables, evaluations, board[1])
        scale = sizes.sizes(runs)
        text = render.markdown(
            tables,
            runs,
            found,
            drawn,
            command,
            runs_dir,
            evaluations,
            landscape_drawn,
            scale,
            known,
            (board, board_drawn),
            dates,
        )
        write_atomic(stage / "REPORT.md", text)
        payload = results_json.results(tables, runs, found, command, evaluations, scale, board, dates)
        write_atomic(stage / "results.json", json.dumps(payload, indent=2, allow_nan=False) + "\n")
    return runs, out / "REPORT.md"
