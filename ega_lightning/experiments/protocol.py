"""The registered protocol (``configs/protocol.yaml``) as data: the margins, families, rules and planned seeds
every verdict of the report is read against, and when each entry was fixed.

The protocol is committed before the runs it governs. :func:`load` reads it, each field checked as the table
`PROTOCOL` states it; :func:`current` reads the registered one once, when a report (or anything that needs a margin)
first asks for it, never at import; :func:`entry_dates` gives the date each verdict's rule was fixed (the newest commit
of the lines of its entry, of its family and of its margins, from ``git blame``); where git history cannot date them
(a shallow clone, an install without .git), none.
"""

from __future__ import annotations

import functools
import math
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import yaml

from ega_lightning.config_files import PACKAGED_CONFIGS
from ega_lightning.errors import UserError

PATH = PACKAGED_CONFIGS / "protocol.yaml"
RULE_NAMES = ("effect", "level", "best", "worse", "equivalent", "tail", "forgets", "frozen", "grows")
RULE_NAMES += ("lower", "control", "cost", "mechanism")
TESTABLE = ("baseline_gap_covers_reduction",)  # the conditions a verdict may be read under (`testable:`)
T = TypeVar("T")


class ProtocolError(UserError):
    """A protocol file that cannot be read as one; the message says where."""


@dataclass(frozen=True)
class Margin:
    value: float
    unit: str
    reason: str


@dataclass(frozen=True)
class Family:
    name: str
    reads: str
    planned_seeds: dict[str, int]  # spec entry -> the seeds planned for it
    plan: str = ""
    # its own entry's `leaderboard: true`: the leaderboard ranks the gates its comparisons measure (x), each against
    # the reference the comparison names, outside the positive control's family
    leaderboard: bool = False


@dataclass(frozen=True)
class Entry:
    """The rule of one kind of finding (results.json's ``kind``)."""

    kind: str
    family: str | None
    confirmatory: bool
    rule: str | None = None
    by_claim: dict[str, str] = field(default_factory=dict)  # claim key -> rule, where the rule follows the claim
    margins: tuple[str, ...] = ()
    testable: str | None = None
    min_repetitions: int | None = None
    why: str = ""
    lines: tuple[int, int] = (0, 0)  # its lines in the file (1-based, inclusive), for git blame

    def rule_for(self, claim: str | None) -> str:
        if self.by_claim:
            if claim not in self.by_claim:
                raise ProtocolError(f"the protocol's `{self.kind}` names no rule for claim {claim!r}.")
            return self.by_claim[claim]
        assert self.rule is not None
        return self.rule


@dataclass(frozen=True)
class Amendment:
    """A change to the registered rules made after some of their runs (`amendments:`), dated by its own commit: the
    verdicts whose label it changes are fixed at its date, the others keep their entry's."""

    date: str  # the date it states, where git history cannot be read
    issue: int
    rules: tuple[str, ...]  # the rules whose reading it changes (each label is read before and after it)
    cost_device: str | None  # the device whose bench the cost claim is read from
    text: dict[str, str]  # what it changes, by its keys (why, error_control, ...), as the method note says it
    lines: tuple[int, int] = (0, 0)
    # the kinds of finding whose measure it replaces (`kinds:`): each is fixed at its date, whatever its label
    kinds: tuple[str, ...] = ()
    # kinds it declares (its own `verdicts:`) whose rule its family's prose fixed before it (`fixed_in_prose:`, in an
    # amendment that changes no rule): each is dated with its family's entry and margins, not with this amendment
    fixed_in_prose: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """One comparison a family reads, as the protocol states it (an amendment's or a family's `comparisons:`): x
    against the reference y (spec group / variant; None: x alone, against ``figure`` or zero), on the ``metric`` of
    each run (`engine.METRICS`), signed y - x."""

    family: str
    kind: str  # the kind of finding it gives (a key of `verdicts:`)
    x: str
    y: str | None
    metric: str
    claim: str | None = None
    figure: str | None = None
    at: tuple[int, ...] = ()  # the lengths (in training blocks) a comparison beyond the block reads
    name: str | None = None  # how the report names x (None: its paper name or gate, `findings.name`)
    y_name: str | None = None  # how it names y
    source: str | None = None  # a peer's paper
    once: bool = False  # read once, when every run its family plans is in
    show: tuple[tuple[str, str], ...] = ()  # (name, "x.<metric>" / "y.<metric>"): a side's mean, said beside it

    @property
    def group(self) -> str:
        return self.x.split("/", 1)[0]

    @property
    def label(self) -> str:
        return self.x.split("/", 1)[1]


@dataclass(frozen=True)
class Protocol:
    path: Path
    registered: str
    level: float
    power: float
    max_seeds: int
    stopping: str
    decisions: str
    margins: dict[str, Margin]
    families: dict[str, Family]
    verdicts: dict[str, Entry]
    lines: dict[str, tuple[int, int]]  # "margins.<name>" / "families.<name>" -> its lines
    amendments: tuple[Amendment, ...] = ()
    # family -> its comparisons: the latest amendment's that states them, or its own entry's
    comparisons: dict[str, tuple[Comparison, ...]] = field(default_factory=dict)
    # the families whose gates the leaderboard ranks against its pooled baseline and the positive control reads (the
    # latest amendment's `leaderboard:`)
    leaderboard: tuple[str, ...] = ()
    # family -> what the report draws beside its comparisons (an amendment's `figures:`, the latest's; engine.FIGURES)
    figures: dict[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)

    def margin(self, name: str) -> float:
        return self.margins[name].value

    def rule_text(self, key: str) -> tuple[str, str] | None:
        """(date, text) of the latest amendment that states ``key`` (``diverged``: how a verdict treats a diverged
        seed); None where none does."""
        return next(((a.date, a.text[key]) for a in reversed(self.amendments) if key in a.text), None)

    def planned(self) -> dict[str, int]:
        """Every spec entry the protocol plans seeds for, with its count (one count per entry, checked)."""
        out: dict[str, int] = {}
        for family in self.families.values():
            out.update(family.planned_seeds)
        return out


# ----------------------------------------------------------------------------- the file's fields, as a table


@dataclass(frozen=True)
class Form:
    """What one field may hold: the test its value passes, what a message says it must be, how it is read, and, where
    it names something the file defines, the section that must define it (``among``; each name, for a list)."""

    ok: Callable[[Any], bool]
    want: str
    read: Callable[[Any], Any] = lambda x: x
    among: str = ""


@dataclass(frozen=True)
class Each:
    """A mapping of the user's names (``listed``: a list) whose every value ``schema`` reads."""

    schema: Any
    want: str = "a mapping"
    listed: bool = False


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _count(least: int) -> Callable[[Any], bool]:
    return lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= least


def _date(x: Any) -> bool:
    try:
        return isinstance(x, str) and bool(datetime.fromisoformat(x))
    except ValueError:
        return False


def _is(kind: type) -> Callable[[Any], bool]:
    return lambda x: isinstance(x, kind)


def _one_of(names: tuple[str, ...]) -> Callable[[Any], bool]:
    return lambda x: isinstance(x, str) and x in names


def _list_of(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda x: isinstance(x, list) and all(map(ok, x))


def _mapping_of(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda x: isinstance(x, dict) and all(map(ok, x.values()))


RULES = ", ".join(RULE_NAMES)
TEXT, NAME, BOOL = Form(_is(str), "a text"), Form(_is(str), "a name"), Form(_is(bool), "true or false")
FRACTION = Form(lambda x: _number(x) and 0 < x < 1, "a fraction in (0, 1) (0.95 for 95%)", float)
DATE = Form(_date, 'a date ("YYYY-MM-DD")')
SAID = Form(lambda x: isinstance(x, str) and bool(x), "a text")  # the protocol's own rules: never left empty
VERDICT_KINDS = Form(_list_of(_is(str)), "a list of kinds of verdict", tuple)

# Each record of the file, field by field: (what it may hold, what it reads as where it is absent or null; `...`: it
# is required). The dataclasses above take the fields of the same names.
COMPARISON = {
    "kind": (NAME, ...),
    "x": (NAME, ...),
    "y": (NAME, None),
    "metric": (NAME, ...),
    "claim": (NAME, None),
    "figure": (Form(lambda x: isinstance(x, str) or _number(x), "a name or a number"), None),
    "at": (Form(_list_of(_count(1)), "a list of lengths in blocks", tuple), []),
    "name": (TEXT, None),
    "y_name": (TEXT, None),
    "source": (TEXT, None),
    "once": (BOOL, False),
    "show": (Form(_mapping_of(_is(str)), "a mapping of name to x.metric or y.metric", lambda x: tuple(x.items())), {}),
}
COMPARISONS = Each(COMPARISON, "a list of comparisons", listed=True)
ENTRY = {
    "family": (Form(_is(str), "a name under `families:`", among="families"), None),
    "confirmatory": (BOOL, ...),
    "rule": (Form(_one_of(RULE_NAMES), f"one of {RULES}"), None),
    "by_claim": (Each(Form(_one_of(RULE_NAMES), f"one of {RULES}"), "a mapping of claim to rule name"), {}),
    "margins": (Form(_list_of(_is(str)), "a list of names under `margins:`", tuple, among="margins"), []),
    "testable": (Form(_one_of(TESTABLE), f"one of {', '.join(TESTABLE)}"), None),
    "min_repetitions": (Form(_count(1), "a count >= 1"), None),
    "why": (TEXT, ""),
}
MARGIN = {
    "value": (Form(lambda x: _number(x) and x > 0, "a positive number", float), ...),
    "unit": (TEXT, ...),
    "reason": (TEXT, ...),
}
FAMILY = {
    "reads": (TEXT, ...),
    "planned_seeds": (Each(Form(_count(1), "a count of seeds >= 1"), "a mapping of spec entry to seeds"), {}),
    "plan": (TEXT, ""),
    "leaderboard": (BOOL, False),
    "comparisons": (COMPARISONS, []),
}
AMENDMENT = {
    "date": (DATE, ...),
    "issue": (Form(_count(1), "an issue number"), ...),
    "rules": (Form(_list_of(_one_of(RULE_NAMES)), f"a list of rule names ({RULES})", tuple), []),
    "kinds": (VERDICT_KINDS, []),
    "fixed_in_prose": (VERDICT_KINDS, []),
    "verdicts": (Each(ENTRY, "a mapping of kind to rule"), {}),
    "comparisons": (Each(COMPARISONS, "a mapping of family to its comparisons"), {}),
    "claims": (Form(_mapping_of(_is(str)), "family: claim", dict), {}),
    "figures": (Form(_mapping_of(_is(list)), "a mapping of family to a list of figures", dict), {}),
    "leaderboard": (Form(_list_of(_is(str)), "a list of names under `families:`", tuple, among="families"), []),
    "cost_device": (Form(_is(str), "a device name"), None),
}
PROTOCOL = {
    "registered": (DATE, ...),
    "level": (FRACTION, ...),
    "power": (FRACTION, ...),
    "max_seeds": (Form(_count(2), "an integer >= 2"), ...),
    "stopping": (SAID, ...),
    "decisions": (SAID, ...),
    "margins": (Each(MARGIN), ...),
    "families": (Each(FAMILY), ...),
    "verdicts": (Each(ENTRY), ...),
    "amendments": (Each(AMENDMENT, "a list", listed=True), []),
}


def _read(value: Any, schema: Any, where: str, problems: list[str], data: dict[str, Any]) -> Any:
    """``value`` read by ``schema``: a :class:`Form`, an :class:`Each`, or a record (field -> (schema, default); a value
    not a mapping reads as an empty one), the names it uses looked up in the file's ``data``. Each value that fails is
    added to ``problems``, said as a user reads it (``level is 95, not ...``): a level of 95 read as a fraction would
    make every interval a nonsense."""
    if isinstance(schema, Form):
        defined = data.get(schema.among) if schema.among else None
        if schema.ok(value) and (
            not isinstance(defined, dict) or set(value if isinstance(value, list) else [value]) <= set(defined)
        ):
            return schema.read(value)
        problems.append(f"{where} is {value!r}, not {schema.want}")
        return None
    if isinstance(schema, Each):
        if not isinstance(value, list if schema.listed else dict):
            problems.append(f"{where} is {type(value).__name__!r}, not {schema.want}")  # a section's text is long
            return None
        if schema.listed:
            return [_read(v, schema.schema, f"{where}[{i}]", problems, data) for i, v in enumerate(value)]
        return {k: _read(v, schema.schema, f"{where}.{k}", problems, data) for k, v in value.items()}
    given, out = value if isinstance(value, dict) else {}, {}
    for key, (form, default) in schema.items():
        v = default if given.get(key) is None and default is not ... else given.get(key)
        out[key] = v if v is None and default is None else _read(v, form, f"{where}.{key}".lstrip("."), problems, data)
    return out


def _make(cls: type[T], read: dict[str, Any], **given: Any) -> T:
    """A ``cls`` of the fields of ``read`` that it has, ``given`` over them."""
    return cls(**{f.name: read[f.name] for f in fields(cls) if f.name in read} | given)  # type: ignore[call-arg]


# ----------------------------------------------------------------------------- reading it


def _spans(node: yaml.Node, lines: list[str]) -> dict[str, tuple[int, int]]:
    """Each key of a mapping node with its lines (1-based, inclusive): from the key to the line before the next, less
    the blank and comment lines at its end."""
    if not isinstance(node, yaml.MappingNode):
        return {}
    keys = [k for k, _ in node.value]
    last = node.value[-1][1].end_mark if node.value else node.end_mark
    stop = last.line if last.column == 0 else last.line + 1
    starts = [k.start_mark.line + 1 for k in keys]
    ends = [*starts[1:], stop + 1]
    return {k.value: _trimmed((a, b - 1), lines) for k, a, b in zip(keys, starts, ends, strict=True)}


def _trimmed(span: tuple[int, int], lines: list[str]) -> tuple[int, int]:
    """``span`` less the blank and comment lines at its end (the comment that opens the next section)."""
    first, last = span
    while last > first and (not lines[last - 1].strip() or lines[last - 1].lstrip().startswith("#")):
        last -= 1
    return first, last


def _amendment_spans(node: yaml.Node, lines: list[str]) -> list[tuple[int, int]]:
    """The lines of each item of the `amendments:` list (1-based, inclusive)."""
    if not isinstance(node, yaml.SequenceNode):
        return []
    starts = [item.start_mark.line + 1 for item in node.value]
    ends = [*(s - 1 for s in starts[1:]), node.end_mark.line + 1]
    return [_trimmed((a, min(b, len(lines))), lines) for a, b in zip(starts, ends, strict=True)]


def load(path: Path = PATH) -> Protocol:
    """The protocol at ``path``, checked: each field as its table (`PROTOCOL`) says, every family, rule and margin an
    entry names defined, and a spec entry's planned seeds agreeing across families. A :class:`ProtocolError` says
    what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
        root = yaml.compose(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ProtocolError(f"the protocol {path} cannot be read: {err}") from None
    if not isinstance(data, dict) or data.get("format") != 1:
        raise ProtocolError(f"the protocol {path} is not a mapping of format 1.")
    problems: list[str] = []
    read = _read(data, PROTOCOL, "", problems, data)
    if problems:
        raise ProtocolError(
            f"the protocol {path} is not valid: {'; '.join(problems)}. Correct the field(s) (its header says what "
            "each one means), or restore the committed file (git checkout -- configs/protocol.yaml)."
        )
    nodes = {k.value: v for k, v in root.value} if isinstance(root, yaml.MappingNode) else {}
    text_lines, amended = text.splitlines(), read["amendments"]
    try:
        lines = {f"margins.{k}": s for k, s in _spans(nodes["margins"], text_lines).items()}
        lines["level"] = _spans(root, text_lines)["level"]
        lines.update({f"families.{k}": s for k, s in _spans(nodes["families"], text_lines).items()})
        spans = _amendment_spans(nodes.get("amendments"), text_lines)
        verdict_lines = _spans(nodes["verdicts"], text_lines)
        verdicts = {k: _make(Entry, v, kind=k, lines=verdict_lines[k]) for k, v in read["verdicts"].items()}
        # a kind an amendment declares is dated by the amendment's lines (`entry_dates`), never by `verdicts:`
        for a, span in zip(amended, spans, strict=True):
            for kind, v in a["verdicts"].items():
                if kind in verdicts:
                    raise ProtocolError(
                        f"the protocol {path}: the amendment of issue {a['issue']} declares `{kind}`, "
                        "which `verdicts:` or an earlier amendment already declares."
                    )
                verdicts[kind] = _make(Entry, v, kind=kind, lines=span)
        # the claim a family's comparisons test where their lines name none (an amendment's `claims:`, the latest's)
        claimed = {family: claim for a in amended for family, claim in a["claims"].items()}
        stated = [a["comparisons"] for a in amended]
        stated.append({k: f["comparisons"] for k, f in read["families"].items() if f["comparisons"]})
        protocol = _make(
            Protocol,
            read,
            path=path,
            margins={k: _make(Margin, m) for k, m in read["margins"].items()},
            families={k: _make(Family, f, name=k) for k, f in read["families"].items()},
            verdicts=verdicts,
            lines=lines,
            amendments=tuple(  # its text: what it states beyond its table's fields (why, error_control, ...)
                _make(
                    Amendment,
                    a,
                    lines=s,
                    text={k: v for k, v in r.items() if k not in AMENDMENT and isinstance(v, str)},
                )
                for a, r, s in zip(amended, data.get("amendments") or [], spans, strict=True)
            ),
            comparisons={
                family: tuple(_make(Comparison, c, family=family, claim=c["claim"] or claimed.get(family)) for c in cs)
                for each in stated
                for family, cs in each.items()
            },
            leaderboard=next((a["leaderboard"] for a in reversed(amended) if a["leaderboard"]), ()),
            figures={family: tuple(items) for a in amended for family, items in a["figures"].items()},
        )
    except ProtocolError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ProtocolError(f"the protocol {path} lacks or garbles {err}.") from None
    _check(protocol)
    return protocol


@functools.cache
def current() -> Protocol:
    """The registered protocol (configs/protocol.yaml), read and checked on the first call and kept: every margin,
    level and count a rule or a report reads is looked up here when it is needed, so importing a module reads no
    protocol file."""
    return load()


def _check(p: Protocol) -> None:
    """What no one field of the file says alone: every kind of verdict has a rule, and a family where it is
    confirmatory; what an amendment re-dates is a kind of verdict, and where it dates one with its family's prose it
    may; figures and comparisons are stated for families the protocol defines; a spec entry is planned at one count
    of seeds. A :class:`ProtocolError` names each that is not."""
    entries = p.verdicts.values()
    problems = [f"`{e.kind}` names no rule" for e in entries if e.rule is None and not e.by_claim]
    problems += [f"`{e.kind}` is confirmatory without a family" for e in entries if e.confirmatory and e.family is None]
    problems += [
        f"the amendment of {a.date} replaces the measure of {k!r}, no verdict"
        for a in p.amendments
        for k in a.kinds
        if k not in p.verdicts
    ]
    # dated with its family only where this amendment declares the kind itself and changes no rule
    problems += [
        f"the amendment of issue {a.issue} dates {k!r} with its family's prose, which only an amendment of "
        "`rules: []` may do for a kind it declares itself (its own `verdicts:`)"
        for a in p.amendments
        for k in a.fixed_in_prose
        if a.rules
        or a.kinds
        or p.verdicts.get(k) is None
        or p.verdicts[k].lines != a.lines
        or p.verdicts[k].family is None
    ]
    for what, stated in (("figures", p.figures), ("comparisons", p.comparisons)):
        problems += [
            f"{what} are stated for the family {f!r}, which the protocol does not define"
            for f in stated
            if f not in p.families
        ]
    counts = {e: sorted({f.planned_seeds.get(e) for f in p.families.values()} - {None}) for e in p.planned()}
    problems += [
        f"the spec entry {e} is planned at {n} seeds by different families" for e, n in counts.items() if len(n) > 1
    ]
    if problems:
        raise ProtocolError(f"the protocol {p.path}: " + "; ".join(problems) + ".")


# ----------------------------------------------------------------------------- when each entry was fixed


@dataclass(frozen=True)
class LevelEdit:
    """The family-wise level's last edit after the file's first commit: when (a line not committed: now) and the
    level before it. A verdict whose label the level before would give otherwise is fixed at the edit."""

    date: datetime
    before: float


UNDATED = "undated"  # Dates.source where git history cannot date the protocol (a shallow clone, or none at all)


@dataclass(frozen=True)
class Dates:
    """When each verdict kind's rule was fixed; ``source``: "git" (blame of its lines, with the commit the file
    was last changed in) or "undated" (a shallow clone, whose oldest commit stands for every older one, or no git
    history at all, an install: no date can be trusted and no verdict is marked registered; ``by_kind`` is empty,
    ``why`` says which). "stated" (the file's own dates) is no longer given: they predate its edits."""

    by_kind: dict[str, datetime]
    source: str
    commit: str | None
    committed: datetime | None
    why: str = ""
    # the issue of each amendment that changes a rule -> its date (what a label it changed is fixed at)
    amended: dict[int, datetime] = field(default_factory=dict)
    level_edit: LevelEdit | None = None
    # each amendment's date, in the file's order: one issue may amend the protocol twice (issue 50 did)
    amendment_dates: tuple[datetime, ...] = ()


def _git(cwd: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


UNCOMMITTED = "0" * 40  # git blame's commit of a line not committed


@dataclass(frozen=True)
class _Blamed:
    commit_of: dict[int, str]  # line (1-based) -> the commit that last changed it (UNCOMMITTED: not committed)
    when: dict[int, datetime]  # line -> that commit's date (now for a line not committed)
    newest: str | None  # the file's newest commit (None: the file is not committed)


def _blame(path: Path) -> _Blamed | str:
    """Per line (1-based) the commit that last changed it and its committer date (a line not committed, or a file
    not committed at all: now), and the newest commit of the file; or why git cannot say (not a checkout: the
    file's stated dates stand; SHALLOW: nothing can be dated)."""
    cwd = path.resolve().parent
    if _git(cwd, "rev-parse", "--is-inside-work-tree") is None:
        return NO_GIT
    if (_git(cwd, "rev-parse", "--is-shallow-repository") or "").strip() == "true":
        return SHALLOW
    now = datetime.now(UTC)
    out = _git(cwd, "blame", "--porcelain", "--", path.resolve().name)
    if out is None:  # in a checkout but never committed: every line is an edit not committed
        count = len(path.read_text(encoding="utf-8").splitlines())
        return _Blamed(dict.fromkeys(range(1, count + 1), UNCOMMITTED), dict.fromkeys(range(1, count + 1), now), None)
    commit_of: dict[int, str] = {}
    when: dict[str, datetime] = {}
    current = None
    for line in out.splitlines():
        head = line.split()
        if len(head) >= 3 and len(head[0]) == 40 and not line.startswith("\t"):
            current = head[0]
            commit_of[int(head[2])] = current
        elif line.startswith("committer-time ") and current is not None:
            when[current] = datetime.fromtimestamp(int(head[1]), UTC)
    lines = {n: now if c == UNCOMMITTED else when[c] for n, c in commit_of.items()}
    committed = [c for c in when if c != UNCOMMITTED]
    return _Blamed(commit_of, lines, max(committed, key=lambda c: when[c]) if committed else None)


SHALLOW = "a shallow clone (its oldest commit stands for every older one)"
NO_GIT = "not in a git checkout (an installed package, or a copy of the tree without its .git)"


def _level_before(path: Path, commit: str) -> float | None:
    """The family-wise level the file held before ``commit`` (UNCOMMITTED: the level committed last); None where
    the file did not exist there or held none (its first commit: no edit)."""
    cwd = path.resolve().parent
    rev = "HEAD" if commit == UNCOMMITTED else f"{commit}^"
    text = _git(cwd, "show", f"{rev}:./{path.resolve().name}")
    try:
        level = (yaml.safe_load(text) or {}).get("level") if text is not None else None
    except (yaml.YAMLError, AttributeError):
        return None
    return float(level) if _number(level) else None


def entry_dates(p: Protocol) -> Dates:
    """When each verdict kind's rule was fixed: the newest commit among the lines of its entry, its family's
    and its margins'; a line not yet committed counts as now (the rule is not registered). The family-wise level's
    last edit is kept beside them (``level_edit``): it fixes the verdicts whose label it changed
    (`findings.conclude`)."""
    blamed = _blame(p.path)
    if isinstance(blamed, str):
        # the file's own dates would date every line at its first registration, edits after the data included
        # (issue 72: a copy without .git upgraded 8 labels), so nothing is dated, as in a shallow clone
        return Dates({}, UNDATED, None, None, blamed)
    now = datetime.now(UTC)

    def newest_of(span: tuple[int, int]) -> datetime:
        return max(blamed.when.get(n, now) for n in range(span[0], span[1] + 1))

    by_kind = {}
    prose_fixed = {k for a in p.amendments for k in a.fixed_in_prose}
    for kind, e in p.verdicts.items():
        # a kind its family's prose fixed before the amendment that declares it: the family's and margins' lines
        spans = [*([] if kind in prose_fixed else [e.lines]), *(p.lines[f"margins.{m}"] for m in e.margins)]
        if e.family is not None:
            spans.append(p.lines[f"families.{e.family}"])
        by_kind[kind] = max(newest_of(s) for s in spans)
    each = tuple(newest_of(a.lines) for a in p.amendments)
    amended = {a.issue: d for a, d in zip(p.amendments, each, strict=True) if a.rules}
    by_kind = _replaced(p, by_kind, each)
    level_edit = None
    first, last = p.lines["level"]
    commit = max(range(first, last + 1), key=lambda n: blamed.when.get(n, now))
    before = _level_before(p.path, blamed.commit_of.get(commit, UNCOMMITTED))
    if before is not None:
        level_edit = LevelEdit(newest_of((first, last)), before)
    committed = max(blamed.when.values(), default=None)
    return Dates(by_kind, "git", blamed.newest, committed, amended=amended, level_edit=level_edit, amendment_dates=each)


def _replaced(p: Protocol, by_kind: dict[str, datetime], each: tuple[datetime, ...]) -> dict[str, datetime]:
    """``by_kind`` with each kind an amendment replaced the measure of (`Amendment.kinds`) fixed at that amendment's
    date where it is later: a verdict whose measure changed after its runs is read anew."""
    out = dict(by_kind)
    for a, when in zip(p.amendments, each, strict=True):
        for kind in a.kinds:
            if kind in out:
                out[kind] = max(out[kind], when)
    return out


def families_added(path: Path = PATH) -> dict[str, datetime]:
    """Family name -> the date of the first commit of the protocol that has it ({} where git history cannot be read):
    the families of its first commit were registered with it, the others added after the first studies."""
    cwd = path.resolve().parent
    log = _git(cwd, "log", "--reverse", "--format=%H %ct", "--", path.resolve().name)
    added: dict[str, datetime] = {}
    for line in (log or "").splitlines():
        commit, when = line.split()
        text = _git(cwd, "show", f"{commit}:./{path.resolve().name}")
        try:
            families = (yaml.safe_load(text or "") or {}).get("families") or {}
        except (yaml.YAMLError, AttributeError):
            continue
        for name in families if isinstance(families, dict) else ():
            added.setdefault(name, datetime.fromtimestamp(int(when), UTC))
    return added


def first_committed(records_dir: Path) -> dict[str, datetime]:
    """Run name -> when its record (``records_dir``/<run>.json) was first committed, from git history ({} where it
    cannot be read): a run rerun after its result was committed is, for a registration, as old as that result."""
    if not records_dir.is_dir():
        return {}
    out = _git(records_dir, "log", "--diff-filter=A", "--format=%x00%ct", "--name-only", "--", ".")
    first: dict[str, datetime] = {}
    when = None
    for line in (out or "").splitlines():
        if line.startswith("\0"):
            when = datetime.fromtimestamp(int(line[1:]), UTC)
        elif line.endswith(".json") and when is not None:
            name = Path(line).stem
            first[name] = min(first.get(name, when), when)
    return first


def registration(fixed: datetime, starts: Mapping[str, datetime | None]) -> tuple[str, int, int]:
    """How a verdict stands to its rule: ("registered" | "partly registered" | "exploratory", runs after the
    rule, runs read). A run whose start is not known counts as before the rule."""
    n = len(starts)
    after = sum(1 for s in starts.values() if s is not None and s > fixed)
    if n and after == n:
        return "registered", after, n
    return ("partly registered" if after else "exploratory"), after, n


def as_dict(p: Protocol, dates: Dates) -> dict[str, Any]:
    """The protocol as results.json states it: where it is, its dates, its margins and families."""
    return {
        "path": "configs/protocol.yaml",
        "dates": dates.source,
        "commit": dates.commit,
        "committed": dates.committed.isoformat() if dates.committed else None,
        "why_stated": dates.why or None,
        **{k: getattr(p, k) for k in ("registered", "level", "power", "max_seeds")},
        "margins": {k: {"value": m.value, "unit": m.unit, "reason": m.reason} for k, m in p.margins.items()},
        "families": {k: {"reads": f.reads, "planned_seeds": f.planned_seeds} for k, f in p.families.items()},
        "fixed": {k: d.isoformat() for k, d in dates.by_kind.items()},
        "amendments": [
            {"issue": a.issue, "date": a.date, "rules": list(a.rules), "cost_device": a.cost_device, **a.text}
            | ({"kinds": list(a.kinds)} if a.kinds else {})
            | ({"committed": dates.amendment_dates[i].isoformat()} if i < len(dates.amendment_dates) else {})
            for i, a in enumerate(p.amendments)
        ],
    }
