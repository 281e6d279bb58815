"""Fault injection for the CLI tests: makes the machine refuse writes, as a full disk or a read-only mount does.

Python imports ``sitecustomize`` at start-up from sys.path, so a test puts this directory on the
subprocess's PYTHONPATH and sets ``EGA_TEST_FAULT=<ERRNO>:<glob>`` (e.g. ``ENOSPC:*/checkpoints/*``):
from then on, creating a directory or opening a file for writing at a path matching the glob raises
OSError(ERRNO). chmod cannot do this for root, and a full disk cannot be made on demand.
"""

import builtins
import errno
import fnmatch
import io
import os

_fault = os.environ.get("EGA_TEST_FAULT")
if _fault:
    _name, _glob = _fault.split(":", 1)
    _code = getattr(errno, _name)

    def _refuse(path) -> None:
        if isinstance(path, int):
            return
        full = os.path.abspath(os.fsdecode(path))
        if fnmatch.fnmatch(full, _glob):
            raise OSError(_code, os.strerror(_code), full)

    _open, _os_open, _mkdir = builtins.open, os.open, os.mkdir

    def open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            _refuse(file)
        return _open(file, mode, *args, **kwargs)

    def os_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            _refuse(path)
        return _os_open(path, flags, *args, **kwargs)

    def mkdir(path, *args, **kwargs):
        _refuse(path)
        return _mkdir(path, *args, **kwargs)

    builtins.open = io.open = open
    os.open, os.mkdir = os_open, mkdir
