import hashlib
import io
import urllib.error
from pathlib import Path

import pytest
import torch

from ega_lightning.data import CharDataModule, CharTokenizer, CorpusError
from ega_lightning.data import corpora as corpora_mod
from ega_lightning.data.corpora import CORPORA, CorpusFile, ensure_corpus, get_corpus, read_text
from ega_lightning.data.datamodule import RandomWindows, SequentialWindows


@pytest.mark.parametrize("name", sorted(CORPORA))
def test_pinned_vocabulary_is_the_training_split_vocabulary(data_dir, name):
    dm = CharDataModule(corpus=name, data_dir=str(data_dir), block_size=64)
    dm.prepare_data()  # files present: verifies md5, downloads nothing
    dm.setup()
    train_text = dm.tokenizer.decode(dm.splits["train"])
    assert CharTokenizer.from_text(train_text).vocab == dm.vocab == CORPORA[name].vocab


def test_tinyshakespeare_split_is_90_10_and_test_is_val(data_dir):
    dm = CharDataModule(corpus="tinyshakespeare", data_dir=str(data_dir))
    dm.setup()
    full = read_text(CORPORA["tinyshakespeare"].train, data_dir)
    n_train = int(len(full) * 0.9)
    assert dm.tokenizer.decode(dm.splits["train"]) == full[:n_train]
    assert dm.tokenizer.decode(dm.splits["val"]) == full[n_train:]
    assert torch.equal(dm.splits["test"], dm.splits["val"])


def test_ptb_uses_official_files(data_dir):
    dm = CharDataModule(corpus="ptb", data_dir=str(data_dir))
    dm.setup()
    for split, file in (("train", "ptb.train.txt"), ("val", "ptb.valid.txt"), ("test", "ptb.test.txt")):
        text = (data_dir / "ptb" / file).read_text()
        assert len(dm.splits[split]) == len(text)
        assert dm.tokenizer.decode(dm.splits[split][:500]) == text[:500]


def test_training_batches_have_shapes_and_one_char_shift(data_dir):
    dm = CharDataModule(corpus="tinyshakespeare", data_dir=str(data_dir), block_size=48, batch_size=5)
    dm.setup()
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == y.shape == (5, 48) and x.dtype == y.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    train = dm.splits["train"].long()
    for row_x, row_y in zip(x, y, strict=True):  # each row is a real window of the training split
        starts = (train[: len(train) - 48] == row_x[0]).nonzero().flatten()
        assert any(torch.equal(train[s : s + 49], torch.cat([row_x, row_y[-1:]])) for s in starts.tolist())


def test_training_batches_depend_only_on_seed_and_batch_index():
    data = torch.randint(0, 50, (10_000,), dtype=torch.uint8)
    uninterrupted = iter(RandomWindows(data, 16, 4, seed=7))
    batches = [next(uninterrupted) for _ in range(6)]
    resumed = iter(RandomWindows(data, 16, 4, seed=7, start=4))  # as after a restart at batch 4
    assert torch.equal(next(resumed)[0], batches[4][0])
    assert torch.equal(next(resumed)[0], batches[5][0])
    other_seed = next(iter(RandomWindows(data, 16, 4, seed=8)))
    other_rank = next(iter(RandomWindows(data, 16, 4, seed=7, rank=1)))
    assert not torch.equal(other_seed[0], batches[0][0])
    assert not torch.equal(other_rank[0], batches[0][0])


def test_eval_windows_cover_split_once_and_shard_without_overlap():
    data = torch.arange(1000) % 200
    full = SequentialWindows(data, block_size=10, batch_size=8)
    starts = torch.cat(full.batches)
    assert starts.tolist() == list(range(0, 990, 10))  # non-overlapping, whole split, in order
    x, y = next(iter(full))
    assert torch.equal(x[0], data[:10]) and torch.equal(y[0], data[1:11])
    shards = [SequentialWindows(data, 10, 8, rank=r, world_size=3) for r in range(3)]
    sharded = sorted(torch.cat([torch.cat(s.batches) for s in shards]).tolist())
    assert sharded == starts.tolist()  # every window exactly once across ranks, no padding
    few = SequentialWindows(data, 10, 8, max_windows=5)
    assert torch.cat(few.batches).tolist() == [0, 240, 490, 740, 980]


def test_block_size_larger_than_validation_split_is_rejected(data_dir):
    dm = CharDataModule(corpus="tinyshakespeare", data_dir=str(data_dir), block_size=200_000)
    with pytest.raises(ValueError, match="block_size 200000 is larger than the val split"):
        dm.setup()


def test_unknown_corpus_lists_available():
    with pytest.raises(ValueError, match=r"Unknown corpus 'wikitext'. Available corpora: ptb, tinyshakespeare"):
        get_corpus("wikitext")


@pytest.mark.parametrize("field,value", [("batch_size", 0), ("block_size", -1)])
def test_non_positive_sizes_are_rejected(field, value):
    with pytest.raises(ValueError, match=f"data.{field} must be a positive integer"):
        CharDataModule(**{field: value})


# --- fetching: no test touches the network; urlopen is replaced -------------------------------

PAYLOAD = b"hello corpus\n"
FILE = CorpusFile("toy/toy.txt", hashlib.md5(PAYLOAD).hexdigest(), "https://example.invalid/toy.txt", len(PAYLOAD))


def _serve(monkeypatch, payload: bytes | None):
    def fake_urlopen(url, timeout=None):
        if payload is None:
            raise urllib.error.URLError("Temporary failure in name resolution")
        return io.BytesIO(payload)

    monkeypatch.setattr(corpora_mod.urllib.request, "urlopen", fake_urlopen)


def _toy_corpus():
    return corpora_mod.Corpus(name="toy", train=FILE, val=None, test=None, vocab="\n cehloprsu", val_fraction=0.5)


def _files_in(path: Path) -> list[str]:
    return sorted(p.name for p in path.rglob("*") if p.is_file())


def test_download_verifies_and_renames(tmp_path, monkeypatch):
    _serve(monkeypatch, PAYLOAD)
    ensure_corpus(_toy_corpus(), tmp_path)
    assert (tmp_path / "toy/toy.txt").read_bytes() == PAYLOAD
    assert _files_in(tmp_path) == ["toy.txt"]


def test_checksum_mismatch_raises_and_leaves_no_file(tmp_path, monkeypatch):
    _serve(monkeypatch, b"something else entirely\n")
    with pytest.raises(CorpusError) as err:
        ensure_corpus(_toy_corpus(), tmp_path)
    message = str(err.value)
    assert "expected " + FILE.md5 in message and FILE.url in message and "EGA_DATA_DIR" in message
    assert _files_in(tmp_path) == []


def test_offline_raises_naming_file_url_location_and_env(tmp_path, monkeypatch):
    _serve(monkeypatch, None)
    with pytest.raises(CorpusError) as err:
        ensure_corpus(_toy_corpus(), tmp_path)
    message = str(err.value)
    for expected in ("toy/toy.txt", FILE.url, str(tmp_path / "toy/toy.txt"), "EGA_DATA_DIR", "offline"):
        assert expected in message
    assert _files_in(tmp_path) == []


def test_empty_download_is_rejected(tmp_path, monkeypatch):
    _serve(monkeypatch, b"")
    with pytest.raises(CorpusError, match="is empty"):
        ensure_corpus(_toy_corpus(), tmp_path)
    assert _files_in(tmp_path) == []


def test_corrupt_local_file_is_reported_not_replaced(tmp_path, monkeypatch):
    _serve(monkeypatch, PAYLOAD)
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy/toy.txt").write_bytes(b"hello corp")  # truncated
    with pytest.raises(CorpusError, match="truncated, altered or a different version"):
        ensure_corpus(_toy_corpus(), tmp_path)
    assert (tmp_path / "toy/toy.txt").read_bytes() == b"hello corp"


def test_data_dir_defaults_to_env(monkeypatch, tmp_path):
    monkeypatch.setenv("EGA_DATA_DIR", str(tmp_path))
    assert corpora_mod.resolve_data_dir(None) == tmp_path
    monkeypatch.delenv("EGA_DATA_DIR")
    assert corpora_mod.resolve_data_dir(None) == Path("data")


def test_bytes_that_are_not_utf8_are_reported(tmp_path):
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare/input.txt").write_bytes(b"First Citizen:\n\xff\xfe oops\n" * 100)
    dm = CharDataModule(corpus="tinyshakespeare", data_dir=str(tmp_path), block_size=8)
    with pytest.raises(CorpusError, match=r"input.txt is not valid UTF-8 \(byte 15\).*EGA_DATA_DIR"):
        dm.setup()
    assert _files_in(tmp_path) == ["input.txt"] and dm.splits == {}  # nothing written, nothing half-set


def test_wrong_corpus_contents_are_reported_against_the_pinned_vocabulary(tmp_path):
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare/input.txt").write_text("only a few letters here\n" * 1000)
    dm = CharDataModule(corpus="tinyshakespeare", data_dir=str(tmp_path), block_size=8)
    with pytest.raises(CorpusError, match="does not have the pinned vocabulary"):
        dm.setup()
