"""The one exception type for a user's mistake, and the machine's refusals: `ega` says each in one paragraph."""

from __future__ import annotations

import errno
import os
import sys
import traceback
from typing import NoReturn

DEBUG_ENV = "EGA_DEBUG"
# The exit status when the machine refused a write (disk full, quota, read-only filesystem, no
# permission): sysexits' EX_IOERR, apart from 2 (the user's mistake) and 1 (a bug, or a run that failed).
MACHINE_REFUSED = 74
REFUSALS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


class UserError(ValueError):
    """Something the user asked for cannot be done as asked; the message says what is wrong and the way out.

    Every `ega` command prints it as ``ega <command>: error: <message>`` and exits with status 2;
    ``EGA_DEBUG=1`` (or ``--debug``) shows the traceback as well. Anything else that escapes is a bug.
    A ValueError, so that code validating its arguments can raise it where a ValueError is expected.
    """


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
    what = "to write" if err.errno == errno.EROFS else "access to"
    return f"the machine refused {what}{where}: {err.strerror}. Make it writable, {elsewhere}"


def exit_refused(command: str, err: OSError, outcome: str = "") -> NoReturn:
    """The machine's refusal (disk full, read-only, no permission) in one paragraph; exit MACHINE_REFUSED."""
    print_user_error(command, UserError(f"{describe_refusal(err)} {outcome}".strip()))
    raise SystemExit(MACHINE_REFUSED) from None
