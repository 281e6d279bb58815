"""Where one training step's time goes, by torch's profiler: each contender's ops by self time; the share of the
matmuls, the dtype casts and the rest; each phase's (forward, backward, AdamW) time (issue 55 item 2: why a bf16
step gains less than its matmuls do).

    PYTHONPATH=. python scripts/step_profile.py --size paper none none@bf16-mixed

A contender is ``gate[@precision]`` as in scripts/paired_steps.py (`ega bench`'s step: forward + backward + AdamW
on one fixed batch). Each is warmed up, then ``--steps`` steps are profiled; the figures are per step. Run it on an
idle machine: the profile reads wall time.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

# op name -> group; first match wins (aten names as the profiler lists them)
GROUPS = (
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_dot_product", "mkldnn")),
    ("cast", ("aten::_to_copy", "aten::copy_", "aten::to")),
)
PHASES = ("forward", "backward", "optimizer")


def group_of(name: str) -> str:
    return next((group for group, prefixes in GROUPS if name.startswith(prefixes)), "other")


def matmul_ms(x: torch.Tensor, w: torch.Tensor, repeats: int = 21) -> float:
    """The median time of ``x @ w.T``, after three untimed ones."""
    times = []
    for i in range(repeats + 3):
        start = time.perf_counter()
        x @ w.T
        if i >= 3:
            times.append(time.perf_counter() - start)
    return 1e3 * sorted(times)[repeats // 2]


def step(contender: Any) -> None:
    """`Contender.step` with its three phases named for the profiler."""
    start = time.perf_counter()
    with record_function("forward"):
        loss = contender._loss()
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer"):
        contender.optimizer.step()
        contender.optimizer.zero_grad(set_to_none=True)
    contender.times.append(time.perf_counter() - start)


def main() -> None:
    from ega_lightning.bench.harness import PRECISIONS, Contender, build, fixed_batch
    from ega_lightning.bench.settings import gate_settings, size_settings
    from ega_lightning.host import cpu_name

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("contenders", nargs="+")
    parser.add_argument("--size", default="paper")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()
    # the bench's shape: the size's model keys without its dropout (configs/size/paper.yaml's 0.2 would time
    # dropout's masks and the attention path that takes them, not the gate)
    shape, batch_size = size_settings(CONFIGS, args.size)
    batch = fixed_batch(shape, batch_size, torch.device("cpu"))
    specs = [(spec, *spec.partition("@")[::2]) for spec in args.contenders]
    for spec, _, precision in specs:  # as scripts/paired_steps.py: an unknown one would time fp32 under its name
        if precision and precision not in PRECISIONS:
            raise SystemExit(f"{spec}: the precision is one of {', '.join(PRECISIONS)}, not {precision!r}")
    settings = gate_settings(CONFIGS, sorted({gate for _, gate, _ in specs}))
    print(
        f"{cpu_name(torch.backends.cpu.get_cpu_capability())}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, size {args.size}, {args.steps} profiled steps after {args.warmup}"
    )
    x = torch.randn(batch_size * shape["block_size"], shape["n_embd"])
    w = torch.randn(3 * shape["n_embd"], shape["n_embd"])
    bare = {dtype: matmul_ms(x.to(dtype), w.to(dtype)) for dtype in (torch.float32, torch.bfloat16)}
    print(
        f"the Q/K/V projection's matmul alone, {tuple(x.shape)} x {tuple(w.T.shape)}: "
        f"fp32 {bare[torch.float32]:.1f} ms,"
        f" bf16 {bare[torch.bfloat16]:.1f} ms (x{bare[torch.float32] / bare[torch.bfloat16]:.2f} faster)"
    )
    for spec, gate, precision in specs:
        contender = Contender(
            spec, build(shape, settings[gate], torch.device("cpu"), args.seed), batch, precision or "32-true"
        )
        for _ in range(args.warmup):
            contender.step(record=False)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                step(contender)
        step_ms = 1e3 * sum(contender.times) / args.steps
        averages = prof.key_averages()
        phases = {e.key: e.cpu_time_total / 1e3 / args.steps for e in averages if e.key in PHASES}
        ops = [e for e in averages if e.key not in PHASES and not e.key.startswith(("ProfilerStep", "Optimizer."))]
        self_ms = {e.key: e.self_cpu_time_total / 1e3 / args.steps for e in ops}
        total = sum(self_ms.values())
        groups: dict[str, float] = defaultdict(float)
        for name, ms in self_ms.items():
            groups[group_of(name)] += ms
        shares = ", ".join(
            f"{g} {ms:.0f} ms ({100 * ms / total:.0f}%)" for g, ms in sorted(groups.items(), key=lambda x: -x[1])
        )
        print(f"\n{spec}: step {step_ms:.0f} ms (profiled; ops' self time {total:.0f} ms): {shares}")
        print("  phases: " + ", ".join(f"{p} {phases.get(p, 0.0):.0f} ms" for p in PHASES))
        for name, ms in sorted(self_ms.items(), key=lambda x: -x[1])[: args.top]:
            print(f"  {ms:9.1f} ms  {100 * ms / total:5.1f}%  {group_of(name):9s} {name}")


if __name__ == "__main__":
    main()
