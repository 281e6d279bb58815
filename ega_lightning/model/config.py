"""The model's options in one dataclass (litgpt's shape): `GPT` and every attention path read them from here.

Architecture choices (the gates, the attention order, the Q/K/V bias, the residual init, the position
encoding) are fields with the default that every committed record ran; how the attention is computed
(``attention``: the reference formula or a fast path) is a field too, chosen once when the model is built
(`gpt.ATTENTION`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ega_lightning.gates import NO_GATE, KeyBias, OutputGate
from ega_lightning.model.position import POSITIONS  # the position encodings by name (`model.position`)

__all__ = ["POSITIONS", "GPTConfig"]


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True
    gate: str | type[KeyBias] = "none"  # a name or import path (see gates.registry), or a KeyBias subclass
    gate_options: dict[str, Any] = field(default_factory=dict)  # passed to the gate's __init__
    attention: str = "fused"  # the path that computes the attention (gpt.ATTENTION): not what it computes
    attention_options: dict[str, Any] = field(default_factory=dict)  # passed to that path's __init__ (a variant)
    output_gate: str | type[OutputGate] = NO_GATE  # the output gate's slot (see gates.slots)
    qkv_bias: bool | None = None  # the Q/K/V projection's bias; None: as `bias` (False: the author's)
    scale_residual_init: bool = True  # c_proj's init std 0.02 / sqrt(2 n_layer); False: 0.02 (the author's)
    dropout_before_gate: bool = False  # attention dropout, then the energy gate and renormalise (the author's)
    position: str = "learned"  # the position encoding, a name of POSITIONS (`model.position`)

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    @property
    def qkv_has_bias(self) -> bool:
        return self.bias if self.qkv_bias is None else self.qkv_bias
