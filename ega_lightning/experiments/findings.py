"""What a finding is: the plain data every comparison of the engine (`engine.Compared`) extends, and its computation.

The engine measures a statement and, where it tests a claim, applies the protocol's decision rule (`rules`,
`engine.judge`). This module holds what is common to every finding: where it was measured (:class:`Where`,
:func:`measured_with`, :func:`name`, :func:`pair`), which code its sides ran (:class:`Code`), the Bonferroni
correction of its family and the seeds that would decide it (:func:`correct`) and its registration
(:func:`conclude`). What a finding says, its sentence and its row of the claims table, is written from this data by
`engine` (its templates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple

from ega_lightning.experiments import paper, protocol
from ega_lightning.experiments.comparisons import (
    RunData,
    Variant,
    device,
    shape,
    shape_text,
    split_seeds,
)
from ega_lightning.experiments.rules import (
    BEFORE,
    BY_NAME,
    SIZE_BEFORE,
    Rule,
    Verdict,
    likely_verdict,
    seeds_for_power,
    size_reading,
)
from ega_lightning.experiments.stats import LEVEL, Difference, Summary, bonferroni_level, widen

DIAGNOSTICS = "diagnostics"  # the report section of measurements that test no claim
NOT_IN_RESULTS = {"results": False}  # field metadata: kept in memory, not written to results.json
Read = tuple[str, Difference | None]  # an interval a verdict reads, named by the comparison it is


class Where(NamedTuple):
    """Where a finding was measured, and of what."""

    section: str  # the report section (group) with the evidence
    corpus: str
    # the model, budget, size and device it was measured with (`measured_with`); the name is results.json's key
    regime: str
    subject: str  # e.g. "EGA-1 `linear`"
    against: str | None  # e.g. "baseline `none`"


@dataclass(frozen=True)
class Side:
    """One side of a comparison: each fingerprint of the code its runs trained, with the seeds that ran it."""

    variant: str
    fingerprints: dict[str, list[int]]


@dataclass(frozen=True)
class Code:
    """Which code the sides of a comparison ran. ``flag``: ``different`` when a run's code is known not to be
    today's, ``unknown`` when a run's code is not established, None when every run ran today's code."""

    sides: list[Side]
    flag: str | None
    runs: list[str]  # the runs flagged
    read: list[str] = field(default_factory=list)  # every run its sides read
    pending: list[str] = field(default_factory=list)  # runs its sides' specs plan that are not finished
    # seeds whose runs on its sides name different machines (`comparisons.split_seeds`); not in results.json,
    # whose runs list each run's machine
    split: list[int] = field(default_factory=list, metadata=NOT_IN_RESULTS)
    # per comparison it reads (in the order of the finding's ``reads``), the runs whose seeds enter its interval
    entered: list[list[str]] = field(default_factory=list)
    diverged: list[str] = field(default_factory=list)  # runs of its sides whose final val loss is not finite


@dataclass(frozen=True)
class Magnitude:
    """The size of an effect against the paper's figure: its fraction of the figure, with the family-level
    interval's ends as fractions too, and its reading (`rules.size_reading`)."""

    fraction: float
    low: float | None
    high: float | None
    reading: str | None


@dataclass(frozen=True)
class Registration:
    """When a verdict's rule was fixed against the runs it reads (`protocol.registration`)."""

    mark: str  # registered | partly registered | exploratory
    after: int  # runs started after the rule
    runs: int  # runs it reads
    fixed: str  # the date its protocol entry was committed (or stated); an amendment's, where it changed the label
    amended: str | None = None  # the label before the amendment that changed it (None: no amendment changed it)
    # the label at the family-wise level before its last edit, where that edit changed it (it then fixes the date)
    level_was: str | None = None


NOT_DATED = "not dated"  # a registration git history cannot date (a shallow clone): nothing is marked registered


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One measured statement; ``claim``: the claim of the paper it tests (a key of `paper.CLAIM`, None
    for our own observations). `engine.Compared` extends it with what the engine measured and says it.

    A finding with a verdict keeps the ``rule`` that gave it and the intervals it ``reads`` (each named
    by the comparison it is, so that a family counts a comparison two verdicts read once): `correct`
    re-reads them at the family's Bonferroni level and projects them to more seeds."""

    kind: str  # what was measured, the protocol's kind of verdict, as results.json names it
    section: str
    corpus: str
    regime: str  # Where.regime: what it was measured with, results.json's key "regime"
    subject: str
    against: str | None = None
    ours: Difference | Summary | None = None  # the nominal 95% interval
    paper: float | None = None
    verdict: Verdict | None = None
    claim: str | None = None
    family: str | None = None  # a key of rules.FAMILIES
    corrected: Difference | None = None  # ``ours`` at the family's Bonferroni level (set by `correct`)
    seeds_needed: int | None = None  # an undecided verdict: the paired seeds that would decide it
    family_k: int | None = None  # the family's distinct comparisons (set by `correct`)
    family_level: float | None = None  # the level of each of its intervals
    nominal_verdict: Verdict | None = None  # the verdict at 95%, before the correction
    seeds_range: tuple[int, int] | None = None  # seeds_needed with the stds at the ends of their 95% intervals
    seeds_verdict: Verdict | None = None  # the verdict those seeds would most likely reach (`rules.likely_verdict`)
    code: Code | None = None  # which code its sides ran
    rule_name: str | None = None  # the protocol's name of the rule that gave the verdict
    confirmatory: bool | None = None  # registered in the protocol as a confirmatory verdict
    magnitude: Magnitude | None = None  # an effect's size against the paper's figure (rule "effect")
    not_testable: str | None = None  # why the regime cannot test the claim (verdict "not testable here")
    registration: Registration | None = None
    amended_from: str | None = None  # its label under the rules before the amendment that changed it, where it differs
    amended_by: int | None = None  # that amendment's issue
    rule: Rule | None = field(default=None, compare=False, repr=False, metadata=NOT_IN_RESULTS)
    reads: tuple[Read, ...] = ()  # the intervals its verdict reads

    @property
    def interval(self) -> Difference | None:
        return self.ours if isinstance(self.ours, Difference) else None

    def size_regime(self) -> bool:
        """Whether its regime is the paper's, where an effect's size is read (`rules.size_reading`)."""
        return True

    def family_read(self) -> Finding:
        """Itself with what it derives from its verdict's intervals once its family has read them (`correct`)."""
        return self


# ----------------------------------------------------------------------------- where it was measured


def scale(runs: Sequence[RunData]) -> str:
    """The size, budget and device a verdict was measured at, from the records: '0.82M parameters, 1,500
    steps, CPU'."""
    counts = [r.n_params for r in runs if r.n_params]
    params = list(dict.fromkeys(f"{n / 1e6:.2g}M" for n in (min(counts), max(counts)))) if counts else []
    steps = list(dict.fromkeys(f"{r.max_steps:,}" for r in runs if r.max_steps))
    devices = list(dict.fromkeys(device(r.machine) for r in runs))
    return f"{'–'.join(params) or '?'} parameters, {'/'.join(steps) or '?'} steps, {', '.join(devices) or '?'}"


def measured_with(v: Variant, *others: Variant | None) -> str:
    if not v.done:
        return "—"
    runs = [r for x in (v, *others) if x is not None for r in x.done]
    return f"{v.group} / {v.corpus}: {shape_text(shape(v.done[0].hparams))}, at {scale(runs)}"


def name(v: Variant) -> str:
    return f"{v.paper_name or v.gate} `{v.label}`"


def pair(a: Variant | str, b: Variant | str) -> str:
    """A comparison's name, whichever side comes first."""
    names = sorted(x if isinstance(x, str) else f"{x.group}/{x.label}" for x in (a, b))
    return " vs ".join(names)


def entering(*sides: Variant | None) -> list[str]:
    """The runs whose seeds enter an interval over ``sides``: the seeds every side finished (a paired interval, or
    the mean of one side), or every finished run where the sides share no seed (Welch's interval)."""
    if not sides or any(v is None or not v.done for v in sides):  # a side with no finished run: no interval
        return []
    done = [v.done for v in sides if v is not None]
    shared = set.intersection(*({r.run.seed for r in runs} for runs in done))
    return list(dict.fromkeys(r.run.run_name for runs in done for r in runs if not shared or r.run.seed in shared))


def code_of(*variants: Variant | None, compared: Sequence[Sequence[Variant | None]] | None = None) -> Code:
    """Which code the sides of a comparison ran: per side, each fingerprint and the seeds that ran it;
    a run's code is flagged when it is not established as today's (`provenance.code_status`). ``compared``: the
    sides of each interval the finding reads, in its order (default: one interval over all ``variants``), whose
    entering runs (`entering`) its registration counts."""
    sides, flagged = [], []
    for v in variants:
        if v is None or not v.done:  # a side with no finished run ran no code
            continue
        by_fingerprint: dict[str, list[int]] = {}
        for r in v.done:
            by_fingerprint.setdefault(r.code["fingerprint"] or "unknown", []).append(r.run.seed)
            if r.code["status"] != "today":
                flagged.append((r.run.run_name, r.code["status"]))
        sides.append(Side(name(v), by_fingerprint))
    flag = "different" if any(s == "differs" for _, s in flagged) else ("unknown" if flagged else None)
    read = list(dict.fromkeys(r.run.run_name for v in variants if v is not None for r in v.done))
    pending = list(
        dict.fromkeys(r.run.run_name for v in variants if v is not None for r in v.runs if r.status != "done")
    )
    entered = [entering(*sides) for sides in (compared if compared is not None else [variants])]
    diverged = list(dict.fromkeys(r.run.run_name for v in variants if v is not None for r in v.diverged))
    flagged_runs = [run for run, _ in flagged]
    return Code(sides, flag, flagged_runs, read, pending, split_seeds(*variants), entered=entered, diverged=diverged)


# ----------------------------------------------------------------------------- families and seeds


def level_of(f: Finding) -> float:
    """The level of a finding's intervals: its family's (one interval or many), else 95%."""
    return f.family_level if f.family_level is not None else LEVEL


def _label_then(f: Finding, verdict: Verdict, size: str | None) -> str | None:
    """The plain label ``verdict`` and ``size`` give, where it is not ``f``'s label now (None where it is)."""
    was, now = plain_label(verdict, size), plain_label(f.verdict, f.magnitude.reading if f.magnitude else None)
    return None if was == now else was


def family_of(f: Finding) -> str | None:
    """A finding's family: the protocol's for its kind where the protocol has it, else the study's."""
    entry = protocol.current().verdicts.get(f.kind)
    return entry.family if entry is not None and f.rule is not None else f.family


def _registered_rule(f: Finding) -> Finding:
    """``f`` with the protocol's rule name and confirmatory mark for its kind (a verdict the protocol lacks:
    unchanged). The rule its study applied must be the one the protocol names: a :class:`protocol.ProtocolError`
    otherwise, so that no claim reads one rule and states another."""
    entry = protocol.current().verdicts.get(f.kind)
    if entry is None or f.verdict is None or f.rule_name is not None:
        return f
    name = entry.rule_for(f.claim)
    applied = f.rule.func if isinstance(f.rule, partial) else f.rule
    if applied is not None and applied is not BY_NAME[name]:
        compared = f"{f.subject} vs {f.against}" if f.against else f.subject
        raise protocol.ProtocolError(
            f"the {f.kind} finding {compared!r} ({f.claim}) was judged by {getattr(applied, '__name__', applied)}, "
            f"but the protocol registers the rule {name!r} for it."
        )
    return replace(f, rule_name=name, confirmatory=entry.confirmatory)


def correct(found: list[Finding]) -> list[Finding]:
    """Every finding of a family at the family's Bonferroni level: its intervals widened to 1 − 0.05 / k,
    k the distinct comparisons the family reads over the whole report (one family per comparison), its
    verdict re-read from them; the nominal verdict is kept beside it. Each verdict takes the protocol's rule
    name and confirmatory mark, an effect its size against the paper's figure, an undecided one its seeds."""
    families: dict[str, set[tuple[str, str, str]]] = {}
    for f in found:
        if (family := family_of(f)) is not None:
            families.setdefault(family, set()).update((f.section, f.corpus, key) for key, _ in f.reads)
    out = []
    for f in found:
        f = _registered_rule(f)
        family = family_of(f)
        if family is not None:
            k = len(families[family])
            level = bonferroni_level(k, protocol.current().level)
            wide = [widen(d, level) for _, d in f.reads]
            f = replace(f, family=family, family_k=k, family_level=level, corrected=wide[0] if len(wide) == 1 else None)
            if f.rule is not None:
                f = replace(f, verdict=f.rule(*wide), nominal_verdict=f.verdict)
        if f.rule_name == "effect" and f.paper and f.interval is not None and f.verdict is not Verdict.NOT_TESTABLE:
            d = f.corrected or f.interval
            ends = (d.low / f.paper, d.high / f.paper) if d.low is not None and d.high is not None else (None, None)
            reading = size_reading(d, f.paper, regime=f.size_regime())
            f = replace(f, magnitude=Magnitude(d.estimate / f.paper, *ends, reading))
        f = amended_label(f).family_read()
        # an undecided verdict: the paired seeds at which its rule decides with the protocol's power, with that
        # count's range over the stds' own uncertainty (none where it cannot be projected: one seed, unpaired)
        if f.verdict is Verdict.TOO_FEW_SEEDS and f.rule is not None and f.reads:
            intervals = [d for _, d in f.reads]
            if (projected := seeds_for_power(f.rule, intervals, level_of(f))) is not None:
                likely = likely_verdict(f.rule, intervals, level_of(f), projected[0])
                f = replace(f, seeds_needed=projected[0], seeds_range=projected[1:], seeds_verdict=likely)
        out.append(f)
    return out


def amendment_of(rule_name: str | None) -> protocol.Amendment | None:
    """The latest amendment of the protocol that changed the rule ``rule_name`` (None: none did)."""
    return next((a for a in reversed(protocol.current().amendments) if rule_name in a.rules), None)


def plain_label(verdict: Verdict, size: str | None = None) -> str:
    """A label as plain words: the verdict, and an effect's size reading."""
    return verdict.value + (f", size {size}" if size else "")


def amended_label(f: Finding) -> Finding:
    """``f`` with the label the rules gave before the amendment that changed its rule (`rules.BEFORE`, read from
    the same intervals at the same level), where that label differs from its label now: the amendment then dates
    its registration. A finding whose study read it before (the cost) is left as it is."""
    amendment = amendment_of(f.rule_name)
    if amendment is None or f.amended_by is not None or f.rule is None or not f.reads or f.verdict is None:
        return f
    before = BEFORE[amendment.issue][f.rule_name](*(widen(d, level_of(f)) for _, d in f.reads))
    sized = f.magnitude is not None and f.magnitude.reading and f.paper
    was = _label_then(f, before, SIZE_BEFORE[amendment.issue](f.corrected or f.interval, f.paper) if sized else None)
    return f if was is None else replace(f, amended_from=was, amended_by=amendment.issue)


def resting_on(f: Finding) -> list[str]:
    """The runs a verdict's label rests on: those whose seeds enter the intervals (at the family's level) that
    give the label alone (the gate that clears the positive control's threshold, the gate that beats EGA-1), or
    every interval it reads where none does alone; a finding whose intervals name no runs: every run it reads."""
    code = f.code
    if code is None:
        return []
    if not code.entered or len(code.entered) != max(len(f.reads), 1):
        return code.read
    chosen = list(range(len(code.entered)))
    if f.rule is not None and len(f.reads) > 1 and f.verdict is not None:
        wide = [widen(d, level_of(f)) for _, d in f.reads]
        alone = [i for i in chosen if f.rule(*(d if j == i else None for j, d in enumerate(wide))) is f.verdict]
        chosen = alone or chosen
    return list(dict.fromkeys(run for i in chosen for run in code.entered[i]))


def conclude(found: list[Finding], starts: Mapping[str, datetime | None], dates: protocol.Dates) -> list[Finding]:
    """Each verdict's registration: the date its protocol entry was fixed against the start of every run its label
    rests on (`resting_on`; ``starts``: run name -> start, a rerun's the first commit of its record). The labels are
    the families' (`correct`): the protocol has one error-control scheme (its amendment of 2026-12-05 withdrew the
    study-wide Holm step-down)."""
    out = []
    for f in (_registered_rule(f) for f in found):
        runs = resting_on(f)
        if dates.source == protocol.UNDATED:
            if runs and f.kind in protocol.current().verdicts:
                f = replace(f, registration=Registration(NOT_DATED, 0, len(runs), ""))
            out.append(f)
            continue
        entry, amendment = dates.by_kind.get(f.kind), dates.amended.get(f.amended_by or -1)
        if entry is not None and amendment is not None and entry > amendment:
            # an entry committed after the amendment was registered under it: its label was never read otherwise
            f = replace(f, amended_from=None, amended_by=None)
        # an amendment that changed its label fixes it anew; one that left it as it was does not
        fixed = dates.amended.get(f.amended_by) if f.amended_by is not None else dates.by_kind.get(f.kind)
        # so does an edit of the family-wise level that changed it
        level_was = _label_at_level(f, dates.level_edit.before) if dates.level_edit is not None else None
        if level_was is not None and fixed is not None and dates.level_edit is not None:
            fixed = max(fixed, dates.level_edit.date)
        if fixed is not None and runs:
            mark, after, n = protocol.registration(fixed, {r: starts.get(r) for r in runs})
            when = fixed.isoformat(timespec="minutes")
            f = replace(f, registration=Registration(mark, after, n, when, f.amended_from, level_was))
        out.append(f)
    return out


def _label_at_level(f: Finding, level: float) -> str | None:
    """The label ``f`` would have at the family-wise ``level`` (its k intervals at 1 - (1 - level) / k), where it
    differs from its label now; None where it is the same or the finding reads no family's intervals."""
    if f.family_k is None or f.rule is None or not f.reads or f.verdict is None or level == protocol.current().level:
        return None
    each = bonferroni_level(f.family_k, level)
    sized = f.magnitude is not None and f.magnitude.reading is not None and f.paper and f.interval is not None
    size = size_reading(widen(f.interval, each), f.paper, regime=f.size_regime()) if sized else None
    return _label_then(f, f.rule(*(widen(d, each) for _, d in f.reads)), size)


def claims(found: list[Finding], extra: Sequence[paper.Claim] = ()) -> list[tuple[paper.Claim, Finding | None]]:
    """One row per claim of the paper (then each of ``extra``, a study's own) and regime it was measured in; a
    claim nothing measured gets None."""
    rows: list[tuple[paper.Claim, Finding | None]] = []
    for claim in (*paper.CLAIMS, *extra):
        matching = [f for f in found if f.claim == claim.key and f.tests_claim]
        rows += [(claim, f) for f in matching] if matching else [(claim, None)]
    return rows


def study_wide(found: Sequence[Finding]) -> dict[str, Any]:
    """The study-wide bound, as data: the families the protocol registers, those the report reads a label of, each at a
    family-wise 1 − level with no correction across them, the union bound over those read, and the families the
    protocol gained after its first commit (after the first studies), with the date each was added."""
    p = protocol.current()
    alpha = 1 - p.level
    read = list(dict.fromkeys(f.family for f in found if f.family is not None and f.verdict is not None))
    added = protocol.families_added(p.path)
    first = min(added.values(), default=None)
    later = [
        {"family": name, "added": when.date().isoformat()}
        for name, when in added.items()
        if name in p.families and first is not None and when > first
    ]
    return {
        "registered": list(p.families),
        "read": read,
        "alpha_each": round(alpha, 10),
        "bound": round(len(read) * alpha, 10),
        "first_commit": first.date().isoformat() if first is not None else None,
        "added_after_first": later,
    }
