"""The corpora, the character tokenizer and the LightningDataModule, imported lazily (the vocabulary is
known before any file is read)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ega_lightning.data.corpora import CORPORA, CorpusError

if TYPE_CHECKING:
    from ega_lightning.data.datamodule import CharDataModule
    from ega_lightning.data.tokenizer import CharTokenizer

__all__ = ["CORPORA", "CharDataModule", "CharTokenizer", "CorpusError"]

# imported on first use: the corpora's table is needed without torch and Lightning (see ega_lightning/__init__.py)
_LAZY = {"CharDataModule": "ega_lightning.data.datamodule", "CharTokenizer": "ega_lightning.data.tokenizer"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ega_lightning.data' has no attribute {name!r}")
