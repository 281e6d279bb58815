"""ega-lightning: Energy-Gated Attention in a PyTorch Lightning pipeline."""

from ega_lightning.data import CharDataModule, CharTokenizer
from ega_lightning.module import CharLM

__all__ = ["CharDataModule", "CharLM", "CharTokenizer"]
__version__ = "0.1.0"
