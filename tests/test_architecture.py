"""The rooms of docs/architecture.md, held: every import inside ega_lightning is an arrow its tables allow.

The tables are read from the document, so the rules are stated once. Each import counts, at module
level, inside a function or under `if TYPE_CHECKING`: a lazy import is still an arrow.
"""

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
PACKAGE = "ega_lightning"


@dataclass(frozen=True)
class Room:
    name: str
    modules: tuple[str, ...]  # dotted names; a package stands for everything in it
    may_import: frozenset[str]  # other rooms
    never: frozenset[str]  # third-party top-level packages


@dataclass(frozen=True)
class Arrow:
    importer: str
    imported: str
    line: int


def _table(text: str, heading: str) -> list[list[str]]:
    """The rows (cells stripped) of the first markdown table under `## heading`."""
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def _names(cell: str) -> list[str]:
    return [w.strip() for w in cell.split(",") if w.strip() not in ("", "-")]


def _dotted(name: str) -> str:
    return PACKAGE if name == "__init__" else f"{PACKAGE}.{name}"


def command_modules(root: Path) -> list[str]:
    """The modules of `COMMANDS` in the package under `root` (read, not imported: `root` may be a copy)."""
    tree = ast.parse((root / PACKAGE / "commands" / "__init__.py").read_text())
    table = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["COMMANDS"]
    )
    return sorted({module for module, _ in ast.literal_eval(table).values()})


def rooms_of(doc: Path, commands: list[str]) -> list[Room]:
    rooms = []
    for name, modules, may_import, never in _table(doc.read_text(), "Rooms"):
        listed = [_dotted(m) for m in re.findall(r"`([\w.]+)`", modules) if m != "commands.COMMANDS"]
        if name == "commands":  # the command table is the one place that names each command's module
            listed += [module for module in commands if module not in listed]
        rooms.append(Room(name, tuple(listed), frozenset(_names(may_import)), frozenset(_names(never))))
    return rooms


def exceptions_of(doc: Path) -> set[tuple[str, str]]:
    rows = _table(doc.read_text(), "Known exceptions")
    return {(_dotted(importer.strip("`")), _dotted(imported.strip("`"))) for importer, imported, _ in rows}


def modules_of(root: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module of the package under `root` (a package is its __init__)."""
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def arrows_of(name: str, path: Path, modules: dict[str, Path]) -> tuple[list[Arrow], set[tuple[str, int]]]:
    """The module's arrows to other modules of the package, and its third-party imports (top name, line)."""
    arrows, third_party = [], set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package, level - 1 packages up
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from pkg import mod` is an arrow to pkg.mod; `from mod import name` one to mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                while target not in modules:  # `import ega_lightning.gates.base.Gate`-like tails
                    target = target.rpartition(".")[0]
                if target != name:
                    arrows.append(Arrow(name, target, node.lineno))
            else:
                third_party.add((target.split(".")[0], node.lineno))
    return arrows, third_party


def room_of(module: str, rooms: list[Room]) -> Room | None:
    """The room whose longest listed name is the module or a package holding it (the front door holds
    only the package's own __init__)."""
    matches = [
        (len(m), room)
        for room in rooms
        for m in room.modules
        if module == m or (m != PACKAGE and module.startswith(m + "."))
    ]
    return max(matches, key=lambda match: match[0])[1] if matches else None


def broken_arrows(root: Path, doc: Path) -> tuple[list[str], set[tuple[str, str]]]:
    """Each arrow of the package under `root` that the document's rooms do not allow, as one sentence;
    and the exceptions the document lists that were used."""
    commands = command_modules(root)
    rooms, exceptions = rooms_of(doc, commands), exceptions_of(doc)
    modules = modules_of(root)
    broken, used = [], set()
    row = next(cells[1] for cells in _table(doc.read_text(), "Rooms") if cells[0] == "commands")
    named = set(re.findall(r"`([\w.]+)`", row))
    for command in commands:  # a command lives at the top of the package, or the commands row names it
        host = room_of(command, [room for room in rooms if room.name != "commands"])
        if host is not None and command.removeprefix(PACKAGE + ".") not in named:
            broken.append(f"{command} is a command inside the {host.name} room: commands live at the top")
    for name, path in modules.items():
        room = room_of(name, rooms)
        if room is None:
            broken.append(f"{name} belongs to no room of {doc.name}: add it to a room's modules")
            continue
        arrows, third_party = arrows_of(name, path, modules)
        for top, line in sorted(third_party):
            if top in room.never:
                broken.append(f"{name} imports {top} (line {line}): the {room.name} room never imports {top}")
        for arrow in sorted(set(arrows), key=lambda a: (a.line, a.imported)):  # `from m import a, b`: one arrow
            target = room_of(arrow.imported, rooms)
            if target is None:
                continue  # a module of no room: reported once, as such
            if target is room and (room.name != "commands" or name == _dotted("commands")):
                continue  # inside its room; a command reaches no other command but the dispatcher does
            if target.name in room.may_import:
                continue
            if (name, arrow.imported) in exceptions:
                used.add((name, arrow.imported))
                continue
            rule = (
                "a command imports no other command"
                if target is room
                else f"the {room.name} room may import only {', '.join(sorted(room.may_import)) or 'itself'}"
            )
            broken.append(f"{name} imports {arrow.imported} ({target.name}, line {arrow.line}): {rule}")
    return broken, used


def test_every_import_in_the_package_is_an_arrow_the_architecture_allows():
    broken, used = broken_arrows(REPO, DOC)
    assert broken == [], "\n".join(broken)
    assert used == exceptions_of(DOC), f"{DOC.name} lists exceptions no module needs: {exceptions_of(DOC) - used}"


def test_the_rooms_table_names_rooms_that_exist():
    rooms = rooms_of(DOC, command_modules(REPO))
    names = {room.name for room in rooms}
    modules = modules_of(REPO)
    for room in rooms:  # a renamed module leaves no ghost in the table
        assert all(m in modules for m in room.modules), f"{room.name} lists {set(room.modules) - set(modules)}"
    assert {"gates", "model", "experiments", "commands"} <= names
    for room in rooms:
        assert room.may_import <= names, f"{room.name} may import {room.may_import - names}: not rooms"
        assert room.name not in room.may_import
    commands = next(room for room in rooms if room.name == "commands")
    assert {
        "ega_lightning.commands.check_gate",
        "ega_lightning.commands.gates",
        "ega_lightning.commands.report",
    } <= set(commands.modules)


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, source in files.items():
        path = root / PACKAGE / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)


@pytest.mark.parametrize(
    ("relative", "source", "expected"),
    [
        (  # step 1 of issue 26: the conformance checker lived in gates/ and built the model
            "gates/conformance.py",
            "import torch\nfrom ega_lightning.model import GPT\n",
            "ega_lightning.gates.conformance imports ega_lightning.model (model, line 2): "
            "the gates room may import only plumbing",
        ),
        (  # step 2: the report's reader imported the command's FORMAT, lazily
            "experiments/landscape_results.py",
            "def load():\n    from ega_lightning.commands.landscape import FORMAT\n",
            "ega_lightning.experiments.landscape_results imports ega_lightning.commands.landscape (commands, line 2): "
            "the experiments room may import only",
        ),
        (  # a relative import is an arrow too
            "model/gpt.py",
            "from ..module import CharLM\n",
            "ega_lightning.model.gpt imports ega_lightning.module (module, line 1): the model room may import only",
        ),
        (
            "model/gpt.py",
            "import torch\n\nif True:\n    import lightning.pytorch as pl\n",
            "ega_lightning.model.gpt imports lightning (line 4): the model room never imports lightning",
        ),
        (
            "commands/generate.py",
            "from ega_lightning.commands import landscape\n",
            "ega_lightning.commands.generate imports ega_lightning.commands.landscape (commands, line 1): "
            "a command imports no other command",
        ),
        (  # step 1 of issue 26: the bench read the packaged configs from the CLI's command module
            "bench/settings.py",
            "from ega_lightning.commands.lightning_cli import FLOAT_FLAGS\n",
            "ega_lightning.bench.settings imports ega_lightning.commands.lightning_cli (commands, line 1): "
            "the bench room may import only",
        ),
        (  # issue 38: the reader built the report's rows, importing the analysis to do it
            "experiments/rundirs.py",
            "from ega_lightning.experiments.comparisons import RunData\n",
            "ega_lightning.experiments.rundirs imports ega_lightning.experiments.comparisons (experiments, line 1): "
            "the records room may import only",
        ),
        ("newroom.py", "", "ega_lightning.newroom belongs to no room of architecture.md"),
    ],
)
def test_an_arrow_that_breaks_a_rule_is_named_with_its_rule(tmp_path, relative, source, expected):
    _copy_package(tmp_path)
    _write(tmp_path, {relative: source})
    broken, _ = broken_arrows(tmp_path, DOC)
    assert len(broken) == 1 and broken[0].startswith(expected), broken


def test_a_command_inside_the_gates_package_breaks_the_rules(tmp_path):
    # step 1 of issue 26 undone: `ega gates` back in gates/, which COMMANDS points at
    _copy_package(tmp_path)
    table = (REPO / PACKAGE / "commands" / "__init__.py").read_text()
    assert '"ega_lightning.commands.gates"' in table
    _write(
        tmp_path,
        {
            "commands/__init__.py": table.replace('"ega_lightning.commands.gates"', '"ega_lightning.gates.listing"'),
            "gates/listing.py": (REPO / PACKAGE / "commands" / "gates.py").read_text(),
        },
    )
    (tmp_path / PACKAGE / "commands" / "gates.py").unlink()
    broken, _ = broken_arrows(tmp_path, DOC)
    assert broken == ["ega_lightning.gates.listing is a command inside the gates room: commands live at the top"]


def _copy_package(root: Path) -> None:
    for path in modules_of(REPO).values():
        target = root / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())


# ----------------------------------------------------------------------------- the tests' own layout


def not_fixtures(source: str) -> list[str]:
    """What a conftest.py defines besides pytest fixtures and hooks (`pytest_*`), one line each: a constant or
    helper there is imported by tests as a module, which is tests/helpers.py's job (conftest imports from it)."""

    def is_fixture(decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return (isinstance(target, ast.Attribute) and target.attr == "fixture") or (
            isinstance(target, ast.Name) and target.id == "fixture"
        )

    offences = []
    for index, node in enumerate(ast.parse(source).body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("pytest_") or any(is_fixture(d) for d in node.decorator_list):
                continue
            offences.append(f"line {node.lineno}: def {node.name} is neither a fixture nor a hook")
        else:
            offences.append(f"line {node.lineno}: {ast.unparse(node).splitlines()[0]} (only fixtures and hooks)")
    return offences


def test_conftest_defines_only_fixtures_and_hooks():
    assert not_fixtures((REPO / "tests" / "conftest.py").read_text()) == []


def test_a_helper_or_constant_back_in_conftest_is_named():
    source = (REPO / "tests" / "conftest.py").read_text() + (
        '\nREPO = Path(".")\n\n\ndef run_ega(args):\n    pass\n\n\n@pytest.fixture\ndef tiny():\n    return 1\n'
        "\n\ndef pytest_configure(config):\n    pass\n"
    )
    offences = not_fixtures(source)
    assert [o.split(": ", 1)[1] for o in offences] == [
        "REPO = Path('.') (only fixtures and hooks)",
        "def run_ega is neither a fixture nor a hook",
    ], offences
