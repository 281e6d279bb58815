"""The registered protocol (``configs/protocol.yaml``) as data: the margins, families, rules and planned seeds
every verdict of the report is read against, and when each entry was fixed.

The protocol is committed before the runs it governs. :func:`load` reads and checks it; :func:`current` reads the
registered one once, when a report (or anything that needs a margin) first asks for it, never at import;
:func:`entry_dates` gives the date each verdict's rule was fixed (the newest commit of the lines of its entry, of
its family and of its margins, from ``git blame``); where git history cannot date them (a shallow clone, an install
without .git), none.
"""

from __future__ import annotations

import functools
import math
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from ega_lightning.config_files import PACKAGED_CONFIGS
from ega_lightning.errors import UserError

PATH = PACKAGED_CONFIGS / "protocol.yaml"
RULE_NAMES = ("effect", "level", "best", "worse", "equivalent", "tail", "forgets", "frozen", "grows")
RULE_NAMES += ("lower", "control", "cost", "mechanism")
TESTABLE = ("baseline_gap_covers_reduction",)  # the conditions a verdict may be read under (`testable:`)


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


def _spans(node: yaml.Node) -> dict[str, tuple[int, int]]:
    """Each key of a mapping node with its lines (1-based, inclusive): from the key to the line before the next."""
    if not isinstance(node, yaml.MappingNode):
        return {}
    keys = [k for k, _ in node.value]
    last = node.value[-1][1].end_mark if node.value else node.end_mark
    stop = last.line if last.column == 0 else last.line + 1
    starts = [k.start_mark.line + 1 for k in keys]
    return {k.value: (a, b - 1) for k, a, b in zip(keys, starts, [*starts[1:], stop + 1], strict=True)}


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
    """The protocol at ``path``, checked: every family, rule and margin an entry names exists, and a spec
    entry's planned seeds agree across families. A :class:`ProtocolError` says what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
        root = yaml.compose(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ProtocolError(f"the protocol {path} cannot be read: {err}") from None
    if not isinstance(data, dict) or data.get("format") != 1:
        raise ProtocolError(f"the protocol {path} is not a mapping of format 1.")
    if problems := _field_problems(data):
        raise ProtocolError(
            f"the protocol {path} is not valid: {'; '.join(problems)}. Correct the field(s) (its header says what "
            "each one means), or restore the committed file (git checkout -- configs/protocol.yaml)."
        )
    nodes = {k.value: v for k, v in root.value} if isinstance(root, yaml.MappingNode) else {}
    try:
        margins = {k: Margin(float(v["value"]), str(v["unit"]), str(v["reason"])) for k, v in data["margins"].items()}
        families = {
            k: Family(
                k,
                str(v["reads"]),
                {e: int(n) for e, n in (v.get("planned_seeds") or {}).items()},
                v.get("plan") or "",
                bool(v.get("leaderboard")),
            )
            for k, v in data["families"].items()
        }
        text_lines = text.splitlines()
        verdict_lines = {k: _trimmed(s, text_lines) for k, s in _spans(nodes["verdicts"]).items()}
        verdicts = {kind: _entry(kind, v, verdict_lines[kind]) for kind, v in data["verdicts"].items()}
        lines = {f"margins.{k}": _trimmed(s, text_lines) for k, s in _spans(nodes["margins"]).items()}
        lines["level"] = _trimmed(_spans(root)["level"], text_lines)
        lines.update({f"families.{k}": _trimmed(s, text_lines) for k, s in _spans(nodes["families"]).items()})
        amended = data.get("amendments") or []
        spans = _amendment_spans(nodes.get("amendments"), text_lines)
        amendments = tuple(
            Amendment(
                str(a["date"]),
                int(a["issue"]),
                tuple(a.get("rules") or ()),
                a.get("cost_device"),
                {k: str(v) for k, v in a.items() if isinstance(v, str) and k not in ("date", "cost_device")},
                span,
                tuple(a.get("kinds") or ()),
                tuple(a.get("fixed_in_prose") or ()),
            )
            for a, span in zip(amended, spans, strict=True)
        )
        # a kind an amendment declares is dated by the amendment's lines (`entry_dates`), never by `verdicts:`
        for a, span in zip(amended, spans, strict=True):
            for kind, v in (a.get("verdicts") or {}).items():
                if kind in verdicts:
                    raise ProtocolError(
                        f"the protocol {path}: the amendment of issue {a['issue']} declares `{kind}`, "
                        "which `verdicts:` or an earlier amendment already declares."
                    )
                verdicts[kind] = _entry(kind, v, span)
        # the claim a family's comparisons test where their lines name none (an amendment's `claims:`, the latest's)
        claimed = {family: str(claim) for a in amended for family, claim in (a.get("claims") or {}).items()}
        stated = [a.get("comparisons") or {} for a in amended] + [
            {k: v["comparisons"] for k, v in data["families"].items() if v.get("comparisons")}
        ]
        compared = {
            family: tuple(
                Comparison(
                    family,
                    str(c["kind"]),
                    str(c["x"]),
                    c.get("y"),
                    str(c["metric"]),
                    c.get("claim") or claimed.get(family),
                    c.get("figure"),
                    tuple(c.get("at") or ()),
                    c.get("name"),
                    c.get("y_name"),
                    c.get("source"),
                    bool(c.get("once")),
                    tuple((k, str(v)) for k, v in (c.get("show") or {}).items()),
                )
                for c in items
            )
            for each in stated
            for family, items in each.items()
        }
        protocol = Protocol(
            path,
            str(data["registered"]),
            float(data["level"]),
            float(data["power"]),
            int(data["max_seeds"]),
            str(data["stopping"]),
            str(data["decisions"]),
            margins,
            families,
            verdicts,
            lines,
            amendments,
            compared,
            next((tuple(a["leaderboard"]) for a in reversed(amended) if a.get("leaderboard")), ()),
            {family: tuple(items) for a in amended for family, items in (a.get("figures") or {}).items()},
        )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ProtocolError(f"the protocol {path} lacks or garbles {err}.") from None
    _check(protocol)
    return protocol


def _entry(kind: str, v: dict[str, Any], lines: tuple[int, int]) -> Entry:
    return Entry(
        kind,
        v.get("family"),
        bool(v["confirmatory"]),
        v.get("rule"),
        dict(v.get("by_claim") or {}),
        tuple(v.get("margins") or ()),
        v.get("testable"),
        v.get("min_repetitions"),
        str(v.get("why") or ""),
        lines,
    )


@functools.cache
def current() -> Protocol:
    """The registered protocol (configs/protocol.yaml), read and checked on the first call and kept: every margin,
    level and count a rule or a report reads is looked up here when it is needed, so importing a module reads no
    protocol file."""
    return load()


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _date(x: Any) -> bool:
    try:
        datetime.fromisoformat(str(x))
    except ValueError:
        return False
    return isinstance(x, str)


def _strings(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(v, str) for v in x)


def _field_problems(data: dict[str, Any]) -> list[str]:
    """Each field of the protocol's data that is missing, of another type or out of its range, said as a user
    reads it (``level is 95, not ...``): a level of 95 read as a fraction would make every interval a nonsense."""
    problems = []

    def check(ok: bool, where: str, value: Any, want: str) -> None:
        if not ok:
            problems.append(f"{where} is {value!r}, not {want}")

    check(_date(data.get("registered")), "registered", data.get("registered"), 'a date ("YYYY-MM-DD")')
    for key in ("level", "power"):
        value = data.get(key)
        check(_number(value) and 0 < value < 1, key, value, "a fraction in (0, 1) (0.95 for 95%)")
    seeds = data.get("max_seeds")
    check(isinstance(seeds, int) and not isinstance(seeds, bool) and seeds >= 2, "max_seeds", seeds, "an integer >= 2")
    for key in ("stopping", "decisions"):
        check(isinstance(data.get(key), str) and bool(data.get(key)), key, data.get(key), "a text")
    sections = {"margins": dict, "families": dict, "verdicts": dict}
    for key, kind in sections.items():
        check(isinstance(data.get(key), kind), key, type(data.get(key)).__name__, "a mapping")
    for name, m in (data.get("margins") or {}).items() if isinstance(data.get("margins"), dict) else []:
        m = m if isinstance(m, dict) else {}
        value = m.get("value")
        check(_number(value) and value > 0, f"margins.{name}.value", value, "a positive number")
        for key in ("unit", "reason"):
            check(isinstance(m.get(key), str), f"margins.{name}.{key}", m.get(key), "a text")
    for name, f in (data.get("families") or {}).items() if isinstance(data.get("families"), dict) else []:
        f = f if isinstance(f, dict) else {}
        check(isinstance(f.get("reads"), str), f"families.{name}.reads", f.get("reads"), "a text")
        planned = f.get("planned_seeds") or {}
        for entry, n in planned.items() if isinstance(planned, dict) else [("", planned)]:
            ok = isinstance(n, int) and not isinstance(n, bool) and n >= 1
            check(ok, f"families.{name}.planned_seeds{'.' + entry if entry else ''}", n, "a count of seeds >= 1")
        check(isinstance(f.get("plan") or "", str), f"families.{name}.plan", f.get("plan"), "a text")
        board = f.get("leaderboard", False)
        check(isinstance(board, bool), f"families.{name}.leaderboard", board, "true or false")
    amendments = data.get("amendments") or []
    declared = (
        [(f"verdicts.{k}", v) for k, v in (data.get("verdicts") or {}).items()]
        if isinstance(data.get("verdicts"), dict)
        else []
    )
    for i, a in enumerate(amendments if isinstance(amendments, list) else []):
        own = a.get("verdicts") if isinstance(a, dict) else None
        check(own is None or isinstance(own, dict), f"amendments[{i}].verdicts", own, "a mapping of kind to rule")
        declared += (
            [(f"amendments[{i}].verdicts.{k}", v) for k, v in (own or {}).items()] if isinstance(own, dict) else []
        )
    for where, v in declared:
        v = v if isinstance(v, dict) else {}
        check(isinstance(v.get("confirmatory"), bool), f"{where}.confirmatory", v.get("confirmatory"), "true or false")
        for key in ("family", "rule", "testable"):
            check(v.get(key) is None or isinstance(v.get(key), str), f"{where}.{key}", v.get(key), "a name")
        check(_strings(v.get("margins") or []), f"{where}.margins", v.get("margins"), "a list of margin names")
        claims = v.get("by_claim") or {}
        ok = isinstance(claims, dict) and all(isinstance(r, str) for r in claims.values())
        check(ok, f"{where}.by_claim", claims, "a mapping of claim to rule name")
        reps = v.get("min_repetitions")
        ok = reps is None or (isinstance(reps, int) and not isinstance(reps, bool) and reps >= 1)
        check(ok, f"{where}.min_repetitions", reps, "a count >= 1")
        check(isinstance(v.get("why") or "", str), f"{where}.why", v.get("why"), "a text")
    check(isinstance(amendments, list), "amendments", type(amendments).__name__, "a list")
    for i, a in enumerate(amendments if isinstance(amendments, list) else []):
        a = a if isinstance(a, dict) else {}
        where = f"amendments[{i}]"
        check(_date(a.get("date")), f"{where}.date", a.get("date"), 'a date ("YYYY-MM-DD")')
        issue = a.get("issue")
        check(isinstance(issue, int) and not isinstance(issue, bool), f"{where}.issue", issue, "an issue number")
        check(_strings(a.get("rules") or []), f"{where}.rules", a.get("rules"), "a list of rule names")
        check(_strings(a.get("kinds") or []), f"{where}.kinds", a.get("kinds"), "a list of kinds of verdict")
        fixed = a.get("fixed_in_prose") or []
        check(_strings(fixed), f"{where}.fixed_in_prose", fixed, "a list of kinds of verdict")
        figures = a.get("figures") or {}
        ok = isinstance(figures, dict) and all(isinstance(x, list) for x in figures.values())
        check(ok, f"{where}.figures", figures, "a mapping of family to a list of figures")
        board = a.get("leaderboard") or []
        check(_strings(board), f"{where}.leaderboard", board, "a list of family names")
        claims = a.get("claims") or {}
        check(isinstance(claims, dict) and _strings(list(claims.values())), f"{where}.claims", claims, "family: claim")
        device = a.get("cost_device")
        check(device is None or isinstance(device, str), f"{where}.cost_device", device, "a device name")
    return problems


def _check(p: Protocol) -> None:
    problems = []
    for e in p.verdicts.values():
        for rule in [e.rule] if e.rule else list(e.by_claim.values()):
            if rule not in RULE_NAMES:
                problems.append(f"`{e.kind}` names the rule {rule!r}, not one of {', '.join(RULE_NAMES)}")
        if e.rule is None and not e.by_claim:
            problems.append(f"`{e.kind}` names no rule")
        if e.family is not None and e.family not in p.families:
            problems.append(f"`{e.kind}` names the family {e.family!r}, which the protocol does not define")
        if e.confirmatory and e.family is None:
            problems.append(f"`{e.kind}` is confirmatory without a family")
        problems += [f"`{e.kind}` names the margin {m!r}, not defined" for m in e.margins if m not in p.margins]
        if e.testable is not None and e.testable not in TESTABLE:
            problems.append(f"`{e.kind}` is testable under {e.testable!r}, not one of {', '.join(TESTABLE)}")
    for a in p.amendments:
        problems += [
            f"the amendment of {a.date} changes the rule {r!r}, not one of {', '.join(RULE_NAMES)}"
            for r in a.rules
            if r not in RULE_NAMES
        ]
        problems += [
            f"the amendment of {a.date} replaces the measure of {k!r}, no verdict"
            for k in a.kinds
            if k not in p.verdicts
        ]
        # dated with its family only where this amendment declares the kind itself and changes no rule
        problems += [
            f"the amendment of issue {a.issue} dates {k!r} with its family's prose, which only an amendment of "
            "`rules: []` may do for a kind it declares itself (its own `verdicts:`)"
            for k in a.fixed_in_prose
            if a.rules
            or a.kinds
            or p.verdicts.get(k) is None
            or p.verdicts[k].lines != a.lines
            or p.verdicts[k].family is None
        ]
    problems += [
        f"figures are stated for the family {family!r}, which the protocol does not define"
        for family in p.figures
        if family not in p.families
    ]
    problems += [
        f"the leaderboard ranks the family {family!r}, which the protocol does not define"
        for family in p.leaderboard
        if family not in p.families
    ]
    problems += [
        f"comparisons are stated for the family {family!r}, which the protocol does not define"
        for family in p.comparisons
        if family not in p.families
    ]
    counts: dict[str, set[int]] = {}
    for family in p.families.values():
        for entry, n in family.planned_seeds.items():
            counts.setdefault(entry, set()).add(n)
    problems += [
        f"the spec entry {e} is planned at {sorted(n)} seeds by different families"
        for e, n in counts.items()
        if len(n) > 1
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
