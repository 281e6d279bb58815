"""Which code the run records ran: each configuration's fingerprint at every training-path commit since then.

Records made before records kept a fingerprint (`ega_lightning.fingerprint`) say nothing, or only a commit,
about the code that trained them. Git history does: this script computes each recorded configuration's
fingerprint at every commit that touched the training path (TRAINING_PATH) from the code in effect when the
first record's run started to HEAD, plus the commits records name, each from ``git archive <commit>``
extracted to a temporary directory and imported there by a subprocess (PYTHONPATH=<that directory>).
Commits older than ``fingerprint.py`` get today's copy: it imports only CharLM.

A record's code is then known (``status``):

- ``today``: its fingerprint (recorded, at its recorded commit, or the same at every commit it can have
  run, i.e. every listed commit up to its finish) is the configuration's fingerprint at HEAD;
- ``differs``: it is known and not HEAD's;
- ``unknown``: the commits it can have run give different fingerprints, or none could be computed.

The fingerprint covers the model's forward and backward and AdamW, not the data pipeline. Writes
``results/provenance.json`` (read by `ega report`). Run niced from the repository root; about one second
per configuration and commit:

    nice -n 5 python scripts/provenance.py [--records results/runs] [--out results/provenance.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ega_lightning.experiments.records import read_record  # noqa: E402
from ega_lightning.fingerprint import _model_kwargs  # noqa: E402
from ega_lightning.io import write_atomic  # noqa: E402

TRAINING_PATH = ("ega_lightning/model", "ega_lightning/gates", "ega_lightning/module.py", "ega_lightning/seeding.py")

# what runs inside the extracted tree: the fingerprint of every configuration on stdin, one line of JSON out
WORKER = """
import json, sys
import ega_lightning
from ega_lightning.fingerprint import fingerprint
root = sys.argv[1]
assert ega_lightning.__file__.startswith(root), f"imported {ega_lightning.__file__}, not the commit's tree"
out = []
for hparams in json.load(sys.stdin):
    try:
        out.append(fingerprint(hparams))
    except Exception as err:  # a configuration this commit cannot build (a gate it does not have yet)
        out.append("error: " + type(err).__name__ + ": " + str(err)[:200])
print(json.dumps(out))
"""


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _charlm_arguments() -> list[str]:
    import inspect

    from ega_lightning.module import CharLM

    return list(inspect.signature(CharLM.__init__).parameters)


def model_key(hparams: dict[str, Any]) -> str:
    """One configuration as the fingerprint sees it (today's CharLM arguments; no seed, no data keys; an
    argument at None, which later code records where earlier code did not, is left out)."""
    return json.dumps({k: v for k, v in _model_kwargs(hparams).items() if v is not None}, sort_keys=True)


def commits(start: datetime, named: set[str]) -> list[dict[str, str]]:
    """The training-path commit in effect at ``start``, every later one, the named ones and HEAD, oldest first."""
    before = git("rev-list", "-1", f"--before={start.isoformat()}", "HEAD", "--", *TRAINING_PATH)
    since = git("rev-list", f"--since={start.isoformat()}", "HEAD", "--", *TRAINING_PATH).split()
    chosen = {c for c in [before, *since, *named, git("rev-parse", "HEAD")] if c}
    out = []
    for c in chosen:
        date, subject = git("show", "-s", "--format=%cI%n%s", c).split("\n", 1)
        out.append({"commit": c, "date": date, "subject": subject[:100]})
    return sorted(out, key=lambda c: when(c["date"]))


def fingerprints_at(commit: str, configurations: list[dict[str, Any]]) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="ega-provenance-") as tmp:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "ega_lightning"], capture_output=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        shutil.copy(REPO / "ega_lightning" / "fingerprint.py", Path(tmp) / "ega_lightning" / "fingerprint.py")
        done = subprocess.run(
            [sys.executable, "-c", WORKER, tmp],
            input=json.dumps(configurations),
            capture_output=True,
            text=True,
            cwd=tmp,
            env={"PYTHONPATH": tmp, "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
        )
    if done.returncode != 0:
        return [f"error: the commit's tree did not import ({done.stderr.strip().splitlines()[-1:]})"] * len(
            configurations
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def status(record: dict[str, Any], history: dict[str, str], listed: list[dict[str, str]], today: str) -> tuple:
    """(fingerprint or None, status, how it is known) of one record; see the module docstring."""
    if record.get("fingerprint"):
        fp = record["fingerprint"]
        return fp, "today" if fp == today else "differs", "recorded"
    commit = record.get("git_commit")
    if commit and commit in history:
        fp = history[commit]
        return fp, "today" if fp == today else "differs", f"at its commit {commit[:7]}"
    finished = when((record.get("done") or {}).get("finished_at") or listed[-1]["date"])
    # a commit that cannot build the configuration is not one it ran
    possible = {history[c["commit"]] for c in listed if when(c["date"]) <= finished}
    possible = {fp for fp in possible if not fp.startswith("error")}
    if len(possible) == 1:
        fp = possible.pop()
        return fp, "today" if fp == today else "differs", "the same at every commit it can have run"
    return None, "unknown", f"{len(possible)} different fingerprints at the commits it can have run"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path, default=REPO / "results" / "runs")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "provenance.json")
    args = parser.parse_args(argv)
    records = [read_record(p) for p in sorted(args.records.glob("*.json"))]
    if not records:
        print(f"no records in {args.records}", file=sys.stderr)
        return 2

    def started(r: dict[str, Any]) -> datetime:
        done = r.get("done") or {}
        return when(done["finished_at"]) - timedelta(seconds=float(done.get("wall_seconds") or 0))

    start = min(started(r) for r in records if (r.get("done") or {}).get("finished_at"))
    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_key.setdefault(model_key(r["hparams"]), []).append(r)
    keys = sorted(by_key)
    hparams = [{k: v for k, v in by_key[k][0]["hparams"].items() if k != "seed"} for k in keys]
    listed = commits(start, {r["git_commit"] for r in records if r.get("git_commit")})
    head = git("rev-parse", "HEAD")
    print(f"{len(keys)} configurations x {len(listed)} commits since {start.isoformat()}", flush=True)
    table: dict[str, list[str]] = {}
    for c in listed:
        t0 = time.time()
        table[c["commit"]] = fingerprints_at(c["commit"], hparams)
        print(f"{c['commit'][:7]} {c['date']} {time.time() - t0:5.1f}s {c['subject'][:60]}", flush=True)
    configurations = []
    for i, key in enumerate(keys):
        history = {c: fps[i] for c, fps in table.items()}
        today = history[head]
        # a change of fingerprint between two commits that both build the configuration (before the first
        # that does, the configuration did not exist: no run can have used it)
        built = [c for c in listed if not history[c["commit"]].startswith("error")]
        changes = [
            {"commit": b["commit"], "date": b["date"], "from": history[a["commit"]], "to": history[b["commit"]]}
            for a, b in itertools.pairwise(built)
            if history[a["commit"]] != history[b["commit"]]
        ]
        runs = {}
        for r in sorted(by_key[key], key=lambda r: r["run_name"]):
            fp, state, how = status(r, history, listed, today)
            runs[r["run_name"]] = {"fingerprint": fp, "status": state, "how": how}
        configurations.append(
            {
                "entries": sorted({r["run_name"].removesuffix(f"-seed{r['seed']}") for r in by_key[key]}),
                "model": json.loads(key),
                "today": today,
                "buildable_from": built[0]["commit"] if built else None,
                "history": [history[c["commit"]] for c in listed],
                "changes": changes,
                "runs": runs,
                "rerun": sorted(name for name, run in runs.items() if run["status"] != "today"),
            }
        )
    payload = {
        "head": head,
        "start": start.isoformat(),
        "training_path": list(TRAINING_PATH),
        "model_keys": sorted(_model_kwargs(dict.fromkeys(_charlm_arguments()))),
        "commits": listed,
        "configurations": configurations,
    }
    write_atomic(args.out, json.dumps(payload, indent=1) + "\n")
    rerun = sum(len(c["rerun"]) for c in configurations)
    print(f"wrote {args.out}: {len(configurations)} configurations, {rerun} record(s) not established as today's code")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
