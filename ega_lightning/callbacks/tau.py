"""Tau tracking: the paper's claim that tau converges to ~0.35 with ~36% of keys above it."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import lightning as L
import torch

from ega_lightning.callbacks.probe import GateProbe, SlotProbe
from ega_lightning.gates import Gate
from ega_lightning.gates.slots import SlotGate
from ega_lightning.io import write_atomic


def _normal_tail(tau: float) -> float:
    """1 - Phi(tau)."""
    return 0.5 * math.erfc(tau / math.sqrt(2.0))


def tau_labels(gate: Gate) -> list[str]:
    """The tag of each entry of a gate's tau: ``head_H``; ``head_H/scale_K`` for a mixture of gates per head."""
    if gate.energies_per_head == 1:
        return [f"head_{h}" for h in range(gate.n_head)]
    return [f"head_{h}/scale_{k}" for k in range(gate.energies_per_head) for h in range(gate.n_head)]


class TauTracker(L.Callback):
    """Logs every gate head's tau and alpha, and on the validation windows the fraction of keys
    with z > tau and the mean gate value; detects when tau has converged; writes a JSON summary.

    Tags: ``gate/tau/layer_L/head_H``, ``gate/alpha/layer_L/head_H``, ``gate/tau_mean``,
    ``gate/alpha_mean``, ``gate/frac_above_tau`` (+ ``/layer_L`` and ``/layer_L/head_H``), beside it
    ``gate/normal_tail`` (+ ``/layer_L/head_H``: 1 - Phi(tau), the share a standard normal z puts above tau),
    ``gate/mean_gate`` (+ ``/layer_L``), and once, at the optimizer step where convergence is detected (never
    for a frozen tau, never during the learning-rate warm-up), ``gate/tau_converged``. Every other gate's own
    diagnostics (`SlotGate.diagnostics`: FoX's forget gate and its memory, an output gate's mean factor, a
    user's gate) as ``gate/<name>/layer_L/head_H`` and ``gate/<name>/layer_L``; what a gate fixes once
    (`SlotGate.describe`: ALiBi's slopes) as the text ``gate/describe`` at the start of fit.
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
        self._slots: SlotProbe | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        described = [d for m in pl_module.modules() if isinstance(m, SlotGate) and (d := m.describe())]
        if described:  # every layer's gate fixes the same: said once
            for logger in trainer.loggers:
                if hasattr(logger.experiment, "add_text"):
                    logger.experiment.add_text("gate/describe", described[0], global_step=trainer.global_step)

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        probe, slots = GateProbe(pl_module), SlotProbe(pl_module)
        self._probe = probe if probe.gates else None
        self._slots = slots if slots.active else None

    # Probing only around validation steps keeps other evaluation passes out of the statistics.
    def on_validation_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        for probe in (self._probe, self._slots):
            if probe is not None:
                probe.__enter__()

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        for probe in (self._probe, self._slots):
            if probe is not None:
                probe.__exit__(None, None, None)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        probe, self._probe = self._probe, None
        slots, self._slots = self._slots, None
        if trainer.sanity_checking:
            return
        if slots is not None:
            self._log_slots(trainer, pl_module, slots)
        if probe is None:
            return
        # every rank saw its own share of the windows: one sum over ranks, outside any rank-zero block
        totals = trainer.strategy.reduce(probe.totals().to(pl_module.device), reduce_op="sum")
        above, mean_gate = probe.fractions(totals)
        tau = torch.stack([g.tau.detach().float() for g in probe.gates])  # (n_layer, nh), or (n_layer, K nh)
        alpha = torch.stack([g.alpha.detach().float() for g in probe.gates])
        heads = tau_labels(probe.gates[0])
        metrics: dict[str, float] = {}
        for layer in range(tau.shape[0]):
            for i, head in enumerate(heads):
                metrics[f"gate/tau/layer_{layer}/{head}"] = tau[layer, i].item()
                metrics[f"gate/alpha/layer_{layer}/{head}"] = alpha[layer, i].item()
            metrics[f"gate/frac_above_tau/layer_{layer}"] = above[layer].mean().item()
            for i, head in enumerate(heads):  # beside 1 - Phi(tau) per head: the tail identity of a normal z
                metrics[f"gate/frac_above_tau/layer_{layer}/{head}"] = above[layer, i].item()
                metrics[f"gate/normal_tail/layer_{layer}/{head}"] = _normal_tail(tau[layer, i].item())
            metrics[f"gate/mean_gate/layer_{layer}"] = mean_gate[layer].mean().item()
        summary = {
            "gate/tau_mean": tau.mean().item(),
            "gate/alpha_mean": alpha.mean().item(),
            "gate/frac_above_tau": above.mean().item(),
            "gate/mean_gate": mean_gate.mean().item(),
        }
        metrics["gate/normal_tail"] = sum(_normal_tail(t) for t in tau.flatten().tolist()) / tau.numel()
        metrics.update(summary)
        if trainer.state.fn == "fit":
            # a frozen tau cannot converge; during the warm-up the learning rate is still rising
            learning = any(g.tau.requires_grad for g in probe.gates)
            warmup = int(getattr(pl_module.hparams, "warmup_steps", 0) or 0)
            self._update_convergence(trainer.global_step, summary, tau, above, warmup if learning else None)
            if self.converged is not None and self.converged["step"] == trainer.global_step:
                metrics["gate/tau_converged"] = self.converged["tau_mean"]
        pl_module.log_dict(metrics, sync_dist=True)  # equal on every rank: the mean is a no-op (silences a warning)

    def _log_slots(self, trainer: L.Trainer, pl_module: L.LightningModule, slots: SlotProbe) -> None:
        """Every other gate's diagnostics, reduced over ranks (one all-reduce, every rank)."""
        totals = trainer.strategy.reduce(slots.totals(pl_module.device), reduce_op="sum")
        metrics: dict[str, float] = {}
        for name, values in slots.means(totals).items():  # (n_layer, nh)
            for layer in range(values.shape[0]):
                metrics[f"gate/{name}/layer_{layer}"] = values[layer].mean().item()
                for head in range(values.shape[1]):
                    metrics[f"gate/{name}/layer_{layer}/head_{head}"] = values[layer, head].item()
        pl_module.log_dict(metrics, sync_dist=True)  # equal on every rank: the mean is a no-op

    def _update_convergence(
        self,
        step: int,
        summary: dict[str, float],
        tau: torch.Tensor,
        above: torch.Tensor | None = None,
        after: int | None = 0,
    ) -> None:
        """Records one validation; tau has converged once the last ``window`` validations after step ``after``
        (the warm-up) agree within ``tolerance`` (``after`` None: a frozen tau, which never converges)."""
        entry = {"step": step, **summary, "tau": tau.tolist()}
        if above is not None:
            entry["frac_above_tau_per_head"] = above.tolist()  # (n_layer, nh), beside "tau"
        self.history.append(entry)
        recent = [h["gate/tau_mean"] for h in self.history if after is not None and h["step"] > after][-self.window :]
        settled = len(recent) == self.window and max(recent) - min(recent) < self.tolerance
        if self.converged is None and settled:
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
