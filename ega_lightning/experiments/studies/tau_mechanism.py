"""The tau landscape (the study named ``landscape``, its key of results.json), read from the checkpoints `ega
landscape` evaluated and from the gate summaries the runs recorded: the tail identity (the protocol's family `tail`,
read by `engine`), why tau does not move (weak gradient or co-adaptation: an exploratory `engine.Compared` of kind
`tau_mechanism`), and the table and figures of the evaluated checkpoints."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

from ega_lightning.experiments import engine, plots
from ega_lightning.experiments.comparisons import Variant
from ega_lightning.experiments.findings import Finding, Where, correct, scale
from ega_lightning.experiments.landscape_results import Evaluation
from ega_lightning.experiments.rules import TAU_STEP, Verdict, margin_of, registered
from ega_lightning.experiments.study import Drawn, Figure, ReportInputs, Study
from ega_lightning.experiments.text import num

TAU_SECTION = "tau landscape"
DESCRIPTION = (
    "Read from `results/landscape/*.json`, written by `ega landscape` from checkpoints (which are not committed). "
    "Every loss is over the whole validation split unless the table says otherwise; costs are the loss "
    "minus the loss as trained, in nats/char."
)
# the tau mechanism is read on EGA-1 and shown beside one wavelet gate (the report's figures use the same pair)
MECHANISM_GATES = ("linear", "db2")
OTHER_RECIPES = ("author",)  # spec groups trained under another recipe than ours (the author's, issue 50)


def grad_norm_ratio(variants: list[Variant]) -> tuple[float | None, list[str]]:
    """Median over the logged steps of EGA-1 runs trained as in the paper under our recipe (learned positions, tau
    learned, z over the causal prefix; not the author's recipe's runs, nor the RoPE study's): |grad tau| / |grad
    energy projection|, and the runs it reads (those that logged both norms)."""
    ratios, read = [], []
    ega1 = [v for v in variants if v.gate == "linear" and v.as_in_paper and v.group not in OTHER_RECIPES]
    for r in {r.run.run_name: r for v in ega1 for r in v.done}.values():
        tau = dict(r.scalars.get("gate/grad_norm/tau", []))
        energy = dict(r.scalars.get("gate/grad_norm/energy", []))
        own = [tau[s] / energy[s] for s in tau if energy.get(s)]
        ratios += own
        read += [r.run.run_name] if own else []
    return (statistics.median(ratios) if ratios else None), sorted(read)


def mechanism_finding(
    found: list[Finding], evaluations: Sequence[Evaluation], variants: list[Variant]
) -> list[Finding]:
    """Which of the two explanations of a tau that does not move the data support (rules.PROSE['mechanism']),
    from EGA-1's final checkpoints trained and evaluated causally and the frozen-tau verdicts in ``found``; beside
    it each checkpoint of `MECHANISM_GATES` so evaluated, with its loss change by tau shift and alpha scale."""
    frozen = [f for f in found if f.kind == "frozen_tau"]
    shown = [
        e
        for e in evaluations
        if e.gate in MECHANISM_GATES and e.as_trained and e.trained_znorm == "prefix" and TAU_STEP in e.tau_shifts
    ]
    ega1 = [e for e in shown if e.gate == "linear" and e.final and e.gate_options.get("learn_tau", True)]
    if not frozen and not ega1:
        return []
    flat = margin_of("flat")
    minimum = [e.shift_cost(-TAU_STEP) > flat and e.shift_cost(TAU_STEP) > flat for e in ega1]
    _, mechanism_rule = registered("tau_mechanism", "tau")
    verdict = mechanism_rule([f.verdict for f in frozen], minimum)
    frozen_runs = [r for v in variants if not v.options.get("learn_tau", True) for r in v.done]
    # undecided for want of a frozen-tau verdict: the seeds that the slowest of them needs
    needed = [f.seeds_needed for f in frozen if f.verdict is Verdict.TOO_FEW_SEEDS]
    known = [n for n in needed if n is not None]
    seeds = max(known) if verdict is Verdict.TOO_FEW_SEEDS and known and len(known) == len(needed) else None
    # the verdict those seeds would most likely reach: the same rule on the frozen-tau verdicts each would most
    # likely reach at them (each projection's own), the landscape's reading as it is
    likely_frozen = [f.seeds_verdict if f.verdict is Verdict.TOO_FEW_SEEDS else f.verdict for f in frozen]
    likely = (
        mechanism_rule(likely_frozen, minimum)
        if seeds is not None and all(v is not None for v in likely_frozen)
        else None
    )
    regime = f"EGA-1 final checkpoints ({len(ega1)}) and frozen-tau runs, at {scale(frozen_runs)}"
    ratio, ratio_runs = grad_norm_ratio(variants)
    checkpoints = [
        {"label": e.label, "gate": e.gate, "step": e.step, "final": e.final}
        | {"tau_shift_cost": e.tau_shift_costs, "alpha_scale_cost": e.alpha_scale_costs}
        for e in shown
    ]
    details: dict[str, Any] = {"checkpoints": checkpoints, "frozen": [(f.subject, f.verdict) for f in frozen]}
    details |= {"grad_norm_ratio": ratio, "grad_norm_runs": ratio_runs}
    where = Where(TAU_SECTION, ega1[0].corpus if ega1 else frozen[0].corpus, regime, "EGA-1", None)
    claim, figure = engine.PAPER["tau_mechanism"](where.corpus)
    found_so = {"paper": figure, "verdict": verdict, "claim": claim, "seeds_needed": seeds, "seeds_verdict": likely}
    return [engine.Compared(kind="tau_mechanism", **where._asdict(), **found_so, details=details)]


# ----------------------------------------------------------------------------- the table of checkpoints

TABLE_HEAD = (
    "| checkpoint | gate | z trained / evaluated | val loss | tau −1 / −0.5 / +0.5 / +1 | alpha ×0 / ×0.5 / ×2 "
    "| mean tau | above tau | 1 − Φ(tau) |\n|---|---|---|---|---|---|---|---|---|"
)


def table_line(e: Evaluation) -> str:
    """One evaluated checkpoint as a row of the landscape table."""

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


# ----------------------------------------------------------------------------- its section, figures and JSON


def landscape_section(inputs: ReportInputs, data: None, found: Sequence[Finding], drawn: Drawn) -> list[str]:
    """The checkpoints `ega landscape` evaluated: the tau mechanism and the tail identity (none: no section)."""
    if not inputs.evaluations and not any(f.section == TAU_SECTION for f in found):
        return []
    lines = [
        f"## {TAU_SECTION}",
        "",
        DESCRIPTION,
        "",
        *(f"- {engine.sentence(f)}" for f in found if f.section == TAU_SECTION),
        "",
    ]
    if inputs.evaluations:
        lines += [TABLE_HEAD, *(table_line(e) for e in inputs.evaluations), ""]
    for caption, file in drawn:
        lines += [f"![{caption}]({file})", ""]
    return lines


def landscape_figures(inputs: ReportInputs, data: None) -> list[Figure]:
    """(caption, file name, figure): the tau/alpha landscape of every checkpoint of MECHANISM_GATES trained
    and evaluated with the causal prefix z, and the z distributions of their final checkpoints as
    trained, one line per gate and z-normalisation."""
    out = []
    # the study's pair (EGA-1 and one wavelet gate) when evaluated; the table beside lists every checkpoint
    shown_gates = {e.gate for e in inputs.evaluations} & set(MECHANISM_GATES) or {e.gate for e in inputs.evaluations}
    evaluations = [e for e in inputs.evaluations if e.gate in shown_gates]
    causal = [e for e in evaluations if e.as_trained and e.trained_znorm == "prefix"]
    if causal:
        lines = [
            (
                e.label,
                e.tau_shifts,
                list(e.tau_shift_costs.values()),
                e.alpha_scales,
                list(e.alpha_scale_costs.values()),
            )
            for e in causal
        ]
        fig = plots.landscape_figure(lines, "validation loss around the trained tau and alpha")
        out.append(("tau and alpha landscape", "landscape-tau-alpha.png", fig))
    shown: dict[tuple[str, str], Evaluation] = {}
    for e in evaluations:
        if e.final and e.as_trained:
            shown.setdefault((e.gate, e.trained_znorm), e)
    if shown:
        series = [(f"{e.gate}, z over the {e.trained_znorm} ({e.run})", *e.z_density()) for e in shown.values()]
        out.append(("z distributions", "landscape-z.png", plots.z_figure(series, "z of every key, all heads")))
    return out


def evaluation_dict(e: Evaluation) -> dict[str, Any]:
    """An evaluated checkpoint as results.json holds it (the keys of its costs as strings: `results_json.jsonable`)."""
    keys = ("source", "run", "checkpoint", "step", "gate", "trained_znorm", "eval_znorm", "whole_split", "loss")
    costs = {"tau_shift_cost": e.tau_shift_costs, "alpha_scale_cost": e.alpha_scale_costs}
    means = {
        "tau_mean": e.mean("tau"),
        "frac_above_tau": e.mean("frac_above_tau"),
        "normal_tail": e.mean("normal_tail"),
    }
    return {k: getattr(e, k) for k in keys} | costs | means


def _findings(inputs: ReportInputs, data: None, found: Sequence[Finding]) -> list[Finding]:
    """The tail identity (the protocol's family `tail`, in this section), then the tau mechanism, which reads the
    frozen-tau verdicts (a table's, before it) corrected for their family."""
    tails = [dataclasses.replace(f, section=TAU_SECTION) for f in engine.family_findings(inputs, "tail")]
    return tails + mechanism_finding(correct(list(found)), inputs.evaluations, list(inputs.variants))


STUDY = Study(
    "landscape",
    families=("tail",),
    findings=_findings,
    section=landscape_section,
    figures=landscape_figures,
    json=lambda inputs, data: [evaluation_dict(e) for e in inputs.evaluations],
)
