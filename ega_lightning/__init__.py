"""ega-lightning: Energy-Gated Attention in a PyTorch Lightning pipeline."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ega_lightning.data import CharDataModule, CharTokenizer
    from ega_lightning.module import CharLM

__all__ = ["CharDataModule", "CharLM", "CharTokenizer"]
__version__ = "0.1.0"

# Imported on first use, not with the package: `ega --help` and the tools that need neither torch nor
# Lightning start in a fraction of a second instead of importing both.
_LAZY = {
    "CharDataModule": "ega_lightning.data",
    "CharTokenizer": "ega_lightning.data",
    "CharLM": "ega_lightning.module",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ega_lightning' has no attribute {name!r}")
