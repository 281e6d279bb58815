"""Proof that a change leaves the default fp32 CPU training path bit for bit as it was.

Runs the fused path of every shipped gate config (configs/gate/*.yaml, default options) at two shapes for 3 AdamW
steps and saves every step's logits, loss and gradients and the final parameters; then the same at the first shape
for every shipped position config (configs/position/*.yaml) composed with every gate config
(``<gate>-pos<position>-64``); and the trained models' cached generation (a prefill, then one token at a time) on
their own path under each position (``generate-<gate>-<position>``, ``-reference`` after it for a config on that
path). Only CharLM's constructor and GPT's ``new_cache`` and ``forward(idx, cache)`` are called, so the script runs
on the trees before and after a change alike. Run it under each copy of the code, then compare with torch.equal:

    git worktree add --detach /tmp/base <base commit>
    PYTHONPATH=/tmp/base python scripts/default_path_fingerprint.py /tmp/base.pt
    PYTHONPATH=. python scripts/default_path_fingerprint.py /tmp/new.pt
    python scripts/default_path_fingerprint.py --compare /tmp/base.pt /tmp/new.pt
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import yaml

SHAPES = (
    {"n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 64},
    {"n_layer": 1, "n_head": 8, "n_embd": 256, "block_size": 128},
)
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# cached generation: a prompt of PREFILL tokens, then STEPS tokens one at a time
PREFILL, STEPS = 8, 4


def options_of(config: Path) -> dict[str, Any]:
    return yaml.safe_load(config.read_text())["model"]


def path_of(options: dict[str, Any]) -> str:
    """A generation key's suffix: the path, where it is not the default (the reference path generated on the
    fused path's layout before issue 70, on its own since, so its cached logits may round otherwise)."""
    return "" if options.get("attention", "fused") == "fused" else f"-{options['attention']}"


def trained(vocab: str, shape: dict[str, int], options: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    """CharLM of ``options`` at ``shape`` after 3 AdamW steps on random tokens, and what each step computed."""
    from ega_lightning import CharLM

    torch.manual_seed(1)
    lm = CharLM(vocab, **shape, **options)
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(2)
    steps = []
    for _ in range(3):
        idx = torch.randint(0, len(vocab), (4, shape["block_size"] + 1), generator=gen)
        logits = lm(idx[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
        loss.backward()
        # a frozen parameter (linear_frozen_tau's tau) has no gradient
        grads = {n: p.grad.clone() for n, p in lm.named_parameters() if p.grad is not None}
        steps.append({"logits": logits.detach(), "loss": loss.detach(), "grads": grads})
        opt.step()
        opt.zero_grad()
    steps.append({"params": {n: p.detach().clone() for n, p in lm.named_parameters()}})
    return lm, steps


@torch.no_grad()
def generated(lm: Any, vocab: str) -> list[torch.Tensor]:
    """The logits of cached generation on the model's own path: a prefill, then one token at a time."""
    lm.eval()
    idx = torch.randint(0, len(vocab), (2, PREFILL + STEPS), generator=torch.Generator().manual_seed(3))
    cache = lm.model.new_cache()
    out = [lm.model(idx[:, :PREFILL], cache)]
    out += [lm.model(idx[:, i : i + 1], cache) for i in range(PREFILL, PREFILL + STEPS)]
    return out


def fingerprint() -> dict[str, Any]:
    from ega_lightning.data.corpora import CORPORA

    vocab = CORPORA["tinyshakespeare"].vocab
    out: dict[str, Any] = {}
    gates = sorted((CONFIGS / "gate").glob("*.yaml"))
    for cfg in gates:
        for shape in SHAPES:
            lm, out[f"{cfg.stem}-{shape['n_embd']}"] = trained(vocab, shape, options_of(cfg))
            if shape is SHAPES[0] and options_of(cfg).get("gate_options", {}).get("znorm") != "window":
                out[f"generate-{cfg.stem}-learned{path_of(options_of(cfg))}"] = generated(lm, vocab)
    for position in sorted((CONFIGS / "position").glob("*.yaml")):
        for cfg in gates:
            options = {**options_of(cfg), **options_of(position)}
            lm, out[f"{cfg.stem}-pos{position.stem}-{SHAPES[0]['n_embd']}"] = trained(vocab, SHAPES[0], options)
            if options.get("gate_options", {}).get("znorm") != "window":  # no cached generation of a leaky z
                out[f"generate-{cfg.stem}-{position.stem}{path_of(options)}"] = generated(lm, vocab)
    return out


def differences(a: Any, b: Any, path: str = "") -> tuple[int, list[str]]:
    """(tensors compared, paths where torch.equal fails)."""
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return 0, [f"{path}: keys differ"]
        parts = [differences(a[k], b[k], f"{path}/{k}") for k in a]
    elif isinstance(a, list):
        parts = [differences(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True))]
    else:
        return 1, [] if torch.equal(a, b) else [path]
    return sum(n for n, _ in parts), [p for _, bad in parts for p in bad]


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    if sys.argv[1] == "--compare":
        base, new = torch.load(sys.argv[2]), torch.load(sys.argv[3])
        added, removed = sorted(new.keys() - base.keys()), sorted(base.keys() - new.keys())
        if added or removed:  # a gate config added or removed: the others must still agree
            print(f"only in the new run: {', '.join(added) or '-'}; only in the base: {', '.join(removed) or '-'}")
        common = base.keys() & new.keys()
        n, bad = differences({k: base[k] for k in common}, {k: new[k] for k in common})
        print(
            f"{len(common)} runs, {n} tensors compared with torch.equal; {len(bad)} differ"
            f"{': ' + ', '.join(bad[:10]) if bad else ''}"
        )
        sys.exit(1 if bad or n == 0 else 0)
    torch.save(fingerprint(), sys.argv[1])
