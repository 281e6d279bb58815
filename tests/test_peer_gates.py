"""EGA's peers against their papers' formulas, written out with an explicit (T, T) bias or product.

ALiBi (Press et al. 2022): logits - m_h (i - j). FoX (Lin et al. 2025): logits + sum_{l=j+1..i} log f_l,
f_l = sigmoid(w_h . x_l + b_h). The output gate (Qiu et al. 2025, G1): y * sigmoid(x W), headwise or
elementwise. The formula runs in float64; the layer in fp32 (tolerance 1e-5 absolute on outputs of size
~0.1, the rounding of fp32 sums over 256 keys) or under bf16 autocast (2e-2, about 4 bf16 ulps of the
output), on the reference, fused, flex (CPU: forward only) and compiled paths.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from ega_lightning import CharLM
from ega_lightning.gates import build_gate, gate_class
from ega_lightning.generation import next_token_logits
from ega_lightning.model.attention import CausalSelfAttention
from ega_lightning.model.flex import has_flex_attention

from .conftest import TINY_MODEL, TINY_VOCAB

C, NH, T = 64, 4, 256
FP32, BF16 = 1e-5, 2e-2


def make_layer(gate: str | None, impl: str = "fused", output: str | None = None) -> CausalSelfAttention:
    torch.manual_seed(0)
    key = None if gate is None else build_gate(gate, C, NH)
    out = None if output is None else build_gate(output, C, NH, slot="output_gate")
    layer = CausalSelfAttention(C, NH, 0.0, True, key, impl, output_gate=out)
    with torch.no_grad():  # gate weights as large as training makes them: the gates are far from constant
        for name, p in layer.named_parameters():
            if "gate" in name:
                p.normal_(0.0, 0.3)
    return layer


def inputs(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, T, C, generator=torch.Generator().manual_seed(1))


def papers_bias(gate: str, layer: CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """The (B or 1, nh, T, T) term each paper adds to query i's logit for key j <= i, in float64."""
    i = torch.arange(T, dtype=torch.float64)
    if gate == "alibi":
        slopes = torch.tensor([2.0 ** (-8 * h / NH) for h in range(1, NH + 1)], dtype=torch.float64)
        return -slopes[None, :, None, None] * (i[:, None] - i[None, :])  # -m_h (i - j)
    w, b = (p.detach().double() for p in (layer.gate.proj.weight, layer.gate.proj.bias))
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
    return (y @ layer.c_proj.weight.double().T + layer.c_proj.bias.double()).detach()


def papers_factor(output: str, layer: CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """sigmoid(x W): (B, nh, T, 1) headwise, (B, nh, T, hs) elementwise, float64."""
    s = torch.sigmoid(x.double() @ layer.output_gate.proj.weight.double().T)  # (B, T, nh) or (B, T, C)
    if output == "output_headwise":
        return s.transpose(1, 2)[..., None]
    return s.view(x.shape[0], T, NH, C // NH).transpose(1, 2)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, tolerance: float) -> None:
    torch.testing.assert_close(actual.double(), expected, atol=tolerance, rtol=0)


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


def test_fox_in_bf16_needs_the_relative_form():
    """The same attention with FoX's absolute bias b_j = -C_j in bf16 (what a padded key channel would
    hold) is off by more than the stated tolerance; the relative b_j - b_i is within it (test above)."""
    layer, x = make_layer("fox"), inputs()
    expected = papers_attention(layer, x, papers_bias("fox", layer, x))
    with torch.no_grad():
        b = layer.gate(x)  # (B, nh, T), fp32, up to ~ -C_T
        absolute = b.bfloat16().double()[:, :, None, :]  # per key, rounded as a bf16 channel rounds it
    assert b.abs().max() > 64  # where bf16's spacing reaches 0.5
    assert (papers_attention(layer, x, absolute) - expected).abs().max() > BF16


@pytest.mark.parametrize("gate", ["alibi", "fox"])
def test_key_bias_gradients_are_the_reference_paths(gate):
    fused, reference = make_layer(gate, "fused"), make_layer(gate, "reference")
    x = inputs().requires_grad_()
    grads = []
    for layer in (fused, reference):
        (layer(x) * torch.linspace(-1, 1, C)).sum().backward()
        grads.append([x.grad.clone(), *(p.grad.clone() for p in layer.parameters())])
        x.grad = None
    for a, b in zip(*grads, strict=True):  # fp32 sums over 256 keys in two orders (SDPA's, the reference's)
        torch.testing.assert_close(a, b, atol=5e-5, rtol=1e-4)
    if gate == "fox":
        assert fused.gate.proj.weight.grad.abs().max() > 1e-4  # the forget gate does learn


@pytest.mark.skipif(not has_flex_attention(), reason="this torch has no FlexAttention")
@pytest.mark.parametrize("gate", ["alibi", "fox"])
def test_key_bias_on_flex_attention_is_the_papers_formula(gate):
    layer, x = make_layer(gate, "flex"), inputs()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager FlexAttention warns that it is not compiled
        y = layer(x)
    assert_close(y, papers_attention(layer, x, papers_bias(gate, layer, x)), FP32)


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
    from .conftest import CONFIGS, run_ega

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
