"""REPORT.md and results.json from tables and findings: the only module that writes prose.

Every figure of the paper in the text comes from `paper`; every verdict from a finding.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ega_lightning.experiments import paper
from ega_lightning.experiments.comparisons import LEADERBOARD_GROUPS, METRICS, Entry, Row, RunData, Table, Variant
from ega_lightning.experiments.findings import DIAGNOSTICS, LEADERBOARD, TAU_SECTION, Finding, claims, entry_name
from ega_lightning.experiments.landscapes import Evaluation
from ega_lightning.experiments.rules import FAMILIES, MARGIN, MAX_SEEDS, RULES, TAU_STEP, Verdict
from ega_lightning.experiments.stats import Difference
from ega_lightning.experiments.text import anchor, fmt_interval, fmt_summary, how, num

# ----------------------------------------------------------------------------- claims table


def resolution_text(f: Finding) -> str:
    """The smallest difference the positive control's protocol resolves, at each number of paired seeds."""
    res = f.detail["resolution"]
    if not res:
        return "no gate has two paired seeds: no resolution yet"
    level = 100 * f.detail["family_level"] if "family_level" in f.detail else None
    nominal = ", ".join(f"±{num(h['nominal'])} at {n} seeds" for n, h in res.items())
    family = ", ".join(f"±{num(h['family'])} at {n}" for n, h in res.items())
    at_family = f"; at the family's {level:.2f}%: {family}" if level is not None else ""
    return f"resolves {nominal} (95%, pooled paired std {num(f.detail['pooled_std'], 4)}){at_family}"


def _ours(f: Finding) -> str:
    if f.kind == "control":
        best = f"best: {f.detail['best']} {fmt_interval(f.ours)}, {how(f.ours)}" if f.detail["best"] else "—"
        return f"{best}; {resolution_text(f)}"
    if f.kind == "ablation_best":
        return f"rank {f.detail['rank']} of {f.detail['of']}"
    if f.kind == "cost":
        if f.ours is None:
            return "no `ega bench` result"
        return f"step time ×{num(f.ours.mean)} (quartiles {num(f.detail['q1'])}–{num(f.detail['q3'])})"
    if f.kind == "tail" and isinstance(f.ours, Difference):
        return f"measured − (1 − Φ(tau)) {fmt_interval(f.ours, scale=100, digits=1)} points, {how(f.ours)}"
    if f.kind == "tau_init" and isinstance(f.ours, Difference):
        return f"slope of final tau on tau_init {fmt_interval(f.ours, signed=False)}, {how(f.ours)}"
    if f.kind == "tau_mechanism":
        final = [c for c in f.detail["checkpoints"] if c["final"] and c["gate"] == "linear"]
        costs = "; ".join(
            f"tau {-TAU_STEP:+}: {num(c['tau_shift_cost'][-TAU_STEP], 4, True)}, "
            f"{TAU_STEP:+}: {num(c['tau_shift_cost'][TAU_STEP], 4, True)}"
            for c in final
        )
        frozen = ", ".join(f"{subject}: {verdict}" for subject, verdict in f.detail["frozen"])
        return "; ".join(part for part in (costs, frozen) if part) or "—"
    if f.kind == "frac_above_tau" and isinstance(f.ours, Difference):
        return f"{fmt_interval(f.ours, signed=False, scale=100, digits=1)}%, {how(f.ours)}"
    if f.kind == "context":
        if f.ours is None:
            return "no seed ran every block size"
        return f"Δ(longest) − Δ(shortest) {fmt_interval(f.ours)}, {how(f.ours)}"
    if not isinstance(f.ours, Difference):
        return "—"
    return f"{fmt_interval(f.ours, signed=f.kind != 'tau')}, {how(f.ours)}"


def _claim_subject(f: Finding) -> str:
    """What a row of the claims table measured, where it is not the claim's own comparison."""
    if f.kind == "control":
        return f"{f.detail['finished']} of {f.detail['gates']} leaderboard gates with finished runs"
    if f.kind in ("ablation_pair", "peer"):
        return f"{f.subject} vs {f.against}"
    if f.kind == "leak":
        return f"leak audit: {f.subject}, z over the whole window, as trained"
    if f.kind == "frozen_tau":
        return f"{f.subject}, never trained, vs {f.against}: learned − frozen"
    if f.kind == "tail":
        return f"is it 1 − Φ(tau)? {f.subject}, z over the {f.detail['znorm']}, one value per seed"
    if f.kind == "tau_init":
        inits = ", ".join(str(init) for init, _, _ in f.detail["taus"])
        return f"EGA-1 from tau_init {inits}"
    if f.kind == "tau_mechanism":
        return "why tau does not move: mechanism (a) or (b)"
    return ""


def family_cell(f: Finding) -> str:
    """The interval a family's verdict reads (Bonferroni), or what the verdict reads where it reads several."""
    if f.family is None:
        return "—"
    k, level = f.detail["family_k"], f.detail["family_level"]
    where = f"{f.family}, k = {k}, {100 * level:.1f}%"
    if f.corrected is None:
        return where
    scale, digits, signed = (100, 1, True) if f.kind == "tail" else (1, 3, f.kind != "tau_init")
    return f"{fmt_interval(f.corrected, signed=signed, scale=scale, digits=digits)} ({where})"


def seeds_text(f: Finding) -> str:
    def count(n: int) -> str:
        return f"> {MAX_SEEDS}" if n > MAX_SEEDS else f"{n}"

    if f.seeds_needed is None:
        return ""
    nominal = f.detail.get("seeds_nominal")
    at_nominal = f" ({count(nominal)} at nominal 95%)" if nominal and nominal != f.seeds_needed else ""
    return f"{count(f.seeds_needed)} paired seeds would decide it{at_nominal}"


def code_cell(f: Finding) -> str:
    code = f.detail.get("code")
    if not code or not code["sides"]:
        return "—"
    if code["flag"] is None:
        return "today's"
    return f"⚠ {code['flag']} ({len(code['runs'])} run{'s' if len(code['runs']) > 1 else ''})"


def claims_table(found: list[Finding]) -> list[str]:
    lines = [
        "| claim of the paper | paper | ours (95% CI, seeds) | family-wise (Bonferroni) | measured in | verdict "
        "| code | evidence |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for claim, f in claims(found):
        if f is None:
            lines.append(f"| {claim.text} | {claim.figure} | — | — | — | not measured by these runs | — | — |")
            continue
        section = f.section if f.kind != "cost" else None
        link = f"[{section}](#{anchor(section)})" if section else f"[{f.detail['source']}]({f.detail['source']})"
        subject = f" ({_claim_subject(f)})" if _claim_subject(f) else ""
        verdict = f"**{f.verdict.value}**" + (f" ({seeds_text(f)})" if seeds_text(f) else "")
        lines.append(
            f"| {claim.text}{subject} | {claim.figure} | {_ours(f)} | {family_cell(f)} | {f.regime} | {verdict} "
            f"| {code_cell(f)} | {link} |"
        )
    return lines


def method_note(found: list[Finding]) -> list[str]:
    lines = [
        "Final = the last evaluation of a run, best = its lowest val loss; mean ± sample std over seeds. "
        "Δ = baseline − variant on the final val loss (positive: the variant is better, like the paper's "
        f"{paper.IMPROVEMENT['tinyshakespeare']:+.3f}). Every interval is a 95% Student-t interval (scipy.stats): "
        "of the per-seed differences over the seeds both sides ran (same seed: identical shared initial weights "
        "and batches), Welch's only where the two sides share no seed. Paper figures: "
        f"{paper.SOURCE}. Each verdict carries the scale it was measured at (parameters, steps and device, "
        "from the records). Decision rules, each applied once to every claim it governs:",
        "",
        *(f"- {key}: {text}" for key, text in RULES.items()),
    ]
    families: dict[tuple[str, str, str], list[Finding]] = {}
    for f in found:
        if f.family is not None:
            families.setdefault((f.family, f.section, f.corpus), []).append(f)
    if families:
        lines.append(
            "- multiple comparisons, in the table itself: the comparisons of one family are corrected together "
            "(Bonferroni): each of its k intervals is taken at 1 − 0.05/k, so that all of them hold together at "
            "95%, and its verdicts follow those intervals; the nominal 95% interval stays beside them. Families:"
        )
        for (family, section, corpus), members in families.items():
            first = members[0].detail
            changed = [f for f in members if f.verdict is not None and f.detail["nominal_verdict"] != f.verdict.value]
            change = (
                "; at nominal 95% "
                + ", ".join(f"{_finding_label(f)} would read **{f.detail['nominal_verdict']}**" for f in changed)
                if changed
                else "; no verdict differs from its nominal 95% one"
            )
            lines.append(
                f"  - {family} ({section} / {corpus}): {FAMILIES[family]}: k = {first['family_k']}, each interval at "
                f"{100 * first['family_level']:.2f}%{change}."
            )
    return lines


def _finding_label(f: Finding) -> str:
    return f"{f.subject} vs {f.against}" if f.against else f.subject


# ----------------------------------------------------------------------------- findings as sentences


def sentence(f: Finding) -> str:
    """One finding as it reads in its section: what was measured and its verdict, then its family's
    correction, the seeds that would decide it and the code its sides ran."""
    extras = [_family_sentence(f), seeds_text(f).capitalize() + "." if seeds_text(f) else "", _code_sentence(f)]
    return " ".join([_sentence(f), *(x for x in extras if x)])


def _family_sentence(f: Finding) -> str:
    if f.family is None:
        return ""
    k, level = f.detail["family_k"], f.detail["family_level"]
    text = f"Bonferroni over the {f.family} family (k = {k}): each interval at {100 * level:.2f}%"
    if f.corrected is not None:
        scale, digits, signed = (100, 1, True) if f.kind == "tail" else (1, 3, f.kind != "tau_init")
        text += f", this one {fmt_interval(f.corrected, signed=signed, scale=scale, digits=digits)}"
    nominal = f.detail["nominal_verdict"]
    if f.verdict is not None and nominal != f.verdict.value:
        text += f"; at nominal 95% it would read {nominal}"
    return text + "."


def _code_sentence(f: Finding) -> str:
    code = f.detail.get("code")
    if not code or not code["sides"]:
        return ""
    sides = "; ".join(
        f"{side['variant']} "
        + ", ".join(
            f"{fp[:8] if fp != 'unknown' else 'unknown'} (seed{'s' if len(seeds) > 1 else ''} "
            f"{', '.join(map(str, seeds))})"
            for fp, seeds in side["fingerprints"].items()
        )
        for side in code["sides"]
    )
    flag = (
        ""
        if code["flag"] is None
        else f" ⚠ {code['flag']}: not today's code for " + ", ".join(f"`{r}`" for r in code["runs"])
    )
    return f"Code (fingerprint): {sides}.{flag}" + ("." if flag else "")


def _sentence(f: Finding) -> str:
    d = f.ours if isinstance(f.ours, Difference) else None
    verdict = f" — **{f.verdict.value}**" if f.verdict is not None else ""
    if f.kind == "improvement":
        ours_mean, base_mean = f.detail["means"]
        text = (
            f"{f.subject} vs {f.against}: final val loss {num(ours_mean)} vs {num(base_mean)}, "
            f"Δ {fmt_interval(d)} ({how(d)})"
        )
        if f.paper is not None and d is not None:
            text += f"; paper {f.paper:+.3f}, of which this is {100 * d.estimate / f.paper:.0f}%"
        return text + verdict + "."
    if f.kind == "best_val_loss":
        return (
            f"Best val loss (each run's lowest; the val loss rose after it in some runs), {f.subject} vs "
            f"{f.against}: Δ {fmt_interval(d)} ({how(d)})."
        )
    if f.kind == "gap":
        regime = f.detail["paper_regime"]
        where = (
            "no baseline gap logged"
            if regime is None
            else f"the baseline's gap {num(f.detail['baseline_gap'])} "
            + ("passes" if regime else "stays below")
            + f" {paper.OVERFIT_GAP}: {'' if regime else 'not '}the paper's overfitting regime"
        )
        return (
            f"Generalization gap (val − train loss), baseline − EGA-1: {fmt_interval(d)} ({how(d)}); paper "
            f"{paper.GAP['none']} − {paper.GAP['linear']} = {paper.GAP_REDUCTION:+.3f}; {where}{verdict}."
        )
    if f.kind == "tau":
        settled = f.detail.get("tracked")
        extra = f"; TauTracker saw it settle in {f.detail['settled']} of {settled} seeds" if settled else ""
        ours = f"{fmt_interval(d, signed=False)} ({how(d)})"
        return f"Final tau of {f.subject}: {ours}; paper ≈ {paper.TAU}{extra}{verdict}."
    if f.kind == "frac_above_tau":
        return (
            f"Validation keys above tau: {fmt_interval(d, signed=False, scale=100, digits=1)}% ({how(d)}); "
            f"paper {100 * paper.FRAC_ABOVE_TAU:.0f}%{verdict}."
        )
    if f.kind == "ablation_ranking":
        ranking = ", ".join(
            f"{n}{'' if group == f.section else f' ({group})'} {num(mean)}" for n, group, mean in f.detail["ranking"]
        )
        return f"Ranking by final val loss, lowest first: {ranking}."
    if f.kind == "ablation_best":
        return f"{f.subject} ranks {f.detail['rank']} of {f.detail['of']} paper rows; EGA-1 best{verdict}."
    if f.kind == "peer":
        measured = f"baseline − gate {fmt_interval(d)} ({how(d)})" if d is not None else "no finished run yet"
        claim = f"its own claim, a {paper.PEER_CLAIM}"
        return f"{f.subject} ({f.detail['source']}) vs {f.against}: {measured}; {claim}{verdict}."
    if f.kind == "control":
        best = f"the best, {f.detail['best']}: {fmt_interval(d)} ({how(d)})" if f.detail["best"] else "no gate finished"
        return (
            f"Positive control over the {f.detail['gates']} gates of the leaderboard ({f.detail['finished']} with "
            f"finished runs), threshold {f.detail['threshold']:+.4f}: {best}; {resolution_text(f)}{verdict}."
        )
    if f.kind == "ablation_pair":
        claim = paper.CLAIM[f.claim or ""].text if f.claim in paper.CLAIM else f.subject
        return f"{claim}: {f.against} − {f.subject} {fmt_interval(d)} ({how(d)}){verdict}."
    if f.kind == "context":
        if f.ours is None:
            return "EGA-1 by block size: no seed ran every block size, so no like-for-like comparison."
        seeds = f.detail["seeds"]
        parts = "; ".join(f"T{block} {fmt_interval(diff)}" for block, diff in f.detail["by_block"])
        return (
            f"Δ by block size (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}, which every block "
            f"size ran): {parts}; {'grows with every longer block' if f.detail['monotone'] else 'not monotone'}. "
            f"Longest − shortest block: {fmt_interval(d)} ({how(d)}); the advantage grows with context{verdict}."
        )
    if f.kind == "tau_init":
        seeds = f.detail["seeds"]
        if not seeds:
            return "Final tau and loss by initialisation: no seed ran every initialisation, so no like-for-like view."
        on = f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}, which every initialisation ran"
        taus = "; ".join(f"tau_init {init} → {fmt_summary(s)}" for init, _, s in f.detail["taus"])
        text = f"Final tau by initialisation ({on}): {taus}"
        if f.detail["tau_span"] is not None:
            text += f"; the final means span {f.detail['tau_span']:.3f} (paper ≈ {paper.TAU} regardless)"
        losses = "; ".join(f"tau_init {init} {fmt_summary(s)}" for init, s in f.detail["losses"])
        text += f". Final val loss by initialisation: {losses}"
        if f.detail["loss_span"] is not None:
            text += f"; the means span {f.detail['loss_span']:.3f}"
            if f.detail["scatter"] is not None:
                init, s = f.detail["scatter"]
                ratio = f.detail["loss_span"] / s.std
                text += f", {ratio:.1f}× the seed-to-seed std of tau_init {init} ({s.std:.3f} over {s.n} seeds)"
        if f.detail["paired"]:
            pairs = "; ".join(f"tau_init {init} {fmt_interval(d)} ({how(d)})" for init, d in f.detail["paired"])
            text += f". Paired by seed with tau_init {f.detail['reference']}, its loss − each: {pairs}"
        if d is not None:
            slopes = ", ".join(f"seed {s} {v:.3f}" for s, v in f.detail["slopes"].items())
            text += (
                f". Slope of final tau on tau_init, per seed ({slopes}): {fmt_interval(d, signed=False)} ({how(d)}); "
                f"tau converges regardless of its initialisation{verdict}"
            )
        return text + "."
    if f.kind == "leak":
        text = (
            f"Leak audit: {f.subject} (z from the whole window's mean and variance, so each key's gate reads later "
            f"characters) vs {f.against}, as trained: Δ {fmt_interval(d)} ({how(d)}); paper {num(f.paper, 3, True)}"
        )
        causal = f.detail["causal"]
        if causal is not None:
            text += f"; causal {f.detail['causal_subject']}: Δ {fmt_interval(causal)} ({how(causal)})"
        return text + verdict + "."
    if f.kind == "leak_increment":
        return (
            f"The leak's own increment, {f.subject} against causal {f.against} (Δ as trained − causal Δ, per seed): "
            f"{fmt_interval(d)} ({how(d)})."
        )
    if f.kind == "leak_causal":
        if d is None:
            return (
                f"{f.subject}'s checkpoints evaluated with the causal prefix z: not evaluated yet "
                "(`ega landscape --eval_znorm prefix --max_eval_windows 0 --ckpt_path <run>/checkpoints/last.ckpt "
                "--out results/landscape/<run>-prefix.json`)."
            )
        seeds = ", ".join(map(str, f.detail["seeds"]))
        text = (
            f"{f.subject}'s final checkpoints (trained with z over the whole window) evaluated with the causal "
            f"prefix z (`ega landscape --eval_znorm prefix`, whole validation split, "
            f"seed{'s' if len(f.detail['seeds']) > 1 else ''} {seeds}) vs {f.against}: Δ {fmt_interval(d)} "
            f"({how(d)}). A train/test mismatch, not a measure of EGA"
        )
        if f.detail["above_causal"] is not None and f.detail["above_trained"] is not None:
            text += (
                f": evaluated causally, {100 * f.detail['above_causal']:.0f}% of keys land above tau, against "
                f"{100 * f.detail['above_trained']:.0f}% as trained (1 − Φ(tau) = "
                f"{100 * f.detail['normal_tail']:.0f}%), so the gates open where training never had them open"
            )
        return text + ". No verdict reads it, and its nearness in size to the paper's figure means nothing."
    if f.kind == "rerun":
        same = (
            "bit for bit the same final val loss"
            if f.detail["identical"]
            else f"final val loss differs by up to {f.detail['largest_difference']:.2e}"
        )
        seeds = ", ".join(map(str, f.detail["seeds"]))
        return (
            f"{f.subject} reruns {f.against} (group {f.detail['of_group']}) at "
            f"seed{'s' if len(f.detail['seeds']) > 1 else ''} {seeds} with the same configuration, kept for its "
            f"checkpoints: {same}. Evidence for nothing its original does not give: no verdict reads it."
        )
    if f.kind == "frozen_tau":
        return (
            f"{f.subject} (tau held at its tau_init {f.detail['tau_init']}, never trained) vs {f.against}: "
            f"learned − frozen {fmt_interval(d)} ({how(d)}); final val loss {num(f.detail['frozen_loss'])} frozen, "
            f"{num(f.detail['learned_loss'])} learned, whose tau ended at {num(f.detail['learned_tau'])}{verdict}."
        )
    if f.kind == "tail":
        text = (
            f"{f.subject}, z over the {f.detail['znorm']}: {100 * f.detail['frac_above_tau']:.1f}% of keys above tau "
            f"against {100 * f.detail['normal_tail']:.1f}% = 1 − Φ(tau) (means over seeds of the gate summaries "
            f"recorded during training); measured − normal, one value per seed: {fmt_interval(d, scale=100, digits=1)} "
            f"points ({how(d)}){verdict}."
        )
        heads = f.detail["heads_interval"]
        if heads is not None:
            runs = ", ".join(f"`{r}`" for r in f.detail["heads_runs"])
            text += (
                f" As a figure only (heads of one model are not independent): over the {f.detail['heads']} heads "
                f"of {runs} evaluated by `ega landscape`, {fmt_interval(heads, scale=100, digits=1)} points, the "
                f"largest {100 * f.detail['max_abs_gap']:.1f}."
            )
        return text
    if f.kind == "tau_mechanism":
        return mechanism_sentence(f)
    raise ValueError(f"no sentence for a finding of kind {f.kind!r}")


MEANING = {
    Verdict.WEAK_GRADIENT: (
        "the loss does not hold tau where it ends, so tau ends about where it started and a final tau near "
        f"{paper.TAU} reflects its initialisation more than the data"
    ),
    Verdict.CO_ADAPTATION: (
        "each tau sits at a minimum that the rest of the network built around it, so any initialisation ends at "
        f"its own minimum and a final tau near {paper.TAU} reflects its initialisation more than the data"
    ),
    Verdict.NEITHER: "training tau changes the loss, so where tau ends carries information",
}


def mechanism_sentence(f: Finding) -> str:
    parts = []
    for c in f.detail["checkpoints"]:
        costs = c["tau_shift_cost"].items()
        shifts = ", ".join(f"{num(delta, 2, True)}: {num(cost, 4, True)}" for delta, cost in costs)
        alpha = num(c["alpha_scale_cost"].get(0.0), 3, True)
        parts.append(f"`{c['label']}`: tau shifted by {shifts}; alpha × 0: {alpha}")
    text = "Why tau does not move. Loss change with every tau shifted (nats/char): " + (
        "; ".join(parts) if parts else "no checkpoint evaluated yet"
    )
    if f.detail["frozen"]:
        text += ". Frozen tau vs learned: " + ", ".join(f"{s}: {v}" for s, v in f.detail["frozen"])
    ratio = f.detail["grad_norm_ratio"]
    if ratio is not None:
        text += f". Median |grad tau| / |grad energy projection| over EGA-1's logged steps: {ratio:.3g}"
    text += f" — **{f.verdict.value}**" if f.verdict else ""
    meaning = MEANING.get(f.verdict) if f.verdict else None
    return text + (f": {meaning}." if meaning else ".")


# ----------------------------------------------------------------------------- sections

TABLE_HEAD = (
    "| variant | gate (paper) | model | seeds | params | overhead | final val loss | best val loss "
    "| Δ vs baseline [95% CI] | gap | tau | above tau |\n"
    "|---|---|---|---|---:|---:|---|---|---|---|---|---|"
)


def _model_text(row: Row) -> str:
    v = row.variant
    if not v.done:
        return "—"
    h = v.done[0].hparams
    return f"{h.get('n_layer')}×{h.get('n_head')}×{h.get('n_embd')} T{h.get('block_size')}, {v.done[0].max_steps} steps"


def _cell(d: Difference | None) -> str:
    return fmt_interval(d) + (" (one seed)" if d is not None and d.low is None else "")


def table_line(row: Row) -> str:
    v = row.variant
    cells = [
        f"`{v.label}`",
        f"{v.gate} ({v.paper_name or 'not in paper'})",
        _model_text(row),
        f"{len(v.done)}/{len(v.runs)}",
        f"{v.n_params:,}" if v.n_params else "—",
        "baseline" if v.gate == "none" else (f"{row.overhead_pct:+.2f}%" if row.overhead_pct is not None else "—"),
        fmt_summary(v.summary("final_val_loss")),
        fmt_summary(v.summary("best_val_loss")),
        "—" if v.gate == "none" else _cell(row.diffs["final_val_loss"]),
        fmt_summary(v.summary("final_gap")),
        fmt_summary(v.summary("final_tau_mean")),
        (fmt_summary(v.summary("final_frac_above_tau"), 1, 100) + "%") if v.by_seed("final_frac_above_tau") else "—",
    ]
    return "| " + " | ".join(cells) + " |"


def section(
    group: str,
    tables: list[Table],
    found: list[Finding],
    figures: dict[str, list[tuple[str, str]]],
    runs_dir: Path,
) -> list[str]:
    runs = [r for t in tables for row in t.rows for r in row.variant.runs]
    specs: dict[Path, list[str]] = {}
    for r in runs:
        entries = specs.setdefault(r.run.spec, [])
        if r.run.entry not in entries:
            entries.append(r.run.entry)
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
        lines += [f"- {sentence(f)}" for f in mine]
        lines += ["", TABLE_HEAD, *(table_line(row) for row in table.rows), ""]
        for row in table.rows:
            if row.baseline is not None and row.baseline.group != group:
                lines.append(
                    f"`{row.variant.label}` is compared with `{row.baseline.label}` of group {row.baseline.group}."
                )
            elif row.baseline is None and row.variant.gate != "none" and row.variant.done:
                lines.append(f"`{row.variant.label}`: no finished baseline with the same model, data and steps.")
        lines.append("")
        for caption, file in figures.get(table.title, []):
            lines += [f"![{table.title}: {caption}]({file})", ""]
    return lines


Board = tuple[Variant | None, list[Entry]]  # the pooled baseline and the leaderboard (`comparisons.leaderboard`)


def _paired_seeds(baseline: Variant, v: Variant) -> list[int]:
    metric = "final_val_loss"
    return sorted(set(baseline.by_seed(metric)) & set(v.by_seed(metric)))


def leaderboard_section(board: Board, found: list[Finding], figures: list[tuple[str, str]]) -> list[str]:
    """Every gate at the TinyShakespeare cpu size against the baseline, best first, and the positive control."""
    baseline, entries = board
    if baseline is None or not entries:
        return []
    lines = [
        f"## {LEADERBOARD}",
        "",
        f"Every gate of the sections {', '.join(LEADERBOARD_GROUPS)} on {baseline.corpus} against the baseline "
        f"`{baseline.label}` ({len(baseline.done)} finished seeds), each gate's runs pooled over every section "
        "that shows its configuration; sorted by baseline − gate, largest first. The step-time ratio is the "
        "training runs' own throughput (`train/tokens_per_sec`, each run's median), baseline over gate per shared "
        "seed: a figure measured while the runs shared the machine with others, not `ega bench`.",
        "",
        *(f"- {sentence(f)}" for f in found if f.section == LEADERBOARD),
        "",
        "| rank | gate | from | seeds paired | baseline − gate [95% CI] | half-width | params added | step time × "
        "(gate / baseline) [95% CI] |",
        "|---:|---|---|---|---|---:|---:|---|",
    ]
    for i, e in enumerate(entries, 1):
        d = e.diff
        seeds = _paired_seeds(baseline, e.variant)
        cells = [
            str(i) if d is not None else "—",
            entry_name(e),
            ", ".join(e.groups),
            f"{len(seeds)} ({', '.join(map(str, seeds))})" if seeds else f"0 of {len(e.variant.runs)} finished",
            _cell(d),
            num((d.high - d.low) / 2) if d is not None and d.low is not None and d.high is not None else "—",
            f"{e.params_added:+,}" if e.params_added is not None else "—",
            fmt_interval(e.time_ratio, signed=False),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for caption, file in figures:
        lines += [f"![{caption}]({file})", ""]
    return lines


def leaderboard_dict(board: Board) -> dict[str, Any] | None:
    baseline, entries = board
    if baseline is None:
        return None
    return {
        "baseline": {"variant": baseline.label, "seeds": sorted(baseline.by_seed("final_val_loss"))},
        "rows": [
            {
                "variant": e.variant.label,
                "gate": e.variant.gate,
                "name": entry_name(e),
                "groups": e.groups,
                "runs": [r.run.run_name for r in e.variant.runs],
                "seeds_paired": _paired_seeds(baseline, e.variant),
                "diff_final_val_loss": e.diff,
                "params_added": e.params_added,
                "step_time_ratio": e.time_ratio,
            }
            for e in entries
        ],
    }


LANDSCAPE_HEAD = (
    "| checkpoint | gate | z trained / evaluated | val loss | tau −1 / −0.5 / +0.5 / +1 | alpha ×0 / ×0.5 / ×2 "
    "| mean tau | above tau | 1 − Φ(tau) |\n|---|---|---|---|---|---|---|---|---|"
)


def _landscape_line(e: Evaluation) -> str:
    def costs(values: list[float]) -> str:
        return " / ".join(num(v, 3, True) for v in values)

    taus = [e.shift_cost(d) for d in (-1.0, -0.5, 0.5, 1.0) if d in e.tau_shifts]
    alphas = [e.alpha_cost(a) for a in (0.0, 0.5, 2.0) if a in e.alpha_scales]
    cells = [
        f"`{e.run}/{e.checkpoint}` (step {e.step})" if e.run else f"`{e.source}` {e.checkpoint}",
        e.gate,
        f"{e.trained_znorm} / {e.eval_znorm}",
        f"{num(e.loss, 4)}{'' if e.whole_split else ' (part of the split)'}",
        costs(taus),
        costs(alphas),
        num(e.mean("tau")),
        f"{100 * e.mean('frac_above_tau'):.1f}%",
        f"{100 * e.mean('normal_tail'):.1f}%",
    ]
    return "| " + " | ".join(cells) + " |"


def landscape_section(evaluations: list[Evaluation], found: list[Finding], figures: list[tuple[str, str]]) -> list[str]:
    """The checkpoints `ega landscape` evaluated: the tau mechanism and the tail identity."""
    lines = [
        f"## {TAU_SECTION}",
        "",
        "Read from `results/landscape/*.json`, written by `ega landscape` from checkpoints (which are not committed). "
        "Every loss is over the whole validation split unless the table says otherwise; costs are the loss "
        "minus the loss as trained, in nats/char.",
        "",
        *(f"- {sentence(f)}" for f in found if f.section == TAU_SECTION),
        "",
    ]
    if evaluations:
        lines += [LANDSCAPE_HEAD, *(_landscape_line(e) for e in evaluations), ""]
    for caption, file in figures:
        lines += [f"![{caption}]({file})", ""]
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


def scale_paragraph(scale: dict[str, Any] | None) -> list[str]:
    """Which sizes and devices the finished runs used, and which sizes none used, from the records."""
    if not scale:
        return []

    def params(values: list[int]) -> str:
        return "–".join(dict.fromkeys(f"{v / 1e6:.2g}M" for v in (min(values), max(values)))) if values else "?"

    def papers(values: list[int]) -> str:
        near = values and all(abs(v - paper.PARAMS) <= 0.1 * paper.PARAMS for v in values)
        return " — the paper's size" if near else ""

    ran = "; ".join(
        f"`{s['size']}` ({', '.join(s['model'])}, {params(s['params'])} parameters, "
        f"{'/'.join(f'{n:,}' for n in s['steps'])} steps, {s['runs']} runs{papers(s['params'])})"
        for s in scale["ran"]
    )
    never = "; ".join(
        f"`{s['size']}` ({s['model']}, {params([s['params']] if s['params'] else [])} parameters, "
        f"{s['steps']:,} steps{papers([s['params']] if s['params'] else [])})"
        for s in scale["not_run"]
    )
    gpu = any(d.startswith("GPU") for d in scale["devices"])
    devices = f"Devices: {', '.join(scale['devices'])}" + ("" if gpu else "; no run on a GPU") + "."
    text = f"Sizes run: {ran or 'none'}. " + (f"Never run: {never}. " if never else "") + devices
    return [text, ""]


def diagnostics_section(found: list[Finding]) -> list[str]:
    mine = [f for f in found if f.section == DIAGNOSTICS]
    if not mine:
        return []
    return [
        f"## {DIAGNOSTICS}",
        "",
        "Measurements that test no claim of the paper and that no verdict reads.",
        "",
        *(f"- {sentence(f)}" for f in mine),
        "",
    ]


def provenance_section(provenance: dict[str, Any] | None, runs: list[RunData]) -> list[str]:
    """Which code the records ran: what `scripts/provenance.py` established from git history, and where a
    configuration's fingerprint changed since the first record, the seeds that need a rerun."""
    lines = ["## Provenance", ""]
    done = [r for r in runs if r.status == "done"]
    if not provenance:
        return [
            *lines,
            "No `results/provenance.json`: run `python scripts/provenance.py` to establish which code the records ran.",
            "",
        ]
    commits = provenance["commits"]
    lines += [
        f"Each configuration's fingerprint (`ega_lightning.fingerprint`: 3 AdamW steps of its model, hashed) at "
        f"the {len(commits)} commits that touched the training path ({', '.join(provenance['training_path'])}) from "
        f"the code in effect when the first recorded run started ({provenance['start'][:16]}) to "
        f"{provenance['head'][:7]}, computed from git history by `scripts/provenance.py` (`results/provenance.json`). "
        "A record without a fingerprint ran today's code when its configuration's fingerprint is today's at its "
        "recorded commit, or at every commit it can have run (those before it finished). The fingerprint covers "
        "the model's forward and backward and AdamW, not the data pipeline.",
        "",
        "| configuration (spec entries) | today's fingerprint | changed since the first record | runs not "
        "established as today's code |",
        "|---|---|---|---|",
    ]
    reported = {r.run.run_name for r in done}
    for config in provenance["configurations"]:
        mine = [n for n in config["runs"] if n in reported]
        if not mine:
            continue
        changes = (
            "; ".join(
                f"at {c['commit'][:7]} ({c['date'][:16]}): {c['from'][:8]} → {c['to'][:8]}" for c in config["changes"]
            )
            or "no"
        )
        if config.get("buildable_from") not in (None, commits[0]["commit"]):  # no run can predate its configuration
            changes += f" (the configuration exists from {config['buildable_from'][:7]} on)"
        rerun = ", ".join(f"`{n}`" for n in config["rerun"] if n in reported) or "none"
        lines.append(
            f"| {', '.join(f'`{e}`' for e in config['entries'])} | {config['today'][:8]} | {changes} | {rerun} |"
        )
    changed = [c for c in provenance["configurations"] if c["changes"] and any(n in reported for n in c["runs"])]
    lines.append("")
    for c in changed:
        rerun = [n for n in c["rerun"] if n in reported]
        lines.append(
            f"- {', '.join(f'`{e}`' for e in c['entries'])}: the fingerprint changed in the range; "
            + (
                f"these runs need a rerun: {', '.join(f'`{n}`' for n in rerun)}."
                if rerun
                else "every run's code is still established as today's (each ran after the change)."
            )
        )
    unknown = [r.run.run_name for r in done if r.code["status"] != "today"]
    lines += [
        f"- {len(done) - len(unknown)} of {len(done)} finished runs ran today's code"
        + (f"; not established: {', '.join(f'`{n}`' for n in unknown)}." if unknown else "."),
        "",
    ]
    return lines


def markdown(
    tables: list[Table],
    runs: list[RunData],
    found: list[Finding],
    figures: dict[str, list[tuple[str, str]]],
    command: str,
    runs_dir: Path,
    evaluations: list[Evaluation] | None = None,
    landscape_figures: list[tuple[str, str]] | None = None,
    scale: dict[str, Any] | None = None,
    provenance: dict[str, Any] | None = None,
    board: tuple[Variant | None, list[Entry], list[tuple[str, str]]] | None = None,
) -> str:
    done = [r for r in runs if r.status == "done"]
    missing = [r for r in runs if r.status != "done"]
    specs = list(dict.fromkeys(str(r.run.spec) for r in runs))
    lines = [
        "# EGA experiment report",
        "",
        f"`{command}`, from {', '.join(f'`{s}`' for s in specs)}: **{len(done)} of {len(runs)} runs finished** "
        "(the others are listed at the end and are in no number). Every number is also in `results.json`.",
        "",
        *scale_paragraph(scale),
        "## Claims",
        "",
        *claims_table(found),
        "",
        "## Method",
        "",
        *method_note(found),
        "",
        *(leaderboard_section(board[:2], found, board[2]) if board else []),
    ]
    for group in dict.fromkeys(t.group for t in tables):
        lines += section(group, [t for t in tables if t.group == group], found, figures, runs_dir)
    if evaluations or any(f.section == TAU_SECTION for f in found):
        lines += landscape_section(evaluations or [], found, landscape_figures or [])
    lines += diagnostics_section(found)
    lines += provenance_section(provenance, runs)
    lines += ["## Runs", "", *(_runs_table(done) if done else ["No finished runs."]), ""]
    lines += ["## Missing and incomplete runs", ""]
    if missing:
        lines += ["| run | spec | group | variant | status | why |", "|---|---|---|---|---|---|"]
        lines += [
            f"| `{r.run.run_name}` | `{r.run.spec}` | {r.run.group} | `{r.run.variant}` | {r.status} | {r.reason} |"
            for r in missing
        ]
    else:
        lines.append("None: every run of the spec(s) is finished.")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- results.json


def jsonable(value: Any) -> Any:
    """Dataclasses to dicts, verdicts to their value, non-finite floats (a diverged run) to None."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, Verdict):
        return value.value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


def _finding_dict(f: Finding) -> dict[str, Any]:
    return {
        "kind": f.kind,
        "claim": f.claim,
        "section": f.section,
        "corpus": f.corpus,
        "regime": f.regime,
        "subject": f.subject,
        "against": f.against,
        "ours": f.ours,
        "paper": f.paper,
        "verdict": f.verdict,
        "family": f.family,
        "corrected": f.corrected,
        "seeds_needed": f.seeds_needed,
        "detail": f.detail,
    }


def _evaluation_dict(e: Evaluation) -> dict[str, Any]:
    return {
        "source": e.source,
        "run": e.run,
        "checkpoint": e.checkpoint,
        "step": e.step,
        "gate": e.gate,
        "trained_znorm": e.trained_znorm,
        "eval_znorm": e.eval_znorm,
        "whole_split": e.whole_split,
        "loss": e.loss,
        "tau_shift_cost": e.tau_shift_costs,  # results() writes the keys as strings (jsonable)
        "alpha_scale_cost": e.alpha_scale_costs,
        "tau_mean": e.mean("tau"),
        "frac_above_tau": e.mean("frac_above_tau"),
        "normal_tail": e.mean("normal_tail"),
    }


def results(
    tables: list[Table],
    runs: list[RunData],
    found: list[Finding],
    command: str,
    evaluations: list[Evaluation] | None = None,
    scale: dict[str, Any] | None = None,
    board: Board | None = None,
) -> dict[str, Any]:
    def variant_dict(row: Row) -> dict[str, Any]:
        v = row.variant
        return {
            "variant": v.label,
            "gate": v.gate,
            "output_gate": (v.done or v.runs)[0].output_gate,
            "paper_name": v.paper_name,
            "gate_options": v.hp("gate_options"),
            "tau_init": v.hp("tau_init"),
            "runs": [r.run.run_name for r in v.runs],
            "seeds_done": sorted(r.run.seed for r in v.done),
            "seeds_not_done": sorted(r.run.seed for r in v.runs if r.status != "done"),
            "n_params": v.n_params,
            "baseline": {"group": row.baseline.group, "variant": row.baseline.label} if row.baseline else None,
            "overhead_pct": row.overhead_pct,
            **{m: v.summary(m) for m in METRICS},
            **{f"diff_{m}": d for m, d in row.diffs.items()},
        }

    return jsonable(
        {
            "command": command,
            "paper": paper.as_dict(),
            "conventions": {
                "diff": "baseline - variant (positive: variant better)",
                "interval": "95% Student-t: paired over the seeds both sides ran, Welch where they share none; "
                "n=1: none",
                "std": "sample standard deviation over seeds (ddof=1)",
                "equivalence_margin": MARGIN,
                "rules": RULES,
                "families": FAMILIES,
            },
            "sizes": scale,
            "claims": [
                {"claim": c.key, "verdict": f.verdict if f else None, "section": f.section if f else None}
                for c, f in claims(found)
            ],
            "findings": [_finding_dict(f) for f in found],
            "leaderboard": leaderboard_dict(board) if board else None,
            "landscape": [_evaluation_dict(e) for e in evaluations or []],
            "groups": [
                {"group": t.group, "corpus": t.corpus, "variants": [variant_dict(row) for row in t.rows]}
                for t in tables
            ],
            "runs": [
                {
                    "run_name": r.run.run_name,
                    "spec": str(r.run.spec),
                    "group": r.run.group,
                    "variant": r.run.variant,
                    "seed": r.run.seed,
                    "corpus": r.corpus,
                    "gate": r.gate,
                    "output_gate": r.output_gate,
                    "status": r.status,
                    "reason": r.reason,
                    "source": r.source,
                    "machine": r.machine,
                    "code": r.code,
                    **r.metrics,
                }
                for r in runs
            ],
        }
    )
