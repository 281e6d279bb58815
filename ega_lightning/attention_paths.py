"""The attention paths against the reference on one device: the comparisons of the device check.

For each gate: the reference path (the spec's formula) in fp32 is the truth; the fused and flex paths
in fp32, and all three under bf16 autocast, are compared to it, values (logits) and gradients (of every
parameter), by relative error ||path - truth|| / ||truth||. fp32 must be within `FP32_TOL`; a bf16 path
within twice the bf16 reference's own error plus `BF16_SLACK` (bf16 rounding is the reference's too,
so the bound follows what bf16 can do instead of a guessed number).

On CPU, flex runs forward only (torch's FlexAttention has no CPU backward). The command,
`python -m ega_lightning.device_check` (`ega_lightning.commands.device_check`), prints the rows.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F

from ega_lightning.data.corpora import CORPORA
from ega_lightning.gates import Gate, OutputGate, gate_class
from ega_lightning.model import GPT, GPTConfig, available_attention_impls

FP32_TOL = 1e-4
BF16_SLACK = 1e-3
SHAPE = {"n_layer": 2, "n_head": 8, "n_embd": 256, "block_size": 256}  # the paper's layer and head shape


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def run_path(
    model: GPT, idx: torch.Tensor, dtype: torch.dtype, grads: bool
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits (B, T, V) and, if `grads`, every parameter's gradient of the mean cross-entropy."""
    model.zero_grad(set_to_none=True)
    autocast = torch.autocast(idx.device.type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16)
    with torch.set_grad_enabled(grads), autocast, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager FlexAttention on CPU warns that it is not compiled
        logits = model(idx[:, :-1])
        if grads:
            F.cross_entropy(logits.float().flatten(0, 1), idx[:, 1:].flatten()).backward()
    return logits.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def compare_paths(gate: str, device: torch.device, bf16: bool, batch: int, seed: int) -> list[dict[str, Any]]:
    """Every attention path of a model with ``gate`` against the reference path, one row per (path, precision):
    relative errors of values and the worst gradient, and the verdict. (Not `conformance.check_gate`, which
    checks a gate's properties; this compares the paths that run one.)"""
    vocab = len(CORPORA["tinyshakespeare"].vocab)
    cls = gate_class(gate)
    # an energy gate away from its defaults (it visibly acts); an output gate in its own slot
    options = {"tau_init": 0.3, "alpha_init": 2.0} if cls is not None and issubclass(cls, Gate) else {}
    output = cls is not None and issubclass(cls, OutputGate)
    config = {"gate": "none" if output else gate, "gate_options": options, "output_gate": gate if output else "none"}
    torch.manual_seed(seed)
    truth_model = GPT(GPTConfig(vocab_size=vocab, **SHAPE, **config, attention="reference"))
    state = truth_model.state_dict()
    idx = torch.randint(0, vocab, (batch, SHAPE["block_size"] + 1), generator=torch.Generator().manual_seed(seed))
    idx = idx.to(device)
    truth = run_path(truth_model.to(device), idx, torch.float32, grads=True)
    rows: list[dict[str, Any]] = []
    dtypes = [torch.float32, torch.bfloat16] if bf16 else [torch.float32]
    impls = available_attention_impls()
    for dtype in dtypes:
        errors: dict[str, tuple[float, float | None]] = {}
        for impl in [impl for impl in ("reference", "fused", "flex") if impl in impls]:
            if impl == "reference" and dtype == torch.float32:
                errors[impl] = (0.0, 0.0)  # the truth itself
                continue
            model = GPT(GPTConfig(vocab_size=vocab, **SHAPE, **config, attention=impl))
            model.load_state_dict(state)
            grads = impl != "flex" or device.type == "cuda"  # no CPU backward for FlexAttention
            logits, grad = run_path(model.to(device), idx, dtype, grads)
            value_err = _relative(logits, truth[0])
            grad_err = max(_relative(grad[n], truth[1][n]) for n in truth[1]) if grads else None
            errors[impl] = (value_err, grad_err)
        for impl, (value_err, grad_err) in errors.items():
            if impl == "reference" and dtype == torch.float32:
                continue
            if dtype == torch.float32:
                bound_v = bound_g = FP32_TOL
            else:  # no worse than twice what bf16 costs the reference itself
                bound_v = 2 * errors["reference"][0] + BF16_SLACK
                bound_g = 2 * (errors["reference"][1] or 0.0) + BF16_SLACK
            ok = value_err <= bound_v and (grad_err is None or grad_err <= bound_g)
            rows.append(
                {
                    "gate": gate,
                    "impl": impl,
                    "dtype": str(dtype).removeprefix("torch."),
                    "value_err": value_err,
                    "grad_err": grad_err,
                    "value_bound": bound_v,
                    "grad_bound": bound_g,
                    "ok": ok,
                }
            )
    return rows
