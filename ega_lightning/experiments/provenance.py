"""Which code the records ran: a run's code status (its recorded fingerprint against today's, else what
`scripts/provenance.py` established from git history in ``results/provenance.json``), and the report's
Provenance section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ega_lightning.errors import UserError
from ega_lightning.experiments.comparisons import RunData

FILE = "provenance.json"  # beside the records directory: written by scripts/provenance.py


# what scripts/provenance.py writes: every key the report reads, with its type
SHAPE = {"head": str, "start": str, "training_path": list, "model_keys": list, "commits": list, "configurations": list}


def load(path: Path) -> dict[str, Any] | None:
    """What `scripts/provenance.py` established about the records' code; None when it has not been run."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:  # JSONDecodeError, UnicodeDecodeError
        raise UserError(f"{path} cannot be read ({err}): run `python scripts/provenance.py` again.") from None
    missing = [key for key, kind in SHAPE.items() if not isinstance(data, dict) or not isinstance(data.get(key), kind)]
    if missing:
        raise UserError(
            f"{path} is not what `scripts/provenance.py` writes (no {', '.join(missing)}): run "
            "`python scripts/provenance.py` again, or restore the file."
        )
    return data


def code_status(
    run_name: str, fingerprint: str | None, hparams: dict[str, Any], provenance: dict[str, Any] | None
) -> dict[str, Any]:
    """Which code a finished run ran, from its record (its name, the ``fingerprint`` it keeps, its ``hparams``):
    ``status`` ``today``, ``differs`` or ``unknown``, with its fingerprint and how it is known. A fingerprint the
    record keeps is compared with today's, computed here from the record's own hyper-parameters (provenance.json
    keys configurations by the model arguments it knew, so a later argument such as output_gate would pass for
    another configuration); a record without one takes what `scripts/provenance.py` established from git history."""
    unknown = {"fingerprint": fingerprint, "status": "unknown", "how": "no results/provenance.json"}
    if fingerprint is not None:
        today = _today(hparams)
        if today is None:
            return {**unknown, "how": "recorded; its configuration cannot be built by today's code"}
        status = "today" if fingerprint == today else "differs"
        return {"fingerprint": fingerprint, "status": status, "how": "recorded; today's computed"}
    if not provenance:
        return unknown
    for config in provenance.get("configurations") or []:
        established = (config.get("runs") or {}).get(run_name)
        if established is not None:
            return dict(established)
    return {**unknown, "how": "not in results/provenance.json"}


_TODAY: dict[str, str | None] = {}


def _today(hparams: dict[str, Any]) -> str | None:
    """Today's fingerprint of a run's configuration (ega_lightning.fingerprint), once per configuration."""
    key = json.dumps(hparams, sort_keys=True, default=str)
    if key not in _TODAY:
        from ega_lightning.fingerprint import fingerprint  # torch: only for a configuration provenance.json lacks

        try:
            _TODAY[key] = fingerprint(hparams)
        except Exception:  # a gate this code no longer has: the run's code is not known to be today's
            _TODAY[key] = None
    return _TODAY[key]


def section(provenance: dict[str, Any] | None, runs: list[RunData]) -> list[str]:
    """Which code the records ran: what `scripts/provenance.py` established from git history, and where a
    configuration's fingerprint changed since the first record, the seeds that need a rerun."""
    lines = ["## Provenance", ""]
    done = [r for r in runs if r.status == "done"]
    if not provenance:
        return [
            *lines,
            "No `results/provenance.json`: run `python scripts/provenance.py` to establish which code the records ran.",
            "",
        ]
    commits = provenance["commits"]
    lines += [
        f"Each configuration's fingerprint (`ega_lightning.fingerprint`: 3 AdamW steps of its model, hashed) at "
        f"the {len(commits)} commits that touched the training path ({', '.join(provenance['training_path'])}) from "
        f"the code in effect when the first recorded run started ({provenance['start'][:16]}) to "
        f"{provenance['head'][:7]}, computed from git history by `scripts/provenance.py` (`results/provenance.json`). "
        "A record without a fingerprint ran today's code when its configuration's fingerprint is today's at its "
        "recorded commit, or at every commit it can have run (those before it finished). The fingerprint covers "
        "the model's forward and backward and AdamW, not the data pipeline.",
        "",
        "| configuration (spec entries) | today's fingerprint | changed since the first record | runs not "
        "established as today's code |",
        "|---|---|---|---|",
    ]
    reported = {r.run.run_name for r in done}
    mine = [c for c in provenance["configurations"] if any(n in reported for n in c["runs"])]
    lines += [_configuration_line(c, reported, commits[0]["commit"]) for c in mine]
    lines.append("")
    for c in (c for c in mine if c["changes"]):
        rerun = [n for n in c["rerun"] if n in reported]
        lines.append(
            f"- {', '.join(f'`{e}`' for e in c['entries'])}: the fingerprint changed in the range; "
            + (
                f"these runs need a rerun: {', '.join(f'`{n}`' for n in rerun)}."
                if rerun
                else "every run's code is still established as today's (each ran after the change)."
            )
        )
    unknown = [r.run.run_name for r in done if r.code["status"] != "today"]
    lines += [
        f"- {len(done) - len(unknown)} of {len(done)} finished runs ran today's code"
        + (f"; not established: {', '.join(f'`{n}`' for n in unknown)}." if unknown else "."),
        "",
    ]
    return lines


def _configuration_line(config: dict[str, Any], reported: set[str], first_commit: str) -> str:
    """One configuration's row: its fingerprint today, its changes since the first record, its runs to rerun."""
    changes = (
        "; ".join(
            f"at {c['commit'][:7]} ({c['date'][:16]}): {c['from'][:8]} → {c['to'][:8]}" for c in config["changes"]
        )
        or "no"
    )
    if config.get("buildable_from") not in (None, first_commit):  # no run can predate its configuration
        changes += f" (the configuration exists from {config['buildable_from'][:7]} on)"
    rerun = ", ".join(f"`{n}`" for n in config["rerun"] if n in reported) or "none"
    return f"| {', '.join(f'`{e}`' for e in config['entries'])} | {config['today'][:8]} | {changes} | {rerun} |"
