"""The report's first screen: one line per claim of the paper in plain words (what the paper says, what we measured,
the verdict, which EGA it is about), the leaderboard figure and the place of the author's-EGA waterfall.

Written from results.json alone (the dict `results_json.results` returns, as the file holds it): every number here
is one of its numbers, rounded, and tests/test_summary.py holds them equal.
"""

from __future__ import annotations

import re
from typing import Any

# the claims of the paper the summary reads, each from the kinds of finding that measure the claim itself (the leak
# audit, the tail identity and frozen tau are side analyses: their rows stay in the claims table)
ROWS = (
    ("improvement:tinyshakespeare", ("improvement",)),
    ("improvement:ptb", ("improvement",)),
    ("gap", ("gap",)),
    ("tau", ("tau",)),
    ("tau_init", ("tau_init",)),
    ("frac_above_tau", ("frac_above_tau",)),
    ("ablation:best", ("ablation_best",)),
    *(
        (f"ablation:{row}", ("ablation_pair",))
        for row in ("EGA-2", "EGA-4", "EGA-M-P", "EGA-DB2", "EGA-DB4", "EGA-M-F")
    ),
    ("cost", ("cost",)),
    ("context", ("context",)),
)
AUTHOR_GATES = ("author",)  # the gate names of the author's EGA (issue 50); a verdict reading one is about it
WATERFALL = "<!-- the author's EGA: its waterfall goes here (issue 50) -->"
UNDECIDED = ("too few seeds to tell", "no finished runs")


def _n(x: float | None, digits: int = 3, signed: bool = True, scale: float = 1.0) -> str:
    return "—" if x is None else f"{x * scale:+.{digits}f}" if signed else f"{x * scale:.{digits}f}"


def _interval(d: dict[str, Any] | None, signed: bool = True, scale: float = 1.0, digits: int = 3) -> str:
    if not d or d.get("estimate") is None:
        return "—"
    ends = f" [{_n(d['low'], digits, signed, scale)}, {_n(d['high'], digits, signed, scale)}]"
    return _n(d["estimate"], digits, signed, scale) + (ends if d.get("low") is not None else "")


CORPORA = {"tinyshakespeare": "TinyShakespeare", "ptb": "PTB"}


def _at(f: dict[str, Any]) -> str:
    """Where it was measured, shortly: the corpus, the parameters of its regime and its seeds."""
    params = re.search(r"at ([0-9.–M]+) parameters", f["regime"] or "")
    d = f["corrected"] or f["ours"] or {}
    seeds = f", {d['n']} seeds" if d.get("n") else ""
    return f"{CORPORA.get(f['corpus'], f['corpus'])} {params.group(1) if params else f['regime']}{seeds}"


def measured(f: dict[str, Any]) -> str:
    """What a finding measured, at its family's level where it has one."""
    kind, d = f["kind"], f["corrected"] or f["ours"]
    if kind == "cost":
        ours = f["ours"] or {}
        return (
            f"step time ×{_n(ours.get('mean'), signed=False)} on {f['device'].upper()}, {f['repetitions']} repetitions"
        )
    if kind == "ablation_best":
        beating = f.get("beating") or []
        who = " and ".join(beating) + (" beats" if len(beating) == 1 else " beat") if beating else "no gate beats"
        return f"{who} EGA-1 by more than the margin, of {len(f['others'])} paper gates ({_at(f)})"
    if kind == "frac_above_tau":
        return f"{_at(f)}: {_interval(d, signed=False, scale=100, digits=1)}%"
    if kind == "context":
        return f"{_at(f)}: EGA-1's gain at the longest block − at the shortest {_interval(d)}"
    if f["against"]:  # a difference: which side minus which (positive: the subject has the lower value)
        what = "gap" if kind == "gap" else "loss"
        return f"{_at(f)}: {_short(f['against'])} − {_short(f['subject'])} {what} {_interval(d)}"
    return f"{_at(f)}: {_interval(d, signed=kind not in ('tau', 'tau_init'))}"


def _short(name: str) -> str:
    """A side's paper name: 'EGA-2 `multiscale2`' -> 'EGA-2'."""
    return name.split(" `")[0]


def verdict(f: dict[str, Any], max_seeds: int) -> str:
    """Its label in plain words: the verdict, an effect's size, where the verdict would go with more seeds."""
    text = f"**{f['verdict']}**"
    m = f.get("magnitude")
    if m and m.get("reading"):
        share = f", {100 * m['fraction']:.0f}% of the paper's" if m["reading"] != "not the paper's regime" else ""
        text += f", size {m['reading']}{share}"
    if f["kind"] == "cost" and f.get("not_testable"):
        text += " (a CPU bench; the paper's GPU claim untested)"
    if f["verdict"] in UNDECIDED and f.get("seeds_needed"):
        n = f["seeds_needed"]
        seeds = f"> {max_seeds}" if n > max_seeds else f"{n}"
        likely = f", most likely {f['seeds_verdict']}" if f.get("seeds_verdict") else ""
        text += f" ({seeds} seeds would decide it{likely})"
    return text


def which_ega(f: dict[str, Any], gates: dict[str, str]) -> str:
    """The EGA a verdict is about: the author's where a run it reads trained the author's gate, else ours."""
    runs = (f.get("code") or {}).get("read") or []
    return "the author's" if any(gates.get(r) in AUTHOR_GATES for r in runs) else "ours"


def summary(results: dict[str, Any], leaderboard_figure: str | None = None) -> list[str]:
    """The summary section of REPORT.md, from ``results`` (results.json's content) alone."""
    claims = {c["key"]: c for c in results["paper"]["claims"]}
    gates = {r["run_name"]: r["gate"] for r in results["runs"]}
    lines = [
        "## Summary",
        "",
        "One line per claim of the paper: what it says, what we measured (each interval at its family's Bonferroni "
        "level, family-wise 95%; losses in nats/char, read against the registered smallest effect of "
        f"{results['protocol']['margins']['loss']['value']}), the verdict and which EGA it is about. **Every "
        "verdict below is about our reconstruction of EGA** (z over the causal prefix, our recipe, CPU sizes), "
        "not the author's; how each was read, and every other verdict, follow.",
        "",
    ]
    control = next((f for f in results["findings"] if f["kind"] == "control"), None)
    if control is not None:
        lines += [
            f"Positive control: **{control['verdict']}**: {control['best']} beats the baseline by "
            f"{_interval(control['ours'])}, so an effect of the paper's size would show at this scale.",
            "",
        ]
    lines += [
        "| claim of the paper | the paper | we measured | verdict | registered | EGA |",
        "|---|---|---|---|---|---|",
    ]
    for key, kinds in ROWS:
        found = [f for f in results["findings"] if f["claim"] == key and f["kind"] in kinds and f["verdict"]]
        claim = claims.get(key)
        if claim is None or not found:
            continue
        cells = [
            "; ".join(measured(f) for f in found),
            "; ".join(verdict(f, results["protocol"]["max_seeds"]) for f in found),
            "; ".join((f.get("registration") or {}).get("mark") or "—" for f in found),
            ", ".join(dict.fromkeys(which_ega(f, gates) for f in found)),
        ]
        lines.append(f"| {claim['claim']} | {claim['figure']} | " + " | ".join(cells) + " |")
    lines += [""]
    if leaderboard_figure:
        lines += [f"![every gate against the baseline, TinyShakespeare, cpu size]({leaderboard_figure})", ""]
    lines += [
        "### The author's EGA",
        "",
        WATERFALL,
        "Not run yet: the author's EGA (window z-norm, dropout first, the author's recipe) and the waterfall of "
        "its gain come with issue 50.",
        "",
    ]
    return lines
