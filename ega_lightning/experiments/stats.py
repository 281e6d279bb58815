"""Small-sample statistics over seeds: mean ± std, and Student-t 95% intervals (scipy.stats); and the
distribution-free interval of a median (`ega bench`'s repetitions).

The one pairing rule, used by every comparison of the report (:func:`compare`): when the two
sides share seeds, the difference is taken per shared seed (same seed: identical shared initial
weights and identical batches) and its interval is a one-sample t interval of those per-seed
differences; only sides with no seed in common are compared by Welch's t.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

LEVEL = 0.95


@dataclass(frozen=True)
class Summary:
    """Mean and sample standard deviation (ddof = 1; None for n < 2) of one quantity over seeds."""

    mean: float | None
    std: float | None
    n: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(values: Sequence[float]) -> Summary:
    values = [float(v) for v in values]
    n = len(values)
    if n == 0:
        return Summary(None, None, 0)
    mean = math.fsum(values) / n
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return Summary(mean, std, n)


@dataclass(frozen=True)
class Difference:
    """An estimate with its confidence interval: a difference ``reference - other`` (positive:
    ``other`` has the lower value), or a mean over seeds.

    ``method`` is ``paired`` (one-sample t on the per-seed differences of the shared seeds,
    df = n - 1), ``welch`` (no shared seed: Welch's t with Welch-Satterthwaite df), ``mean``
    (one-sample t interval of a mean) or ``single`` (n = 1: no interval; ``low``/``high``/``df``
    are None).
    """

    estimate: float
    low: float | None
    high: float | None
    n: int  # paired / mean: number of values; welch / single: the smaller sample
    df: float | None
    method: str
    level: float = LEVEL

    @property
    def excludes_zero(self) -> bool | None:
        if self.low is None or self.high is None:
            return None
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "excludes_zero": self.excludes_zero}


def _interval(d: Difference, result: Any, level: float) -> Difference:
    """``d`` with the ends of scipy's t-test ``result``'s interval at ``level``."""
    ci = result.confidence_interval(level)
    return replace(d, low=float(ci.low), high=float(ci.high), df=float(result.df))


def mean_interval(values: Sequence[float], level: float = LEVEL, method: str = "mean") -> Difference:
    """The one-sample Student-t interval of the mean of ``values`` (scipy's ``ttest_1samp``)."""
    s = summarize(values)
    if s.mean is None:
        raise ValueError("mean_interval needs at least one value.")
    single = Difference(s.mean, None, None, s.n, None, "single", level)
    if s.n < 2 or s.std is None:
        return single
    from scipy import stats  # slow to import: only where an interval is computed

    # seeds that all give one value (a gate that changes nothing) are a zero-width interval, not a user's mistake:
    # scipy's warning about their moments would be the report's only line on stderr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_1samp(values, 0.0)
    return _interval(replace(single, method=method), result, level)


def paired_difference(reference: Sequence[float], other: Sequence[float], level: float = LEVEL) -> Difference:
    """Interval of mean(reference_i - other_i) over pairs i (the same seed on both sides)."""
    if len(reference) != len(other) or not reference:
        raise ValueError(
            f"paired_difference needs two equally long, non-empty samples, got {len(reference)} and {len(other)}."
        )
    return mean_interval([r - o for r, o in zip(reference, other, strict=True)], level, method="paired")


def welch_difference(reference: Sequence[float], other: Sequence[float], level: float = LEVEL) -> Difference:
    """Interval of mean(reference) - mean(other) for independent samples (scipy's Welch ``ttest_ind``)."""
    a, b = summarize(reference), summarize(other)
    if a.mean is None or b.mean is None:
        raise ValueError("welch_difference needs two non-empty samples.")
    d = Difference(a.mean - b.mean, None, None, min(a.n, b.n), None, "single", level)
    if a.std is None or b.std is None:
        return d
    if a.std == b.std == 0.0:  # identical values on both sides: the interval collapses (df is then immaterial)
        return replace(d, low=d.estimate, high=d.estimate, df=float(a.n + b.n - 2), method="welch")
    from scipy import stats

    with warnings.catch_warnings():  # one side's seeds alike: as in mean_interval
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_ind(reference, other, equal_var=False)
    return _interval(replace(d, method="welch"), result, level)


def compare(reference: Mapping[int, float], other: Mapping[int, float], level: float = LEVEL) -> Difference:
    """reference - other, values keyed by seed: paired over the shared seeds when there are any, else Welch."""
    if not reference or not other:
        raise ValueError("compare needs at least one value on each side.")
    shared = sorted(set(reference) & set(other))
    if shared:
        return paired_difference([reference[s] for s in shared], [other[s] for s in shared], level)
    return welch_difference(list(reference.values()), list(other.values()), level)


def bonferroni_level(k: int, level: float = LEVEL) -> float:
    """The level of each of ``k`` intervals whose family-wise level is ``level`` (Bonferroni)."""
    return 1.0 - (1.0 - level) / max(k, 1)


def _quantile(level: float, df: float) -> float:
    from scipy import stats  # slow to import: only where an interval is computed

    return float(stats.t.ppf(0.5 + level / 2.0, df))


def widen(d: Difference | None, level: float) -> Difference | None:
    """The same estimate with its interval at ``level``: the half-width scaled by the ratio of the two
    Student-t quantiles at the same df (paired, mean and Welch intervals alike)."""
    if d is None or d.low is None or d.high is None or d.df is None:
        return d  # one value: no interval to widen
    half = (d.high - d.low) / 2.0 * _quantile(level, d.df) / _quantile(d.level, d.df)
    return Difference(d.estimate, d.estimate - half, d.estimate + half, d.n, d.df, d.method, level)


def std_of(d: Difference) -> float | None:
    """The sample std of the values behind a paired or mean interval (None for Welch and single)."""
    if d.method not in ("paired", "mean") or d.low is None or d.high is None or d.df is None:
        return None
    return (d.high - d.low) / 2.0 * math.sqrt(d.n) / _quantile(d.level, d.df)


def simulated(
    intervals: Sequence[Difference | None], level: float, n: int, std_end: int = 0, draws: int = 4000
) -> list[tuple[Difference, ...]] | None:
    """``draws`` simulated studies of n paired seeds, each a tuple of the ``intervals`` as they would read at
    ``level``: each interval's per-seed values normal with its observed mean and std (``std_end`` -1 / +1: the std
    at the low / high end of its own 95% chi-square interval instead), its mean and std drawn as a sample of n from
    them. Seeded by n (deterministic); None when an interval has no std to project."""
    studies = _studies(intervals, level, n, std_end, draws)
    return None if studies is None else list(studies)


def _studies(
    intervals: Sequence[Difference | None], level: float, n: int, std_end: int, draws: int
) -> Iterator[tuple[Difference, ...]] | None:
    """`simulated`'s studies one at a time, so that a count of them can stop once its outcome is known: every draw
    is made first, in the same order, so the k-th study is the same whether or not the rest are built."""
    import numpy as np
    from scipy import stats

    known = [d for d in intervals if d is not None]
    sds = [std_of(d) for d in known]
    if len(known) != len(intervals) or any(sd is None for sd in sds) or not known:
        return None
    if std_end:
        q = 0.975 if std_end < 0 else 0.025
        sds = [sd * math.sqrt((d.n - 1) / float(stats.chi2.ppf(q, d.n - 1))) for d, sd in zip(known, sds, strict=True)]
    mu = np.array([d.estimate for d in known])
    sd = np.array(sds, dtype=float)
    rng = np.random.default_rng(n)
    means = rng.normal(mu, sd / math.sqrt(n), (draws, len(known)))
    half = _quantile(level, n - 1) * sd * np.sqrt(rng.chisquare(n - 1, (draws, len(known))) / (n - 1)) / math.sqrt(n)
    methods, df = [d.method for d in known], float(n - 1)
    # Python floats (tolist), as float() of each numpy scalar gave: the studies are built ~10^6 times in a report
    return (
        tuple(Difference(m, m - h, m + h, n, df, method, level) for m, h, method in zip(ms, hs, methods, strict=True))
        for ms, hs in zip(means.tolist(), half.tolist(), strict=True)
    )


def decides_with_power(
    decided: Callable[..., bool],
    intervals: Sequence[Difference | None],
    level: float,
    power: float,
    max_n: int,
    std_end: int = 0,
    draws: int = 4000,
) -> int | None:
    """The smallest n above every interval's own n at which ``decided`` (of the intervals, each at ``level``)
    is true in at least ``power`` of ``draws`` simulated studies of n paired seeds (`simulated`); ``max_n`` + 1
    when none up to ``max_n`` is; None when an interval has no std to project. n is found by bisection (power
    grows with n)."""
    if simulated(intervals, level, 2, std_end, 1) is None:
        return None
    needed = power * draws

    def enough(n: int) -> bool:
        # the count stops where its outcome is settled: the same answer as counting all draws, at a fraction of it
        hits = 0
        for counted, ds in enumerate(_studies(intervals, level, n, std_end, draws) or (), 1):
            hits += decided(*ds)
            if hits >= needed:
                return True
            if hits + draws - counted < needed:
                return False
        return hits >= needed

    low, high = max(d.n for d in intervals if d is not None) + 1, max_n
    if low > high or not enough(high):
        return max_n + 1
    while low < high:  # enough(high) holds
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid + 1, high)
    return high


def half_width(std: float, n: int, level: float = LEVEL) -> float:
    """The half-width t(1 − α/2, n − 1) · std / √n of an n-value t interval at ``level`` = 1 − α."""
    return _quantile(level, n - 1) * std / math.sqrt(n)


def pooled_std(intervals: Sequence[Difference | None]) -> tuple[float, int] | None:
    """The pooled sample std of the values behind paired or mean intervals, sqrt(Σ (n_i − 1) s_i² / Σ (n_i − 1)),
    and its degrees of freedom Σ (n_i − 1); None when none of them has an std."""
    known = [(d.n, sd) for d in intervals if d is not None and (sd := std_of(d)) is not None]
    df = sum(n - 1 for n, _ in known)
    if not df:
        return None
    return math.sqrt(math.fsum((n - 1) * sd**2 for n, sd in known) / df), df


def median_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """Distribution-free interval for the median (scipy's ``quantile_test``: the order statistics whose binomial
    tail stays within (1 - level) / 2); (min, max) when n is too small for one."""
    from scipy import stats

    ci = stats.quantile_test(values, p=0.5).confidence_interval(level)
    if math.isnan(ci.low) or math.isnan(ci.high):
        return min(values), max(values)
    return float(ci.low), float(ci.high)
