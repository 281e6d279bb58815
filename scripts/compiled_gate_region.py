"""Whether compiling EGA-1's gate arithmetic alone takes the cpu size's points over the floor: one attention layer's
forward and backward (`FusedAttention.attend`, training, dropout 0) of `none`, `linear` eager, and `linear` with
`gates.fused.log_gate_channel` (the function `GatedQKV`'s forward and backward call for the key channel) under
`torch.compile`, interleaved in a rotated order, medians of each repetition's time over `none`'s.

    PYTHONPATH=. python scripts/compiled_gate_region.py --size cpu --repeats 300

An exploration for docs/cost.md (issue 55 item 1), not a path of the model: run it on an idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import yaml

from ega_lightning.bench.harness import build
from ega_lightning.bench.settings import size_settings
from ega_lightning.model import fused
from ega_lightning.model.fused import FusedAttention


def layer_step(size: str, gate: str, channel: Callable[..., torch.Tensor]) -> Callable[[], torch.Tensor]:
    """One forward and backward of the first attention layer of the model ``gate`` builds at ``size``, with the key
    channel computed by ``channel``; the same input every call (seed 0)."""
    shape, batch_size = size_settings(Path("configs"), size)
    config = yaml.safe_load(Path(f"configs/gate/{gate}.yaml").read_text())
    model = build(shape, config.get("model", config), torch.device("cpu"), 1337)
    layer = next(m for m in model.modules() if isinstance(m, FusedAttention))
    layer.train()
    x = torch.randn(batch_size, shape["block_size"], shape["n_embd"], generator=torch.Generator().manual_seed(0))
    x.requires_grad_(True)

    def step() -> torch.Tensor:
        fused.log_gate_channel = channel  # the name FusedGateChannel calls
        y = layer.attend(x, 0.0)  # (B, T, C)
        y.sum().backward()
        return y.detach()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="cpu")
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    eager = fused.log_gate_channel
    steps = {
        "none": layer_step(args.size, "none", eager),
        "linear": layer_step(args.size, "linear", eager),
        "linear, gate compiled": layer_step(args.size, "linear", torch.compile(eager, dynamic=False)),
    }
    same = (steps["linear"]() - steps["linear, gate compiled"]()).abs().max().item()
    for _ in range(10):  # the compilation, then warm caches
        for step in steps.values():
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for i in range(args.repeats):
        for name in names[i % 3 :] + names[: i % 3]:
            start = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - start)
    print(f"{args.size} size, {args.threads} threads, {args.repeats} repetitions; outputs differ by at most {same:.2g}")
    for name in names:
        over = statistics.median(t - b for t, b in zip(times[name], times["none"], strict=True))
        print(f"{name:22s} {statistics.median(times[name]) * 1e3:8.3f} ms  over none {over * 1e3:+.3f} ms")


if __name__ == "__main__":
    main()
