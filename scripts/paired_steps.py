"""Training steps of several contenders paired in one process: the ratio of each to the first, per repetition.

    PYTHONPATH=. python scripts/paired_steps.py --size cpu --repeats 41 --threads 1 none linear \
        "linear-before=linear:ega_lightning.model.fused.ROW_ALIGN=1,model.attention_options={'fused_channel': False}"

A contender is ``[label=]gate[@precision][:module.ATTRIBUTE=value,...]``: a model of that gate config (`ega
bench`'s contender: forward + backward + AdamW on one fixed batch, every model from the same seed), stepped in
that precision (32-true, the default, or bf16-mixed: autocast, as `ega bench --precision`) with those module
attributes set (Python literals) and restored after, so two versions of a code path, or two precisions, run in
one process; ``model.NAME=value`` sets a model option instead (``author-fused=author:model.attention='fused'``):

    PYTHONPATH=. python scripts/paired_steps.py --size cpu --repeats 11 --threads 1 none none-bf16=none@bf16-mixed

With ``--recipe`` the models are a recipe's instead of a size's (its architecture: shape, dropout, biases, residual
init; its batch size), and each gate config's attention options (``dropout_before_gate``, ``attention``) hold as they
do in training: the author's paper-size A and B as they train (issue 67), dropout's masks and the reference path
included:

    PYTHONPATH=. python scripts/paired_steps.py --recipe configs/recipe/author_phase2.yaml --repeats 7 none author

Each repetition steps every contender once, in an order rotated per repetition (ABC, BCA, CAB, ...),
after warm-up steps; the ratio to the first contender (and to those named by --against) within a repetition
cancels the machine's drift. Prints medians with quartiles. On a loaded machine use one thread: two OpenMP
threads sharing two busy cores wait for each other at every parallel region (steps 5-10x slower, erratic).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ega_lightning.bench.harness import PRECISIONS
from ega_lightning.config_files import SIZE_KEYS

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# what a recipe's model keys say of the model timed (the rest, the optimizer's and the schedule's, is not a step's)
RECIPE_MODEL_KEYS = (*SIZE_KEYS, "dropout", "bias", "qkv_bias", "scale_residual_init")
# a gate config's keys that choose the attention's path and order in training, held with --recipe
TRAINING_PATH_KEYS = ("dropout_before_gate", "attention")


def parse(spec: str) -> tuple[str, str, str, dict[tuple[Any, str], Any], dict[str, Any]]:
    label, _, rest = spec.partition("=") if "=" in spec.split(":")[0] else ("", "", spec)
    gate, _, sets = rest.partition(":")
    gate, _, precision = gate.partition("@")
    precision = precision or PRECISIONS[0]
    if precision not in PRECISIONS:
        raise SystemExit(f"{spec}: the precision is one of {', '.join(PRECISIONS)}, not {precision!r}")
    attributes, options = {}, {}
    for item in filter(None, sets.split(",")):
        path, _, value = item.partition("=")
        module, _, name = path.rpartition(".")
        if module == "model":  # a model option, as --model.<name> sets it
            options[name] = ast.literal_eval(value)
        else:
            attributes[(importlib.import_module(module), name)] = ast.literal_eval(value)
    return label or gate, gate, precision, attributes, options


@contextlib.contextmanager
def setting(attributes: dict[tuple[Any, str], Any]) -> Iterator[None]:
    before = {key: getattr(*key) for key in attributes}
    for (module, name), value in attributes.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for (module, name), value in before.items():
            setattr(module, name, value)


def main() -> None:
    from ega_lightning.bench.harness import Contender, build, fixed_batch
    from ega_lightning.bench.settings import gate_settings, size_settings
    from ega_lightning.host import cpu_name

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("contenders", nargs="+")
    parser.add_argument("--size", default="cpu")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--against", nargs="*", help="labels of further contenders to give ratios to")
    parser.add_argument("--recipe", type=Path, help="a recipe config (configs/recipe/): its model and batch size")
    args = parser.parse_args()
    from ega_lightning.allocator import keep_freed_memory

    # as `ega fit` steps (allocator.py); EGA_KEEP_FREED_MEMORY=0 times glibc's defaults
    print(f"allocator keeps freed memory: {keep_freed_memory()}")
    if args.threads:
        torch.set_num_threads(args.threads)
    # the bench's shape: the size's model keys without its dropout (configs/size/paper.yaml's 0.2 would time
    # dropout's masks and the attention path that takes them, not the gate)
    shape, batch_size = size_settings(CONFIGS, args.size)
    if args.recipe:
        from ega_lightning.config_files import read_config

        recipe = read_config(args.recipe)
        shape = {k: v for k, v in recipe["model"].items() if k in RECIPE_MODEL_KEYS}
        batch_size = recipe["data"]["batch_size"]
    device = torch.device("cpu")
    batch = fixed_batch(shape, batch_size, device)
    specs = [parse(s) for s in args.contenders]
    settings = gate_settings(CONFIGS, sorted({gate for _, gate, _, _, _ in specs}))
    contenders = []
    for label, gate, precision, attributes, options in specs:
        path = {k: v for k, v in settings[gate].items() if k in TRAINING_PATH_KEYS} if args.recipe else {}
        with setting(attributes):
            model = build({**shape, **path, **options}, settings[gate], device, args.seed)
        contenders.append((Contender(label, model, batch, precision), attributes))
    for contender, attributes in contenders:
        with setting(attributes):
            for _ in range(args.warmup):
                contender.step(record=False)
    n = len(contenders)
    for rep in range(args.repeats):
        for contender, attributes in contenders[rep % n :] + contenders[: rep % n]:
            with setting(attributes):
                contender.step()
    cpu = cpu_name(torch.backends.cpu.get_cpu_capability())
    print(
        f"{cpu}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{f'recipe {args.recipe}' if args.recipe else f'size {args.size}'} ({shape}, batch {batch_size}), "
        f"{args.repeats} repetitions after {args.warmup} warm-up steps"
    )
    bases = [contenders[0][0]] + [c for c, _ in contenders if c.name in (args.against or [])]
    for contender, _ in contenders:
        line = f"{contender.name:24s} median {1e3 * statistics.median(contender.times):8.1f} ms"
        for base in bases:
            ratios = sorted(t / b for t, b in zip(contender.times, base.times, strict=True))
            q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
            line += f"   x {base.name} {statistics.median(ratios):.4f} ({q1:.4f}-{q3:.4f})"
        print(line)


if __name__ == "__main__":
    main()
