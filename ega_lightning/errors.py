"""The one exception type for a user's mistake: `ega` prints its message as one paragraph, no traceback."""

from __future__ import annotations

import os
import sys
import traceback

DEBUG_ENV = "EGA_DEBUG"


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
