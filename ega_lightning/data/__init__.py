from ega_lightning.data.corpora import CORPORA, CorpusError
from ega_lightning.data.datamodule import CharDataModule
from ega_lightning.data.tokenizer import CharTokenizer

__all__ = ["CORPORA", "CharDataModule", "CharTokenizer", "CorpusError"]
