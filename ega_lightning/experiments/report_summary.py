"""The report's first screen: one line per claim of the paper in plain words (what the paper says, what we measured,
the verdict, which EGA it is about), the leaderboard figure and the author's-EGA waterfall with its steps.

Written from results.json alone (the dict `results_json.results` returns, as the file holds it): every number here
is one of its numbers, rounded, and tests/test_summary.py holds them equal.
"""

from __future__ import annotations

import re
from typing import Any

from ega_lightning.experiments import engine
from ega_lightning.experiments.findings import Registration
from ega_lightning.experiments.stats import Difference
from ega_lightning.experiments.studies.author import TITLE
from ega_lightning.experiments.text import anchor, fmt_interval, num, seed_count

# the claims of the paper the summary reads, each from the kinds of finding that measure the claim itself (the leak
# audit, the tail identity and frozen tau are side analyses: their rows stay in the claims table)
ROWS = (
    ("improvement:tinyshakespeare", ("improvement",)),
    ("improvement:tinyshakespeare", ("author_gain",)),  # the author's EGA-1 against their baseline (issue 50)
    ("improvement:tinyshakespeare", ("paper_gain",)),  # the same at the paper's size (issue 67)
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
    ("phase1:EGA-4", ("author_gain",)),  # the author's EGA-4 against their baseline, phase 1's own comparison
    ("cost", ("cost",)),
    ("context", ("context",)),
)
# the other studies whose verdicts are read, one line each after the paper's claims: (what the line says, the kinds of
# finding it reads; every claim they judge, in results.json's order)
OTHER_STUDIES = (
    ("the peers of EGA: each against the baseline, its own claim of a lower loss", ("peer",)),
    ("the RoPE study: each design against the RoPE baseline `rope-none`, a lower loss", ("rope_gain",)),
    (
        "past the block (RoPE study, exploratory): loss at the block's last 32 positions − past it, same windows",
        ("beyond_the_block",),
    ),
)
AUTHOR_GATES = ("author",)  # the gate names of the author's EGA (issue 50); a verdict reading one is about it
AUTHOR_KINDS = ("author_gain", "author_step")  # read once every planned run is in: a row before that has no label
PAPER_KINDS = ("paper_gain", "paper_step")  # the author's study at the paper's size (issue 67)
ONCE_KINDS = (*AUTHOR_KINDS, *PAPER_KINDS)
WATERFALL = "<!-- the author's EGA: its waterfall goes here (issue 50) -->"
# what each label of the measure past the block says (`engine.PAST_THE_BLOCK`)
PAST_THE_BLOCK = {verdict.value: reading for verdict, reading in engine.PAST_THE_BLOCK.items()}
DIFFERENCE = ("estimate", "low", "high", "n", "df", "method")  # an interval's keys in results.json, in its order


def _interval(d: dict[str, Any] | None, signed: bool = True, scale: float = 1.0, digits: int = 3) -> str:
    """An interval of results.json as the report writes one (`text.fmt_interval`)."""
    known = d and d.get("estimate") is not None
    return fmt_interval(Difference(*(d[k] for k in DIFFERENCE)) if known else None, signed, scale, digits)


CORPORA = {"tinyshakespeare": "TinyShakespeare", "ptb": "PTB"}


def _at(f: dict[str, Any]) -> str:
    """Where it was measured, shortly: the corpus, the parameters of its regime and its seeds."""
    params = re.search(r"at ([0-9.–M]+) parameters", f["regime"] or "")
    d = f["corrected"] or f["ours"] or {}
    seeds = f", {seed_count(d['n'])}" if d.get("n") else ""
    return f"{CORPORA.get(f['corpus'], f['corpus'])} {params.group(1) if params else f['regime']}{seeds}"


def _runs_in(f: dict[str, Any]) -> str:
    """How many of an author's-EGA finding's planned runs are in, where not all are."""
    if f["runs_in"] >= f["runs_planned"]:
        return ""
    state = "no run finished yet" if not f["runs_in"] else "not read yet"
    return f"{state}: {f['runs_in']} of {f['runs_planned']} runs in"


def _author_measured(f: dict[str, Any]) -> str:
    """An author's-EGA difference X − Y as loss(Y) − loss(X), at the author's size, marked non-causal where it is."""
    x, y = f["key"].split(" − ")
    mark = " (**non-causal**: z over the whole window)" if f["non_causal"] else ""
    d = f["corrected"] or f["ours"]
    if not d:
        return f"{f['key']}, {f['what']}{mark}, at {f['size']}"
    return f"{_at(f)}, {f['size']}: loss({y}) − loss({x}) {_interval(d)}{mark}"


def measured(f: dict[str, Any]) -> str:
    """What a finding measured, at its family's level where it has one."""
    kind, d = f["kind"], f["corrected"] or f["ours"]
    if kind in AUTHOR_KINDS:
        return _author_measured(f)
    if kind in PAPER_KINDS and not d:
        return f"{_short(f['against'])} − {_short(f['subject'])} at the paper's size: no pair of runs recorded yet"
    if kind == "cost":
        ours = f["ours"] or {}
        return f"step time ×{num(ours.get('mean'))} on {f['device'].upper()}, {f['repetitions']} repetitions"
    if kind == "ablation_best":
        beating = f.get("beating") or []
        who = " and ".join(beating) + (" beats" if len(beating) == 1 else " beat") if beating else "no gate beats"
        return f"{who} EGA-1 by more than the margin, of {len(f['others'])} paper gates ({_at(f)})"
    if kind == "frac_above_tau":
        return f"{_at(f)}: {_interval(d, signed=False, scale=100, digits=1)}%"
    if kind == "context":
        return f"{_at(f)}: EGA-1's gain at the longest block − at the shortest {_interval(d)}"
    if kind == "beyond_the_block":
        block, length = f["block_size"], f["eval_block_size"]
        return f"{_short(f['subject'])} at {length}: {block - 31}–{block} − {block + 1}–{length} {_interval(d)}"
    if f["against"]:  # a difference: which side minus which (positive: the subject has the lower value)
        what = "gap" if kind == "gap" else "loss"
        return f"{_at(f)}: {_short(f['against'])} − {_short(f['subject'])} {what} {_interval(d)}"
    return f"{_at(f)}: {_interval(d, signed=kind not in ('tau', 'tau_init'))}"


def _short(name: str) -> str:
    """A side's paper name: 'EGA-2 `multiscale2`' -> 'EGA-2'."""
    return name.split(" `")[0]


def verdict(f: dict[str, Any], max_seeds: int) -> str:
    """Its label in plain words: the verdict, an effect's size, where the verdict would go with more seeds."""
    if f["kind"] in ONCE_KINDS and _runs_in(f):
        n = (f["ours"] or {}).get("n")
        return f"**{seed_count(n) + ': no label; ' if n else ''}{_runs_in(f)}** (the protocol reads it when all are)"
    text = f"**{f['verdict']}**"
    m = f.get("magnitude")
    if m and m.get("reading"):
        ends = f" [{100 * m['low']:.0f}%, {100 * m['high']:.0f}%]" if m.get("low") is not None else ""
        share = f", {100 * m['fraction']:.0f}%{ends} of the paper's" if m["reading"] != "not the paper's regime" else ""
        text += f", size {m['reading']}{share}"
    if f["kind"] == "beyond_the_block" and f["verdict"] in PAST_THE_BLOCK:
        text += f" ({PAST_THE_BLOCK[f['verdict']]}"
        text += f"; in place of the window contrast's {f['replaces']})" if f.get("replaces") else ")"
    if f["kind"] == "cost" and f.get("not_testable"):
        text += " (a CPU bench; the paper's GPU claim untested)"
    if f["verdict"] in ("too few seeds to tell", "no finished runs") and f.get("seeds_needed"):
        n = f["seeds_needed"]
        seeds = f"> {max_seeds}" if n > max_seeds else f"{n}"
        likely = f", most likely {f['seeds_verdict']}" if f.get("seeds_verdict") else ""
        text += f" ({seeds} seeds would decide it{likely})"
    return text


def registered(f: dict[str, Any]) -> str:
    """Its registration as the claims table says it (`engine.registration_text`: the mark, the amendment that
    changed its label); "—" where it has no label."""
    r = f.get("registration")
    return engine.registration_text(Registration(**r)) if f["verdict"] and r else "—"


def which_ega(f: dict[str, Any], gates: dict[str, str]) -> str:
    """The EGA a verdict is about: the finding's own word where it says (the author's-EGA study), else the author's
    where a run it reads trained the author's gate, else ours."""
    if f.get("ega"):
        return f["ega"]
    if f["kind"] == "paper_gain":  # B − A: the author's EGA-1 as published, whether or not a run is in
        return "the author's"
    runs = (f.get("code") or {}).get("read") or []
    return "the author's" if any(gates.get(r) in AUTHOR_GATES for r in runs) else "ours"


def _rows(results: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Each row of `ROWS` with its findings: those with a verdict, and the author's-EGA ones before their label."""
    out = []
    for key, kinds in ROWS:
        found = [
            f
            for f in results["findings"]
            if f["claim"] == key and f["kind"] in kinds and (f["verdict"] or f["kind"] in ONCE_KINDS)
        ]
        if key in {c["key"] for c in results["paper"]["claims"]} and found:
            out.append((key, found))
    return out


def author_lines(results: dict[str, Any], figure: str | None) -> list[str]:
    """The author's EGA, from results.json's ``author`` and its findings: the waterfall and its steps in one line."""
    lines = ["### The author's EGA", "", WATERFALL]
    studies = results.get("author") or []
    if not studies:
        return [
            *lines,
            "Not in this report: `ega report` with configs/sweeps/author.yaml reads the author's EGA (issue 50).",
            "",
        ]
    for study in studies:
        steps = [f for f in results["findings"] if f["kind"] in AUTHOR_KINDS and f["corpus"] == study["corpus"]]
        if figure:
            lines += [f"![the author's EGA-1's gain over their baseline, step by step]({figure})", ""]
        said = "; ".join(
            f"{f['key']} ({f['what'].split(':')[0]}{', non-causal' if f['non_causal'] else ''})"
            + (f" {_interval(f['corrected'] or f['ours'])}" if f["ours"] else "")
            + (f": **{f['verdict']}**" if f["verdict"] else "")
            for f in steps
        )
        n, planned = study["runs_in"], study["runs_planned"]
        state = (
            f"**Not yet run: 0 of {planned} planned runs in.** "
            if not n
            else f"**Not read yet: {n} of {planned} planned runs in** (no label before the last). "
            if n < planned
            else ""
        )
        lines += [
            f"{state}The author's EGA-1 as published (z over the whole window: non-causal; dropout first; their model "
            f"and recipe) against their baseline A at their phase-1 size ({study['size']}; the paper's table: "
            f"{results['paper']['table_size']}), its gain taken apart by seed into steps that sum to B − A, loss(A) − "
            f"loss(B) (the author's estimate of the loss; intervals at the author family's level): {said}. Each "
            f"step beside the whole validation split and the leak study: [{TITLE}](#{anchor(TITLE)}).",
            "",
        ]
    return lines


def drawn_lines(results: dict[str, Any]) -> list[str]:
    """What the protocol draws beside a family's comparisons (results.json's `drawn`, as its section says each, in one
    paragraph) and their figures, under each family."""
    drawn = results.get("drawn") or []
    lines: list[str] = []
    for family in dict.fromkeys(d["family"] for d in drawn):
        mine = [d for d in drawn if d["family"] == family]
        said = " ".join(line.removeprefix("- ") for d in mine for line in d["said"])
        figures = " ".join(f"![{d['name']}]({d['file']})" for d in mine if d["file"])
        lines += [f"### Beside {family}'s comparisons (each seed that is in; no label)", "", said, ""]
        lines += [figures, ""] if figures else []
    return lines


def row(what: str, figure: str, found: list[dict[str, Any]], results: dict[str, Any], gates: dict[str, str]) -> str:
    """One line of the summary's tables: what it reads, the paper's figure, then each finding's measurement, verdict,
    registration and EGA (`measured`, `verdict`, `registered`, `which_ega`), from results.json alone."""
    cells = [
        "; ".join(measured(f) for f in found),
        "; ".join(verdict(f, results["protocol"]["max_seeds"]) for f in found),
        "; ".join(registered(f) for f in found),
        ", ".join(dict.fromkeys(which_ega(f, gates) for f in found)),
    ]
    return f"| {what} | {figure} | " + " | ".join(cells) + " |"


def summary(
    results: dict[str, Any], leaderboard_figure: str | None = None, waterfall_figure: str | None = None
) -> list[str]:
    """The summary section of REPORT.md, from ``results`` (results.json's content) alone; the figures as the report
    drew them."""
    claims = {c["key"]: c for c in results["paper"]["claims"]}
    gates = {r["run_name"]: r["gate"] for r in results["runs"]}
    rows = _rows(results)
    theirs = any(which_ega(f, gates) != "ours" for _, found in rows for f in found)
    which = (
        "**Every verdict below is about our reconstruction of EGA** (z over the causal prefix, our recipe, CPU "
        "sizes), not the author's"
        if not theirs
        else "**Every verdict below is about our reconstruction of EGA** (z over the causal prefix, our recipe, CPU "
        "sizes) but those whose EGA column says the author's: the author's EGA as published (z over the whole "
        "window, non-causal; dropout first; their model and recipe) at their phase-1 size, not the paper's"
    )
    lines = [
        "## Summary",
        "",
        "One line per claim of the paper: what it says, what we measured (each interval at its family's Bonferroni "
        "level, family-wise 95%; losses in nats/char, read against the registered smallest effect of "
        f"{results['protocol']['margins']['loss']['value']}), the verdict and which EGA it is about. {which}; how "
        "each was read, and every other verdict, follow.",
        "",
    ]
    control = next((f for f in results["findings"] if f["kind"] == "control"), None)
    if control is not None:
        best = control.get("best_family") or control["ours"]
        level = f" (at the control family's {100 * control['family_level']:.2f}%)" if control.get("best_family") else ""
        lines += [
            f"Positive control: **{control['verdict']}**: {control['best']} beats the baseline by "
            f"{_interval(best)}{level}, so an effect of the paper's size would show at this scale.",
            "",
        ]
    lines += [
        "| claim of the paper | the paper | we measured | verdict | registered | EGA |",
        "|---|---|---|---|---|---|",
    ]
    for key, found in rows:
        claim = claims[key]
        lines.append(row(claim["claim"], claim["figure"], found, results, gates))
    labelled = [
        (what, [f for f in results["findings"] if f["kind"] in kinds and f["verdict"]]) for what, kinds in OTHER_STUDIES
    ]
    others = [(what, found) for what, found in labelled if found]
    if others:
        lines += [
            "",
            "One line per other study whose verdicts are read, written as the lines above (each interval at its "
            "family's level):",
            "",
            "| study | the paper | we measured | verdict | registered | EGA |",
            "|---|---|---|---|---|---|",
            *(row(what, "—", found, results, gates) for what, found in others),
        ]
    lines += [""]
    if leaderboard_figure:
        lines += [f"![every gate against the baseline, TinyShakespeare, cpu size]({leaderboard_figure})", ""]
    return lines + author_lines(results, waterfall_figure) + drawn_lines(results)
