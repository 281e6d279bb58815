from ega_lightning.model.attention import ATTENTION_IMPLS, CausalSelfAttention
from ega_lightning.model.gpt import GPT, GPTConfig

__all__ = ["ATTENTION_IMPLS", "GPT", "CausalSelfAttention", "GPTConfig"]
