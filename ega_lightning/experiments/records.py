"""Run records: what a finished run keeps in git, so that a study outlives the machine it ran on.

This module is the only code that reads a run directory (its ``DONE``, event files, config and
gate summary) and the only writer of records. Checkpoints and event files stay out of git
(large, machine-local, and gone with the machine). The record of a finished run,
``<records dir>/<run name>.json`` (``results/runs/`` by default), holds everything `ega report`
needs: how it was run (configs, arguments, and the command as a user would type it, with no path
of the machine that ran it), where and with what (machine, git commit and whether the tree was
dirty, torch / lightning / project versions; null where not known), its hyper-parameters and step
budget, its parameter count and the gate's share of it, every logged point of the scalars the
report uses (read with tensorboard's own reader) and the gate summary.

A record states the configs and arguments the run was started with, and is used only while the
spec entry still gives those. A diverged run's NaN is kept as Python's json writes it (``NaN``):
records are read back by this package, not by strict JSON parsers.

Records of format 1 (written before format 2) are upgraded when read, and rewritten in place by
``python -m ega_lightning.experiments.records migrate DIR``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ega_lightning.experiments.spec import (
    DONE_FILE,
    RecordError,
    Run,
    check_ran_as_specified,
    ran_with,
    user_command,
)
from ega_lightning.host import machine, version
from ega_lightning.io import read_yaml, write_atomic

FORMAT = 2
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
# hyper-parameters that name a place on the machine that ran, not the run: kept out of records
MACHINE_LOCAL_HPARAMS = ("data_dir",)
# fingerprint: of the code path the run trained (see ega_lightning.fingerprint); None where not known
PROVENANCE_KEYS = ("machine", "git_commit", "git_dirty", "versions", "fingerprint")
VERSIONED = ("torch", "lightning", "ega-lightning")


# ----------------------------------------------------------------------------- where a run ran


def _git(*args: str) -> str | None:
    checkout = Path(__file__).resolve().parents[2]  # the checkout this package is imported from
    try:
        done = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def provenance() -> dict[str, Any]:
    """Machine, git commit (None outside a git checkout), whether tracked files differ from it, versions."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {
        "machine": machine(),
        "git_commit": commit.strip() if commit else None,
        "git_dirty": bool(status.strip()) if status is not None else None,
        "versions": {package: version(package) for package in VERSIONED},
    }


def run_fingerprint(run_dir: Path) -> str | None:
    """The fingerprint of the code path a run directory's model trains, computed by this checkout's code;
    None when its hyper-parameters cannot be read or the model cannot be built here."""
    from ega_lightning.fingerprint import fingerprint

    try:
        return fingerprint(_hparams(read_yaml(run_dir / "hparams.yaml")))
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
    ran = ran_with(done.get("command"))
    if ran is not None:
        check_ran_as_specified(run, *ran, run_dir)
    return done


_PARAM_COUNTS: dict[str, tuple[int, int]] = {}


def count_parameters(hparams: dict[str, Any]) -> tuple[int, int] | None:
    """(parameters of ``CharLM(**hparams)``, of the same model with both gate slots empty: the baseline);
    tied weights counted once. None without a vocabulary."""
    if "vocab" not in hparams:
        return None
    key = json.dumps(hparams, sort_keys=True, default=str)
    if key not in _PARAM_COUNTS:
        import inspect

        from ega_lightning.module import CharLM

        accepted = set(inspect.signature(CharLM.__init__).parameters) - {"self"}
        kwargs = {k: v for k, v in hparams.items() if k in accepted}  # hparams.yaml holds data keys too
        without_gate = {**kwargs, "gate": "none", "gate_options": None, "output_gate": "none"}
        _PARAM_COUNTS[key] = tuple(  # type: ignore[assignment]
            sum(p.numel() for p in CharLM(**kw).parameters()) for kw in (kwargs, without_gate)
        )
    return _PARAM_COUNTS[key]


def _params(hparams: dict[str, Any]) -> dict[str, int | None]:
    counted = count_parameters(hparams)
    if counted is None:
        return {"n_params": None, "gate_params": None}
    return {"n_params": counted[0], "gate_params": counted[0] - counted[1]}


def _hparams(hparams: dict[str, Any]) -> dict[str, Any]:
    # _instantiator: Lightning's bookkeeping, not a hyper-parameter
    return {k: v for k, v in hparams.items() if k != "_instantiator" and k not in MACHINE_LOCAL_HPARAMS}


def make_record(run: Run, run_dir: Path) -> dict[str, Any]:
    """The record of a finished run directory; raises :class:`RecordError` for any other."""
    done = read_done(run, run_dir)
    # what the run was started with; a DONE without a fit command (hand-made) takes the spec's word
    configs, args = ran_with(done.get("command")) or (list(run.configs), list(run.args))
    scalars = read_scalars(run_dir)
    if not scalars.get("val/loss"):
        raise RecordError(f"{run_dir} is DONE but its event files hold no val/loss: nothing to record.")
    config, hparams = read_yaml(run_dir / "config.yaml"), _hparams(read_yaml(run_dir / "hparams.yaml"))
    summary_path = run_dir / "gate_summary.json"
    known = {key: done.get(key) for key in PROVENANCE_KEYS}
    # a DONE from before machines were noted: a run directory is recorded where it ran
    known["machine"] = known["machine"] or machine()
    return {
        "format": FORMAT,
        "run_name": run.run_name,
        "configs": configs,
        "args": args,
        "seed": run.seed,
        "command": user_command(_as_run(run, configs, args)),
        "source": FROM_EVENT_FILES,
        "done": {k: done.get(k) for k in ("returncode", "wall_seconds", "finished_at", "resumed")},
        **known,
        "corpus": (config.get("data") or {}).get("corpus") or hparams.get("corpus"),
        "gate": hparams.get("gate") or (config.get("model") or {}).get("gate"),
        "max_steps": (config.get("trainer") or {}).get("max_steps"),
        "hparams": hparams,
        **_params(hparams),
        "gate_summary": json.loads(summary_path.read_text()) if summary_path.is_file() else None,
        "scalars": {tag: [[step, value] for step, value in scalars[tag]] for tag in RECORD_TAGS if tag in scalars},
    }


def _as_run(run: Run, configs: list[str], args: list[str]) -> Run:
    from dataclasses import replace

    return replace(run, configs=tuple(configs), args=tuple(args))


# ----------------------------------------------------------------------------- records


def record_path(records_dir: Path, run_name: str) -> Path:
    return records_dir / f"{run_name}.json"


def write_record(record: dict[str, Any], records_dir: Path) -> Path:
    path = record_path(records_dir, record["run_name"])
    write_atomic(path, json.dumps(record, indent=1) + "\n")
    return path


def record_run(run: Run, run_dir: Path, records_dir: Path) -> Path:
    return write_record(make_record(run, run_dir), records_dir)


def _relative(path: str) -> str:
    """A path under the current directory as relative to it; any other path as it is."""
    p = Path(path)
    if p.is_absolute():
        with_cwd = Path.cwd()
        if p.is_relative_to(with_cwd):
            return str(p.relative_to(with_cwd))
    return path


def upgrade(record: dict[str, Any]) -> dict[str, Any]:
    """A format-1 record as format 2: the command as a user types it, no path of the machine that
    made it, its parameter counts; its commit and versions were never noted (None: unknown).

    Raises :class:`RecordError` for a record of no known format.
    """
    if record.get("format") == FORMAT:
        return record
    if record.get("format") != 1:
        raise RecordError(f"record {record.get('run_name')!r} has format {record.get('format')!r}, not 1 or {FORMAT}.")
    configs = [_relative(c) for c in record.get("configs") or []]
    args = list(record.get("args") or [])
    name, seed = record["run_name"], record["seed"]
    entry = name.removesuffix(f"-seed{seed}")
    run = Run(Path("?"), entry, seed, tuple(configs), tuple(args), "", "")
    done = record.get("done") or {}
    hparams = _hparams(record.get("hparams") or {})
    upgraded = {
        "format": FORMAT,
        "run_name": name,
        "configs": configs,
        "args": args,
        "seed": seed,
        "command": user_command(run),
        "source": record.get("source"),
        "done": {k: done.get(k) for k in ("returncode", "wall_seconds", "finished_at", "resumed")},
        "machine": record.get("machine") or done.get("machine"),
        "git_commit": None,
        "git_dirty": None,
        "versions": None,
        "fingerprint": None,
        **{k: record.get(k) for k in ("corpus", "gate", "max_steps")},
        "hparams": hparams,
        **_params(hparams),
        "gate_summary": record.get("gate_summary"),
        "scalars": record.get("scalars") or {},
    }
    return upgraded


def read_record(path: Path) -> dict[str, Any]:
    """A record file, upgraded to the current format; :class:`RecordError` when it cannot be read."""
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise RecordError(f"{path} cannot be read ({err}): restore it from git, or delete it to rerun.") from err
    if not isinstance(record, dict):
        raise RecordError(f"{path} is not a run record: delete it to rerun the run.")
    try:
        return upgrade(record)
    except (RecordError, KeyError) as err:
        raise RecordError(f"{path} is not a run record this version reads ({err}): delete it to rerun.") from err


def load_record(run: Run, records_dir: Path) -> dict[str, Any] | None:
    """The run's record; None when there is none. Raises :class:`RecordError` for a record that
    does not belong to this spec entry (other configs or arguments) or cannot be read."""
    path = record_path(records_dir, run.run_name)
    if not path.is_file():
        return None
    record = read_record(path)
    check_ran_as_specified(run, record.get("configs") or [], record.get("args") or [], path)
    return record


# ----------------------------------------------------------------------------- a run, wherever it is


@dataclass
class Loaded:
    """A run of a spec as far as the records know it: ``done`` with its record, else why not."""

    run: Run
    status: str  # done | incomplete | missing
    reason: str
    record: dict[str, Any] | None
    fresh: bool  # the record was made from the run directory just now (write it back)


def load_run(run: Run, runs_dir: Path, records_dir: Path) -> Loaded:
    """A finished run directory first (its event files, read once), else the run's record, else
    why the run does not count."""
    run_dir = runs_dir / run.run_name
    problem = None  # why a finished run directory does not count; its record may still
    if (run_dir / DONE_FILE).is_file():
        try:
            return Loaded(run, "done", "", make_record(run, run_dir), fresh=True)
        except RecordError as err:
            problem = str(err)
    try:
        record = load_record(run, records_dir)
    except RecordError as err:
        return Loaded(run, "incomplete", f"unusable record: {err}", None, False)
    if record is not None:
        if not (record.get("scalars") or {}).get("val/loss"):
            path = record_path(records_dir, run.run_name)
            return Loaded(run, "incomplete", f"its record {path} holds no val/loss: delete it to rerun", None, False)
        return Loaded(run, "done", "", record, fresh=False)
    if problem is not None:
        return Loaded(run, "incomplete", problem, None, False)
    if not run_dir.is_dir():
        return Loaded(run, "missing", f"never started: no run directory, no record in {records_dir}", None, False)
    resumable = (run_dir / "checkpoints" / "last.ckpt").is_file()
    reason = "no DONE; " + (
        "has checkpoints/last.ckpt: interrupted or failed, `ega sweep` resumes it"
        if resumable
        else "no checkpoint: failed early, still running, or never got to an evaluation"
    )
    return Loaded(run, "incomplete", reason, None, False)


def static_config(run_dir: Path) -> dict[str, Any]:
    """A started run's saved config (``config.yaml``), {} when it has none or it cannot be read."""
    try:
        return read_yaml(run_dir / "config.yaml")
    except (OSError, yaml.YAMLError):
        return {}


# ----------------------------------------------------------------------------- migration


def migrate(records_dir: Path) -> list[Path]:
    """Rewrites every format-1 record in ``records_dir`` as format 2; returns the rewritten files."""
    changed = []
    for path in sorted(records_dir.glob("*.json")):
        raw = json.loads(path.read_text())
        if raw.get("format") == FORMAT:
            continue
        write_atomic(path, json.dumps(read_record(path), indent=1) + "\n")
        changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ega_lightning.experiments.records",
        description="Rewrite run records of format 1 as format 2 (run from the checkout: configs become relative).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("migrate", help="rewrite the records in DIR").add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    if not args.dir.is_dir():
        print(f"error: {args.dir} is not a directory of run records.", file=sys.stderr)
        return 2
    try:
        changed = migrate(args.dir)
    except RecordError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{len(changed)} record(s) rewritten as format {FORMAT} in {args.dir}: {shlex.join(p.name for p in changed)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
