"""Run directories read into records: the only code that reads what `ega fit` and `ega sweep` leave
in a run directory (its ``DONE``, event files, config and gate summary), and that tells where a run
ran (machine, git commit, library versions, the fingerprint of its code path).

Checkpoints and event files stay out of git (large, machine-local, and gone with the machine); the
record (`ega_lightning.experiments.records`) keeps what the report needs, every logged point of
the scalars the report uses read with tensorboard's own reader. :func:`load_run` says whether a
spec's run counts: a finished run directory first, else its record, else why not. Reading writes nothing:
the record of a run read from its directory is refreshed by the caller that means it (`ega report`, `ega sweep`).
This module reads files; it imports nothing of the analysis (docs/architecture.md, the records room).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import yaml

from ega_lightning import runs as run_dirs
from ega_lightning.experiments.records import (
    Done,
    Record,
    RecordError,
    check_ran_as_specified,
    kept_hparams,
    load_record,
    parameter_counts,
    record_path,
    replaced_by,
    unfinished,
    write_record,
)
from ega_lightning.experiments.records import read as read_record_file
from ega_lightning.experiments.spec import DONE_FILE, Run, ran_with, static_value, user_command
from ega_lightning.host import machine, version
from ega_lightning.io import read_yaml

# what the report reads: its tables (final, best, gap, tau, speed), its figures (curves) and the tau mechanism
RECORD_TAGS = (
    "val/loss",
    "val/bpc",
    "train_eval/loss",
    "gap",
    "gate/tau_mean",
    "gate/frac_above_tau",
    "gate/mean_gate",
    # the tau mechanism: how hard tau is pushed beside the energy projection (every log_every_n_steps)
    "gate/grad_norm/tau",
    "gate/grad_norm/alpha",
    "gate/grad_norm/energy",
    "train/tokens_per_sec",
)
FROM_EVENT_FILES = "event files"
VERSIONED = ("torch", "lightning", "ega-lightning")


# ----------------------------------------------------------------------------- where a run ran


def _git(*args: str) -> str | None:
    checkout = Path(__file__).resolve().parents[2]  # the checkout this package is imported from
    try:
        done = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


# what a run's code and configs are read from: a change there is a change of what ran (a record keeps which)
RUN_PATHS = ("ega_lightning", "configs")
MAX_MODIFIED = 20  # the modified paths a record keeps; more are counted


def run_environment() -> dict[str, Any]:
    """Where a run runs: machine, git commit (None outside a git checkout), whether tracked files differ from it,
    which paths of the package and its configs differ (`modified_paths`), library versions. (Not the report's
    provenance, `experiments.provenance`: which code a record ran.)"""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {
        "machine": machine(),
        "git_commit": commit.strip() if commit else None,
        "git_dirty": bool(status.strip()) if status is not None else None,
        "git_modified": modified_paths(_git("status", "--porcelain", "--untracked-files=all", "--", *RUN_PATHS))
        if commit
        else None,
        "versions": {package: version(package) for package in VERSIONED},
    }


def modified_paths(status: str | None) -> list[str] | None:
    """The paths ``git status --porcelain`` names (modified, added, deleted, renamed: the new name; untracked), at
    most MAX_MODIFIED, then ``... and N more``; None where git could not say. The code fingerprint covers the
    model's arithmetic, not the recipe or the data code: these say whether the tree that ran was the commit's."""
    if status is None:
        return None
    paths = [line[3:].split(" -> ")[-1] for line in status.splitlines() if len(line) > 3]
    more = len(paths) - MAX_MODIFIED
    return paths[:MAX_MODIFIED] + ([f"... and {more} more"] if more > 0 else [])


def run_fingerprint(run_dir: Path) -> str | None:
    """The fingerprint of the code path a run directory's model trains, computed by this checkout's code;
    None when its hyper-parameters cannot be read or the model cannot be built here."""
    from ega_lightning.fingerprint import code_fingerprint

    try:
        return code_fingerprint(kept_hparams(read_yaml(run_dir / "hparams.yaml")))
    except Exception:  # a record without a fingerprint is still a record; the report says it is unknown
        return None


# ----------------------------------------------------------------------------- reading a run directory


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the run's event files, as (step, value) sorted by step.

    A resumed run logs again the steps after its last checkpoint: the last write wins.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})  # 0: keep every point
    events.Reload()
    scalars = {}
    for tag in events.Tags()["scalars"]:
        by_step = {e.step: e.value for e in events.Scalars(tag)}
        scalars[tag] = sorted(by_step.items())
    return scalars


def read_done(run: Run, run_dir: Path) -> dict[str, Any]:
    """The run directory's ``DONE``; raises :class:`RecordError` when there is none or it is not
    the spec entry's run (other configs or arguments in its command)."""
    try:
        done = json.loads((run_dir / DONE_FILE).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise RecordError(f"{run_dir} has no readable {DONE_FILE} ({err}): it is not a finished run.") from err
    try:
        if not isinstance(done, dict):
            raise TypeError("not a JSON object")
        ran = ran_with(done.get("command"))
    except (TypeError, ValueError, IndexError) as err:  # written by hand, or garbled
        raise RecordError(
            f"{run_dir}/{DONE_FILE} is not what `ega sweep` writes ({err}): delete the run directory to rerun "
            "the run, or restore the file."
        ) from err
    if ran is not None:
        check_ran_as_specified(run, *ran, run_dir)
    return done


def make_record(run: Run, run_dir: Path) -> Record:
    """The record of a finished run directory; raises :class:`RecordError` for any other."""
    done = read_done(run, run_dir)
    # what the run was started with; a DONE without a fit command (hand-made) takes the spec's word
    configs, args = ran_with(done.get("command")) or (list(run.configs), list(run.args))
    scalars = read_scalars(run_dir)
    if not scalars.get("val/loss"):
        raise RecordError(f"{run_dir} is DONE but its event files hold no val/loss: nothing to record.")
    summary_path = run_dir / "gate_summary.json"
    try:
        config, hparams = read_yaml(run_dir / "config.yaml"), read_yaml(run_dir / "hparams.yaml")
        gate_summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
        if not isinstance(config, dict) or not isinstance(hparams, dict):
            raise TypeError("config.yaml and hparams.yaml must be mappings")
    except (OSError, ValueError, TypeError, yaml.YAMLError) as err:  # JSONDecodeError, UnicodeDecodeError: ValueError
        raise RecordError(
            f"{run_dir} is DONE, but a file the run wrote cannot be read ({err}): restore it, or delete the run "
            "directory to rerun the run."
        ) from err
    hparams = kept_hparams(hparams)
    ran_seed = config.get("seed_everything")
    if ran_seed is not None and ran_seed != run.seed:  # a copied or renamed run directory: another run's numbers
        raise RecordError(
            f"{run_dir} ran with seed {ran_seed} (its config.yaml), but {run.run_name} is seed {run.seed}: a run "
            "directory keeps its run's name. Move it back, or delete it to rerun the run."
        )
    record = Record(
        run_name=run.run_name,
        configs=configs,
        args=args,
        seed=run.seed,
        command=user_command(replace(run, configs=tuple(configs), args=tuple(args))),
        source=FROM_EVENT_FILES,
        done=Done.of(done),
        # a DONE from before machines were noted: a run directory is recorded where it ran
        machine=done.get("machine") or machine(),
        segments=_segments(run_dir, (config.get("trainer") or {}).get("max_steps")),
        git_commit=done.get("git_commit"),
        git_dirty=done.get("git_dirty"),
        git_modified=done.get("git_modified"),
        versions=done.get("versions"),
        code_fingerprint=done.get("code_fingerprint"),
        corpus=(config.get("data") or {}).get("corpus") or hparams.get("corpus"),
        gate=hparams.get("gate") or (config.get("model") or {}).get("gate"),
        max_steps=(config.get("trainer") or {}).get("max_steps"),
        hparams=hparams,
        **parameter_counts(hparams),
        gate_summary=gate_summary,
        scalars={tag: [[step, value] for step, value in scalars[tag]] for tag in RECORD_TAGS if tag in scalars},
    )
    reason = unfinished(record)
    if reason is not None:
        raise RecordError(f"{run_dir} is DONE, but {reason}: delete the run directory to rerun the run.")
    return record


def _segments(run_dir: Path, max_steps: int | None) -> list[dict[str, Any]] | None:
    """The run's segments (`runs.read_segments`), the last one ending at the run's end (a record is of a finished
    run: its max_steps)."""
    found = run_dirs.read_segments(run_dir)
    if found:
        found[-1]["to_step"] = max_steps
    return found


def record_run(run: Run, run_dir: Path, records_dir: Path) -> Path:
    return write_record(make_record(run, run_dir), records_dir)


# ----------------------------------------------------------------------------- a run, wherever it is


@dataclass(frozen=True, kw_only=True)
class Loaded:
    """A run of a spec as far as the records know it: ``done`` with its record, else why not."""

    run: Run
    status: str  # done | incomplete | missing
    reason: str
    record: Record | None = None
    fresh: bool = False  # the record was made from the run directory just now (the caller writes it back)
    # a run without a record, named from its saved config or its spec entry ("?": not known)
    corpus: str = "?"
    gate: str = "?"
    gate_options: dict[str, Any] | None = None
    output_gate: str = "none"


def load_run(run: Run, runs_dir: Path, records_dir: Path) -> Loaded:
    """A finished run directory first (its event files, read once), else the run's record, else
    why the run does not count."""
    run_dir = runs_dir / run.run_name
    problem = None  # why a finished run directory does not count; its record may still
    if (run_dir / DONE_FILE).is_file():
        try:
            return Loaded(run=run, status="done", reason="", record=make_record(run, run_dir), fresh=True)
        except RecordError as err:
            problem = str(err)
    try:
        record = load_record(run, records_dir)
    except RecordError as err:
        return Loaded(run=run, status="incomplete", reason=f"unusable record: {err}")
    if record is not None:
        if not (record.scalars or {}).get("val/loss"):
            path = record_path(records_dir, run.run_name)
            return Loaded(
                run=run, status="incomplete", reason=f"its record {path} holds no val/loss: delete it to rerun"
            )
        return Loaded(run=run, status="done", reason="", record=record, fresh=False)
    if problem is not None:
        return Loaded(run=run, status="incomplete", reason=problem)
    if not run_dir.is_dir():
        return Loaded(run=run, status="missing", reason=f"never started: no run directory, no record in {records_dir}")
    resumable = (run_dir / run_dirs.LAST).is_file()
    reason = "no DONE; " + (
        "has checkpoints/last.ckpt: interrupted or failed, `ega sweep` resumes it"
        if resumable
        else "no checkpoint: failed early, still running, or never got to an evaluation"
    )
    return Loaded(run=run, status="incomplete", reason=reason)


def static_config(run_dir: Path) -> dict[str, Any]:
    """A started run's saved config (``config.yaml``), {} when it has none or it cannot be read."""
    try:
        return read_yaml(run_dir / "config.yaml")
    except (OSError, yaml.YAMLError):
        return {}


def read_runs(runs: list[Run], runs_dir: Path, records_dir: Path) -> list[Loaded]:
    """Every run of the specs as the report reads it (`load_run`); a run that is not finished is named from
    its saved config or its spec entry. Nothing is written: a run finished under ``runs_dir`` comes back
    ``fresh``, for the caller to write its record (back) into ``records_dir``."""
    out = []
    for run in runs:
        loaded = load_run(run, runs_dir, records_dir)
        if loaded.record is not None:
            out.append(loaded)
            continue
        config = static_config(runs_dir / run.run_name)  # a started run saved what it got
        corpus = (config.get("data") or {}).get("corpus") or static_value(run, "data.corpus") or "?"
        gate = (config.get("model") or {}).get("gate") or static_value(run, "model.gate") or "?"
        options = static_value(run, "model.gate_options")
        output_gate = (config.get("model") or {}).get("output_gate") or static_value(run, "model.output_gate")
        named = {"corpus": str(corpus), "gate": str(gate), "gate_options": options}
        out.append(replace(loaded, **named, output_gate=str(output_gate or "none")))
    return out


def refresh_records(loaded: list[Loaded], records_dir: Path) -> list[Path]:
    """Writes the record of every run read from its directory just now (``fresh``) into ``records_dir``: what
    the report read stays in git's reach. The report command calls it; reading alone writes nothing."""
    fresh = [x.record for x in loaded if x.fresh and x.record is not None]
    check_replaceable(fresh, records_dir)
    return [write_record(record, records_dir) for record in fresh]


def check_replaceable(fresh: list[Record], records_dir: Path) -> None:
    """Raises :class:`RecordError` (before any record is written) when a record of ``fresh`` would replace one in
    ``records_dir`` made with other configs, arguments, seed or steps (`records.replaced_by`): a toy spec's run
    named like a committed one must not overwrite the committed record."""
    for record in fresh:
        path = record_path(records_dir, record.run_name)
        if not path.is_file():
            continue
        try:
            old = read_record_file(path)
        except RecordError:  # an unreadable record: the run directory's is the one there is (it was said unusable)
            continue
        if (reason := replaced_by(old, record, path)) is not None:
            raise RecordError(reason)


# ----------------------------------------------------------------------------- a run directory's state


def run_state(run_dir: Path) -> str:
    """``done`` (DONE exists), else what `ega fit` makes of the directory: ``fresh``, ``resume`` or ``stale``."""
    if (run_dir / DONE_FILE).is_file():
        return "done"
    return run_dirs.fit_state(run_dir).value


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[TextIO | None]:
    """The run directory's lock (the one `ega fit` takes), or None when another process holds it.

    The child `ega fit` inherits the locked file and takes it as its own (``runs.LOCK_FD_ENV``), so
    the lock outlives a SIGKILLed sweep for as long as its orphaned `ega fit` runs: a restarted
    sweep then leaves that run alone, and so does a user's `ega fit` of the same run.
    """
    lock = run_dirs.try_lock(run_dir)
    try:
        yield lock
    finally:
        if lock is not None:
            lock.close()
