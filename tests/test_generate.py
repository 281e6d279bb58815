"""Cached generation against full recomputation, for every gate."""

import pytest
import torch

from ega_lightning import CharLM
from ega_lightning.gates import gate_names
from ega_lightning.generate import generate, next_token_logits, sample

from .conftest import TINY_VOCAB

SMALL = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16}


def small(gate: str) -> CharLM:
    torch.manual_seed(0)
    # tau/alpha away from their defaults so the gates are far from constant
    return CharLM(TINY_VOCAB, **SMALL, gate=gate, tau_init=0.3, alpha_init=2.0).eval()


@pytest.mark.parametrize("gate", gate_names())
def test_cached_logits_equal_recompute_at_every_step(gate):
    model = small(gate).model
    idx = torch.randint(0, len(TINY_VOCAB), (2, 5))
    steps = next_token_logits(model, idx, use_cache=True)
    step = next(steps)
    windows = []
    with torch.no_grad():
        for _ in range(3 * SMALL["block_size"]):  # long enough to refill the cache twice
            recomputed = model(step.window)[:, -1]
            torch.testing.assert_close(step.logits, recomputed, atol=1e-5, rtol=1e-5)
            windows.append(step.window.shape[1])
            idx = torch.cat([idx, step.logits.argmax(-1, keepdim=True)], dim=1)
            step = steps.send(idx)
    assert max(windows) == SMALL["block_size"]  # the window filled up ...
    assert SMALL["block_size"] // 2 in windows[6:]  # ... and was rebuilt from the last half-window


@pytest.mark.parametrize("gate", ["none", "linear", "db4"])
def test_cache_changes_nothing_within_the_first_window(gate):
    model = small(gate).model
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
