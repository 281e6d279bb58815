"""`ega generate`: sample text from a checkpoint, each character printed as soon as it is sampled.

    ega generate --ckpt_path RUN/checkpoints/best.ckpt --prompt "ROMEO:" --max_new_tokens 300

The sampling is the library `ega_lightning.generation`; this module parses the command line, loads the
checkpoint and prints.
"""

from __future__ import annotations

import signal
import sys
import time

from ega_lightning.devices import usable_device
from ega_lightning.errors import EXITS, CommandParser
from ega_lightning.generation import check_causal, stream
from ega_lightning.seeding import seed_argument


def main(argv: list[str] | None = None) -> None:
    parser = CommandParser(prog="ega generate", description="Sample text from a CharLM checkpoint.")
    parser.add_argument("--ckpt_path", required=True, help="a checkpoint written by `ega fit`")
    parser.add_argument("--prompt", default="\n", help="text to continue (only characters of the model's vocabulary)")
    parser.add_argument("--max_new_tokens", type=int, default=500, help="characters to sample (default 500)")
    parser.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    parser.add_argument("--top_k", type=int, default=None, help="sample among the k likeliest characters only")
    parser.add_argument("--seed", type=seed_argument, default=1337, help="sampling seed (default 1337)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cuda (default cpu)")
    parser.add_argument("--no_cache", action="store_true", help="recompute the whole window at every step")
    args = parser.parse_args(argv)
    if args.max_new_tokens < 1:
        parser.error(f"--max_new_tokens must be positive, got {args.max_new_tokens}")
    if not args.temperature >= 0:  # NaN too
        parser.error(f"--temperature must be >= 0, got {args.temperature}")
    if args.top_k is not None and args.top_k < 1:
        parser.error(f"--top_k must be positive, got {args.top_k}")

    usable_device(args.device)

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
        raise SystemExit(EXITS[KeyboardInterrupt].status)
    seconds = time.perf_counter() - t0
    sys.stdout.write("\n")
    sys.stderr.write(f"{n} tokens in {seconds:.2f} s ({n / seconds:.1f} tokens/s)\n")


if __name__ == "__main__":
    main()
