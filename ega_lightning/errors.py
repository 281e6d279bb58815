"""The one exception type for a user's mistake, and the machine's refusals: `ega` says each in one paragraph."""

from __future__ import annotations

import argparse
import errno
import os
import sys
import traceback
from typing import NoReturn

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


def print_user_error(command: str, err: BaseException) -> None:
    """``ega <command>: error: <message>`` on stderr; the traceback too when debugging."""
    if debugging():
        traceback.print_exception(err)
    message = str(err).strip() or type(err).__name__
    print(f"ega {command}: error: {message}", file=sys.stderr)


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


def exit_refused(command: str, err: OSError, outcome: str = "") -> NoReturn:
    """The machine's refusal (disk full, read-only, no permission) in one paragraph; exit MACHINE_REFUSED."""
    print_user_error(command, UserError(f"{describe_refusal(err)} {outcome}".strip()))
    raise SystemExit(MACHINE_REFUSED) from None
