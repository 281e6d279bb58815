"""A report written: every run of the specs read (`rundirs`), its code established (`provenance`), the
variants compared, every study's findings, the figures (`figure_choice`), REPORT.md (`report_markdown`) and
results.json (`results_json`), into one directory. `ega report` (`commands.report`) is its command."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ega_lightning.errors import UserError
from ega_lightning.experiments import (
    beyond_the_block,
    figure_choice,
    landscape_results,
    protocol,
    provenance,
    report_markdown,
    report_summary,
    results_json,
    rules,
    rundirs,
    sizes,
    studies,
    whole_split,
)
from ega_lightning.experiments.bench import BENCH_RUN, bench_date, benches, read_bench
from ega_lightning.experiments.comparisons import RunData, build_tables, build_variants, run_rows
from ega_lightning.experiments.findings import conclude
from ega_lightning.experiments.spec import collect_runs, load_spec
from ega_lightning.experiments.study import ReportInputs, Study
from ega_lightning.io import staged_files, write_atomic

RECORDS_DIR = Path("results/runs")


def read_rows(
    spec_paths: list[Path], runs_dir: Path, records_dir: Path
) -> tuple[list[RunData], dict[str, Any] | None, list[rundirs.Loaded]]:
    """Every run of the specs as its row (`comparisons.run_rows`), its code established from what
    results/provenance.json holds (returned beside the rows), and the runs as read (the caller refreshes the record
    of each run read from its directory, `rundirs.refresh_records`, once nothing is left to refuse); a
    :class:`UserError` when none is finished, or when a record read now would replace a committed record of
    another run (`rundirs.check_replaceable`)."""
    loaded = rundirs.read_runs(collect_runs(load_spec(p, check_files=False) for p in spec_paths), runs_dir, records_dir)
    rundirs.check_replaceable([x.record for x in loaded if x.fresh and x.record is not None], records_dir)
    if not any(x.status == "done" for x in loaded):
        raise UserError(
            f"no run of {', '.join(map(str, spec_paths))} is finished: none has a DONE under {runs_dir} or a record "
            f"in {records_dir}; nothing was written. Run `ega sweep` first, or point --runs_dir / --records_dir "
            "at where the runs are."
        )
    known = provenance.load(records_dir.parent / provenance.FILE)
    codes = {
        x.run.run_name: provenance.code_status(
            x.record.code_fingerprint, x.record.hparams or {}, x.record.git_dirty, x.record.git_modified
        )
        for x in loaded
        if x.record is not None
    }
    return run_rows(loaded, codes), known, loaded


def write_report(
    spec_paths: list[Path],
    runs_dir: Path,
    out: Path,
    records_dir: Path = RECORDS_DIR,
    bench: Path | None = None,
    studies_run: Sequence[Study] = studies.STUDIES,
) -> tuple[list[RunData], Path]:
    """Writes ``out``/REPORT.md, results.json and the figures for the runs of ``spec_paths``, read by the studies
    ``studies_run`` (every study of the report: `studies.STUDIES`); a :class:`UserError` (and nothing written) when
    none of the runs is finished."""
    words = ["ega", "report", *map(str, spec_paths), "--runs_dir", str(runs_dir), "--out", str(out)]
    command = shlex.join(words if records_dir == RECORDS_DIR else [*words, "--records_dir", str(records_dir)])
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; give the report a directory (it is made if missing).")
    # the registered protocol, read and checked when the report starts: before a record is refreshed; the amendments
    # whose rules the code applies must be in it (an amendment deleted from it would leave its rules in force)
    rules.check_amendments(protocol.current())
    timed = read_bench(bench, records_dir, out)  # a --bench that cannot be read: said before any work
    runs, known, loaded = read_rows(spec_paths, runs_dir, records_dir)
    variants = build_variants(runs)
    tables = build_tables(variants)
    evaluations = tuple(landscape_results.load(records_dir.parent / landscape_results.DIRNAME))
    whole = tuple(whole_split.load(records_dir.parent / whole_split.DIRNAME))
    longer = tuple(beyond_the_block.load(records_dir.parent / beyond_the_block.DIRNAME))
    # each evaluation of a final checkpoint is of the step and the CPU kind its run's record gives
    ran = {
        r.run.run_name: whole_split.Ran(r.run.seed, r.max_steps, r.machine, str(r.run.spec)) for r in runs if r.hparams
    }
    folder, further = records_dir.parent / whole_split.DIRNAME, records_dir.parent / beyond_the_block.DIRNAME
    files = [(e, folder / f"{e.run_name}.json") for e in whole]
    files += [(e, further / f"{e.run_name}-T{e.eval_block_size}.json") for e in longer]
    whole_split.check_against_records(files, ran)
    benched = tuple(benches(records_dir, out))
    inputs = ReportInputs(tuple(tables), tuple(variants), tuple(runs), evaluations, benched, timed, whole, longer)
    measured = studies.measure(inputs, studies_run)
    found = studies.run_studies(inputs, measured)
    # a run counts from its start, or from the first commit of its record where that is older (a rerun of a result
    # committed before a rule is as old as that result)
    committed = protocol.first_committed(records_dir)
    starts = {r.run.run_name: min(filter(None, (r.started, committed.get(r.run.run_name))), default=None) for r in runs}
    starts[BENCH_RUN] = bench_date(timed[0])
    dates = protocol.entry_dates(protocol.current())
    found = conclude(found, starts, dates)
    # `ega report` refreshes the record of each run it read from its directory (reading wrote nothing), once nothing
    # is left to refuse: a refusal writes nothing
    rundirs.refresh_records(loaded, records_dir)
    # written beside --out and moved in when whole: a stop before leaves --out as it was (its other files too)
    with staged_files(out) as stage:
        drawn, by_study = figure_choice.draw(stage, inputs, measured)
        scale = sizes.sizes(runs)
        payload = json.dumps(
            results_json.results(inputs, found, command, scale, dates, measured), indent=2, allow_nan=False
        )
        # the summary is written from results.json as the file holds it: every number of it is one of the file's
        leaderboard = next(iter(by_study.get("leaderboard", [])), (None, None))[1]
        waterfall = next(iter(by_study.get("author", [])), (None, None))[1]
        summary = report_summary.summary(json.loads(payload), leaderboard, waterfall)
        text = report_markdown.markdown(
            inputs, found, drawn, command, runs_dir, scale, known, dates, measured, by_study, summary
        )
        write_atomic(stage / "REPORT.md", text)
        write_atomic(stage / "results.json", payload + "\n")
    return runs, out / "REPORT.md"
