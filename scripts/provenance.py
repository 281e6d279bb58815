"""Which code the run records ran: each configuration's code fingerprint at every training-path commit since
the first record, and each record's own, established once and written into the record (``code_fingerprint``).

Records made before records kept a code fingerprint (`ega_lightning.fingerprint`) say nothing, or only a commit
and the CPU-bound fp32 ``fingerprint`` of the scheme before it, about the code that trained them. Git history
does: this script computes each recorded configuration's code fingerprint at every commit that touched the
training path (TRAINING_PATH) from the code in effect when the first record's run started to HEAD, plus the
commits records name, each from ``git archive <commit>`` extracted to a temporary directory and imported there by
a subprocess (PYTHONPATH=<that directory>), with today's ``fingerprint.py`` copied in (it imports only CharLM).
A record's code fingerprint is then:

- kept, when the record already has one (made at run time);
- the one at its recorded commit (a record made from a modified tree, ``git_dirty``, says so in ``how``);
- for a record without a commit, the one value its configuration has at every commit it can have run (those
  before it finished), else unknown (null).

The fp32 ``fingerprint`` those records keep cannot confirm the commit: recomputed at the commit on an AMD EPYC
without AVX-512 it gives another value for every record (ts-none at 3a9088c: cbb21299, recorded 50f3bcdf; the
records ran on EPYCs whose kernels differ), which is why the code fingerprint replaced it.

Writes ``code_fingerprint`` into each record that lacks one and ``results/provenance.json`` (the history the
report's Provenance section shows). Run niced from the repository root on a committed tree; about a second per
commit and configuration (``--history`` takes the fingerprints per commit from an earlier provenance.json where
it has them, computing only the rest):

    nice -n 5 python scripts/provenance.py [--records results/runs] [--out results/provenance.json] [--history F]
"""

from __future__ import annotations

import argparse
import dataclasses
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

from ega_lightning.experiments.provenance import model_key  # noqa: E402
from ega_lightning.experiments.records import Record, read  # noqa: E402
from ega_lightning.io import write_atomic  # noqa: E402

TRAINING_PATH = ("ega_lightning/model", "ega_lightning/gates", "ega_lightning/module.py", "ega_lightning/seeding.py")

# what runs inside the extracted tree: the code fingerprint of every configuration on stdin, one line of JSON out
WORKER = """
import json, sys
import ega_lightning
from ega_lightning.fingerprint import code_fingerprint
root = sys.argv[1]
assert ega_lightning.__file__.startswith(root), f"imported {ega_lightning.__file__}, not the commit's tree"
out = []
for hparams in json.load(sys.stdin):
    try:
        out.append(code_fingerprint(hparams))
    except Exception as err:  # a configuration this commit cannot build (a gate it does not have yet)
        out.append("error: " + type(err).__name__ + ": " + str(err)[:200])
print(json.dumps(out))
"""


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


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
    """The code fingerprint of each configuration, by the code of ``commit``."""
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


def established(record: Record, history: dict[str, str], listed: list[dict[str, str]], today: str) -> dict:
    """The record's code fingerprint, its status against today's and how it is known (module docstring)."""

    def result(fp: str | None, how: str) -> dict[str, Any]:
        state = "unknown" if fp is None else "today" if fp == today else "differs"
        return {"code_fingerprint": fp, "status": state, "how": how}

    if record.code_fingerprint:
        return result(record.code_fingerprint, "recorded")
    commit = record.git_commit
    if commit and commit in history and not history[commit].startswith("error"):
        dirty = "; the tree was modified when it ran (git_dirty)" if record.git_dirty else ""
        return result(history[commit], f"at its commit {commit[:7]}{dirty}")
    finished = when(record.done.finished_at or listed[-1]["date"])
    # a commit that cannot build the configuration is not one it ran
    possible = {history[c["commit"]] for c in listed if when(c["date"]) <= finished}
    possible = {fp for fp in possible if not fp.startswith("error")}
    if len(possible) == 1:
        return result(possible.pop(), "the same at every commit it can have run")
    return result(None, f"{len(possible)} different fingerprints at the commits it can have run")


def earlier(path: Path | None) -> dict[tuple[str, str], str]:
    """{(model key, commit): code fingerprint} from an earlier provenance.json (``--history``)."""
    if path is None:
        return {}
    data = json.loads(path.read_text())
    commits = [c["commit"] for c in data["commits"]]
    return {
        (model_key(json.loads(c["model_key"])), commit): fp
        for c in data["configurations"]
        for commit, fp in zip(commits, c["history"], strict=True)
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path, default=REPO / "results" / "runs")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "provenance.json")
    parser.add_argument("--history", type=Path, default=None, help="an earlier provenance.json to reuse")
    args = parser.parse_args(argv)
    paths = sorted(args.records.glob("*.json"))
    records = {p: read(p) for p in paths}
    if not records:
        print(f"no records in {args.records}", file=sys.stderr)
        return 2

    def started(r: Record) -> datetime:
        return when(r.done.finished_at) - timedelta(seconds=float(r.done.wall_seconds or 0))

    start = min(started(r) for r in records.values() if r.done.finished_at)
    by_key: dict[str, list[Path]] = {}
    for p, r in records.items():
        by_key.setdefault(model_key(r.hparams), []).append(p)
    keys = sorted(by_key)
    hparams = [{k: v for k, v in records[by_key[k][0]].hparams.items() if k != "seed"} for k in keys]
    listed = commits(start, {r.git_commit for r in records.values() if r.git_commit})
    head = git("rev-parse", "HEAD")
    reused = earlier(args.history)
    print(f"{len(keys)} configurations x {len(listed)} commits since {start.isoformat()}", flush=True)
    table: dict[str, list[str]] = {}
    for c in listed:
        t0 = time.time()
        todo = [i for i, key in enumerate(keys) if (key, c["commit"]) not in reused]
        computed = iter(fingerprints_at(c["commit"], [hparams[i] for i in todo]) if todo else [])
        table[c["commit"]] = [
            reused[(key, c["commit"])] if (key, c["commit"]) in reused else next(computed) for key in keys
        ]
        print(f"{c['commit'][:7]} {c['date']} {time.time() - t0:5.1f}s {len(todo)} computed {c['subject'][:50]}")
    configurations, written = [], 0
    dates = {c["commit"]: c["date"] for c in listed}
    for i, key in enumerate(keys):
        history = {c: fps[i] for c, fps in table.items()}
        today = history[head]
        # a change between two commits that both build the configuration (before the first that does, the
        # configuration did not exist: no run can have used it)
        built = [c["commit"] for c in listed if not history[c["commit"]].startswith("error")]
        changes = [
            {"commit": b, "date": dates[b], "from": history[a], "to": history[b]}
            for a, b in itertools.pairwise(built)
            if history[a] != history[b]
        ]
        runs = {}
        for p in sorted(by_key[key], key=lambda p: records[p].run_name):
            record = records[p]
            known = established(record, history, listed, today)
            runs[record.run_name] = known
            if record.code_fingerprint is None and known["code_fingerprint"] is not None:
                write_atomic(p, dataclasses.replace(record, code_fingerprint=known["code_fingerprint"]).to_json())
                written += 1
        configurations.append(
            {
                "entries": sorted({records[p].run_name.removesuffix(f"-seed{records[p].seed}") for p in by_key[key]}),
                "model_key": key,
                "today": today,
                "buildable_from": built[0] if built else None,
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
        "commits": listed,
        "configurations": configurations,
    }
    write_atomic(args.out, json.dumps(payload, indent=1) + "\n")
    rerun = sum(len(c["rerun"]) for c in configurations)
    print(
        f"wrote {args.out}: {len(configurations)} configurations; {written} record(s) given their code fingerprint; "
        f"{rerun} record(s) not established as today's code"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
