"""Files that must never be seen half-written, and the one YAML reader.

Every file another process (or a later run) reads back goes through :func:`atomic_file`: a
temporary file beside the target (same filesystem, so the rename is atomic), fsynced, then
renamed over the target. A failure at any point leaves the previous target untouched and no
temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml

TEMPORARY_SUFFIX = ".tmp"  # atomic_file's temporary files are .<name>.<random>.tmp
TEMPORARY_GLOB = f".*{TEMPORARY_SUFFIX}"  # what a kill during a write leaves behind


@contextlib.contextmanager
def atomic_file(path: Path | str, mode: str = "w") -> Iterator[IO[Any]]:
    """Yields a temporary file beside ``path`` (its name is ``fh.name``); renamed over ``path`` on success.

    ``mode`` is ``"w"`` (text) or ``"wb"``. The caller may check the written file (by ``fh.name``,
    after ``fh.flush()``) before the block ends: an exception inside the block discards it.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file writes with mode 'w' or 'wb', got {mode!r}.")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # as open() makes files: mkstemp's 0600 hides them from a group
        os.close(fd)  # reopened by name, so that fh.name is the temporary file's path
        with open(tmp, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)  # gone after the rename; removed after any failure


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask


def write_atomic(path: Path | str, data: str | bytes) -> None:
    """Writes ``data`` to ``path`` so that the file is either the old one or the whole new one."""
    with atomic_file(path, "wb" if isinstance(data, bytes) else "w") as fh:
        fh.write(data)


def read_yaml(path: Path | str, missing_ok: bool = True) -> Any:
    """A YAML file's content (``{}`` for an empty file, and for an absent one when ``missing_ok``).

    Raises ``yaml.YAMLError`` for invalid YAML and ``OSError`` when the file cannot be read:
    the caller knows what the file was for and says so.
    """
    path = Path(path)
    if missing_ok and not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text())
    return {} if data is None else data
