"""Names that collide in ega_lightning/: a module basename or a top-level function name found in more than one place.

Each module's basename (its file's stem; a package's directory name) and each top-level `def` is one place; a
plural module basename counts as its singular when a module has that name (landscapes.py is a `landscape`). Left
out: `__init__`/`__main__`, dunders, private names (a leading underscore: no reader meets them outside their
module) and `main` (every command's entry point, by convention). Prints each name found in two places or more.
Usage: python scripts/name_collisions.py [root]   (root: the directory holding ega_lightning/, default .); issue 38
item 5 counted with it before and after the renames.
"""

import ast
import sys
from collections import defaultdict
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
package = root / "ega_lightning"
places: dict[str, list[str]] = defaultdict(list)
for path in sorted(package.rglob("*.py")):
    relative = path.relative_to(root).as_posix()
    if path.stem not in ("__init__", "__main__"):
        places[path.stem].append(f"module {relative}")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            places[node.name].append(f"def {relative}:{node.name}")
for directory in sorted(p for p in package.rglob("*") if p.is_dir() and (p / "__init__.py").exists()):
    if directory != package:
        places[directory.name].append(f"package {directory.relative_to(root).as_posix()}/")


def modules(name: str) -> bool:
    return any(not w.startswith("def ") for w in places.get(name, ()))


for name in [n for n in places if n.endswith("s") and modules(n) and modules(n[:-1])]:
    places[name[:-1]] += places.pop(name)
shown = {n: w for n, w in sorted(places.items()) if len(w) > 1 and not n.startswith("_") and n != "main"}
for name, where in shown.items():
    print(f"{name} x{len(where)}: " + "; ".join(sorted(where)))
print(f"{len(shown)} names in more than one place")
