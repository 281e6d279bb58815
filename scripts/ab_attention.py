"""Interleaved training-step times of an attention path at a base commit against the working tree's.

For changes confined to one module of the attention paths (`ega_lightning/model/fused.py` by default,
`--module` another, e.g. `ega_lightning/model/attention.py`): the base commit's copy of that module is
loaded beside the working tree's (what it imports is the working tree's) and its class of each attention
layer (by the class's name, `FusedAttention` for the default path) replaces the layer's class in one model;
the working tree's runs in another, and both beside the baseline `none`, one step each in turn (`ega
bench`'s timing), so machine drift hits all three alike:

    python scripts/ab_attention.py <base commit> --size cpu --repeats 41

Prints each contender's median step time and its ratio to `none`, and new / base, as medians of
per-repetition ratios with 95% intervals. The base commit must have the layer classes (issue 54's shape).
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
from ega_lightning.model import CausalSelfAttention

ROOT = Path(__file__).resolve().parents[1]


def base_module(commit: str, module: str, folder: Path) -> types.ModuleType:
    source = subprocess.run(["git", "show", f"{commit}:{module}"], cwd=ROOT, capture_output=True, text=True)
    if source.returncode != 0:
        sys.exit(f"git show {commit}:{module}: {source.stderr.strip()}")
    path = folder / Path(module).name
    path.write_text(source.stdout)
    dotted = ".".join(Path(module).with_suffix("").parts)
    spec = importlib.util.spec_from_file_location(f"{dotted}_base", path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded  # dataclasses look their module up
    spec.loader.exec_module(loaded)
    return loaded


def with_classes_of(model: torch.nn.Module, module: types.ModuleType) -> torch.nn.Module:
    for layer in model.modules():
        if isinstance(layer, CausalSelfAttention):
            name = type(layer).__name__
            if not hasattr(module, name):
                sys.exit(f"{module.__name__} has no class {name}: pass the --module that defines it")
            layer.__class__ = getattr(module, name)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the commit whose module is the base")
    parser.add_argument("--module", default="ega_lightning/model/fused.py", help="the module compared")
    parser.add_argument("--size", default="cpu", choices=("cpu", "paper", "long"))
    parser.add_argument("--gate", default="linear")
    parser.add_argument("--repeats", type=int, default=41)
    args = parser.parse_args()
    shape, batch_size = settings.size_settings(ROOT / "configs", args.size)
    cpu = torch.device("cpu")
    batch = harness.fixed_batch(shape, batch_size, cpu)
    with tempfile.TemporaryDirectory() as folder:
        base = base_module(args.base, args.module, Path(folder))
        contenders = [
            harness.Contender("none", harness.build(shape, {"gate": "none"}, cpu, 0), batch, "32-true"),
            harness.Contender(
                "base", with_classes_of(harness.build(shape, {"gate": args.gate}, cpu, 0), base), batch, "32-true"
            ),
            harness.Contender("new", harness.build(shape, {"gate": args.gate}, cpu, 0), batch, "32-true"),
        ]
        harness.run_interleaved(contenders, args.repeats, 2)
    threads = torch.get_num_threads()
    base_name = f"{args.base}:{args.module}"
    print(f"{args.size} size, {args.gate}, {args.repeats} repetitions, {threads} threads, base {base_name}")
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
