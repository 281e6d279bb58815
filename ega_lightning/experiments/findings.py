"""What a finding is: the typed base every study's findings extend, with what all of them say alike.

A study (`ega_lightning.experiments.studies`) measures a statement and, where it tests a claim,
applies its decision rule (`rules`) through :func:`judged`. This module holds what is common to every
finding: where it was measured (:class:`Where`, :func:`regime`, :func:`name`, :func:`pair`), which code
its sides ran (:class:`Code`), the Bonferroni correction of its family (:func:`correct`), the seeds
that would decide it (:func:`seeds_needed`), and the parts of its sentence and of its row of the
claims table that do not depend on what was measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, NamedTuple, TypeVar

from ega_lightning.experiments import paper
from ega_lightning.experiments.comparisons import RunData, Variant, device
from ega_lightning.experiments.rules import MAX_SEEDS, Rule, Verdict, seeds_to_decide
from ega_lightning.experiments.stats import LEVEL, Difference, Summary, bonferroni_level, widen
from ega_lightning.experiments.text import anchor, fmt_interval, how

DIAGNOSTICS = "diagnostics"  # the report section of measurements that test no claim
NOT_IN_RESULTS = {"results": False}  # field metadata: kept in memory, not written to results.json


class Where(NamedTuple):
    """Where a finding was measured, and of what."""

    section: str  # the report section (group) with the evidence
    corpus: str
    regime: str  # the model, budget, size and device it was measured with
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


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One measured statement; ``claim``: the claim of the paper it tests (a key of `paper.CLAIM`, None
    for our own observations). Each study's findings extend it with what they measured, and say it
    (:meth:`measured`).

    A finding with a verdict keeps the ``rule`` that gave it and the intervals it ``reads`` (each named
    by the comparison it is, so that a family counts a comparison two verdicts read once): `correct`
    re-reads them at the family's Bonferroni level, `seeds_needed` projects them to more seeds."""

    kind: ClassVar[str]  # what was measured, as results.json names it
    # (scale, digits, signed): how its intervals are written in the claims table and its family's text
    interval_format: ClassVar[tuple[float, int, bool]] = (1.0, 3, True)

    section: str
    corpus: str
    regime: str
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
    seeds_nominal: int | None = None  # seeds_needed at 95%
    code: Code | None = None  # which code its sides ran
    rule: Rule | None = field(default=None, compare=False, repr=False, metadata=NOT_IN_RESULTS)
    reads: tuple[tuple[str, Difference | None], ...] = field(default=(), metadata=NOT_IN_RESULTS)

    # ------------------------------------------------------------------------- its sentence

    @property
    def interval(self) -> Difference | None:
        return self.ours if isinstance(self.ours, Difference) else None

    @property
    def verdict_text(self) -> str:
        return f" — **{self.verdict.value}**" if self.verdict is not None else ""

    def measured(self) -> str:
        """What was measured and its verdict, as its section says it."""
        raise NotImplementedError(f"{type(self).__name__} says nothing")

    def sentence(self) -> str:
        """The finding as it reads in its section: what was measured and its verdict, then its family's
        correction, the seeds that would decide it and the code its sides ran."""
        seeds = self.seeds_text()
        extras = [self._family_sentence(), seeds.capitalize() + "." if seeds else "", self._code_sentence()]
        return " ".join([self.measured(), *(x for x in extras if x)])

    def _corrected_text(self) -> str:
        scale, digits, signed = self.interval_format
        return fmt_interval(self.corrected, signed=signed, scale=scale, digits=digits)

    def _family_sentence(self) -> str:
        if self.family is None:
            return ""
        text = f"Bonferroni over the {self.family} family (k = {self.family_k}): each interval at {self._level()}"
        if self.corrected is not None:
            text += f", this one {self._corrected_text()}"
        if self.verdict is not None and self.nominal_verdict is not self.verdict:
            text += f"; at nominal 95% it would read {self._nominal()}"
        return text + "."

    def _level(self, digits: int = 2) -> str:
        return f"{100 * (self.family_level or 0.0):.{digits}f}%"

    def _nominal(self) -> str:
        return self.nominal_verdict.value if self.nominal_verdict is not None else "None"

    def _code_sentence(self) -> str:
        if self.code is None or not self.code.sides:
            return ""
        sides = "; ".join(
            f"{side.variant} "
            + ", ".join(
                f"{fp[:8] if fp != 'unknown' else 'unknown'} (seed{'s' if len(seeds) > 1 else ''} "
                f"{', '.join(map(str, seeds))})"
                for fp, seeds in side.fingerprints.items()
            )
            for side in self.code.sides
        )
        if self.code.flag is None:
            return f"Code (fingerprint): {sides}."
        runs = ", ".join(f"`{r}`" for r in self.code.runs)
        return f"Code (fingerprint): {sides}. ⚠ {self.code.flag}: not today's code for {runs}."

    def seeds_text(self) -> str:
        def count(n: int) -> str:
            return f"> {MAX_SEEDS}" if n > MAX_SEEDS else f"{n}"

        if self.seeds_needed is None:
            return ""
        nominal = self.seeds_nominal
        at_nominal = f" ({count(nominal)} at nominal 95%)" if nominal and nominal != self.seeds_needed else ""
        return f"{count(self.seeds_needed)} paired seeds would decide it{at_nominal}"

    # ------------------------------------------------------------------------- its row of the claims table

    def ours_cell(self) -> str:
        d = self.interval
        if d is None:
            return "—"
        scale, digits, signed = self.interval_format
        return f"{fmt_interval(d, signed=signed, scale=scale, digits=digits)}, {how(d)}"

    def claim_subject(self) -> str:
        """What a row of the claims table measured, where it is not the claim's own comparison."""
        return ""

    def family_cell(self) -> str:
        """The interval a family's verdict reads (Bonferroni), or what the verdict reads where it reads several."""
        if self.family is None:
            return "—"
        where = f"{self.family}, k = {self.family_k}, {self._level(1)}"
        return where if self.corrected is None else f"{self._corrected_text()} ({where})"

    def verdict_cell(self) -> str:
        seeds = self.seeds_text()
        return f"**{self.verdict.value if self.verdict else None}**" + (f" ({seeds})" if seeds else "")

    def code_cell(self) -> str:
        if self.code is None or not self.code.sides:
            return "—"
        if self.code.flag is None:
            return "today's"
        runs = self.code.runs
        return f"⚠ {self.code.flag} ({len(runs)} run{'s' if len(runs) > 1 else ''})"

    def evidence(self) -> str:
        """The link to the evidence: its section."""
        return f"[{self.section}](#{anchor(self.section)})"

    def label(self) -> str:
        return f"{self.subject} vs {self.against}" if self.against else self.subject


F = TypeVar("F", bound=Finding)


def judged(
    cls: type[F],
    where: Where,
    reads: Sequence[tuple[str, Difference | None]],
    rule: Rule,
    *,
    ours: Difference | Summary | None = None,
    **measured: Any,
) -> F:
    """A finding whose verdict is ``rule`` of the intervals it ``reads``; ``ours``: the first of them unless given."""
    reads = tuple(reads)
    shown = ours if ours is not None else (reads[0][1] if reads else None)
    verdict = rule(*(d for _, d in reads))
    return cls(**where._asdict(), ours=shown, verdict=verdict, rule=rule, reads=reads, **measured)


# ----------------------------------------------------------------------------- where it was measured


def scale(runs: Sequence[RunData]) -> str:
    """The size, budget and device a verdict was measured at, from the records: '0.82M parameters, 1,500
    steps, CPU'."""
    counts = [r.n_params for r in runs if r.n_params]
    params = list(dict.fromkeys(f"{n / 1e6:.2g}M" for n in (min(counts), max(counts)))) if counts else []
    steps = list(dict.fromkeys(f"{r.max_steps:,}" for r in runs if r.max_steps))
    devices = list(dict.fromkeys(device(r.machine) for r in runs))
    return f"{'–'.join(params) or '?'} parameters, {'/'.join(steps) or '?'} steps, {', '.join(devices) or '?'}"


def regime(v: Variant, *others: Variant | None) -> str:
    if not v.done:
        return "—"
    h = v.done[0].hparams
    model = f"{h.get('n_layer')}×{h.get('n_head')}×{h.get('n_embd')} T{h.get('block_size')}"
    runs = [r for x in (v, *others) if x is not None for r in x.done]
    return f"{v.group} / {v.corpus}: {model}, at {scale(runs)}"


def name(v: Variant) -> str:
    return f"{v.paper_name or v.gate} `{v.label}`"


def pair(a: Variant | str, b: Variant | str) -> str:
    """A comparison's name, whichever side comes first."""
    names = sorted(x if isinstance(x, str) else f"{x.group}/{x.label}" for x in (a, b))
    return " vs ".join(names)


def code_of(*variants: Variant | None) -> Code:
    """Which code the sides of a comparison ran: per side, each fingerprint and the seeds that ran it;
    a run's code is flagged when it is not established as today's (`provenance.code_status`)."""
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
    return Code(sides, flag, [run for run, _ in flagged])


# ----------------------------------------------------------------------------- families and seeds


def seeds_needed(f: Finding) -> int | None:
    """For an undecided verdict: the paired seeds at which its rule would decide (`rules.seeds_to_decide`),
    None when it cannot be projected (no rule, one seed, an unpaired interval)."""
    if f.verdict is not Verdict.TOO_FEW_SEEDS or f.rule is None or not f.reads:
        return None
    level = f.family_level if f.family_level is not None else LEVEL  # one interval or many: the family's level
    return seeds_to_decide(f.rule, [d for _, d in f.reads], level)


def correct(found: list[Finding]) -> list[Finding]:
    """Every finding of a family at the family's Bonferroni level: its intervals widened to 1 − 0.05 / k,
    k the distinct comparisons the family reads (in one section and corpus), its verdict re-read from
    them; the nominal verdict is kept beside it. Then each undecided verdict's seeds_needed."""
    families: dict[tuple[str, str, str], set[str]] = {}
    for f in found:
        if f.family is not None:
            families.setdefault((f.family, f.section, f.corpus), set()).update(key for key, _ in f.reads)
    out = []
    for f in found:
        if f.family is not None:
            k = len(families[(f.family, f.section, f.corpus)])
            level = bonferroni_level(k)
            wide = [widen(d, level) for _, d in f.reads]
            f = replace(
                f,
                verdict=f.rule(*wide) if f.rule is not None else None,
                corrected=wide[0] if len(wide) == 1 else None,
                family_k=k,
                family_level=level,
                nominal_verdict=f.verdict,
                seeds_nominal=seeds_needed(f),  # f is still the nominal finding here
            )
        out.append(replace(f, seeds_needed=seeds_needed(f)))
    return out


def claims(found: list[Finding]) -> list[tuple[paper.Claim, Finding | None]]:
    """One row per claim of the paper and regime it was measured in; a claim nothing measured gets None."""
    rows: list[tuple[paper.Claim, Finding | None]] = []
    for claim in paper.CLAIMS:
        matching = [f for f in found if f.claim == claim.key]
        rows += [(claim, f) for f in matching] if matching else [(claim, None)]
    return rows
