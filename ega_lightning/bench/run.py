"""One `ega bench` run: for each size, the training step of every gate (and of the nanoGPT-style reference,
and EGA-1's overhead split) timed side by side; for each generation size, generation with and without
the KV cache; with --pipeline, each gate's step inside `ega fit` against its bare step; and the machine
they ran on. The result is the JSON the command writes.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from ega_lightning.bench.harness import (
    VOCAB,
    Contender,
    build,
    cold_compiler_caches,
    fixed_batch,
    paired_ratios,
    paired_summary,
    run_interleaved,
    sync,
)
from ega_lightning.bench.pipeline import pipeline_overhead
from ega_lightning.bench.reference import NanoGPTReference
from ega_lightning.bench.settings import size_settings
from ega_lightning.bench.split import SPLIT_GATE, KernelTiming, MatmulTiming, overhead_split, without_gate_arithmetic
from ega_lightning.generation import generate
from ega_lightning.host import cpu_name
from ega_lightning.model.fused import pad_width


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
        row["time_ratio"], row["time_ratio_q1_q3"] = paired_summary(c.times, base_times)
        row["time_ratios"] = paired_ratios(c.times, base_times)  # per repetition: the cost verdict's interval
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
        # the design's floor: the same SDPA kernel on the padded head size against the plain one, these shapes
        (plain, padded), _ = parts["kernel"]
        rows[SPLIT_GATE]["kernel_floor"] = statistics.median(paired_ratios(padded.times, plain.times))
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
                sync(device)
                timings[use_cache].append(time.perf_counter() - t0)
        rows[name] = {
            "cached_tokens_per_s": args.new_tokens / statistics.median(timings[True]),
            "recompute_tokens_per_s": args.new_tokens / statistics.median(timings[False]),
            # per repetition, as the training ratios: pairing cancels the drift between repetitions
            "speedup": statistics.median(paired_ratios(timings[False], timings[True])),
            "repeats": args.generation_repeats,
        }
    return {"size": size, "shape": shape, "new_tokens": args.new_tokens, "rows": rows, "uncached": uncached}


def environment(device: torch.device) -> dict[str, Any]:
    """What the timings depend on besides the code: torch, its threads, the platform and the device."""
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "unknown")()
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(capability),
    }


def benchmark(
    args: argparse.Namespace, gates: dict[str, dict[str, Any]], device: torch.device, command: str, started: datetime
) -> dict[str, Any]:
    """The whole run, as the JSON `ega bench` writes: how it was run, where, and each table's numbers
    (``args``: the command's options; ``gates``: `settings.gate_settings`' choice)."""
    result: dict[str, Any] = {
        "command": command,
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "precision": args.precision,
        "compile": args.compile,
        "position": args.position,  # None: each gate config's own (the baseline's is learned)
        "repeats": args.repeats,
        "warmup": args.warmup,
        "environment": environment(device),
    }
    with cold_compiler_caches() if args.compile else contextlib.nullcontext():
        result["sizes"] = (
            [] if args.generation_only else [bench_size(s, args.configs, gates, device, args) for s in args.sizes]
        )
    if not args.no_generation:
        result["generation"] = [
            bench_generation(size, args.configs, gates, device, args) for size in args.generation_sizes
        ]
    if args.pipeline:  # after the in-process tables: the fits run one at a time, this process waiting
        result["pipeline"] = [
            pipeline_overhead(size, args.configs, name, gate, device, args)
            for size in args.sizes
            for name, gate in gates.items()
        ]
    return result
