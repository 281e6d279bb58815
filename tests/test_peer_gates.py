"""EGA's peers against their papers' formulas, written out with an explicit (T, T) bias or product.

ALiBi (Press et al. 2022): logits - m_h (i - j). FoX (Lin et al. 2025): logits + sum_{l=j+1..i} log f_l,
f_l = sigmoid(w_h . x_l + b_h). The output gate (Qiu et al. 2025, G1): y * sigmoid(x W), headwise or
elementwise. The formula runs in float64; the layer in fp32 (tolerance 1e-5 absolute on outputs of size
~0.1-1.4, the rounding of fp32 sums over 256 keys) or under bf16 autocast (2e-2, about 4 bf16 ulps of the
output), on the reference, fused, flex (CPU: forward only) and compiled paths.

FoX's bias reaches the kernel in one of two forms, as `fused.rides_channel` says: as b_j = -C_j in the
padded query/key channel, with the kernel in fp32 under bf16 autocast (`fused.fp32_kernel`), or as the
relative (T, T) mask b_j - b_i (a frozen forget gate). Both forms are held to the formula in values and
gradients, in fp32 and under bf16 autocast, up to |C_j| ~ 590 (T = 256, forget gates at f = 0.1); the
channel in a bf16 kernel is shown to be off, which is why the rule keeps the kernel in fp32 there.
"""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from ega_lightning import CharLM
from ega_lightning.gates import build_gate, gate_class
from ega_lightning.generation import next_token_logits
from ega_lightning.model import CausalSelfAttention, flex, fused
from ega_lightning.model.flex import has_flex_attention

from .helpers import TINY_MODEL, TINY_VOCAB, attention

C, NH, T = 64, 4, 256
FP32, BF16 = 1e-5, 2e-2


# FP32's and BF16's counterparts for gradients, relative to each tensor's largest gradient (measured at
# most 5e-4 in fp32, both forms, f = 0.1 and T = 256, where the channel holds b_j up to 587; 1.8e-2 in bf16)
GRAD_FP32, GRAD_BF16 = 1e-3, 5e-2
F_01 = math.log(0.1 / 0.9)  # a forget bias b_h that drives f = sigmoid(w_h . x + b_h) to 0.1


def make_layer(
    gate: str | None, impl: str = "fused", output: str | None = None, forget_bias: float | None = None
) -> CausalSelfAttention:
    """A layer with gate weights as large as training makes them (the gates are far from constant), or,
    with `forget_bias`, FoX at the model's init of its weights (N(0, 0.02)) and that bias on every head."""
    torch.manual_seed(0)
    key = None if gate is None else build_gate(gate, C, NH)
    out = None if output is None else build_gate(output, C, NH, slot="output_gate")
    layer = attention(C, NH, key, impl, out)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if "gate" in name:
                p.normal_(0.0, 0.3)
        if forget_bias is not None:
            layer.gate.proj.weight.normal_(0.0, 0.02)
            layer.gate.proj.bias.fill_(forget_bias)
    return layer


def inputs(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, T, C, generator=torch.Generator().manual_seed(1))


def papers_bias(gate: str, layer: CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """The (B or 1, nh, T, T) term each paper adds to query i's logit for key j <= i, in float64."""
    i = torch.arange(T, dtype=torch.float64)
    if gate == "alibi":
        slopes = torch.tensor([2.0 ** (-8 * h / NH) for h in range(1, NH + 1)], dtype=torch.float64)
        return -slopes[None, :, None, None] * (i[:, None] - i[None, :])  # -m_h (i - j)
    w, b = (p.double() for p in (layer.gate.proj.weight, layer.gate.proj.bias))
    log_f = F.logsigmoid(x.double() @ w.T + b).transpose(1, 2)  # (B, nh, T): log f_l
    l = i  # noqa: E741  (the papers' index)
    upto_i = (l[None, :] <= i[:, None]).double()  # [l <= i], (i, l)
    after_j = (l[None, :] > i[:, None]).double()  # [l > j], (j, l)
    return torch.einsum("bhl,il,jl->bhij", log_f, upto_i, after_j)  # sum_{l=j+1..i} log f_l


def papers_attention(
    layer: CausalSelfAttention, x: torch.Tensor, bias: torch.Tensor | float = 0.0, factor: torch.Tensor | None = None
) -> torch.Tensor:
    """c_proj(softmax_j<=i(q_i.k_j / sqrt(hs) + bias_ij) v * factor), float64."""
    B, hs = x.shape[0], C // NH
    qkv = x.double() @ layer.c_attn.weight.double().T + layer.c_attn.bias.double()
    q, k, v = qkv.view(B, T, 3, NH, hs).permute(2, 0, 3, 1, 4)  # (B, nh, T, hs)
    logits = q @ k.transpose(-2, -1) / math.sqrt(hs) + bias
    logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = logits.softmax(-1) @ v  # (B, nh, T, hs)
    if factor is not None:
        y = y * factor
    y = y.transpose(1, 2).reshape(B, T, C)
    return y @ layer.c_proj.weight.double().T + layer.c_proj.bias.double()


def papers_factor(output: str, layer: CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """sigmoid(x W): (B, nh, T, 1) headwise, (B, nh, T, hs) elementwise, float64."""
    s = torch.sigmoid(x.double() @ layer.output_gate.proj.weight.double().T)  # (B, T, nh) or (B, T, C)
    if output == "output_headwise":
        return s.transpose(1, 2)[..., None]
    return s.view(x.shape[0], T, NH, C // NH).transpose(1, 2)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, tolerance: float) -> None:
    torch.testing.assert_close(actual.detach().double(), expected.detach(), atol=tolerance, rtol=0)


WEIGHTS = torch.linspace(-1, 1, C)  # a loss that weighs every output channel differently


def papers_fox_gradients(layer: CausalSelfAttention, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """FoX's formula (its (T, T) bias written out) in float64: the output, and the gradients of
    sum(output * WEIGHTS) with respect to x ("x") and to each parameter of the layer."""
    exact = copy.deepcopy(layer).double()
    x64 = x.detach().double().requires_grad_()
    y = papers_attention(exact, x64, papers_bias("fox", exact, x64))
    (y * WEIGHTS.double()).sum().backward()
    return y.detach(), {"x": x64.grad, **{name: p.grad for name, p in exact.named_parameters()}}


def layer_gradients(
    layer: CausalSelfAttention, x: torch.Tensor, bf16: bool
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The layer's output (fp32, or under CPU bf16 autocast) and the gradients `papers_fox_gradients` names."""
    x = x.detach().clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        y = layer(x)
    (y.float() * WEIGHTS).sum().backward()
    return y.detach(), {"x": x.grad, **{name: p.grad for name, p in layer.named_parameters()}}


def gradient_error(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per tensor, the largest difference relative to the largest expected gradient."""
    assert actual.keys() == expected.keys()
    return {k: ((actual[k].double() - expected[k]).abs().max() / expected[k].abs().max()).item() for k in expected}


def sdpa_head_sizes(monkeypatch) -> list[tuple[int, bool, torch.dtype]]:
    """Each SDPA call from here on, as (its q's head size, whether it got a mask, the dtype it returned: the
    kernel's)."""
    calls: list[tuple[int, bool, torch.dtype]] = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kwargs):
        y = sdpa(q, k, v, attn_mask=attn_mask, **kwargs)
        calls.append((q.shape[-1], attn_mask is not None, y.dtype))
        return y

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    return calls


def force_form(monkeypatch, form: str) -> None:
    """Every key bias in `form` ("channel", "bf16 channel": the channel in the kernel autocast would run, or
    "relative"), whatever the rule would choose."""
    monkeypatch.setattr(fused, "rides_channel", lambda gate, x, fp32_kernel=True: form != "relative")
    if form == "bf16 channel":
        monkeypatch.setattr(fused, "fp32_kernel", lambda gate, x, allowed=True: False)


# ----------------------------------------------------------------------------- key biases


@pytest.mark.parametrize("gate", ["alibi", "fox"])
@pytest.mark.parametrize("impl", ["reference", "fused"])
def test_key_bias_is_the_papers_formula_in_fp32(gate, impl):
    layer, x = make_layer(gate, impl), inputs()
    bias = papers_bias(gate, layer, x)
    if gate == "fox":  # the regime the issue names: the summed forget reaches far past exp's range
        assert bias[..., -1, 0].min() < -88
    assert_close(layer(x), papers_attention(layer, x, bias), FP32)


@pytest.mark.parametrize("gate", ["alibi", "fox"])
def test_key_bias_is_the_papers_formula_under_bf16_autocast(gate):
    layer, x = make_layer(gate), inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16
    assert_close(y, papers_attention(layer, x, papers_bias(gate, layer, x)), BF16)


def test_alibi_gradients_are_the_reference_paths():
    """ALiBi's fused path (the relative mask) against the reference; FoX's are held to its formula in
    float64 below."""
    layers = make_layer("alibi", "fused"), make_layer("alibi", "reference")
    x = inputs().requires_grad_()
    grads = []
    for layer in layers:
        (layer(x) * WEIGHTS).sum().backward()
        grads.append([x.grad.clone(), *(p.grad.clone() for p in layer.parameters())])
        x.grad = None
    for a, b in zip(*grads, strict=True):  # fp32 sums over 256 keys in two orders (SDPA's, the reference's)
        torch.testing.assert_close(a, b, atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("forget_bias", [None, F_01], ids=["trained-like", "f=0.1"])
@pytest.mark.parametrize(
    ("form", "bf16"), [("channel", False), ("relative", False), ("channel", True), ("relative", True)]
)
def test_fox_is_the_papers_formula_in_both_forms(form, bf16, forget_bias, monkeypatch):
    """Values and gradients (of x and of every parameter) against FoX's formula in float64, at T = 256,
    in each form where it is exact: the channel in fp32 and under bf16 autocast with its kernel in fp32
    (where the rule puts it), the relative mask in fp32 (a frozen forget gate's form) and under bf16 autocast
    (the rule's form there before the fp32 kernel). Tolerances: outputs 2 FP32 / BF16; gradients GRAD_FP32 /
    GRAD_BF16 of each tensor's largest (measured, both forget biases: outputs 9e-6 and 7e-6 in fp32, under bf16
    5.9e-3 in the channel and 6.7e-3 relative; gradients 5e-4 and 2e-4 in fp32, 9.8e-3 and 1.4e-2 under bf16)."""
    layer, x = make_layer("fox", forget_bias=forget_bias), inputs()
    expected, expected_grads = papers_fox_gradients(layer, x)
    if forget_bias is not None:  # the regime the issue names: the summed forget near 590 at T = 256
        assert -papers_bias("fox", layer, x)[..., -1, 0].min() > 580
    force_form(monkeypatch, form)
    y, grads = layer_gradients(layer, x, bf16)
    assert_close(y, expected, BF16 if bf16 else 2 * FP32)
    errors = gradient_error(grads, expected_grads)
    assert max(errors.values()) < (GRAD_BF16 if bf16 else GRAD_FP32), errors
    assert grads["gate.proj.weight"].abs().max() > 1e-4  # the forget gate does learn


@pytest.mark.parametrize("forget_bias", [None, F_01], ids=["trained-like", "f=0.1"])
def test_fox_in_bf16_needs_the_fp32_kernel(forget_bias, monkeypatch):
    """FoX's absolute bias b_j = -C_j in the padded channel of a bf16 kernel under bf16 autocast (what the
    rule keeps it from) is off by far more than the stated tolerances, in values and gradients; with the
    kernel in fp32 it is within them (test above)."""
    layer, x = make_layer("fox", forget_bias=forget_bias), inputs()
    expected, expected_grads = papers_fox_gradients(layer, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert fused.rides_channel(layer.gate, x) and fused.fp32_kernel(layer.gate, x)
    force_form(monkeypatch, "bf16 channel")
    y, grads = layer_gradients(layer, x, bf16=True)
    assert layer.gate(x).abs().max() > 64  # where bf16's spacing reaches 0.5
    assert (y.double() - expected).abs().max() > 5 * BF16
    assert max(gradient_error(grads, expected_grads).values()) > 5 * GRAD_BF16


@pytest.mark.parametrize(
    ("case", "channel"),
    [
        ("fox", True),
        ("fox under bf16 autocast", True),
        ("fox frozen", False),
        ("alibi", False),
        ("alibi under bf16 autocast", False),
        ("linear under bf16 autocast", True),
    ],
)
def test_the_rule_chooses_the_form_that_training_and_evaluation_take(case, channel, monkeypatch):
    """`fused.rides_channel` says channel (SDPA at head size hs + 1, causal, no mask; in fp32 where
    `fused.fp32_kernel` says so) or relative mask (head size hs with the (T, T) mask), and training's path and
    evaluation's take what it says."""
    layer, x = make_layer(case.split()[0]), inputs()
    if "frozen" in case:
        layer.gate.requires_grad_(False)
    calls = sdpa_head_sizes(monkeypatch)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled="autocast" in case):
        assert fused.rides_channel(layer.gate, x) == channel
        fp32 = fused.fp32_kernel(layer.gate, x)
        layer(x)
        with torch.no_grad():
            layer(x)
    hs = C // NH
    assert fp32 == (case == "fox under bf16 autocast")
    kernel = torch.float32 if fp32 or "autocast" not in case else torch.bfloat16
    assert calls == 2 * [(hs + 1, False, kernel) if channel else (hs, True, kernel)]


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16-mixed"])
def test_fox_cached_generation_follows_the_rule_and_equals_recomputation(bf16):
    """The cache holds FoX's keys with their channel in fp32, under bf16 autocast too (the kernel in fp32);
    either way the cached logits equal recomputing the window (fp32: 1e-5; bf16: 5e-2, where other shapes
    round otherwise)."""
    torch.manual_seed(0)
    model = CharLM(TINY_VOCAB, **TINY_MODEL, gate="fox").eval().model
    with torch.no_grad():
        for gate in model.gates:  # a strong forget: C_j far from 0 within the window
            gate.proj.bias.fill_(F_01)
    T, hs = TINY_MODEL["block_size"], TINY_MODEL["n_embd"] // TINY_MODEL["n_head"]
    idx = torch.randint(0, len(TINY_VOCAB), (2, T), generator=torch.Generator().manual_seed(3))
    cache, prefill = model.new_cache(), 5
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        cached = [model(idx[:, :prefill], cache)[:, -1]]  # a prefill of several positions, then one at a time
        cached += [model(idx[:, t : t + 1], cache)[:, -1] for t in range(prefill, T)]
        recomputed = [model(idx[:, : t + 1])[:, -1] for t in range(prefill - 1, T)]
    assert cache[0].k.shape[-1] == hs + 1 and cache[0].k.dtype == torch.float32
    assert cache[0].bias is None
    tolerance = 5e-2 if bf16 else 1e-5
    for step, full in zip(cached, recomputed, strict=True):
        torch.testing.assert_close(step.float(), full.float(), atol=tolerance, rtol=tolerance)


@pytest.mark.skipif(not has_flex_attention(), reason="this torch has no FlexAttention")
@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16-mixed"])
@pytest.mark.parametrize(
    ("gate", "forget_bias"), [("alibi", None), ("fox", None), ("fox", F_01)], ids=["alibi", "fox", "fox-f=0.1"]
)
def test_key_bias_on_flex_attention_follows_the_rule_and_is_the_papers_formula(gate, forget_bias, bf16, monkeypatch):
    """FlexAttention's score_mod adds b_j (as the channel would) where `fused.rides_channel` says channel,
    b_j - b_i where it says relative; measured within 9e-6 of the formula in fp32, 7e-3 under bf16."""
    layer, x = make_layer(gate, "flex", forget_bias=forget_bias), inputs()
    taken = []

    def recorded(name):
        original = getattr(flex, name)
        return lambda *args: taken.append(name) or original(*args)

    for name in ("flex_gated_attention", "flex_biased_attention"):
        monkeypatch.setattr(flex, name, recorded(name))
    with torch.no_grad(), warnings.catch_warnings(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        warnings.simplefilter("ignore")  # eager FlexAttention warns that it is not compiled
        y = layer(x)
        channel = fused.rides_channel(layer.gate, x)
    assert channel == (gate == "fox")
    assert taken == ["flex_gated_attention" if channel else "flex_biased_attention"]
    assert_close(y, papers_attention(layer, x, papers_bias(gate, layer, x)), BF16 if bf16 else FP32)


@pytest.mark.parametrize("gate", ["alibi", "fox"])
def test_identity_setting_is_plain_attention(gate):
    layer, x = make_layer(gate), inputs()
    plain = make_layer(None)
    plain.load_state_dict({k: v for k, v in layer.state_dict().items() if not k.startswith("gate.")})
    assert not torch.allclose(layer(x), plain(x), atol=1e-4)
    assert layer.gate.set_identity()
    torch.testing.assert_close(layer(x), plain(x), atol=1e-6, rtol=0)


# ----------------------------------------------------------------------------- output gates


@pytest.mark.parametrize("output", ["output_headwise", "output_elementwise"])
@pytest.mark.parametrize(
    ("gate", "impl"), [(None, "fused"), (None, "reference"), ("linear", "fused"), ("fox", "fused")]
)
def test_output_gate_is_the_papers_product(output, gate, impl):
    """Alone, and beside a key gate: EGA-1 on its padded fused path (training's and inference's), FoX."""
    layer, x = make_layer(gate, impl, output), inputs()
    factor = papers_factor(output, layer, x)
    if gate == "linear":
        with torch.no_grad():
            bias = layer.gate(x).double()[:, :, None, :]  # log g_j of EGA-1 (its own formula is tested elsewhere)
    else:
        bias = 0.0 if gate is None else papers_bias(gate, layer, x)
    expected = papers_attention(layer, x, bias, factor)
    assert_close(layer(x), expected, FP32)  # grad enabled: training's path
    with torch.no_grad():
        assert_close(layer(x), expected, FP32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert_close(layer(x), expected, BF16)


@pytest.mark.skipif(not has_flex_attention(), reason="this torch has no FlexAttention")
def test_output_gate_on_flex_attention_is_the_papers_product():
    layer, x = make_layer("linear", "flex", "output_headwise"), inputs()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = layer(x)
        bias = layer.gate(x).double()[:, :, None, :]
    assert_close(y, papers_attention(layer, x, bias, papers_factor("output_headwise", layer, x)), FP32)


@pytest.mark.slow
def test_compiled_key_bias_and_output_gate_are_the_papers_formula():
    """One compilation (tens of seconds on CPU) for both slots: FoX and the elementwise output gate."""
    layer, x = make_layer("fox", "fused", "output_elementwise"), inputs()
    expected = papers_attention(layer, x, papers_bias("fox", layer, x), papers_factor("output_elementwise", layer, x))
    compiled = torch.compile(layer)
    assert_close(compiled(x), expected, FP32)


# ----------------------------------------------------------------------------- in the model


PAPER = {"n_embd": 256, "n_head": 8}


@pytest.mark.parametrize(
    ("name", "per_layer"),
    [("alibi", 0), ("fox", 8 * (256 + 1)), ("output_headwise", 256 * 8), ("output_elementwise", 256 * 256)],
)
def test_parameter_counts_per_layer(name, per_layer):
    assert gate_class(name).params_per_layer(**PAPER) == per_layer
    slot = "output_gate" if name.startswith("output") else "gate"
    gated = CharLM(TINY_VOCAB, **TINY_MODEL, **{"gate": "none", slot: name})
    baseline = CharLM(TINY_VOCAB, **TINY_MODEL, gate="none")
    extra = sum(p.numel() for p in gated.parameters()) - sum(p.numel() for p in baseline.parameters())
    expected = gate_class(name).params_per_layer(TINY_MODEL["n_embd"], TINY_MODEL["n_head"])
    assert extra == gated.model.gate_parameter_count() == TINY_MODEL["n_layer"] * expected


def test_an_output_gate_leaves_every_other_initial_weight_as_without_it():
    """Paired seeds: the output gate draws from a generator of its own."""
    models = {}
    for gate, output in (
        ("none", "none"),
        ("none", "output_elementwise"),
        ("linear", "none"),
        ("linear", "output_headwise"),
    ):
        torch.manual_seed(3)
        models[gate, output] = dict(CharLM(TINY_VOCAB, **TINY_MODEL, gate=gate, output_gate=output).named_parameters())
    for gate in ("none", "linear"):
        plain = models[gate, "none"]
        gated = models[gate, "output_elementwise" if gate == "none" else "output_headwise"]
        assert set(gated) - set(plain) and all("output_gate" in k for k in set(gated) - set(plain))
        for k, p in plain.items():
            assert torch.equal(p, gated[k]), k


def test_output_gates_get_no_weight_decay():
    lm = CharLM(TINY_VOCAB, **TINY_MODEL, gate="fox", output_gate="output_elementwise")
    lm.trainer = type("T", (), {"max_steps": 10})()  # configure_optimizers reads only max_steps
    decayed = {id(p) for p in lm.configure_optimizers()["optimizer"].param_groups[0]["params"]}
    gates = [*lm.model.gates, *lm.model.output_gates]
    assert all(id(p) not in decayed for g in gates for p in g.parameters())
    assert id(lm.model.blocks[0].attn.c_attn.weight) in decayed


@pytest.mark.parametrize("output", ["output_headwise", "output_elementwise"])
@pytest.mark.parametrize("gate", ["none", "linear", "fox"])
def test_cached_generation_equals_recomputation_with_an_output_gate(gate, output):
    torch.manual_seed(0)
    model = CharLM(TINY_VOCAB, **TINY_MODEL, gate=gate, output_gate=output).eval().model
    idx = torch.randint(0, len(TINY_VOCAB), (2, 5))
    steps = next_token_logits(model, idx, use_cache=True)
    step = next(steps)
    with torch.no_grad():
        for _ in range(2 * TINY_MODEL["block_size"]):
            torch.testing.assert_close(step.logits, model(step.window)[:, -1], atol=1e-5, rtol=1e-5)
            idx = torch.cat([idx, step.logits.argmax(-1, keepdim=True)], dim=1)
            step = steps.send(idx)


# ----------------------------------------------------------------------------- through the real `ega`


@pytest.mark.slow
def test_fox_with_an_output_gate_trains_validates_tests_and_generates_through_ega(tmp_path, data_dir):
    from .helpers import CONFIGS, run_ega

    env = {"EGA_DATA_DIR": str(data_dir)}
    tiny = [f"--model.{k}={v}" for k, v in TINY_MODEL.items()]
    fit = run_ega(
        [
            "fit",
            *("-c", str(CONFIGS / "gate/fox.yaml"), "-c", str(CONFIGS / "output_gate/headwise.yaml")),
            *tiny,
            "--data.batch_size=4",
            "--data.max_eval_windows=8",
            "--trainer.max_steps=4",
            "--trainer.val_check_interval=2",
            "--trainer.enable_progress_bar=false",
        ],
        cwd=tmp_path,
        env=env,
    )
    assert fit.returncode == 0, fit.stderr[-3000:]
    (run_dir,) = (tmp_path / "lightning_logs").iterdir()
    assert run_dir.name.startswith("tinyshakespeare-fox+output_headwise-2x2x32-T32-seed")
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert saved["hyper_parameters"]["gate"] == "fox"
    assert saved["hyper_parameters"]["output_gate"] == "output_headwise"
    assert any(".attn.output_gate.proj.weight" in k for k in saved["state_dict"])
    for stage in ("validate", "test"):
        evaluated = run_ega(
            [stage, "--data.max_eval_windows=8", "--trainer.enable_progress_bar=false", f"--ckpt_path={ckpt}"],
            cwd=tmp_path,
            env=env,
        )
        assert evaluated.returncode == 0, evaluated.stderr[-3000:]
        assert f"{stage if stage == 'test' else 'val'}/loss" in evaluated.stdout
    generated = run_ega(
        ["generate", f"--ckpt_path={ckpt}", "--prompt=ROMEO:", "--max_new_tokens=20", "--seed=1"], cwd=tmp_path
    )
    assert generated.returncode == 0, generated.stderr[-3000:]
    assert generated.stdout.startswith("ROMEO:") and len(generated.stdout.rstrip("\n")) == len("ROMEO:") + 20
