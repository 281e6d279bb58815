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
- the one at its recorded commit; where the record also keeps an fp32 ``fingerprint``, that one is recomputed at
  the commit too (`LEGACY`, the scheme's last version) and must equal it, which shows that the commit's code is
  the code that ran. The fp32 scheme follows the CPU's kernels: the check holds only on the CPU kind the
  records ran on (AMD EPYC for every record made before 2026-12-05); elsewhere it says it cannot check;
- for a record without a commit, the one value its configuration has at every commit it can have run (those
  before it finished), else unknown (null).

Writes ``code_fingerprint`` into each record that lacks one and ``results/provenance.json`` (the history the
report's Provenance section shows). Run niced from the repository root on a committed tree; about a second per
commit and configuration:

    nice -n 5 python scripts/provenance.py [--records results/runs] [--out results/provenance.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import platform
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
# the fp32 fingerprint as records kept it until 2026-12-05: the last version of the scheme
LEGACY = ("a1ff3f3", "ega_lightning/fingerprint.py")

# what runs inside the extracted tree: both fingerprints of every configuration on stdin, one line of JSON out
WORKER = """
import json, sys
import ega_lightning
from ega_lightning.fingerprint import code_fingerprint
from ega_lightning.fingerprint_fp32 import fingerprint as fp32_fingerprint
root = sys.argv[1]
assert ega_lightning.__file__.startswith(root), f"imported {ega_lightning.__file__}, not the commit's tree"
out = []
for hparams in json.load(sys.stdin):
    pair = []
    for fn in (code_fingerprint, fp32_fingerprint):
        try:
            pair.append(fn(hparams))
        except Exception as err:  # a configuration this commit cannot build (a gate it does not have yet)
            pair.append("error: " + type(err).__name__ + ": " + str(err)[:200])
    out.append(pair)
print(json.dumps(out))
"""


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def cpu() -> str:
    """The CPU's model name (the fp32 check holds only on the records' CPU kind)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


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


def fingerprints_at(commit: str, configurations: list[dict[str, Any]], legacy: str) -> list[list[str]]:
    """[code fingerprint, fp32 fingerprint] of each configuration, by the code of ``commit``."""
    with tempfile.TemporaryDirectory(prefix="ega-provenance-") as tmp:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "ega_lightning"], capture_output=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        shutil.copy(REPO / "ega_lightning" / "fingerprint.py", Path(tmp) / "ega_lightning" / "fingerprint.py")
        (Path(tmp) / "ega_lightning" / "fingerprint_fp32.py").write_text(legacy)
        done = subprocess.run(
            [sys.executable, "-c", WORKER, tmp],
            input=json.dumps(configurations),
            capture_output=True,
            text=True,
            cwd=tmp,
            env={"PYTHONPATH": tmp, "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
        )
    if done.returncode != 0:
        error = f"error: the commit's tree did not import ({done.stderr.strip().splitlines()[-1:]})"
        return [[error, error]] * len(configurations)
    return json.loads(done.stdout.strip().splitlines()[-1])


def established(record: Record, history: dict[str, list[str]], listed: list[dict[str, str]], today: str) -> dict:
    """The record's code fingerprint, its status against today's and how it is known (module docstring)."""

    def result(fp: str | None, how: str) -> dict[str, Any]:
        state = "unknown" if fp is None else "today" if fp == today else "differs"
        return {"code_fingerprint": fp, "status": state, "how": how}

    if record.code_fingerprint:
        return result(record.code_fingerprint, "recorded")
    commit = record.git_commit
    if commit and commit in history and not history[commit][0].startswith("error"):
        code, fp32 = history[commit]
        how = f"at its commit {commit[:7]}"
        if record.fingerprint and record.fingerprint == fp32:
            return result(code, how + "; its fp32 fingerprint recomputed there is the one it keeps")
        if record.fingerprint:
            return result(None, how + f"; its fp32 fingerprint {record.fingerprint[:8]} is not the commit's {fp32[:8]}")
        return result(code, how)
    finished = when(record.done.finished_at or listed[-1]["date"])
    # a commit that cannot build the configuration is not one it ran
    possible = {history[c["commit"]][0] for c in listed if when(c["date"]) <= finished}
    possible = {fp for fp in possible if not fp.startswith("error")}
    if len(possible) == 1:
        return result(possible.pop(), "the same at every commit it can have run")
    return result(None, f"{len(possible)} different fingerprints at the commits it can have run")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path, default=REPO / "results" / "runs")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "provenance.json")
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
    legacy = git("show", f"{LEGACY[0]}:{LEGACY[1]}")
    print(f"{len(keys)} configurations x {len(listed)} commits since {start.isoformat()}, on {cpu()}", flush=True)
    table: dict[str, list[list[str]]] = {}
    for c in listed:
        t0 = time.time()
        table[c["commit"]] = fingerprints_at(c["commit"], hparams, legacy)
        print(f"{c['commit'][:7]} {c['date']} {time.time() - t0:5.1f}s {c['subject'][:60]}", flush=True)
    configurations, written = [], 0
    dates = {c["commit"]: c["date"] for c in listed}
    for i, key in enumerate(keys):
        history = {c: fps[i] for c, fps in table.items()}
        today = history[head][0]
        # a change between two commits that both build the configuration (before the first that does, the
        # configuration did not exist: no run can have used it)
        built = [c["commit"] for c in listed if not history[c["commit"]][0].startswith("error")]
        changes = [
            {"commit": b, "date": dates[b], "from": history[a][0], "to": history[b][0]}
            for a, b in itertools.pairwise(built)
            if history[a][0] != history[b][0]
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
                "history": [history[c["commit"]][0] for c in listed],
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
