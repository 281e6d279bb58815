"""The model in plain PyTorch (no Lightning): GPT and its attention layer with its fast paths."""

from ega_lightning.model.attention import (
    ATTENTION_IMPLS,
    CausalSelfAttention,
    available_attention_impls,
    has_hooks,
)
from ega_lightning.model.flex import require_flex_attention
from ega_lightning.model.gpt import GPT, GPTConfig

__all__ = [
    "ATTENTION_IMPLS",
    "GPT",
    "CausalSelfAttention",
    "GPTConfig",
    "available_attention_impls",
    "has_hooks",
    "require_flex_attention",
]
