"""A run's segments: which CPU kind trained which steps, one line per `ega fit` that trained it.

A run stopped and resumed on another machine was trained partly on each, and machines round differently (AVX2,
AVX-512 and AMX kernels, MKL's dispatch): a record must say which steps each trained, not only the machine that
finished it. Each fit that starts training appends one JSON line to ``<run>/segments.jsonl``, on global rank 0:
the step it starts from (0, or the checkpoint's), when, and the CPU kind (`host.cpu_kind`: model, torch's kernel
capability, vector units, cores) with the devices it trained on. A segment ends where the next one starts (the next
fit resumes from the last checkpoint), the last where the run ends: `ega_lightning.experiments.rundirs` reads the
file into the record's ``segments`` (`runs.read_segments`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_only

from ega_lightning import host
from ega_lightning.runs import SEGMENTS as FILE


def this_segment(step: int, trainer: L.Trainer) -> dict[str, Any]:
    """The segment a fit starting at ``step`` trains: where, on what, from when."""
    root = trainer.strategy.root_device
    return {
        "from_step": step,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu": host.cpu_kind(torch.backends.cpu.get_cpu_capability()),
        "device": root.type if root.type == "cpu" else torch.cuda.get_device_name(root),
        "world_size": trainer.world_size,
        "precision": str(trainer.precision),
        "torch": torch.__version__,
    }


class RunSegments(L.Callback):
    """Appends this fit's segment to ``<dirpath>/segments.jsonl`` when training starts (after a resume's restore,
    so its step is the checkpoint's)."""

    def __init__(self, dirpath: Path) -> None:
        self.dirpath = Path(dirpath)

    @rank_zero_only
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.dirpath.mkdir(parents=True, exist_ok=True)
        with open(self.dirpath / FILE, "a", encoding="utf-8") as out:
            out.write(json.dumps(this_segment(trainer.global_step, trainer)) + "\n")
