"""The model against the spec: causality, the alpha = 0 identity, the explicit formula, parameter counts."""

import ast
import inspect
import math
import textwrap

import pytest
import torch

from ega_lightning import CharLM
from ega_lightning.gates import Gate, KeyBias, build_gate, causal_znorm, gate_class, gate_names
from ega_lightning.model import ATTENTION, ATTENTION_IMPLS, GPT, CausalSelfAttention, GPTConfig
from ega_lightning.model.attention import gated_attention_reference
from ega_lightning.model.config import POSITIONS
from ega_lightning.module import check_arguments

from .helpers import TINY_MODEL, TINY_VOCAB, attention

GATED = [name for name in gate_names(Gate) if name != "none"]
KEY_GATES = [name for name in gate_names(KeyBias) if name != "none"]


def tiny(gate: str, **kwargs) -> CharLM:
    torch.manual_seed(0)
    return CharLM(TINY_VOCAB, **{**TINY_MODEL, "gate": gate, **kwargs}).eval()


def spec_gated_attention(q, k, v, g):
    """EGA_SPEC.md section 2, step 4, one query at a time: softmax over j <= i, times g_j, renormalised."""
    T, hs = q.shape[-2:]
    out = torch.zeros_like(v)
    for i in range(T):
        a = torch.softmax((q[:, :, i : i + 1] @ k[:, :, : i + 1].transpose(-2, -1)) / math.sqrt(hs), dim=-1)
        a = a * g[:, :, None, : i + 1]
        a = a / a.sum(-1, keepdim=True)
        out[:, :, i] = (a @ v[:, :, : i + 1])[:, :, 0]
    return out


def spec_znorm(e, eps=1e-5):
    z = torch.zeros_like(e)
    for j in range(e.shape[-1]):
        prefix = e[..., : j + 1]
        z[..., j] = (e[..., j] - prefix.mean(-1)) / torch.sqrt(prefix.var(-1, unbiased=False) + eps)
    return z


def test_znorm_matches_prefix_statistics_and_starts_at_zero():
    e = torch.randn(3, 4, 50, dtype=torch.float64) * 5 + 100  # large offset: the cumsum must stay accurate
    z = causal_znorm(e)
    torch.testing.assert_close(z, spec_znorm(e), atol=1e-9, rtol=1e-9)
    assert torch.all(z[..., 0] == 0)
    z32 = causal_znorm(e.float())
    torch.testing.assert_close(z32, spec_znorm(e).float(), atol=1e-4, rtol=1e-4)


def test_reference_attention_equals_spec_formula():
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 3, 17, 8) for _ in range(3))
    g = torch.sigmoid(torch.randn(2, 3, 17) * 3)
    torch.testing.assert_close(
        gated_attention_reference(q, k, v, g), spec_gated_attention(q, k, v, g), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("gate", GATED)
@pytest.mark.parametrize("impl", ["fused", "reference"])
def test_attention_layer_equals_spec_formula(gate, impl):
    """The layer's output against softmax, times g, renormalise, written out one query at a time."""
    torch.manual_seed(2)
    C, nh, T = 24, 3, 19
    layer = attention(C, nh, build_gate(gate, C, nh, tau_init=0.2, alpha_init=3.0), impl)
    x = torch.randn(2, T, C)
    with torch.no_grad():
        q, k, v = layer.c_attn(x).view(2, T, 3, nh, C // nh).permute(2, 0, 3, 1, 4)
        g = layer.gate(x).exp()  # (B, nh, T), the gate evaluated on its own
        y = spec_gated_attention(q, k, v, g).transpose(1, 2).reshape(2, T, C)
        torch.testing.assert_close(layer(x), layer.c_proj(y), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("gate", GATED)
def test_fused_model_equals_reference_model(gate, position):
    fused = tiny(gate, tau_init=0.3, alpha_init=2.0, position=position)
    reference = tiny(gate, tau_init=0.3, alpha_init=2.0, attention="reference", position=position)
    reference.load_state_dict(fused.state_dict())
    idx = torch.randint(0, len(TINY_VOCAB), (3, TINY_MODEL["block_size"]))
    torch.testing.assert_close(fused(idx), reference(idx), atol=1e-5, rtol=1e-5)


def test_each_attention_path_is_a_class_chosen_when_the_model_is_built_and_the_reference_names_none():
    """nanoGPT's shape (issue 54): the reference layer is the formula, with no branch on a path's name; each
    fast path is its own class, which `model.attention` picks once, for every layer."""
    for impl, cls in ATTENTION.items():
        model = GPT(GPTConfig(len(TINY_VOCAB), **TINY_MODEL, gate="linear", attention=impl))
        assert [type(block.attn) for block in model.blocks] == [cls] * TINY_MODEL["n_layer"] and cls.impl == impl
        assert cls is CausalSelfAttention or issubclass(cls, CausalSelfAttention)
    tree = ast.parse(textwrap.dedent(inspect.getsource(CausalSelfAttention)))
    methods = [node for node in tree.body[0].body if isinstance(node, ast.FunctionDef)]
    read = {n.attr for m in methods for n in ast.walk(m) if isinstance(n, ast.Attribute)}
    strings = {n.value for m in methods for n in ast.walk(m) if isinstance(n, ast.Constant)}
    assert "impl" not in read and "attention" not in read and not strings & set(ATTENTION_IMPLS)
    with pytest.raises(ValueError, match=r"Unknown attention implementation 'fast'; choose one of \('fused'"):
        GPT(GPTConfig(len(TINY_VOCAB), **TINY_MODEL, attention="fast"))
    with pytest.raises(ValueError, match=r"Unknown position encoding 'alibi'; choose one of \('learned', 'rope'"):
        GPT(GPTConfig(len(TINY_VOCAB), **TINY_MODEL, position="alibi"))


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("gate", gate_names(KeyBias))
@pytest.mark.parametrize("attention", ["fused", "reference"])
def test_changing_token_t_leaves_earlier_logits_unchanged(gate, attention, position):
    model = tiny(gate, attention=attention, position=position)
    T, t = TINY_MODEL["block_size"], 13
    idx = torch.randint(0, len(TINY_VOCAB), (2, T))
    changed = idx.clone()
    changed[:, t] = (changed[:, t] + 1) % len(TINY_VOCAB)
    before, after = model(idx), model(changed)
    torch.testing.assert_close(before[:, :t], after[:, :t], atol=0, rtol=0)
    assert not torch.allclose(before[:, t:], after[:, t:])  # the change is visible from t on


@pytest.mark.parametrize("gate", GATED)
@pytest.mark.parametrize("attention", ["fused", "reference"])
def test_alpha_zero_is_the_baseline(gate, attention):
    gated = tiny(gate, alpha_init=0.0, attention=attention)
    baseline = tiny("none", attention=attention)
    missing, unexpected = baseline.load_state_dict(gated.state_dict(), strict=False)
    assert not missing and all(".gate." in key for key in unexpected)
    idx = torch.randint(0, len(TINY_VOCAB), (2, TINY_MODEL["block_size"]))
    # g_j = sigmoid(-0 * ...) = 1/2 for every key: a constant factor, renormalised away
    torch.testing.assert_close(gated(idx), baseline(idx), atol=1e-6, rtol=1e-6)
    with torch.no_grad():
        for g in gated.model.gates:
            g.alpha.fill_(1.0)
    assert not torch.allclose(gated(idx), baseline(idx), atol=1e-4)  # the gate does act once alpha != 0


@pytest.mark.parametrize("gate", KEY_GATES)
def test_gate_parameter_overhead_matches_documented_formula(gate):
    gated, baseline = tiny(gate), tiny("none")
    extra = sum(p.numel() for p in gated.parameters()) - sum(p.numel() for p in baseline.parameters())
    options = {k: v for k, v in gated.model.cfg.gate_options.items()}
    per_layer = gate_class(gate).params_per_layer(TINY_MODEL["n_embd"], TINY_MODEL["n_head"], **options)
    assert extra == gated.model.gate_parameter_count() == TINY_MODEL["n_layer"] * per_layer


def test_ega1_overhead_at_paper_size_is_d_plus_2_per_head():
    paper = {"n_layer": 6, "n_head": 8, "n_embd": 256, "block_size": 256}
    gated, baseline = CharLM(TINY_VOCAB, gate="linear", **paper), CharLM(TINY_VOCAB, gate="none", **paper)
    n_gated, n_base = (sum(p.numel() for p in m.parameters()) for m in (gated, baseline))
    assert n_gated - n_base == 6 * 8 * (256 + 2) == 12_384
    assert (n_gated - n_base) / n_base < 0.0026  # the paper's "< 0.26%"


@pytest.mark.parametrize("gate", gate_names(KeyBias))
def test_initial_loss_is_close_to_uniform(gate):
    model = tiny(gate)
    idx = torch.randint(0, len(TINY_VOCAB), (8, TINY_MODEL["block_size"] + 1))
    loss = model.loss((idx[:, :-1], idx[:, 1:]))
    assert abs(loss.item() - math.log(len(TINY_VOCAB))) < 0.05


def test_gate_parameters_are_named_tau_and_alpha_and_get_gradients():
    model = tiny("linear").train()
    idx = torch.randint(0, len(TINY_VOCAB), (2, TINY_MODEL["block_size"] + 1))
    model.loss((idx[:, :-1], idx[:, 1:])).backward()
    names = dict(model.named_parameters())
    for layer in range(TINY_MODEL["n_layer"]):
        for scalar in ("tau", "alpha"):
            p = names[f"model.blocks.{layer}.attn.gate.{scalar}"]
            assert p.shape == (TINY_MODEL["n_head"],) and p.grad is not None and p.grad.abs().sum() > 0


def test_unknown_gate_lists_registered_ones():
    registered = (
        "none, alibi, author, db2, db4, fox, linear, morlet, morlet_param, multiscale, output_elementwise, "
        "output_headwise, wavelet_packet"
    )
    with pytest.raises(ValueError, match=rf"Unknown gate 'wavelet'. Registered gates: {registered}\."):
        CharLM(TINY_VOCAB, gate="wavelet")


@pytest.mark.parametrize(
    ("slot", "name", "other"), [("gate", "output_headwise", "output_gate"), ("output_gate", "fox", "gate")]
)
def test_a_gate_in_the_other_slot_is_refused_naming_its_slot(slot, name, other):
    with pytest.raises(
        ValueError, match=rf"give it as model.{other}, not model.{slot} \(e.g. --model.{other}={name}\)"
    ):
        CharLM(TINY_VOCAB, **{slot: name})


def test_unknown_gate_option_lists_accepted_ones():
    with pytest.raises(ValueError, match=r"does not take option.*scales.*accepts: tau_init, alpha_init"):
        CharLM(TINY_VOCAB, gate="linear", gate_options={"scales": 2})


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"n_embd": 30, "n_head": 4}, r"n_embd \(30\) must be divisible by model.n_head \(4\)"),
        ({"lr": 0.0}, "model.lr must be positive"),
        ({"n_layer": 0}, "model.n_layer must be a positive integer"),
        ({"dropout": 1.0}, r"model.dropout must be in \[0, 1\)"),
        ({"betas": (1.5, 0.99)}, r"model.betas must both be in \[0, 1\), got \[1.5, 0.99\]"),
    ],
)
def test_bad_model_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CharLM(TINY_VOCAB, **kwargs)


def defaults(**changes) -> dict:
    """CharLM's arguments at their defaults, by name, with ``changes``."""
    params = inspect.signature(CharLM.__init__).parameters.values()
    return {"vocab": TINY_VOCAB, **{p.name: p.default for p in params if p.default is not p.empty}, **changes}


def test_the_arguments_are_checked_and_the_gate_options_merged_before_any_model_is_built():
    options, gates = check_arguments(defaults(gate="multiscale", gate_options={"scales": 2}, tau_init=0.5))
    assert options == {"scales": 2, "tau_init": 0.5, "alpha_init": 1.0}  # an energy gate's own two options
    assert gates["gate"].cls is gate_class("multiscale") and gates["output_gate"].cls is None
    options, gates = check_arguments(defaults(gate="alibi", tau_init=0.5))
    assert options == {} and gates["gate"].cls is gate_class("alibi")  # a key bias has no tau
    with pytest.raises(ValueError, match=r"Set tau_init as model.\* arguments, not in model.gate_options"):
        check_arguments(defaults(gate_options={"tau_init": 1.0}))
    built = CharLM(**defaults(gate="multiscale", gate_options={"scales": 2}, tau_init=0.5, n_layer=1, n_embd=32))
    assert built.model.cfg.gate_options == {"scales": 2, "tau_init": 0.5, "alpha_init": 1.0}
    assert built.hparams.gate_options == {"scales": 2}  # the hyper-parameters keep what was given


@pytest.mark.parametrize("gate", GATED)
def test_same_seed_gives_gated_and_baseline_models_the_same_shared_weights(gate):
    gated, baseline = tiny(gate), tiny("none")  # both built right after torch.manual_seed(0)
    shared = baseline.state_dict()
    for key, value in gated.state_dict().items():
        if ".gate." not in key:
            assert torch.equal(value, shared[key]), key
    torch.manual_seed(1)
    other = CharLM(TINY_VOCAB, **TINY_MODEL, gate="none")
    assert not torch.equal(other.model.wte.weight, baseline.model.wte.weight)


def test_init_follows_nanogpt():
    model = CharLM(TINY_VOCAB, n_layer=4, n_head=4, n_embd=128, block_size=128, gate="linear")
    params = dict(model.model.named_parameters())
    assert params["blocks.0.attn.c_attn.weight"].std().item() == pytest.approx(0.02, rel=0.05)
    assert params["blocks.0.mlp.c_proj.weight"].std().item() == pytest.approx(0.02 / math.sqrt(8), rel=0.05)
    assert params["blocks.0.attn.gate.proj.weight"].std().item() == pytest.approx(0.02, rel=0.1)
    assert torch.all(params["blocks.0.attn.c_attn.bias"] == 0)
    assert model.model.lm_head.weight is model.model.wte.weight


def test_checkpoint_of_another_model_size_is_named(tmp_path):
    import lightning as L

    small = tiny("linear")
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, max_steps=0)
    trainer.strategy.connect(small)
    path = tmp_path / "small.ckpt"
    trainer.save_checkpoint(path)
    bigger = CharLM(TINY_VOCAB, **{**TINY_MODEL, "n_embd": 64}, gate="linear")
    with pytest.raises(ValueError, match=r"different model \(n_embd: checkpoint 32, this model 64\)"):
        bigger.on_load_checkpoint(torch.load(path, weights_only=False))
    assert CharLM.load_from_checkpoint(path).hparams.n_embd == 32  # loading by the checkpoint's own shape works


def test_the_python_api_and_the_cli_name_a_checkpoints_other_model_alike(tmp_path, monkeypatch, capsys):
    """`CharLM.on_load_checkpoint` and `ega validate --ckpt_path` make one check: the same mismatch gives the
    same message, each naming who asks for the other value; gate_options None and {} are the same to both."""
    import signal
    import sys

    import lightning as L

    from ega_lightning.cli import main as ega_main

    small = tiny("linear")  # gate_options None
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, max_steps=0)
    trainer.strategy.connect(small)
    path = tmp_path / "small.ckpt"
    trainer.save_checkpoint(path)
    bigger = CharLM(TINY_VOCAB, **{**TINY_MODEL, "n_embd": 64}, gate="linear", gate_options={})
    with pytest.raises(ValueError) as api:
        bigger.on_load_checkpoint(torch.load(path, weights_only=False))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ega"])
    sigint = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as exit:
            ega_main(["validate", f"--ckpt_path={path}", "--model.n_embd=64", "--model.gate_options={}"])
    finally:
        signal.signal(signal.SIGINT, sigint)
    assert exit.value.code == 2
    cli = capsys.readouterr().err.strip().removeprefix("ega validate: error: ")
    assert str(api.value).startswith("The checkpoint holds a different model (n_embd: checkpoint 32, this model 64).")
    assert cli == str(api.value).replace("The checkpoint", str(path), 1).replace("this model 64", "this command 64")
