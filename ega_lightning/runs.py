"""A run directory: what state it is in, who may write into it, and undoing what a failed start wrote.

One rule (`fit_state`) decides whether ``ega fit`` may start or resume a directory, and ``ega sweep`` asks it too,
so the two never contradict each other. One lock per run directory (``<run>/.lock``, ``flock``), held by ``ega fit``
on global rank 0 for its whole life; ``ega sweep`` takes it before it looks at a directory and hands the locked file
to the ``ega fit`` it starts (``EGA_RUN_LOCK_FD``), so the two never refuse each other and two processes never write
one run.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import os
import shutil
from pathlib import Path
from typing import Any, TextIO

from ega_lightning.errors import RunBusy, UserError, paragraph
from ega_lightning.io import TEMPORARY_GLOB

LOCK_FILE = ".lock"
LOCK_FD_ENV = "EGA_RUN_LOCK_FD"  # a locked file of this run inherited from `ega sweep`
LAST = Path("checkpoints") / "last.ckpt"
# what `ega fit` writes into a run directory, and the evaluations of it (`ega validate` / `ega test`, each a
# TensorBoard run of its own beside it); --overwrite deletes exactly these. Lightning's SLURM requeue checkpoint
# (hpc_ckpt_N.ckpt, which Lightning restores by itself under SLURM) is one: ega turns that requeue off, and one
# left by another tool or version must neither survive an overwrite nor let the directory pass for fresh
HPC_GLOB = "hpc_ckpt_*.ckpt"
# `ega sweep`'s mark of a run that finished as its spec gives it (experiments.spec.done_marker): a fit that trains
# the run again (--overwrite=true, or by hand with --ckpt_path last) makes it stale, and deletes it
DONE = "DONE"
# which CPU kind trained which steps: one line per fit that trained the run (`callbacks.segments`)
SEGMENTS = "segments.jsonl"
TRAINING_GLOBS = (
    DONE,
    "checkpoints",
    "events.out.tfevents.*",
    "config.yaml",
    "config_*.yaml",
    "hparams.yaml",
    "*.json",
    SEGMENTS,
    HPC_GLOB,
)
EVALUATIONS = ("validate", "test")
# an evaluation on windows of data.eval_block_size N is a run of its own, ``validate-TN`` (`run_policy.evaluation_name`)
OUTPUT_GLOBS = (*TRAINING_GLOBS, *EVALUATIONS, *(f"{name}-T*" for name in EVALUATIONS))


class FitState(enum.Enum):
    FRESH = "fresh"
    RESUME = "resume"
    STALE = "stale"


def outputs(run_dir: Path, globs: tuple[str, ...] = OUTPUT_GLOBS) -> list[Path]:
    """The files and directories a run (and its evaluations) has written into ``run_dir`` (sorted)."""
    if not run_dir.is_dir():
        return []
    return sorted({p for pattern in globs for p in run_dir.glob(pattern)})


def fit_state(run_dir: Path) -> FitState:
    """What a fit finds: a run to resume (its last.ckpt), a stale one (it wrote something, but stopped before its
    first last.ckpt: only --overwrite starts it over), or none. An evaluation alone (of an untrained model) is no run:
    it does not make the directory stale."""
    if (run_dir / LAST).is_file():
        return FitState.RESUME
    return FitState.STALE if outputs(run_dir, TRAINING_GLOBS) else FitState.FRESH


def clear_evaluation(run_dir: Path, name: str) -> None:
    """Deletes the evaluation ``name`` (validate, test) of a run: the next one replaces it."""
    if name.split("-T")[0] in EVALUATIONS and (run_dir / name).is_dir():
        shutil.rmtree(run_dir / name)


def clear_outputs(run_dir: Path) -> None:
    """Deletes what a run wrote (not the lock, not a sweep's log): the start of ``--overwrite``."""
    for path in outputs(run_dir):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def read_segments(run_dir: Path) -> list[dict[str, Any]] | None:
    """The run's segments (`callbacks.segments`) in order, each with its ``to_step``: the next one's start, the last
    one's None (the run's end). None where the run kept no file (runs before it)."""
    path = run_dir / SEGMENTS
    if not path.is_file():
        return None
    found = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for segment, following in zip(found, [*found[1:], None], strict=True):
        segment["to_step"] = None if following is None else following["from_step"]
    return found


def try_lock(run_dir: Path) -> TextIO | None:
    """The run directory's lock file, locked by this process (closing it releases the lock); None when another
    process holds it. A locked file inherited from `ega sweep` (``EGA_RUN_LOCK_FD``) for this directory is ours."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path, fh = run_dir / LOCK_FILE, None
    with contextlib.suppress(KeyError, OSError, ValueError):  # none inherited, or not this directory's
        inherited = os.fdopen(int(os.environ[LOCK_FD_ENV]), "a", closefd=False)
        fh = inherited if os.fstat(inherited.fileno()).st_ino == os.stat(path).st_ino else None
    fh = fh or open(path, "a")  # noqa: SIM115  (the caller keeps it open: that is the lock)
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # on the inherited file: succeeds, the lock is ours
    except BlockingIOError:
        fh.close()
        return None
    return fh


def default_run_name(config: Any) -> str:
    """e.g. ``tinyshakespeare-multiscale_scales2-4x4x128-T128-seed1337``, ``ptb-fox+output_headwise-...``,
    ``tinyshakespeare-alibi-posnone-...`` (a position encoding other than the learned default)
    (``config``: a command's parsed config, or the same as plain dicts, with ``model`` and ``data`` sections)."""
    m, data = config["model"], config["data"]
    gate = "_".join([m["gate"], *(f"{k}{v}" for k, v in sorted((m.get("gate_options") or {}).items()))])
    if m.get("dropout_before_gate"):  # the author's attention order: not the same model as the gate's own
        gate += "_dropoutfirst"
    if m.get("output_gate", "none") != "none":
        gate += f"+{m['output_gate']}"
    if m.get("position", "learned") != "learned":  # a learned-position run's name is the one it always had
        gate += f"-pos{m['position']}"
    shape = f"{m['n_layer']}x{m['n_head']}x{m['n_embd']}-T{m['block_size']}"
    return f"{data['corpus']}-{gate}-{shape}-seed{data['seed']}"


def check_fit_target(run_dir: Path, ckpt_path: str | None, overwrite: bool) -> None:
    """Never silently overwrite a run, never silently restart one, never mix two in one directory. With
    ``overwrite`` the caller deletes the old run (`clear_outputs`) only once every other argument is known good."""
    if overwrite:
        if ckpt_path:
            raise UserError(paragraph("overwrite_starts_over"))
        return
    state, said = fit_state(run_dir), {"run_dir": run_dir, "last": LAST, "ckpt_path": ckpt_path}
    if ckpt_path == "last":
        if state is not FitState.RESUME:
            raise UserError(paragraph("last_of_no_run" if state is FitState.FRESH else "last_of_a_stale_run", **said))
        for path in run_dir.rglob(TEMPORARY_GLOB):  # what writes a kill interrupted left (`io.atomic_file`'s)
            path.unlink(missing_ok=True)
    elif ckpt_path is not None:
        if state is not FitState.FRESH and Path(ckpt_path).resolve() != (run_dir / LAST).resolve():
            raise UserError(paragraph("checkpoint_into_another_run", **said))
    elif state is FitState.RESUME:
        raise UserError(paragraph("run_dir_holds_a_run", **said))
    elif state is FitState.STALE:
        names = ", ".join(p.name for p in outputs(run_dir)[:3])
        raise UserError(paragraph("run_dir_holds_a_stale_run", names=names, **said))


class RunClaim:
    """One command's claim on its run directory, for as long as the command runs: the lock (``ega fit`` holds it),
    and what the command wrote, removed again when it fails (:meth:`undo`). Leaving it releases the lock."""

    def __init__(self) -> None:
        self.run_dir: Path | None = None  # set by `claim`; None while the command has claimed nothing
        self._before: set[Path] = set()
        self._missing: list[Path] = []  # the run directory and those of its parents that did not exist, innermost first
        self._lock: TextIO | None = None

    def __enter__(self) -> RunClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def claim(self, run_dir: Path, fit: bool, ckpt_path: str | None = None, overwrite: bool = False) -> None:
        """Takes ``run_dir`` and what is there now, so that :meth:`undo` removes only what comes after; for ``ega
        fit`` its lock first (:class:`RunBusy` when another process holds it; then nothing is claimed), and under it
        `check_fit_target` (read without the lock, a run that another process trains would look stale)."""
        missing = [d for d in (run_dir, *run_dir.parents) if not d.exists()]  # before the lock makes the directory
        self._lock = try_lock(run_dir) if fit else None
        if fit and self._lock is None:
            raise RunBusy(paragraph("run_dir_busy", run_dir=run_dir, lock=run_dir / LOCK_FILE))
        self.run_dir, self._before, self._missing = run_dir, _snapshot(run_dir), missing
        if fit:
            check_fit_target(run_dir, ckpt_path, overwrite)

    def release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()

    def undo(self) -> None:
        """After a user error: remove what this command wrote, so nothing half-written stays behind: what appeared
        under the run directory since the claim, and the directories the claim made (``lightning_logs``) where left
        empty."""
        if self.run_dir is None:
            return
        run_dir, self.run_dir = self.run_dir, None
        if self._missing:
            shutil.rmtree(run_dir, ignore_errors=True)
            for parent in self._missing[1:]:
                try:
                    parent.rmdir()  # only while empty: never another run's directory
                except OSError:
                    break
        for path in sorted(_snapshot(run_dir) - self._before, key=lambda p: len(p.parts), reverse=True):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        self.release()

    def keep_or_undo(self, fit: bool) -> str:
        """After a stop the command did not choose (Ctrl-C, a refused write): a run that can be resumed is
        kept, else what this command wrote is removed, so that nothing blocks the next try; says which."""
        if self.run_dir is None:  # a rank other than 0 under DDP, or a stop before the claim: it wrote no run file
            return "This process wrote nothing of the run."
        if fit and fit_state(self.run_dir) is FitState.RESUME:
            return f"The run in {self.run_dir} is kept: resume it with the same command and --ckpt_path last."
        with contextlib.suppress(OSError):  # a read-only filesystem refuses the removals; it holds nothing new
            self.undo()
        return "What this command had written is removed, so the same command starts afresh."


def _snapshot(run_dir: Path) -> set[Path]:
    return set(run_dir.rglob("*")) if run_dir.is_dir() else set()
