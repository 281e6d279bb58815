"""A command line's config files: the packaged configs, and each -c value resolved to a file and checked.

`ega fit/validate/test` resolve their -c values here, and `ega bench` reads its sizes and gates from
the same packaged directory. (Not ``configs.py``: ``ega_lightning/configs/`` is that directory.)
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from ega_lightning.errors import UserError

PACKAGED_CONFIGS = Path(__file__).resolve().parent / "configs"
# What `ega fit` with no -c runs: the README's main job, EGA-1 on TinyShakespeare at the cpu size, with
# every callback. Any -c file or flag overrides these, as later files override earlier ones.
DEFAULT_CONFIGS = ("base.yaml", "size/cpu.yaml", "corpus/tinyshakespeare.yaml", "gate/linear.yaml")
# the dimensions a model size names (configs/size/*.yaml; `ega bench` records them as a size's shape)
SIZE_KEYS = ("n_layer", "n_head", "n_embd", "block_size")
# the sections of a run's config, each a mapping of its options, and an option each may set (said in refusals)
SECTIONS = ("model", "data", "trainer")
SECTION_EXAMPLES = {"model": "n_embd: 64", "data": "batch_size: 16", "trainer": "max_steps: 500"}
NON_FINITE = {"nan": ".nan", "inf": ".inf", "+inf": ".inf", "-inf": "-.inf", "infinity": ".inf", "-infinity": "-.inf"}


def configs_dir() -> Path:
    """The configs directory a tool reads sizes and gates from: ./configs in a checkout, else the packaged one."""
    return Path("configs") if Path("configs/size").is_dir() else PACKAGED_CONFIGS


def find_config(name: str) -> str | None:
    """The file a -c value names: the path as given when that is a file, else the packaged file of that name
    (``gate/db4.yaml`` or ``configs/gate/db4.yaml``); None when there is neither. Sweep specs, and the
    configs they list, are found the same way (`ega sweep configs/sweeps/paper.yaml` works in any directory).
    """
    if Path(name).is_file():
        return name
    for candidate in (name, name.removeprefix("configs/")):
        packaged = PACKAGED_CONFIGS / candidate
        if packaged.is_file():
            return str(packaged)
    return None


def packaged_names(folder: str | None = None) -> list[str]:
    """The packaged configs' names (``gate/db4.yaml``), those under ``folder`` only when given, else all but
    the sweep specs."""
    names = sorted(str(p.relative_to(PACKAGED_CONFIGS)) for p in PACKAGED_CONFIGS.rglob("*.yaml"))
    if folder is not None:
        return [n for n in names if n.startswith(folder + "/")]
    return [n for n in names if not n.startswith("sweeps/")]


def resolve_config(name: str) -> str:
    """A -c value: a file that exists as given, else the packaged config of that name.

    ``gate/db4.yaml`` and ``configs/gate/db4.yaml`` both name the packaged file; a local file of the
    same path wins (so a checkout's configs/, or your own edited copy, is what runs).
    """
    if not Path(name).is_file() and Path(name).is_dir():
        found = sorted(str(p.relative_to(name)) for p in Path(name).rglob("*.yaml"))[:4]
        raise UserError(
            f"-c {name} is a directory; -c takes one config file"
            + (f", e.g. one of those in it: {', '.join(found)}." if found else ".")
        )
    path = find_config(name)
    if path is not None:
        return path
    raise UserError(
        f"config file {name} not found (relative paths are resolved against {Path.cwd()}). Give a file path, "
        f"or a packaged config: {', '.join(packaged_names())}."
    )


def read_config(path: str | Path) -> dict[str, Any] | None:
    """A config file's mapping, None when it sets nothing (empty, or only comments); a UserError naming the
    file when it is no config (not YAML, not readable, not a mapping)."""
    try:
        text = Path(path).read_text()
        size = expanded_size(yaml.compose(text, Loader=yaml.SafeLoader))
        if size > MAX_VALUES:
            raise UserError(
                f"config file {path} expands to more than {MAX_VALUES:,} values through its YAML aliases (*name): "
                "a config is at most a few hundred, and nested aliases (each repeating the one before) would take "
                "minutes and gigabytes to expand before any key could be checked. Write the values out, or use "
                "fewer aliases."
            )
        content = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(
            f"config file {path} is not valid YAML{where}: {problem}. Fix the file and run again."
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"config file {path} cannot be read: {err}.") from None
    if content is not None and not isinstance(content, dict):
        raise UserError(
            f"config file {path} holds a {type(content).__name__}, not a mapping of options: write it as "
            "`model:`, `data:`, `trainer:` ... sections, as the packaged configs are (e.g. gate/db4.yaml)."
        )
    return content


# The most values a config file may expand to through its YAML aliases: the packaged configs hold about a hundred,
# and a few hundred bytes of nested aliases expand to billions (the "billion laughs"), which the parser builds in
# full before it checks a key.
MAX_VALUES = 10_000


def expanded_size(node: yaml.Node | None, memo: dict[int, int] | None = None) -> int:
    """The number of values (scalars, sequences, mappings) of a composed YAML document once its aliases are
    expanded, counted without expanding them: each node once, an alias by the size of what it names. A node that
    contains itself counts as more than `MAX_VALUES`."""
    if node is None:
        return 0
    memo = {} if memo is None else memo
    if id(node) in memo:
        return memo[id(node)]
    memo[id(node)] = MAX_VALUES + 1  # while it is counted: met again inside itself, it never ends
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    total = 1
    for child in children:
        total += expanded_size(child, memo)
        if total > MAX_VALUES:
            break
    memo[id(node)] = min(total, MAX_VALUES + 1)
    return memo[id(node)]


def run_config(path: str) -> dict[str, Any] | None:
    """A -c file of `ega fit/validate/test` as `read_config` reads it, refused where it sets a section to null:
    the parser drops such a section or leaves it at its defaults (`data: null` started a default run)."""
    content = read_config(path)
    for section in SECTIONS:
        if content is not None and section in content and content[section] is None:
            why = (
                f"{path} sets {section}: null, which the parser does not read as written (it drops the section's "
                "defaults, or ignores the null and runs them: data: null started a default run)"
            )
            raise UserError(not_a_mapping(section, "null", why))
    return content


def not_a_mapping(section: str, value: str, why: str = "that one would drop every default of base.yaml") -> str:
    """The paragraph for a config section (model, data, trainer) given as ``value``, which is no mapping."""
    return (
        f"{section} is {value} (in a -c file or a flag), and it must be a mapping of {section} options: {why}. "
        f"Delete the line to keep the defaults, or give the options you change (e.g. {section}: "
        f"{{{SECTION_EXAMPLES[section]}}})."
    )


def resolve_config_args(argv: list[str], float_flags: Collection[str] = ()) -> list[str]:
    """The command line with every -c/--config value resolved (packaged names) and checked as YAML (`run_config`),
    and every non-finite value of a ``float_flags`` flag (``--model.lr inf``) spelled as YAML spells it."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-c", "--config") and i + 1 < len(argv):
            path = resolve_config(argv[i + 1])
            out += [arg, path] if run_config(path) is not None else []  # an empty config sets nothing
            i += 2
            continue
        if arg.startswith("--config="):
            path = resolve_config(arg.split("=", 1)[1])
            arg = f"--config={path}" if run_config(path) is not None else ""
        if arg in float_flags and i + 1 < len(argv):  # --model.lr inf
            out += [arg, NON_FINITE.get(argv[i + 1].lower(), argv[i + 1])]
            i += 2
            continue
        out += [_yaml_float(arg, float_flags)] if arg else []
        i += 1
    return out


def _yaml_float(arg: str, float_flags: Collection[str]) -> str:
    """``--model.tau_init=nan`` as YAML spells it (``.nan``), so that the model's check says what is wrong with
    it, rather than the parser, which reads ``nan`` as a string."""
    flag, _, value = arg.partition("=")
    if flag in float_flags and value.lower() in NON_FINITE:
        return f"{flag}={NON_FINITE[value.lower()]}"
    return arg
