"""Compares the numbers of two results.json files at the report's printed precision (3 decimals).

Usage: python scripts/compare_results_numbers.py OLD.json NEW.json
(made for issue 15; its output is results/numbers-diff-issue15.txt)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

FIELDS = ("mean", "std", "estimate", "low", "high", "n")
PLAIN = ("n_params", "overhead_pct", "seeds_done", "gate_options", "tau_init", "paper_name", "baseline")


def r3(x: Any) -> Any:
    return round(x, 3) if isinstance(x, float) else x


def main(old_path: str, new_path: str) -> None:
    old, new = json.loads(Path(old_path).read_text()), json.loads(Path(new_path).read_text())
    same = differ = 0
    for go, gn in zip(old["groups"], new["groups"], strict=True):
        for vo, vn in zip(go["variants"], gn["variants"], strict=True):
            where = f"{go['group']}/{go['corpus']}/{vo['variant']}"
            for key, a in vo.items():
                b = vn.get(key)
                if isinstance(a, dict) and ("mean" in a or "estimate" in a):
                    for f in (f for f in FIELDS if f in a):
                        if r3(a[f]) == r3((b or {}).get(f)):
                            same += 1
                        else:
                            differ += 1
                            methods = f"{a.get('method')} -> {(b or {}).get('method')}"
                            print(f"{where} {key}.{f}: {r3(a[f])} -> {r3((b or {}).get(f))} ({methods})")
                elif key in PLAIN:
                    if r3(a) == r3(b):
                        same += 1
                    else:
                        differ += 1
                        print(f"{where} {key}: {a} -> {b}")
    old_runs = {r["run_name"]: r for r in old["runs"]}
    for run in new["runs"]:
        for key, value in run.items():
            if isinstance(value, float) and run["run_name"] in old_runs:
                if r3(value) == r3(old_runs[run["run_name"]].get(key)):
                    same += 1
                else:
                    differ += 1
                    print(f"run {run['run_name']} {key}: {old_runs[run['run_name']].get(key)} -> {value}")
    print(f"{same} numbers equal at 3 decimals, {differ} differ")


if __name__ == "__main__":
    main(*sys.argv[1:3])
