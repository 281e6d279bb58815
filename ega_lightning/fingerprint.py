"""The fingerprint of the code path a run configuration trains: which records may be compared.

Two runs of one configuration compare when the code that trained them does the same arithmetic. A
commit does not say that (most commits change no arithmetic, and two commits may), and a record made
before records kept commits says nothing at all. So a record keeps this fingerprint instead: a few AdamW
steps of the run's own model (its hyper-parameters, fp32 on CPU, fixed seed and random tokens), and a
hash of every step's logits, loss and gradients and of the final parameters. Equal fingerprints mean the
configuration's forward and backward give the same bits; a change anywhere on that path (a gate, the
attention, the initialisation) changes it. Each configuration has its own value, so adding a gate or a
config changes no other configuration's fingerprint.

`scripts/default_path_fingerprint.py` does the same over every shipped gate config, keeping the tensors
so that a difference can be located.
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

import torch
import torch.nn.functional as F

STEPS = 3
BATCH = 2
# a short window keeps the check to about a second at the cpu size; every gate takes T >= 16
WINDOW = 32


def _model_kwargs(hparams: dict[str, Any]) -> dict[str, Any]:
    from ega_lightning.module import CharLM

    accepted = set(inspect.signature(CharLM.__init__).parameters) - {"self", "compile"}
    return {k: v for k, v in hparams.items() if k in accepted}  # hparams.yaml holds data keys too


def fingerprint(hparams: dict[str, Any]) -> str:
    """16 hex digits for the model ``CharLM(**hparams)`` trains (see the module docstring); hparams as
    a run's ``hparams.yaml`` holds them (data keys are ignored). Computed on one thread."""
    kwargs = _model_kwargs(hparams)
    window = min(WINDOW, int(kwargs.get("block_size", WINDOW)))
    digest = hashlib.sha256()

    def add(t: torch.Tensor) -> None:
        digest.update(t.detach().contiguous().float().numpy().tobytes())

    threads = torch.get_num_threads()
    # a sum split over threads rounds by the split: one thread gives one answer whatever the machine's cores
    torch.set_num_threads(1)
    try:
        _train(kwargs, window, add)
    finally:
        torch.set_num_threads(threads)
    return digest.hexdigest()[:16]


def _train(kwargs: dict[str, Any], window: int, add: Any) -> None:
    """STEPS AdamW steps of ``CharLM(**kwargs)`` on random tokens, every tensor handed to ``add``."""
    from ega_lightning.module import CharLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        lm = CharLM(**kwargs)
        vocab = len(kwargs["vocab"])
        optimizer = torch.optim.AdamW(lm.parameters(), lr=1e-3)
        tokens = torch.Generator().manual_seed(2)
        lm.train()
        for _ in range(STEPS):
            idx = torch.randint(0, vocab, (BATCH, window + 1), generator=tokens)
            logits = lm(idx[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
            loss.backward()
            add(logits)
            add(loss)
            for _, p in sorted(lm.named_parameters()):
                if p.grad is not None:  # a frozen tau has none
                    add(p.grad)
            optimizer.step()
            optimizer.zero_grad()
        for _, p in sorted(lm.named_parameters()):
            add(p)
