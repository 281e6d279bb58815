"""`errors.EXITS`, the one table of how an `ega` command ends on an exception: each row's own rules, and a row's
exception reaching its exit status and its line through the real CLI."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ega_lightning import errors, runs
from ega_lightning.errors import EXITS, Exit, Interrupted, MachineRefused, RunFailed, Stopped, UserError
from ega_lightning.module import NonFiniteLossError

from .helpers import REPO, SHORT, TINY, run_ega

FAULTS = Path(__file__).resolve().parent / "faults"  # a sitecustomize that refuses writes (see its docstring)


class Claim:
    """A run directory's claim that records what the command asked of it."""

    def __init__(self, resumable: bool = False) -> None:
        self.resumable, self.asked = resumable, []

    def undo(self) -> None:
        self.asked.append("undo")

    def keep_or_undo(self, fit: bool) -> str:
        self.asked.append(f"keep_or_undo(fit={fit})")
        return "kept." if fit and self.resumable else "removed."


def ended(command: str, err: BaseException, claim: Claim | None, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as done:
        errors.end_command(command, err, claim)
    return done.value.code, capsys.readouterr().err


def test_the_most_specific_row_of_an_exception_is_its_own():
    assert errors.exit_of(runs.RunBusy("busy")).status == errors.RUN_BUSY  # a UserError, but not the user's mistake
    assert errors.exit_of(UserError("no")).status == 2
    assert errors.exit_of(NonFiniteLossError("nan")) is EXITS[RunFailed]
    assert errors.exit_of(Interrupted()) is EXITS[Interrupted]  # Ctrl-C seen by ega says so; a bare one says nothing
    assert errors.exit_of(KeyboardInterrupt()) == Exit(130, None)
    assert errors.exit_of(RuntimeError("a bug")) is None
    assert errors.exit_of(SystemExit(2)) is None  # the parser's own exit goes through as it is


def test_a_refused_write_behind_an_exception_with_no_row_is_the_machines_refusal():
    refused = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/runs/r/last.ckpt")
    try:
        try:
            raise refused
        except OSError as err:
            raise RuntimeError("saving failed") from err
    except RuntimeError as wrapped:
        ours = errors.in_ega_terms(wrapped)
    assert isinstance(ours, MachineRefused) and ours.refusal is refused
    user = UserError("a mistake")
    user.__cause__ = refused
    assert errors.in_ega_terms(user) is user  # a row of its own: the mistake, not the disk
    bug = RuntimeError("a bug")
    assert errors.in_ega_terms(bug) is bug


def test_each_row_does_to_the_run_what_it_says_and_says_its_line(capsys, monkeypatch):
    monkeypatch.delenv(errors.DEBUG_ENV, raising=False)
    claim = Claim()
    assert ended("fit", UserError("bad flag. "), claim, capsys) == (2, "ega fit: error: bad flag.\n")
    assert claim.asked == ["undo"]
    claim = Claim(resumable=True)
    assert ended("fit", Interrupted(), claim, capsys) == (130, "ega fit: interrupted (Ctrl-C). kept.\n")
    assert claim.asked == ["keep_or_undo(fit=True)"]
    claim = Claim(resumable=True)
    refused = MachineRefused(OSError(errno.EROFS, os.strerror(errno.EROFS), "/runs"))
    code, said = ended("validate", refused, claim, capsys)
    assert code == errors.MACHINE_REFUSED and claim.asked == ["keep_or_undo(fit=False)"]
    assert said == f"ega validate: error: {errors.describe_refusal(refused.refusal)} removed.\n"
    claim = Claim()
    code, said = ended("fit", Stopped("SIGTERM"), claim, capsys)
    assert code == errors.STOPPED and claim.asked == []
    assert said.startswith("ega: stopped by SIGTERM before the end; resume the run") and said.count("\n") == 1
    assert ended("gates", BrokenPipeError(), None, capsys) == (141, "")
    assert ended("report", KeyboardInterrupt(), None, capsys) == (130, "")
    assert ended("fit", RunFailed(""), Claim(), capsys) == (1, "ega fit: error: RunFailed\n")  # a message, always
    errors.end_command("fit", RuntimeError("a bug"), Claim())  # no row: returns, for the caller to re-raise


def env_for(data_dir: Path, fault: str | None = None) -> dict[str, str]:
    paths = [str(FAULTS)] if fault else []
    env = {"EGA_DATA_DIR": str(data_dir), "PYTHONPATH": os.pathsep.join([*paths, str(REPO)])}
    return {**env, "EGA_TEST_FAULT": fault} if fault else env


# (the row, extra arguments of a tiny fit, a fault to inject, what its line starts with)
FIT_ENDINGS = {
    UserError: (["--run_name=a/b"], None, "ega fit: error: --run_name 'a/b' is not a run name"),
    runs.RunBusy: ([], None, "ega fit: error: "),
    RunFailed: (
        ["--trainer.callbacks+=tests.helpers.PoisonLossAt", "--trainer.callbacks.step=0"],
        None,
        "ega fit: error: ",
    ),
    MachineRefused: ([], "EROFS:*/lightning_logs*", "ega fit: error: the machine refused to write"),
    Interrupted: (
        [
            "--trainer.callbacks+=tests.helpers.SignalAtStep",
            "--trainer.callbacks.step=1",
            "--trainer.callbacks.signum=SIGINT",
        ],
        None,
        "ega fit: interrupted (Ctrl-C). ",
    ),
    Stopped: (
        ["--trainer.callbacks+=tests.helpers.SignalAtStep", "--trainer.callbacks.step=1"],
        None,
        "ega: stopped by SIGTERM before the end",
    ),
}


def test_every_row_of_the_table_reaches_its_status_through_a_real_command():
    # the rows a fit cannot reach are the tools': test_commands's `ega gates | head` (141), and Ctrl-C in a tool
    assert set(FIT_ENDINGS) | {BrokenPipeError, KeyboardInterrupt} == set(EXITS)


@pytest.mark.slow
@pytest.mark.parametrize("row", list(FIT_ENDINGS), ids=[row.__name__ for row in FIT_ENDINGS])
def test_a_fit_ends_on_each_row_with_its_status_and_its_line(row, tmp_path, data_dir):
    extra, fault, starts = FIT_ENDINGS[row]
    held = runs.try_lock(tmp_path / "lightning_logs/r") if row is runs.RunBusy else None  # another process's run
    try:
        result = run_ega(["fit", *TINY, *SHORT, "--run_name=r", *extra], tmp_path, env=env_for(data_dir, fault))
    finally:
        if held is not None:
            held.close()
    assert result.returncode == EXITS[row].status, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    said = [line for line in result.stderr.splitlines() if line.startswith(("ega fit: ", "ega: "))]
    assert len(said) == 1 and said[0].startswith(starts), result.stderr[-3000:]


@pytest.mark.slow
def test_a_tools_mistake_is_the_same_row_as_a_fits(tmp_path):
    result = run_ega(["generate", "--ckpt_path", str(tmp_path / "missing.ckpt"), "--prompt", "a"], tmp_path)
    assert result.returncode == EXITS[UserError].status, result.stderr[-3000:]
    assert result.stderr.startswith("ega generate: error: "), result.stderr[-3000:]
