"""The model in plain PyTorch (no Lightning): GPT, its config, and its attention layer on each path."""

from ega_lightning.model.attention import CausalSelfAttention
from ega_lightning.model.config import GPTConfig
from ega_lightning.model.flex import FlexAttention, require_flex_attention
from ega_lightning.model.fused import FusedAttention
from ega_lightning.model.gpt import ATTENTION, ATTENTION_IMPLS, GPT, attention_layer, available_attention_impls
from ega_lightning.model.torch_private import has_hooks

__all__ = [
    "ATTENTION",
    "ATTENTION_IMPLS",
    "GPT",
    "CausalSelfAttention",
    "FlexAttention",
    "FusedAttention",
    "GPTConfig",
    "attention_layer",
    "available_attention_impls",
    "has_hooks",
    "require_flex_attention",
]
