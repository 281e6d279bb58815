"""Run records: what a finished run keeps in git, so that a study outlives the machine it ran on.

Checkpoints and event files stay out of git (large, machine-local, and gone with the machine).
The record of a finished run, ``<records dir>/<run name>.json`` (``results/runs/`` by default),
holds everything `ega report` reads from the run: how it was run (its configs and arguments, the
fit command), its hyper-parameters and step budget, every logged point of the scalars the report
uses (read with tensorboard's own reader) and the gate summary. `ega sweep` writes it when a run
finishes and skips a run whose record matches its spec entry; `ega report` reads a finished run
from its directory (and refreshes its record), else from its record.

A record states the configs and arguments the run was started with (from its ``DONE``), and
is used only while the spec entry still gives those. A record made before the run's event files
were recorded holds its final numbers under ``metrics`` and no ``scalars``: the report counts it
and names it under each figure it is missing from. A diverged run's NaN is kept as Python's json
writes it (``NaN``): records are read back by this package, not by strict JSON parsers.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from ega_lightning.experiments.sweep import Run

FORMAT = 1
# what the report reads: its tables (final, best, gap, tau, speed) and its figures (curves)
RECORD_TAGS = (
    "val/loss",
    "val/bpc",
    "train_eval/loss",
    "gap",
    "gate/tau_mean",
    "gate/frac_above_tau",
    "gate/mean_gate",
    "train/tokens_per_sec",
)
FROM_EVENT_FILES = "event files"


class RecordError(ValueError):
    """A run that cannot be recorded, or a record that cannot be used; the message says why and what to do."""


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


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpus() -> str | None:
    # nvidia-smi, not torch.cuda: the sweep's own process must not hold a CUDA context beside its runs
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    names = [line.split(" (UUID")[0].split(": ", 1)[-1] for line in listed.stdout.splitlines() if line.strip()]
    return ", ".join(names) or None


def machine() -> str:
    """This machine, as far as a run's speed depends on it: tokens/s of runs on different machines
    do not compare. Versions are part of it: an upgrade can change the speed as much as a new CPU."""
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "?"
    gpus = _gpus()
    devices = f"{_cpu_model()} x{os.cpu_count()}" + (f" + {gpus}" if gpus else "")
    return f"{devices}; {platform.platform()}; torch {torch_version}"


def check_ran_as_specified(run: Run, configs: Sequence[str], args: Sequence[str], what: Path) -> None:
    """Raises :class:`RecordError` when ``what`` (a run directory or a record) ran with other configs
    or arguments than the spec entry now gives: its numbers are not the spec's run."""
    if (list(configs), list(args)) != (list(run.configs), list(run.args)):
        raise RecordError(
            f"{what} ran with configs {list(configs)} and args {list(args)}, but the spec now gives "
            f"{list(run.configs)} and {list(run.args)}: delete {what} to rerun the run as specified, "
            "or give the changed entry a new name."
        )


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping file's content; {} when the file is absent."""
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def record_path(records_dir: Path, run_name: str) -> Path:
    return records_dir / f"{run_name}.json"


def read_done(run: Run, run_dir: Path) -> dict[str, Any]:
    """The run directory's ``DONE``; raises :class:`RecordError` when there is none or it is not
    the spec entry's run (other configs or arguments in its command)."""
    from ega_lightning.experiments.sweep import DONE_FILE, ran_with

    try:
        done = json.loads((run_dir / DONE_FILE).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise RecordError(f"{run_dir} has no readable {DONE_FILE} ({err}): it is not a finished run.") from err
    ran = ran_with(done.get("command"))
    if ran is not None:
        check_ran_as_specified(run, *ran, run_dir)
    return done


def make_record(run: Run, run_dir: Path) -> dict[str, Any]:
    """The record of a finished run directory; raises :class:`RecordError` for any other."""
    from ega_lightning.experiments.sweep import ran_with

    done = read_done(run, run_dir)
    # what the run was started with; a DONE without a fit command (hand-made) takes the spec's word
    configs, args = ran_with(done.get("command")) or (list(run.configs), list(run.args))
    scalars = read_scalars(run_dir)
    if not scalars.get("val/loss"):
        raise RecordError(f"{run_dir} is DONE but its event files hold no val/loss: nothing to record.")
    config, hparams = read_yaml(run_dir / "config.yaml"), read_yaml(run_dir / "hparams.yaml")
    hparams.pop("_instantiator", None)  # Lightning's bookkeeping, not a hyper-parameter
    return {
        "format": FORMAT,
        "run_name": run.run_name,
        "configs": configs,
        "args": args,
        "seed": run.seed,
        "source": FROM_EVENT_FILES,
        "done": done,
        # a DONE from before machines were noted: a run directory is recorded where it ran
        "machine": done.get("machine") or machine(),
        "corpus": (config.get("data") or {}).get("corpus") or hparams.get("corpus"),
        "gate": hparams.get("gate") or (config.get("model") or {}).get("gate"),
        "max_steps": (config.get("trainer") or {}).get("max_steps"),
        "hparams": hparams,
        "gate_summary": _read_json(run_dir / "gate_summary.json"),
        "scalars": {tag: [[step, value] for step, value in scalars[tag]] for tag in RECORD_TAGS if tag in scalars},
    }


def write_atomic(path: Path, text: str) -> None:
    """A file that exists is always whole, and a failed write leaves nothing behind."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(record: dict[str, Any], records_dir: Path) -> Path:
    records_dir.mkdir(parents=True, exist_ok=True)
    path = record_path(records_dir, record["run_name"])
    write_atomic(path, json.dumps(record, indent=1) + "\n")
    return path


def record_run(run: Run, run_dir: Path, records_dir: Path) -> Path:
    return write_record(make_record(run, run_dir), records_dir)


def load_record(run: Run, records_dir: Path) -> dict[str, Any] | None:
    """The run's record; None when there is none. Raises :class:`RecordError` for a record that
    does not belong to this spec entry (other configs or arguments) or cannot be read."""
    path = record_path(records_dir, run.run_name)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise RecordError(f"{path} cannot be read ({err}): restore it from git, or delete it to rerun.") from err
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise RecordError(f"{path} is not a run record of format {FORMAT}: delete it to rerun the run.")
    check_ran_as_specified(run, record.get("configs") or [], record.get("args") or [], path)
    return record
