"""Which sizes (``configs/size/*.yaml``) and devices the finished runs used, with their parameter counts and
budgets from the records, and the sizes no run used: the data, and the report's paragraph on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ega_lightning.experiments import paper, records
from ega_lightning.experiments.comparisons import RunData, device, shape, shape_text

# the config directories that set a run's size: a size, or a recipe that sets it with the rest (the author's phase 1)
SIZE_DIRS = ("size", "recipe")


def sizes(runs: list[RunData]) -> dict[str, Any]:
    """The sizes (``configs/size/*.yaml``, ``configs/recipe/*.yaml``) the finished runs used, with their parameter
    counts and budgets from the records; the sizes beside them that no run used (parameters counted for their
    baseline); the devices the runs ran on."""
    done = [r for r in runs if r.status == "done"]
    used: dict[Path, list[RunData]] = {}
    unsized: list[RunData] = []  # runs whose specs name no size file: their shapes come from their own arguments
    for r in done:
        named = [Path(c) for c in r.run.configs if Path(c).parent.name in SIZE_DIRS]
        for c in named:
            used.setdefault(c.resolve(), []).append(r)
        if not named:
            unsized.append(r)
    groups: list[tuple[str | None, list[RunData]]] = [(p.stem, rs) for p, rs in used.items()]
    ran = [
        {
            "size": name,  # None: the runs of no size file
            "model": sorted({shape_text(shape(r.hparams)) for r in rs}),
            "params": sorted({r.n_params for r in rs if r.n_params}),
            "steps": sorted({r.max_steps for r in rs if r.max_steps}),
            "runs": len(rs),
        }
        for name, rs in groups + ([(None, unsized)] if unsized else [])
    ]
    not_run = []
    template = {k: v for k, v in done[0].hparams.items() if k != "seed"} if done else {}
    template["output_gate"] = "none"  # the baseline's count: both slots empty
    for p in sorted({q for f in {p.parent for p in used} for q in f.glob("*.yaml")} - set(used)):
        config = yaml.safe_load(p.read_text()) or {}
        model = config.get("model") or {}
        counted = records.count_parameters({**template, **model, "gate": "none", "gate_options": None})
        steps = (config.get("trainer") or {}).get("max_steps")
        not_run.append(
            {
                "size": p.stem,
                "model": shape_text(shape(model)),
                "params": counted[0] if counted else None,
                "steps": steps,
            }
        )
    return {"ran": ran, "not_run": not_run, "devices": sorted({device(r.machine) for r in done})}


def _size_name(size: str | None) -> str:
    return "no size file" if size is None else f"`{size}`"


def paragraph(scale: dict[str, Any] | None) -> list[str]:
    """Which sizes and devices the finished runs used, and which sizes none used, from the records."""
    if not scale:
        return []

    def params(values: list[int]) -> str:
        return "–".join(dict.fromkeys(f"{v / 1e6:.2g}M" for v in (min(values), max(values)))) if values else "?"

    def papers(values: list[int]) -> str:
        near = values and all(abs(v - paper.PARAMS) <= 0.1 * paper.PARAMS for v in values)
        return " — the paper's size" if near else ""

    ran = "; ".join(
        f"{_size_name(s['size'])} ({', '.join(s['model'])}, {params(s['params'])} parameters, "
        f"{'/'.join(f'{n:,}' for n in s['steps'])} steps, {s['runs']} runs{papers(s['params'])})"
        for s in scale["ran"]
    )
    never = "; ".join(
        f"`{s['size']}` ({s['model']}, {params([s['params']] if s['params'] else [])} parameters, "
        f"{s['steps']:,} steps{papers([s['params']] if s['params'] else [])})"
        for s in scale["not_run"]
    )
    gpu = any(d.startswith("GPU") for d in scale["devices"])
    devices = f"Devices: {', '.join(scale['devices'])}" + ("" if gpu else "; no run on a GPU") + "."
    text = f"Sizes run: {ran or 'none'}. " + (f"Never run: {never}. " if never else "") + devices
    return [text, ""]
