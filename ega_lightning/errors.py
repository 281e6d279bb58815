"""The one exception type for a user's mistake, the machine's refusals, and `EXITS`: how every `ega` command ends
on an exception, one table. `paragraph`: a refusal of the shell in the words of refusals.yaml."""

from __future__ import annotations

import argparse
import errno
import functools
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol

import yaml

DEBUG_ENV = "EGA_DEBUG"
# The exit status when the machine refused a write (disk full, quota, read-only filesystem, no
# permission): sysexits' EX_IOERR, apart from 2 (the user's mistake) and 1 (a bug, or a run that failed).
MACHINE_REFUSED = 74
# The exit status when the run is being trained by another process (its directory's lock is held): sysexits'
# EX_TEMPFAIL. Not a failure and not the user's mistake: nothing to do here (a job array's other task has it).
# Every exit status of `ega` is in one table, docs/resuming.md#exit-codes.
RUN_BUSY = 75
# A run stopped by SIGTERM (preemption, a job's time limit) before its end: resume it with --ckpt_path last.
STOPPED = 143
REFUSALS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}
# Set in docker/Dockerfile's image: a refused folder is then most likely a bind mount of another owner's
# folder, and the way out is a docker flag (a named volume, or --user with that owner).
CONTAINER_ENV = "EGA_CONTAINER"


class UserError(ValueError):
    """Something the user asked for cannot be done as asked; the message says what is wrong and the way out.

    Every `ega` command prints it as ``ega <command>: error: <message>`` and exits with status 2;
    ``EGA_DEBUG=1`` (or ``--debug``) shows the traceback as well. Anything else that escapes is a bug.
    A ValueError, so that code validating its arguments can raise it where a ValueError is expected.
    """


class RunBusy(UserError):
    """Another process holds the run directory's lock: `ega fit` exits `RUN_BUSY`, not 2."""


@functools.cache
def _refusals_yaml() -> dict[str, Any]:
    return yaml.safe_load(Path(__file__).with_name("refusals.yaml").read_text(encoding="utf-8"))


def wording(name: str) -> Any:
    """An entry of refusals.yaml, the shell's refusals' wording (read once): a paragraph's template, or a table."""
    return _refusals_yaml()[name]


def paragraph(name: str, /, **values: Any) -> str:
    """The refusal ``name`` of refusals.yaml, ``values`` in its placeholders."""
    return str(wording(name)).format(**values)


class RunFailed(RuntimeError):
    """The run's own outcome, not a bug and not the user's mistake (a non-finite loss): its checkpoints are kept."""


class MachineRefused(Exception):
    """The machine refused a write (``refusal``, the OSError found behind what the command raised)."""

    def __init__(self, refusal: OSError) -> None:
        super().__init__(describe_refusal(refusal))
        self.refusal = refusal


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, as the command's own SIGINT handler saw it (Lightning turns a KeyboardInterrupt into exit status 1,
    as for a crash; under DDP the ranks agree to stop on it)."""


class Stopped(Exception):
    """Stopped before the end by SIGTERM (preemption, a job's time limit, `kill`); the message names the signal.
    Lightning itself exits 0 there, and a caller (`ega sweep`, a job script) would take the run for a finished one."""


# What becomes of the run directory the command claimed (`runs.RunClaim`), per row of EXITS
KEEP = "keep"  # as it is: the run's own outcome, another process's run, or a stop that resumes
UNDO = "undo"  # the user's mistake: what the command wrote is removed, so nothing half-written stays
KEEP_OR_UNDO = "keep_or_undo"  # a stop the command did not choose: kept where it resumes, else removed

# The line each row says on stderr; {message} is the exception's, {outcome} what became of the run directory
ERROR = "ega {command}: error: {message} {outcome}"
SAYS_INTERRUPTED = "ega {command}: interrupted (Ctrl-C). {outcome}"
SAYS_STOPPED = (
    "ega: stopped by {message} before the end; resume the run from its newest checkpoint with "
    "`--ckpt_path last` (same command and --run_name)."
)


@dataclass(frozen=True)
class Exit:
    """How a command ends on one kind of exception."""

    status: int
    says: str | None  # the line on stderr (ERROR, ...), formatted; None: nothing (the reader has gone, ...)
    run: str = KEEP  # KEEP, UNDO or KEEP_OR_UNDO


# Every exception `ega` turns into an exit status, for every command (the dispatcher's and fit/validate/test's);
# the most specific row of an exception's classes is its. Anything else that escapes is a bug (status 1 with its
# traceback), and a machine's refusal behind it is MachineRefused. docs/resuming.md#exit-codes is this table.
EXITS: dict[type[BaseException], Exit] = {
    RunFailed: Exit(1, ERROR),
    UserError: Exit(2, ERROR, UNDO),
    MachineRefused: Exit(MACHINE_REFUSED, ERROR, KEEP_OR_UNDO),
    RunBusy: Exit(RUN_BUSY, ERROR),  # nothing of the run is this command's to undo
    KeyboardInterrupt: Exit(130, None),
    Interrupted: Exit(130, SAYS_INTERRUPTED, KEEP_OR_UNDO),
    BrokenPipeError: Exit(141, None),  # `ega gates | head`: the reader has gone; say nothing more, to nobody
    Stopped: Exit(STOPPED, SAYS_STOPPED),
}


class Claim(Protocol):
    """A command's claim on its run directory, as `runs.RunClaim` is one."""

    def undo(self) -> None: ...

    def keep_or_undo(self, fit: bool) -> str: ...


def exit_of(err: BaseException) -> Exit | None:
    """The row of EXITS that ``err`` ends its command with; None: none (a bug, or a SystemExit already)."""
    return next((EXITS[kind] for kind in type(err).__mro__ if kind in EXITS), None)


def in_ega_terms(err: BaseException) -> BaseException:
    """``err``, or the machine's refusal behind an exception EXITS has no row for (a write refused deep in
    Lightning or torch arrives wrapped, or as itself)."""
    if exit_of(err) is None and isinstance(err, Exception):
        refusal = machine_refusal(err)
        if refusal is not None:
            return MachineRefused(refusal)
    return err


def end_command(command: str, err: BaseException, claim: Claim | None = None) -> None:
    """Ends ``ega <command>`` on ``err`` as its row of EXITS says: the run directory undone or kept, the line on
    stderr, the exit status. Returns (the caller re-raises) where EXITS has no row for it."""
    row = exit_of(err)
    if row is None:
        return
    outcome = ""
    if claim is not None and row.run == UNDO:
        claim.undo()
    elif claim is not None and row.run == KEEP_OR_UNDO:
        outcome = claim.keep_or_undo(command == "fit")
    if row.says is not None:
        if row.says == ERROR and debugging():
            traceback.print_exception(err)
        message = str(err).strip() or type(err).__name__
        print(row.says.format(command=command, message=message, outcome=outcome).rstrip(), file=sys.stderr)
    raise SystemExit(row.status) from None


class CommandParser(argparse.ArgumentParser):
    """The parser of an `ega` tool (``prog`` "ega <command>"): a mistake is one line, ``ega <command>: error:
    ...``, then where --help is, as `ega fit`'s, not argparse's usage before it."""

    def error(self, message: str) -> NoReturn:
        print(
            f"{self.prog}: error: {message}\nsee `{self.prog} --help` for the accepted options and values.",
            file=sys.stderr,
        )
        self.exit(2)


def debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def machine_refusal(err: BaseException) -> OSError | None:
    """The OSError of a refused write behind ``err`` (itself, or what it was raised from), else None."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in REFUSALS:
            return err
        err = err.__cause__ or err.__context__
    return None


def describe_refusal(err: OSError) -> str:
    """What the machine refused and the way out, as sentences."""
    where = f" {err.filename}" if err.filename else ""
    elsewhere = "or write elsewhere (e.g. another --runs_dir)."
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the machine refused to write{where}: {err.strerror}. Free space, {elsewhere}"
    if err.errno == errno.EROFS:
        return f"the machine refused to write{where}: {err.strerror}. Make it writable, {elsewhere}"
    refused = f"the machine refused access to{where}: {err.strerror}."
    return f"{refused} {_permission_fix(err.filename, elsewhere)}" if err.filename else f"{refused} {elsewhere}"


def _permission_fix(filename: str | bytes | os.PathLike, elsewhere: str) -> str:
    """Whose folder it is and how to write there: as this user, or, in the image, as a container is started."""
    folder = os.path.abspath(os.fsdecode(filename))
    while not os.path.lexists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)  # the folder the write was refused in: the deepest one that exists
    try:
        owner = os.stat(folder)
    except OSError:
        return f"Make it writable, {elsewhere}"
    me = os.geteuid()
    if owner.st_uid == me:
        mode = f"{owner.st_mode & 0o777:o}"
        return f"{folder} (mode {mode}) does not let its owner, uid {me}, write: chmod u+w it, {elsewhere}"
    whose = f"{folder} belongs to uid {owner.st_uid} (gid {owner.st_gid}) and ega runs as uid {me}"
    if os.environ.get(CONTAINER_ENV):
        # a bind-mounted host folder keeps its host owner, whom the image's user (uid 1000) need not be
        return (
            f"{whose}: a folder mounted from the host keeps its host owner. Mount a named volume there instead "
            f"(docker run -v ega-runs:{folder} ...), or run the container as the folder's owner "
            f"(docker run --user {owner.st_uid}:{owner.st_gid} ...)."
        )
    return f"{whose}: make it writable for uid {me} (chown or chmod), {elsewhere}"
