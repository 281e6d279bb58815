"""The report layer's size, the count issue 53 takes before and after: `python scripts/report_lines.py [REF]`.

The report layer is ega_lightning/experiments/ less the modules of the sweep and its records (sweep.py, spec.py,
records.py, rundirs.py), counted as `wc -l` counts (newlines). REF: a git revision to count instead of the
working tree (e.g. `ccdd867`). The last line splits the report layer's lines into code, docstrings, comments and
blank lines.
"""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = "ega_lightning/experiments"
NOT_REPORT = {"sweep.py", "spec.py", "records.py", "rundirs.py"}  # the sweep and its records


def files(ref: str | None) -> dict[str, str]:
    """Every .py file of experiments/ (path relative to it -> text), in the working tree or at ``ref``."""
    if ref is None:
        return {str(p.relative_to(ROOT / EXPERIMENTS)): p.read_text() for p in (ROOT / EXPERIMENTS).rglob("*.py")}
    git = ["git", "-C", str(ROOT)]
    names = subprocess.run([*git, "ls-tree", "-r", "--name-only", ref, EXPERIMENTS], capture_output=True, text=True)
    paths = [p for p in names.stdout.split() if p.endswith(".py")]
    show = [subprocess.run([*git, "show", f"{ref}:{p}"], capture_output=True, text=True).stdout for p in paths]
    return {p.removeprefix(EXPERIMENTS + "/"): text for p, text in zip(paths, show, strict=True)}


def kinds(text: str) -> dict[str, int]:
    """A module's lines by kind, as `wc -l` counts them: docstrings (of the module, a class or a function), comments
    (lines that hold only one), blank lines, and code (every other line)."""
    docstrings = set()
    for node in ast.walk(ast.parse(text)):
        documented = isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        if documented and ast.get_docstring(node, clean=False) is not None:
            docstrings.update(range(node.body[0].lineno, node.body[0].end_lineno + 1))
    counts = {"code": 0, "docstrings": 0, "comments": 0, "blank": 0}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            counts["blank"] += 1
        elif number in docstrings:
            counts["docstrings"] += 1
        elif stripped.startswith("#"):
            counts["comments"] += 1
        else:
            counts["code"] += 1
    return counts


def main() -> None:
    ref = sys.argv[1] if len(sys.argv) > 1 else None
    texts = files(ref)
    lines = {path: text.count("\n") for path, text in texts.items()}
    for path, n in sorted(lines.items(), key=lambda pn: pn[1]):
        print(f"{n:6d} {path}{'  (not the report layer)' if path in NOT_REPORT else ''}")
    everything = sum(lines.values())
    report = sum(n for path, n in lines.items() if path not in NOT_REPORT)
    print(f"{everything:6d} experiments/ in all ({ref or 'working tree'})")
    print(f"{report:6d} the report layer (experiments/ less {', '.join(sorted(NOT_REPORT))})")
    split = [kinds(text) for path, text in texts.items() if path not in NOT_REPORT]
    print("       of which " + ", ".join(f"{sum(k[name] for k in split)} {name}" for name in split[0]))


if __name__ == "__main__":
    main()
