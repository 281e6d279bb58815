"""Cached generation against full recomputation, for every gate."""

import pytest
import torch

from ega_lightning import CharLM
from ega_lightning.commands.generate import main as generate_main
from ega_lightning.gates import KeyBias, build_gate, causal_znorm, gate_names
from ega_lightning.gates.base import _znorm_continue, _znorm_next
from ega_lightning.gates.linear import LinearGate
from ega_lightning.gates.multiscale import causal_moving_average
from ega_lightning.generation import generate, next_token_logits, sample
from ega_lightning.model import GPT, GPTConfig
from ega_lightning.model.config import POSITIONS

from .helpers import TINY_VOCAB

SMALL = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16}
TOLERANCE = 1e-5  # fp32: cached generation against recomputing, as conformance's cached_equals_recompute


class PairGate(LinearGate):
    """EGA-1's projection, averaged over the current and the previous position: a gate whose
    projection the attention layer folds into its Q/K/V matmul *and* whose cached state keeps a tail."""

    receptive_field = 2

    def energy_from_projection(self, p: torch.Tensor) -> torch.Tensor:
        return causal_moving_average(p.transpose(1, 2), 2)  # (B, T, nh) -> (B, nh, T)


def small(gate: str, position: str = "learned") -> CharLM:
    torch.manual_seed(0)
    # tau/alpha away from their defaults so the gates are far from constant
    return CharLM(TINY_VOCAB, **SMALL, gate=gate, tau_init=0.3, alpha_init=2.0, position=position).eval()


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("gate", [*gate_names(KeyBias), PairGate])
def test_cached_logits_equal_recompute_at_every_step(gate, position):
    """Past the block too: the cache is rebuilt from the last half-window, its positions (RoPE's) from 0 again,
    and each step's logits equal the recomputed window's."""
    if isinstance(gate, str):
        model = small(gate, position).model
    else:  # a Gate subclass: the model without the LightningModule, which takes names
        torch.manual_seed(0)
        options = {"tau_init": 0.3, "alpha_init": 2.0}
        model = GPT(GPTConfig(len(TINY_VOCAB), **SMALL, gate=gate, gate_options=options, position=position)).eval()
    idx = torch.randint(0, len(TINY_VOCAB), (2, 5))
    steps = next_token_logits(model, idx, use_cache=True)
    step = next(steps)
    windows = []
    with torch.no_grad():
        for _ in range(3 * SMALL["block_size"]):  # long enough to refill the cache twice
            recomputed = model(step.window)[:, -1]
            torch.testing.assert_close(step.logits, recomputed, atol=TOLERANCE, rtol=TOLERANCE)
            windows.append(step.window.shape[1])
            idx = torch.cat([idx, step.logits.argmax(-1, keepdim=True)], dim=1)
            step = steps.send(idx)
    assert max(windows) == SMALL["block_size"]  # the window filled up ...
    assert SMALL["block_size"] // 2 in windows[6:]  # ... and was rebuilt from the last half-window


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("gate", ["none", "linear", "db4"])
def test_cache_changes_nothing_within_the_first_window(gate, position):
    model = small(gate, position).model
    prompt = torch.randint(0, len(TINY_VOCAB), (1, 4))
    cached = generate(model, prompt, 12, temperature=0.0)  # greedy: no sampling noise
    recomputed = generate(model, prompt, 12, temperature=0.0, use_cache=False)
    assert torch.equal(cached, recomputed)
    sampled = generate(model, prompt, 12, temperature=1.0, seed=5)
    assert torch.equal(sampled, generate(model, prompt, 12, temperature=1.0, seed=5))  # seeded
    assert sampled.shape == (1, 16) and torch.equal(sampled[:, :4], prompt)


def test_top_k_only_samples_the_k_most_likely():
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.0, -3.0]]).repeat(200, 1)
    drawn = sample(logits, temperature=1.0, top_k=2, generator=torch.Generator().manual_seed(0))
    assert set(drawn.flatten().tolist()) == {1, 3}
    assert sample(logits[:1], temperature=0.0, top_k=None, generator=torch.Generator()).item() == 1


def test_a_tiny_temperature_samples_the_likeliest_not_nan():
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.0, -3.0], [2.0, -1.0, 7.0, 7.5, 0.0]])
    for temperature in (1e-45, 1e-30):  # logits / temperature alone overflow to +-inf: NaN probabilities
        drawn = sample(logits, temperature, top_k=None, generator=torch.Generator().manual_seed(0))
        assert drawn.flatten().tolist() == [1, 3]


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--temperature", "nan", "--temperature must be >= 0, got nan"),
        ("--seed", str(10**23), f"argument --seed: {10**23} is not in [0, 2**63)"),
        ("--seed", "-1", "argument --seed: -1 is not in [0, 2**63)"),
    ],
)
def test_generate_refuses_sampling_values_torch_cannot_use(flag, value, said, capsys):
    with pytest.raises(SystemExit) as exit_:
        generate_main(["--ckpt_path", "never-read.ckpt", flag, value])
    assert exit_.value.code == 2 and said in capsys.readouterr().err


def test_znorm_of_one_new_position_is_the_general_continuation_bit_for_bit():
    """A generation step's z-norm (`_znorm_next`: no arange, no cumsum) against `_znorm_continue`,
    which prefill runs: equal to the bit at each of 300 positions, the running sums too."""
    e = torch.randn(3, 4, 300, generator=torch.Generator().manual_seed(0)) * 5 + 2  # (B, nh, T)
    zs, general = [], None
    for j in range(e.shape[-1]):
        z, general = _znorm_continue(e[..., j : j + 1], general)
        zs.append(z)
        if j == 0:
            stepped = general
            continue
        z_step, stepped = _znorm_next(e[..., j : j + 1], stepped)
        assert torch.equal(z_step, z), j
        assert torch.equal(stepped.total, general.total) and torch.equal(stepped.total_sq, general.total_sq)
        assert stepped.count == general.count
    # and both are the causal z-norm of the whole sequence (a cumsum instead of running sums: rounding)
    torch.testing.assert_close(torch.cat(zs, -1), causal_znorm(e), atol=TOLERANCE, rtol=TOLERANCE)


@pytest.mark.parametrize("gate", ["linear", PairGate])
def test_gate_step_from_folded_projection_equals_the_whole_sequence(gate):
    """Two paths, one tolerance (fp32, 1e-5): the gate's log g over the whole sequence (`forward`, what
    recomputing runs) and position by position from the projection that the attention layer folds
    into its Q/K/V matmul (`step(x, state, projection)`, what cached generation runs)."""
    torch.manual_seed(0)
    g = build_gate(gate, 32, 4, tau_init=0.3, alpha_init=2.0)
    x = torch.randn(2, 40, 32)  # (B, T, C)
    with torch.inference_mode():
        whole = g(x)  # (B, nh, T)
        p = g.input_projection()(x)  # (B, T, nh)
        log_g, state = g.step(x[:, :5], None, p[:, :5])  # a prefill, then one position at a time
        parts = [log_g]
        for j in range(5, x.shape[1]):
            log_g, state = g.step(x[:, j : j + 1], state, p[:, j : j + 1])
            parts.append(log_g)
    assert state.x_tail.shape == (2, g.receptive_field - 1, 4)  # the state keeps projections, not inputs
    torch.testing.assert_close(torch.cat(parts, -1), whole, atol=TOLERANCE, rtol=TOLERANCE)
