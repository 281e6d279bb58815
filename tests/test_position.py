"""The position encodings (model.position: learned, rope, none): RoPE against its rotation written out, every
attention path against the reference for each, checkpoints, run names and the learned default."""

import math

import pytest
import torch

from ega_lightning import CharLM
from ega_lightning.errors import UserError
from ega_lightning.gates import Gate, KeyBias, build_gate, gate_names
from ega_lightning.model import GPT, GPTConfig, attention_layer
from ega_lightning.model.config import POSITIONS
from ega_lightning.model.position import apply_rope
from ega_lightning.module import check_model_matches
from ega_lightning.runs import default_run_name

from .helpers import TINY_MODEL, TINY_VOCAB
from .test_model import spec_gated_attention
from .test_runtime_paths import assert_same_training_step

KEY_GATES = [name for name in gate_names(KeyBias) if name != "none"]


def written_out_rope(x: torch.Tensor, start: int = 0) -> torch.Tensor:
    """RoFormer's rotation (Su et al. 2021, eq. 13-15) in the rotate-half pairing, one 2x2 rotation per channel pair
    and position: the pair (x_i, x_{i + hs/2}) at position m turned by m * 10000^(-2i / hs)."""
    out = torch.empty_like(x)
    hs = x.shape[-1]
    for m in range(x.shape[-2]):
        for i in range(hs // 2):
            angle = (start + m) * 10000.0 ** (-2 * i / hs)
            rotation = torch.tensor(
                [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=x.dtype
            )
            pair = torch.stack([x[..., m, i], x[..., m, i + hs // 2]], dim=-1)  # (..., 2)
            turned = pair @ rotation.T
            out[..., m, i], out[..., m, i + hs // 2] = turned[..., 0], turned[..., 1]
    return out


def tiny(gate: str, position: str, **kwargs) -> CharLM:
    torch.manual_seed(0)
    return CharLM(TINY_VOCAB, **{**TINY_MODEL, "gate": gate, "position": position, **kwargs})


def test_rope_is_the_rotation_written_out():
    x = torch.randn(2, 3, 11, 8, dtype=torch.float64)
    torch.testing.assert_close(apply_rope(x), written_out_rope(x), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(apply_rope(x, start=40), written_out_rope(x, start=40), atol=1e-12, rtol=1e-12)
    # position 0 is the identity; the padded form turns only the first `width` channels
    assert torch.equal(apply_rope(x)[..., 0, :], x[..., 0, :])
    padded = torch.cat([x, torch.randn(2, 3, 11, 3, dtype=torch.float64)], dim=-1)
    turned = apply_rope(padded, start=5, width=8)
    torch.testing.assert_close(turned[..., :8], written_out_rope(x, start=5), atol=1e-12, rtol=1e-12)
    assert torch.equal(turned[..., 8:], padded[..., 8:])


def test_rope_logits_depend_on_the_distance_alone():
    """What makes generation's restart of positions harmless: q_m . k_n is a function of m - n."""
    q, k = torch.randn(1, 1, 6, 16, dtype=torch.float64), torch.randn(1, 1, 6, 16, dtype=torch.float64)
    scores = apply_rope(q) @ apply_rope(k).transpose(-2, -1)
    shifted = apply_rope(q, start=93) @ apply_rope(k, start=93).transpose(-2, -1)
    torch.testing.assert_close(shifted, scores, atol=1e-12, rtol=1e-12)
    assert not torch.allclose(scores, q @ k.transpose(-2, -1))  # it does act


@pytest.mark.parametrize("gate", ["none", *KEY_GATES])
@pytest.mark.parametrize("impl", ["fused", "reference"])
def test_rope_layer_is_the_spec_formula_on_rotated_q_and_k(gate, impl):
    """softmax(rope(q) rope(k)^T / sqrt(hs) + log g_j), written out one query at a time (an energy gate), or the
    key bias's b_j - b_i (a peer): the rotation and the gate's channel side by side on every path."""
    torch.manual_seed(2)
    C, nh, T = 24, 3, 19
    cfg = GPTConfig(vocab_size=len(TINY_VOCAB), n_embd=C, n_head=nh, attention=impl, position="rope")
    options = {"tau_init": 0.2, "alpha_init": 3.0} if gate in gate_names(Gate) else {}
    gate_module = build_gate(gate, C, nh, **options)
    layer = attention_layer(cfg, gate_module)
    x = torch.randn(2, T, C)
    with torch.no_grad():
        q, k, v = layer.c_attn(x).view(2, T, 3, nh, C // nh).permute(2, 0, 3, 1, 4)
        q, k = written_out_rope(q), written_out_rope(k)
        if not isinstance(gate_module, Gate):  # none, or a key bias (ALiBi, FoX)
            b = torch.zeros(1, nh, T) if gate_module is None else gate_module(x)  # (B or 1, nh, T)
            logits = q @ k.transpose(-2, -1) / math.sqrt(C // nh) + b[:, :, None, :] - b[:, :, :, None]
            causal = torch.ones(T, T, dtype=torch.bool).tril()
            y = logits.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        else:
            y = spec_gated_attention(q, k, v, layer.gate(x).exp())
        expected = layer.c_proj(y.transpose(1, 2).reshape(2, T, C))
        torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("position", ["rope", "none"])
@pytest.mark.parametrize("gate", ["none", "linear", "fox", "alibi", "db4"])
def test_fused_training_step_equals_the_reference(gate, position):
    """Values and gradients at the CPU layout (one extra channel), where training runs `GatedQKV`."""
    fused = tiny(gate, position, tau_init=0.3, alpha_init=2.0)
    reference = tiny(gate, position, tau_init=0.3, alpha_init=2.0, attention="reference")
    reference.load_state_dict(fused.state_dict())
    assert_same_training_step(fused, reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("gate", ["none", "linear", "alibi"])
def test_none_has_no_position_signal_but_the_causal_mask(gate):
    """Without positions (and without a key gate) one layer's last logits see the earlier tokens as a set:
    reordering them changes nothing; RoPE, the learned embedding, ALiBi's bias and an energy gate's prefix
    statistics each see the order."""
    idx = torch.randint(0, len(TINY_VOCAB), (1, 12), generator=torch.Generator().manual_seed(3))
    reordered = torch.cat([idx[:, :-1].flip(1), idx[:, -1:]], dim=1)
    options = {"tau_init": 0.3, "alpha_init": 2.0} if gate == "linear" else {}
    for position in POSITIONS:
        model = tiny(gate, position, n_layer=1, **options).eval().model
        with torch.no_grad():
            a, b = model(idx)[:, -1], model(reordered)[:, -1]
        if position == "none" and gate == "none":
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        else:  # the order reaches the logits: through the positions or the gate's prefix statistics
            assert not torch.allclose(a, b, atol=1e-4), position


def test_learned_is_the_default_and_the_only_one_with_a_position_embedding():
    assert GPTConfig(vocab_size=3).position == "learned" and CharLM(TINY_VOCAB).hparams.position == "learned"
    counts = {}
    for position in POSITIONS:
        model = GPT(GPTConfig(len(TINY_VOCAB), **TINY_MODEL, position=position))
        counts[position] = sum(p.numel() for p in model.parameters())
        assert ("wpe.weight" in model.state_dict()) == (position == "learned")
    embedding = TINY_MODEL["block_size"] * TINY_MODEL["n_embd"]
    assert counts["learned"] - embedding == counts["rope"] == counts["none"]


def test_rope_and_none_read_windows_past_the_block_and_learned_does_not():
    T = 2 * TINY_MODEL["block_size"]
    idx = torch.randint(0, len(TINY_VOCAB), (1, T))
    for position in ("rope", "none"):
        model = tiny("linear", position).eval().model
        with torch.no_grad():
            logits = model(idx)
            # causal: the first block's logits are the model's on the first block alone
            torch.testing.assert_close(logits[:, : T // 2], model(idx[:, : T // 2]), atol=1e-5, rtol=1e-5)
        assert logits.shape == (1, T, len(TINY_VOCAB))
    with pytest.raises(ValueError, match="longer than block_size"):
        tiny("linear", "learned").model(idx)


def test_a_checkpoint_loads_with_its_position_and_another_is_named(tmp_path):
    import lightning as L

    model = tiny("linear", "rope")
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, max_steps=0)
    trainer.strategy.connect(model)
    path = tmp_path / "rope.ckpt"
    trainer.save_checkpoint(path)
    loaded = CharLM.load_from_checkpoint(path).eval()
    assert loaded.model.cfg.position == "rope" and loaded.model.wpe is None
    idx = torch.randint(0, len(TINY_VOCAB), (2, 9))
    with torch.no_grad():
        assert torch.equal(loaded(idx), model.eval()(idx))
    with pytest.raises(UserError, match=r"position: checkpoint 'rope', this model 'learned'"):
        check_model_matches(dict(model.hparams), {**model.hparams, "position": "learned"}, asker="this model")
    # a checkpoint from before the option (no position saved) is a learned one, as it was trained
    old = {k: v for k, v in tiny("linear", "learned").hparams.items() if k != "position"}
    check_model_matches(old, {**old, "position": "learned"})


def test_the_run_name_says_the_position_unless_learned():
    config = {"model": {**TINY_MODEL, "gate": "alibi"}, "data": {"corpus": "tinyshakespeare", "seed": 1}}
    learned = default_run_name(config)
    assert learned == "tinyshakespeare-alibi-2x2x32-T32-seed1"  # every existing run keeps its directory
    assert default_run_name({**config, "model": {**config["model"], "position": "learned"}}) == learned
    for position in ("rope", "none"):
        name = default_run_name({**config, "model": {**config["model"], "position": position}})
        assert name == f"tinyshakespeare-alibi-pos{position}-2x2x32-T32-seed1"


def test_rope_with_an_odd_head_size_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"head size n_embd / n_head must be even; it is 30 / 2 = 15"):
        CharLM(TINY_VOCAB, n_layer=1, n_head=2, n_embd=30, block_size=8, position="rope")
    with pytest.raises(ValueError, match=r"model.position must be one of \('learned', 'rope', 'none'\), got 'abs'"):
        CharLM(TINY_VOCAB, **TINY_MODEL, position="abs")
