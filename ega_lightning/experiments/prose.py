"""What the report says of a finding, written from its data: its sentence, its label and its row of the claims
table. A finding is plain data and its computation (`findings`, `studies`); its words are these plain functions.

What differs by kind dispatches on the finding's type (`functools.singledispatch`): :func:`measured` (what was
measured, as its section says it), :func:`claim_subject`, :func:`ours_cell`, :func:`label_text`,
:func:`regime_text` and :func:`evidence`, each with what every finding says alike as its default. A study registers
its own beside its findings (``@prose.measured.register``), so that a new study is its module alone. The rest
(:func:`sentence`, the family's, seeds', code's and registration's words, the cells) is the same for every finding.
"""

from __future__ import annotations

from functools import singledispatch

from ega_lightning.experiments import protocol
from ega_lightning.experiments.comparisons import diverged_rule, split_text
from ega_lightning.experiments.findings import NOT_DATED, Finding, ReadOnce, Registration
from ega_lightning.experiments.rules import NOT_PAPER_REGIME, Verdict, margin_of, max_seeds
from ega_lightning.experiments.text import anchor, fmt_interval, how, seed_count, seed_list

# the margin each rule reads an interval against (its lines at ±; the protocol's names), where the family's
# interval is printed
MARGINS = {name: ("loss",) for name in ("effect", "lower", "worse", "best", "grows", "equivalent", "frozen")}
MARGINS |= {"tail": ("tail",), "forgets": ("tau_keep",)}


# ----------------------------------------------------------------------------- its sentence


@singledispatch
def measured(f: Finding) -> str:
    """What was measured and its verdict, as its section says it."""
    raise NotImplementedError(f"{type(f).__name__} says nothing")


def sentence(f: Finding) -> str:
    """The finding as it reads in its section: what was measured and its verdict, then its family's
    correction, the seeds that would decide it and the code its sides ran."""
    seeds = seeds_text(f)
    extras = [family_sentence(f), seeds.capitalize() + "." if seeds else "", diverged_sentence(f), code_sentence(f)]
    return " ".join([measured(f), *(x for x in extras if x)])


def verdict_text(f: Finding) -> str:
    """The verdict as a sentence ends with it; a family read once, before its last run is in: how many are."""
    if isinstance(f, ReadOnce) and f.interim:
        return f"; {state(f)}"
    return f" — {label_text(f)}" if f.verdict is not None else ""


def verdict_label(f: Finding) -> str:
    """The verdict in bold; an effect's two readings (direction, size); why a claim is not testable."""
    if f.verdict is None:
        return ""
    if f.not_testable:
        return f"**{f.verdict.value}** ({f.not_testable})"
    if f.rule_name != "effect" or f.verdict in (Verdict.NO_DATA,):
        return f"**{f.verdict.value}**"
    m = f.magnitude
    if m is None or m.reading is None:
        return f"effect **{f.verdict.value}**"
    if m.reading == NOT_PAPER_REGIME:
        return f"effect **{f.verdict.value}**, size **{m.reading}**{regime_text(f)}"
    ends = f" [{100 * m.low:.0f}%, {100 * m.high:.0f}%]" if m.low is not None and m.high is not None else ""
    return f"effect **{f.verdict.value}**, size **{m.reading}** ({100 * m.fraction:.0f}%{ends} of the paper's)"


label_text = singledispatch(verdict_label)  # a study may add to its findings' label (past the block: its reading)


@singledispatch
def regime_text(f: Finding) -> str:
    """Why its regime is not the paper's, as the label says it."""
    return ""


def state(f: ReadOnce) -> str:
    """How many of a family's planned runs are in, before the protocol reads it."""
    if not f.runs_in:
        return f"no run finished yet (0 of {f.runs_planned} {f.counted} in)"
    n = f.interval.n if f.interval is not None else 0  # the seeds its interval pairs, before the label is read
    return (
        (f"{seed_count(n)}: no label; " if n else "")
        + f"not read yet: {f.runs_in} of {f.runs_planned} {f.counted} in (the protocol reads the family "
        "once, when all are finished)"
    )


def diverged_sentence(f: Finding) -> str:
    """The seeds its sides lost to divergence, and how its verdict treats them (the protocol's rule)."""
    if f.code is None or not f.code.diverged:
        return ""
    runs = ", ".join(f"`{r}`" for r in f.code.diverged)
    return f"⚠ Diverged (final val loss not finite): {runs}; {diverged_rule()}."


def _prints_as(end: float | None, line: float, scale: float, digits: int) -> bool:
    """Whether ``end``, not ``line`` itself, prints as ``line`` at ``digits``: its side of the line unreadable."""
    return end is not None and end != line and round(end * scale, digits) == round(line * scale, digits)


def corrected_text(f: Finding) -> str:
    scale, digits, signed = f.interval_format
    d = f.corrected
    # an end that would print as the margin it decides against gets the digits that show on which side it lies
    lines = [s * margin_of(m) for m in MARGINS.get(f.rule_name or "", ()) for s in (1, -1)]
    while (
        d is not None
        and digits < 6
        and any(_prints_as(end, line, scale, digits) for end in (d.low, d.high) for line in lines)
    ):
        digits += 1
    return fmt_interval(d, signed=signed, scale=scale, digits=digits)


def family_sentence(f: Finding) -> str:
    if f.family is None:
        return ""
    text = f"Bonferroni over the {f.family} family (k = {f.family_k}): each interval at {level(f)}"
    if f.corrected is not None:
        text += f", this one {corrected_text(f)}"
    return text + "."  # its label reads this level alone: no nominal-95% label is set beside it


def level(f: Finding, digits: int = 2) -> str:
    return f"{100 * (f.family_level or 0.0):.{digits}f}%"


def code_sentence(f: Finding) -> str:
    if f.code is None or not f.code.sides:
        return ""
    sides = "; ".join(
        f"{side.variant} "
        + ", ".join(f"{fp[:8]} ({seed_list(seeds)})" for fp, seeds in side.fingerprints.items())  # 'unknown' is shorter
        for side in f.code.sides
    )
    machines = ""
    if f.code.split:
        seeds = ", ".join(map(str, f.code.split))
        machines = (
            f" ⚠ Seed(s) {seeds} pair runs made on different machines, so the difference measures the machines "
            "as well (rounding differs between them)."
        )
    if f.code.flag is None:
        return f"Code (fingerprint): {sides}.{machines}"
    runs = ", ".join(f"`{r}`" for r in f.code.runs)
    return f"Code (fingerprint): {sides}. ⚠ {f.code.flag}: not today's code for {runs}.{machines}"


def seeds_text(f: Finding) -> str:
    def count(n: int) -> str:
        return f"> {max_seeds()}" if n > max_seeds() else f"{n}"

    if f.seeds_needed is None:
        return ""
    spread = ""
    if f.seeds_range is not None and f.seeds_range != (f.seeds_needed, f.seeds_needed):
        low, high = f.seeds_range
        spread = f"; {count(low)} to {count(high)} with the std at the ends of its 95% interval"
    power = f"{100 * protocol.current().power:.0f}%"
    likely = f", most likely as **{f.seeds_verdict.value}**" if f.seeds_verdict is not None else ""
    return f"{count(f.seeds_needed)} paired seeds would decide it with {power} probability{likely}{spread}"


# ----------------------------------------------------------------------------- its row of the claims table


@singledispatch
def ours_cell(f: Finding) -> str:
    d = f.interval
    if d is None:
        return "—"
    (scale, digits, signed), (before, after) = f.interval_format, f.cell_words
    return f"{before}{fmt_interval(d, signed=signed, scale=scale, digits=digits)}{after}, {how(d)}"


@singledispatch
def claim_subject(f: Finding) -> str:
    """What a row of the claims table measured, where it is not the claim's own comparison."""
    return ""


def family_cell(f: Finding) -> str:
    """The interval a family's verdict reads (Bonferroni), or what the verdict reads where it reads several."""
    if f.family is None:
        return "—"
    where = f"{f.family}, k = {f.family_k}, {level(f, 1)}"
    return where if f.corrected is None else f"{corrected_text(f)} ({where})"


def verdict_cell(f: Finding) -> str:
    if isinstance(f, ReadOnce) and f.interim:
        return f"**{state(f)}**"
    seeds = seeds_text(f)
    return (label_text(f) or "**None**") + (f" ({seeds})" if seeds else "")


def registration_text(r: Registration) -> str:
    if r.mark == NOT_DATED:
        return f"{NOT_DATED} (git history cannot date the protocol here)"
    mark = r.mark
    if r.mark == "partly registered":
        mark = f"partly registered ({r.after} of {r.runs} runs after the rule)"
    if r.amended is not None:
        # ``fixed`` is the amendment's date unless a later edit of the level re-dated the label (issue 72: "the
        # amendment of 2026-12-07", the level edit's date, which no amendment has)
        of = "" if r.level_was is not None else f" of {r.fixed[:10]}"
        mark += f"; the amendment{of} changed its label (was: {r.amended})"
    if r.level_was is not None:
        mark += f"; the edit of the family-wise level ({r.fixed[:10]}) changed its label (was: {r.level_was})"
    return mark


def registration_cell(f: Finding) -> str:
    if f.confirmatory is False:
        return "exploratory (not confirmatory)"
    text = registration_text(f.registration) if f.registration is not None else "—"
    pending = f.code.pending if f.code is not None else []
    if pending and f.verdict is not None:
        done = len(f.code.read) if f.code is not None else 0
        text += f"; interim: {done} of {done + len(pending)} planned runs finished (the protocol reads it at all)"
    return text


def code_cell(f: Finding) -> str:
    if f.code is None or not f.code.sides:
        return "—"
    machines = f"; {split_text(f.code.split)}" if f.code.split else ""
    if f.code.flag is None:
        return "today's" + machines
    runs = f.code.runs
    return f"⚠ {f.code.flag} ({len(runs)} run{'s' if len(runs) > 1 else ''})" + machines


@singledispatch
def evidence(f: Finding) -> str:
    """The link to the evidence: its section."""
    return f"[{f.section}](#{anchor(f.section)})"
