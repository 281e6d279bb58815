"""`ega bench`: what each gate costs, measured side by side in one process.

For every model size and gate config: the time of one training step (forward, backward,
AdamW step), interleaved across gates and repeated, reported as median with min and max,
the ratio to the baseline ``none``, tokens per second and memory; then our baseline against
a nanoGPT-style model written here; then generation speed with and without the KV cache.

    ega bench                               # cpu and paper sizes, every gate config, this machine
    ega bench --sizes cpu --repeats 9 --precision bf16-mixed --device cuda
    ega bench --sizes cpu --gates linear --compile   # also every gate under torch.compile, compile time apart
    ega bench --generation_only --gates linear --generation_repeats 5   # KV cache against recompute only
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from ega_lightning.data.corpora import CORPORA
from ega_lightning.errors import UserError
from ega_lightning.gates import SLOTS, Gate, gate_class, gate_names
from ega_lightning.generate import generate
from ega_lightning.io import read_yaml, write_atomic
from ega_lightning.model.attention import (
    pad_width,
    padded_proj_weight,
    padded_qkv_weights,
    qkv_heads,
)

if TYPE_CHECKING:  # Lightning is imported where a model is built: `ega bench --help` starts without it
    from ega_lightning.module import CharLM

T = TypeVar("T")

VOCAB = CORPORA["tinyshakespeare"].vocab
# EGA-1: the gate whose overhead the bench splits (the kernel's share, the matmuls', its z-norm and sigmoid's, the rest)
SPLIT_GATE = "linear"


# --- a nanoGPT-style reference (after karpathy/nanoGPT model.py), to show the baseline is not slowed down


class _RefAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.c_attn, self.c_proj, self.n_head = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd), n_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class _RefBlock(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(n_embd), _RefAttention(n_embd, n_head), nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPTReference(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(_RefBlock(n_embd, n_head) for _ in range(n_layer))
        self.ln_f, self.lm_head = nn.LayerNorm(n_embd), nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        idx, targets = batch
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


# --- measurement


def cpu_name() -> str:
    """The CPU as a reader can tell machines apart by: its model, the vector instructions torch's kernels
    dispatch to (which set what an extra head channel costs) and its logical cores."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "unknown")()
    return f"{model} ({platform.machine()}, {capability}, {os.cpu_count()} logical cores)"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def saved_activation_bytes(forward: Callable[[], T], params: Iterable[torch.Tensor]) -> tuple[T, int]:
    """forward()'s result and the bytes of the tensors autograd saved for its backward, counted once per
    storage, the storages of `params` left out."""
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        # a compiler's stand-in has no data: torch < 2.5 hands the hook such tensors while it traces
        with contextlib.suppress(RuntimeError):
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = forward()
    param_ptrs = {p.untyped_storage().data_ptr() for p in params}
    return result, sum(n for ptr, n in saved.items() if ptr not in param_ptrs)


class Contender:
    """A model with its optimizer and a fixed batch; `step()` times one training step."""

    def __init__(self, name: str, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], precision: str) -> None:
        self.name, self.model, self.batch = name, model, batch
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.autocast_dtype = torch.bfloat16 if precision == "bf16-mixed" else None
        self.device = batch[0].device
        self.times: list[float] = []
        self.first_s: float | None = None  # the first step, warm-up or not: it includes any compilation

    def _loss(self) -> torch.Tensor:
        if self.autocast_dtype is None:
            return self.model.loss(self.batch)
        with torch.autocast(self.device.type, dtype=self.autocast_dtype):
            return self.model.loss(self.batch)

    def step(self, record: bool = True) -> None:
        _sync(self.device)
        t0 = time.perf_counter()
        self._loss().backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        _sync(self.device)
        elapsed = time.perf_counter() - t0
        if self.first_s is None:
            self.first_s = elapsed
        if record:
            self.times.append(elapsed)

    def memory(self) -> dict[str, float]:
        """Bytes of tensors autograd saves for backward (activations, deduplicated by storage), of the
        training state (parameters, gradients, two AdamW moments) and, on CUDA, the allocator's peak."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        loss, activations = saved_activation_bytes(self._loss, self.model.parameters())
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        params = sum(p.numel() * p.element_size() for p in self.model.parameters())
        out = {"activation_mb": activations / 2**20, "train_state_mb": 4 * params / 2**20}
        out["total_mb"] = out["activation_mb"] + out["train_state_mb"]
        if self.device.type == "cuda":
            out["cuda_peak_mb"] = torch.cuda.max_memory_allocated(self.device) / 2**20
        return out

    def summary(self) -> dict[str, float]:
        tokens = self.batch[0].numel()
        median = statistics.median(self.times)
        return {
            "median_ms": 1e3 * median,
            "min_ms": 1e3 * min(self.times),
            "max_ms": 1e3 * max(self.times),
            "tokens_per_s": tokens / median,
            "repeats": len(self.times),
            "first_step_s": self.first_s,
        }


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
        _sync(self.device)
        t0 = time.perf_counter()
        self.run()
        _sync(self.device)
        if record:
            self.times.append(time.perf_counter() - t0)


class KernelTiming(PartTiming):
    """The attention kernel: SDPA forward and backward, scaled by the true head size, on the q, k, v views
    of one Q/K/V matmul output (B T, 3 nh d), with the output's gradient laid out as c_proj's backward
    hands it, (B, T, nh, d) seen as (B, nh, T, d)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        T, nh, _, d = self.layout
        self.buffer = self.randn(self.tokens, 3 * nh * d).requires_grad_()
        self.grad_out = self.randn(self.tokens // T, T, nh, d).transpose(1, 2)  # (B, nh, T, d)

    def run(self) -> None:
        q, k, v = qkv_heads(self.buffer, self.layout)  # (B, nh, T, d) views
        scale = 1.0 / math.sqrt(self.layout[2])
        F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale).backward(self.grad_out)
        self.buffer.grad = None


class MatmulTiming(PartTiming):
    """The two matmuls, forward and backward as training runs them: Q/K/V (B T, C) -> 3 nh d and c_proj
    (B T, nh d) -> C. With extra > 0 the padded weights are built every step from the parameters, as
    training builds them."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        _, nh, hs, d = self.layout
        C = nh * hs
        self.qkv_weight, self.qkv_bias, self.proj_weight = self.randn(3 * C, C), self.randn(3 * C), self.randn(C, C)
        self.x, self.y = self.randn(self.tokens, C), self.randn(self.tokens, nh * d)  # the two matmuls' inputs
        self.qkv_grad, self.proj_grad = self.randn(self.tokens, 3 * nh * d), self.randn(self.tokens, C)
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


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval for the median: order statistics k and n + 1 - k (1-based), with the
    largest k whose binomial tail stays within (1 - level) / 2; (min, max) when n is too small for one."""
    x, n = sorted(values), len(values)
    k, tail = 0, 0.0
    while k < n // 2:
        tail += math.comb(n, k) / 2**n  # P(Bin(n, 1/2) <= k)
        if tail > (1 - level) / 2:
            break
        k += 1
    k = max(k, 1)
    return x[k - 1], x[n - k]


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
    split: dict[str, Any] = {
        name: {"points": statistics.median(v), "interval": median_interval(v)}
        for name, v in (("total", total), *points.items(), ("rest", rest))
    }
    for name, (plain, padded, _) in parts.items():
        split[name]["ms"] = {"plain": 1e3 * statistics.median(plain), "padded": 1e3 * statistics.median(padded)}
        split[name]["ratio"] = statistics.median(paired_ratios(padded, plain))
    return split


@contextlib.contextmanager
def cold_compiler_caches() -> Iterator[None]:
    """torch.compile's on-disk caches (compiled graphs and kernels) in an empty folder, removed after: the
    compile time the bench reports is a first compilation's, not a lookup of an earlier run's."""
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="ega-bench-compile-") as folder:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
        try:
            yield
        finally:
            if before is None:
                del os.environ["TORCHINDUCTOR_CACHE_DIR"]
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = before


def run_interleaved(contenders: list[Any], repeats: int, warmup: int) -> None:
    """Each repetition times every contender once, in an order rotated per repetition, so drifts
    of the machine (turbo, other load) fall on all of them alike."""
    for contender in contenders:
        for _ in range(warmup):
            contender.step(record=False)
    for rep in range(repeats):
        for contender in contenders[rep % len(contenders) :] + contenders[: rep % len(contenders)]:
            contender.step()


def load_yaml_model(path: Path) -> dict[str, Any]:
    return read_yaml(path, missing_ok=False).get("model", {}) or {}


def size_settings(configs: Path, size: str) -> tuple[dict[str, Any], int]:
    """Model shape and batch size from configs/base.yaml + configs/size/<size>.yaml."""
    path = configs / "size" / f"{size}.yaml"
    if not path.is_file():
        available = ", ".join(sorted(p.stem for p in (configs / "size").glob("*.yaml")))
        raise UserError(f"no model size {size!r} in {configs / 'size'} (available: {available}); see --configs.")
    raw = read_yaml(path, missing_ok=False)
    shape = {k: raw["model"][k] for k in ("n_layer", "n_head", "n_embd", "block_size")}
    return shape, raw["data"]["batch_size"]


def gate_settings(configs: Path, names: list[str] | None) -> dict[str, dict[str, Any]]:
    """Gate configs by file stem: {"linear": {"gate": "linear"}, "multiscale2": {...}, ...}; `none` first.
    Output gates (configs/output_gate/) by their gate name, on the baseline: {"output_headwise": {...}}.

    A name that is no config file but a gate (an entry point, an import path such as
    my_gates.AbsEnergyGate) is benchmarked at its default options."""
    found = {p.stem: load_yaml_model(p) for p in sorted((configs / "gate").glob("*.yaml"))}
    for path in sorted((configs / "output_gate").glob("*.yaml")):
        output = load_yaml_model(path)
        found[output["output_gate"]] = {"gate": "none", **output}
    for name in names or []:
        if name not in found and ("." in name or name in gate_names()):
            cls = gate_class(name)  # a GateError (a UserError) says what is wrong with it
            slot = next(slot for slot, base in SLOTS.items() if issubclass(cls, base))
            found[name] = {"gate": "none", slot: name}
    unknown = sorted(set(names or []) - found.keys())
    if unknown:
        raise UserError(f"no gate config {unknown} in {configs / 'gate'} (available: {', '.join(found)}).")
    if "none" not in found:  # every table is relative to the baseline
        raise UserError(f"no baseline config none.yaml in {configs / 'gate'}; see --configs.")
    chosen = {k: v for k, v in found.items() if names is None or k in names or k == "none"}
    return {"none": chosen.pop("none"), **chosen}


def build(
    shape: dict[str, Any], gate: dict[str, Any], device: torch.device, seed: int, compile: bool = False
) -> CharLM:
    from ega_lightning.module import CharLM  # Lightning: imported where a model is built, not for --help

    torch.manual_seed(seed)  # same seed: every gated model shares the baseline's weights
    options = {k: v for k, v in gate.items() if k in ("gate", "gate_options", "tau_init", "alpha_init", "output_gate")}
    return CharLM(VOCAB, **shape, **options, compile=compile).to(device)


def fixed_batch(shape: dict[str, Any], batch_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The one batch every contender trains on: random tokens (seed 0), inputs and next-token targets."""
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, len(VOCAB), (batch_size, shape["block_size"] + 1), generator=gen).to(device)
    return idx[:, :-1], idx[:, 1:]


def paired_ratios(times: list[float], base: list[float]) -> list[float]:
    """Per-repetition ratios, sorted: each repetition times every contender back to back, so the ratio
    within one cancels the machine's drift."""
    return sorted(t / b for t, b in zip(times, base, strict=True))


def bench_size(
    size: str, configs: Path, gates: dict[str, dict[str, Any]], device: torch.device, args: argparse.Namespace
) -> dict[str, Any]:
    from ega_lightning.module import CharLM

    shape, batch_size = size_settings(configs, size)
    batch_size = args.batch_size or batch_size
    batch = fixed_batch(shape, batch_size, device)
    contenders = [
        Contender(name, build(shape, g, device, args.seed), batch, args.precision) for name, g in gates.items()
    ]
    if args.compile:
        contenders += [
            Contender(f"{name}+compile", build(shape, g, device, args.seed, compile=True), batch, args.precision)
            for name, g in gates.items()
        ]
    torch.manual_seed(args.seed)
    reference = NanoGPTReference(len(VOCAB), **shape).to(device)
    if args.compile:  # like for like: the reference compiled too
        reference.loss = torch.compile(reference.loss)
    contenders.append(Contender("nanogpt_reference", reference, batch, args.precision))
    # each part: (its timings without it and with it, how many times a step runs it)
    parts: dict[str, tuple[list[Any], int]] = {}
    if SPLIT_GATE in gates:  # the attention kernel and the matmuls alone, plain and padded, on this size's shapes
        widths, layers = (0, pad_width(device)), shape["n_layer"]
        parts = {
            "kernel": (
                [KernelTiming(f"sdpa+{w}", batch_size, shape, w, device, args.precision) for w in widths],
                layers,
            ),
            "matmuls": (
                [MatmulTiming(f"matmuls+{w}", batch_size, shape, w, device, args.precision) for w in widths],
                layers,
            ),
        }
        # the gate's own arithmetic: the gated model against itself with log g = 0; not a row of the table
        ablated = without_gate_arithmetic(build(shape, gates[SPLIT_GATE], device, args.seed))
        split_gate = next(c for c in contenders if c.name == SPLIT_GATE)
        parts["gate"] = ([Contender(f"{SPLIT_GATE}-log-g-0", ablated, batch, args.precision), split_gate], 1)
    extra_timings = [timing for pair, _ in parts.values() for timing in pair if timing not in contenders]
    print(f"[{size}] {shape}, batch {batch_size}: {len(contenders)} contenders x {args.repeats} repeats", flush=True)
    run_interleaved([*contenders, *extra_timings], args.repeats, args.warmup)
    rows = {}
    for c in contenders:
        rows[c.name] = {**c.summary(), **c.memory()}
        if isinstance(c.model, CharLM):
            rows[c.name]["params"] = sum(p.numel() for p in c.model.parameters())
    base = rows["none"]
    base_times = next(c.times for c in contenders if c.name == "none")
    times = {c.name: c.times for c in contenders}
    for c in contenders:
        row = rows[c.name]
        # the median of per-repetition ratios is the cost estimate; the ratio of medians is kept beside it
        paired = paired_ratios(c.times, base_times)
        row["time_ratio"] = statistics.median(paired)
        row["time_ratio_q1_q3"] = (paired[len(paired) // 4], paired[(3 * len(paired)) // 4])
        row["median_ratio"] = row["median_ms"] / base["median_ms"]
        row["memory_ratio"] = row["total_mb"] / base["total_mb"]
        eager = c.name.removesuffix("+compile")
        if eager != c.name:  # compiled against its own eager self; the first step's excess is compilation
            row["eager_ratio"] = statistics.median(paired_ratios(c.times, times[eager]))
            row["compile_s"] = row["first_step_s"] - row["median_ms"] / 1e3
    result = {"size": size, "shape": shape, "batch_size": batch_size, "rows": rows}
    if parts:
        timings = {name: (plain.times, padded.times, count) for name, ((plain, padded), count) in parts.items()}
        result["split"] = overhead_split(times[SPLIT_GATE], base_times, timings)
        result["split"]["head_sizes"] = [shape["n_embd"] // shape["n_head"] + w for w in (0, pad_width(device))]
    return result


def bench_generation(
    size: str, configs: Path, gates: dict[str, dict[str, Any]], device: torch.device, args: argparse.Namespace
) -> dict[str, Any]:
    shape, _ = size_settings(configs, size)
    rows, uncached = {}, []
    for name, gate in gates.items():
        if (gate.get("gate_options") or {}).get("znorm", "prefix") != "prefix":
            uncached.append(name)  # a whole-window z has no cached form (`ega generate` refuses it)
            continue
        lm = build(shape, gate, device, args.seed).eval()
        prompt = torch.zeros(1, 1, dtype=torch.long, device=device)
        timings: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.generation_repeats):
            for use_cache in (True, False):  # alternating: the machine's drift hits both alike
                t0 = time.perf_counter()
                generate(lm.model, prompt, args.new_tokens, temperature=1.0, seed=0, use_cache=use_cache)
                _sync(device)
                timings[use_cache].append(time.perf_counter() - t0)
        rows[name] = {
            "cached_tokens_per_s": args.new_tokens / statistics.median(timings[True]),
            "recompute_tokens_per_s": args.new_tokens / statistics.median(timings[False]),
            # per repetition, as the training ratios: pairing cancels the drift between repetitions
            "speedup": statistics.median(paired_ratios(timings[False], timings[True])),
            "repeats": args.generation_repeats,
        }
    return {"size": size, "shape": shape, "new_tokens": args.new_tokens, "rows": rows, "uncached": uncached}


# --- output


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def to_markdown(result: dict[str, Any]) -> str:
    env = result["environment"]
    out = [
        f"# Benchmark: {env['device_name']}, {result['precision']}",
        "",
        f"Command: `{result['command']}`  ",
        f"torch {env['torch']}, {env['threads']} threads, {env['platform']}, {result['date']}.",
    ]
    if result["sizes"]:  # none under --generation_only
        out += [
            "",
            "Training step = forward + backward + AdamW step on one fixed batch; every contender is timed once per",
            f"repetition in a rotated order ({result['repeats']} repetitions after {result['warmup']} warm-up steps).",
            "`x none` is the median over repetitions of the step time divided by the baseline's in the same",
            "repetition (quartiles in brackets): pairing within a repetition cancels the machine's drift.",
            "Memory = tensors saved for backward (activations) + training state (parameters, gradients, two AdamW",
            "moments); on CUDA the allocator's peak is listed too.",
        ]
    for size in result["sizes"]:
        rows = [
            [
                name,
                f"{r['median_ms']:.1f}",
                f"{r['min_ms']:.1f}-{r['max_ms']:.1f}",
                f"{r['time_ratio']:.3f} ({r['time_ratio_q1_q3'][0]:.3f}-{r['time_ratio_q1_q3'][1]:.3f})",
                f"{r['tokens_per_s']:,.0f}",
                f"{r['total_mb']:.1f}" + (f" (CUDA peak {r['cuda_peak_mb']:.0f})" if "cuda_peak_mb" in r else ""),
                f"{r['memory_ratio']:.3f}",
            ]
            for name, r in size["rows"].items()
            if name != "nanogpt_reference"
        ]
        shape = size["shape"]
        out += [
            "",
            f"## Gates at the `{size['size']}` size ({shape['n_layer']}x{shape['n_head']}x{shape['n_embd']}, "
            f"block {shape['block_size']}, batch {size['batch_size']})",
            "",
            _table(["gate", "median ms", "min-max ms", "x none (quartiles)", "tokens/s", "memory MB", "x none"], rows),
        ]
    ref_rows = []
    for size in result["sizes"]:
        # under --compile the reference is compiled: against our compiled baseline
        ours, ref = size["rows"].get("none+compile", size["rows"]["none"]), size["rows"]["nanogpt_reference"]
        ref_rows.append(
            [
                size["size"],
                f"{ours['median_ms']:.1f}",
                f"{ref['median_ms']:.1f}",
                f"{ours['median_ms'] / ref['median_ms']:.3f}",
            ]
        )
    for size in result["sizes"]:
        split = size.get("split")
        if split is None:
            continue
        plain, padded = split["head_sizes"]
        rows = [
            [
                label,
                f"{split[key]['points']:+.1f}",
                f"{split[key]['interval'][0]:+.1f} to {split[key]['interval'][1]:+.1f}",
            ]
            for key, label in (
                ("total", f"`{SPLIT_GATE}` over `none`"),
                ("kernel", f"the attention kernel at head size {padded} vs {plain}"),
                ("matmuls", f"the Q/K/V and c_proj matmuls at head size {padded} vs {plain}"),
                ("gate", "the gate's z-norm and sigmoid (the model against itself with log g = 0)"),
                ("rest", "everything else (the write of log g, the padded path's copies and gathers, their Python)"),
            )
        ]
        n_layer = size["shape"]["n_layer"]
        alone = [
            f"{what} ({split[key]['ms']['plain']:.2f} ms at head size {plain}, {split[key]['ms']['padded']:.2f} ms "
            f"at {padded}: {split[key]['ratio']:.3f}x)"
            for key, what in (
                ("kernel", "SDPA forward + backward on the model's shapes"),
                ("matmuls", "the two matmuls forward + backward, padded weights built as training builds them"),
            )
        ]
        gate = split["gate"]["ms"]
        alone.append(f"the whole step with log g = 0 and as trained ({gate['plain']:.1f} ms, {gate['padded']:.1f} ms)")
        out += [
            "",
            f"## Where `{SPLIT_GATE}`'s time goes at the `{size['size']}` size "
            "(points of the baseline's step: medians of per-repetition values, 95% intervals)",
            "",
            _table(["part", "points", "95% interval"], rows),
            "",
            f"Kernel and matmuls alone, one layer's call (the points count it {n_layer} times), and the gate's "
            "arithmetic in the whole model, per-repetition medians: " + "; ".join(alone) + ".",
        ]
    for size in result["sizes"]:
        compiled = {name: r for name, r in size["rows"].items() if "eager_ratio" in r}
        if not compiled:
            continue
        rows = [
            [
                name.removesuffix("+compile"),
                f"{size['rows'][name.removesuffix('+compile')]['median_ms']:.1f}",
                f"{r['median_ms']:.1f}",
                f"{r['eager_ratio']:.3f}",
                f"{r['compile_s']:.1f}",
            ]
            for name, r in compiled.items()
        ]
        out += [
            "",
            f"## torch.compile at the `{size['size']}` size (compile s: the first step's excess, in no ratio)",
            "",
            _table(["gate", "eager ms", "compiled ms", "compiled / eager", "compile s"], rows),
        ]
    if ref_rows:
        out += ["", "## Our baseline against a nanoGPT-style model (same shape, same batch)", ""]
        out += [_table(["size", "ours (none) ms", "nanoGPT-style ms", "ours / nanoGPT"], ref_rows)]
    for g in result.get("generation", []):
        rows = [
            [name, f"{r['cached_tokens_per_s']:.1f}", f"{r['recompute_tokens_per_s']:.1f}", f"{r['speedup']:.1f}x"]
            for name, r in g["rows"].items()
        ]
        repeats = next(iter(g["rows"].values())).get("repeats", 1)
        timing = "" if repeats == 1 else f" (medians of {repeats} alternating repetitions)"
        out += [
            "",
            f"## Generation, `{g['size']}` size, {g['new_tokens']} new tokens from a 1-token prompt, batch 1{timing}",
            "",
            _table(["gate", "KV cache tokens/s", "recompute tokens/s", "speed-up"], rows),
        ]
        if g.get("uncached"):
            names = ", ".join(f"`{n}`" for n in g["uncached"])
            out += ["", f"Not timed: {names}, whose z-norm reads the whole window, so there is no cached form."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ega bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["cpu", "paper"], help="model sizes from configs/size/")
    parser.add_argument("--gates", nargs="+", default=None, help="gate configs from configs/gate/ (default: all)")
    parser.add_argument(
        "--configs",
        type=Path,
        default=None,
        help="the configs directory (size/, gate/); default: ./configs if there, else the packaged configs",
    )
    parser.add_argument("--repeats", type=int, default=7, help="timed repetitions per contender, >= 3 (default 7)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before timing (default 2)")
    parser.add_argument("--batch_size", type=int, default=None, help="override the size's batch size")
    parser.add_argument("--precision", choices=["32-true", "bf16-mixed"], default="32-true", help="default 32-true")
    parser.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="default: cuda if there is one, else cpu",
    )
    parser.add_argument("--seed", type=int, default=1337, help="seed of every model's weights (default 1337)")
    parser.add_argument("--generation_sizes", nargs="+", default=["cpu", "paper"], help="sizes for generation")
    parser.add_argument("--new_tokens", type=int, default=256, help="tokens per generation timing (default 256)")
    parser.add_argument("--no_generation", action="store_true", help="skip the generation tables")
    parser.add_argument(
        "--generation_repeats",
        type=int,
        default=1,
        help="time cached and recomputed generation this many times each, alternating; medians",
    )
    parser.add_argument(
        "--generation_only",
        action="store_true",
        help="only the generation tables, in bench-<device>-<precision>-generation.json and .md",
    )
    parser.add_argument("--compile", action="store_true", help="also time every gate (and the reference) compiled")
    parser.add_argument(
        "--out", type=Path, default=Path("results"), help="where the JSON and Markdown go (default results)"
    )
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.repeats < 3:
        parser.error("--repeats must be at least 3 for a median with min and max to mean anything")
    if args.compile and args.warmup < 1:
        parser.error("--compile needs --warmup >= 1: compilation happens in the first step, which is not timed")
    if args.generation_repeats < 1:
        parser.error(f"--generation_repeats must be positive, got {args.generation_repeats}")
    if args.generation_only and (args.no_generation or args.compile):
        parser.error("--generation_only times generation alone: it takes neither --no_generation nor --compile")
    if args.configs is None:
        from ega_lightning.cli import PACKAGED_CONFIGS  # here: cli imports this module's main lazily

        args.configs = Path("configs") if Path("configs/size").is_dir() else PACKAGED_CONFIGS
    for size in {*([] if args.generation_only else args.sizes), *([] if args.no_generation else args.generation_sizes)}:
        size_settings(args.configs, size)  # every size named before any is timed
    device = torch.device(args.device)
    gates = gate_settings(args.configs, args.gates)
    started = datetime.now(UTC)
    result: dict[str, Any] = {
        "command": " ".join(["ega bench", *argv]),
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "precision": args.precision,
        "compile": args.compile,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "environment": {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "platform": platform.platform(),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        },
    }
    with cold_compiler_caches() if args.compile else contextlib.nullcontext():
        result["sizes"] = (
            [] if args.generation_only else [bench_size(s, args.configs, gates, device, args) for s in args.sizes]
        )
    if not args.no_generation:
        result["generation"] = [
            bench_generation(size, args.configs, gates, device, args) for size in args.generation_sizes
        ]
    markdown = to_markdown(result)
    print(markdown)
    args.out.mkdir(parents=True, exist_ok=True)
    # its own files: a generation-only run does not overwrite the full tables
    stem = f"bench-{device.type}-{args.precision}" + ("-compile" if args.compile else "")
    stem += "-generation" if args.generation_only else ""
    write_atomic(args.out / f"{stem}.json", json.dumps(result, indent=2) + "\n")
    write_atomic(args.out / f"{stem}.md", markdown)
    print(f"wrote {args.out / stem}.json and .md ({math.ceil((datetime.now(UTC) - started).total_seconds())} s)")


if __name__ == "__main__":
    main()
