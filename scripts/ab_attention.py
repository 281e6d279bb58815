"""Interleaved training-step times of the attention code at a base commit against the working tree's.

For changes confined to `ega_lightning/model/attention.py` (its layer's methods: a base commit's
attention.py that imports `model.fused`, `model.flex` or `model.cache` gets the working tree's): the
base commit's `CausalSelfAttention` methods are swapped into one model, the working tree's run in
another, and both beside the baseline `none`, one step each in turn (`ega bench`'s timing), so machine
drift hits all three alike:

    python scripts/ab_attention.py 8077365 --size cpu --repeats 41

Prints each contender's median step time and its ratio to `none`, and new / base, as medians of
per-repetition ratios with 95% intervals.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import torch

from ega_lightning.bench import harness, settings
from ega_lightning.experiments.stats import median_interval
from ega_lightning.model import attention

ROOT = Path(__file__).resolve().parents[1]
METHODS = (
    "forward",
    "_fast",
    "_heads",
    "_key_biased",
    "_gated_qkv",
    "_gated_compiled",
    "_project_padded",
    "_folded_projection",
    "_qkv_weights",
    "_padded_qkv_weights",
    "_attend",
)


def base_module(commit: str, folder: Path) -> types.ModuleType:
    source = subprocess.run(
        ["git", "show", f"{commit}:ega_lightning/model/attention.py"], cwd=ROOT, capture_output=True, text=True
    )
    if source.returncode != 0:
        sys.exit(f"git show {commit}: {source.stderr.strip()}")
    path = folder / "attention_base.py"
    path.write_text(source.stdout)
    spec = importlib.util.spec_from_file_location("ega_lightning.model.attention_base", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def with_methods_of(model: torch.nn.Module, module: types.ModuleType) -> torch.nn.Module:
    for layer in model.modules():
        if isinstance(layer, attention.CausalSelfAttention):
            for name in METHODS:
                if hasattr(module.CausalSelfAttention, name):
                    setattr(layer, name, types.MethodType(getattr(module.CausalSelfAttention, name), layer))
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the commit whose attention.py is the base")
    parser.add_argument("--size", default="cpu", choices=("cpu", "paper", "long"))
    parser.add_argument("--gate", default="linear")
    parser.add_argument("--repeats", type=int, default=41)
    args = parser.parse_args()
    shape, batch_size = settings.size_settings(ROOT / "configs", args.size)
    cpu = torch.device("cpu")
    batch = harness.fixed_batch(shape, batch_size, cpu)
    with tempfile.TemporaryDirectory() as folder:
        base = base_module(args.base, Path(folder))
        contenders = [
            harness.Contender("none", harness.build(shape, {"gate": "none"}, cpu, 0), batch, "32-true"),
            harness.Contender(
                "base", with_methods_of(harness.build(shape, {"gate": args.gate}, cpu, 0), base), batch, "32-true"
            ),
            harness.Contender("new", harness.build(shape, {"gate": args.gate}, cpu, 0), batch, "32-true"),
        ]
        harness.run_interleaved(contenders, args.repeats, 2)
    threads = torch.get_num_threads()
    print(f"{args.size} size, {args.gate}, {args.repeats} repetitions, {threads} threads, base {args.base}")
    for name, c, ref in (
        ("base / none", contenders[1], contenders[0]),
        ("new / none", contenders[2], contenders[0]),
        ("new / base", contenders[2], contenders[1]),
    ):
        ratios = harness.paired_ratios(c.times, ref.times)
        lo, hi = median_interval(ratios)
        step_ms = 1e3 * statistics.median(c.times)
        print(f"{name:12s} {statistics.median(ratios):.3f} [{lo:.3f}, {hi:.3f}]   ({step_ms:.1f} ms a step)")


if __name__ == "__main__":
    main()
