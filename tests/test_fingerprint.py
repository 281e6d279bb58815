"""The code-path fingerprint that records keep: equal for equal arithmetic, different otherwise."""

from __future__ import annotations

import pytest
import yaml

from ega_lightning.data.corpora import CORPORA
from ega_lightning.experiments.rundirs import run_fingerprint
from ega_lightning.fingerprint import fingerprint
from ega_lightning.gates import base
from ega_lightning.model import fused

SMALL = {"n_layer": 2, "n_head": 4, "n_embd": 32, "block_size": 32, "vocab": CORPORA["tinyshakespeare"].vocab}


def test_equal_for_one_configuration_different_for_another():
    linear = fingerprint({**SMALL, "gate": "linear"})
    assert fingerprint({**SMALL, "gate": "linear"}) == linear
    assert fingerprint({**SMALL, "gate": "none"}) != linear
    assert fingerprint({**SMALL, "gate": "linear", "tau_init": 1.0}) != linear
    # data keys of hparams.yaml do not enter
    assert fingerprint({**SMALL, "gate": "linear", "corpus": "ptb", "batch_size": 7}) == linear


def test_a_change_of_arithmetic_changes_only_the_configurations_it_touches(monkeypatch):
    linear, none = fingerprint({**SMALL, "gate": "linear"}), fingerprint({**SMALL, "gate": "none"})
    monkeypatch.setattr(base, "ZNORM_EPS", 1e-4)  # the gate's z-norm: the baseline never runs it
    assert fingerprint({**SMALL, "gate": "linear"}) != linear
    assert fingerprint({**SMALL, "gate": "none"}) == none


def test_the_autograd_graph_path_gives_the_copy_free_path_fingerprint(monkeypatch):
    linear = fingerprint({**SMALL, "gate": "linear"})
    monkeypatch.setattr(fused, "COPY_FREE_WRITE", False)
    assert fingerprint({**SMALL, "gate": "linear"}) == linear


def test_a_run_directory_fingerprint_is_its_hparams_fingerprint(tmp_path):
    (tmp_path / "hparams.yaml").write_text(yaml.safe_dump({**SMALL, "gate": "db2", "data_dir": "/somewhere"}))
    assert run_fingerprint(tmp_path) == fingerprint({**SMALL, "gate": "db2"})
    assert run_fingerprint(tmp_path / "missing") is None


@pytest.mark.parametrize("gate", ["none", "linear"])
def test_the_fingerprint_does_not_move_the_global_random_stream(gate):
    import torch

    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    fingerprint({**SMALL, "gate": gate})
    assert torch.equal(torch.rand(3), expected)


def test_one_value_whatever_the_threads_of_the_caller():
    """Reductions split over threads round differently (the 'none' model at the cpu size gives another
    hash on 2 threads than on 1 without the pin): the fingerprint runs on one thread and restores the caller's."""
    import torch

    hparams = {**SMALL, "n_embd": 128, "n_head": 4, "block_size": 128, "gate": "none"}
    before = torch.get_num_threads()
    values = set()
    for threads in (1, 2):
        torch.set_num_threads(threads)
        values.add(fingerprint(hparams))
        assert torch.get_num_threads() == threads
    torch.set_num_threads(before)
    assert len(values) == 1
