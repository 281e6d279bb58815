"""Where the time of EGA-1's overhead goes: the attention kernel's share, the padded matmuls', the gate's
z-norm and sigmoid, and the rest, each timed apart in the same repetitions as the whole steps and
reported in points of the baseline's step with 95% intervals of the median.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ega_lightning.bench.harness import paired_ratios, sync
from ega_lightning.experiments.stats import median_interval
from ega_lightning.gates import Gate
from ega_lightning.model.fused import buffer_width, padded_proj_weight, padded_qkv_weights, qkv_heads

# EGA-1: the gate whose overhead the bench splits (the kernel's share, the matmuls', its z-norm and sigmoid's, the rest)
SPLIT_GATE = "linear"
# the parts that make the padded channel's design floor: no exact formulation on stock kernels avoids them
FLOOR_PARTS = ("kernel", "matmuls")


class PartTiming:
    """One part of an attention layer's training step alone, on the model's shapes at head size hs + extra
    (``extra=0``: the baseline's), its inputs drawn once; `step()` times one forward + backward of it, in
    the same repetitions as the contenders."""

    def __init__(
        self, name: str, batch_size: int, shape: dict[str, Any], extra: int, device: torch.device, precision: str
    ):
        nh, T = shape["n_head"], shape["block_size"]
        hs = shape["n_embd"] // nh
        self.name, self.device, self.extra, self.layout = name, device, extra, (T, nh, hs, hs + extra)
        self.dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float32
        self.generator = torch.Generator().manual_seed(0)
        self.tokens = batch_size * T
        self.times: list[float] = []
        self.first_s: float | None = None

    def randn(self, *size: int) -> torch.Tensor:
        return torch.randn(*size, generator=self.generator).to(self.device, self.dtype)

    def run(self) -> None:
        raise NotImplementedError

    def step(self, record: bool = True) -> None:
        sync(self.device)
        t0 = time.perf_counter()
        self.run()
        sync(self.device)
        if record:
            self.times.append(time.perf_counter() - t0)


class KernelTiming(PartTiming):
    """The attention kernel: SDPA forward and backward, scaled by the true head size, on the q, k, v views
    of one Q/K/V matmul output (B T, width) laid out as the model's (`buffer_width`), with the output's
    gradient laid out as c_proj's backward hands it, (B, T, nh, d) seen as (B, nh, T, d)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        T, nh, _, d = self.layout
        self.buffer = self.randn(self.tokens, buffer_width(self.layout)).requires_grad_()
        self.grad_out = self.randn(self.tokens // T, T, nh, d).transpose(1, 2)  # (B, nh, T, d)

    def run(self) -> None:
        q, k, v = qkv_heads(self.buffer, self.layout)  # (B, nh, T, d) views
        scale = 1.0 / math.sqrt(self.layout[2])
        F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale).backward(self.grad_out)
        self.buffer.grad = None


class MatmulTiming(PartTiming):
    """The two matmuls, forward and backward as training runs them: Q/K/V (B T, C) -> the buffer's width
    (`buffer_width`) and c_proj (B T, nh d) -> C. With extra > 0 the padded weights are built every step
    from the parameters, as training builds them."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        _, nh, hs, d = self.layout
        C = nh * hs
        self.qkv_weight, self.qkv_bias, self.proj_weight = self.randn(3 * C, C), self.randn(3 * C), self.randn(C, C)
        self.x, self.y = self.randn(self.tokens, C), self.randn(self.tokens, nh * d)  # the two matmuls' inputs
        # the Q/K/V buffer's gradient as GatedQKV's backward builds it: rows of the model's width (`buffer_width`)
        self.qkv_grad, self.proj_grad = self.randn(self.tokens, buffer_width(self.layout)), self.randn(self.tokens, C)
        self.proj_bias = self.randn(C)

    def run(self) -> None:
        if self.extra:  # the model's own padded weights
            _, nh, _, d = self.layout
            weight, bias = padded_qkv_weights(self.qkv_weight, self.qkv_bias, None, self.layout)
            proj = padded_proj_weight(self.proj_weight, nh, d)
        else:
            weight, bias, proj = self.qkv_weight, self.qkv_bias, self.proj_weight
        torch.addmm(bias, self.x, weight.t())
        self.qkv_grad.mm(weight), self.qkv_grad.t().mm(self.x), self.qkv_grad.sum(0)
        torch.addmm(self.proj_bias, self.y, proj.t())
        self.proj_grad.mm(proj), self.proj_grad.t().mm(self.y), self.proj_grad.sum(0)


def without_gate_arithmetic(model: nn.Module) -> nn.Module:
    """`model` with every gate's z-norm and sigmoid replaced by log g = 0 (g = 1, so the same function as the
    baseline with the same weights), on the same path: the energy, the padded layout and the write of log g
    stay. Against the gated model, the time of the gate's own arithmetic (forward, recomputation, backward)."""
    for module in model.modules():
        if isinstance(module, Gate):
            module.log_gate_from_energy = lambda e: e.float() * 0.0  # an instance attribute: this model only
    return model


def overhead_split(
    gated: list[float], base: list[float], parts: dict[str, tuple[list[float], list[float], int]]
) -> dict[str, Any]:
    """Per repetition, in points of the baseline's step: the gated model's overhead, each part's extra
    time (part: (times without it, times with it, how many times a step runs it), e.g. one layer's call
    counted n_layer times), and the rest after the parts; each as median with its 95% interval, and each
    part's medians without and with it in ms."""
    total = [100 * (g / b - 1) for g, b in zip(gated, base, strict=True)]
    points = {
        name: [100 * count * (p - q) / b for q, p, b in zip(plain, padded, base, strict=True)]
        for name, (plain, padded, count) in parts.items()
    }
    rest = [t - sum(per_rep) for t, *per_rep in zip(total, *points.values(), strict=True)]
    series = [("total", total), *points.items(), ("rest", rest)]
    # the design's floor (issue 55): what the padded channel itself costs, the kernel at the padded head size
    # and the matmuls' extra rows and columns, and the gated model's overhead above it, per repetition
    floor_parts = [points[name] for name in FLOOR_PARTS if name in points]
    if floor_parts:
        floor = [sum(per_rep) for per_rep in zip(*floor_parts, strict=True)]
        series += [("floor", floor), ("above_floor", [t - f for t, f in zip(total, floor, strict=True)])]
    split: dict[str, Any] = {
        name: {"points": statistics.median(v), "interval": median_interval(v)} for name, v in series
    }
    for name, (plain, padded, _) in parts.items():
        split[name]["ms"] = {"plain": 1e3 * statistics.median(plain), "padded": 1e3 * statistics.median(padded)}
        split[name]["ratio"] = statistics.median(paired_ratios(padded, plain))
    return split
