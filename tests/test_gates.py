"""The ablation gates (EGA_SPEC.md section 3) one at a time: their formulas, filters, causality and counts.

The generic model-level checks (causality of the logits, alpha = 0 == baseline, fused ==
reference, parameter overhead) loop over every registered gate in test_model.py.
"""

import math

import numpy as np
import pytest
import pywt
import torch

from ega_lightning import CharLM
from ega_lightning.bench.harness import saved_activation_bytes
from ega_lightning.gates import Gate, build_gate, gate_class, gate_names
from ega_lightning.gates.multiscale import causal_moving_average
from ega_lightning.gates.wavelet import causal_fir

from .helpers import TINY_MODEL, TINY_VOCAB

C, NH = TINY_MODEL["n_embd"], TINY_MODEL["n_head"]

# (gate name, gate options): every new gate, with its non-default options too
CASES = [
    ("multiscale", {"scales": 1}),
    ("multiscale", {"scales": 2}),
    ("multiscale", {"scales": 4}),
    ("db2", {}),
    ("db4", {}),
    ("morlet", {}),
    ("morlet_param", {}),
    ("wavelet_packet", {"init": "db2"}),
    ("wavelet_packet", {"init": "db4", "orthonormal_penalty": 0.01}),
]
CASE_IDS = [name + "".join(f"-{v}" for v in options.values()) for name, options in CASES]
FIXED_TAPS = {
    "db2": lambda: pywt.Wavelet("db2").dec_hi,
    "db4": lambda: pywt.Wavelet("db4").dec_hi,
    "morlet": lambda: _pywt_morlet()[0],
}


def _pywt_morlet() -> tuple[np.ndarray, np.ndarray]:
    wavelet = pywt.ContinuousWavelet("morl")
    wavelet.lower_bound, wavelet.upper_bound = -4, 4
    return wavelet.wavefun(length=16)


def gate(name: str, dtype: torch.dtype = torch.float64, **options):
    torch.manual_seed(0)
    return build_gate(name, C, NH, **options).to(dtype)


def tiny_lm(name: str, **options) -> CharLM:
    torch.manual_seed(0)
    return CharLM(TINY_VOCAB, **TINY_MODEL, gate=name, gate_options=options)


def loop_moving_average(x: torch.Tensor, window: int) -> torch.Tensor:
    """xbar_j = mean of x over positions max(0, j - window + 1)..j of the last dim."""
    out = torch.empty_like(x)
    for j in range(x.shape[-1]):
        out[..., j] = x[..., max(0, j - window + 1) : j + 1].mean(-1)
    return out


def loop_fir(x: torch.Tensor, psi: torch.Tensor) -> torch.Tensor:
    """y_{c,j} = sum_{m <= j} psi_m x_{c,j-m} of x (B, T, C), written out."""
    y = torch.zeros_like(x)
    for j in range(x.shape[1]):
        for m in range(min(len(psi), j + 1)):
            y[:, j] += psi[m] * x[:, j - m]
    return y


@pytest.mark.parametrize("name,options", CASES, ids=CASE_IDS)
def test_energy_and_log_gate_shapes(name, options):
    g = gate(name, torch.float32, **options)
    x = torch.randn(3, 20, C)
    assert g.energy(x).shape == (3, NH, 20)
    log_g = g(x)
    assert log_g.shape == (3, NH, 20) and log_g.dtype == torch.float32
    assert torch.isfinite(log_g).all() and (log_g <= 0).all()  # log of a sigmoid


@pytest.mark.parametrize("name,options", CASES, ids=CASE_IDS)
def test_energy_is_causal_and_depends_on_exactly_the_receptive_field(name, options):
    g = gate(name, **options)
    T, t, rf = 40, 17, g.receptive_field
    x = torch.randn(2, T, C, dtype=torch.float64)
    changed = x.clone()
    changed[:, t] += torch.randn(2, C, dtype=torch.float64)
    diff = (g.energy(changed) - g.energy(x)).abs()  # (B, nh, T)
    assert torch.all(diff[..., :t] == 0)  # nothing before t sees x_t
    assert torch.all(diff[..., t : t + rf] > 1e-12)  # every position in the window of x_t does
    assert torch.all(diff[..., t + rf :] < 1e-12)  # none beyond it (a moving average's cumsum carries rounding)


@pytest.mark.parametrize(("scales", "rf"), [(1, 1), (2, 2), (3, 4), (4, 8)])
def test_multiscale_receptive_field_is_largest_window(scales, rf):
    assert gate("multiscale", scales=scales).receptive_field == rf


@pytest.mark.parametrize("name,options", CASES, ids=CASE_IDS)
def test_standalone_parameter_count_matches_params_per_layer(name, options):
    g = build_gate(name, C, NH, **options)
    n = sum(p.numel() for p in g.parameters())
    assert n == gate_class(name).params_per_layer(C, NH, tau_init=0.0, alpha_init=1.0, **options)


@pytest.mark.parametrize(
    "name,options,expected",
    [
        ("multiscale", {"scales": 2}, NH * (2 * C + 2)),
        ("multiscale", {"scales": 4}, NH * (4 * C + 2)),
        ("db2", {}, NH * (C + 2)),
        ("db4", {}, NH * (C + 2)),
        ("morlet", {}, NH * (C + 2)),
        ("morlet_param", {}, NH * (C + 2) + 2),
        ("wavelet_packet", {"init": "db2"}, NH * (C + 2) + 4),
        ("wavelet_packet", {"init": "db4"}, NH * (C + 2) + 8),
    ],
)
def test_params_per_layer_formulas(name, options, expected):
    assert gate_class(name).params_per_layer(C, NH, **options) == expected


def test_gate_options_reach_the_gates_from_charlm():
    model = tiny_lm("multiscale", scales=4)
    assert [g.receptive_field for g in model.model.gates] == [8] * TINY_MODEL["n_layer"]
    model = tiny_lm("wavelet_packet", init="db4", orthonormal_penalty=0.5)
    assert all(g.psi.shape == (8,) and g.orthonormal_penalty == 0.5 for g in model.model.gates)


# --- multi-scale ---------------------------------------------------------------------------------


@pytest.mark.parametrize("window", [1, 2, 4, 8, 2**70])
def test_moving_average_equals_loop(window):
    x = torch.randn(2, 3, 6, dtype=torch.float64)  # window 8 > T: every position averages what it has
    torch.testing.assert_close(causal_moving_average(x, window), loop_moving_average(x, window))


def test_moving_average_starts_with_the_available_tokens():
    x = torch.tensor([2.0, 4.0, 6.0, 8.0, 10.0])
    torch.testing.assert_close(causal_moving_average(x, 4), torch.tensor([2.0, 3.0, 4.0, 5.0, 7.0]))


@pytest.mark.parametrize("scales", [2, 3])
def test_multiscale_energy_equals_sum_of_projected_moving_averages(scales):
    g = gate("multiscale", scales=scales)
    x = torch.randn(2, 9, C, dtype=torch.float64)
    w = g.proj.weight.view(scales, NH, C)  # w[k, h] = w_{h,k}
    expected = torch.zeros(2, NH, 9, dtype=torch.float64)
    for k in range(scales):
        xbar = loop_moving_average(x.transpose(1, 2), 2**k).transpose(1, 2)  # (B, T, C), averaged along T
        expected += torch.einsum("hc,btc->bht", w[k], xbar)
    torch.testing.assert_close(g.energy(x), expected)


def test_multiscale_with_one_scale_is_the_linear_gate():
    multi = gate("multiscale", torch.float32, scales=1, tau_init=0.2, alpha_init=1.5)
    linear = gate("linear", torch.float32)
    linear.load_state_dict(multi.state_dict())  # same names: proj.weight (nh, C), tau, alpha
    x = torch.randn(2, 15, C)
    torch.testing.assert_close(multi.energy(x), linear.energy(x), atol=0, rtol=0)
    torch.testing.assert_close(multi(x), linear(x), atol=0, rtol=0)


def test_multiscale_rejects_bad_scales():
    for scales in (0, -1, 1.5):
        with pytest.raises(ValueError, match="scales must be an integer >= 1"):
            build_gate("multiscale", C, NH, scales=scales)


# --- wavelets ------------------------------------------------------------------------------------


@pytest.mark.parametrize("taps", [[0.5], [1.0, -2.0, 0.25], pywt.Wavelet("db4").dec_hi, _pywt_morlet()[0]])
def test_causal_fir_equals_loop_and_numpy_convolution(taps):
    psi = torch.tensor(taps, dtype=torch.float64)
    x = torch.randn(2, 11, 5, dtype=torch.float64)  # T = 11 < 16 taps of the Morlet: padding everywhere
    y = causal_fir(x, psi)
    torch.testing.assert_close(y, loop_fir(x, psi))
    expected = np.convolve(x[0, :, 3].numpy(), np.asarray(taps))[:11]  # PyWavelets' convention
    np.testing.assert_allclose(y[0, :, 3].numpy(), expected, atol=1e-12)


@pytest.mark.parametrize("name,options", [c for c in CASES if c[0] != "multiscale"], ids=CASE_IDS[3:])
def test_wavelet_energy_equals_weighted_squared_responses(name, options):
    g = gate(name, **options)
    x = torch.randn(2, 9, C, dtype=torch.float64)
    y = loop_fir(x, g.taps().detach())  # (B, T, C)
    expected = torch.einsum("hc,btc->bht", g.u.weight, y.square())
    torch.testing.assert_close(g.energy(x), expected)


@pytest.mark.parametrize("name", sorted(FIXED_TAPS))
def test_fixed_taps_are_pywavelets_buffers_without_gradient(name):
    g = gate(name, torch.float32)
    expected = torch.tensor(FIXED_TAPS[name](), dtype=torch.float32)
    torch.testing.assert_close(g.psi, expected, atol=0, rtol=0)
    assert g.receptive_field == len(expected)
    assert "psi" in dict(g.named_buffers()) and not g.psi.requires_grad
    assert all(p is not g.psi for p in g.parameters())
    assert sorted(n for n, _ in g.named_parameters()) == ["alpha", "tau", "u.weight"]


def test_morlet_taps_are_the_real_morlet_below_nyquist():
    psi, t = _pywt_morlet()
    np.testing.assert_allclose(t, np.linspace(-4, 4, 16))
    np.testing.assert_allclose(psi, np.exp(-(t**2) / 2) * np.cos(5 * t), atol=1e-12)
    assert 5 * (t[1] - t[0]) < math.pi  # 5 rad/unit at a spacing of 8/15: no aliasing


def test_parametric_morlet_starts_at_the_fixed_morlet():
    param, fixed = gate("morlet_param", torch.float32), gate("morlet", torch.float32)
    torch.testing.assert_close(param.taps(), fixed.psi, atol=1e-6, rtol=0)
    assert param.omega.item() == 5.0 and param.log_sigma.exp().item() == 1.0
    assert not param.t.requires_grad and all(p is not param.t for p in param.parameters())
    with torch.no_grad():
        param.omega.fill_(3.0)
        param.log_sigma.fill_(math.log(2.0))
    t = param.t
    torch.testing.assert_close(param.taps(), torch.exp(-(t**2) / 8) * torch.cos(3 * t))


@pytest.mark.parametrize(
    "name,options,learned",
    [
        ("morlet_param", {}, ("omega", "log_sigma")),
        ("wavelet_packet", {"init": "db2"}, ("psi",)),
        ("wavelet_packet", {"init": "db4"}, ("psi",)),
    ],
)
def test_learned_filter_parameters_get_gradients_from_the_lm_loss(name, options, learned):
    model = tiny_lm(name, **options).train()
    idx = torch.randint(0, len(TINY_VOCAB), (2, TINY_MODEL["block_size"] + 1))
    model.loss((idx[:, :-1], idx[:, 1:])).backward()
    names = dict(model.named_parameters())
    for layer in range(TINY_MODEL["n_layer"]):
        for param in learned:
            grad = names[f"model.blocks.{layer}.attn.gate.{param}"].grad
            assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


@pytest.mark.parametrize("init", ["db2", "db4"])
def test_wavelet_packet_starts_at_daubechies_and_penalty_is_zero_there(init):
    g = gate("wavelet_packet", torch.float32, init=init, orthonormal_penalty=1.0)
    expected = torch.tensor(pywt.Wavelet(init).dec_hi, dtype=torch.float32)
    torch.testing.assert_close(g.psi.detach(), expected, atol=0, rtol=0)
    assert g.psi.requires_grad and any(p is g.psi for p in g.parameters())
    assert g.penalty().item() < 1e-12  # Daubechies filters are orthonormal, up to fp32 rounding of the taps
    with torch.no_grad():
        g.psi.add_(0.05 * torch.randn_like(g.psi))
    penalty = g.penalty()
    assert penalty.item() > 1e-6
    penalty.backward()
    assert g.psi.grad.abs().sum() > 0  # the penalty pulls the taps back


@pytest.mark.parametrize(
    "init,taps,expected",
    [
        # (1 + 4 + 9 + 16 - 1)^2 + (1*3 + 2*4)^2
        ("db2", [1.0, 2.0, 3.0, 4.0], 29**2 + 11**2),
        # (2 - 1)^2 + the shift by 6 (h_0 h_6 = 1); the shifts by 2 and 4 are orthogonal
        ("db4", [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0], 1 + 1),
    ],
)
def test_wavelet_packet_penalty_formula_and_off_switch(init, taps, expected):
    g = gate("wavelet_packet", init=init, orthonormal_penalty=0.1)
    with torch.no_grad():
        g.psi.copy_(torch.tensor(taps))
    assert g.penalty().item() == pytest.approx(0.1 * expected)
    assert gate("wavelet_packet", init=init).penalty() is None  # default orthonormal_penalty = 0


def test_wavelet_packet_rejects_unknown_init_and_negative_penalty():
    with pytest.raises(ValueError, match=r"init must be one of db2, db4, got 'haar'"):
        build_gate("wavelet_packet", C, NH, init="haar")
    with pytest.raises(ValueError, match=r"init must be one of db2, db4, got 'sym4'"):
        gate_class("wavelet_packet").params_per_layer(C, NH, init="sym4")
    with pytest.raises(ValueError, match=r"init must be one of db2, db4"):
        tiny_lm("wavelet_packet", init="db3")
    with pytest.raises(ValueError, match="orthonormal_penalty must be >= 0"):
        build_gate("wavelet_packet", C, NH, orthonormal_penalty=-0.1)


@pytest.mark.parametrize("name", [n for n in gate_names(Gate) if n != "none"])
@pytest.mark.parametrize("mode", ["prefix", "window", "bf16-mixed"])
def test_gate_forward_recomputes_its_intermediates_with_the_plain_graphs_values_and_gradients(name, mode):
    """gate(x) keeps only the energy for backward (z-norm and sigmoid recomputed there); bit for bit
    the graph that keeps everything."""
    g = gate(name, torch.float32, tau_init=0.3, alpha_init=2.0, znorm="window" if mode == "window" else "prefix")
    x = torch.randn(3, 24, C, generator=torch.Generator().manual_seed(1), requires_grad=True)
    weights = torch.randn(3, NH, 24, generator=torch.Generator().manual_seed(2))

    def plain() -> torch.Tensor:  # Gate.forward's arithmetic as one autograd graph, fp32 as it runs
        with torch.autocast("cpu", enabled=False):
            return g.log_gate_from_energy(g.energy(x.float()))

    results = []
    for out_of in (lambda: g(x), plain):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16-mixed"):
            log_g, saved = saved_activation_bytes(out_of, g.parameters())
        grads = torch.autograd.grad((log_g * weights).sum(), [x, *g.parameters()], allow_unused=True)
        results.append((log_g, grads, saved))
    (log_g, grads, saved), (plain, plain_grads, plain_saved) = results
    assert torch.equal(log_g, plain)
    for grad, plain_grad in zip(grads, plain_grads, strict=True):
        assert (grad is None and plain_grad is None) or torch.equal(grad, plain_grad)
    assert saved < plain_saved
