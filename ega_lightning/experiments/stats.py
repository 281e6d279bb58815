"""Small-sample statistics for comparing runs over seeds: mean ± std and 95% intervals of differences.

Student-t quantiles are computed here (regularized incomplete beta by continued fraction, then
bisection) because scipy is not a dependency of the project.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

_EPS = 1e-15
_TINY = 1e-300  # keeps Lentz's method away from division by zero


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of I_x(a, b), modified Lentz (Numerical Recipes, 6.4)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge for a={a}, b={b}, x={x}")


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b), a, b > 0, 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    # the fraction converges fast only below the mean (a+1)/(a+b+2); use the symmetry above it
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` (> 0, not necessarily integer) degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}.")
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_ppf(p: float, df: float) -> float:
    """The quantile t with P(T <= t) = p, by bisection on :func:`t_cdf`."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_ppf needs 0 < p < 1, got {p}.")
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


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
    """reference - other over seeds (positive: ``other`` has the lower value) with a confidence interval.

    ``method`` is ``paired`` (same seeds: Student-t on the per-seed differences, df = n - 1),
    ``welch`` (different seeds: Welch's t with Welch-Satterthwaite df) or ``single`` (n = 1 on a
    side: no interval; ``low``/``high``/``df`` are None).
    """

    estimate: float
    low: float | None
    high: float | None
    n: int  # paired: number of seed pairs; welch/single: the smaller sample
    df: float | None
    method: str
    level: float = 0.95

    @property
    def excludes_zero(self) -> bool | None:
        if self.low is None or self.high is None:
            return None
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "excludes_zero": self.excludes_zero}


def paired_difference(reference: Sequence[float], other: Sequence[float], level: float = 0.95) -> Difference:
    """Interval of mean(reference_i - other_i) over pairs i (the same seed on both sides)."""
    if len(reference) != len(other) or not reference:
        raise ValueError(
            f"paired_difference needs two equally long, non-empty samples, got {len(reference)} and {len(other)}."
        )
    diffs = [r - o for r, o in zip(reference, other, strict=True)]
    s = summarize(diffs)
    assert s.mean is not None
    if s.n < 2:
        return Difference(s.mean, None, None, s.n, None, "single", level)
    assert s.std is not None
    half = t_ppf(0.5 + level / 2.0, s.n - 1) * s.std / math.sqrt(s.n)
    return Difference(s.mean, s.mean - half, s.mean + half, s.n, float(s.n - 1), "paired", level)


def welch_difference(reference: Sequence[float], other: Sequence[float], level: float = 0.95) -> Difference:
    """Interval of mean(reference) - mean(other) for independent samples (Welch's t)."""
    a, b = summarize(reference), summarize(other)
    if a.mean is None or b.mean is None:
        raise ValueError("welch_difference needs two non-empty samples.")
    estimate = a.mean - b.mean
    if a.std is None or b.std is None:
        return Difference(estimate, None, None, min(a.n, b.n), None, "single", level)
    va, vb = a.std**2 / a.n, b.std**2 / b.n
    se = math.sqrt(va + vb)
    if se == 0.0:  # identical values on both sides: the interval collapses (df is then immaterial)
        return Difference(estimate, estimate, estimate, min(a.n, b.n), float(a.n + b.n - 2), "welch", level)
    df = (va + vb) ** 2 / (va**2 / (a.n - 1) + vb**2 / (b.n - 1))
    half = t_ppf(0.5 + level / 2.0, df) * se
    return Difference(estimate, estimate - half, estimate + half, min(a.n, b.n), df, "welch", level)


def compare(reference: Mapping[int, float], other: Mapping[int, float], level: float = 0.95) -> Difference:
    """reference - other, values keyed by seed: paired when both have the same seeds, else Welch.

    Same seed means identical shared initial weights and identical batches in this pipeline,
    so pairing removes most of the seed-to-seed variation from the comparison.
    """
    if not reference or not other:
        raise ValueError("compare needs at least one value on each side.")
    if set(reference) == set(other):
        seeds = sorted(reference)
        return paired_difference([reference[s] for s in seeds], [other[s] for s in seeds], level)
    return welch_difference(list(reference.values()), list(other.values()), level)
