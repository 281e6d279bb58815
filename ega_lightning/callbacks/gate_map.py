"""A picture of which characters the gates keep: a text snippet coloured by gate value, per layer and head."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from matplotlib.figure import Figure  # the object API: no pyplot state, no display needed

from ega_lightning.callbacks.probe import GateProbe

_SHOWN = {"\n": "⏎", " ": "·"}
WIDTH_IN = 8.0  # inches at 100 dpi: about TensorBoard's card width, whatever the snippet's length


def gate_map_figure(text: str, gates: torch.Tensor, layer: int) -> Figure:
    """text of T characters; gates (nh, T) in [0, 1] of one layer -> one row of coloured characters per head,
    the colour bar inside the picture."""
    n_head, T = gates.shape
    fig = Figure(figsize=(WIDTH_IN, 0.42 * n_head + 0.8), dpi=100)
    ax = fig.subplots()
    image = ax.imshow(gates.cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    size = max(5.0, min(9.0, 560.0 / max(T, 1)))  # characters stay legible as the snippet grows
    for head in range(n_head):
        for j, ch in enumerate(text):
            colour = "black" if gates[head, j] > 0.6 else "white"
            ax.text(j, head, _SHOWN.get(ch, ch), ha="center", va="center", fontsize=size, color=colour)
    ax.set_yticks(range(n_head), [f"head {h}" for h in range(n_head)])
    ax.set_xticks([])
    ax.set_title(f"layer {layer}: gate g of each key", fontsize=9, loc="left")
    fig.colorbar(image, ax=ax, fraction=0.025, pad=0.01)
    fig.tight_layout()
    return fig


class GateMap(L.Callback):
    """At validations, logs ``gate/map/layer_L``: a fixed snippet of the validation split, each character
    coloured by its gate value as a key, one row per head; drawn at the first validation of a process (a
    fresh run's first, or the first after a resume, which redraws what TensorBoard dropped), at the first
    validation past each multiple of ``every_n_steps``, and at the last validation (the model the run ends
    with); stamped at the step of that validation's scalars.

    Args:
        every_n_steps: the schedule between the first and the last picture, in optimizer steps.
        num_chars: snippet length (at most the model's block_size).
        offset: where in the validation split the snippet starts.
    """

    def __init__(self, every_n_steps: int = 1000, num_chars: int = 64, offset: int = 0) -> None:
        if every_n_steps < 1:
            raise ValueError(f"GateMap every_n_steps must be >= 1, got {every_n_steps}.")
        self.every_n_steps, self.num_chars, self.offset = every_n_steps, num_chars, offset
        self._last_validation: int | None = None  # this process's: a resume draws again

    def due(self, step: int, max_steps: int | None) -> bool:
        """Whether the validation at optimizer step ``step`` draws (see the class)."""
        last, self._last_validation = self._last_validation, step
        final = max_steps is not None and max_steps > 0 and step >= max_steps
        return last is None or final or step // self.every_n_steps > last // self.every_n_steps

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        if self.due(trainer.global_step, trainer.max_steps):
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
        text = dm.tokenizer.decode(ids[0])
        # Lightning stamps a validation's scalars one below the optimizer step it ran after
        step = max(trainer.global_step - 1, 0)
        for layer, g in enumerate(probe.last):
            fig = gate_map_figure(text, g[0].float(), layer)  # (nh, n)
            for logger in loggers:
                logger.experiment.add_figure(f"gate/map/layer_{layer}", fig, global_step=step)
