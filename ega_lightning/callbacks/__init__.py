from ega_lightning.callbacks.hparams import HParamsSummary

__all__ = ["HParamsSummary"]
