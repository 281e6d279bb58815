"""The fast suite's own setting (issue 71): an xdist worker runs torch, and the commands it starts, on its share of
the cores (tests/conftest.py); with torch's default, every core in every worker, the workers' threads waited on each
other at every small op: on a busy 2-core machine, 78 of its tests took 5 times as long."""

import os

import pytest
import torch


@pytest.mark.skipif("PYTEST_XDIST_WORKER_COUNT" not in os.environ, reason="plain pytest: one process, torch's threads")
def test_an_xdist_worker_and_the_commands_it_starts_run_on_one_thread_count():
    # OMP_NUM_THREADS is what a command a test starts reads; a count the user set is theirs, else the worker's share
    threads = int(os.environ["OMP_NUM_THREADS"])
    assert torch.get_num_threads() == threads >= 1
