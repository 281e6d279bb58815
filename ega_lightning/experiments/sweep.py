"""`ega sweep SPEC.yaml`: run a list of (configs, seed) pairs one after another, restartably.

A spec (YAML)::

    name: short                                          # the sweep's name
    configs: [configs/base.yaml, configs/size/cpu.yaml]  # applied to every run, first
    args: [--trainer.enable_progress_bar=false]          # extra `ega fit` arguments for every run
    runs:
      - name: ts-linear            # run name prefix: each seed runs as <name>-seed<seed>
        configs: [configs/corpus/tinyshakespeare.yaml, configs/gate/linear.yaml]
        seeds: [1, 2, 3]
        args: [--model.tau_init=0.35]   # optional
        group: main                # optional: the report's section (default: the sweep's name)
        also_in: [ablation]        # optional: further report sections that show these runs too
        variant: linear            # optional: the report's label (default: the run name prefix)

Relative config paths are resolved against the current working directory (where `ega sweep`
runs), as `ega fit -c` resolves them; run sweeps from the repository root.

Each run is ``python -m ega_lightning.cli fit -c <sweep configs> -c <run configs> <sweep args>
<run args> --seed_everything=<seed> --run_name=<name>-seed<seed> --runs_dir=<runs dir>``, its
output appended to ``<runs dir>/<run name>/sweep.log``. A run whose directory holds ``DONE``
(written after the run exits 0) is skipped; one with ``checkpoints/last.ckpt`` but no ``DONE``
was interrupted and is resumed with ``--ckpt_path last``; anything else starts fresh. So a sweep
can be stopped at any point (Ctrl-C, SIGKILL) and rerun with the same command. A run still
running in another process (say, the orphan of a killed sweep) holds a lock on its directory and
is left alone.

A finished run also leaves its record, ``<records dir>/<run name>.json`` (see
`ega_lightning.experiments.records`): commit it, and a fresh clone's sweep skips the run and its
report still counts it. A record or finished directory that ran with other configs or arguments
than the spec now gives is refused (the run fails, naming it and the fix). Delete a run's record,
``DONE`` and directory to run it again.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import fnmatch
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml

from ega_lightning import runs
from ega_lightning.experiments.records import (
    RecordError,
    load_record,
    machine,
    read_done,
    record_path,
    record_run,
    write_atomic,
)

SPEC_KEYS = ("name", "configs", "args", "runs")
RUN_KEYS = ("name", "configs", "seeds", "args", "group", "also_in", "variant")
# the sweep sets these itself, per run; a spec that set them would break resuming and naming
RESERVED_ARGS = ("--seed_everything", "--run_name", "--runs_dir", "--ckpt_path", "--overwrite")
DONE_FILE, LOG_FILE = "DONE", "sweep.log"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]*$")  # one directory name, nothing a shell mangles


class SpecError(ValueError):
    """A sweep spec that cannot be run; the message lists every problem and its fix."""


@dataclass(frozen=True)
class Run:
    """One (configs, seed) pair of a sweep: what `ega fit` gets and how the report labels it."""

    spec: Path
    entry: str  # the spec entry's `name`
    seed: int
    configs: tuple[str, ...]  # the sweep's configs, then the entry's
    args: tuple[str, ...]  # the sweep's args, then the entry's
    group: str
    variant: str
    also_in: tuple[str, ...] = ()  # more report sections showing this run (e.g. the shared baseline)

    @property
    def groups(self) -> tuple[str, ...]:
        return (self.group, *self.also_in)

    @property
    def run_name(self) -> str:
        return f"{self.entry}-seed{self.seed}"


@dataclass(frozen=True)
class Sweep:
    path: Path
    name: str
    runs: tuple[Run, ...]


def _unknown_keys(data: dict[str, Any], allowed: tuple[str, ...], where: str) -> list[str]:
    problems = []
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            problems.append(f"{where}: unknown key '{key}'; {hint}allowed keys: {', '.join(allowed)}.")
    return problems


def _strings(data: dict[str, Any], key: str, where: str, problems: list[str]) -> list[str]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.append(f"{where}: '{key}' must be a list of strings, got {value!r}.")
        return []
    return value


def _label(data: dict[str, Any], key: str, default: str, where: str, problems: list[str]) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or not value:
        problems.append(f"{where}: '{key}' must be a non-empty string, got {value!r}.")
        return default
    return value


def _check_args(args: list[str], where: str) -> list[str]:
    problems = []
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in RESERVED_ARGS:
            problems.append(
                f"{where}: args may not contain {flag}: the sweep sets it for every run "
                "(seeds go under 'seeds:', the run name is <name>-seed<seed>, use --runs_dir of `ega sweep`)."
            )
        elif flag in ("-c", "--config"):
            problems.append(f"{where}: put config files under 'configs:', not as {flag} in 'args:'.")
    return problems


def _check_configs(configs: list[str], where: str) -> list[str]:
    return [
        f"{where}: config file {c} not found (relative paths are resolved against the current directory "
        f"{Path.cwd()}): fix the path, or run `ega sweep` from the directory the spec's paths are relative to."
        for c in configs
        if not Path(c).is_file()
    ]


def load_spec(path: Path | str, check_files: bool = True) -> Sweep:
    """Parses and validates a sweep spec; raises :class:`SpecError` listing every problem.

    Args:
        check_files: require the config files to exist (the report does not need them).
    """
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"sweep spec {path} not found.")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise SpecError(f"{path} is not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise SpecError(
            f"{path}: a sweep spec is a mapping with keys {', '.join(SPEC_KEYS)}; got {type(data).__name__}."
        )
    problems = _unknown_keys(data, SPEC_KEYS, str(path))
    name = data.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        problems.append(f"{path}: 'name' must be a short name of letters, digits, '.', '_', '-'; got {name!r}.")
        name = path.stem
    configs = _strings(data, "configs", str(path), problems)
    args = _strings(data, "args", str(path), problems)
    problems += _check_args(args, str(path))
    if check_files:
        problems += _check_configs(configs, str(path))
    entries = data.get("runs")
    if not isinstance(entries, list) or not entries:
        problems.append(f"{path}: 'runs' must be a non-empty list of runs (each with name, configs, seeds).")
        entries = []

    runs: list[Run] = []
    first_seen: dict[str, str] = {}
    for i, entry in enumerate(entries):
        where = f"{path}: runs[{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: each run is a mapping with keys {', '.join(RUN_KEYS)}; got {entry!r}.")
            continue
        entry_name = entry.get("name")
        if not isinstance(entry_name, str) or not _NAME.match(entry_name):
            problems.append(
                f"{where}: 'name' must be a short name of letters, digits, '.', '_', '-'; got {entry_name!r}."
            )
            continue
        where = f"{where} ({entry_name})"
        problems += _unknown_keys(entry, RUN_KEYS, where)
        run_configs = _strings(entry, "configs", where, problems)
        run_args = _strings(entry, "args", where, problems)
        problems += _check_args(run_args, where)
        if check_files:
            problems += _check_configs(run_configs, where)
        seeds = entry.get("seeds")
        if not isinstance(seeds, list) or not seeds or not all(type(s) is int for s in seeds):
            problems.append(f"{where}: 'seeds' must be a non-empty list of integers, e.g. [1, 2, 3]; got {seeds!r}.")
            seeds = []
        group = _label(entry, "group", name, where, problems)
        also_in = tuple(_strings(entry, "also_in", where, problems))
        variant = _label(entry, "variant", entry_name, where, problems)
        for seed in seeds:
            run = Run(path, entry_name, seed, (*configs, *run_configs), (*args, *run_args), group, variant, also_in)
            if run.run_name in first_seen:
                problems.append(
                    f"{where}: run name '{run.run_name}' already comes from {first_seen[run.run_name]}; "
                    "both would write into the same directory: "
                    "give the entries distinct names or drop the repeated seed."
                )
                continue
            first_seen[run.run_name] = f"runs[{i}]"
            runs.append(run)
    if problems:
        raise SpecError("\n".join(["invalid sweep spec, nothing was run:", *(f"  - {p}" for p in problems)]))
    return Sweep(path, name, tuple(runs))


def select(runs: tuple[Run, ...], patterns: list[str] | None) -> list[Run]:
    """The runs whose run name matches any of the fnmatch ``patterns`` (all when None)."""
    if not patterns:
        return list(runs)
    return [r for r in runs if any(fnmatch.fnmatchcase(r.run_name, p) for p in patterns)]


def run_state(run_dir: Path) -> str:
    """``done`` (DONE exists), else what `ega fit` makes of the directory: ``fresh``, ``resume`` or ``stale``."""
    if (run_dir / DONE_FILE).is_file():
        return "done"
    return runs.fit_state(run_dir).value


def fit_command(run: Run, runs_dir: Path | str, resume: bool, overwrite: bool = False) -> list[str]:
    """The `ega fit` of ``run``; ``resume``: from its last.ckpt; ``overwrite``: over a run that cannot resume."""
    cmd = [sys.executable, "-m", "ega_lightning.cli", "fit"]
    for config in run.configs:
        cmd += ["-c", config]
    cmd += [*run.args, f"--seed_everything={run.seed}", f"--run_name={run.run_name}", f"--runs_dir={runs_dir}"]
    if resume:
        return [*cmd, "--ckpt_path", "last"]
    return [*cmd, "--overwrite=true"] if overwrite else cmd


def ran_with(command: list[str] | None) -> tuple[list[str], list[str]] | None:
    """The (configs, args) a :func:`fit_command` was made from: what a finished run was started with.

    None for anything else (a DONE written by hand or by an older tool): nothing to tell from it.
    """
    if not command or "fit" not in command:
        return None
    rest = command[command.index("fit") + 1 :]
    configs: list[str] = []
    args: list[str] = []
    i = 0
    while i < len(rest):
        flag = rest[i].split("=", 1)[0]
        if rest[i] in ("-c", "--ckpt_path"):  # the sweep's two flags that take their value separately
            if rest[i] == "-c":
                configs.append(rest[i + 1])
            i += 2
            continue
        if flag not in RESERVED_ARGS:
            args.append(rest[i])
        i += 1
    return configs, args


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


@contextlib.contextmanager
def _run_lock(run_dir: Path) -> Iterator[TextIO | None]:
    """The run directory's lock (the one `ega fit` takes), or None when another process holds it.

    The child `ega fit` inherits the locked file and takes it as its own (``runs.LOCK_FD_ENV``), so
    the lock outlives a SIGKILLed sweep for as long as its orphaned `ega fit` runs: a restarted
    sweep then leaves that run alone, and so does a user's `ega fit` of the same run.
    """
    lock = runs.try_lock(run_dir)
    try:
        yield lock
    finally:
        if lock is not None:
            lock.close()


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


def execute(run: Run, runs_dir: Path, records_dir: Path, prefix: str) -> str:
    """Runs one run to completion unless it is recorded, done or busy; returns done/skipped/busy/failed."""
    outcome = recorded(run, records_dir, prefix)
    if outcome is not None:
        return outcome
    run_dir = runs_dir / run.run_name
    with _run_lock(run_dir) as lock:
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
        log_path = run_dir / LOG_FILE
        with open(log_path, "ab") as log:
            offset = log.tell()
            now = datetime.now(UTC).isoformat(timespec="seconds")
            log.write(f"\n===== {now} ega sweep {run.spec}: {state}\n$ {shlex.join(cmd)}\n".encode())
            log.flush()
            print(f"{prefix} {({'resume': 'resumed', 'stale': 'started over'}).get(state, 'started')}", flush=True)
            start = time.monotonic()
            # the log shows progress as it happens; the child takes over the lock
            env = {**os.environ, "PYTHONUNBUFFERED": "1", runs.LOCK_FD_ENV: str(lock.fileno())}
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=(lock.fileno(),))
            try:
                returncode = proc.wait()
            except KeyboardInterrupt:
                _stop(proc)
                raise
        wall = time.monotonic() - start
        if returncode != 0:
            print(f"{prefix} failed ({returncode}); the end of {log_path}:\n{_log_tail(log_path, offset)}", flush=True)
            return "failed"
        done = {
            "command": cmd,
            "returncode": returncode,
            "wall_seconds": round(wall, 3),
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "resumed": state == "resume",
            "machine": machine(),
        }
        write_atomic(run_dir / DONE_FILE, json.dumps(done, indent=2) + "\n")
        print(f"{prefix} done in {wall:.0f} s", flush=True)
        _record(run, run_dir, records_dir, prefix)
        return "done"


def run_sweep(runs: list[Run], runs_dir: Path, records_dir: Path, dry_run: bool = False) -> int:
    """Runs (or, dry, prints) ``runs`` in order; returns the exit code (1 if any run failed)."""
    outcomes: dict[str, list[str]] = {}
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
                verb = {"resume": "resume", "stale": "start over"}.get(state, "start")
                print(f"{prefix} would {verb}\n    {shlex.join(cmd)}")
            continue
        outcomes.setdefault(execute(run, runs_dir, records_dir, prefix), []).append(run.run_name)
    if dry_run:
        return 1 if outcomes.get("failed") else 0
    print(", ".join(f"{len(outcomes.get(k, []))} {k}" for k in ("done", "skipped", "failed", "busy")))
    not_finished = outcomes.get("failed", []) + outcomes.get("busy", [])
    if not_finished:
        print(f"not finished: {', '.join(not_finished)} (logs: {runs_dir}/<run>/{LOG_FILE}); rerun to retry them.")
    return 1 if not_finished else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ega sweep",
        description=__doc__.split("\n", 1)[1],  # the spec format and the rules, as documented above
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("spec", type=Path, help="the sweep spec (YAML)")
    parser.add_argument("--dry_run", action="store_true", help="print each run's state and command, run nothing")
    parser.add_argument("--only", action="append", metavar="GLOB", help="only run names matching GLOB (repeatable)")
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
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    runs = select(sweep.runs, args.only)
    if not runs:
        names = ", ".join(r.run_name for r in sweep.runs)
        print(
            f"error: no run of {args.spec} matches --only {' '.join(args.only)}; its runs are: {names}", file=sys.stderr
        )
        return 2
    try:
        return run_sweep(runs, args.runs_dir, args.records_dir, dry_run=args.dry_run)
    except KeyboardInterrupt:
        print("\ninterrupted: finished runs are kept; rerun the same command to resume.", file=sys.stderr)
        return 130
