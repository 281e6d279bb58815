"""The decision rules: the verdicts, every rule that gives one, and each rule's prose beside it.

Every verdict of the report comes from one function here, applied by the study that makes the claim
(`ega_lightning.experiments.studies`); which rule a kind of finding gets, its margins, its family and its
level are registered in configs/protocol.yaml (`protocol`), and :data:`BY_NAME` maps the protocol's rule
names to these functions. The report's method note states the same rules in the words written above each
function (:func:`rule_texts`, in the order they are defined, with the protocol's values when the note is written).
All intervals are Student-t intervals of differences paired by seed over the seeds both sides share (see
`stats.compare`); a finding of a family takes its verdict from its intervals at the family's Bonferroni level
(`findings.correct`), the nominal interval kept beside it. "Leaves" a margin means wholly outside it, "within"
wholly inside.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar

from ega_lightning.experiments import paper, protocol
from ega_lightning.experiments.stats import Difference, decides_with_power, simulated

# every margin, level and count below is the registered protocol's (configs/protocol.yaml, with its reasons), read
# when a rule or a report first needs it (`protocol.current`), never at import
TAU_STEP = 0.5  # the tau shift at which the landscape is read (both signs)


def margin_of(name: str) -> float:
    """The registered margin ``name``: loss (nats/char, the smallest difference in final val loss that matters),
    flat (nats/char, a checkpoint's loss that does not move), tail (fraction of keys: the normal tail 1 - Phi(tau),
    to within this), tau_level / frac_level (a level's half-width), tau_keep (slope of final tau on tau_init:
    within ±it, tau forgets), cost (step-time ratio EGA-1 / baseline: at most this is no cost)."""
    return protocol.current().margin(name)


def max_seeds() -> int:
    """The most seeds an undecided verdict is projected to (`seeds_for_power`)."""
    return protocol.current().max_seeds


def min_repetitions() -> int:
    """The fewest repetitions of the bench the cost verdict reads."""
    return protocol.current().verdicts["cost"].min_repetitions or 0


def cost_device() -> str:
    """The device whose bench the cost claim is read from (the amendment of 2026-12-05; before it: any)."""
    return next((a.cost_device for a in protocol.current().amendments if a.cost_device), "gpu")


class Verdict(enum.Enum):
    REPRODUCED = "reproduced"
    NOT_REPRODUCED = "not reproduced"
    TOO_FEW_SEEDS = "too few seeds to tell"
    CONSISTENT = "consistent"
    NOT_CONSISTENT = "not consistent"
    HOLDS = "holds"
    NEGLIGIBLE = "negligible"
    DOES_NOT_HOLD = "does not hold"
    NO_DATA = "no finished runs"
    NOT_TESTABLE = "not testable here"
    WEAK_GRADIENT = "(a) weak gradient"
    CO_ADAPTATION = "(b) co-adaptation"
    NEITHER = "neither"


Rule = Callable[..., Verdict]
PROSE: dict[str, Callable[[], str]] = {}  # rule name -> its prose, written with the protocol's values when asked
STATED: dict[str, Callable[..., object]] = {}  # rule name -> the function its prose states
_F = TypeVar("_F", bound=Callable[..., object])


def stated(name: str, text: str | Callable[[], str]) -> Callable[[_F], _F]:
    """Files ``text`` as the prose of the rule it decorates, and the rule, under ``name`` (the method note's order);
    a callable ``text`` is written when the prose is asked for (`rule_texts`), with the protocol's values then."""

    def file(rule: _F) -> _F:
        PROSE[name] = text if callable(text) else lambda: text
        STATED[name] = rule
        return rule

    return file


def rule_texts() -> dict[str, str]:
    """Every rule's prose, as the method note states it (rule name -> text, in the order they are defined)."""
    return {name: text() for name, text in PROSE.items()}


# The rules' building blocks: an interval read three ways against ±margin (`against_margin`: an effect, an
# equivalence) and against a figure (`level_rule`). The labels of a three-way reading are data: (wholly above +margin,
# wholly within ±margin, wholly below −margin); an interval that straddles +margin or −margin is too few seeds.
EFFECT = (Verdict.HOLDS, Verdict.NEGLIGIBLE, Verdict.DOES_NOT_HOLD)
WORSE = (Verdict.DOES_NOT_HOLD, Verdict.NEGLIGIBLE, Verdict.HOLDS)  # the effect with the claim's sign the other way
EQUIVALENCE = (Verdict.NOT_CONSISTENT, Verdict.CONSISTENT, Verdict.NOT_CONSISTENT)
WITHIN_HOLDS = (Verdict.DOES_NOT_HOLD, Verdict.HOLDS, Verdict.DOES_NOT_HOLD)  # the equivalence, as a claim's holds


def against_margin(d: Difference | None, margin: float, labels: tuple[Verdict, Verdict, Verdict]) -> Verdict:
    """``d`` read against ±``margin``: ``labels`` (above, within, below) where it lies wholly there."""
    if d is None:
        return Verdict.NO_DATA
    if d.low is None or d.high is None:
        return Verdict.TOO_FEW_SEEDS
    above, within, below = labels
    if d.low > margin:
        return above
    if -margin <= d.low and d.high <= margin:
        return within
    if d.high < -margin:
        return below
    return Verdict.TOO_FEW_SEEDS


@stated(
    "effect",
    lambda: (
        "an effect the paper gives a figure for is read against the registered smallest effect "
        f"m = {margin_of('loss')} nats/char, three ways, and its size against the figure. It **holds** when the "
        "interval of the difference "
        "(family level) lies wholly above +m, it is **negligible** when the interval lies within ±m, it **does not "
        "hold** when it lies wholly below −m (the opposite effect, large enough to matter), else **too few seeds to "
        "tell** (the interval straddles +m or −m). Its size is **reproduced** when the interval holds the paper's "
        "figure and the effect holds, **not reproduced** when it lies wholly on one side of the figure, else "
        "undecided; it is given as the fraction of the paper's figure with its interval, and read only in the paper's "
        "regime (the generalization gap: where the baseline's own gap reaches the paper's overfitting line, "
        f"{paper.OVERFIT_GAP}; elsewhere **not the paper's regime**). A claim the regime cannot test at all (the gap, "
        "where the baseline's own gap is smaller than the reduction the paper reports) reads **not testable here**."
    ),
)
def effect_rule(d: Difference | None, margin: float | None = None) -> Verdict:
    """An effect three ways against ``margin``: ``d`` a difference whose positive sign is the paper's claim (a peer's
    lower loss, baseline − gate; the growth with context, its contrast per seed)."""
    return against_margin(d, margin_of("loss") if margin is None else margin, EFFECT)


NOT_PAPER_REGIME = "not the paper's regime"  # an effect's size where the regime is not the paper's


def size_reading(d: Difference | None, figure: float, margin: float | None = None, regime: bool = True) -> str | None:
    """The size of an effect against the paper's ``figure``: reproduced / not reproduced / undecided, or not the
    paper's regime (``regime`` False)."""
    if d is None or d.low is None or d.high is None:
        return None
    if not regime:
        return NOT_PAPER_REGIME
    if d.low <= figure <= d.high:
        return "reproduced" if d.low > (margin_of("loss") if margin is None else margin) else "undecided"
    return "not reproduced"


@stated(
    "level",
    lambda: (
        "a paper figure for a level (where tau ends, the share of keys above tau) is **not reproduced** when its "
        "interval at its family's level (1 − 0.05/k) lies off it, and **reproduced** only when the interval holds it "
        "and is narrow enough to "
        f"tell it from its neighbours: a half-width of at most {margin_of('tau_level')} for tau and "
        f"{100 * margin_of('frac_level'):.0f} points for the share of keys; else **too few seeds to tell**."
    ),
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
    "a gate is worse than EGA-1 (**holds**) when the whole interval of EGA-1 − gate lies below −m (the loss "
    "margin), **negligible** when it lies within ±m, **does not hold** when it lies above +m (the gate is better "
    "by more than m), else **too few seeds to tell**.",
)
def worse_rule(d: Difference | None, margin: float | None = None) -> Verdict:
    """``d`` = EGA-1 − gate (final val loss): the effect rule with the claim's sign the other way."""
    return against_margin(d, margin_of("loss") if margin is None else margin, WORSE)


@stated(
    "equivalent",
    lambda: (
        f"a gate is about the baseline (**consistent**) when the whole interval of baseline − gate lies within "
        f"±{margin_of('loss')} nats/char (the registered smallest effect of interest, below EGA-1's own effect here); "
        "**not consistent** when it lies wholly outside the margin; else **too few seeds to tell**."
    ),
)
def equivalence_rule(d: Difference | None, margin: float | None = None) -> Verdict:
    """``d`` = baseline − gate (final val loss); learned − frozen tau (the frozen rule)."""
    return against_margin(d, margin_of("loss") if margin is None else margin, EQUIVALENCE)


@stated(
    "best",
    "EGA-1 is the best of the ablation (**holds**) when every other paper gate's interval of gate − EGA-1 lies "
    "above +m (each is worse by more than the loss margin); **does not hold** when any lies below −m (that gate is "
    "better by more than m); else **too few seeds to tell**.",
)
def best_rule(*diffs: Difference | None, margin: float | None = None) -> Verdict:
    """``diffs``: gate − EGA-1 for every other gate of the paper's ablation."""
    known = [d for d in diffs if d is not None]
    if not known:
        return Verdict.NO_DATA
    margin = margin_of("loss") if margin is None else margin
    if any(d.high is not None and d.high < -margin for d in known):
        return Verdict.DOES_NOT_HOLD
    if len(known) == len(diffs) and all(d.low is not None and d.low > margin for d in known):
        return Verdict.HOLDS
    return Verdict.TOO_FEW_SEEDS


stated(
    "grows",
    "the advantage grows with context, read as an effect (three ways against the loss margin m) of (Δ at the "
    "longest block − Δ at the shortest), per seed: **holds** above +m, **negligible** within ±m, **does not "
    "hold** below −m (it shrinks), else **too few seeds to tell**.",
)(effect_rule)


stated(
    "frozen",
    lambda: (
        "freezing tau at its initial value changes nothing (**consistent**) when the whole interval of "
        f"learned − frozen (same tau_init, paired by seed) lies within ±{margin_of('loss')}; **not consistent** "
        "when it lies wholly outside the margin; else **too few seeds to tell**."
    ),
)(equivalence_rule)


@stated(
    "tail",
    lambda: (
        "the fraction of keys above tau is what a standard normal z gives (**holds**) when the interval at its "
        "family's level (1 − 0.05/k), over seeds, of measured − (1 − Φ(tau)) lies within "
        f"±{100 * margin_of('tail'):.0f} points; **does not hold** when it lies wholly outside that margin; "
        "else **too few seeds to tell**. One value per seed, from the gate summary its run recorded during "
        "training (TauTracker at the run's last validation): the share of keys above tau minus the mean over "
        "heads of 1 − Φ(tau_head). The heads of one model are not independent samples: the per-head spread "
        "of the checkpoints `ega landscape` evaluated is shown as a figure, not read by the rule."
    ),
)
def tail_rule(d: Difference | None, margin: float | None = None) -> Verdict:
    """``d``: measured fraction above tau − (1 − Phi(tau)), over seeds."""
    return against_margin(d, margin_of("tail") if margin is None else margin, WITHIN_HOLDS)


@stated(
    "forgets",
    lambda: (
        "tau converges regardless of its initialisation (**holds**) when the interval at its family's level "
        "(1 − 0.05/k), over the seeds every tau_init ran, of each seed's least-squares slope of final tau on "
        "tau_init lies within "
        f"±{margin_of('tau_keep')} (less than {100 * margin_of('tau_keep'):.0f}% of the spread of the initialisations "
        f"is left at the end); **does not hold** when it lies wholly outside ±{margin_of('tau_keep')}; else **too few "
        "seeds to tell**. A slope of 1: each tau ends where it started, plus a shift common to all."
    ),
)
def forgets_rule(slope: Difference | None, keep: float | None = None) -> Verdict:
    """``slope``: the per-seed least-squares slope of final tau on tau_init, over seeds."""
    return against_margin(slope, margin_of("tau_keep") if keep is None else keep, WITHIN_HOLDS)


@stated(
    "mechanism",
    lambda: (
        "why tau does not move, read from EGA-1's final checkpoint and the frozen-tau runs: **neither** "
        "mechanism when freezing tau is not consistent with learning it (tau's training matters); else "
        f"**(b) co-adaptation** when moving every tau by ±{TAU_STEP} raises the loss by more than "
        f"{margin_of('flat')} on both sides (the trained tau sits at a minimum the rest of the network built around "
        "it), and "
        "**(a) weak gradient** when it does not (the loss does not hold tau where it is, yet tau stays): "
        "**too few seeds to tell** while a frozen-tau comparison is undecided or missing."
    ),
)
def mechanism_rule(frozen: Sequence[Verdict | None], minimum: Sequence[bool]) -> Verdict:
    """``frozen``: the verdict of each frozen-tau comparison; ``minimum``: per final EGA-1 checkpoint, whether
    moving every tau by ±TAU_STEP raises its loss by more than the flat margin on both sides."""
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


stated(
    "lower",
    "a peer's own claim, a lower loss than the baseline, is read as an effect of baseline − gate, three ways "
    "against the loss margin m: **holds** above +m, **negligible** within ±m, **does not hold** below −m (the "
    "baseline is better by more than m), else **too few seeds to tell**.",
)(effect_rule)


@stated(
    "cost",
    lambda: (
        f"no measurable cost (**holds**) when the distribution-free 95% interval of the median of `ega bench`'s "
        f"per-repetition step-time ratio EGA-1 / baseline lies wholly at or below ×{margin_of('cost')} (the registered "
        f"smallest cost of interest), **does not hold** when it lies wholly above ×{margin_of('cost')}, else **too few "
        f"seeds to tell**; read from one bench run of at least {min_repetitions()} repetitions (fewer: too few) on the "
        f"device the claim concerns, a {cost_device().upper()} (the margin's reason is a GPU target; the paper trained "
        "on one): a bench on another device is reported as its ratio there, the claim **not testable here**. The "
        "kernel floor of the design stands beside it (the same fused kernel at head size + 1, the padded channel the "
        "gate's log g rides, against head size, on the same shapes)."
    ),
)
def cost_rule(
    low: float | None, high: float | None, repetitions: int | None = None, device: str | None = None
) -> Verdict:
    """``low``, ``high``: the interval of the median step-time ratio over ``repetitions`` repetitions (None: as many
    as the protocol asks), timed on ``device`` (``cpu`` / ``gpu``; None: the device the claim concerns)."""
    if low is None or high is None:
        return Verdict.NO_DATA
    if device is not None and device != cost_device():
        return Verdict.NOT_TESTABLE
    if repetitions is not None and repetitions < min_repetitions():
        return Verdict.TOO_FEW_SEEDS
    if high <= margin_of("cost"):
        return Verdict.HOLDS
    if low > margin_of("cost"):
        return Verdict.DOES_NOT_HOLD
    return Verdict.TOO_FEW_SEEDS


@stated(
    "seeds",
    lambda: (
        "an undecided verdict gives the paired seeds n at which its rule decides with "
        f"{100 * protocol.current().power:.0f}% probability, at the verdict's level, if the mean and std of each of "
        "its intervals' per-seed values are the true ones (each interval's mean and std drawn as a sample of n from "
        "them: the normal mean and the chi-square std, 4,000 draws, the intervals drawn independently), and the range "
        "of n when the stds are instead at the ends of their own 95% intervals; "
        f"'> {max_seeds()}' when no n up to {max_seeds()} does. It names the verdict the rule most often reaches in "
        f"those draws at that n (at {max_seeds()} beyond it)."
    ),
)
def seeds_for_power(rule: Rule, intervals: Sequence[Difference | None], level: float) -> tuple[int, int, int] | None:
    """The paired seeds at which ``rule`` of ``intervals`` (each at ``level``) decides with the protocol's power,
    and the same at the low and high ends of the stds' 95% intervals (max_seeds + 1: none up to the protocol's
    max_seeds); None when they cannot be projected (one seed, an unpaired interval)."""

    def decided(*ds: Difference | None) -> bool:
        return rule(*ds) not in (Verdict.TOO_FEW_SEEDS, Verdict.NO_DATA)

    most, power = max_seeds(), protocol.current().power
    # a report asks for the same projection again (a finding read in its family and study-wide): the draws are
    # seeded, so an equal question has an equal answer, and each costs up to 10^5 simulated studies
    key = (rule, tuple(intervals), level, most, power)
    if key not in _PROJECTED:
        found = [decides_with_power(decided, intervals, level, power, most, std_end) for std_end in (0, -1, 1)]
        _PROJECTED[key] = None if any(n is None for n in found) else tuple(found)
    if (found := _PROJECTED[key]) is None:
        return None
    n, low, high = found
    return n, min(low, high), max(low, high)


_PROJECTED: dict[tuple[object, ...], tuple[int, int, int] | None] = {}


def likely_verdict(rule: Rule, intervals: Sequence[Difference | None], level: float, n: int) -> Verdict | None:
    """The decided verdict ``rule`` most often reaches in the draws of `seeds_for_power` at n paired seeds (at
    the protocol's max_seeds beyond it); None when none decides or they cannot be projected."""
    drawn = simulated(intervals, level, min(n, max_seeds()))
    counts = Counter(rule(*ds) for ds in drawn or [])
    decided = [(c, v) for v, c in counts.items() if v not in (Verdict.TOO_FEW_SEEDS, Verdict.NO_DATA)]
    return max(decided, key=lambda cv: cv[0])[1] if decided else None


# ----------------------------------------------------------------------------- the rules before an amendment


def _as_registered(d: Difference | None, above: float = 0.0, below: float = 0.0, worse: bool = False) -> Verdict:
    """A rule as registered on 2026-12-02, a direction: **holds** where ``d`` lies wholly above ``above``, **does not
    hold** where wholly below ``below`` (effect and lower: against 0; grows: above 0, below +m), the two swapped for
    ``worse`` (EGA-1 − gate)."""
    if d is None:
        return Verdict.NO_DATA
    if d.low is None or d.high is None:
        return Verdict.TOO_FEW_SEEDS
    up, down = (Verdict.DOES_NOT_HOLD, Verdict.HOLDS) if worse else (Verdict.HOLDS, Verdict.DOES_NOT_HOLD)
    return up if d.low > above else down if d.high < below else Verdict.TOO_FEW_SEEDS


# amendment (its issue) -> each rule it changes, as it read before: a label the two readings give alike keeps its
# registration, one they give apart is dated by the amendment (`findings.amended_label`)
BEFORE: dict[int, dict[str, Callable[..., Verdict]]] = {
    51: {
        "effect": _as_registered,
        "lower": _as_registered,
        "worse": partial(_as_registered, worse=True),
        "best": partial(best_rule, margin=0.0),
        "grows": lambda d: _as_registered(d, below=margin_of("loss")),
        "cost": partial(cost_rule, device=None),  # a bench of any device: read as if on the claim's
    }
}
SIZE_BEFORE: dict[int, Callable[[Difference | None, float], str | None]] = {
    51: lambda d, figure: size_reading(d, figure, margin=0.0)  # the size against 0, in every regime
}


def _check_before(p: protocol.Protocol) -> None:
    """Every rule an amendment of ``p`` changes has its reading before it in :data:`BEFORE`, and every amendment this
    code applies is in ``p`` (`check_amendments`)."""
    for a in p.amendments:
        if missing := set(a.rules) - set(BEFORE.get(a.issue, {})):
            raise protocol.ProtocolError(f"rules.BEFORE lacks the amendment of {a.date}'s rules before it: {missing}")
    check_amendments(p)


def check_amendments(p: protocol.Protocol) -> None:
    """Raises :class:`protocol.ProtocolError` where ``p`` lacks an amendment whose rules this code applies, or one of
    those rules: the rules live in code (:data:`BEFORE` holds each one's reading before its amendment, the functions
    above its reading after), so deleting the amendment from the protocol would leave its rules in force, their
    verdicts read as registered on their entry's date, and nothing would say so. The report checks this before it
    reads or writes anything (`report_assembly.write_report`)."""
    stated: dict[int, set[str]] = {}
    for a in p.amendments:
        stated.setdefault(a.issue, set()).update(a.rules)
    for issue in sorted({*BEFORE, *SIZE_BEFORE}):
        applied = sorted(BEFORE.get(issue, {}))
        if issue not in stated:
            lacks = f"lacks the amendment of issue {issue}"
        elif missing := [r for r in applied if r not in stated[issue]]:
            lacks = f"has the amendment of issue {issue} without the rule(s) {', '.join(missing)} (its `rules:`)"
        else:
            continue
        raise protocol.ProtocolError(
            f"the protocol {p.path} {lacks}, yet this code reads the rules {', '.join(applied)} as that amendment "
            "changed them (ega_lightning/experiments/rules.py: BEFORE holds their reading before it): its verdicts "
            "would read as registered on their entry's date under rules the protocol no longer states, and nothing "
            "would say so. Restore the amendment (git checkout -- configs/protocol.yaml); an amendment is withdrawn "
            "in the protocol and in rules.py together, by a new amendment."
        )


# the protocol's rule names -> their functions, each as its prose states it (a name with no stated rule: a KeyError)
BY_NAME: dict[str, Rule] = {name: STATED[name] for name in protocol.RULE_NAMES}


def registered(kind: str, claim: str | None) -> tuple[str, Rule]:
    """The rule the protocol registers for a kind of finding (results.json's ``kind``) and, where its rule follows
    the claim (``by_claim``), for ``claim``: its name and its function. Every study takes its rule from here, so
    the rule a claim's row names is the rule applied; a :class:`protocol.ProtocolError` for a kind or a claim the
    protocol registers no rule for."""
    p = protocol.current()
    _check_before(p)
    entry = p.verdicts.get(kind)
    if entry is None:
        raise protocol.ProtocolError(f"configs/protocol.yaml registers no rule for the `{kind}` finding.")
    name = entry.rule_for(claim)
    return name, BY_NAME[name]
