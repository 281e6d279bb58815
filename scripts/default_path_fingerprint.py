"""Proof that a change leaves the default fp32 CPU training path bit for bit as it was.

Runs the fused path of every shipped gate config (configs/gate/*.yaml, default options) at two shapes
for 3 AdamW steps and saves every step's logits, loss and gradients and the final parameters. Run it
under each copy of the code, then compare with torch.equal:

    git archive <base commit> | tar -x -C /tmp/base
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
CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "gate"


def fingerprint() -> dict[str, Any]:
    from ega_lightning import CharLM
    from ega_lightning.data.corpora import CORPORA

    vocab = CORPORA["tinyshakespeare"].vocab
    out: dict[str, Any] = {}
    for cfg in sorted(CONFIGS.glob("*.yaml")):
        options = yaml.safe_load(cfg.read_text())["model"]
        for shape in SHAPES:
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
            out[f"{cfg.stem}-{shape['n_embd']}"] = steps
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
    if sys.argv[1] == "--compare":
        base, new = torch.load(sys.argv[2]), torch.load(sys.argv[3])
        added, removed = sorted(new.keys() - base.keys()), sorted(base.keys() - new.keys())
        if added or removed:  # a gate config added or removed: the others must still agree
            print(f"only in the new run: {', '.join(added) or '-'}; only in the base: {', '.join(removed) or '-'}")
        common = base.keys() & new.keys()
        n, bad = differences({k: base[k] for k in common}, {k: new[k] for k in common})
        print(f"{n} tensors compared with torch.equal; {len(bad)} differ{': ' + ', '.join(bad[:10]) if bad else ''}")
        sys.exit(1 if bad or n == 0 else 0)
    torch.save(fingerprint(), sys.argv[1])
