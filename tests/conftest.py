"""Fixtures and hooks only: where the corpora are, a model shrunk to test size, a gate sandbox. The constants and
helpers the tests share (`run_ega`, `TINY`, ...) are tests/helpers.py's: a test imports them from `.helpers`, and
tests/test_architecture.py fails when something other than a fixture or hook is defined here."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ega_lightning.data.corpora import DATA_DIR_ENV

from .helpers import REPO, SHORT, TINY, find_or_fetch_corpora, run_ega


def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker's torch threads: its share of the cores (one each under `-n auto`), for it and for the
    commands it starts. torch's default, every core in every worker, leaves the workers' threads waiting on each
    other at each small op's barrier: a tiny model's 20 training steps took 8.7 CPU seconds instead of 0.2 on a
    busy 2-core machine. A thread count the user set (OMP_NUM_THREADS) is kept.

    And Ctrl-C for the commands the tests start: a suite started as a background job (`pytest ... &`, `nohup`) has
    SIGINT ignored, its commands inherit that, and `ega` leaves an ignored signal to its caller, so the tests that
    send a fit Ctrl-C would see it train on to its end."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers is None or "OMP_NUM_THREADS" in os.environ:
        return
    import torch

    share = max(1, len(os.sched_getaffinity(0)) // int(workers))
    os.environ["OMP_NUM_THREADS"] = str(share)
    torch.set_num_threads(share)


@pytest.fixture(scope="session")
def data_dir() -> Iterator[Path]:
    """The corpora: $EGA_DATA_DIR, ../shared/data or ./data; else downloaded once into ./data (see helpers).

    Exported as $EGA_DATA_DIR for the whole session, so every command the tests start, in this process or in
    a subprocess with another working directory, reads the files found here.
    """
    found = find_or_fetch_corpora([os.environ.get(DATA_DIR_ENV), REPO.parent / "shared" / "data", Path("data")])
    before = os.environ.get(DATA_DIR_ENV)
    os.environ[DATA_DIR_ENV] = str(found.resolve())
    yield found
    if before is None:
        os.environ.pop(DATA_DIR_ENV, None)
    else:
        os.environ[DATA_DIR_ENV] = before


@pytest.fixture(scope="session", autouse=True)
def corpora_before_the_first_test(request: pytest.FixtureRequest) -> None:
    """Looks for the corpora before the first test when any collected test needs them: without them (and
    offline) the run stops at once, not test by test."""
    if any("data_dir" in getattr(item, "fixturenames", ()) for item in request.session.items):
        request.getfixturevalue("data_dir")


@pytest.fixture
def gate_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An empty working directory for a user's gate modules; the gate registry, sys.path and the
    modules imported from the directory are restored afterwards."""
    from ega_lightning.gates import registry

    monkeypatch.setattr(registry, "_GATES", dict(registry._GATES))
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", os.getcwd())])
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


@pytest.fixture
def torch_without_flex(monkeypatch: pytest.MonkeyPatch) -> None:
    """This torch as torch 2.4 shows it to the project: no FlexAttention, and asking for it fails as there."""
    from ega_lightning.model import flex

    def no_flex(device_type: str):
        raise ValueError("model.attention=flex needs FlexAttention (torch >= 2.5)")

    monkeypatch.setattr(flex, "has_flex_attention", lambda: False)
    monkeypatch.setattr(flex, "_flex", no_flex)


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory, data_dir) -> Path:
    """best.ckpt of a two-step `ega fit` at the test size with gate db2 (not the default gate, linear)."""
    cwd = tmp_path_factory.mktemp("ckpt")
    args = ["fit", *TINY, *SHORT, "--model.gate=db2", "--run_name=tiny"]
    result = run_ega(args, cwd, env={"EGA_DATA_DIR": str(data_dir)})
    assert result.returncode == 0, result.stderr[-3000:]
    return cwd / "lightning_logs/tiny/checkpoints/best.ckpt"
