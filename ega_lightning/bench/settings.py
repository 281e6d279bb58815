"""What `ega bench` measures, read from a configs directory: each size's model shape and batch size
(``size/``), each gate's settings (``gate/``, ``output_gate/``, or a gate named by entry point or import
path). The directory is the CLI's (`ega_lightning.config_files.configs_dir`) unless ``--configs`` names one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ega_lightning.config_files import SIZE_KEYS, read_config
from ega_lightning.errors import UserError
from ega_lightning.gates import gate_names, resolve_gate

MIN_BLOCK_SIZE = 2  # an energy gate's (CharLM refuses block_size 1 with one)


def load_yaml_model(path: Path) -> dict[str, Any]:
    return (read_config(path) or {}).get("model", {}) or {}


def size_settings(configs: Path, size: str) -> tuple[dict[str, Any], int]:
    """Model shape and batch size from configs/size/<size>.yaml (the size file sets both)."""
    path = configs / "size" / f"{size}.yaml"
    if not path.is_file():
        available = ", ".join(sorted(p.stem for p in (configs / "size").glob("*.yaml")))
        raise UserError(f"no model size {size!r} in {configs / 'size'} (available: {available}); see --configs.")
    raw = read_config(path) or {}
    try:
        model, batch_size = {k: raw["model"][k] for k in SIZE_KEYS}, raw["data"]["batch_size"]
    except (KeyError, TypeError):
        wanted = ", ".join([*(f"model.{k}" for k in SIZE_KEYS), "data.batch_size"])
        raise UserError(f"size config {path} must set {wanted}; see --configs.") from None
    n_embd, n_head = model.get("n_embd"), model.get("n_head")
    # said before anything is timed: the model's own check would stop the bench midway, as a traceback
    for key, value, least in [*((f"model.{k}", model[k], 1) for k in SIZE_KEYS), ("data.batch_size", batch_size, 1)]:
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise UserError(f"size config {path} sets {key} {value!r}: it must be a positive integer; see --configs.")
    if model["block_size"] < MIN_BLOCK_SIZE:
        raise UserError(
            f"size config {path} sets model.block_size {model['block_size']}: the bench times energy gates, which "
            f"z-normalise over the positions seen so far and need at least {MIN_BLOCK_SIZE} (with one, the gate "
            "is a constant and the model refuses it). Give the size a larger block_size; see --configs."
        )
    if isinstance(n_embd, int) and isinstance(n_head, int) and (n_head < 1 or n_embd % n_head):
        raise UserError(
            f"size config {path} sets model.n_embd {n_embd} and model.n_head {n_head}: n_embd must be divisible "
            "by n_head; see --configs."
        )
    return model, batch_size


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
            slot = resolve_gate(name).slot  # a GateError (a UserError) says what is wrong with it
            found[name] = {"gate": "none", slot: name}
    unknown = sorted(set(names or []) - found.keys())
    if unknown:
        raise UserError(f"no gate config {unknown} in {configs / 'gate'} (available: {', '.join(found)}).")
    if "none" not in found:  # every table is relative to the baseline
        raise UserError(f"no baseline config none.yaml in {configs / 'gate'}; see --configs.")
    chosen = {k: v for k, v in found.items() if names is None or k in names or k == "none"}
    return {"none": chosen.pop("none"), **chosen}
