"""`ega report SPEC.yaml [SPEC2.yaml ...]`: the claims of the paper against the finished runs of sweeps.

Reads each run of the specs through its record (`ega_lightning.experiments.records`): a run
finished under ``--runs_dir`` is read from its directory and its record refreshed, any other from
its record in ``--records_dir`` (default ``results/runs``, whatever ``--out`` is), so the report
regenerates from a fresh clone. Writes ``<out>/REPORT.md`` (a table of the paper's claims with
our verdicts first, then the evidence section by section), ``<out>/results.json`` (every number,
per run and per variant, and every finding with its verdict) and PNG figures, all written
beside ``--out`` and moved into it when complete (its other files are left alone): Ctrl-C before
then leaves ``--out`` as it was and exits 130. A report over no finished run writes nothing and fails.

Only finished runs count (``DONE`` or a record; see `ega sweep`); the others are listed as
missing or incomplete and are in no number. Differences are baseline minus variant (positive:
the variant has the lower loss), paired by seed over the seeds both sides ran; the decision rule
of each verdict is stated in the report's method note.

A variant's seeds must be one model and one recipe: its shape is the shape (n_layer × n_head × n_embd,
block_size) most of its finished seeds trained, a tie going to the lowest seed's, and its recipe (every
other recorded hyper-parameter: optimizer, schedule, dropout, gate, data, evaluation, max_steps) the one
most of those recorded. A finished run of another shape or recipe (its config edited between seeds) is
left out: in no mean, pair or interval; the variant's row names it and the list of missing and
incomplete runs says why.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ega_lightning.errors import CommandParser, UserError
from ega_lightning.experiments.report_assembly import RECORDS_DIR, write_report


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(
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
    except KeyboardInterrupt:  # the report is written beside --out and moved in whole: nothing of it is there yet
        print(
            f"\nega report: interrupted: nothing was written to {args.out}; rerun the command for the report.",
            file=sys.stderr,
        )
        return 130
    done = sum(r.status == "done" for r in runs)
    print(f"wrote {report} and {args.out / 'results.json'}: {done} of {len(runs)} runs finished.")
    return 0
