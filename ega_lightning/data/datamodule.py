"""Character-level language-modelling data for TinyShakespeare and Penn Treebank."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset

from ega_lightning.data.corpora import CorpusError, ensure_corpus, get_corpus, read_text, resolve_data_dir
from ega_lightning.data.tokenizer import CharTokenizer
from ega_lightning.errors import UserError
from ega_lightning.seeding import derive_seed

Batch = tuple[torch.Tensor, torch.Tensor]  # inputs (B, T), targets (B, T) shifted by one character


def _windows(data: torch.Tensor, starts: torch.Tensor, block_size: int) -> Batch:
    idx = starts[:, None] + torch.arange(block_size + 1)  # (B, T+1)
    chunk = data[idx].long()
    return chunk[:, :-1], chunk[:, 1:]


class RandomWindows(IterableDataset):
    """Endless training batches of random windows; batch k depends only on (seed, rank, k).

    Iteration starts at batch `start`, so a run resumed at optimizer step s
    (start = s * accumulate_grad_batches) sees the batches an uninterrupted run would.
    """

    def __init__(
        self, data: torch.Tensor, block_size: int, batch_size: int, seed: int, start: int = 0, rank: int = 0
    ) -> None:
        self.data, self.block_size, self.batch_size = data, block_size, batch_size
        self.seed, self.start, self.rank = seed, start, rank

    def batch(self, k: int) -> Batch:
        gen = torch.Generator().manual_seed(derive_seed(self.seed, self.rank, k))
        starts = torch.randint(0, len(self.data) - self.block_size, (self.batch_size,), generator=gen)
        return _windows(self.data, starts, self.block_size)

    def __iter__(self) -> Iterator[Batch]:
        for k in count(self.start):
            yield self.batch(k)


class SequentialWindows(IterableDataset):
    """The fixed evaluation windows of a split: non-overlapping, in order, the same for every model.

    Window i covers characters [i*T, (i+1)*T] (inputs and their next-character targets).
    `max_windows` keeps that many evenly spaced windows. Batches are dealt round-robin
    to the `world_size` ranks, with no padding, so every window is counted exactly once.
    """

    def __init__(
        self,
        data: torch.Tensor,
        block_size: int,
        batch_size: int,
        max_windows: int | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        starts = torch.arange(0, len(data) - block_size, block_size)
        if max_windows is not None and max_windows < len(starts):
            starts = starts[torch.linspace(0, len(starts) - 1, max_windows).round().long()]
        self.data, self.block_size = data, block_size
        self.batches = list(torch.split(starts, batch_size))[rank::world_size]

    @property
    def num_windows(self) -> int:
        return sum(len(b) for b in self.batches)

    def __iter__(self) -> Iterator[Batch]:
        for starts in self.batches:
            yield _windows(self.data, starts, self.block_size)


# the first key of a random evaluation batch's seed (`RandomEvalBatches`): apart from the training batches' keys
RANDOM_EVAL_KEY = 2**32
SPLIT_KEYS = {"train": 0, "val": 1, "test": 2}


class RandomEvalBatches(IterableDataset):
    """The author's evaluation windows of a split: `num_batches` batches of `batch_size` random windows each.

    Batch k is drawn from (seed, split, k) alone, as the author's `get_batch` draws its starts (uniform in
    [0, len - T)): the same batches at every evaluation and for every model given the same seed. Batches are
    dealt round-robin to the `world_size` ranks, so every batch is counted exactly once.
    """

    def __init__(
        self,
        data: torch.Tensor,
        block_size: int,
        batch_size: int,
        num_batches: int,
        seed: int,
        split: str,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.data, self.block_size, self.batch_size = data, block_size, batch_size
        self.seed, self.split = seed, SPLIT_KEYS[split]
        self.indices = range(num_batches)[rank::world_size]

    @property
    def num_windows(self) -> int:
        return len(self.indices) * self.batch_size

    def __iter__(self) -> Iterator[Batch]:
        for k in self.indices:
            gen = torch.Generator().manual_seed(derive_seed(RANDOM_EVAL_KEY, self.seed, self.split, k))
            starts = torch.randint(0, len(self.data) - self.block_size, (self.batch_size,), generator=gen)
            yield _windows(self.data, starts, self.block_size)


class CharDataModule(L.LightningDataModule):
    """Character-level TinyShakespeare or PTB.

    Splits: TinyShakespeare has no official split, so the first 90% is train and the
    last 10% validation; its test split IS the validation split. PTB uses its official
    train / valid / test files, read character by character (`<unk>` stays 5 characters).
    The vocabulary is the training split's sorted characters (see `corpora.py`).

    Args:
        corpus: ``tinyshakespeare`` or ``ptb``.
        data_dir: directory holding ``<corpus>/<files>``; default ``$EGA_DATA_DIR``, else ``./data``.
            Missing files are downloaded (md5-checked) by ``prepare_data``.
        block_size: characters of context per window (linked from ``model.block_size``).
        batch_size: training windows per step and device.
        eval_batch_size: windows per validation/test batch (default: ``batch_size``).
        max_eval_windows: evaluate on this many evenly spaced windows instead of the whole split.
        random_eval_batches: the author's evaluation instead of ours: the loss is the mean over this many
            batches of ``eval_batch_size`` random windows of each split (the author: 50 batches of the training
            batch size), drawn from ``random_eval_seed`` alone, so every evaluation of every run sees the same
            windows. None (the default): the whole split (or ``max_eval_windows``), in order.
        random_eval_seed: the seed of those batches (not the run's: one checkpoint evaluated later by
            `ega validate` sees the windows its training run saw).
        seed: seed of the training windows (linked from ``seed_everything``).
        eval_block_size: characters per validation/test window, when not ``block_size`` (None, the default):
            `ega validate` / `ega test` of a model with ``position`` rope or none on windows longer than it was
            trained on (length extrapolation; a learned-position model has no embedding past its block and is
            refused). Its loss by position goes to TensorBoard (``val/loss_by_position``).
    """

    def __init__(
        self,
        corpus: str = "tinyshakespeare",
        data_dir: str | None = None,
        block_size: int = 128,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        max_eval_windows: int | None = None,
        seed: int = 1337,
        random_eval_batches: int | None = None,
        random_eval_seed: int = 0,
        eval_block_size: int | None = None,
    ) -> None:
        super().__init__()
        self.corpus = get_corpus(corpus)
        for name, value in (("block_size", block_size), ("batch_size", batch_size)):
            if value < 1:
                raise ValueError(f"data.{name} must be a positive integer, got {value}.")
        if eval_block_size is not None and eval_block_size < 1:
            raise ValueError(f"data.eval_block_size must be a positive integer or null, got {eval_block_size}.")
        if eval_batch_size is not None and eval_batch_size < 1:
            raise ValueError(f"data.eval_batch_size must be a positive integer or null, got {eval_batch_size}.")
        if max_eval_windows is not None and max_eval_windows < 1:
            raise ValueError(f"data.max_eval_windows must be a positive integer or null, got {max_eval_windows}.")
        if random_eval_batches is not None and random_eval_batches < 1:
            raise ValueError(f"data.random_eval_batches must be a positive integer or null, got {random_eval_batches}.")
        if random_eval_batches is not None and max_eval_windows is not None:
            raise ValueError(
                "data.random_eval_batches and data.max_eval_windows choose the evaluation windows two ways: "
                "set one of them (the other null)."
            )
        if not 0 <= random_eval_seed < 2**63:
            raise ValueError(f"data.random_eval_seed must be in [0, 2**63), got {random_eval_seed}.")
        self.save_hyperparameters()
        self.data_dir = data_dir
        self.block_size = block_size
        self.eval_block_size = eval_block_size
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.max_eval_windows = max_eval_windows
        self.random_eval_batches, self.random_eval_seed = random_eval_batches, random_eval_seed
        self.seed = seed
        self.tokenizer = CharTokenizer(self.corpus.vocab)
        self.splits: dict[str, torch.Tensor] = {}

    @property
    def vocab(self) -> str:
        """The character vocabulary, known without reading or downloading the corpus."""
        return self.corpus.vocab

    def prepare_data(self) -> None:
        ensure_corpus(self.corpus, resolve_data_dir(self.data_dir))

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        data_dir = resolve_data_dir(self.data_dir)
        train = read_text(self.corpus.train, data_dir)
        if self.corpus.val is None:
            n_train = int(len(train) * (1 - self.corpus.val_fraction))
            train, val = train[:n_train], train[n_train:]
        else:
            val = read_text(self.corpus.val, data_dir)
        test = val if self.corpus.test is None else read_text(self.corpus.test, data_dir)
        if CharTokenizer.from_text(train).vocab != self.vocab:
            raise CorpusError(
                f"The training split of {self.corpus.name} in {data_dir} does not have the pinned vocabulary "
                f"{self.vocab!r}: the corpus files are not the expected ones. Check them against the md5 in "
                "ega_lightning/data/corpora.py."
            )
        for split, text in (("val", val), ("test", test)):
            if len(text) < self.eval_window + 1:
                what, flag = (
                    ("block_size", "--model.block_size")
                    if self.eval_block_size is None
                    else ("data.eval_block_size", "--data.eval_block_size")
                )
                raise UserError(
                    f"{what} {self.eval_window} is larger than the {split} split of {self.corpus.name} "
                    f"({len(text):,} characters): no evaluation window fits. Use a smaller {flag}."
                )
        self.splits = {
            name: self.tokenizer.encode(text).to(torch.uint8)
            for name, text in (("train", train), ("val", val), ("test", test))
        }

    @property
    def eval_window(self) -> int:
        """Characters per validation/test window: ``eval_block_size``, else the training block."""
        return self.block_size if self.eval_block_size is None else self.eval_block_size

    def _rank_and_world(self) -> tuple[int, int]:
        if self.trainer is None:
            return 0, 1
        return self.trainer.global_rank, self.trainer.world_size

    def train_dataloader(self) -> DataLoader:
        rank, _ = self._rank_and_world()
        start = 0
        if self.trainer is not None:
            start = self.trainer.global_step * self.trainer.accumulate_grad_batches
        dataset = RandomWindows(self.splits["train"], self.block_size, self.batch_size, self.seed, start, rank)
        return DataLoader(dataset, batch_size=None)

    def eval_windows(self, split: str) -> SequentialWindows | RandomEvalBatches:
        rank, world_size = self._rank_and_world()
        if self.random_eval_batches is not None:
            return RandomEvalBatches(
                self.splits[split],
                self.eval_window,
                self.eval_batch_size,
                self.random_eval_batches,
                self.random_eval_seed,
                split,
                rank,
                world_size,
            )
        return SequentialWindows(
            self.splits[split], self.eval_window, self.eval_batch_size, self.max_eval_windows, rank, world_size
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.eval_windows("val"), batch_size=None)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.eval_windows("test"), batch_size=None)
