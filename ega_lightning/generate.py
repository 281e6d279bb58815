"""Sampling text from a trained CharLM, with a KV cache that also carries each gate's causal state.

`ega generate --ckpt_path RUN/checkpoints/best.ckpt --prompt "ROMEO:" --max_new_tokens 300`
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
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
    logits = logits.float() / temperature
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ega generate", description="Sample text from a CharLM checkpoint.")
    parser.add_argument("--ckpt_path", required=True, help="a checkpoint written by `ega fit`")
    parser.add_argument("--prompt", default="\n", help="text to continue (only characters of the model's vocabulary)")
    parser.add_argument("--max_new_tokens", type=int, default=500, help="characters to sample (default 500)")
    parser.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    parser.add_argument("--top_k", type=int, default=None, help="sample among the k likeliest characters only")
    parser.add_argument("--seed", type=int, default=1337, help="sampling seed (default 1337)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cuda (default cpu)")
    parser.add_argument("--no_cache", action="store_true", help="recompute the whole window at every step")
    args = parser.parse_args(argv)
    if args.max_new_tokens < 1:
        parser.error(f"--max_new_tokens must be positive, got {args.max_new_tokens}")
    if args.temperature < 0:
        parser.error(f"--temperature must be >= 0, got {args.temperature}")
    if args.top_k is not None and args.top_k < 1:
        parser.error(f"--top_k must be positive, got {args.top_k}")

    try:
        torch.empty(0, device=args.device)  # a device this machine lacks fails here, not deep in loading
    except (RuntimeError, AssertionError) as err:  # torch without CUDA asserts
        raise UserError(
            f"--device {args.device} cannot be used on this machine ({str(err).splitlines()[0]}). "
            f"Use --device cpu{', or cuda' if torch.cuda.is_available() else ''}."
        ) from None

    # Lightning is slow to import: only once the arguments are valid
    from ega_lightning.checkpoint_io import load_checkpoint
    from ega_lightning.module import CharLM

    load_checkpoint(args.ckpt_path)  # a missing, foreign or corrupt file: one clear error
    # a gate whose module is not importable here raises a UserError: `ega` prints it as one paragraph.
    # The same model on the fused kernel, whatever it trained with: flex cannot run on CPU, and the
    # cache keeps the fused layout anyway.
    lm = CharLM.load_from_checkpoint(args.ckpt_path, map_location=args.device, attention="fused").eval()
    check_causal(lm.model, args.ckpt_path)
    try:
        prompt = lm.tokenizer.encode(args.prompt)[None].to(args.device)
    except ValueError as err:
        parser.error(f"--prompt: {err}")
    if prompt.shape[1] == 0:
        parser.error("--prompt is empty; give at least one character (the default is a newline)")
    sys.stdout.write(args.prompt)
    sys.stdout.flush()
    t0, n = time.perf_counter(), 0
    tokens = stream(lm.model, prompt, args.max_new_tokens, args.temperature, args.top_k, args.seed, not args.no_cache)
    # Ctrl-C sets a flag that the loop reads after each token: a KeyboardInterrupt raised wherever the
    # signal lands could be swallowed (inside a finalizer, say), and the generation would go on
    interrupted: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    try:
        for token in tokens:  # each character as soon as it exists: a long generation shows progress
            n += 1
            sys.stdout.write(lm.tokenizer.decode(token[0]))
            sys.stdout.flush()
            if interrupted:
                break
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted:  # keep what was generated; no traceback
        sys.stdout.write("\n")
        sys.stderr.write(f"ega generate: interrupted after {n} of {args.max_new_tokens} new tokens\n")
        raise SystemExit(130)
    seconds = time.perf_counter() - t0
    sys.stdout.write("\n")
    sys.stderr.write(f"{n} tokens in {seconds:.2f} s ({n / seconds:.1f} tokens/s)\n")


if __name__ == "__main__":
    main()
