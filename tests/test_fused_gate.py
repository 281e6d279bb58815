"""The gates' fused z-norm and log-sigmoid (`ega_lightning.gates.fused`, issue 55): the spec's formula in
float64 (values, gradcheck), the autograd path's in fp32 (forward bit for bit, backward to rounding), for
ours and the author's z-norm, causal prefix and whole window, T = 1, in a gate and in the whole model."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ega_lightning import CharLM
from ega_lightning.gates import Gate, build_gate, fused
from ega_lightning.gates.author import AUTHOR_STD_FLOOR
from ega_lightning.gates.base import ZNORM_EPS

from .helpers import TINY_MODEL, TINY_VOCAB

FLOORS = {"ours": None, "author": AUTHOR_STD_FLOOR}


def spec_z(e: torch.Tensor, mode: str, std_floor: float | None) -> torch.Tensor:
    """EGA_SPEC.md section 2's z-norm written out position by position: the statistics of e_1..e_j (prefix) or
    of the whole window, population variance; / sqrt(var + 1e-5), or the author's / max(std, floor)."""
    columns = []
    for j in range(e.shape[-1]):
        seen = e[..., : j + 1] if mode == "prefix" else e
        mean = seen.mean(-1)
        var = (seen - mean[..., None]).square().mean(-1)
        # max(std, floor) as sqrt(max(var, floor^2)): the same value, and a zero gradient at var = 0
        scale = torch.sqrt(var + ZNORM_EPS) if std_floor is None else torch.sqrt(var.clamp_min(std_floor**2))
        columns.append((e[..., j] - mean) / scale)
    return torch.stack(columns, -1)


def spec_log_gate(e: torch.Tensor, tau: torch.Tensor, alpha: torch.Tensor, mode: str, std_floor: float | None):
    """log g_j = log sigmoid(alpha_h (z_j - tau_h))."""
    return torch.log(torch.sigmoid(alpha[:, None] * (spec_z(e, mode, std_floor) - tau[:, None])))


def inputs(T: int, dtype: torch.dtype = torch.float64, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    # the energy as EGA-1 hands it: a transposed view of its projection (B, T, R)
    e = (3.0 * torch.randn(2, T, 3, generator=gen, dtype=dtype) + 1.0).transpose(1, 2).requires_grad_()
    tau = (0.5 * torch.randn(3, generator=gen, dtype=dtype)).requires_grad_()
    alpha = (1.0 + torch.rand(3, generator=gen, dtype=dtype)).requires_grad_()
    return e, tau, alpha


@pytest.mark.parametrize("T", [1, 2, 9])
@pytest.mark.parametrize("mode", ["prefix", "window"])
@pytest.mark.parametrize("floor", FLOORS)
def test_the_fused_nodes_are_the_spec_formula_in_float64(T, mode, floor):
    e, tau, alpha = inputs(T)
    std_floor = FLOORS[floor]
    log_g = fused.ZNormLogGate.apply(e, tau, alpha, mode, ZNORM_EPS, std_floor)
    spec = spec_log_gate(e, tau, alpha, mode, std_floor)
    torch.testing.assert_close(log_g, spec, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fused.ZNorm.apply(e, mode, ZNORM_EPS, std_floor), spec_z(e, mode, std_floor))
    weights = torch.randn(spec.shape, dtype=spec.dtype, generator=torch.Generator().manual_seed(3))
    grads = torch.autograd.grad((log_g * weights).sum(), [e, tau, alpha])
    spec_grads = torch.autograd.grad((spec * weights).sum(), [e, tau, alpha])
    # the author's floor makes the first position's z 0 / 1e-8 in the prefix: its gradient, 1e8 x, cancels
    # in e_1's (the running sums are centred on e_1), in autograd's graph of the code as here; float64
    # keeps ~1e-8 of it
    ill_conditioned = (floor, mode) == ("author", "prefix")
    tolerance = {"rtol": 1e-6, "atol": 1e-8} if ill_conditioned else {"rtol": 1e-10, "atol": 1e-12}
    for grad, spec_grad in zip(grads, spec_grads, strict=True):
        torch.testing.assert_close(grad, spec_grad, **tolerance)
    # and against finite differences, the hand-written backward on its own
    log_gate = lambda *t: fused.ZNormLogGate.apply(*t, mode, ZNORM_EPS, std_floor)  # noqa: E731
    assert torch.autograd.gradcheck(log_gate, (e, tau, alpha))
    assert torch.autograd.gradcheck(lambda t: fused.ZNorm.apply(t, mode, ZNORM_EPS, std_floor), (e,))


def test_a_constant_prefix_takes_the_gradient_autograd_gives_through_the_floors():
    """A prefix of equal energies has variance 0 (or rounding's negative, floored at 0): where the floors
    hold, clamp_min passes no gradient, in the fused backward as in autograd's."""
    e = torch.tensor([[[0.3, 0.3, 0.3, 1.1, -0.4, 0.3]]], dtype=torch.float64, requires_grad=True)
    tau, alpha = torch.zeros(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    for floor in FLOORS.values():
        fused_grad = torch.autograd.grad(fused.ZNormLogGate.apply(e, tau, alpha, "prefix", ZNORM_EPS, floor).sum(), e)
        plain = spec_log_gate(e, tau, alpha, "prefix", floor).sum()
        torch.testing.assert_close(fused_grad[0], torch.autograd.grad(plain, e)[0], rtol=1e-10, atol=1e-12)


def assert_fp32_rounding_apart(grad: torch.Tensor, plain: torch.Tensor, what: str = "") -> None:
    """The two gradients differ by fp32's rounding of the same sums: a few ulps of the tensor's scale, or of
    the O(1) terms summed where they cancel (an element the sums cancel down; the author's energy bias, whose
    gradient the z-norm makes 0 in exact arithmetic)."""
    assert grad.shape == plain.shape, what
    assert (grad - plain).abs().max() <= 1e-5 * max(plain.abs().max().item(), 1.0), what


def gate_results(g: Gate, x: torch.Tensor) -> tuple[torch.Tensor, list]:
    """log g of x and the gradients of a weighted sum of it (x's, then each parameter's), through the gate's
    training path (`Recomputed`)."""
    log_g = g(x)
    weights = torch.randn(log_g.shape, generator=torch.Generator().manual_seed(5))
    trained = [p for p in g.parameters() if p.requires_grad]  # a frozen tau has no gradient
    grads = torch.autograd.grad((log_g * weights).sum(), [x, *trained], allow_unused=True)
    return log_g, list(grads)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("linear", {"znorm": "prefix"}),
        ("linear", {"znorm": "window"}),
        ("linear", {"znorm": "prefix", "learn_tau": False}),
        ("multiscale", {"scales": 4}),
        ("db2", {}),
        ("author", {"scales": 1, "znorm": "prefix"}),
        ("author", {"scales": 1, "znorm": "window"}),
        ("author", {"scales": 4, "znorm": "prefix"}),
    ],
)
@pytest.mark.parametrize("T", [1, 24])
def test_a_gate_with_the_fused_arithmetic_is_the_autograd_path_in_fp32(name, options, T):
    """Forward to fp32's last bit (the same operators in the same order; the fused node runs them on a contiguous
    copy of the energy's strided view, and where the CPU's kernels take another vector path for the two layouts, as
    AVX-512's do, an element may round one ulp apart: 4 of 144 at T = 24 on an AMD EPYC with AVX-512, none on one
    with AVX2 alone); gradients to fp32 rounding."""
    gates = []
    for on in (True, False):  # the same draws: each gate built from one seed
        torch.manual_seed(0)
        C, nh = TINY_MODEL["n_embd"], TINY_MODEL["n_head"]
        gates.append(build_gate(name, C, nh, tau_init=0.3, alpha_init=1.5, fused_arithmetic=on, **options))
    assert gates[0].fused_arithmetic and not gates[1].fused_arithmetic
    x = torch.randn(3, T, TINY_MODEL["n_embd"], generator=torch.Generator().manual_seed(1), requires_grad=True)
    log_g, grads = gate_results(gates[0], x)
    plain, plain_grads = gate_results(gates[1], x)
    ulp = torch.nextafter(plain.abs(), torch.tensor(float("inf"))) - plain.abs()
    assert ((log_g - plain).abs() <= ulp).all()
    assert len(grads) == len(plain_grads)
    for grad, plain_grad in zip(grads, plain_grads, strict=True):
        assert_fp32_rounding_apart(grad, plain_grad)


@pytest.mark.parametrize(
    "options",
    [
        {"gate": "linear"},
        {"gate": "linear", "gate_options": {"znorm": "window"}},
        {"gate": "multiscale", "gate_options": {"scales": 2}},
        {"gate": "morlet"},
        {"gate": "author", "gate_options": {"scales": 1, "znorm": "prefix"}, "attention": "reference"},
    ],
    ids=["linear", "linear-window", "multiscale2", "morlet", "author-reference"],
)
def test_the_models_loss_is_the_autograd_paths_bit_for_bit_and_its_gradients_to_rounding(options):
    """The whole model on its training path (the padded channel's `GatedQKV` recomputes the fused node in
    backward): logits bit for bit, every parameter's gradient to fp32 rounding."""
    tokens = torch.Generator().manual_seed(2)
    idx = torch.randint(0, len(TINY_VOCAB), (4, TINY_MODEL["block_size"] + 1), generator=tokens)
    results = []
    for on in (True, False):  # the gate built with its arithmetic fused, then as autograd's graph
        torch.manual_seed(1)
        gate_options = {**options.get("gate_options", {}), "fused_arithmetic": on}
        lm = CharLM(TINY_VOCAB, **TINY_MODEL, **{**options, "gate_options": gate_options})
        logits = lm(idx[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten()).backward()
        results.append((logits, {n: p.grad for n, p in lm.named_parameters() if p.grad is not None}))
    (logits, grads), (plain_logits, plain_grads) = results
    assert torch.equal(logits, plain_logits)
    assert grads.keys() == plain_grads.keys() and any(".gate." in n for n in grads)
    for name, grad in grads.items():
        assert_fp32_rounding_apart(grad, plain_grads[name], name)


def test_a_gate_with_its_own_sigmoid_or_z_norm_keeps_it():
    """The fused node computes Gate's own normalise and log_gate_from_z; a subclass that replaces either
    (the author's mixture, a user's gate) is run as it wrote them."""
    from ega_lightning.gates.linear import LinearGate

    class Halved(LinearGate):
        def log_gate_from_z(self, z: torch.Tensor) -> torch.Tensor:
            return super().log_gate_from_z(z) - math.log(2.0)

    torch.manual_seed(0)
    g = Halved(TINY_MODEL["n_embd"], TINY_MODEL["n_head"])
    e = torch.randn(2, TINY_MODEL["n_head"], 8)
    expected = Gate.log_gate_from_z(g, fused.ZNorm.apply(e, "prefix", ZNORM_EPS, None)) - math.log(2.0)
    assert torch.equal(g.log_gate_from_energy(e), expected)


# --- the padded channel's arithmetic as one function (`log_gate_channel`, `model.fused.FusedGateChannel`)


@pytest.mark.parametrize("T", [1, 2, 40])
@pytest.mark.parametrize("mode", ["prefix", "window"])
@pytest.mark.parametrize("floor", FLOORS)
@pytest.mark.parametrize("log_gate_floor", [-30.0, -0.6])  # the model's, and one that clamps some keys
@pytest.mark.parametrize("learn", [(True, True), (False, True)])  # a frozen tau: no gradient asked
def test_the_channel_function_is_autograds_graph_of_the_node_clamp_and_scale_bit_for_bit(
    T, mode, floor, log_gate_floor, learn
):
    """Forward: key_channel(ZNormLogGate(e)) bit for bit; backward: that graph's gradients, bit for bit
    (the same operators in the same order), on fp32 data."""
    from ega_lightning.model.fused import key_channel

    e, tau, alpha = (t.detach().float() for t in inputs(T))
    e = (e * 2.0).contiguous()  # rows, as GatedQKV hands them
    std_floor, scale = FLOORS[floor], math.sqrt(32)
    znorm = (mode, ZNORM_EPS, std_floor)
    grad = torch.randn(e.shape, generator=torch.Generator().manual_seed(4))
    leaf = e.clone().requires_grad_()
    tau.requires_grad_(learn[0])
    alpha.requires_grad_(learn[1])
    log_g = fused.ZNormLogGate.apply(leaf, tau, alpha, mode, ZNORM_EPS, std_floor)
    plain = key_channel(log_g, 32, torch.float32, log_gate_floor).transpose(1, 2)  # (B, R, T) again
    wanted = [leaf, *(p for p in (tau, alpha) if p.requires_grad)]
    plain_grads = iter(torch.autograd.grad(plain, wanted, grad))
    channel = fused.log_gate_channel(e, tau, alpha, znorm, log_gate_floor, scale)
    assert torch.equal(channel, plain)
    if log_gate_floor == -0.6 and T > 2:
        assert (channel == -0.6 * scale).any() and (channel > -0.6 * scale).any()  # the floor did clamp some
    grads = fused.log_gate_channel(e, tau, alpha, znorm, log_gate_floor, scale, grad, (True, *learn))
    assert torch.equal(grads[0], next(plain_grads))
    for p, g in zip((tau, alpha), grads[1:], strict=True):
        assert (g is None) if not p.requires_grad else torch.equal(g, next(plain_grads))


def test_only_a_gate_whose_log_gate_is_the_fused_node_of_its_projection_says_so():
    """`Gate.fused_log_gate`: EGA-1 (any znorm, a frozen tau) yes; a gate with another energy, its own sigmoid
    or z-norm, or with the fused arithmetic off, no."""
    from ega_lightning.gates.linear import LinearGate

    class Doubled(LinearGate):
        def energy_from_projection(self, p: torch.Tensor) -> torch.Tensor:
            return 2.0 * super().energy_from_projection(p)

    class OwnSigmoid(LinearGate):
        def log_gate_from_z(self, z: torch.Tensor) -> torch.Tensor:
            return super().log_gate_from_z(z) - 1.0

    C, nh = TINY_MODEL["n_embd"], TINY_MODEL["n_head"]
    assert build_gate("linear", C, nh).fused_log_gate()
    assert build_gate("linear", C, nh, znorm="window", learn_tau=False).fused_log_gate()
    for name, options in (("multiscale", {"scales": 2}), ("author", {"scales": 1}), ("db2", {})):
        assert not build_gate(name, C, nh, **options).fused_log_gate(), name
    assert not Doubled(C, nh).fused_log_gate() and not OwnSigmoid(C, nh).fused_log_gate()
    assert not build_gate("linear", C, nh, fused_arithmetic=False).fused_log_gate()
