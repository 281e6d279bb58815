"""Run records: the schema (:class:`Record`, written once), and reading, writing and migrating them.

The record of a finished run, ``<records dir>/<run name>.json`` (``results/runs/`` by default), is
what a study keeps in git so that it outlives the machine it ran on: how the run was run (configs,
arguments, and the command as a user would type it, with no path of the machine that ran it), where
and with what (machine, git commit and whether the tree was dirty, torch / lightning / project
versions, the fingerprint of the code path it trained (``code_fingerprint``; ``fingerprint`` is the CPU-bound
one records kept before it); null where not known), its hyper-parameters
and step budget, its parameter count and the gate's share of it, every logged point of the scalars
the report uses and the gate summary. `ega_lightning.experiments.rundirs` makes one from a run
directory.

A record states the configs and arguments the run was started with, and is used only while the
spec entry still gives those (:func:`check_ran_as_specified`). A diverged run's NaN is kept as
Python's json writes it (``NaN``): records are read back by this package, not by strict JSON parsers.

Records of format 1 (written before format 2) are upgraded when read, and rewritten in place by
``python -m ega_lightning.experiments.records migrate DIR``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ega_lightning.errors import UserError
from ega_lightning.experiments.spec import Run, user_command
from ega_lightning.io import write_atomic

FORMAT = 2
# hyper-parameters that name a place on the machine that ran, not the run: kept out of records
MACHINE_LOCAL_HPARAMS = ("data_dir",)


class RecordError(UserError):
    """A run that cannot be recorded, or a record or run directory that cannot be used; the message says why."""


@dataclass(frozen=True, kw_only=True)
class Done:
    """How a run ended, as its ``DONE`` says (None: not noted)."""

    returncode: int | None = None
    wall_seconds: float | None = None  # of the last attempt (a resumed run: since its resume)
    finished_at: str | None = None
    resumed: bool | None = None
    started_at: str | None = None  # the first attempt's start (records before it: finished_at - wall_seconds)

    @classmethod
    def of(cls, done: dict[str, Any] | None) -> Done:
        """The keys of a ``DONE`` (or of a record's ``done``) that a record keeps."""
        return cls(**{f.name: (done or {}).get(f.name) for f in fields(cls)})


@dataclass(frozen=True, kw_only=True)
class Record:
    """One finished run, as its record file holds it (the fields in the file's order)."""

    format: int = FORMAT
    run_name: str
    configs: list[str] = field(default_factory=list)  # as the run was started (relative to the checkout)
    args: list[str] = field(default_factory=list)
    seed: int
    command: str | None = None  # `ega fit ...` as a user would type it in the checkout
    source: str | None = None  # where its numbers were read: the run's event files
    done: Done = field(default_factory=Done)
    machine: str | None = None
    # which CPU kind trained which steps, one entry per fit that trained the run (`callbacks.segments`): from_step,
    # to_step, cpu (model, capability, vector units, cores), device; None: records before it, which name only the
    # machine that finished the run
    segments: list[dict[str, Any]] | None = None
    git_commit: str | None = None
    git_dirty: bool | None = None
    # the paths of the package and its configs that differed from the commit (None: not recorded, records before it)
    git_modified: list[str] | None = None
    versions: dict[str, str | None] | None = None
    # fp32 bits of three AdamW steps (records before 2026-12-05): they follow the CPU's kernels, so only kept
    fingerprint: str | None = None
    # of the code path it trained (`ega_lightning.fingerprint`; older records: established by scripts/provenance.py)
    code_fingerprint: str | None = None
    corpus: str | None = None
    gate: str | None = None
    max_steps: int | None = None
    hparams: dict[str, Any] = field(default_factory=dict)
    n_params: int | None = None
    gate_params: int | None = None  # parameters beyond the same model with both gate slots empty
    gate_summary: dict[str, Any] | None = None
    scalars: dict[str, list[list[float]]] = field(default_factory=dict)  # tag -> [[step, value], ...]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        """A record file's content, upgraded from format 1; :class:`RecordError` for any other format."""
        if data.get("format") == 1:
            return _upgraded(data)
        if data.get("format") != FORMAT:
            raise RecordError(f"record {data.get('run_name')!r} has format {data.get('format')!r}, not 1 or {FORMAT}.")
        names = {f.name for f in fields(cls)} - {"done"}
        return cls(**{k: v for k, v in data.items() if k in names}, done=Done.of(data.get("done")))

    def as_data(self) -> dict[str, Any]:
        """The record as its file holds it."""
        data = asdict(self)
        if data["done"]["started_at"] is None:  # records before it keep their bytes
            del data["done"]["started_at"]
        if data["git_modified"] is None:  # likewise
            del data["git_modified"]
        if data["segments"] is None:  # likewise
            del data["segments"]
        return data

    def to_json(self) -> str:
        return json.dumps(self.as_data(), indent=1) + "\n"


def kept_hparams(hparams: dict[str, Any]) -> dict[str, Any]:
    """The hyper-parameters a record keeps: not Lightning's bookkeeping, no path of the machine that ran."""
    return {k: v for k, v in hparams.items() if k != "_instantiator" and k not in MACHINE_LOCAL_HPARAMS}


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
        # the author's attention order needs an energy gate: the gate-less model has plain attention
        without_gate = {
            **kwargs,
            "gate": "none",
            "gate_options": None,
            "output_gate": "none",
            "dropout_before_gate": False,
        }
        _PARAM_COUNTS[key] = tuple(  # type: ignore[assignment]
            sum(p.numel() for p in CharLM(**kw).parameters()) for kw in (kwargs, without_gate)
        )
    return _PARAM_COUNTS[key]


def parameter_counts(hparams: dict[str, Any]) -> dict[str, int | None]:
    """A record's ``n_params`` and ``gate_params`` (None without a vocabulary)."""
    counted = count_parameters(hparams)
    if counted is None:
        return {"n_params": None, "gate_params": None}
    return {"n_params": counted[0], "gate_params": counted[0] - counted[1]}


def check_ran_as_specified(run: Run, configs: Sequence[str], args: Sequence[str], what: Path) -> None:
    """Raises :class:`RecordError` when ``what`` (a run directory or a record) ran with other configs
    or arguments than the spec entry now gives: its numbers are not the spec's run."""
    if (list(configs), list(args)) != (list(run.configs), list(run.args)):
        raise RecordError(
            f"{what} ran with configs {list(configs)} and args {list(args)}, but the spec now gives "
            f"{list(run.configs)} and {list(run.args)}: delete {what} to rerun the run as specified, "
            "or give the changed entry a new name."
        )


def what_ran(record: Record) -> dict[str, Any]:
    """What a record says its run was: its configs, arguments, seed and step budget. Two records of one run name
    that differ here are two runs (`replaced_by`)."""
    return {
        "configs": list(record.configs),
        "args": list(record.args),
        "seed": record.seed,
        "max_steps": record.max_steps,
    }


def replaced_by(old: Record, new: Record, path: Path) -> str | None:
    """Why ``new`` must not replace ``old``, the record at ``path`` (None: it is the same run's, and may): a record
    made with other configs, arguments, seed or steps is another run's numbers under the committed one's name."""
    before, after = what_ran(old), what_ran(new)
    differ = [k for k in before if before[k] != after[k]]
    if not differ:
        return None
    said = "; ".join(f"{k} {before[k]!r} there, {after[k]!r} here" for k in differ)
    return (
        f"{path} is the record of {old.run_name} as it ran with other {', '.join(differ)} than the finished run "
        f"directory read now ({said}): writing it would replace that record with another run's numbers. Give the "
        "spec entry another name, point --runs_dir or --records_dir elsewhere, or delete the record to replace it."
    )


def unfinished(record: Record) -> str | None:
    """Why the record's curves do not reach its max_steps (None: they do, or it holds no val/loss or max_steps to
    tell): a run that stopped early would lend its last value to the report as a final loss. Validations are
    logged one below their step, so the first at val_check_interval - 1 and the last at the highest multiple of
    the interval up to max_steps, minus one."""
    points = record.scalars.get("val/loss") or []
    if not points or not isinstance(record.max_steps, int):
        return None
    every = int(points[0][0]) + 1
    expected, last = (record.max_steps // every) * every - 1, int(points[-1][0])
    if last >= expected:
        return None
    return (
        f"its val/loss stops at step {last} (as logged) of a run of {record.max_steps} steps, whose last validation "
        f"is logged at step {expected}: the run ended before its max_steps, and its last value is no final loss"
    )


# ----------------------------------------------------------------------------- format 1


def _relative(path: str) -> str:
    """A path under the current directory as relative to it; any other path as it is."""
    p = Path(path)
    if p.is_absolute():
        with_cwd = Path.cwd()
        if p.is_relative_to(with_cwd):
            return str(p.relative_to(with_cwd))
    return path


def _upgraded(record: dict[str, Any]) -> Record:
    """A format-1 record as format 2: the command as a user types it, no path of the machine that
    made it, its parameter counts; its commit and versions were never noted (None: unknown)."""
    configs = [_relative(c) for c in record.get("configs") or []]
    args = list(record.get("args") or [])
    name, seed = record["run_name"], record["seed"]
    run = Run(Path("?"), name.removesuffix(f"-seed{seed}"), seed, tuple(configs), tuple(args), "", "")
    hparams = kept_hparams(record.get("hparams") or {})
    return Record(
        run_name=name,
        configs=configs,
        args=args,
        seed=seed,
        command=user_command(run),
        source=record.get("source"),
        done=Done.of(record.get("done")),
        machine=record.get("machine") or (record.get("done") or {}).get("machine"),
        corpus=record.get("corpus"),
        gate=record.get("gate"),
        max_steps=record.get("max_steps"),
        hparams=hparams,
        **parameter_counts(hparams),
        gate_summary=record.get("gate_summary"),
        scalars=record.get("scalars") or {},
    )


# ----------------------------------------------------------------------------- record files


def record_path(records_dir: Path, run_name: str) -> Path:
    return records_dir / f"{run_name}.json"


def write_record(record: Record, records_dir: Path) -> Path:
    path = record_path(records_dir, record.run_name)
    write_atomic(path, record.to_json())
    return path


def read(path: Path) -> Record:
    """A record file, upgraded to the current format; :class:`RecordError` when it cannot be read."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise RecordError(f"{path} cannot be read ({err}): restore it from git, or delete it to rerun.") from err
    if not isinstance(data, dict):
        raise RecordError(f"{path} is not a run record: delete it to rerun the run.")
    try:
        _check_types(data)
        return Record.from_json(data)
    except (RecordError, KeyError, TypeError) as err:
        raise RecordError(f"{path} is not a run record this version reads ({err}): delete it to rerun.") from err


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _check_types(data: dict[str, Any]) -> None:
    """Raises TypeError naming the first field of a record file that is not of the type a record holds (an
    edited or garbled file): what the report computes with must not fail, or mean something else, later."""
    if not isinstance(data.get("run_name"), str) or not isinstance(data.get("seed"), int):
        raise TypeError("run_name must be a string and seed an integer")
    for key in ("configs", "args"):
        if not isinstance(data.get(key) or [], list) or not all(isinstance(x, str) for x in data.get(key) or []):
            raise TypeError(f"{key} must be a list of strings")
    modified = data.get("git_modified")
    if modified is not None and not (isinstance(modified, list) and all(isinstance(x, str) for x in modified)):
        raise TypeError("git_modified must be a list of paths")
    for key in ("done", "hparams", "gate_summary", "scalars"):
        if not isinstance(data.get(key) or {}, dict):
            raise TypeError(f"{key} must be an object")
    for tag, points in (data.get("scalars") or {}).items():
        if not isinstance(points, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(map(_number, p)) for p in points
        ):
            raise TypeError(f"scalars[{tag!r}] must be a list of [step, value] pairs of numbers")
        steps = [p[0] for p in points]
        if twice := sorted({step for step in steps if steps.count(step) > 1}):
            # a record holds one value per step (the last write of the run's event files): two at one step, and
            # the final loss would be whichever came last in the file
            raise TypeError(f"scalars[{tag!r}] holds two values at step {twice[-1]:g}, where a record holds one")
        if steps != sorted(steps):
            raise TypeError(f"scalars[{tag!r}] is not in the order of its steps")


def read_record(path: Path) -> dict[str, Any]:
    """A record file as plain data (:func:`read`, then as the file would hold it), for scripts."""
    return read(path).as_data()


def load_record(run: Run, records_dir: Path) -> Record | None:
    """The run's record; None when there is none. Raises :class:`RecordError` for a record that
    does not belong to this spec entry (other configs or arguments) or cannot be read."""
    path = record_path(records_dir, run.run_name)
    if not path.is_file():
        return None
    record = read(path)
    if (record.run_name, record.seed) != (run.run_name, run.seed):  # a copied or renamed file: another run's numbers
        raise RecordError(
            f"{path} is the record of {record.run_name} (seed {record.seed}), not of {run.run_name} (seed "
            f"{run.seed}): a record keeps its run's name. Restore the file (git checkout), or delete it to rerun "
            "the run."
        )
    check_ran_as_specified(run, record.configs or [], record.args or [], path)
    reason = unfinished(record)
    if reason is not None:
        raise RecordError(f"{path}: {reason}. Delete it (and the run's DONE) to rerun the run.")
    return record


# ----------------------------------------------------------------------------- migration


def migrate(records_dir: Path) -> list[Path]:
    """Rewrites every format-1 record in ``records_dir`` as format 2; returns the rewritten files."""
    changed = []
    for path in sorted(records_dir.glob("*.json")):
        raw = json.loads(path.read_text())
        if raw.get("format") == FORMAT:
            continue
        write_atomic(path, read(path).to_json())
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
