"""What training logs and keeps beside the loss: the callbacks a run's config names (tau, the gate map,
the generalization gap, hyper-parameters, checkpoints)."""

from ega_lightning.callbacks.gap import GeneralizationGap
from ega_lightning.callbacks.gate_map import GateMap
from ega_lightning.callbacks.hparams import HParamsSummary
from ega_lightning.callbacks.keep import KeepCheckpointAt
from ega_lightning.callbacks.last import LastCheckpoint
from ega_lightning.callbacks.tau import TauTracker

__all__ = ["GateMap", "GeneralizationGap", "HParamsSummary", "KeepCheckpointAt", "LastCheckpoint", "TauTracker"]
