"""The validation loss around a trained gate's tau and alpha, read from a checkpoint: `ega landscape`'s library.

For each checkpoint: the loss with every head's tau shifted by the same delta, and with every
alpha scaled by the same factor (alpha x 0 is the plain attention of the same weights); per head
the measured fraction of keys with z > tau beside 1 - Phi(tau), the fraction a standard normal z
would give; and a histogram of z on fixed bins, for the z-distribution figure. The command
(`ega_lightning.commands.landscape`) writes them into one small JSON (no absolute paths) for the
report, which builds no model itself.

The windows are the validation split's evenly spaced evaluation windows (``max_eval_windows`` of
them, as ``data.max_eval_windows`` picks them). ``eval_znorm="prefix"`` evaluates a model trained
with ``znorm: window`` causally (the leak audit). Under the prefix z-norm every window's first key
has z = 0 exactly; the histogram counts it like any other key.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from ega_lightning.errors import UserError

TAU_SHIFTS = (-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0)
ALPHA_SCALES = (0.0, 0.5, 1.0, 2.0)
Z_EDGES = tuple(round(-6.0 + 0.1 * i, 1) for i in range(121))  # bins of 0.1 on [-6, 6]

Batch = tuple[torch.Tensor, torch.Tensor]


def display_name(path: Path) -> str:
    """``<run>/<file>`` for a checkpoint in ``<run>/checkpoints/``, else the file name: never an absolute path."""
    return f"{path.parent.parent.name}/{path.name}" if path.parent.name == "checkpoints" else path.name


def normal_tail(tau: torch.Tensor) -> torch.Tensor:
    """1 - Phi(tau), the fraction of a standard normal above tau."""
    return 0.5 * torch.erfc(tau.double() / math.sqrt(2.0))


@torch.no_grad()
def mean_loss(lm: Any, batches: list[Batch]) -> float:
    """The token-weighted mean cross-entropy over the windows, as `ega validate` computes val/loss."""
    total, tokens = 0.0, 0
    for batch in batches:
        total += lm.loss(batch).double().item() * batch[1].numel()
        tokens += batch[1].numel()
    return total / tokens


@torch.no_grad()
def _loss_with(lm: Any, batches: list[Batch], name: str, change: Any) -> float:
    """The loss after `change(parameter)` of every gate's parameter `name`, which is then restored exactly."""
    gates = lm.model.gates
    saved = [getattr(g, name).detach().clone() for g in gates]
    try:
        for g in gates:
            change(getattr(g, name))
        return mean_loss(lm, batches)
    finally:
        for g, value in zip(gates, saved, strict=True):
            getattr(g, name).copy_(value)


def evaluate_model(lm: Any, batches: list[Batch]) -> dict[str, Any]:
    """The numbers of one model (a CharLM in eval mode with a gate) on the windows `batches`."""
    from ega_lightning.callbacks.probe import GateProbe

    probe = GateProbe(lm, z_edges=torch.tensor(Z_EDGES))
    with probe:
        loss = mean_loss(lm, batches)
    above, mean_gate = probe.fractions(probe.totals())
    tau = torch.stack([g.tau.detach().float() for g in probe.gates])  # (n_layer, nh)
    alpha = torch.stack([g.alpha.detach().float() for g in probe.gates])
    # every point evaluated, delta = 0 and scale 1 too: they check the restores (they equal "loss")
    return {
        "loss": loss,
        "tau_shift_loss": [_loss_with(lm, batches, "tau", lambda t, d=d: t.add_(d)) for d in TAU_SHIFTS],
        "alpha_scale_loss": [_loss_with(lm, batches, "alpha", lambda a, s=s: a.mul_(s)) for s in ALPHA_SCALES],
        "tau": tau.tolist(),
        "alpha": alpha.tolist(),
        "frac_above_tau": above.tolist(),  # (n_layer, nh): measured
        "normal_tail": normal_tail(tau).tolist(),  # (n_layer, nh): 1 - Phi(tau)
        "mean_gate": mean_gate.tolist(),
        "z_counts": torch.stack(probe.z_counts).tolist(),  # (n_layer, len(z_edges) + 1), see GateProbe
    }


def evaluate_checkpoint(
    path: Path, max_eval_windows: int | None, eval_batch_size: int, data_dir: str | None, eval_znorm: str | None
) -> dict[str, Any]:
    from ega_lightning.data import CharDataModule
    from ega_lightning.gates import Gate
    from ega_lightning.module import CharLM

    if not path.is_file():
        raise UserError(f"--ckpt_path {path}: no such file. Give a checkpoint written by `ega fit`.")
    ckpt = torch.load(path, weights_only=True, map_location="cpu")
    if "hyper_parameters" not in ckpt:
        raise UserError(f"--ckpt_path {path} is not a checkpoint written by `ega fit` (it has no hyper-parameters).")
    lm = CharLM.load_from_checkpoint(path, map_location="cpu").eval()
    if not lm.model.gates:
        raise UserError(f"--ckpt_path {path} is a baseline (gate: none): it has no tau or alpha to move.")
    if not isinstance(lm.model.gates[0], Gate):
        raise UserError(
            f"--ckpt_path {path} has the gate {lm.hparams.gate!r}, which is no energy gate: it has no tau or alpha "
            "to move. `ega landscape` reads the EGA family's energy gates (`ega gates`: paper row EGA-*)."
        )
    trained_znorm = lm.model.cfg.gate_options.get("znorm", "prefix")
    for gate in lm.model.gates:
        gate.znorm = eval_znorm or trained_znorm
    corpus = ckpt.get("datamodule_hyper_parameters", {}).get("corpus", "tinyshakespeare")
    dm = CharDataModule(
        corpus,
        data_dir=data_dir,
        block_size=lm.hparams.block_size,
        eval_batch_size=eval_batch_size,
        max_eval_windows=max_eval_windows,
    )
    dm.setup()
    batches = list(dm.eval_windows("val"))
    options = {k: v for k, v in lm.model.cfg.gate_options.items() if k not in ("tau_init", "alpha_init")}
    return {
        "name": display_name(path),
        "step": ckpt.get("global_step"),
        "corpus": corpus,
        "gate": lm.hparams.gate,
        "gate_options": options,
        "tau_init": lm.hparams.tau_init,
        "trained_znorm": trained_znorm,
        "eval_znorm": eval_znorm or trained_znorm,
        "windows": sum(len(b[0]) for b in batches),
        **evaluate_model(lm, batches),
    }
