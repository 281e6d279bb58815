"""What training logs and keeps beside the loss: the callbacks a run's config names (tau, the gate map,
the generalization gap, the TensorBoard views, the logger, checkpoints, the pace of the steps)."""

from ega_lightning.callbacks.board import HParamsSummary, RunBoard
from ega_lightning.callbacks.gap import GeneralizationGap
from ega_lightning.callbacks.gate_map import GateMap
from ega_lightning.callbacks.keep import KeepCheckpointAt
from ega_lightning.callbacks.last import LastCheckpoint
from ega_lightning.callbacks.logger import RunLogger
from ega_lightning.callbacks.pace import StepPace
from ega_lightning.callbacks.segments import RunSegments
from ega_lightning.callbacks.tau import TauTracker

__all__ = [
    "GateMap",
    "GeneralizationGap",
    "HParamsSummary",
    "KeepCheckpointAt",
    "LastCheckpoint",
    "RunBoard",
    "RunLogger",
    "RunSegments",
    "StepPace",
    "TauTracker",
]
