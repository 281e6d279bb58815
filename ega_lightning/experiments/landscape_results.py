"""The JSONs of `ega landscape` as plain data, for the report (which builds no model itself).

`ega landscape --ckpt_path <run>/checkpoints/<file> ... --out results/landscape/<name>.json` writes
one JSON per command; every JSON in ``results/landscape/`` (beside the records) is read here. Each
evaluated checkpoint becomes one :class:`Evaluation`: the validation loss with every tau shifted
and every alpha scaled, and per head the measured fraction of keys above tau beside 1 - Phi(tau).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ega_lightning.experiments.whole_split import load_each

DIRNAME = "landscape"  # beside the records directory: results/landscape/
FORMAT = 1  # of the JSON `ega landscape` writes and this module reads: stated here, below the command


@dataclass(frozen=True)
class Evaluation:
    """One checkpoint evaluated by `ega landscape` (losses in nats/char)."""

    source: str  # the JSON's file name
    run: str  # the run directory the checkpoint came from ("" when it was not in <run>/checkpoints/)
    checkpoint: str  # the checkpoint's file name: step250.ckpt, last.ckpt, ...
    step: int | None
    corpus: str
    gate: str
    gate_options: dict[str, Any]
    tau_init: float | None
    trained_znorm: str
    eval_znorm: str
    whole_split: bool  # evaluated on every validation window, as `ega fit` validates
    windows: int
    loss: float
    tau_shifts: tuple[float, ...]
    tau_shift_loss: tuple[float, ...]
    alpha_scales: tuple[float, ...]
    alpha_scale_loss: tuple[float, ...]
    tau: list[list[float]]  # (n_layer, nh)
    frac_above_tau: list[list[float]]  # (n_layer, nh): measured
    normal_tail: list[list[float]]  # (n_layer, nh): 1 - Phi(tau)
    z_edges: tuple[float, ...]
    z_counts: list[list[int]]  # (n_layer, len(z_edges) + 1)

    @property
    def final(self) -> bool:
        return self.checkpoint == "last.ckpt"

    @property
    def as_trained(self) -> bool:
        return self.eval_znorm == self.trained_znorm

    def shift_cost(self, delta: float) -> float:
        """Loss with every tau moved by ``delta``, minus the loss as trained."""
        return self.tau_shift_loss[self.tau_shifts.index(delta)] - self.loss

    def alpha_cost(self, scale: float) -> float:
        """Loss with every alpha multiplied by ``scale``, minus the loss as trained (0: the plain attention)."""
        return self.alpha_scale_loss[self.alpha_scales.index(scale)] - self.loss

    @property
    def tau_shift_costs(self) -> dict[float, float]:
        """delta -> `shift_cost(delta)`, for every delta evaluated."""
        return {d: self.shift_cost(d) for d in self.tau_shifts}

    @property
    def alpha_scale_costs(self) -> dict[float, float]:
        """scale -> `alpha_cost(scale)`, for every scale evaluated."""
        return {a: self.alpha_cost(a) for a in self.alpha_scales}

    def tail_gaps(self) -> list[float]:
        """Per head: measured fraction above tau minus 1 - Phi(tau)."""
        return [
            f - t
            for frac_row, tail_row in zip(self.frac_above_tau, self.normal_tail, strict=True)
            for f, t in zip(frac_row, tail_row, strict=True)
        ]

    def mean(self, key: str) -> float:
        values = [v for row in getattr(self, key) for v in row]
        return math.fsum(values) / len(values)

    def z_density(self) -> tuple[list[float], list[float]]:
        """Bin centres and the density of z (all layers and heads) inside the edges."""
        counts = [sum(layer[i] for layer in self.z_counts) for i in range(len(self.z_edges) + 1)]
        total = sum(counts)
        centres, density = [], []
        for i in range(1, len(self.z_edges)):  # bin i: edges[i-1] < z <= edges[i]
            width = self.z_edges[i] - self.z_edges[i - 1]
            centres.append((self.z_edges[i] + self.z_edges[i - 1]) / 2)
            density.append(counts[i] / total / width if total else 0.0)
        return centres, density

    @property
    def label(self) -> str:
        z = self.trained_znorm if self.as_trained else f"{self.trained_znorm}, evaluated {self.eval_znorm}"
        return f"{self.run or self.source}/{self.checkpoint} (step {self.step}, z {z})"


def _evaluation(source: str, result: dict[str, Any], c: dict[str, Any]) -> Evaluation:
    run, _, checkpoint = str(c["name"]).rpartition("/")
    return Evaluation(
        source=source,
        run=run,
        checkpoint=checkpoint,
        step=c.get("step"),
        corpus=str(c.get("corpus", "?")),
        gate=str(c["gate"]),
        gate_options=dict(c.get("gate_options") or {}),
        tau_init=c.get("tau_init"),
        trained_znorm=str(c["trained_znorm"]),
        eval_znorm=str(c["eval_znorm"]),
        whole_split=result.get("max_eval_windows") is None,
        windows=int(c["windows"]),
        loss=float(c["loss"]),
        **{k: tuple(map(float, result[k])) for k in ("tau_shifts", "alpha_scales", "z_edges")},  # the command's
        **{k: tuple(map(float, c[k])) for k in ("tau_shift_loss", "alpha_scale_loss")},  # the checkpoint's
        **{k: c[k] for k in ("tau", "frac_above_tau", "normal_tail", "z_counts")},  # per layer, as written
    )


def load(directory: Path) -> list[Evaluation]:
    """Every checkpoint of every JSON in ``directory`` (none when it does not exist), in file order."""
    found = load_each(directory, _checkpoints, "a JSON that `ega landscape` wrote", "ega landscape ... --out")
    return [e for checkpoints in found for e in checkpoints]


def _checkpoints(path: Path, result: dict[str, Any]) -> list[Evaluation]:
    if result.get("format") != FORMAT:
        raise ValueError(f"format {result.get('format')!r}, expected {FORMAT}")
    return [_evaluation(path.name, result, c) for c in result["checkpoints"]]
