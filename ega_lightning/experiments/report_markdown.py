"""REPORT.md laid out: the claims table, the method note, one section per report group with its findings'
sentences, table and figures, each study's own section (the leaderboard before the groups, the tau landscape
after them: `study.Study.section`), the diagnostics, provenance and the runs.

What a finding says is written by `engine` (its templates); every figure of the paper in the text comes from
`paper`, every rule's words from `rules`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ega_lightning.experiments import engine, paper, protocol, provenance, sizes
from ega_lightning.experiments.comparisons import (
    Row,
    RunData,
    Table,
    Variant,
    recipe,
    recipe_difference,
    shape,
    shape_text,
    split_text,
)
from ega_lightning.experiments.findings import DIAGNOSTICS, Finding, claims
from ega_lightning.experiments.findings import study_wide as findings_study_wide
from ega_lightning.experiments.rules import rule_texts
from ega_lightning.experiments.study import Drawn, Measured, ReportInputs
from ega_lightning.experiments.text import fmt_summary, interval_cell, num

# ----------------------------------------------------------------------------- claims and method


def claims_table(found: list[Finding], extra: Sequence[paper.Claim] = ()) -> list[str]:
    lines = [
        "| claim of the paper | paper | ours (95% CI, seeds) | family-wise (Bonferroni) | measured in | verdict "
        "| registered | code | evidence |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for claim, f in claims(found, extra):
        if f is None:
            lines.append(f"| {claim.text} | {claim.figure} | — | — | — | not measured by these runs | — | — | — |")
            continue
        subject = f" ({engine.claim_subject(f)})" if engine.claim_subject(f) else ""
        lines.append(
            f"| {claim.text}{subject} | {claim.figure} | {engine.ours_cell(f)} | {engine.family_cell(f)} "
            f"| {f.regime} | {engine.verdict_cell(f)} | {engine.registration_cell(f)} | {engine.code_cell(f)} "
            f"| {engine.evidence(f)} |"
        )
    return lines


def protocol_note(found: list[Finding], dates: protocol.Dates) -> list[str]:
    """What the verdicts are read against: the registered protocol, its commit and date, the registration marks
    and each amendment of it."""
    p = protocol.current()
    if dates.source == "git":
        when = dates.committed.strftime("%Y-%m-%d %H:%M UTC") if dates.committed else "?"
        where = f"configs/protocol.yaml (last changed in commit {(dates.commit or '?')[:10]}, {when})"
    elif dates.source == protocol.UNDATED:
        way = (
            "fetch the whole history, `git fetch --unshallow`"
            if dates.why == protocol.SHALLOW
            else "clone the repository"
        )
        where = (
            f"configs/protocol.yaml (git history cannot date it here: {dates.why}; so no verdict is marked "
            f"registered: {way}, and report again)"
        )
    else:
        where = (
            f"configs/protocol.yaml (git history cannot be read here: {dates.why}; the dates are the file's own, "
            f"{p.registered})"
        )
    marks = Counter(f.registration.mark for f in found if f.registration is not None and f.verdict is not None)
    lines = [
        f"The verdicts are read against the registered protocol, {where}: for every kind of verdict its rule, its "
        "margin (a smallest effect of interest, with its reason), its family, its level, the seeds planned for its "
        f"runs and the stopping rule ({p.stopping}). {p.decisions}",
        "",
        "- margins: " + "; ".join(f"{name} {m.value:g} {m.unit} ({m.reason})" for name, m in p.margins.items()),
        "- registration: each verdict is marked by when its protocol entry (its lines, its family's, its margins'; "
        "the family-wise level's where its last edit changed the label; a line not committed: now) was committed "
        "against the start of every run its label rests on: the runs whose seeds enter the intervals "
        "that give the label (those that give it alone where one does: the gate that clears the positive control's "
        "threshold, the gate that beats EGA-1; else every interval it reads), not every run of its variants. A "
        "record without a start: its finished_at minus its wall seconds; a run rerun after its record was first "
        "committed counts from that commit (a rerun of a committed result decides nothing new). **registered** (the "
        "rule before every such run), **partly registered** (k of n runs after the rule), **exploratory** (the rule "
        "after every such run). Here: "
        + (", ".join(f"{n} {mark}" for mark, n in sorted(marks.items())) or "none")
        + ".",
        *(
            f"- amendment of {a.date} (issue {a.issue}): {a.text.get('why', '')} "
            + " ".join(text for key, text in a.text.items() if key != "why")
            for a in p.amendments
        ),
        "",
    ]
    return lines


def method_note(found: list[Finding]) -> list[str]:
    lines = [
        "Final = the last evaluation of a run, best = its lowest val loss; mean ± sample std over seeds. "
        "Δ = baseline − variant on the final val loss (positive: the variant is better, like the paper's "
        f"{paper.IMPROVEMENT['tinyshakespeare']:+.3f}). Every interval is a Student-t interval (scipy.stats): "
        "of the per-seed differences over the seeds both sides ran (same seed: identical shared initial weights "
        "and batches), Welch's only where the two sides share no seed; 95% where no family says otherwise. Paper "
        f"figures: {paper.SOURCE}. Each verdict carries the scale it was measured at (parameters, steps and "
        "device, from the records). Decision rules, each applied once to every claim it governs:",
        "",
        *(f"- {key}: {text}" for key, text in rule_texts().items()),
    ]
    families: dict[str, list[Finding]] = {}
    for f in found:
        if f.family is not None:
            families.setdefault(f.family, []).append(f)
    if families:
        lines.append(
            "- multiple comparisons, in the table itself: the comparisons of one family are corrected together "
            "(Bonferroni): each of its k intervals is taken at 1 − 0.05/k, so that all of them hold together at "
            "95%, and its verdicts follow those intervals; the nominal 95% interval stays beside them. Each "
            "comparison belongs to one family. Families:"
        )
        lines += [_family_line(key, members) for key, members in families.items()]
        lines.append(study_wide(found))
    return lines


def study_wide(found: Sequence[Finding]) -> str:
    """The study-wide bound, plainly (`findings.study_wide`: results.json's ``conventions.study_wide``)."""
    w = findings_study_wide(found)
    unread = [name for name in w["registered"] if name not in w["read"]]
    alpha, n = w["alpha_each"], len(w["read"])
    later = ", ".join(f"{x['family']} ({x['added']})" for x in w["added_after_first"])
    return (
        f"- study-wide: the protocol registers {len(w['registered'])} families, each read at a family-wise "
        f"{100 * alpha:.0f}%, and no correction is made across them; this report reads a label of {n} of them"
        + (f" (not of {', '.join(unread)})" if unread else "")
        + f". The chance that at least one of the {n} holds a false label is bounded only by {n} × {alpha:.2f} = "
        f"{w['bound']:.2f} (the union bound), not by {alpha:.2f}"
        + (
            f"; added after the first studies (not in the protocol's first commit, {w['first_commit']}): {later}"
            if later
            else ""
        )
        + "."
    )


def _family_line(family: str, members: list[Finding]) -> str:
    first = members[0]
    families = protocol.current().families
    planned = families[family].planned_seeds if family in families else {}
    seeds = "; seeds planned: " + ", ".join(f"{e} {n}" for e, n in planned.items()) if planned else ""
    reads = families[family].reads if family in families else family
    return (
        f"  - {family}: {reads}: k = {first.family_k}, each interval at "
        f"{100 * (first.family_level or 0.0):.2f}%, and every label of it reads that level{seeds}."
    )


# ----------------------------------------------------------------------------- sections

TABLE_HEAD = (
    "| variant | gate (paper) | model | seeds | params | overhead | final val loss | best val loss "
    "| Δ vs baseline [95% CI] | gap | tau | above tau |\n"
    "|---|---|---|---|---:|---:|---|---|---|---|---|---|"
)


def _seeds_text(v: Variant) -> str:
    """Seeds finished of the variant's; those left out for another model shape or recipe named with theirs."""
    diverged = f" (diverged: seed {', '.join(str(r.run.seed) for r in v.diverged)})" if v.diverged else ""
    if not v.left_out:
        return f"{len(v.done)}/{len(v.runs)}{diverged}"
    own = v.done[0] if v.done else None
    model = [r for r in v.left_out if own is None or shape(r.hparams) != shape(own.hparams)]
    other = [r for r in v.left_out if r not in model]
    apart = []
    if model:
        apart.append(
            "another model: " + ", ".join(f"seed {r.run.seed} at {shape_text(shape(r.hparams))}" for r in model)
        )
    if other and own is not None:

        def changed(r: RunData) -> str:  # "lr 0.01" of "lr 0.01 (the variant's 0.001)"
            return ", ".join(d.split(" (the variant's", 1)[0] for d in recipe_difference(r, recipe(own)))

        apart.append("another recipe: " + ", ".join(f"seed {r.run.seed} ({changed(r)})" for r in other))
    return f"{len(v.done)}/{len(v.runs)} (left out, {'; '.join(apart)}){diverged}"


def table_line(row: Row) -> str:
    v = row.variant
    reference = not v.gated and row.baseline is None  # a baseline; a gate-less design a study sets against one is not
    cells = [
        f"`{v.label}`",
        f"{v.gate} (a design without a gate)"
        if not v.gated and not reference
        else f"{v.gate} ({v.paper_name or 'not in paper'})",
        f"{shape_text(shape(v.done[0].hparams))}, {v.done[0].max_steps} steps" if v.done else "—",
        _seeds_text(v),
        f"{v.n_params:,}" if v.n_params else "—",
        "baseline" if reference else (f"{row.overhead_pct:+.2f}%" if row.overhead_pct is not None else "—"),
        fmt_summary(v.summary("final_val_loss")),
        fmt_summary(v.summary("best_val_loss")),
        "—"
        if reference
        else " ".join(filter(None, (interval_cell(row.diffs["final_val_loss"]), split_text(row.split_seeds)))),
        fmt_summary(v.summary("final_gap")),
        fmt_summary(v.summary("final_tau_mean")),
        (fmt_summary(v.summary("final_frac_above_tau"), 1, 100) + "%") if v.by_seed("final_frac_above_tau") else "—",
    ]
    return "| " + " | ".join(cells) + " |"


def section(
    group: str, tables: list[Table], found: list[Finding], figures: dict[str, list[tuple[str, str]]], runs_dir: Path
) -> list[str]:
    runs = [r for t in tables for row in t.rows for r in row.variant.runs]
    specs: dict[Path, dict[str, None]] = {}  # spec -> its entries, once each, in order
    for r in runs:
        specs.setdefault(r.run.spec, {})[r.run.entry] = None
    configs = list(dict.fromkeys(c for r in runs for c in r.run.configs))
    args = list(dict.fromkeys(a for r in runs for a in r.run.args))
    lines = [f"## {group}", ""]
    for spec, entries in specs.items():
        only = " ".join(f"--only '{e}-seed*'" for e in entries)
        lines.append(f"- Runs: `ega sweep {spec} --runs_dir {runs_dir} {only}`")
    lines += [
        f"- Configs: {', '.join(f'`{c}`' for c in configs) or '—'}",
        f"- Arguments: {', '.join(f'`{a}`' for a in args) or '—'}",
        "",
    ]
    for table in tables:
        lines += [f"### {table.corpus}", ""]
        mine = [f for f in found if f.section == group and f.corpus == table.corpus]
        lines += [f"- {engine.sentence(f)}" for f in mine]
        lines += ["", TABLE_HEAD, *(table_line(row) for row in table.rows), ""]
        for row in table.rows:
            if row.baseline is not None and row.baseline.group != group:
                lines.append(
                    f"`{row.variant.label}` is compared with `{row.baseline.label}` of group {row.baseline.group}."
                )
            elif row.baseline is None and row.variant.gated and row.variant.done:
                lines.append(f"`{row.variant.label}`: no finished baseline with the same model, data and steps.")
            for r in row.variant.left_out:
                lines.append(f"`{row.variant.label}`: `{r.run.run_name}` is left out of every number: {r.reason}")
            if row.split_seeds:
                seeds = ", ".join(map(str, row.split_seeds))
                lines.append(
                    f"`{row.variant.label}` and its baseline `{row.baseline.label}` ran seed(s) {seeds} on different "
                    "machines (the runs table names them): rounding differs between machines, so those pairs compare "
                    "the machines too. Rerun one side on the other's machine (`ega sweep --shard` keeps a seed's runs "
                    "on one machine)."
                )
        lines.append("")
        for caption, file in figures.get(table.title, []):
            lines += [f"![{table.title}: {caption}]({file})", ""]
    return lines


def _runs_table(runs: list[RunData]) -> list[str]:
    labels = {m: f"m{i}" for i, m in enumerate(dict.fromkeys(r.machine for r in runs), 1)}
    lines = [
        "| run | group | variant | corpus | seed | final val loss | best | gap | tau | last val step | read from "
        "| machine | code |",
        "|" + "---|" * 13,
    ]
    for r in runs:
        m = r.metrics
        lines.append(
            f"| `{r.run.run_name}` | {r.run.group} | `{r.run.variant}` | {r.corpus} | {r.run.seed} | "
            f"{num(m['final_val_loss'])} | {num(m['best_val_loss'])} | {num(m['final_gap'])} | "
            f"{num(m['final_tau_mean'])} | {m['last_val_step']} | {r.source} | {labels[r.machine]} | "
            f"{(r.code['fingerprint'] or '—')[:8]} {r.code['status']} |"
        )
    lines.append("")
    lines += [f"- {label}: {m or 'not known'}" for m, label in labels.items()]
    return lines


def study_sections(
    inputs: ReportInputs, found: list[Finding], measured: Sequence[Measured], drawn: Mapping[str, Drawn], first: bool
) -> list[str]:
    """The sections of the studies that have one (`study.Study.section`), those that come ``first`` or the others,
    in the order the studies ran; ``drawn``: each study's saved figures, by its name."""
    return [
        line
        for m in measured
        if m.study.section is not None and m.study.section_first is first
        for line in m.study.section(inputs, m.data, found, drawn.get(m.study.name, []))
    ]


def markdown(
    inputs: ReportInputs,
    found: list[Finding],
    figures: dict[str, list[tuple[str, str]]],
    command: str,
    runs_dir: Path,
    scale: dict[str, Any] | None,
    provenance_data: dict[str, Any] | None,
    dates: protocol.Dates,
    measured: Sequence[Measured],
    drawn: Mapping[str, Drawn],
    summary: Sequence[str],
) -> str:
    """REPORT.md: the ``summary`` (`report_summary`, written from results.json), the claims (the paper's and each
    study's own), the method, each study's section that comes
    first, the sections by group with their tables and figures (``figures``: by table title), each other study's
    section (``drawn``: each study's drawn figures, by its name), the diagnostics, provenance and runs."""
    tables, runs = list(inputs.tables), list(inputs.runs)
    extra = tuple(c for m in measured for c in m.claims)
    done = [r for r in runs if r.status == "done"]
    missing = [r for r in runs if r.status != "done"]
    specs = list(dict.fromkeys(str(r.run.spec) for r in runs))
    lines = [
        "# EGA experiment report",
        "",
        *summary,
        f"`{command}`, from {', '.join(f'`{s}`' for s in specs)}: **{len(done)} of {len(runs)} runs finished**"
        + (" (the others are listed at the end and are in no number)." if missing else ".")
        + " Every number is also in `results.json`.",
        "",
        *sizes.paragraph(scale),
        "## Claims",
        "",
        *claims_table(found, extra),
        "",
        "## Method",
        "",
        *protocol_note(found, dates),
        *method_note(found),
        "",
        *study_sections(inputs, found, measured, drawn, first=True),
    ]
    for group in dict.fromkeys(t.group for t in tables):
        lines += section(group, [t for t in tables if t.group == group], found, figures, runs_dir)
    lines += study_sections(inputs, found, measured, drawn, first=False)
    if diagnostics := [f for f in found if f.section == DIAGNOSTICS]:
        lines += [
            f"## {DIAGNOSTICS}",
            "",
            "Measurements that test no claim of the paper and that no verdict reads.",
            "",
        ]
        lines += [*(f"- {engine.sentence(f)}" for f in diagnostics), ""]
    lines += provenance.section(provenance_data, runs)
    lines += ["## Runs", "", *(_runs_table(done) if done else ["No finished runs."]), ""]
    head = ["| run | spec | group | variant | status | why |", "|---|---|---|---|---|---|"]
    rows = [
        f"| `{r.run.run_name}` | `{r.run.spec}` | {r.run.group} | `{r.run.variant}` | {r.status} | {r.reason} |"
        for r in missing
    ]
    lines += [
        "## Missing and incomplete runs",
        "",
        *((head + rows) if missing else ["None: every run of the spec(s) is finished."]),
    ]
    return "\n".join(lines) + "\n"
