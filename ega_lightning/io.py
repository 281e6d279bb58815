"""Files that must never be seen half-written, and the one YAML reader.

Every file another process (or a later run) reads back goes through :func:`atomic_file`: a
temporary file beside the target (same filesystem, so the rename is atomic), fsynced, then
renamed over the target. A failure at any point leaves the previous target untouched and no
temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
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


@contextlib.contextmanager
def staged_files(target: Path | str) -> Iterator[Path]:
    """Yields an empty temporary directory beside the directory ``target``; when the block ends without an
    exception, every file written into it is moved into ``target`` (made if missing), each replacing a file of its
    name there, and files of ``target`` it does not name are left alone.

    Until then ``target`` is untouched: an exception or Ctrl-C inside the block leaves it as it was, with no
    temporary directory, nor any parent directory made for it, behind. Ctrl-C during the moves (a rename each) is
    held until they are done, then raised, so that the files are all old or all new.
    """
    target = Path(target)
    made = [d for d in (target.parent, *target.parent.parents) if not d.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=TEMPORARY_SUFFIX))
    try:
        yield stage
        with _sigint_held():
            target.mkdir(exist_ok=True)
            for path in sorted(stage.iterdir()):
                os.replace(path, target / path.name)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        for d in made:  # deepest first: only those this call made, and only while empty
            with contextlib.suppress(OSError):
                d.rmdir()
        raise
    shutil.rmtree(stage, ignore_errors=True)


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT inside the block is raised as KeyboardInterrupt when it ends (only the main thread can hold it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


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
