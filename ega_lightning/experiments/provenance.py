"""Which code the records ran: a run's code status (its record's code fingerprint against today's), and the
report's Provenance section (with the history `scripts/provenance.py` computed into ``results/provenance.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ega_lightning.errors import UserError
from ega_lightning.experiments.comparisons import RunData

FILE = "provenance.json"  # beside the records directory: written by scripts/provenance.py


# what scripts/provenance.py writes: every key the report reads, with its type
SHAPE = {"head": str, "start": str, "training_path": list, "commits": list, "configurations": list}


def load(path: Path) -> dict[str, Any] | None:
    """What `scripts/provenance.py` established about the records' code; None when it has not been run."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:  # JSONDecodeError, UnicodeDecodeError
        raise UserError(f"{path} cannot be read ({err}): run `python scripts/provenance.py` again.") from None
    missing = [key for key, kind in SHAPE.items() if not isinstance(data, dict) or not isinstance(data.get(key), kind)]
    if not missing and not all(isinstance(c, dict) and "model_key" in c for c in data["configurations"]):
        missing = ["configurations' model_key: an older script wrote it"]
    if missing:
        raise UserError(
            f"{path} is not what `scripts/provenance.py` writes (no {', '.join(missing)}): run "
            "`python scripts/provenance.py` again, or restore the file."
        )
    return data


# the status of a run made from a tree whose package or configs were modified: the fingerprint may agree, the recipe
# and data code it does not cover may not
MODIFIED = "modified"
NOT_RECORDED = "unknown: a modified tree whose paths were not recorded"


def code_status(
    fingerprint: str | None,
    hparams: dict[str, Any],
    git_dirty: bool | None = None,
    git_modified: list[str] | None = None,
) -> dict[str, Any]:
    """Which code a finished run ran, from its record's ``code_fingerprint`` (kept at run time, or established
    from git history by `scripts/provenance.py`) and its ``hparams``: ``status`` ``today`` (the configuration's
    fingerprint computed here from the record's own hyper-parameters is the same), ``differs`` or ``unknown``
    (no code fingerprint, or a configuration today's code cannot build), with the fingerprint and how it is known.
    The fingerprint is the code's, not the CPU's (`ega_lightning.fingerprint`): any machine reads the same; it
    covers the model's arithmetic, not the recipe or the data code, so a run whose record says its tree was modified
    (``git_dirty``) is today's only where the paths it kept (``git_modified``) hold none of the package or configs:
    ``modified`` where they do, ``unknown`` where it kept none (records before they were kept)."""
    status = _status(fingerprint, hparams)
    if status["status"] != "today" or not git_dirty:
        return status
    if git_modified is None:
        how = f"{NOT_RECORDED} (git_dirty): a rerun from a clean tree would establish it"
        return {**status, "status": "unknown", "how": how}
    if git_modified:
        how = f"made from a tree whose package or configs were modified: {', '.join(git_modified)}"
        return {**status, "status": MODIFIED, "how": how}
    return status


def _status(fingerprint: str | None, hparams: dict[str, Any]) -> dict[str, Any]:
    if fingerprint is None:
        return {
            "fingerprint": None,
            "status": "unknown",
            "how": "no code fingerprint: `python scripts/provenance.py` establishes one from git history",
        }
    today = _today(hparams)
    if today is None:
        return {"fingerprint": fingerprint, "status": "unknown", "how": "its configuration cannot be built today"}
    return {"fingerprint": fingerprint, "status": "today" if fingerprint == today else "differs", "how": "compared"}


_TODAY: dict[str, str | None] = {}


def _today(hparams: dict[str, Any]) -> str | None:
    """Today's code fingerprint of a run's configuration (ega_lightning.fingerprint), once per configuration."""
    from ega_lightning.fingerprint import _model_kwargs, code_fingerprint  # torch: imported only when a report compares

    # keyed by the arguments the fingerprint reads, not the whole hparams: the seeds of one configuration (205
    # records, 62 configurations) share it, and each costs a model's few steps in float64
    key = json.dumps(_model_kwargs(hparams), sort_keys=True, default=str)
    if key not in _TODAY:
        try:
            _TODAY[key] = code_fingerprint(hparams)
        except Exception:  # a gate this code no longer has: the run's code is not known to be today's
            _TODAY[key] = None
    return _TODAY[key]


def model_key(hparams: dict[str, Any]) -> str:
    """One configuration as the fingerprint sees it (today's CharLM arguments; no seed, no data keys). An
    argument at None or at CharLM's default is left out: later code records arguments earlier code did not
    (``output_gate``: absent, then ``"none"``), and either way the same model is built. Idempotent on a key's
    own JSON, so a key an older `scripts/provenance.py` wrote reads as today's."""
    import inspect

    from ega_lightning.fingerprint import _model_kwargs
    from ega_lightning.module import CharLM

    def canonical(value: Any) -> Any:  # a tuple default against a list read back from JSON
        return json.loads(json.dumps(value, default=str))

    defaults = {n: canonical(p.default) for n, p in inspect.signature(CharLM.__init__).parameters.items()}
    kwargs = {k: canonical(v) for k, v in _model_kwargs(hparams).items()}
    return json.dumps({k: v for k, v in kwargs.items() if v is not None and v != defaults[k]}, sort_keys=True)


def section(provenance: dict[str, Any] | None, runs: list[RunData]) -> list[str]:
    """Which code the records ran: per configuration, today's code fingerprint, how it changed over git history
    since the first record (what `scripts/provenance.py` computed), and the runs not established as today's."""
    done = [r for r in runs if r.status == "done"]
    lines = [
        "## Provenance",
        "",
        "Each record keeps the code fingerprint of the configuration it trained (`ega_lightning.fingerprint`: a few "
        "float64 SGD steps of its model, rounded scalars hashed: one value for the same code on any CPU); records "
        "made before 2026-12-05 had theirs established from git history by `scripts/provenance.py`, at the commit "
        "they ran or, for a record without one, the same at every commit it can have run. A run ran today's code "
        "when its fingerprint is its configuration's today, and its tree was the commit's in the package and its "
        "configs: the fingerprint covers the model's forward and backward, not the optimizer's recipe or the data "
        "pipeline, so a run whose record says its tree was modified (`git_dirty`) is today's code only where the "
        "modified paths it kept (`git_modified`) lie outside them.",
        "",
    ]
    by_key: dict[str, list[RunData]] = {}
    for r in done:
        by_key.setdefault(model_key(r.hparams), []).append(r)
    history: dict[str, list[dict[str, Any]]] = {}
    for c in (provenance or {}).get("configurations") or []:
        history.setdefault(model_key(json.loads(c["model_key"])), []).append(c)
    if provenance:
        commits = provenance["commits"]
        lines += [
            f"History: each configuration's fingerprint at the {len(commits)} commits that touched the training path "
            f"({', '.join(provenance['training_path'])}) from the code in effect when the first recorded run started "
            f"({provenance['start'][:16]}) to {provenance['head'][:7]} (`results/provenance.json`).",
            "",
        ]
    lines += [
        "| configuration (spec entries) | today's fingerprint | changed since the first record | runs not "
        "established as today's code |",
        "|---|---|---|---|",
    ]
    for key, rows in by_key.items():
        entries = sorted({r.run.run_name.removesuffix(f"-seed{r.run.seed}") for r in rows})
        today = _today(rows[0].hparams)
        rerun = ", ".join(f"`{r.run.run_name}`" for r in rows if r.code["status"] != "today") or "none"
        # an older provenance.json may hold one configuration twice (with and without an argument at its default)
        known = dict.fromkeys(_changes(c) for c in history.get(key, []))
        changes = " / ".join(known) or "not in results/provenance.json"
        lines.append(f"| {', '.join(f'`{e}`' for e in entries)} | {(today or '—')[:8]} | {changes} | {rerun} |")
    lines.append("")
    unknown = [r.run.run_name for r in done if r.code["status"] != "today"]
    lines += [
        f"- {len(done) - len(unknown)} of {len(done)} finished runs ran today's code"
        + (f"; not established: {', '.join(f'`{n}`' for n in unknown)}." if unknown else "."),
    ]
    unrecorded = [r.run.run_name for r in done if r.code["how"].startswith(NOT_RECORDED)]
    if unrecorded:
        lines.append(
            f"- {', '.join(f'`{n}`' for n in unrecorded)}: made from a modified tree whose paths were not recorded "
            "(`git_dirty` true, no `git_modified`: records before issue 52 kept none), so which code they ran is "
            "unknown, whatever their fingerprint; a rerun from a clean tree would establish it."
        )
    lines += [f"- `{r.run.run_name}`: {r.code['how']}." for r in done if r.code["status"] == MODIFIED]
    lines += cpu_kinds(done)
    return [*lines, ""]


def cpu_kinds(done: list[RunData]) -> list[str]:
    """Which finished runs name the CPU kind of each fit that trained them (their record's ``segments``: model,
    torch's capability, vector units, cores; issue 67), and which past records the report cannot check so."""
    named = [r for r in done if r.segments]
    unchecked: dict[str, list[RunData]] = {}
    for r in done:
        if not r.segments:
            unchecked.setdefault(r.run.group, []).append(r)
    lines = [
        f"- CPU kind per segment: {len(named)} of {len(done)} finished runs' records name the CPU kind of each fit "
        "that trained them (`segments`: from_step, to_step, model, torch's capability, vector units, cores)."
    ]
    if unchecked:

        def models(rows: list[RunData]) -> str:  # the CPU model part of each machine ("AMD EPYC x2")
            return ", ".join(sorted({(r.machine or "machine not known").split(";")[0] for r in rows}))

        groups = "; ".join(f"{group} {len(rows)} ({models(rows)})" for group, rows in unchecked.items())
        lines.append(
            f"- The report cannot check the CPU kind of {sum(map(len, unchecked.values()))} past records (made before "
            "records had `segments`; each names only the machine that finished it, its CPU model without the vector "
            "instructions torch dispatched to): which kind trained which steps, and whether a resume crossed kinds, "
            f"is not on record for them. By group: {groups}."
        )
    return lines


def _changes(config: dict[str, Any]) -> str:
    """Where a configuration's fingerprint changed between two commits that both build it, or "no"."""
    changes = "; ".join(
        f"at {c['commit'][:7]} ({c['date'][:16]}): {c['from'][:8]} → {c['to'][:8]}" for c in config["changes"]
    )
    return changes or "no"
