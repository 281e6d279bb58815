"""The one exception type for a user's mistake: `ega` prints its message as one paragraph, no traceback."""

from __future__ import annotations


class UserError(Exception):
    """Something the user asked for cannot be done as asked; the message says what is wrong and the way out.

    Every `ega` command prints it as ``ega <command>: error: <message>`` and exits with status 2;
    ``EGA_DEBUG=1`` shows the traceback as well. Anything else that escapes is a bug.
    """
