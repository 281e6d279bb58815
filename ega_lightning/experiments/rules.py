"""The decision rules: the verdicts, every rule that gives one, and each rule's prose beside it.

Every verdict of the report comes from one function here, applied by the study that makes the claim
(`ega_lightning.experiments.studies`); the report's method note states the same rules in the words
written above each function (:data:`RULES`, in the order they are defined). All intervals are 95%
Student-t intervals of differences paired by seed over the seeds both sides share (see
`stats.compare`); a finding of a family (:data:`FAMILIES`) takes its verdict from its interval at the
family's Bonferroni level (`findings.correct`), the nominal interval kept beside it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import TypeVar

from ega_lightning.experiments import paper
from ega_lightning.experiments.stats import Difference, std_of, widen, with_n

MARGIN = 0.02  # nats/char: differences whose whole interval lies within ±MARGIN count as "about equal"
# nats/char: a checkpoint's loss is deterministic (the whole validation split), so a much finer line
# than the seed margin tells a flat landscape from a minimum
FLAT = MARGIN / 4
TAIL_MARGIN = 0.03  # fraction of keys: "above tau" within 3 points of 1 - Phi(tau) counts as the normal tail
TAU_STEP = 0.5  # the tau shift at which the landscape is read (both signs)
# a level is told from its neighbours when its interval's half-width is at most this: tau's 0.35 from the
# ~0.1 measured here, 36% of keys from the 20-30% measured here
LEVEL_WIDTH = {"tau": 0.05, "frac_above_tau": 0.05}
TAU_KEEP = 0.2  # slope of final tau on tau_init: within ±TAU_KEEP, tau forgets where it started
MAX_SEEDS = 50  # the most seeds an undecided verdict is projected to (seeds_to_decide)


class Verdict(enum.Enum):
    REPRODUCED = "reproduced"
    NOT_REPRODUCED = "not reproduced"
    TOO_FEW_SEEDS = "too few seeds to tell"
    CONSISTENT = "consistent"
    NOT_CONSISTENT = "not consistent"
    HOLDS = "holds"
    DOES_NOT_HOLD = "does not hold"
    NO_DATA = "no finished runs"
    WEAK_GRADIENT = "(a) weak gradient"
    CO_ADAPTATION = "(b) co-adaptation"
    NEITHER = "neither"


Rule = Callable[..., Verdict]
RULES: dict[str, str] = {}  # rule name -> its prose, as the method note states it
_F = TypeVar("_F", bound=Callable[..., object])


def stated(name: str, text: str) -> Callable[[_F], _F]:
    """Files ``text`` as the prose of the rule it decorates, under ``name`` (the method note's order)."""

    def file(rule: _F) -> _F:
        RULES[name] = text
        return rule

    return file


@stated(
    "figure",
    "a paper figure for a difference is **reproduced** when our 95% interval holds it, **not reproduced** "
    "when it lies outside; **too few seeds to tell** with one seed, or when the interval holds both the "
    "paper's figure and 0.",
)
def figure_rule(d: Difference | None, figure: float) -> Verdict:
    """``d``: a difference (0: no effect) against the paper's figure for it."""
    if d is None:
        return Verdict.NO_DATA
    if d.low is None or d.high is None:
        return Verdict.TOO_FEW_SEEDS
    inside = d.low <= figure <= d.high
    if inside and d.low <= 0.0 <= d.high:
        return Verdict.TOO_FEW_SEEDS
    return Verdict.REPRODUCED if inside else Verdict.NOT_REPRODUCED


@stated(
    "level",
    "a paper figure for a level (where tau ends, the share of keys above tau) is **not reproduced** when our "
    "95% interval lies off it, and **reproduced** only when the interval holds it and is narrow enough to "
    f"tell it from its neighbours: a half-width of at most {LEVEL_WIDTH['tau']} for tau and "
    f"{100 * LEVEL_WIDTH['frac_above_tau']:.0f} points for the share of keys; else **too few seeds to tell**.",
)
def level_rule(d: Difference | None, figure: float, width: float) -> Verdict:
    """``d``: a level (where tau ends, a share of keys) against the paper's figure; ``width``: the largest
    half-width that tells the figure from its neighbours."""
    if d is None:
        return Verdict.NO_DATA
    if d.low is None or d.high is None:
        return Verdict.TOO_FEW_SEEDS
    if not d.low <= figure <= d.high:
        return Verdict.NOT_REPRODUCED
    return Verdict.REPRODUCED if (d.high - d.low) / 2 <= width else Verdict.TOO_FEW_SEEDS


@stated(
    "worse",
    "a gate is worse than EGA-1 (**holds**) when the whole interval of EGA-1 − gate lies below 0, "
    "**does not hold** when it lies above 0, else **too few seeds to tell**.",
)
def worse_rule(d: Difference | None) -> Verdict:
    """``d`` = EGA-1 − gate (final val loss)."""
    if d is None:
        return Verdict.NO_DATA
    if d.low is None or d.high is None:
        return Verdict.TOO_FEW_SEEDS
    if d.high < 0:
        return Verdict.HOLDS
    if d.low > 0:
        return Verdict.DOES_NOT_HOLD
    return Verdict.TOO_FEW_SEEDS


@stated(
    "equivalent",
    f"a gate is about the baseline (**consistent**) when the whole interval of baseline − gate lies within "
    f"±{MARGIN} nats/char (an equivalence margin of about twice the seed-to-seed std of the short runs); "
    "**not consistent** when the interval excludes 0 and leaves the margin; else **too few seeds to tell**.",
)
def equivalence_rule(d: Difference | None, margin: float = MARGIN) -> Verdict:
    """``d`` = baseline − gate (final val loss)."""
    if d is None:
        return Verdict.NO_DATA
    if d.low is None or d.high is None:
        return Verdict.TOO_FEW_SEEDS
    if -margin <= d.low and d.high <= margin:
        return Verdict.CONSISTENT
    if d.excludes_zero:
        return Verdict.NOT_CONSISTENT
    return Verdict.TOO_FEW_SEEDS


@stated(
    "best",
    "EGA-1 is the best of the ablation (**holds**) when every other paper gate's interval of gate − EGA-1 "
    "lies above 0; **does not hold** when any lies below 0 (that gate is measurably better); "
    "else **too few seeds to tell**.",
)
def best_rule(diffs: list[Difference | None]) -> Verdict:
    """``diffs``: gate − EGA-1 for every other gate of the paper's ablation."""
    known = [d for d in diffs if d is not None]
    if not known:
        return Verdict.NO_DATA
    if any(d.high is not None and d.high < 0 for d in known):
        return Verdict.DOES_NOT_HOLD
    if len(known) == len(diffs) and all(d.low is not None and d.low > 0 for d in known):
        return Verdict.HOLDS
    return Verdict.TOO_FEW_SEEDS


@stated(
    "grows",
    "the advantage grows with context (**holds**) when the interval of (Δ at the longest block − Δ at the "
    f"shortest), per seed, lies above 0; **does not hold** when its upper end is below +{MARGIN} (any growth "
    "is within the equivalence margin); else **too few seeds to tell**.",
)
def growth_rule(contrast: Difference | None, margin: float = MARGIN) -> Verdict:
    """``contrast``: (Δ at the longest block − Δ at the shortest), per seed."""
    if contrast is None:
        return Verdict.NO_DATA
    if contrast.low is None or contrast.high is None:
        return Verdict.TOO_FEW_SEEDS
    if contrast.low > 0:
        return Verdict.HOLDS
    if contrast.high < margin:
        return Verdict.DOES_NOT_HOLD
    return Verdict.TOO_FEW_SEEDS


@stated(
    "frozen",
    "freezing tau at its initial value changes nothing (**consistent**) when the whole interval of "
    f"learned − frozen (same tau_init, paired by seed) lies within ±{MARGIN}; **not consistent** when it "
    "excludes 0 and leaves the margin; else **too few seeds to tell**.",
)
def frozen_rule(d: Difference | None) -> Verdict:
    """``d`` = learned − frozen tau (final val loss): the equivalence rule."""
    return equivalence_rule(d)


@stated(
    "tail",
    "the fraction of keys above tau is what a standard normal z gives (**holds**) when the 95% interval, "
    "over seeds, of measured − (1 − Φ(tau)) lies within "
    f"±{100 * TAIL_MARGIN:.0f} points; **does not hold** when it excludes 0 and leaves that margin; "
    "else **too few seeds to tell**. One value per seed, from the gate summary its run recorded during "
    "training (TauTracker at the run's last validation): the share of keys above tau minus the mean over "
    "heads of 1 − Φ(tau_head). The heads of one model are not independent samples: the per-head spread "
    "of the checkpoints `ega landscape` evaluated is shown as a figure, not read by the rule.",
)
def tail_rule(d: Difference | None, margin: float = TAIL_MARGIN) -> Verdict:
    """``d``: measured fraction above tau − (1 − Phi(tau)), over seeds."""
    equal = equivalence_rule(d, margin)
    return {Verdict.CONSISTENT: Verdict.HOLDS, Verdict.NOT_CONSISTENT: Verdict.DOES_NOT_HOLD}.get(equal, equal)


@stated(
    "forgets",
    "tau converges regardless of its initialisation (**holds**) when the 95% interval, over the seeds every "
    "tau_init ran, of each seed's least-squares slope of final tau on tau_init lies within "
    f"±{TAU_KEEP} (less than {100 * TAU_KEEP:.0f}% of the spread of the initialisations is left at the end); "
    f"**does not hold** when it lies wholly outside ±{TAU_KEEP}; else **too few seeds to tell**. A slope "
    "of 1: each tau ends where it started, plus a shift common to all.",
)
def forgets_rule(slope: Difference | None, keep: float = TAU_KEEP) -> Verdict:
    """``slope``: the per-seed least-squares slope of final tau on tau_init, over seeds."""
    if slope is None:
        return Verdict.NO_DATA
    if slope.low is None or slope.high is None:
        return Verdict.TOO_FEW_SEEDS
    if -keep <= slope.low and slope.high <= keep:
        return Verdict.HOLDS
    if slope.low > keep or slope.high < -keep:
        return Verdict.DOES_NOT_HOLD
    return Verdict.TOO_FEW_SEEDS


@stated(
    "mechanism",
    "why tau does not move, read from EGA-1's final checkpoint and the frozen-tau runs: **neither** "
    "mechanism when freezing tau is not consistent with learning it (tau's training matters); else "
    f"**(b) co-adaptation** when moving every tau by ±{TAU_STEP} raises the loss by more than {FLAT} on "
    "both sides (the trained tau sits at a minimum the rest of the network built around it), and "
    "**(a) weak gradient** when it does not (the loss does not hold tau where it is, yet tau stays): "
    "**too few seeds to tell** while a frozen-tau comparison is undecided or missing.",
)
def mechanism_rule(frozen: Sequence[Verdict | None], minimum: Sequence[bool]) -> Verdict:
    """``frozen``: the verdict of each frozen-tau comparison; ``minimum``: per final EGA-1 checkpoint, whether
    moving every tau by ±TAU_STEP raises its loss by more than FLAT on both sides."""
    if any(v is Verdict.NOT_CONSISTENT for v in frozen):
        return Verdict.NEITHER
    if not frozen or not minimum or any(v is not Verdict.CONSISTENT for v in frozen) or len(set(minimum)) > 1:
        return Verdict.TOO_FEW_SEEDS
    return Verdict.CO_ADAPTATION if minimum[0] else Verdict.WEAK_GRADIENT


@stated(
    "control",
    "the positive control (**holds**) when some gate of the leaderboard has its whole interval of baseline − "
    f"gate above {paper.POSITIVE_CONTROL:+.4f}, half the paper's {paper.IMPROVEMENT['tinyshakespeare']:+.3f}: "
    "an attention change of about the paper's size is measurable here, so a null for EGA is not the "
    "protocol's blindness; **does not hold** when every gate's interval lies below it; else **too few seeds "
    "to tell** (a gate without two paired seeds, or an interval that holds the threshold). Beside it, the "
    "smallest difference the protocol resolves at n paired seeds: the half-width h(n) = t(1 − α/2, n − 1) · "
    "s_p / √n of a paired interval, s_p the pooled std of the per-seed differences of every leaderboard gate, "
    "s_p² = Σ_g (n_g − 1) s_g² / Σ_g (n_g − 1), at the family's level 1 − α and at 95%: a gain above h(n) "
    "excludes 0.",
)
def control_rule(*diffs: Difference | None, threshold: float = paper.POSITIVE_CONTROL) -> Verdict:
    """``diffs``: baseline − gate for every gate of the leaderboard (None: a gate with no finished run)."""
    if all(d is None for d in diffs):
        return Verdict.NO_DATA
    if any(d is not None and d.low is not None and d.low > threshold for d in diffs):
        return Verdict.HOLDS
    if all(d is not None and d.high is not None and d.high < threshold for d in diffs):
        return Verdict.DOES_NOT_HOLD
    return Verdict.TOO_FEW_SEEDS


@stated(
    "lower",
    "a peer's own claim, a lower loss than the baseline (**holds**) when the whole interval of baseline − "
    "gate lies above 0; **does not hold** when it lies below 0 (the baseline is measurably better); else "
    "**too few seeds to tell**.",
)
def lower_rule(d: Difference | None) -> Verdict:
    """``d`` = baseline − gate (final val loss): a peer's claim of a lower loss."""
    if d is None:
        return Verdict.NO_DATA
    if d.low is None or d.high is None:
        return Verdict.TOO_FEW_SEEDS
    if d.low > 0:
        return Verdict.HOLDS
    if d.high < 0:
        return Verdict.DOES_NOT_HOLD
    return Verdict.TOO_FEW_SEEDS


@stated(
    "cost",
    "no measurable cost (**holds**) when the interquartile range of `ega bench`'s per-repetition step-time "
    "ratio EGA-1 / baseline holds 1, **does not hold** when it lies above 1.",
)
def cost_rule(q1: float | None, q3: float | None) -> Verdict:
    if q1 is None or q3 is None:
        return Verdict.NO_DATA
    return Verdict.HOLDS if q1 <= 1.0 <= q3 else Verdict.DOES_NOT_HOLD


@stated(
    "seeds",
    "an undecided verdict gives the paired seeds n that would decide it if the mean and the std s of its "
    "per-seed values stayed as observed: the smallest n for which mean ± t(1 − α/2, n − 1)·s/√n decides "
    "its rule, at the verdict's level (1 − α: 95%, or its family's Bonferroni level); "
    f"'> {MAX_SEEDS}' when no n up to {MAX_SEEDS} does.",
)
def seeds_to_decide(rule: Rule, intervals: Sequence[Difference | None], level: float) -> int | None:
    """The smallest number of paired seeds at which ``rule`` of ``intervals`` (each at ``level``) decides, the
    mean and std of each held as observed; MAX_SEEDS + 1 when none up to MAX_SEEDS does, None when they
    cannot be projected (one seed, an unpaired interval)."""
    wide = [widen(d, level) for d in intervals]
    if any(d is None or std_of(d) is None for d in wide):
        return None
    known = [d for d in wide if d is not None]
    for n in range(max(d.n for d in known) + 1, MAX_SEEDS + 1):
        if rule(*(with_n(d, n) for d in known)) is not Verdict.TOO_FEW_SEEDS:
            return n
    return MAX_SEEDS + 1


# Bonferroni families: each of a family's k intervals is taken at 1 - 0.05 / k, so that all of them hold
# together at 95%; the verdict follows that interval. A new family (e.g. the peers of "EGA meets its
# peers") is a key here and `family=` on its findings, with `reads` naming the intervals it reads.
FAMILIES = {
    "ablation": (
        "each paper gate against the row the paper sets it against, and for *EGA-1 is the best* every other "
        "paper gate against EGA-1 (a comparison read by both counts once)"
    ),
    "tail": "the tail identity of every gate it is read for",
    "tau_init": "the slope of final tau on tau_init",
    "frozen": "each frozen tau against learned tau",
    "leak": "the leak audit as trained against the paper's figure, and the leak's own increment over causal EGA-1",
    "context": "the growth of Δ from the shortest to the longest block",
    "peers": "each peer of EGA against the baseline, on one corpus (its own claim: a lower loss)",
    "control": (
        "every gate of the leaderboard against the baseline: the positive control holds when *some* of them "
        "clears the threshold, so each is read at the family's level"
    ),
}
