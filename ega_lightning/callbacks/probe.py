"""Forward hooks that record what every gate of a model computed, for the gate callbacks."""

from __future__ import annotations

from types import TracebackType

import torch
from torch import nn

from ega_lightning.gates import Gate


class GateProbe:
    """While active, accumulates per layer and head: keys seen, keys with z > tau, sum of gate values.

    The z is recomputed from the gate's input (only while probing), so the gates
    themselves stay free of bookkeeping. With ``keep_last=True`` the last gate
    values (B, nh, T) of every layer are kept too, for pictures. With ``z_edges`` (E,), a histogram
    of z per layer (all heads): ``z_counts[layer]`` (E + 1,), count i of edges[i-1] < z <= edges[i],
    the first and last counts for z at or below edges[0] and above edges[-1].
    """

    def __init__(self, model: nn.Module, keep_last: bool = False, z_edges: torch.Tensor | None = None) -> None:
        self.gates: list[Gate] = [m for m in model.modules() if isinstance(m, Gate)]
        self.keep_last, self.z_edges = keep_last, z_edges
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self.reset()

    def reset(self) -> None:
        self.keys = torch.zeros(())
        self.above = [torch.zeros(g.n_head) for g in self.gates]  # (nh,) per layer
        self.gate_sum = [torch.zeros(g.n_head) for g in self.gates]
        self.last: list[torch.Tensor] = [torch.empty(0) for _ in self.gates]
        bins = 0 if self.z_edges is None else len(self.z_edges) + 1
        self.z_counts = [torch.zeros(bins, dtype=torch.long) for _ in self.gates]

    def _hook(self, layer: int):
        def record(gate: Gate, inputs: tuple[torch.Tensor], log_g: torch.Tensor) -> None:
            with torch.no_grad():
                z = gate.z(inputs[0])  # (B, nh, T)
                above = (z > gate.tau[:, None]).sum(dim=(0, 2)).float()
                self.above[layer] = self.above[layer].to(z.device) + above
                self.gate_sum[layer] = self.gate_sum[layer].to(z.device) + log_g.exp().sum(dim=(0, 2))
                if layer == 0:
                    self.keys = self.keys.to(z.device) + z.shape[0] * z.shape[2]
                if self.keep_last:
                    self.last[layer] = log_g.exp().detach()
                if self.z_edges is not None:
                    bins = torch.bucketize(z.flatten(), self.z_edges.to(z.device, z.dtype))
                    counts = bins.bincount(minlength=len(self.z_edges) + 1)
                    self.z_counts[layer] = self.z_counts[layer].to(z.device) + counts

        return record

    def __enter__(self) -> GateProbe:
        self._handles = [g.register_forward_hook(self._hook(i)) for i, g in enumerate(self.gates)]
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def totals(self) -> torch.Tensor:
        """(2 * n_layer * nh + 1,) flat sums, ready for one all-reduce: above, gate_sum, keys."""
        return torch.cat([torch.stack(self.above).flatten(), torch.stack(self.gate_sum).flatten(), self.keys[None]])

    def fractions(self, totals: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """From (reduced) totals: fraction of keys with z > tau and mean gate value, each (n_layer, nh)."""
        n = len(self.gates) * self.gates[0].n_head
        keys = totals[-1].clamp_min(1)
        above = totals[:n].view(len(self.gates), -1) / keys
        mean_gate = totals[n : 2 * n].view(len(self.gates), -1) / keys
        return above, mean_gate
