"""results.json: every number of the report, as data: the paper's figures and the rules, every finding, each
study's own data (the leaderboard, the evaluated checkpoints), each section's variants and every run."""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from typing import Any

from ega_lightning.experiments import paper, protocol
from ega_lightning.experiments.comparisons import METRICS, Row, RunData
from ega_lightning.experiments.findings import Finding, claims, study_wide
from ega_lightning.experiments.rules import margin_of, rule_texts
from ega_lightning.experiments.study import Measured, ReportInputs


def jsonable(value: Any) -> Any:
    """Dataclasses to dicts (their fields, less those kept out of results.json), enums to their value,
    non-finite floats (a diverged run) to None."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.metadata.get("results", True)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


def _variant_dict(row: Row) -> dict[str, Any]:
    v = row.variant
    return {
        "variant": v.label,
        "gate": v.gate,
        "output_gate": (v.done or v.runs)[0].output_gate,
        "paper_name": v.paper_name,
        "gate_options": v.hp("gate_options"),
        "tau_init": v.hp("tau_init"),
        "runs": [r.run.run_name for r in v.runs],
        "seeds_done": sorted(r.run.seed for r in v.done),
        "seeds_not_done": sorted(r.run.seed for r in v.runs if r.status != "done"),
        # finished at another model shape or recipe than the variant's: in no number (`comparisons.set_apart`)
        "seeds_left_out": {str(r.run.seed): r.reason for r in v.left_out},
        "seeds_diverged": sorted(r.run.seed for r in v.diverged),  # in no number (`comparisons.set_apart_diverged`)
        "n_params": v.n_params,
        "baseline": {"group": row.baseline.group, "variant": row.baseline.label} if row.baseline else None,
        "overhead_pct": row.overhead_pct,
        **{m: v.summary(m) for m in METRICS},
        **{f"diff_{m}": d for m, d in row.diffs.items()},
    }


RUN_KEYS = ("group", "variant", "seed")  # of a run's spec entry (`spec.Run`)
# of its `RunData`; `segments`: the CPU kind of each fit that trained it (None: a record before them, unchecked)
ROW_KEYS = ("corpus", "gate", "output_gate", "status", "reason", "source", "machine", "segments", "code")


def _run_dict(r: RunData) -> dict[str, Any]:
    """A run as results.json holds it: its spec entry's names, its row's and its numbers."""
    spec = {"run_name": r.run.run_name, "spec": str(r.run.spec)} | {k: getattr(r.run, k) for k in RUN_KEYS}
    return spec | {k: getattr(r, k) for k in ROW_KEYS} | r.metrics


def results(
    inputs: ReportInputs,
    found: list[Finding],
    command: str,
    scale: dict[str, Any] | None,
    dates: protocol.Dates,
    measured: Sequence[Measured],
) -> dict[str, Any]:
    """results.json: the command, the protocol, the paper, the conventions, the sizes, the claims and every finding,
    each study's own key (`study.Study.json`: the leaderboard, the evaluated checkpoints), the groups and the runs."""
    extra = tuple(c for m in measured for c in m.claims)
    own = {m.study.name: m.study.json(inputs, m.data) for m in measured if m.study.json is not None}
    return jsonable(
        {
            "command": command,
            "protocol": protocol.as_dict(protocol.current(), dates),
            "paper": paper.as_dict(),
            "conventions": {
                "diff": "baseline - variant (positive: variant better)",
                "interval": "95% Student-t: paired over the seeds both sides ran, Welch where they share none; "
                "n=1: none",
                "std": "sample standard deviation over seeds (ddof=1)",
                "equivalence_margin": margin_of("loss"),
                "rules": rule_texts(),
                "families": {k: f.reads for k, f in protocol.current().families.items()},
                "study_wide": study_wide(found),
            },
            "sizes": scale,
            "claims": [
                {
                    "claim": c.key,
                    "text": c.text,
                    "figure": c.figure,
                    "verdict": f.verdict if f else None,
                    "section": f.section if f else None,
                    "rule": f.rule_name if f else None,
                }
                for c, f in claims(found, extra)
            ],
            "findings": [{"kind": f.kind, **jsonable(f)} for f in found],  # its kind, then every field
            **own,
            "groups": [
                {"group": t.group, "corpus": t.corpus, "variants": [_variant_dict(row) for row in t.rows]}
                for t in inputs.tables
            ],
            "runs": [_run_dict(r) for r in inputs.runs],
        }
    )
