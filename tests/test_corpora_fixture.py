"""The suite's own corpora: found where they are, else fetched once with the project's download, else one message."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ega_lightning.data import corpora

from .helpers import find_or_fetch_corpora, has_corpora


def test_found_where_they_are_without_downloading(tmp_path, data_dir, monkeypatch):
    monkeypatch.setattr(corpora, "download", lambda *a, **k: pytest.fail("downloaded although the corpora exist"))
    assert find_or_fetch_corpora([None, tmp_path / "nothing", data_dir], target=tmp_path / "data") == data_dir
    assert not (tmp_path / "data").exists()


def test_fetched_once_into_data_with_the_checksummed_download(tmp_path, data_dir, monkeypatch):
    fetched: list[str] = []

    def fake_urlopen(url: str, timeout: float):  # serves the real files: the md5 check runs as it would online
        (file,) = [f for c in corpora.CORPORA.values() for f in c.files if f.url == url]
        fetched.append(file.relpath)
        return open(data_dir / file.relpath, "rb")

    monkeypatch.setattr(corpora.urllib.request, "urlopen", fake_urlopen)
    target = tmp_path / "data"
    assert find_or_fetch_corpora([None, tmp_path / "nothing"], target=target) == target
    assert has_corpora(target)
    assert sorted(fetched) == sorted(f.relpath for c in corpora.CORPORA.values() for f in c.files)
    assert find_or_fetch_corpora([None, target], target=target) == target and len(fetched) == len(set(fetched))


def test_offline_without_corpora_stops_with_one_message(tmp_path, monkeypatch):
    def offline(url: str, timeout: float):
        raise corpora.urllib.error.URLError("no network")

    monkeypatch.setattr(corpora.urllib.request, "urlopen", offline)
    with pytest.raises(pytest.fail.Exception, match=r"EGA_DATA_DIR to a directory holding tinyshakespeare") as err:
        find_or_fetch_corpora([None, tmp_path / "nothing"], target=tmp_path / "data")
    assert "could not be downloaded" in str(err.value)
    assert not (tmp_path / "data").exists()  # nothing half-fetched left behind


def test_a_bad_download_is_not_kept(tmp_path, data_dir, monkeypatch):
    bad = tmp_path / "bad.txt"
    shutil.copy(data_dir / "tinyshakespeare/input.txt", bad)
    with open(bad, "ab") as fh:
        fh.write(b"tampered")
    monkeypatch.setattr(corpora.urllib.request, "urlopen", lambda url, timeout: open(bad, "rb"))  # noqa: SIM115
    with pytest.raises(pytest.fail.Exception, match="not the expected file"):
        find_or_fetch_corpora([None], target=tmp_path / "data")
    assert not any(Path(tmp_path / "data").rglob("*.txt")) if (tmp_path / "data").exists() else True
