"""Tau tracking: the paper's claim that tau converges to ~0.35 with ~36% of keys above it."""

from __future__ import annotations

import json
import os
from typing import Any

import lightning as L
import torch

from ega_lightning.callbacks.probe import GateProbe
from ega_lightning.gates import Gate
from ega_lightning.io import write_atomic


class TauTracker(L.Callback):
    """Logs every gate head's tau and alpha, and on the validation windows the fraction of keys
    with z > tau and the mean gate value; detects when tau has converged; writes a JSON summary.

    Tags: ``gate/tau/layer_L/head_H``, ``gate/alpha/layer_L/head_H``, ``gate/tau_mean``,
    ``gate/alpha_mean``, ``gate/frac_above_tau`` (+ ``/layer_L`` and ``/layer_L/head_H``), ``gate/mean_gate``
    (+ ``/layer_L``), and once, at the step where convergence is detected, ``gate/tau_converged``.
    At every optimizer step (before clipping), the gradient norm over all gates of ``gate/grad_norm/tau``,
    ``gate/grad_norm/alpha`` and ``gate/grad_norm/energy`` (every other gate parameter: the energy
    projection, learned filter taps); a frozen tau (``learn_tau: false``) has no gradient and no tag.

    Args:
        window: number of consecutive validation checks tau must stay within ``tolerance``.
        tolerance: largest allowed change (max - min) of the mean tau over the window.
        summary_file: JSON written into the run directory at the end of fit.
    """

    def __init__(self, window: int = 4, tolerance: float = 0.01, summary_file: str = "gate_summary.json") -> None:
        if window < 2:
            raise ValueError(f"TauTracker window must be >= 2 validation checks, got {window}.")
        self.window, self.tolerance, self.summary_file = window, tolerance, summary_file
        self.history: list[dict[str, Any]] = []  # one entry per validation check
        self.converged: dict[str, float] | None = None
        self._probe: GateProbe | None = None

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        probe = GateProbe(pl_module)
        self._probe = probe if probe.gates else None

    # Probing only around validation steps keeps other evaluation passes out of the statistics.
    def on_validation_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if self._probe is not None:
            self._probe.__enter__()

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if self._probe is not None:
            self._probe.__exit__(None, None, None)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        probe, self._probe = self._probe, None
        if probe is None or trainer.sanity_checking:
            return
        # every rank saw its own share of the windows: one sum over ranks, outside any rank-zero block
        totals = trainer.strategy.reduce(probe.totals().to(pl_module.device), reduce_op="sum")
        above, mean_gate = probe.fractions(totals)
        tau = torch.stack([g.tau.detach().float() for g in probe.gates])  # (n_layer, nh)
        alpha = torch.stack([g.alpha.detach().float() for g in probe.gates])
        metrics: dict[str, float] = {}
        for layer in range(tau.shape[0]):
            for head in range(tau.shape[1]):
                metrics[f"gate/tau/layer_{layer}/head_{head}"] = tau[layer, head].item()
                metrics[f"gate/alpha/layer_{layer}/head_{head}"] = alpha[layer, head].item()
            metrics[f"gate/frac_above_tau/layer_{layer}"] = above[layer].mean().item()
            for head in range(tau.shape[1]):  # beside 1 - Phi(tau) per head: the tail identity of a normal z
                metrics[f"gate/frac_above_tau/layer_{layer}/head_{head}"] = above[layer, head].item()
            metrics[f"gate/mean_gate/layer_{layer}"] = mean_gate[layer].mean().item()
        summary = {
            "gate/tau_mean": tau.mean().item(),
            "gate/alpha_mean": alpha.mean().item(),
            "gate/frac_above_tau": above.mean().item(),
            "gate/mean_gate": mean_gate.mean().item(),
        }
        metrics.update(summary)
        if trainer.state.fn == "fit":
            self._update_convergence(trainer.global_step, summary, tau, above)
            if self.converged is not None and self.converged["step"] == trainer.global_step:
                metrics["gate/tau_converged"] = self.converged["tau_mean"]
        pl_module.log_dict(metrics, sync_dist=True)  # equal on every rank: the mean is a no-op (silences a warning)

    def _update_convergence(
        self, step: int, summary: dict[str, float], tau: torch.Tensor, above: torch.Tensor | None = None
    ) -> None:
        entry = {"step": step, **summary, "tau": tau.tolist()}
        if above is not None:
            entry["frac_above_tau_per_head"] = above.tolist()  # (n_layer, nh), beside "tau"
        self.history.append(entry)
        recent = [h["gate/tau_mean"] for h in self.history[-self.window :]]
        if self.converged is None and len(recent) == self.window and max(recent) - min(recent) < self.tolerance:
            self.converged = {"step": step, "tau_mean": summary["gate/tau_mean"]}

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        # the gradients are already reduced over ranks: equal everywhere, no collective needed
        norms: dict[str, list[torch.Tensor]] = {"tau": [], "alpha": [], "energy": []}
        for gate in (m for m in pl_module.modules() if isinstance(m, Gate)):
            for name, p in gate.named_parameters():
                if p.grad is not None:
                    norms[name if name in ("tau", "alpha") else "energy"].append(p.grad.detach().float().norm())
        metrics = {f"gate/grad_norm/{k}": torch.linalg.vector_norm(torch.stack(v)) for k, v in norms.items() if v}
        if metrics:
            pl_module.log_dict(metrics)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        log_dir = trainer.log_dir  # a broadcast: every rank asks, before the rank-zero block
        if not trainer.is_global_zero or log_dir is None or not self.history:
            return
        last = self.history[-1]
        summary = {
            "converged": self.converged is not None,
            "converged_step": self.converged["step"] if self.converged else None,
            "converged_tau_mean": self.converged["tau_mean"] if self.converged else None,
            "window": self.window,
            "tolerance": self.tolerance,
            "final": {k.removeprefix("gate/"): v for k, v in last.items()},
            "history": self.history,
        }
        write_atomic(os.path.join(log_dir, self.summary_file), json.dumps(summary, indent=2))

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history, "converged": self.converged}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = list(state_dict["history"])
        self.converged = state_dict["converged"]
