"""The suite's own corpora: found where they are, else fetched once with the project's download, else one message."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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
    with pytest.raises(pytest.exit.Exception, match=r"set EGA_DATA_DIR to a directory holding them") as err:
        find_or_fetch_corpora([None, tmp_path / "nothing"], target=tmp_path / "data")
    assert err.value.returncode == 2
    assert "could not be downloaded" in err.value.msg and "(<urlopen error no network>)" in err.value.msg
    assert err.value.msg.count("EGA_DATA_DIR") == 1  # the download's own advice is not repeated inside it
    assert not (tmp_path / "data").exists()  # nothing half-fetched left behind


def test_a_bad_download_is_not_kept(tmp_path, data_dir, monkeypatch):
    bad = tmp_path / "bad.txt"
    shutil.copy(data_dir / "tinyshakespeare/input.txt", bad)
    with open(bad, "ab") as fh:
        fh.write(b"tampered")
    monkeypatch.setattr(corpora.urllib.request, "urlopen", lambda url, timeout: open(bad, "rb"))  # noqa: SIM115
    with pytest.raises(pytest.exit.Exception, match="not the expected file"):
        find_or_fetch_corpora([None], target=tmp_path / "data")
    assert not list((tmp_path / "data").rglob("*.txt"))  # nothing kept, whether the directory was made or not


def test_the_commands_the_tests_start_read_the_corpora_the_fixture_found(data_dir, tmp_path):
    code = "from ega_lightning.data.corpora import resolve_data_dir; print(resolve_data_dir(None))"
    seen = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert Path(seen.stdout.strip()) == data_dir.resolve()  # in another working directory, where ./data holds nothing


# A clone as a new user has it: the suite's conftest and helpers, one test that starts a command in another
# directory, one that needs no corpora (written first, so it would run first).
CLONE_TESTS = """
import subprocess, sys
from pathlib import Path

def test_a_needs_no_corpora():
    Path(__file__).with_name("ran").write_text("")

def test_b_a_command_finds_the_corpora(data_dir, tmp_path):
    code = "from ega_lightning.data.corpora import resolve_data_dir; print(resolve_data_dir(None).resolve())"
    seen = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True).stdout
    assert seen.strip() == {expected!r}
"""
# loaded with `-p offline`: every download fails as on a machine without network
OFFLINE_PLUGIN = """
import urllib.error, urllib.request

def offline(url, timeout=None):
    raise urllib.error.URLError("no network (mocked)")

urllib.request.urlopen = offline
"""


def pytest_in_a_clone(root: Path, shared_data: Path | None) -> subprocess.CompletedProcess:
    """`pytest` in ``root/clone`` (with ``root/shared/data`` beside it if given), $EGA_DATA_DIR unset, offline."""
    tests = root / "clone" / "tests"
    tests.mkdir(parents=True)
    for name in ("__init__.py", "conftest.py", "helpers.py"):
        shutil.copy(Path(__file__).with_name(name), tests / name)
    expected = str(shared_data.resolve()) if shared_data else ""
    (tests / "test_clone.py").write_text(CLONE_TESTS.format(expected=expected))
    if shared_data:
        (root / "shared").mkdir()
        (root / "shared" / "data").symlink_to(shared_data.resolve(), target_is_directory=True)
    (root / "plugins").mkdir()
    (root / "plugins" / "offline.py").write_text(OFFLINE_PLUGIN)
    project = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "EGA_DATA_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "plugins"), str(project)])
    cmd = [sys.executable, "-m", "pytest", "-p", "offline", "-q", "-p", "no:cacheprovider", "tests"]
    return subprocess.run(cmd, cwd=root / "clone", env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_clone_with_shared_beside_it_passes_without_ega_data_dir(tmp_path, data_dir):
    result = pytest_in_a_clone(tmp_path, shared_data=data_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


@pytest.mark.slow
def test_offline_without_corpora_the_run_stops_before_the_first_test_with_one_paragraph(tmp_path):
    result = pytest_in_a_clone(tmp_path, shared_data=None)
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "no tests ran" in out and not (tmp_path / "clone" / "tests" / "ran").exists()
    (line,) = [line for line in out.splitlines() if "The tests need the corpora" in line]
    assert "no network (mocked)" in line and "set EGA_DATA_DIR" in line
    assert "Traceback" not in out and "During handling" not in out
    assert not (tmp_path / "clone" / "data").exists()


def test_a_clone_without_the_spec_beside_it_skips_the_specs_test_in_one_line(tmp_path, monkeypatch):
    """tests/test_leaderboard.py compares the paper's figures with ../shared/EGA_SPEC.md: in a clone with no spec
    beside it that test skips, saying which file it looked for, instead of failing."""
    from . import test_leaderboard

    monkeypatch.setattr(test_leaderboard, "REPO", tmp_path / "clone")
    with pytest.raises(pytest.skip.Exception) as skipped:
        test_leaderboard.test_the_papers_figures_are_the_specs()
    assert str(skipped.value) == f"no {tmp_path / 'shared' / 'EGA_SPEC.md'} beside the checkout"
