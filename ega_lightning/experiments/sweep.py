"""`ega sweep SPEC.yaml`: run a spec's (configs, seed) pairs one after another, restartably.

The spec format and the run numbering: see `ega_lightning.experiments.spec` (``--help`` prints it).

Before the first run starts (also with ``--dry_run``), every run is read as `ega fit` reads it (its flags and
values, -c files, gates and their import paths, step counts: `ega_lightning.fit_args.problems`, once per
distinct configs and args), and every problem found is listed at once: nothing runs until none is left.

Each run is ``ega fit -c <sweep configs> -c <run configs> <sweep args> <run args>
--seed_everything=<seed> --run_name=<name>-seed<seed> --runs_dir=<runs dir>`` (run with this
interpreter), its output appended to ``<runs dir>/<run name>/sweep.log``. A run whose directory
holds ``DONE`` (written after the run exits 0 at its max_steps; one that exits 0 short of them, stopped by a
callback or a time limit, failed) is skipped; one with ``checkpoints/last.ckpt`` but
no ``DONE`` was interrupted and is resumed with ``--ckpt_path last``; anything else starts fresh.
So a sweep can be stopped at any point (Ctrl-C, SIGKILL, a job's time limit) and rerun with the
same command. A run still running in another process (say, the orphan of a killed sweep, or
another job given the same run) holds a lock on its directory and is left alone.

Exit status (for a job script; every status of `ega`: docs/resuming.md#exit-codes): 143 when a run was
stopped by SIGTERM (the run's own, or the sweep's, which it passes on to its run; no further run starts),
else 1 when a run failed, else 75 when a run is being trained by another process, else 0.

Across machines: ``--index I`` runs run I of the spec's numbered list (``--dry_run`` prints the
numbering), ``--shard K/N`` shard K of N (all runs of a seed on one shard, since rounding
differs between machines and the report pairs runs by seed): one job-array task each. ``--index``
keeps no pair on one machine by itself: pin its job array to one node, or use ``--shard``; the report
flags a comparison whose pairs ran on two machines.

A finished run also leaves its record, ``<records dir>/<run name>.json`` (see
`ega_lightning.experiments.records`): commit it, and a fresh clone's sweep skips the run and its
report still counts it. A record or finished directory that ran with other configs or arguments
than the spec now gives is refused (the run fails, naming it and the fix), and so is a record whose curves stop
before its max_steps. `ega fit` into a run's directory by hand (``--overwrite=true``, or a resume) deletes its
``DONE``: the run is no longer the one the sweep finished, and its record keeps the sweep's numbers. A
``--records_dir`` that cannot be written is refused (exit 74) before the first run. Delete a run's record,
``DONE`` and directory to run it again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

from ega_lightning import runs
from ega_lightning.errors import (
    EXITS,
    MACHINE_REFUSED,
    RUN_BUSY,
    STOPPED,
    CommandParser,
    UserError,
    describe_refusal,
    machine_refusal,
)
from ega_lightning.experiments import spec as spec_module
from ega_lightning.experiments.records import Record, RecordError, load_record, record_path, unfinished
from ega_lightning.experiments.rundirs import (
    read_done,
    read_scalars,
    record_run,
    run_environment,
    run_fingerprint,
    run_lock,
    run_state,
)
from ega_lightning.experiments.spec import (
    DONE_FILE,
    LOG_FILE,
    LOG_HEADER,
    Run,
    SpecError,
    done_marker,
    fit_command,
    load_spec,
    parse_shard,
    pick_index,
    select,
    shard,
)
from ega_lightning.io import TEMPORARY_SUFFIX, read_yaml, write_atomic


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """After Ctrl-C: the terminal sent SIGINT to the child too, and Lightning shuts down on it.

    If it was only the sweep that got SIGINT, pass it on; kill the child only as a last resort.
    """
    for sig, grace in ((None, 5.0), (signal.SIGINT, 30.0), (signal.SIGKILL, None)):
        if sig is not None:
            proc.send_signal(sig)
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


class Termination:
    """SIGTERM to the sweep (a job's time limit, scancel): passed on to the run in progress, which stops at its next
    step with its last.ckpt kept and exits 143; no further run starts, and the sweep exits 143 too. Without this
    a SIGTERM that reached only the sweep killed it and left its `ega fit` training on, orphaned."""

    def __init__(self) -> None:
        self.received = False
        self.child: subprocess.Popen[bytes] | None = None

    def __call__(self, signum: int, frame: object) -> None:
        self.received = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def watch(self, proc: subprocess.Popen[bytes] | None) -> None:
        """``proc`` is the run in progress (None: none); one started after the SIGTERM is stopped at once."""
        self.child = proc
        if proc is not None and self.received:
            proc.send_signal(signal.SIGTERM)


# what a run's exit status says to the sweep, beside 0 (done) and anything else (failed)
STOPPED_STATUSES = (STOPPED, -signal.SIGTERM)  # Lightning's stop (ega fit's 143), or killed before it listened


def _log_tail(log_path: Path, offset: int, lines: int = 25) -> str:
    with open(log_path, "rb") as fh:
        fh.seek(offset)
        text = fh.read().decode(errors="replace")
    return "\n".join(f"    | {line}" for line in text.splitlines()[-lines:])


def _record(run: Run, run_dir: Path, records_dir: Path, prefix: str) -> None:
    try:
        record_run(run, run_dir, records_dir)
    except (RecordError, OSError, ValueError) as err:  # the run is finished all the same: say it, go on
        print(f"{prefix} not recorded: {err}", flush=True)


def recorded(run: Run, records_dir: Path, prefix: str) -> str | None:
    """``skipped`` when the run has a record, ``failed`` when its record is not this run's, else None."""
    try:
        record = load_record(run, records_dir)
    except RecordError as err:
        print(f"{prefix} failed: {err}", flush=True)
        return "failed"
    if record is None:
        return None
    print(f"{prefix} skipped (recorded in {record_path(records_dir, run.run_name)})", flush=True)
    return "skipped"


def finished(run: Run, run_dir: Path, prefix: str) -> str:
    """``skipped`` when the finished ``run_dir`` ran this spec entry, else ``failed`` (saying why)."""
    try:
        read_done(run, run_dir)
    except RecordError as err:
        print(f"{prefix} failed: {err}", flush=True)
        return "failed"
    print(f"{prefix} skipped (done)", flush=True)
    return "skipped"


def execute(run: Run, runs_dir: Path, records_dir: Path, prefix: str, termination: Termination | None = None) -> str:
    """Runs one run to completion unless it is recorded, done or busy; returns done/skipped/busy/failed, or
    stopped (by SIGTERM: its own, or the sweep's passed on through ``termination``)."""
    outcome = recorded(run, records_dir, prefix)
    if outcome is not None:
        return outcome
    run_dir = runs_dir / run.run_name
    with run_lock(run_dir) as lock:
        if lock is None:
            print(f"{prefix} skipped (running in another process: {run_dir / runs.LOCK_FILE} is locked)", flush=True)
            return "busy"
        state = run_state(run_dir)
        if state == "done":
            outcome = finished(run, run_dir, prefix)
            if outcome == "skipped":  # finished before records existed, or stopped before its record
                _record(run, run_dir, records_dir, prefix)
            return outcome
        cmd = fit_command(run, runs_dir, resume=state == "resume", overwrite=state == "stale")
        where = run_environment()  # the code and libraries the run starts with
        log_path = run_dir / LOG_FILE
        with open(log_path, "ab") as log:
            offset = log.tell()
            now = datetime.now(UTC).isoformat(timespec="seconds")
            log.write(f"\n{LOG_HEADER} {now} ega sweep {run.spec}: {state}\n$ {shlex.join(cmd)}\n".encode())
            log.flush()
            print(f"{prefix} {({'resume': 'resumed', 'stale': 'started over'}).get(state, 'started')}", flush=True)
            start = time.monotonic()
            # the log shows progress as it happens; the child takes over the lock
            env = {**os.environ, "PYTHONUNBUFFERED": "1", runs.LOCK_FD_ENV: str(lock.fileno())}
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=(lock.fileno(),))
            if termination is not None:
                termination.watch(proc)
            try:
                returncode = proc.wait()
            except KeyboardInterrupt:
                _stop(proc)
                raise
            finally:
                if termination is not None:
                    termination.watch(None)
        wall = time.monotonic() - start
        if returncode in STOPPED_STATUSES:
            print(f"{prefix} stopped by SIGTERM ({returncode}); the next sweep resumes it (last.ckpt)", flush=True)
            return "stopped"
        if returncode == RUN_BUSY:  # another process took the run between the sweep's look and the child's
            print(f"{prefix} skipped (running in another process)", flush=True)
            return "busy"
        if returncode != 0:
            print(f"{prefix} failed ({returncode}); the end of {log_path}:\n{_log_tail(log_path, offset)}", flush=True)
            return "failed"
        short = stopped_short(run_dir)
        if short is not None:  # exit 0 before max_steps (max_time, a callback that stops the trainer): not DONE
            print(f"{prefix} failed: {short}; no DONE written, the end of {log_path}:\n{_log_tail(log_path, offset)}")
            return "failed"
        finished_at = datetime.now(UTC).isoformat(timespec="seconds")
        # the code path the run trained, as this checkout computes it (the run started from it)
        where["code_fingerprint"] = run_fingerprint(run_dir)
        started = _first_start(log_path) or finished_at
        done = done_marker(run, returncode, wall, finished_at, state == "resume", where, started)
        write_atomic(run_dir / DONE_FILE, json.dumps(done, indent=2) + "\n")
        print(f"{prefix} done in {wall:.0f} s", flush=True)
        _record(run, run_dir, records_dir, prefix)
        return "done"


def stopped_short(run_dir: Path) -> str | None:
    """Why a run that exited 0 is no finished run, None when it is: its last.ckpt's step is below its config.yaml's
    max_steps, or its event files hold no val/loss (validation off: ``trainer.limit_val_batches=0``; or nothing
    trained: ``limit_train_batches=0``), or, where it keeps no last.ckpt to tell (``checkpoint_every_n_steps: 0``),
    its val/loss stops before its max_steps' last validation (`records.unfinished`: a ``max_time`` that stopped it).
    A run without last.ckpt is not taken for finished on that alone: DONE would skip it forever."""
    from ega_lightning.summary import checkpoint_step  # torch: not for `ega sweep --help`

    last = run_dir / runs.LAST
    try:
        max_steps = (read_yaml(run_dir / "config.yaml").get("trainer") or {}).get("max_steps")
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        max_steps = None
    step = checkpoint_step(last) if last.is_file() else None
    if step is not None and isinstance(max_steps, int) and step < max_steps:
        return f"it exited 0 at step {step} of its {max_steps} (trainer.max_steps): something stopped it before its end"
    points = read_scalars(run_dir).get("val/loss") or []
    if not points:
        return (
            "it exited 0 with no val/loss in its event files (trainer.limit_val_batches 0, limit_train_batches 0, or "
            "stopped before its first validation): the report has no number of it"
        )
    if step is None:  # no last.ckpt to tell how far it trained: its curve tells
        reason = unfinished(Record(run_name=run_dir.name, seed=0, max_steps=max_steps, scalars={"val/loss": points}))
        if reason is not None:
            return f"{reason} (it keeps no last.ckpt to tell otherwise)"
    return None


def check_writable(flag: str, path: Path, what: str) -> None:
    """An OSError (the machine's refusal) when no file can be written into ``path`` (made if missing, then removed
    again with the parents made for it): said before the first run, not after it, as a record that was not written."""
    made = [d for d in (path, *path.parents) if not d.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".ega-sweep-check.", suffix=TEMPORARY_SUFFIX)
        os.close(fd)
        os.unlink(probe)
    finally:
        for folder in made:  # innermost first; a folder that holds something now is not ours to remove
            with contextlib.suppress(OSError):
                folder.rmdir()


def _first_start(log_path: Path) -> str | None:
    """When the run's first attempt started: the time of the first header the sweep wrote into its log (a
    run stopped and resumed has one per attempt; the registered protocol reads the first)."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as log:
            for line in log:
                if line.startswith(LOG_HEADER + " "):
                    return line.split()[1]
    except OSError:
        return None
    return None


def run_sweep(runs: list[Run], runs_dir: Path, records_dir: Path, dry_run: bool = False) -> int:
    """Runs (or, dry, prints) ``runs`` in order; returns the exit code: `exit_code` of the outcomes."""
    outcomes: dict[str, list[str]] = {}
    termination = Termination()
    previous = None if dry_run else signal.signal(signal.SIGTERM, termination)
    try:
        for i, run in enumerate(runs, 1):
            prefix = f"[{i}/{len(runs)}] {run.run_name}:"
            if dry_run:
                outcome = recorded(run, records_dir, prefix)
                if outcome is not None:
                    outcomes.setdefault(outcome, []).append(run.run_name)
                    continue
                state = run_state(runs_dir / run.run_name)
                if state == "done":
                    outcomes.setdefault(finished(run, runs_dir / run.run_name, prefix), []).append(run.run_name)
                else:
                    cmd = fit_command(run, runs_dir, resume=state == "resume", overwrite=state == "stale")
                    print(f"{prefix} would {'resume' if state == 'resume' else 'start'}\n    {shlex.join(cmd)}")
                continue
            if termination.received:  # the job is ending: no run starts now
                break
            outcome = execute(run, runs_dir, records_dir, prefix, termination)
            outcomes.setdefault(outcome, []).append(run.run_name)
            if outcome == "stopped":  # a time limit stops them all: the next sweep resumes this one first
                break
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if dry_run:
        return 1 if outcomes.get("failed") else 0
    stopped = bool(outcomes.get("stopped")) or termination.received
    print(", ".join(f"{len(outcomes.get(k, []))} {k}" for k in ("done", "skipped", "failed", "busy", "stopped")))
    not_finished = outcomes.get("failed", []) + outcomes.get("busy", []) + outcomes.get("stopped", [])
    not_started = [r.run_name for r in runs if not any(r.run_name in names for names in outcomes.values())]
    if not_finished or not_started:
        names = ", ".join(not_finished + not_started)
        print(f"not finished: {names} (logs: {runs_dir}/<run>/{LOG_FILE}); rerun to retry them.")
    return exit_code(stopped, bool(outcomes.get("failed")), bool(outcomes.get("busy")))


def exit_code(stopped: bool, failed: bool, busy: bool) -> int:
    """What a job script reads (docs/resuming.md#exit-codes): stopped by SIGTERM 143 (requeue: the runs are unfinished
    and the next sweep resumes them; a failed one is retried then too), else a failed run 1, else a run that another
    process is training 75 (nothing to do here), else 0."""
    if stopped:
        return STOPPED
    if failed:
        return 1
    return RUN_BUSY if busy else 0


def numbering(runs: tuple[Run, ...]) -> str:
    """The spec's runs with their --index, as `--dry_run` prints them first."""
    width = len(str(len(runs) - 1))
    return "\n".join(
        [f"{'index':>{width}}  run (`--index I` runs one; `--shard K/N` keeps each seed on one shard)"]
        + [f"{i:>{width}}  {run.run_name}" for i, run in enumerate(runs)]
    )


def choose(sweep: spec_module.Sweep, only: list[str] | None, index: int | None, shard_of: str | None) -> list[Run]:
    """The runs this invocation runs: all, --only, --index or --shard (a SpecError when none is left)."""
    if index is not None and (only or shard_of):
        raise SpecError("--index picks one run: give it alone, without --only or --shard.")
    if index is not None:
        return [pick_index(sweep.runs, index, sweep.path)]
    runs = select(sweep.runs, only)
    if shard_of is not None:
        k, n = parse_shard(shard_of)
        runs = [r for r in shard(sweep.runs, k, n) if r in runs]
    if not runs:
        names = ", ".join(r.run_name for r in sweep.runs)
        asked = " ".join(f"--only {p}" for p in only or []) + (f" --shard {shard_of}" if shard_of else "")
        raise SpecError(f"no run of {sweep.path} matches{asked}; its runs are: {names}")
    return runs


def check_dir(flag: str, path: Path, what: str) -> None:
    """A UserError when ``path`` (the value of ``flag``) is a file or lies under one: said before the first run, as
    `ega fit` does for its run directory."""
    not_a_dir = next((d for d in (path, *path.parents) if d.exists() and not d.is_dir()), None)
    if not_a_dir is None:
        return
    where = "is a file" if not_a_dir == path else f"lies under the file {not_a_dir}"
    raise UserError(
        f"{flag} {path} {where}, so {what} cannot be made there. Give {flag} a directory, or a path that does not "
        "exist yet."
    )


def check_fit_commands(runs: list[Run], runs_dir: Path) -> None:
    """A SpecError listing every problem `ega fit` would refuse in any of ``runs`` (flags, values, gates, import
    paths, step counts: `fit_args.problems`), before the first run starts; each distinct (configs, args) is read
    once, with its first run's seed and name."""
    from ega_lightning import fit_args  # Lightning: not for `ega sweep --help`

    by_command: dict[tuple[tuple[str, ...], tuple[str, ...]], list[Run]] = {}
    for run in runs:
        by_command.setdefault((run.configs, run.args), []).append(run)
    found = []
    for same in by_command.values():
        names = ", ".join(r.run_name for r in same)
        for problem in fit_args.problems([*spec_module.fit_args(same[0]), f"--runs_dir={runs_dir}"]):
            found.append(f"{same[0].spec} ({same[0].entry}: {names}): ega fit would refuse it: {problem}")
    if found:
        raise SpecError("\n".join(["invalid sweep spec, nothing was run:", *(f"  - {p}" for p in found)]))


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(
        prog="ega sweep",
        description=__doc__.split("\n", 1)[1] + "\n" + spec_module.__doc__.split("\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("spec", type=Path, help="the sweep spec (YAML)")
    parser.add_argument(
        "--dry_run", action="store_true", help="print the numbering, each run's state and command; run nothing"
    )
    parser.add_argument("--only", action="append", metavar="GLOB", help="only run names matching GLOB (repeatable)")
    parser.add_argument(
        "--index",
        type=int,
        metavar="I",
        help="run only run I (0-based) of the spec's numbered list; the runs the report pairs must share a machine: "
        "pin the tasks to one node, or use --shard",
    )
    parser.add_argument("--shard", metavar="K/N", help="run only shard K (0..N-1) of N; each seed on one shard")
    parser.add_argument("--runs_dir", type=Path, default=Path("lightning_logs"), help="where the runs are written")
    parser.add_argument(
        "--records_dir",
        type=Path,
        default=Path("results/runs"),
        help="where finished runs leave their records (commit them); a recorded run is skipped",
    )
    args = parser.parse_args(argv)
    try:
        sweep = load_spec(args.spec)
        runs = choose(sweep, args.only, args.index, args.shard)
        check_dir("--runs_dir", args.runs_dir, "the runs")
        check_dir("--records_dir", args.records_dir, "the runs' records")
        check_fit_commands(runs, args.runs_dir)
    except UserError as err:
        print(f"ega sweep: error: {err}", file=sys.stderr)
        return EXITS[UserError].status
    if not args.dry_run:
        try:
            check_writable("--records_dir", args.records_dir, "the runs' records")
        except OSError as err:
            if machine_refusal(err) is None:
                raise
            refusal = UserError(
                f"--records_dir {args.records_dir} cannot be written, so no run would leave its record: "
                f"{describe_refusal(err)} Nothing was run."
            )
            print(f"ega sweep: error: {refusal}", file=sys.stderr)
            return MACHINE_REFUSED
    try:
        code = run_sweep(runs, args.runs_dir, args.records_dir, dry_run=args.dry_run)
        if args.dry_run:
            print(numbering(sweep.runs))
        return code
    except KeyboardInterrupt:
        print("\ninterrupted: finished runs are kept; rerun the same command to resume.", file=sys.stderr)
        return EXITS[KeyboardInterrupt].status
