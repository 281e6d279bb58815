"""The code fingerprint that records keep: one value for the same code on any CPU, another for other arithmetic."""

from __future__ import annotations

import pytest
import torch
import yaml

from ega_lightning.data.corpora import CORPORA
from ega_lightning.experiments.rundirs import run_fingerprint
from ega_lightning.fingerprint import QUANTUM, code_fingerprint, fingerprint_values, in_each_dispatch
from ega_lightning.gates import base
from ega_lightning.gates import fused as gate_arithmetic

SMALL = {"n_layer": 2, "n_head": 4, "n_embd": 32, "block_size": 32, "vocab": CORPORA["tinyshakespeare"].vocab}
# the shipped cpu size, and the configurations whose arithmetic differs most: every gate family, the
# window z-norm, dropout's masks
CPU = {**SMALL, "n_layer": 4, "n_embd": 128, "block_size": 128}
ACROSS = [
    {**CPU, "gate": "none"},
    {**CPU, "gate": "linear"},
    {**CPU, "gate": "linear", "dropout": 0.1},
    {**CPU, "gate": "linear", "gate_options": {"znorm": "window"}},
    {**CPU, "gate": "multiscale", "gate_options": {"scales": 4}},
    {**CPU, "gate": "db2"},
    {**CPU, "gate": "morlet_param"},
    {**CPU, "gate": "fox"},
    {**CPU, "gate": "alibi", "dropout": 0.1},
    {**CPU, "gate": "none", "output_gate": "output_elementwise"},
]
WORKER = """
import json, sys
import torch
from ega_lightning.fingerprint import code_fingerprint
print(json.dumps([torch.backends.cpu.get_cpu_capability(), [code_fingerprint(h) for h in json.load(sys.stdin)]]))
"""


@pytest.mark.slow  # a fresh process per kernel dispatch, each fingerprinting ten models: ~40 s
def test_one_value_under_every_kernel_dispatch_of_this_cpu():
    """Issue 49: the fp32 fingerprint gave ts-none-seed4 three values on one Intel Xeon (AVX512, avx2, default);
    the code fingerprint is one value under each, for every gate family, in a fresh process each."""
    seen = {
        f"{setting or 'best'} ({capability})": values
        for setting, capability, values in in_each_dispatch(WORKER, ACROSS)
    }
    distinct = {tuple(v) for v in seen.values()}
    assert len(distinct) == 1, seen
    assert len(set(next(iter(distinct)))) == len(ACROSS)  # and every configuration its own value


def test_the_hashed_scalars_sit_far_from_the_rounding_grid_noise():
    """The design's margin, measured: a change of kernel moves each scalar by about 1e-15, QUANTUM is 1e-10."""
    values = [v for _, v in fingerprint_values({**CPU, "gate": "linear"}) if isinstance(v, float)]
    assert all(abs(v) < 1e3 for v in values)  # losses (nats) and shares in [0, 1]: no scalar whose noise grows
    assert 1e4 * 1e-15 * max(abs(v) for v in values) <= QUANTUM


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("tau_init", {"tau_init": 1.0}),
        ("alpha_init", {"alpha_init": 1.0001}),
        ("bias off", {"bias": False}),
        ("dropout", {"dropout": 0.1}),
        ("another gate", {"gate": "multiscale"}),
        ("the window z-norm", {"gate_options": {"znorm": "window"}}),
    ],
)
def test_a_real_change_of_arithmetic_changes_it(name, change):
    linear = {**SMALL, "gate": "linear"}
    assert code_fingerprint({**linear, **change}) != code_fingerprint(linear), name


# the author's EGA-1 as published (issue 50): trains on the reference attention with dropout before the gate
AUTHOR = {**SMALL, "gate": "author", "gate_options": {"znorm": "window"}, "attention": "reference", "dropout": 0.1}


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("the attention order", {"dropout_before_gate": True}),
        ("the residual projections' init unscaled", {"scale_residual_init": False}),
        ("q, k, v without bias", {"qkv_bias": False}),
        ("the author's gate made causal", {"gate_options": {"znorm": "prefix"}}),
    ],
)
def test_each_option_of_the_authors_model_changes_it(name, change):
    assert code_fingerprint({**AUTHOR, **change}) != code_fingerprint(AUTHOR), name


def test_the_attention_order_without_dropout_is_one_formula_and_one_fingerprint():
    """Dropout first, then gate and renormalise, is the gate-first formula when nothing is dropped: the paths
    differ in rounding only (float64, ~1e-16), which the grid does not see."""
    quiet = {**AUTHOR, "dropout": 0.0}
    assert code_fingerprint({**quiet, "dropout_before_gate": True}) == code_fingerprint(quiet)


@pytest.mark.parametrize("gate", ["linear", "multiscale", "db2"])
def test_the_z_norms_eps_changes_it_and_only_for_gated_models(monkeypatch, gate):
    before = code_fingerprint({**SMALL, "gate": gate})
    none = code_fingerprint({**SMALL, "gate": "none"})
    monkeypatch.setattr(base, "ZNORM_EPS", 1e-6)  # 1e-5 in the spec
    assert code_fingerprint({**SMALL, "gate": gate}) != before
    assert code_fingerprint({**SMALL, "gate": "none"}) == none  # the baseline never runs a z-norm


def test_data_keys_do_not_enter_and_one_configuration_has_one_value():
    linear = code_fingerprint({**SMALL, "gate": "linear"})
    assert code_fingerprint({**SMALL, "gate": "linear"}) == linear
    assert code_fingerprint({**SMALL, "gate": "linear", "corpus": "ptb", "batch_size": 7, "lr": 0.5}) == linear


def test_the_autograd_graph_path_gives_the_copy_free_path_fingerprint():
    linear = code_fingerprint({**SMALL, "gate": "linear"})
    assert code_fingerprint({**SMALL, "gate": "linear", "attention_options": {"copy_free_write": False}}) == linear


def test_a_run_directory_fingerprint_is_its_hparams_fingerprint(tmp_path):
    (tmp_path / "hparams.yaml").write_text(yaml.safe_dump({**SMALL, "gate": "db2", "data_dir": "/somewhere"}))
    assert run_fingerprint(tmp_path) == code_fingerprint({**SMALL, "gate": "db2"})
    assert run_fingerprint(tmp_path / "missing") is None


@pytest.mark.parametrize("gate", ["none", "linear"])
def test_the_callers_random_stream_dtype_threads_and_casts_are_left_as_they_were(gate):
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    threads, to_float = torch.get_num_threads(), torch.Tensor.float
    code_fingerprint({**SMALL, "gate": gate})
    assert torch.equal(torch.rand(3), expected)
    assert torch.get_default_dtype() == torch.float32 and torch.get_num_threads() == threads
    assert torch.Tensor.float is to_float and torch.ones(1, dtype=torch.float64).float().dtype == torch.float32


def test_one_value_whatever_the_threads_of_the_caller():
    before = torch.get_num_threads()
    values = set()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            values.add(code_fingerprint({**CPU, "gate": "none"}))
    finally:
        torch.set_num_threads(before)
    assert len(values) == 1


@pytest.mark.parametrize("options", [{"gate": "linear"}, AUTHOR, {**AUTHOR, "gate_options": {"znorm": "prefix"}}])
def test_the_autograd_gate_arithmetic_gives_the_fused_gate_arithmetics_fingerprint(options):
    """Issue 55: the fused z-norm and sigmoid are the default because they leave the fingerprint as it was
    (scripts/fused_gate_fingerprint.py checks every shipped gate config at the cpu and paper sizes)."""
    hparams = {**SMALL, **options}
    default = code_fingerprint(hparams)
    graph = {**hparams.get("gate_options", {}), "fused_arithmetic": False}
    assert code_fingerprint({**hparams, "gate_options": graph}) == default


def test_the_fingerprint_runs_the_fused_backward(monkeypatch):
    """So the equality above says something: the fused node's backward, changed by 1e-4, changes it."""
    linear = {**SMALL, "gate": "linear"}
    before = code_fingerprint(linear)
    backward = gate_arithmetic.znorm_backward
    monkeypatch.setattr(gate_arithmetic, "znorm_backward", lambda *args: backward(*args) * 1.0001)
    assert code_fingerprint(linear) != before


def test_the_widened_casts_hold_in_the_fingerprints_thread_only_and_patch_nothing():
    """Issue 70: float64 casts through a torch function mode of the fingerprinting thread, not a replacement of
    torch.Tensor.float for the whole process: another thread's casts, during the fingerprint, are fp32 as asked."""
    import threading

    from ega_lightning.fingerprint import _float64

    to_float, seen = torch.Tensor.float, {}
    wide = torch.ones(2, dtype=torch.float64)

    def elsewhere() -> None:
        seen["other thread"] = wide.float().dtype

    with _float64():
        seen["inside"] = wide.float().dtype
        assert torch.Tensor.float is to_float
        worker = threading.Thread(target=elsewhere)
        worker.start()
        worker.join()
    assert seen == {"inside": torch.float64, "other thread": torch.float32}
    assert wide.float().dtype == torch.float32
