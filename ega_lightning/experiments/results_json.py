"""results.json: every number of the report, as data: the paper's figures and the rules, every finding, the
leaderboard, the evaluated checkpoints, each section's variants and every run."""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

from ega_lightning.experiments import paper, protocol
from ega_lightning.experiments.comparisons import METRICS, Row, RunData, Table
from ega_lightning.experiments.findings import Finding, claims
from ega_lightning.experiments.landscape_results import Evaluation
from ega_lightning.experiments.rules import MARGIN, PROTOCOL, RULES
from ega_lightning.experiments.studies.leaderboard import Board, paired_seeds


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


def finding_dict(f: Finding) -> dict[str, Any]:
    """A finding as results.json holds it: its kind, then every field of its dataclass (`jsonable`)."""
    return {"kind": f.kind, **jsonable(f)}


def _evaluation_dict(e: Evaluation) -> dict[str, Any]:
    return {
        "source": e.source,
        "run": e.run,
        "checkpoint": e.checkpoint,
        "step": e.step,
        "gate": e.gate,
        "trained_znorm": e.trained_znorm,
        "eval_znorm": e.eval_znorm,
        "whole_split": e.whole_split,
        "loss": e.loss,
        "tau_shift_cost": e.tau_shift_costs,  # results() writes the keys as strings (jsonable)
        "alpha_scale_cost": e.alpha_scale_costs,
        "tau_mean": e.mean("tau"),
        "frac_above_tau": e.mean("frac_above_tau"),
        "normal_tail": e.mean("normal_tail"),
    }


def _leaderboard_dict(board: Board) -> dict[str, Any] | None:
    baseline, entries = board
    if baseline is None:
        return None
    return {
        "baseline": {"variant": baseline.label, "seeds": sorted(baseline.by_seed("final_val_loss"))},
        "rows": [
            {
                "variant": e.variant.label,
                "gate": e.variant.gate,
                "name": e.name,
                "groups": e.groups,
                "runs": [r.run.run_name for r in e.variant.runs],
                "seeds_paired": paired_seeds(baseline, e.variant),
                "diff_final_val_loss": e.diff,
                "params_added": e.params_added,
                "step_time_ratio": e.timed,
                "band": e.band,
            }
            for e in entries
        ],
    }


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
        # finished at another model shape than the variant's: in no number (`comparisons.set_apart_shapes`)
        "seeds_left_out": {str(r.run.seed): r.reason for r in v.left_out},
        "n_params": v.n_params,
        "baseline": {"group": row.baseline.group, "variant": row.baseline.label} if row.baseline else None,
        "overhead_pct": row.overhead_pct,
        **{m: v.summary(m) for m in METRICS},
        **{f"diff_{m}": d for m, d in row.diffs.items()},
    }


def _run_dict(r: RunData) -> dict[str, Any]:
    return {
        "run_name": r.run.run_name,
        "spec": str(r.run.spec),
        "group": r.run.group,
        "variant": r.run.variant,
        "seed": r.run.seed,
        "corpus": r.corpus,
        "gate": r.gate,
        "output_gate": r.output_gate,
        "status": r.status,
        "reason": r.reason,
        "source": r.source,
        "machine": r.machine,
        "code": r.code,
        **r.metrics,
    }


def results(
    tables: list[Table],
    runs: list[RunData],
    found: list[Finding],
    command: str,
    evaluations: list[Evaluation] | None = None,
    scale: dict[str, Any] | None = None,
    board: Board | None = None,
    dates: protocol.Dates | None = None,
) -> dict[str, Any]:
    return jsonable(
        {
            "command": command,
            "protocol": protocol.as_dict(PROTOCOL, dates) if dates is not None else None,
            "paper": paper.as_dict(),
            "conventions": {
                "diff": "baseline - variant (positive: variant better)",
                "interval": "95% Student-t: paired over the seeds both sides ran, Welch where they share none; "
                "n=1: none",
                "std": "sample standard deviation over seeds (ddof=1)",
                "equivalence_margin": MARGIN,
                "rules": RULES,
                "families": {k: f.reads for k, f in PROTOCOL.families.items()},
            },
            "sizes": scale,
            "claims": [
                {
                    "claim": c.key,
                    "verdict": f.verdict if f else None,
                    "section": f.section if f else None,
                    "rule": f.rule_name if f else None,
                }
                for c, f in claims(found)
            ],
            "findings": [finding_dict(f) for f in found],
            "leaderboard": _leaderboard_dict(board) if board else None,
            "landscape": [_evaluation_dict(e) for e in evaluations or []],
            "groups": [
                {"group": t.group, "corpus": t.corpus, "variants": [_variant_dict(row) for row in t.rows]}
                for t in tables
            ],
            "runs": [_run_dict(r) for r in runs],
        }
    )
