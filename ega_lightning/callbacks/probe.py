"""Forward hooks that record what every gate of a model computed, for the gate callbacks."""

from __future__ import annotations

from types import TracebackType

import torch
from torch import nn

from ega_lightning.gates import Gate
from ega_lightning.gates.slots import SlotGate
from ega_lightning.model.attention import CausalSelfAttention


class GateProbe:
    """While active, accumulates per layer and head: keys seen, keys with z > tau, sum of gate values.
    A mixture of K gates per head (`Gate.energies_per_head`) counts z > tau per gate: per entry of its tau
    (K nh of them, row k nh + h), beside one sum of gate values per head.

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
        self.above = [torch.zeros(g.tau.numel()) for g in self.gates]  # (nh,) per layer; (K nh,) for a mixture
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
        """From (reduced) totals: fraction of keys with z > tau (n_layer, tau entries: nh, or K nh for a mixture)
        and mean gate value (n_layer, nh)."""
        n_above, n_gate = len(self.gates) * self.gates[0].tau.numel(), len(self.gates) * self.gates[0].n_head
        keys = totals[-1].clamp_min(1)
        above = totals[:n_above].view(len(self.gates), -1) / keys
        mean_gate = totals[n_above : n_above + n_gate].view(len(self.gates), -1) / keys
        return above, mean_gate


def _reports(gate: object) -> bool:
    """A gate with diagnostics of its own (an energy gate's statistics are GateProbe's)."""
    return isinstance(gate, SlotGate) and bool(gate.diagnostic_titles) and not isinstance(gate, Gate)


class SlotProbe:
    """While active, accumulates per layer the `SlotGate.diagnostics` of every gate that reports some (FoX's
    forget gate, the output gates, a user's gate; an energy gate's statistics are `GateProbe`'s), from each
    attention layer's LayerNorm-ed input."""

    def __init__(self, model: nn.Module) -> None:
        self.layers = [m for m in model.modules() if isinstance(m, CausalSelfAttention)]
        self.slots: list[list[SlotGate]] = [[g for g in (m.gate, m.output_gate) if _reports(g)] for m in self.layers]
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self.sums: list[dict[str, torch.Tensor]] = [{} for _ in self.layers]
        self.positions = torch.zeros(())

    @property
    def active(self) -> bool:
        return any(self.slots)

    def titles(self) -> dict[str, str]:
        """Every reported name with its chart title, in the order the gates declare them."""
        return {name: title for gates in self.slots for g in gates for name, title in g.diagnostic_titles.items()}

    def _hook(self, layer: int):
        def record(attn: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            x = inputs[0]  # (B, T, C)
            with torch.no_grad():
                for gate in self.slots[layer]:
                    for name, total in gate.diagnostics(x).items():
                        kept = self.sums[layer].get(name)
                        self.sums[layer][name] = total.float() if kept is None else kept + total.float()
                if layer == 0:
                    self.positions = self.positions.to(x.device) + x.shape[0] * x.shape[1]

        return record

    def __enter__(self) -> SlotProbe:
        self._handles = [m.register_forward_hook(self._hook(i)) for i, m in enumerate(self.layers) if self.slots[i]]
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def names(self) -> list[str]:
        return sorted({name for sums in self.sums for name in sums})

    def totals(self, device: torch.device) -> torch.Tensor:
        """(n_layer * n_names * nh + 1,) flat sums, ready for one all-reduce (names sorted, positions last)."""
        parts = [self.sums[layer][name].to(device) for layer in range(len(self.layers)) for name in self.names()]
        return torch.cat([*parts, self.positions.to(device)[None].float()])

    def means(self, totals: torch.Tensor) -> dict[str, torch.Tensor]:
        """From (reduced) totals: name -> (n_layer, nh) means over the positions, and each gate class's derived."""
        names, n_layer = self.names(), len(self.layers)
        if not names:
            return {}
        per = totals[:-1].view(n_layer, len(names), -1) / totals[-1].clamp_min(1)
        means = {name: per[:, i] for i, name in enumerate(names)}
        for cls in {type(g) for gates in self.slots for g in gates}:
            means.update(cls.derived({k: v for k, v in means.items() if k in cls.diagnostic_titles}))
        return means
