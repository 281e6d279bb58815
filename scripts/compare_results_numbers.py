"""Compares the numbers of two results.json files at the report's printed precision (3 decimals).

Usage: python scripts/compare_results_numbers.py OLD.json NEW.json  (used once for issue 15: see results/numbers-diff-issue15.txt)
"""

import json, sys

old = json.load(open(sys.argv[1]))
new = json.load(open(sys.argv[2]))


def r3(x):
    return None if x is None else round(x, 3)


same = diff = 0
for go, gn in zip(old["groups"], new["groups"]):
    assert (go["group"], go["corpus"]) == (gn["group"], gn["corpus"])
    for vo, vn in zip(go["variants"], gn["variants"]):
        assert vo["variant"] == vn["variant"]
        for key in vo:
            a, b = vo[key], vn.get(key)
            if isinstance(a, dict) and a and ("mean" in a or "estimate" in a):
                for f in ("mean", "std", "estimate", "low", "high", "n"):
                    if f in a:
                        if r3(a[f]) == r3((b or {}).get(f)):
                            same += 1
                        else:
                            diff += 1
                            print(
                                f"{go['group']}/{go['corpus']}/{vo['variant']} {key}.{f}: {r3(a[f])} -> {r3((b or {}).get(f))}  ({(a or {}).get('method')} -> {(b or {}).get('method')})"
                            )
            elif key in (
                "n_params",
                "overhead_pct",
                "seeds_done",
                "gate_options",
                "tau_init",
                "paper_name",
                "baseline",
            ):
                if (r3(a) if isinstance(a, float) else a) == (r3(b) if isinstance(b, float) else b):
                    same += 1
                else:
                    diff += 1
                    print("DIFF", go["group"], vo["variant"], key, a, b)
ro = {r["run_name"]: r for r in old["runs"]}
for r in new["runs"]:
    o = ro.get(r["run_name"])
    if o is None:
        continue
    for k, v in r.items():
        if isinstance(v, float):
            if r3(v) == r3(o.get(k)):
                same += 1
            else:
                diff += 1
                print("RUN", r["run_name"], k, o.get(k), v)
print(f"{same} numbers equal at 3 decimals, {diff} differ")
