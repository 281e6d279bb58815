"""Character-level tokenizer: one id per character of a fixed vocabulary."""

from __future__ import annotations

import torch


class CharTokenizer:
    """Maps each character of `vocab` to its index; `vocab` is a string of distinct characters."""

    def __init__(self, vocab: str) -> None:
        if not vocab:
            raise ValueError("The vocabulary is empty.")
        if len(set(vocab)) != len(vocab):
            raise ValueError("The vocabulary repeats characters.")
        self.vocab = vocab
        self.stoi = {ch: i for i, ch in enumerate(vocab)}
        # code point -> id; the corpora have millions of characters, so encoding is a table lookup
        self._table = torch.full((max(map(ord, vocab)) + 1,), -1, dtype=torch.long)
        self._table[[ord(ch) for ch in vocab]] = torch.arange(len(vocab))

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> torch.Tensor:
        """(len(text),) int64 ids; raises ValueError naming any character outside the vocabulary."""
        unknown = sorted(set(text) - self.stoi.keys())
        if unknown:
            raise ValueError(
                f"Text contains {len(unknown)} character(s) outside the vocabulary: "
                f"{''.join(unknown)!r}. The vocabulary is {self.vocab!r}."
            )
        if not text:
            return torch.zeros(0, dtype=torch.long)
        codepoints = torch.frombuffer(bytearray(text.encode("utf-32-le")), dtype=torch.int32).long()
        return self._table[codepoints]

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return "".join(self.vocab[i] for i in ids)
