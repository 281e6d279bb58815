"""Sweep specs: what a sweep runs, and how each run is started and named.

A spec (YAML)::

    name: short                                          # the sweep's name
    configs: [configs/base.yaml, configs/size/cpu.yaml]  # applied to every run, first
    args: [--trainer.enable_progress_bar=false]          # extra `ega fit` arguments for every run
    runs:
      - name: ts-linear            # run name prefix: each seed runs as <name>-seed<seed>
        configs: [configs/corpus/tinyshakespeare.yaml, configs/gate/linear.yaml]
        seeds: [1, 2, 3]
        args: [--model.tau_init=0.35]   # optional
        group: main                # optional: the report's section (default: the sweep's name)
        also_in: [ablation]        # optional: further report sections that show these runs too
        variant: linear            # optional: the report's label (default: the run name prefix)

The spec, and every config it lists, is found as `ega fit -c` finds a config: the path as given
(relative to the directory `ega sweep` runs in) when that is a file, else the packaged file of that
name. So `ega sweep configs/sweeps/paper.yaml` (or `sweeps/paper.yaml`) runs the shipped spec from
any directory and in any install, and in a checkout, or beside your own copies, the local files win.

The spec's runs, in order (entries in spec order, each entry's seeds in order), are numbered
from 0: `ega sweep SPEC --index I` runs run I, and `--shard K/N` the share of shard K (0..N-1),
which keeps all runs of one seed together (see :func:`shard`).

A finished run's directory holds ``DONE`` (:func:`done_marker`), which names the command the
run was started with (:func:`ran_with` reads it back; `records.check_ran_as_specified` tells whether a
directory or a record is the run a spec entry now gives).
"""

from __future__ import annotations

import difflib
import fnmatch
import re
import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from ega_lightning.config_files import find_config, packaged_names
from ega_lightning.errors import UserError
from ega_lightning.io import read_yaml
from ega_lightning.runs import DONE

SPEC_KEYS = ("name", "configs", "args", "runs")
RUN_KEYS = ("name", "configs", "seeds", "args", "group", "also_in", "variant")
# the sweep sets these itself, per run; a spec that set them would break resuming and naming
RESERVED_ARGS = ("--seed_everything", "--run_name", "--runs_dir", "--ckpt_path", "--overwrite")
DONE_FILE, LOG_FILE = DONE, "sweep.log"
LOG_HEADER = "====="  # opens each attempt's part of sweep.log: "===== <start time> ega sweep <spec>: <state>"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]*$")  # one directory name, nothing a shell mangles


class SpecError(UserError):
    """A sweep spec that cannot be run; the message lists every problem and its fix."""


@dataclass(frozen=True)
class Run:
    """One (configs, seed) pair of a sweep: what `ega fit` gets and how the report labels it."""

    spec: Path
    entry: str  # the spec entry's `name`
    seed: int
    configs: tuple[str, ...]  # the sweep's configs, then the entry's
    args: tuple[str, ...]  # the sweep's args, then the entry's
    group: str
    variant: str
    also_in: tuple[str, ...] = ()  # more report sections showing this run (e.g. the shared baseline)

    @property
    def groups(self) -> tuple[str, ...]:
        return (self.group, *self.also_in)

    @property
    def run_name(self) -> str:
        return f"{self.entry}-seed{self.seed}"


@dataclass(frozen=True)
class Sweep:
    path: Path
    name: str
    runs: tuple[Run, ...]


def _unknown_keys(data: dict[str, Any], allowed: tuple[str, ...], where: str) -> list[str]:
    problems = []
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            problems.append(f"{where}: unknown key '{key}'; {hint}allowed keys: {', '.join(allowed)}.")
    return problems


def _strings(data: dict[str, Any], key: str, where: str, problems: list[str]) -> list[str]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.append(f"{where}: '{key}' must be a list of strings, got {value!r}.")
        return []
    return value


def _label(data: dict[str, Any], key: str, default: str, where: str, problems: list[str]) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or not value:
        problems.append(f"{where}: '{key}' must be a non-empty string, got {value!r}.")
        return default
    return value


def _check_args(args: list[str], where: str) -> list[str]:
    problems = []
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag.split() != [flag]:  # one list item is one word of the command line: `--flag value` is not a flag
            problems.append(f"{where}: write each of 'args:' as --key=value, one item per flag; got {arg!r}.")
        elif flag in RESERVED_ARGS:
            problems.append(
                f"{where}: args may not contain {flag}: the sweep sets it for every run "
                "(seeds go under 'seeds:', the run name is <name>-seed<seed>, use --runs_dir of `ega sweep`)."
            )
        elif flag in ("-c", "--config"):
            problems.append(f"{where}: put config files under 'configs:', not as {flag} in 'args:'.")
    return problems


def _check_configs(configs: list[str], where: str) -> list[str]:
    return [
        f"{where}: config file {c} not found, neither relative to the current directory {Path.cwd()} nor "
        "among the packaged configs (`ega fit -c` looks in the same two places): fix the path, or run "
        "`ega sweep` from the directory the spec's paths are relative to."
        for c in configs
        if find_config(c) is None
    ]


def load_spec(path: Path | str, check_files: bool = True) -> Sweep:
    """Parses and validates a sweep spec; raises :class:`SpecError` listing every problem.

    ``path``: a file, else the name of a packaged spec (``configs/sweeps/paper.yaml``, ``sweeps/paper.yaml``).

    Args:
        check_files: require the config files to exist (the report does not need them).
    """
    path = Path(find_config(str(path)) or path)
    data = _read_mapping(path)
    problems = _unknown_keys(data, SPEC_KEYS, str(path))
    name = data.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        problems.append(f"{path}: 'name' must be a short name of letters, digits, '.', '_', '-'; got {name!r}.")
        name = path.stem
    configs = _strings(data, "configs", str(path), problems)
    args = _strings(data, "args", str(path), problems)
    problems += _check_args(args, str(path))
    if check_files:
        problems += _check_configs(configs, str(path))
    entries = data.get("runs")
    if not isinstance(entries, list) or not entries:
        problems.append(f"{path}: 'runs' must be a non-empty list of runs (each with name, configs, seeds).")
        entries = []
    runs: list[Run] = []
    first_seen: dict[str, str] = {}
    for i, entry in enumerate(entries):
        where = f"{path}: runs[{i}]"
        for run in _entry_runs(entry, where, (path, name, configs, args), check_files, problems):
            if run.run_name in first_seen:
                problems.append(
                    f"{where} ({run.entry}): run name '{run.run_name}' already comes from "
                    f"{first_seen[run.run_name]}; both would write into the same directory: "
                    "give the entries distinct names or drop the repeated seed."
                )
                continue
            first_seen[run.run_name] = f"runs[{i}]"
            runs.append(run)
    if problems:
        raise SpecError("\n".join(["invalid sweep spec, nothing was run:", *(f"  - {p}" for p in problems)]))
    return Sweep(path, name, tuple(runs))


def _read_mapping(path: Path) -> dict[str, Any]:
    if not path.is_file():
        shipped = ", ".join(f"configs/{name}" for name in packaged_names("sweeps"))
        raise SpecError(
            f"sweep spec {path} not found, neither relative to the current directory {Path.cwd()} nor among "
            f"the packaged specs: {shipped}."
        )
    try:
        data = read_yaml(path, missing_ok=False)
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise SpecError(f"{path} is not valid YAML (UTF-8): {err}") from err
    if not isinstance(data, dict):
        raise SpecError(
            f"{path}: a sweep spec is a mapping with keys {', '.join(SPEC_KEYS)}; got {type(data).__name__}."
        )
    return data


def _entry_runs(
    entry: Any, where: str, sweep: tuple[Path, str, list[str], list[str]], check_files: bool, problems: list[str]
) -> list[Run]:
    """The runs of one entry of ``runs:``, one per seed; ``sweep``: the spec's path, name (the default
    group), configs and args, which come first. The entry's problems are added to ``problems``."""
    spec, default_group, sweep_configs, sweep_args = sweep
    if not isinstance(entry, dict):
        problems.append(f"{where}: each run is a mapping with keys {', '.join(RUN_KEYS)}; got {entry!r}.")
        return []
    entry_name = entry.get("name")
    if not isinstance(entry_name, str) or not _NAME.match(entry_name):
        problems.append(f"{where}: 'name' must be a short name of letters, digits, '.', '_', '-'; got {entry_name!r}.")
        return []
    where = f"{where} ({entry_name})"
    problems += _unknown_keys(entry, RUN_KEYS, where)
    run_configs = _strings(entry, "configs", where, problems)
    run_args = _strings(entry, "args", where, problems)
    problems += _check_args(run_args, where)
    if check_files:
        problems += _check_configs(run_configs, where)
    seeds = entry.get("seeds")
    if not isinstance(seeds, list) or not seeds or not all(type(s) is int and 0 <= s < 2**32 for s in seeds):
        problems.append(
            f"{where}: 'seeds' must be a non-empty list of integers in [0, 2**32) (Lightning's seeds), e.g. "
            f"[1, 2, 3]; got {seeds!r}."
        )
        seeds = []
    group = _label(entry, "group", default_group, where, problems)
    also_in = tuple(_strings(entry, "also_in", where, problems))
    variant = _label(entry, "variant", entry_name, where, problems)
    configs, args = (*sweep_configs, *run_configs), (*sweep_args, *run_args)
    return [Run(spec, entry_name, seed, configs, args, group, variant, also_in) for seed in seeds]


def select(runs: tuple[Run, ...], patterns: list[str] | None) -> list[Run]:
    """The runs whose run name matches any of the fnmatch ``patterns`` (all when None)."""
    if not patterns:
        return list(runs)
    return [r for r in runs if any(fnmatch.fnmatchcase(r.run_name, p) for p in patterns)]


def pick_index(runs: Sequence[Run], index: int, spec: Path) -> Run:
    """Run ``index`` (0-based) of the spec's expanded list; a :class:`SpecError` past either end."""
    if not 0 <= index < len(runs):
        raise SpecError(
            f"--index {index} is out of range: {spec} has {len(runs)} runs, numbered 0 to {len(runs) - 1} "
            f"(`ega sweep {spec} --dry_run` prints the numbering); a job array for it is --array=0-{len(runs) - 1}."
        )
    return runs[index]


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` as (K, N) with 0 <= K < N; a :class:`SpecError` for anything else."""
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not 0 <= int(match[1]) < int(match[2]):
        raise SpecError(f"--shard takes K/N with shards numbered 0 to N-1 (e.g. 0/4), got {text!r}.")
    return int(match[1]), int(match[2])


def shard(runs: Sequence[Run], k: int, n: int) -> list[Run]:
    """Shard ``k`` of ``n``: whole seeds (every variant of one seed), dealt so the shards' run counts
    stay even; the same spec always deals the same way, and the ``n`` shards partition the runs.

    Seeds stay together because the report pairs runs by seed, and rounding differs between
    machines: a pair made on two machines would compare the machines as well as the gates.
    """
    by_seed: dict[int, list[Run]] = {}
    for run in runs:
        by_seed.setdefault(run.seed, []).append(run)
    load = [0] * n
    owner: dict[int, int] = {}
    for seed in sorted(by_seed, key=lambda s: (-len(by_seed[s]), s)):  # largest first, then by seed: deterministic
        target = min(range(n), key=lambda i: (load[i], i))
        owner[seed] = target
        load[target] += len(by_seed[seed])
    return [run for run in runs if owner[run.seed] == k]


def collect_runs(sweeps: Iterable[Sweep]) -> list[Run]:
    """The runs of all specs. One run listed by two specs (e.g. more seeds of short.yaml's entries, declared
    in a spec of their own until short.yaml lists them) must be the same run under the same label: it is one run,
    shown in the sections of both, whichever spec comes first."""
    runs: dict[str, Run] = {}
    for sweep in sweeps:
        for run in sweep.runs:
            seen = runs.get(run.run_name)
            if seen is None:
                runs[run.run_name] = run
            elif (seen.configs, seen.args) != (run.configs, run.args):
                raise SpecError(
                    f"run {run.run_name} is defined differently in {seen.spec} and {run.spec}, but both would read "
                    f"{run.run_name}/: rename the entry in one of them."
                )
            elif seen.variant != run.variant:
                raise SpecError(
                    f"run {run.run_name} is labelled '{seen.variant}' in {seen.spec} and '{run.variant}' in "
                    f"{run.spec}: one run has one label; give both entries the same `variant:`."
                )
            else:
                more = tuple(g for g in run.groups if g not in seen.groups)
                runs[run.run_name] = replace(seen, also_in=(*seen.also_in, *more))
    return list(runs.values())


# ----------------------------------------------------------------------------- the fit command


def fit_args(run: Run) -> list[str]:
    """What follows ``ega fit`` for ``run``: everything but where it is written and whether it resumes."""
    args = ["fit"]
    for config in run.configs:
        args += ["-c", config]
    return [*args, *run.args, f"--seed_everything={run.seed}", f"--run_name={run.run_name}"]


def fit_command(run: Run, runs_dir: Path | str, resume: bool, overwrite: bool = False) -> list[str]:
    """The command the sweep starts: this interpreter, so the run gets the sweep's environment.

    ``resume``: from the run's last.ckpt; ``overwrite``: over a run that stopped before it could resume.
    """
    cmd = [sys.executable, "-m", "ega_lightning.cli", *fit_args(run), f"--runs_dir={runs_dir}"]
    if resume:
        return [*cmd, "--ckpt_path", "last"]
    return [*cmd, "--overwrite=true"] if overwrite else cmd


def user_command(run: Run) -> str:
    """The run as a user would type it in the checkout (``ega fit -c ... --run_name=...``): no path of this machine."""
    return shlex.join(["ega", *fit_args(run)])


def ran_with(command: str | Sequence[str] | None) -> tuple[list[str], list[str]] | None:
    """The (configs, args) a fit command was made from: what a finished run was started with.

    Takes a :func:`fit_command` list or a :func:`user_command` string. None for anything else (a
    DONE written by hand or by an older tool): nothing to tell from it.
    """
    if isinstance(command, str):
        command = shlex.split(command)
    if not command or "fit" not in command:
        return None
    rest = list(command[list(command).index("fit") + 1 :])
    configs: list[str] = []
    args: list[str] = []
    i = 0
    while i < len(rest):
        flag = rest[i].split("=", 1)[0]
        if rest[i] in ("-c", "--ckpt_path"):  # the sweep's two flags that take their value separately
            if rest[i] == "-c":
                configs.append(rest[i + 1])
            i += 2
            continue
        if flag not in RESERVED_ARGS:
            args.append(rest[i])
        i += 1
    return configs, args


def done_marker(
    run: Run,
    returncode: int,
    wall_seconds: float,
    finished_at: str,
    resumed: bool,
    environment: dict[str, Any],
    started_at: str | None = None,
) -> dict[str, Any]:
    """The content of a finished run's ``DONE``: what ran (as a user would type it) and where.

    ``environment`` (machine, git commit, library versions: `rundirs.run_environment`) is taken when the run
    starts; ``started_at``: when its first attempt started (a resumed run's is its first, not its resume).
    """
    return {
        "command": user_command(run),
        "returncode": returncode,
        "wall_seconds": round(wall_seconds, 3),
        "finished_at": finished_at,
        "resumed": resumed,
        "started_at": started_at,
        **environment,
    }


def static_value(run: Run, dotted: str) -> Any:
    """What `ega fit` would get for ``dotted`` from the run's config files and ``--key=value`` args.

    Only for runs that never wrote their config.yaml (naming a missing run's corpus and gate).
    """
    value: Any = None
    for config in run.configs:
        try:
            found: Any = read_yaml(find_config(config) or config)
        except (OSError, yaml.YAMLError):
            continue
        for part in dotted.split("."):
            found = found.get(part, _UNSET) if isinstance(found, dict) else _UNSET
        value = value if found is _UNSET else found
    flag = f"--{dotted}"
    for i, arg in enumerate(run.args):
        if arg.startswith(flag + "="):
            value = yaml.safe_load(arg.split("=", 1)[1])
        elif arg == flag and i + 1 < len(run.args):
            value = yaml.safe_load(run.args[i + 1])
    return value


_UNSET = object()
