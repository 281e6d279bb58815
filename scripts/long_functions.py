"""Functions (and methods) over 50 lines in a package, the count issue 38 takes before and after:
`python scripts/long_functions.py [ROOT/ega_lightning] [LIMIT]`."""

import ast
import sys
from pathlib import Path

root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "ega_lightning"
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 50
found = []
for path in sorted(root.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1  # decorators not counted: the def to its last line
            if lines > limit:
                found.append((lines, f"{path.relative_to(root.parent)}:{node.lineno} {node.name}"))
for lines, where in sorted(found, reverse=True):
    print(f"{lines:4d} {where}")
print(f"{len(found)} functions over {limit} lines")
