import pytest
import torch

from ega_lightning.data import CharTokenizer
from ega_lightning.data.corpora import CORPORA


def test_round_trip_on_every_character():
    tok = CharTokenizer(CORPORA["tinyshakespeare"].vocab)
    text = "First Citizen:\nBefore we proceed any further, hear me speak. $&3!?"
    ids = tok.encode(text)
    assert ids.dtype == torch.long and ids.shape == (len(text),)
    assert tok.decode(ids) == text
    assert tok.decode(torch.arange(len(tok))) == tok.vocab


def test_ids_follow_sorted_vocabulary():
    tok = CharTokenizer.from_text("banana")
    assert tok.vocab == "abn"
    assert tok.encode("nab").tolist() == [2, 0, 1]


def test_unknown_characters_are_named():
    tok = CharTokenizer(CORPORA["ptb"].vocab)
    with pytest.raises(ValueError, match=r"outside the vocabulary: 'QZ'"):
        tok.encode("a Quiz Z")


def test_empty_text_encodes_to_empty_tensor():
    assert CharTokenizer("ab").encode("").shape == (0,)


def test_vocabulary_must_be_distinct():
    with pytest.raises(ValueError, match="repeats"):
        CharTokenizer("aba")
