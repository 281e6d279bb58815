"""The shell's size, the count issue 70 takes before and after: `python scripts/shell_lines.py [REF]`.

The shell is the seven modules of ``SHELL``, counted as `wc -l` counts (newlines), each split into code, docstrings,
comments and blank lines as `report_lines.kinds` splits them; the refusals' wording (``WORDING``, data the shell
reads) is counted beside them, not in them. REF: a git revision to count instead of the working tree.
"""

import subprocess
import sys
from pathlib import Path

from report_lines import kinds

ROOT = Path(__file__).resolve().parents[1]
SHELL = (
    "ega_lightning/run_policy.py",
    "ega_lightning/runs.py",
    "ega_lightning/lightning_private.py",
    "ega_lightning/fit_args.py",
    "ega_lightning/commands/lightning_cli.py",
    "ega_lightning/callbacks/stop.py",
    "ega_lightning/callbacks/last.py",
)
WORDING = "ega_lightning/refusals.yaml"


def text(path: str, ref: str | None) -> str | None:
    """The file at ``ref`` (the working tree: None); None where it is not there."""
    if ref is None:
        return (ROOT / path).read_text() if (ROOT / path).is_file() else None
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"], capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


def main() -> None:
    ref = sys.argv[1] if len(sys.argv) > 1 else None
    texts = {path: text(path, ref) or "" for path in SHELL}
    total = {"lines": 0, "code": 0, "docstrings": 0, "comments": 0, "blank": 0}
    for path, source in texts.items():
        row = {"lines": source.count("\n"), **kinds(source)}
        total = {key: total[key] + row[key] for key in total}
        print(f"{row['lines']:6d} {path}  ({', '.join(f'{row[k]} {k}' for k in list(row)[1:])})")
    split = ", ".join(f"{total[k]} {k}" for k in list(total)[1:])
    print(f"{total['lines']:6d} the shell ({ref or 'working tree'}): {split}")
    wording = text(WORDING, ref)
    if wording is not None:
        print(f"{wording.count(chr(10)):6d} {WORDING} (the refusals' wording, read by the shell)")


if __name__ == "__main__":
    main()
