"""Sampling text from a trained GPT, with a KV cache that also carries each gate's causal state.

The generation library: `ega generate` (`ega_lightning.commands.generate`) runs it, `ega bench` times
it and the conformance checks step it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ega_lightning.errors import UserError
from ega_lightning.model import GPT


@dataclass
class Step:
    """One generation step: the window of token ids the model conditioned on, and its next-token logits."""

    window: torch.Tensor  # (B, T_window)
    logits: torch.Tensor  # (B, V)


def next_token_logits(model: GPT, idx: torch.Tensor, use_cache: bool = True) -> Iterator[Step]:
    """Yields the next-token logits for `idx`, then again after each token the caller appends to `idx`.

    The caller extends `idx` (B, T) in place of a new tensor via `send`: see `generate`. Without a
    cache every step recomputes the last `block_size` tokens (nanoGPT's crop). With a cache each
    step feeds one token; when the window is full, the cache is rebuilt from the last half-window
    of tokens, so each step's window is the cached tokens and `model(window)[:, -1]` equals the
    cached logits.
    """
    block = model.cfg.block_size
    cache, start = None, 0  # cache covers idx[:, start:]
    while True:
        if not use_cache:
            window = idx[:, -block:]
            logits = model(window)[:, -1]
        elif cache is not None and idx.shape[1] - start <= block:
            window = idx[:, start:]
            logits = model(idx[:, -1:], cache)[:, -1]
        else:  # first step, or the window is full: prefill a fresh cache
            keep = idx.shape[1] if cache is None else block // 2
            start = max(0, idx.shape[1] - min(keep, block))
            window = idx[:, start:]
            cache = model.new_cache()
            logits = model(window, cache)[:, -1]
        idx = yield Step(window, logits)


def sample(logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator) -> torch.Tensor:
    """(B, V) logits -> (B, 1) sampled ids; temperature 0 means greedy."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float()
    # shifted first: a tiny temperature then sends the others to -inf, not every logit to +-inf (NaN probabilities)
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)


@torch.inference_mode()
def stream(
    model: GPT,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 1337,
    use_cache: bool = True,
) -> Iterator[torch.Tensor]:
    """Yields each new token (B, 1) as soon as it is sampled, continuing the prompt ids ``idx`` (B, T)."""
    generator = torch.Generator(device=idx.device).manual_seed(seed)
    steps = next_token_logits(model, idx, use_cache)
    step = next(steps)
    for i in range(max_new_tokens):
        token = sample(step.logits, temperature, top_k, generator)
        yield token
        idx = torch.cat([idx, token], dim=1)
        if i + 1 < max_new_tokens:
            step = steps.send(idx)


def generate(
    model: GPT,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 1337,
    use_cache: bool = True,
) -> torch.Tensor:
    """idx (B, T) prompt ids -> (B, T + max_new_tokens)."""
    new = list(stream(model, idx, max_new_tokens, temperature, top_k, seed, use_cache))
    return torch.cat([idx, *new], dim=1)


def check_causal(model: GPT, ckpt_path: str) -> None:
    """Raises UserError for a model whose gates see the future: it cannot generate text."""
    znorm = model.cfg.gate_options.get("znorm", "prefix")
    if znorm != "prefix":
        raise UserError(
            f"{ckpt_path} was trained with gate option znorm={znorm}, a diagnostic that z-normalises each key's "
            "energy with statistics of the whole training window, later characters included: the model expects "
            "to see the future, so it cannot generate text one character at a time. Generate from a checkpoint "
            "trained with the causal default (znorm: prefix); to measure this one causally, evaluate it with "
            "--model.eval_znorm=prefix (`ega validate`) or `ega landscape --eval_znorm prefix`."
        )
