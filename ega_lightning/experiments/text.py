"""How the report writes a number, a mean ± std, an interval and a heading's anchor: one way, for
`report_markdown` and every study's sentences alike."""

from __future__ import annotations

import re

from ega_lightning.experiments.stats import Difference, Summary


def num(x: float | None, digits: int = 3, signed: bool = False) -> str:
    if x is None:
        return "—"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def fmt_summary(s: Summary, digits: int = 3, scale: float = 1.0) -> str:
    if s.mean is None:
        return "—"
    mean = num(s.mean * scale, digits)
    return mean if s.std is None else f"{mean} ± {num(s.std * scale, digits)}"


def fmt_interval(d: Difference | None, signed: bool = True, scale: float = 1.0, digits: int = 3) -> str:
    """``+0.011 [+0.010, +0.012]``, or the estimate alone (one seed: `how` says there is no interval)."""
    if d is None:
        return "—"
    if d.low is None or d.high is None:
        return num(d.estimate * scale, digits, signed)
    return fmt_bounds(d.estimate * scale, d.low * scale, d.high * scale, digits, signed)


def fmt_bounds(estimate: float, low: float, high: float, digits: int = 3, signed: bool = True) -> str:
    """``+0.011 [+0.010, +0.012]``: an estimate and its interval's ends."""
    return f"{num(estimate, digits, signed)} [{num(low, digits, signed)}, {num(high, digits, signed)}]"


def interval_text(d: Difference | None, signed: bool = True, scale: float = 1.0, digits: int = 3) -> str:
    """An interval as a sentence says it, with how it was made: ``+0.011 [+0.010, +0.012] (paired over 3 seeds)``."""
    return f"{fmt_interval(d, signed, scale, digits)} ({how(d)})"


def interval_cell(d: Difference | None) -> str:
    """An interval as a table cell: one seed says so."""
    return fmt_interval(d) + (" (one seed)" if d is not None and d.low is None else "")


def how(d: Difference | None) -> str:
    if d is None or d.low is None:
        return "one seed, no interval"
    if d.method == "paired":
        return f"paired over {seed_count(d.n)}"
    if d.method == "welch":
        return f"Welch, df {d.df:.1f}"
    return f"{d.n} seeds"


def seed_count(n: int) -> str:
    return f"{n} seed{'' if n == 1 else 's'}"


def seed_list(seeds: list[int]) -> str:
    """``seeds 1, 2``, or ``seed 3``."""
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


def anchor(section: str) -> str:
    """GitHub's anchor of a ``## section`` heading."""
    return re.sub(r"[^a-z0-9_ -]", "", section.lower()).replace(" ", "-")
