"""Every value two results.json files differ in, and by how much: `python scripts/results_diff.py OLD NEW` (each a
results.json, or the folder `ega report --out` wrote it in).

Issue 53 asks for the report to stay byte-identical across a rewrite, and where floats move in their last bits
(another library's arithmetic) for every differing number and its size: one line per differing leaf (its path,
both values, the absolute and relative difference), then the count and the largest of each.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# What names a finding: a rewrite may list the same findings in another order, which is no difference of a number.
FINDING_KEY = ("kind", "section", "corpus", "subject", "against", "claim")


def keyed(items: list[Any]) -> dict[str, Any] | None:
    """The findings of a list by what names each (the n-th of a name numbered), or None where it is no findings list."""
    if not items or not all(isinstance(i, dict) and "kind" in i for i in items):
        return None
    out: dict[str, Any] = {}
    for item in items:
        name = "/".join(str(item.get(k)) for k in FINDING_KEY)
        n = sum(key.rsplit("#", 1)[0] == name for key in out)
        out[f"{name}#{n}"] = item
    return out


def differences(old: Any, new: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(path, old, new) of every leaf where ``old`` and ``new`` differ; a key or list item on one side only is
    a leaf whose other side is ``<missing>``. Findings are paired by what names them, not by their place; a change
    of their order alone is one leaf, `<order>`, not a number."""
    if isinstance(old, list) and isinstance(new, list) and (a := keyed(old)) is not None and (b := keyed(new)):
        moved = [(f"{path}<order>", list(a), list(b))] if set(a) == set(b) and list(a) != list(b) else []
        return moved + differences(a, b, path)
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            d
            for key in sorted(set(old) | set(new))
            for d in differences(old.get(key, "<missing>"), new.get(key, "<missing>"), f"{path}.{key}")
        ]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in differences(a, b, f"{path}[{i}]")]
    # bool is an int: True == 1 must not pass for no difference
    same = old == new and type(old) is type(new)
    return [] if same else [(path or ".", old, new)]


def size(old: Any, new: Any) -> tuple[float, float] | None:
    """(absolute, relative) difference of two numbers; None for anything else."""
    numbers = (int, float)
    if not (isinstance(old, numbers) and isinstance(new, numbers)) or isinstance(old, bool) or isinstance(new, bool):
        return None
    absolute = abs(old - new)
    return absolute, absolute / abs(old) if old else float("inf") if absolute else 0.0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(" ".join(__doc__.split("\n\n")[0].split()), file=sys.stderr)  # the usage: the first paragraph
        return 2
    paths = [Path(p) / "results.json" if Path(p).is_dir() else Path(p) for p in argv]
    unreadable = [p for p in paths if not p.is_file()]
    if unreadable:
        print(
            f"{unreadable[0]} is not a file: give two results.json files (or the folders holding them).",
            file=sys.stderr,
        )
        return 2
    try:
        old, new = (json.loads(p.read_text(encoding="utf-8")) for p in paths)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        print(f"{err}: both files must be the results.json that `ega report` writes.", file=sys.stderr)
        return 2
    found = differences(old, new)
    sizes = []
    for path, a, b in found:
        s = size(a, b)
        sizes.append(s)
        how = f"abs {s[0]:.3g}, rel {s[1]:.3g}" if s else "not a number"
        if path.endswith("<order>"):
            print(f"{path}: the same {len(a)} findings in another order (not a number)")
        else:
            print(f"{path}: {a!r} -> {b!r} ({how})")
    numeric = [s for s in sizes if s is not None]
    largest = f", largest abs {max(s[0] for s in numeric):.3g}, rel {max(s[1] for s in numeric):.3g}" if numeric else ""
    print(f"{len(found)} differing values, {len(found) - len(numeric)} not numbers{largest}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
