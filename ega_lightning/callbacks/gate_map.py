"""A picture of which characters the gates keep: a text snippet coloured by gate value."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from matplotlib.figure import Figure  # the object API: no pyplot state, no display needed

from ega_lightning.callbacks.probe import GateProbe

_SHOWN = {"\n": "⏎", " ": "·"}


def gate_map_figure(text: str, gates: torch.Tensor) -> Figure:
    """text of T characters; gates (n_layer, T) in [0, 1] -> one row of coloured characters per layer."""
    n_layer, T = gates.shape
    fig = Figure(figsize=(max(6.0, 0.16 * T), 0.45 * n_layer + 0.9))
    ax = fig.subplots()
    image = ax.imshow(gates.cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for layer in range(n_layer):
        for j, ch in enumerate(text):
            colour = "black" if gates[layer, j] > 0.6 else "white"
            ax.text(j, layer, _SHOWN.get(ch, ch), ha="center", va="center", fontsize=7, color=colour)
    ax.set_yticks(range(n_layer), [f"layer {i}" for i in range(n_layer)])
    ax.set_xticks([])
    fig.colorbar(image, ax=ax, fraction=0.02, pad=0.01, label="gate g (mean over heads)")
    fig.tight_layout()
    return fig


class GateMap(L.Callback):
    """Every ``every_n_steps`` (at a validation), logs ``gate/map``: a fixed snippet of the validation
    split, each character coloured by its gate value as a key, one row per layer (mean over heads).

    Args:
        every_n_steps: minimum number of optimizer steps between two pictures.
        num_chars: snippet length (at most the model's block_size).
        offset: where in the validation split the snippet starts.
    """

    def __init__(self, every_n_steps: int = 1000, num_chars: int = 96, offset: int = 0) -> None:
        self.every_n_steps, self.num_chars, self.offset = every_n_steps, num_chars, offset
        self._last_step: int | None = None

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        step = trainer.global_step
        if self._last_step is not None and step - self._last_step < self.every_n_steps:
            return
        self._last_step = step
        self._log_map(trainer, pl_module)

    @rank_zero_only  # one forward of the plain module, no collective inside
    def _log_map(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loggers = [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]
        probe = GateProbe(pl_module, keep_last=True)
        if not probe.gates or not loggers:
            return
        dm = trainer.datamodule
        n = min(self.num_chars, dm.block_size)
        ids = dm.splits["val"][self.offset : self.offset + n].long()[None].to(pl_module.device)  # (1, n)
        with torch.no_grad(), trainer.precision_plugin.forward_context(), probe:
            pl_module(ids)
        gates = torch.stack([g[0].float().mean(dim=0) for g in probe.last])  # (n_layer, n)
        fig = gate_map_figure(dm.tokenizer.decode(ids[0]), gates)
        for logger in loggers:
            logger.experiment.add_figure("gate/map", fig, global_step=trainer.global_step)

    def state_dict(self) -> dict[str, int | None]:
        return {"last_step": self._last_step}

    def load_state_dict(self, state_dict: dict[str, int | None]) -> None:
        self._last_step = state_dict["last_step"]
