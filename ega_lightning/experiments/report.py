"""`ega report SPEC.yaml [SPEC2.yaml ...]`: tables, findings and figures from the finished runs of sweeps.

Reads each finished run's TensorBoard event files (tensorboard's own reader; nothing is dropped),
``config.yaml``, ``hparams.yaml`` and ``gate_summary.json``, and writes ``<out>/REPORT.md``,
``<out>/results.json`` (every number, per run and per variant) and PNG figures. A run finished
here also gets its record refreshed in ``<records dir>`` (default ``<out>/runs``); a run with no
finished directory is read from its record (see `ega_lightning.experiments.records`), so the
report regenerates from a fresh clone.

Only finished runs count (``DONE`` or a record; see `ega sweep`); the others are listed as
missing or incomplete and are in no mean. A variant is compared with the baseline (gate ``none``)
of the same corpus, model, data and step budget, found in its own group first, else in another
group of the report.
Differences are baseline minus variant, so positive means the variant has the lower loss (like
the paper's "+0.103"); their 95% intervals are paired Student-t over seeds when both sides ran
the same seeds (same seed: identical shared initial weights and batches), else Welch.
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import json
import math
import re
import shlex
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ega_lightning.experiments.records import (
    FROM_EVENT_FILES,
    RecordError,
    load_record,
    machine,
    read_done,
    read_scalars,
    read_yaml,
    record_path,
    record_run,
)
from ega_lightning.experiments.stats import Difference, Summary, compare, summarize
from ega_lightning.experiments.sweep import DONE_FILE, Run, SpecError, Sweep, load_spec

# EGA_SPEC.md section 4: what the paper reports
PAPER = {
    "improvement": {"tinyshakespeare": 0.103, "ptb": 0.101},  # baseline - EGA-1, final val loss
    "gap": {"linear": 0.289, "none": 0.331},
    "tau": 0.35,
    "frac_above_tau": 0.36,
}
OVERFIT_GAP = 0.3  # the long regime must push the baseline's gap past this (issue 7; paper 0.331)
ABLATION_GATES = ("multiscale", "db2", "db4", "morlet", "morlet_param")
# the paper's ablation ranking as checkable statements: (row, claim, the row it is measured against)
PAPER_CLAIMS = {
    "EGA-2": ("worse than EGA-1", "linear"),
    "EGA-4": ("worse than EGA-1", "linear"),
    "EGA-DB2": ("about baseline", "none"),
    "EGA-DB4": ("about baseline", "none"),
    "EGA-M-F": ("about baseline", "none"),
    "EGA-M-P": ("below EGA-1", "linear"),
}
# Runs are comparable when these agree; the gate and its own options are what a variant changes.
REGIME_KEYS = (
    "corpus",
    "n_layer",
    "n_head",
    "n_embd",
    "block_size",
    "dropout",
    "bias",
    "lr",
    "min_lr",
    "warmup_steps",
    "weight_decay",
    "betas",
    "batch_size",
    "max_eval_windows",
)
# what run_metrics gives for one run; a record with final numbers only holds these
RUN_METRICS = (
    "final_val_loss",
    "best_val_loss",
    "final_val_bpc",
    "final_train_eval_loss",
    "final_gap",
    "final_tau_mean",
    "final_frac_above_tau",
    "final_mean_gate",
    "tokens_per_sec",
    "last_val_step",
    "tau_converged",
    "tau_converged_step",
)
METRICS = ("final_val_loss", "best_val_loss", "final_gap", "final_tau_mean", "final_frac_above_tau", "tokens_per_sec")


def paper_name(gate: str, options: dict[str, Any] | None) -> str | None:
    """The paper's name of a gate configuration, None where the paper has no such row."""
    if gate == "multiscale":
        return f"EGA-{(options or {}).get('scales', '?')}"
    names = {"none": "baseline", "linear": "EGA-1", "db2": "EGA-DB2", "db4": "EGA-DB4"}
    return {**names, "morlet": "EGA-M-F", "morlet_param": "EGA-M-P"}.get(gate)


# ----------------------------------------------------------------------------- reading runs

_UNSET = object()


def _dig(data: Any, dotted: str, default: Any = None) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return default
        data = data[part]
    return data


def resolve_static(run: Run, dotted: str) -> Any:
    """What `ega fit` would get for ``dotted`` from the run's config files and ``--key=value`` args.

    Only for runs that never wrote their config.yaml (listing a missing run under its corpus).
    """
    value: Any = None
    for config in run.configs:
        try:
            found = _dig(yaml.safe_load(Path(config).read_text()), dotted, _UNSET)
        except (OSError, yaml.YAMLError):
            continue
        value = value if found is _UNSET else found
    flag = f"--{dotted}"
    for i, arg in enumerate(run.args):
        if arg.startswith(flag + "="):
            value = yaml.safe_load(arg.split("=", 1)[1])
        elif arg == flag and i + 1 < len(run.args):
            value = yaml.safe_load(run.args[i + 1])
    return value


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def run_metrics(scalars: dict[str, list[tuple[int, float]]], summary: dict[str, Any] | None) -> dict[str, Any]:
    def last(tag: str, summary_key: str | None = None) -> float | None:
        if scalars.get(tag):
            return scalars[tag][-1][1]
        return _dig(summary, f"final.{summary_key}") if summary_key else None

    val = [v for _, v in scalars["val/loss"]]
    speed = [v for _, v in scalars.get("train/tokens_per_sec", [])]
    return {
        "final_val_loss": val[-1],
        "best_val_loss": min(val),
        "final_val_bpc": last("val/bpc"),
        "final_train_eval_loss": last("train_eval/loss"),
        "final_gap": last("gap"),
        "final_tau_mean": last("gate/tau_mean", "tau_mean"),
        "final_frac_above_tau": last("gate/frac_above_tau", "frac_above_tau"),
        "final_mean_gate": last("gate/mean_gate", "mean_gate"),
        "tokens_per_sec": statistics.median(speed) if speed else None,
        "last_val_step": scalars["val/loss"][-1][0],
        "tau_converged": _dig(summary, "converged"),
        "tau_converged_step": _dig(summary, "converged_step"),
    }


@dataclass
class RunData:
    run: Run
    run_dir: Path
    status: str  # done | incomplete | missing
    reason: str
    corpus: str
    gate: str
    hparams: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None
    scalars: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # where a finished run's numbers come from: its event files or its record
    machine: str | None = None  # where it ran; None: not known (a backfilled record)


def _from_record(data: RunData, record: dict[str, Any], path: Path) -> RunData:
    data.corpus, data.gate = str(record.get("corpus") or data.corpus), str(record.get("gate") or data.gate)
    data.hparams, data.max_steps = record.get("hparams") or {}, record.get("max_steps")
    series = record.get("scalars") or {}
    data.scalars = {tag: [(int(step), float(value)) for step, value in points] for tag, points in series.items()}
    if data.scalars.get("val/loss"):
        data.metrics = run_metrics(data.scalars, record.get("gate_summary"))
    elif isinstance(record.get("metrics"), dict) and record["metrics"].get("final_val_loss") is not None:
        data.metrics = {key: record["metrics"].get(key) for key in RUN_METRICS}  # final numbers only: no curves
    else:
        data.status, data.reason = "incomplete", f"its record {path} holds no val/loss: delete it to rerun the run"
        return data
    data.source = "record" if record.get("source") == FROM_EVENT_FILES else "record (final numbers only)"
    data.machine = record.get("machine")
    return data


def load_run(run: Run, runs_dir: Path, records_dir: Path) -> RunData:
    """A finished run directory first (its event files), else the run's record, else missing/incomplete."""
    run_dir = runs_dir / run.run_name
    config, hparams = read_yaml(run_dir / "config.yaml"), read_yaml(run_dir / "hparams.yaml")
    corpus = _dig(config, "data.corpus") or resolve_static(run, "data.corpus") or "?"
    gate = hparams.get("gate") or _dig(config, "model.gate") or resolve_static(run, "model.gate") or "?"
    data = RunData(run, run_dir, "done", "", str(corpus), str(gate), hparams, _dig(config, "trainer.max_steps"))
    problem = None  # why a finished run directory does not count; its record may still
    if (run_dir / DONE_FILE).is_file():
        try:
            done = read_done(run, run_dir)
            data.scalars = read_scalars(run_dir)
        except RecordError as err:
            problem = str(err)
        else:
            if data.scalars.get("val/loss"):
                summary_path = run_dir / "gate_summary.json"
                summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
                data.metrics, data.source = run_metrics(data.scalars, summary), FROM_EVENT_FILES
                data.machine = done.get("machine") or machine()  # an older DONE: the run directory is where it ran
                return data
            problem = "DONE, but no val/loss in its event files"
    try:
        record = load_record(run, records_dir)
    except RecordError as err:
        data.status, data.reason = "incomplete", f"unusable record: {err}"
        return data
    if record is not None:
        return _from_record(data, record, record_path(records_dir, run.run_name))
    if problem is not None:
        data.status, data.reason = "incomplete", problem
        return data
    if not run_dir.is_dir():
        data.status, data.reason = "missing", f"never started: no run directory, no record in {records_dir}"
    else:
        resumable = (run_dir / "checkpoints" / "last.ckpt").is_file()
        data.status = "incomplete"
        data.reason = "no DONE; " + (
            "has checkpoints/last.ckpt: interrupted or failed, `ega sweep` resumes it"
            if resumable
            else "no checkpoint: failed early, still running, or never got to an evaluation"
        )
    return data


_PARAM_COUNTS: dict[str, int | None] = {}


def count_parameters(hparams: dict[str, Any]) -> int | None:
    """Trainable parameters of ``CharLM(**hparams)`` (tied weights counted once); None without a vocab."""
    if "vocab" not in hparams:
        return None
    key = json.dumps(hparams, sort_keys=True, default=str)
    if key not in _PARAM_COUNTS:
        from ega_lightning.module import CharLM

        accepted = set(inspect.signature(CharLM.__init__).parameters) - {"self"}
        model = CharLM(**{k: v for k, v in hparams.items() if k in accepted})  # hparams.yaml holds data keys too
        _PARAM_COUNTS[key] = sum(p.numel() for p in model.parameters())
    return _PARAM_COUNTS[key]


# ----------------------------------------------------------------------------- variants and comparisons


@dataclass
class Variant:
    """The seeds of one labelled configuration, in one group, on one corpus."""

    group: str
    corpus: str
    label: str
    runs: list[RunData]

    @property
    def done(self) -> list[RunData]:
        return [r for r in self.runs if r.status == "done"]

    @property
    def gate(self) -> str:
        return (self.done or self.runs)[0].gate

    def hp(self, key: str) -> Any:
        return self.done[0].hparams.get(key) if self.done else None

    @property
    def regime(self) -> str | None:
        if not self.done:
            return None
        ref = self.done[0]
        return json.dumps({**{k: ref.hparams.get(k) for k in REGIME_KEYS}, "max_steps": ref.max_steps}, sort_keys=True)

    @property
    def paper_name(self) -> str | None:
        # a variant with no finished run still has its configs: its name must not wait for a run
        options = self.hp("gate_options") if self.done else resolve_static(self.runs[0].run, "model.gate_options")
        return paper_name(self.gate, options)

    @property
    def name(self) -> str:
        """e.g. ``EGA-1 `ts-linear` `` for the prose."""
        return f"{self.paper_name or self.gate} `{self.label}`"

    @property
    def machines(self) -> frozenset[str | None]:
        return frozenset(r.machine for r in self.done)

    def same_machine(self, other: Variant) -> bool:
        """Whether every run of both ran on one known machine: only then do their tokens/s compare."""
        return len(self.machines | other.machines) == 1 and None not in self.machines

    def by_seed(self, metric: str) -> dict[int, float]:
        return {r.run.seed: r.metrics[metric] for r in self.done if _finite(r.metrics.get(metric)) is not None}

    def summary(self, metric: str) -> Summary:
        return summarize(list(self.by_seed(metric).values()))


def build_variants(runs: list[RunData]) -> list[Variant]:
    # a run that never wrote its config (and whose config files are gone) takes the corpus of its
    # spec entry's other seeds: one entry is one set of configs
    entry_corpus = {(r.run.spec, r.run.entry): r.corpus for r in runs if r.corpus != "?"}
    for r in runs:
        r.corpus = entry_corpus.get((r.run.spec, r.run.entry), r.corpus)
    variants: dict[tuple[str, str, str], Variant] = {}
    for r in runs:
        for group in r.run.groups:
            key = (group, r.corpus, r.run.variant)
            variant = variants.setdefault(key, Variant(*key, []))
            clash = [o.run.run_name for o in variant.runs if o.run.seed == r.run.seed]
            if clash:
                raise SpecError(
                    f"variant '{key[2]}' (group '{key[0]}', corpus {key[1]}) has two runs with seed {r.run.seed}: "
                    f"{clash[0]} and {r.run.run_name}; give their spec entries distinct `variant:` labels."
                )
            variant.runs.append(r)
    return list(variants.values())


def find_reference(variant: Variant, gate: str, variants: list[Variant]) -> Variant | None:
    """The finished variant with ``gate`` comparable to ``variant``: its own group first, then the
    same gate initialisation, then spec order."""
    if variant.regime is None:
        return None
    candidates = [v for v in variants if v is not variant and v.gate == gate and v.done and v.regime == variant.regime]
    candidates.sort(key=lambda v: (v.group != variant.group, v.hp("tau_init") != variant.hp("tau_init")))
    return candidates[0] if candidates else None


def difference(reference: Variant | None, variant: Variant, metric: str) -> Difference | None:
    """reference - variant over seeds; None when either side has no value."""
    if reference is None:
        return None
    ref, own = reference.by_seed(metric), variant.by_seed(metric)
    return compare(ref, own) if ref and own else None


@dataclass
class Row:
    variant: Variant
    baseline: Variant | None
    n_params: int | None
    diffs: dict[str, Difference | None]

    @property
    def overhead_pct(self) -> float | None:
        base = count_parameters(self.baseline.done[0].hparams) if self.baseline else None
        if self.n_params is None or not base:
            return None
        return 100.0 * (self.n_params - base) / base


def make_row(variant: Variant, variants: list[Variant]) -> Row:
    baseline = find_reference(variant, "none", variants) if variant.gate != "none" else None
    diffs = {m: difference(baseline, variant, m) for m in ("final_val_loss", "best_val_loss", "final_gap")}
    n_params = count_parameters(variant.done[0].hparams) if variant.done else None
    return Row(variant, baseline, n_params, diffs)


@dataclass
class Table:
    group: str
    corpus: str
    rows: list[Row]

    @property
    def title(self) -> str:
        return f"{self.group} / {self.corpus}"


def build_tables(variants: list[Variant]) -> list[Table]:
    tables: dict[tuple[str, str], Table] = {}
    for v in variants:
        tables.setdefault((v.group, v.corpus), Table(v.group, v.corpus, [])).rows.append(make_row(v, variants))
    return list(tables.values())


# ----------------------------------------------------------------------------- formatting


def _num(x: float | None, digits: int = 3, signed: bool = False) -> str:
    if x is None:
        return "—"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def fmt_summary(s: Summary, digits: int = 3, scale: float = 1.0) -> str:
    if s.mean is None:
        return "—"
    mean = _num(s.mean * scale, digits)
    return mean if s.std is None else f"{mean} ± {_num(s.std * scale, digits)}"


def fmt_diff(d: Difference | None) -> str:
    if d is None:
        return "—"
    if d.low is None or d.high is None:
        return f"{_num(d.estimate, signed=True)} (n=1, no interval)"
    return f"{_num(d.estimate, signed=True)} [{_num(d.low, signed=True)}, {_num(d.high, signed=True)}]"


def describe_interval(d: Difference) -> str:
    if d.low is None or d.high is None:
        return "n=1, no interval"
    how = f"paired t over {d.n} seeds" if d.method == "paired" else f"Welch t, df {d.df:.1f}"
    return f"95% CI [{_num(d.low, signed=True)}, {_num(d.high, signed=True)}], {how}"


def _verdict(d: Difference) -> str:
    if d.excludes_zero is None:
        return "a single seed cannot separate it from noise"
    return "the interval excludes 0" if d.excludes_zero else "the interval includes 0"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


# ----------------------------------------------------------------------------- findings


def _ega1_findings(table: Table, said: set[tuple[str, ...]]) -> list[str]:
    """EGA-1 against its baseline; ``said`` holds the comparisons (their run names) already made:
    groups share runs (`also_in`), and each comparison is said once."""
    out = []
    for row in table.rows:
        v, base = row.variant, row.baseline
        if v.gate != "linear" or not v.done:
            continue
        compared_runs = [*v.done, *(base.done if base else [])]
        compared = tuple(sorted(r.run.run_name for r in compared_runs))
        if compared in said:
            continue
        said.add(compared)
        where = f"[{table.title}]"
        d = row.diffs["final_val_loss"]
        if base is None or d is None:
            out.append(f"{where} {v.name}: no finished baseline (gate none) with the same model, data and steps.")
            continue
        paper = PAPER["improvement"].get(table.corpus)
        paper_text = ""
        if paper is not None:  # the paper gives a figure for its two corpora only
            paper_text = (
                f" Paper: {paper:+.3f}; this is {100 * d.estimate / paper:.0f}% of it; {_paper_verdict(d, paper)}."
            )
        out.append(
            f"{where} {v.name} {_beats(d)} the baseline `{base.label}`: "
            f"final val loss {_num(v.summary('final_val_loss').mean)} vs {_num(base.summary('final_val_loss').mean)}, "
            f"difference {_num(d.estimate, signed=True)} ({describe_interval(d)}); {_verdict(d)}." + paper_text
        )
        best = row.diffs["best_val_loss"]
        if best is not None and any(r.metrics["best_val_loss"] < r.metrics["final_val_loss"] for r in compared_runs):
            # past its best the final loss measures overfitting as well: the best is said beside it
            out.append(
                f"{where} best val loss (each run's lowest; the val loss rose after it in some runs): "
                f"EGA-1 {fmt_summary(v.summary('best_val_loss'))} vs "
                f"baseline {fmt_summary(base.summary('best_val_loss'))}, "
                f"difference {_num(best.estimate, signed=True)} ({describe_interval(best)}); {_verdict(best)}."
            )
        gap = row.diffs["final_gap"]
        if gap is not None:
            if gap.excludes_zero is None:
                smaller = "one seed, no verdict"
            elif gap.excludes_zero:
                smaller = "smaller" if gap.estimate > 0 else "larger"
            else:
                smaller = "not measurably different"
            smaller += "; baseline minus EGA-1"
            out.append(
                f"{where} generalization gap (val − train loss): EGA-1 {fmt_summary(v.summary('final_gap'))} vs "
                f"baseline {fmt_summary(base.summary('final_gap'))}: {smaller} "
                f"{_num(gap.estimate, signed=True)} ({describe_interval(gap)}). "
                f"Paper: {PAPER['gap']['linear']} vs {PAPER['gap']['none']}; "
                + _regime_text(base.summary("final_gap").mean)
            )
        tau, above = v.summary("final_tau_mean"), v.summary("final_frac_above_tau")
        if tau.mean is not None:
            tracked = [r.metrics["tau_converged"] for r in v.done if r.metrics.get("tau_converged") is not None]
            settled = f"; TauTracker saw it settle in {sum(tracked)} of {len(tracked)} seeds" if tracked else ""
            out.append(
                f"{where} tau of {v.name} ends at {fmt_summary(tau)} (paper ≈ {PAPER['tau']}), with "
                f"{fmt_summary(above, 1, 100)}% of validation keys above it "
                f"(paper {100 * PAPER['frac_above_tau']:.0f}%){settled}."
            )
        speed, base_speed = v.summary("tokens_per_sec").mean, base.summary("tokens_per_sec").mean
        if speed and base_speed and v.same_machine(base):  # else the table marks the speed with †
            out.append(
                f"{where} training throughput: EGA-1 {speed:,.0f} tokens/s vs baseline {base_speed:,.0f} "
                f"({100 * (speed / base_speed - 1):+.1f}%; median per run, mean over seeds; "
                "runs are timed on whatever else the machine was doing, `ega bench` times the step side by side). "
                "Paper: no measurable cost."
            )
    return out


def _beats(d: Difference) -> str:
    if d.excludes_zero is None:  # one seed: the sign is all there is
        return "is ahead of" if d.estimate > 0 else "is behind"
    if d.excludes_zero:
        return "beats" if d.estimate > 0 else "is worse than"
    return "does not measurably beat"


def _paper_verdict(d: Difference, paper: float) -> str:
    if d.low is None or d.high is None:
        return "one seed cannot test the paper's figure"
    if d.low <= paper <= d.high:
        if d.low <= 0.0 <= d.high:  # then the seeds could tell neither claim from no effect at all
            return "the interval holds both 0 and the paper's figure: too few seeds to tell them apart"
        return "the paper's figure lies inside the interval: consistent with it"
    side = "above" if paper > d.high else "below"
    return f"the paper's figure lies {side} the interval: **not reproduced**"


def _regime_text(baseline_gap: float | None) -> str:
    """Whether the baseline overfits as much as the paper's did: its +0.103 came with a 0.331 gap."""
    if baseline_gap is None:
        return "no baseline gap was logged."
    if baseline_gap >= OVERFIT_GAP:
        return f"the baseline's mean gap passes {OVERFIT_GAP}: the paper's overfitting regime."
    return f"the baseline's mean gap stays below {OVERFIT_GAP}: not the paper's overfitting regime."


def _context_findings(table: Table) -> list[str]:
    """EGA-1's difference to the baseline at each block size: the paper's hypothesis is that it grows.

    Measured on the seeds every block size ran: a 3-seed mean set beside single seeds would put
    seed noise into the trend.
    """
    rows = [r for r in table.rows if r.variant.gate == "linear" and r.diffs["final_val_loss"] is not None]
    blocks = {r.variant.hp("block_size") for r in rows}
    if len(blocks) < 2 or len(blocks) < len(rows):  # a context study: one EGA-1 per block size
        return []
    where = f"[{table.title}]"
    metric = "final_val_loss"
    seeds = set.intersection(*(set(r.variant.by_seed(metric)) & set(r.baseline.by_seed(metric)) for r in rows))
    if not seeds:
        return [f"{where} EGA-1 by block size: no seed ran at every block size, so no like-for-like comparison."]

    def on_common_seeds(variant: Variant) -> dict[int, float]:
        return {seed: value for seed, value in variant.by_seed(metric).items() if seed in seeds}

    diffs = sorted(
        ((r.variant.hp("block_size"), compare(on_common_seeds(r.baseline), on_common_seeds(r.variant))) for r in rows),
        key=lambda pair: pair[0],
    )
    parts = [f"T{block} {_num(d.estimate, signed=True)} ({describe_interval(d)})" for block, d in diffs]
    grows = all(a.estimate < b.estimate for (_, a), (_, b) in itertools.pairwise(diffs))
    return [
        f"{where} EGA-1 minus baseline by block size (final val loss, positive: EGA-1 better; "
        f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, sorted(seeds)))}, which every block size ran): "
        f"{'; '.join(parts)}. Paper's open hypothesis, an advantage that grows with context: here it "
        f"{'grows with every longer block' if grows else 'does not grow steadily with the block'}."
    ]


def _ablation_findings(table: Table, variants: list[Variant]) -> list[str]:
    done = [r.variant for r in table.rows if r.variant.done]
    if not any(v.gate in ABLATION_GATES for v in done):
        return []
    where = f"[{table.title}]"
    # the baseline and EGA-1 the ablation is measured against may live in another group (e.g. main)
    refs = [find_reference(v, gate, variants) for v in done for gate in ("none", "linear") if v.gate != gate]
    pool = list({id(v): v for v in [*done, *(r for r in refs if r is not None)]}.values())
    mean = {id(v): v.summary("final_val_loss").mean for v in pool}
    ranked = sorted(pool, key=lambda v: mean[id(v)] if mean[id(v)] is not None else math.inf)
    out = [
        f"{where} ranking by final val loss (lowest first): "
        + ", ".join(
            f"{v.name}{'' if v.group == table.group else f' (group {v.group})'} {_num(mean[id(v)])}" for v in ranked
        )
        + "."
    ]
    in_paper = [v for v in ranked if v.paper_name]
    ega1 = next((v for v in in_paper if v.gate == "linear"), None)
    if ega1 is not None:
        rank = in_paper.index(ega1) + 1
        holds = "holds" if rank == 1 else "does not hold"
        out.append(f"{where} paper: EGA-1 best of its ablation — {holds} here (rank {rank} of {len(in_paper)}).")
    for v in ranked:
        claim = PAPER_CLAIMS.get(v.paper_name or "")
        if claim is None:
            continue
        text, against = claim
        ref = find_reference(v, against, variants)
        d = difference(ref, v, "final_val_loss")
        if ref is None or d is None:
            out.append(f"{where} paper: {v.paper_name} {text} — no finished {against} run to compare with.")
            continue
        if against == "none":
            if d.excludes_zero is None:
                verdict = "cannot tell with one seed"
            else:
                verdict = "consistent" if not d.excludes_zero else "not consistent"
        else:
            verdict = "holds" if d.estimate < 0 else "does not hold"
            verdict += "" if d.excludes_zero is None else f" ({_verdict(d)})"
        out.append(
            f"{where} paper: {v.paper_name} {text} — {v.name} vs {ref.name}: "
            f"{_num(d.estimate, signed=True)} ({describe_interval(d)}): {verdict}."
        )
    return out


def _tau_init_findings(table: Table) -> list[str]:
    gated = [r.variant for r in table.rows if r.variant.gate != "none" and r.variant.done]
    if len({v.hp("tau_init") for v in gated}) < 2:
        return []
    means = [(v, v.summary("final_tau_mean")) for v in gated]
    parts = [f"tau_init {v.hp('tau_init')} ({v.name}) → {fmt_summary(s)}" for v, s in means]
    finals = [s.mean for _, s in means if s.mean is not None]
    spread = f"; the final means span {max(finals) - min(finals):.3f}" if finals else ""
    out = [f"[{table.title}] final tau by initialisation: {'; '.join(parts)}{spread}. Paper: ≈ 0.35 regardless of it."]
    losses = [(v, v.summary("final_val_loss")) for v in gated]
    loss_parts = [f"tau_init {v.hp('tau_init')} {fmt_summary(s)}" for v, s in losses]
    loss_means = [s.mean for _, s in losses if s.mean is not None]
    if len(loss_means) < 2:
        return out
    span = max(loss_means) - min(loss_means)
    text = f"[{table.title}] final val loss by initialisation: {'; '.join(loss_parts)}; the means span {span:.3f}"
    # the only yardstick for single-seed rows: how far seeds of one initialisation scatter
    v, s = max(losses, key=lambda pair: pair[1].n)
    if s.std:  # None with one seed; 0 would leave nothing to scale by
        text += (
            f", {span / s.std:.1f}× the seed-to-seed std of tau_init {v.hp('tau_init')} ({s.std:.3f} over {s.n} seeds)"
        )
    return [*out, text + "."]


def findings(tables: list[Table], variants: list[Variant], missing: list[RunData]) -> list[str]:
    out = []
    said: set[tuple[str, ...]] = set()
    for table in tables:
        out += _ega1_findings(table, said) + _ablation_findings(table, variants) + _tau_init_findings(table)
        out += _context_findings(table)
    if missing:
        out.append(
            f"{len(missing)} run(s) are missing or incomplete and in no number above "
            "(see [Missing and incomplete runs](#missing-and-incomplete-runs))."
        )
    return out or ["No finished runs yet."]


# ----------------------------------------------------------------------------- figures


def _curves_figure(rows: list[Row], tag: str, ylabel: str, title: str, path: Path) -> bool:
    """Mean over seeds as a line, min/max over seeds as a band; False (no file) without data."""
    import numpy as np
    from matplotlib.figure import Figure  # the object API: no pyplot state, no display

    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    drawn = False
    for row in rows:
        curves = [dict(r.scalars[tag]) for r in row.variant.done if r.scalars.get(tag)]
        if not curves:
            continue
        steps = sorted(set.intersection(*(set(c) for c in curves)))  # points every seed has
        values = np.array([[c[s] for s in steps] for c in curves])
        (line,) = ax.plot(steps, values.mean(axis=0), label=f"{row.variant.label} (n={len(curves)})")
        if len(curves) > 1:
            ax.fill_between(steps, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2)
        drawn = True
    if not drawn:
        return False
    ax.set(xlabel="step (TensorBoard x-axis)", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def tau_trajectory(run: RunData, tau_init: Any) -> list[tuple[int, float]]:
    """(step, mean tau) from tau_init at step 0 (every gate starts each tau there) through the values
    logged at each validation."""
    start = [(0, float(tau_init))] if isinstance(tau_init, int | float) else []
    return start + [(s, v) for s, v in run.scalars.get("gate/tau_mean", []) if s > 0 or not start]


def _tau_figure(rows: list[Row], title: str, path: Path) -> bool:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4.5))
    ax = fig.add_subplot()
    colours = iter(f"C{i}" for i in range(10_000))
    drawn = False
    for row in rows:
        colour = next(colours)
        tau_init = row.variant.hp("tau_init")
        with_points = [r for r in row.variant.done if r.scalars.get("gate/tau_mean")]
        for i, r in enumerate(with_points):
            points = tau_trajectory(r, tau_init)
            label = f"{row.variant.label} (tau_init {tau_init})" if i == 0 else None
            ax.plot([s for s, _ in points], [v for _, v in points], color=colour, alpha=0.8, marker=".", label=label)
            drawn = True
    if not drawn:
        return False
    ax.axhline(PAPER["tau"], color="grey", linestyle="--", label=f"paper ≈ {PAPER['tau']}")
    ax.set(xlabel="step (step 0: tau_init)", ylabel="gate/tau_mean (one line per seed)", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the plot: the lines span it
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def table_figures(table: Table, out: Path) -> list[tuple[str, str]]:
    """Writes the table's figures into ``out``; returns (caption, file name) pairs."""
    figures = []
    base = _slug(f"{table.group}-{table.corpus}")
    jobs: list[tuple[str, str, Callable[[Path], bool]]] = [
        (
            "validation loss",
            f"{base}-val_loss.png",
            lambda p: _curves_figure(table.rows, "val/loss", "val/loss (nats/char)", f"{table.title}: val loss", p),
        ),
        (
            "generalization gap",
            f"{base}-gap.png",
            lambda p: _curves_figure(table.rows, "gap", "gap = val/loss − train_eval/loss", f"{table.title}: gap", p),
        ),
    ]
    gated = [r for r in table.rows if r.variant.gate != "none" and r.variant.done]
    if len({r.variant.hp("tau_init") for r in gated}) > 1:  # the tau-initialisation study
        jobs.append(
            ("tau by initialisation", f"{base}-tau.png", lambda p: _tau_figure(gated, f"{table.title}: tau", p))
        )
    for caption, name, draw in jobs:
        if draw(out / name):
            figures.append((caption, name))
    return figures


# ----------------------------------------------------------------------------- REPORT.md and results.json

TABLE_HEAD = (
    "| variant | gate (paper) | model | seeds | params | overhead | final val loss | best val loss "
    "| Δ vs baseline [95% CI] | paper Δ | gap | paper gap | tau | paper tau | above tau | paper | tokens/s |\n"
    "|---|---|---|---|---:|---:|---|---|---|---|---|---|---|---|---|---|---:|"
)


def _model_text(v: Variant) -> str:
    if not v.done:
        return "—"
    h = v.done[0].hparams
    return f"{h.get('n_layer')}×{h.get('n_head')}×{h.get('n_embd')} T{h.get('block_size')}, {v.done[0].max_steps} steps"


def _other_machine(row: Row) -> bool:
    return row.baseline is not None and not row.variant.same_machine(row.baseline)


def _speed_text(row: Row) -> str:
    if not row.variant.by_seed("tokens_per_sec"):
        return "—"
    return f"{row.variant.summary('tokens_per_sec').mean:,.0f}" + (" †" if _other_machine(row) else "")


def table_line(row: Row, corpus: str) -> str:
    v = row.variant
    linear, gate = v.gate == "linear", v.gate
    improvement = PAPER["improvement"].get(corpus)
    cells = [
        f"`{v.label}`",
        f"{gate} ({v.paper_name or 'not in paper'})",
        _model_text(v),
        f"{len(v.done)}/{len(v.runs)}",
        f"{row.n_params:,}" if row.n_params else "—",
        "baseline" if gate == "none" else (f"{row.overhead_pct:+.2f}%" if row.overhead_pct is not None else "—"),
        fmt_summary(v.summary("final_val_loss")),
        fmt_summary(v.summary("best_val_loss")),
        "—" if gate == "none" else fmt_diff(row.diffs["final_val_loss"]),
        f"{improvement:+.3f}" if linear and improvement is not None else "",
        fmt_summary(v.summary("final_gap")),
        str(PAPER["gap"].get(gate, "")),
        fmt_summary(v.summary("final_tau_mean")),
        str(PAPER["tau"]) if linear else "",
        (fmt_summary(v.summary("final_frac_above_tau"), 1, 100) + "%") if v.by_seed("final_frac_above_tau") else "—",
        f"{100 * PAPER['frac_above_tau']:.0f}%" if linear else "",
        _speed_text(row),
    ]
    return "| " + " | ".join(cells) + " |"


def section(group: str, tables: list[Table], command: str, runs_dir: Path, out: Path) -> list[str]:
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
        lines.append(f"- Sweep spec `{spec}`; runs: `ega sweep {spec} --runs_dir {runs_dir} {only}`")
    lines += [
        f"- This report: `{command}`",
        f"- Configs: {', '.join(f'`{c}`' for c in configs) or '—'}",
        f"- Arguments: {', '.join(f'`{a}`' for a in args) or '—'}",
        "",
    ]
    for table in tables:
        lines += [f"### {table.corpus}", "", TABLE_HEAD, *(table_line(row, table.corpus) for row in table.rows), ""]
        if any(_other_machine(row) for row in table.rows):
            lines += [
                "† tokens/s not known to be measured on its baseline's machine (machines: [Runs](#runs)): "
                "do not compare it with the baseline's.",
                "",
            ]
        for row in table.rows:
            if row.baseline is not None and row.baseline.group != group:
                lines.append(
                    f"`{row.variant.label}` is compared with `{row.baseline.label}` of group {row.baseline.group}."
                )
            elif row.baseline is None and row.variant.gate != "none" and row.variant.done:
                lines.append(f"`{row.variant.label}`: no finished baseline with the same model, data and steps.")
        lines.append("")
        figures = table_figures(table, out)
        for caption, name in figures:
            lines += [f"![{table.title}: {caption}]({name})", ""]
        no_curves = [r.run.run_name for row in table.rows for r in row.variant.done if not r.scalars.get("val/loss")]
        if no_curves:
            names = ", ".join(f"`{name}`" for name in no_curves)
            lead = "Not in these figures" if figures else "No figures"
            lines += [f"{lead}: the records of {names} hold final numbers only.", ""]
    return lines


def _runs_table(runs: list[RunData]) -> list[str]:
    labels = {m: f"m{i}" for i, m in enumerate(dict.fromkeys(r.machine for r in runs), 1)}
    lines = [
        "| run | group | variant | corpus | seed | final val loss | best | gap | tau | last val step | read from "
        "| machine |",
        "|" + "---|" * 12,
    ]
    for r in runs:
        m = r.metrics
        lines.append(
            f"| `{r.run.run_name}` | {r.run.group} | `{r.run.variant}` | {r.corpus} | {r.run.seed} | "
            f"{_num(m['final_val_loss'])} | {_num(m['best_val_loss'])} | {_num(m['final_gap'])} | "
            f"{_num(m['final_tau_mean'])} | {m['last_val_step']} | {r.source} | {labels[r.machine]} |"
        )
    lines.append("")
    lines += [f"- {label}: {m or 'not known (recorded before machines were)'}" for m, label in labels.items()]
    return lines


def render(
    tables: list[Table], variants: list[Variant], runs: list[RunData], command: str, runs_dir: Path, out: Path
) -> str:
    done = [r for r in runs if r.status == "done"]
    missing = [r for r in runs if r.status != "done"]
    specs = list(dict.fromkeys(str(r.run.spec) for r in runs))
    lines = [
        "# EGA experiment report",
        "",
        f"Generated by `{command}` from {', '.join(f'`{s}`' for s in specs)}: {len(runs)} runs, "
        f"{len(done)} finished, {len(missing)} missing or incomplete (listed at the end; in no number). "
        "Every number is also in `results.json`.",
        "",
        "Final = the last evaluation of a run, best = its lowest val loss; mean ± sample std over seeds. "
        "Δ = baseline − variant on the final val loss (positive: the variant is better, like the paper's +0.103); "
        "95% intervals are paired Student-t over seeds when both sides ran the same seeds (identical initial "
        "shared weights and batches), else Welch (which ignores the pairing on the seeds both sides share, so "
        "its intervals err wide). Paper figures: EGA_SPEC.md section 4.",
        "",
        "## Findings",
        "",
        *(f"- {f}" for f in findings(tables, variants, missing)),
        "",
    ]
    for group in dict.fromkeys(t.group for t in tables):
        lines += section(group, [t for t in tables if t.group == group], command, runs_dir, out)
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


def _jsonable(value: Any) -> Any:
    """Dataclasses to dicts, non-finite floats (a diverged run) to None: results.json stays strict JSON."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float):
        return _finite(value)
    return value


def results(tables: list[Table], runs: list[RunData], command: str) -> dict[str, Any]:
    def variant_dict(row: Row) -> dict[str, Any]:
        v = row.variant
        return {
            "variant": v.label,
            "gate": v.gate,
            "paper_name": v.paper_name,
            "gate_options": v.hp("gate_options"),
            "tau_init": v.hp("tau_init"),
            "runs": [r.run.run_name for r in v.runs],
            "seeds_done": sorted(r.run.seed for r in v.done),
            "seeds_not_done": sorted(r.run.seed for r in v.runs if r.status != "done"),
            "n_params": row.n_params,
            "baseline": {"group": row.baseline.group, "variant": row.baseline.label} if row.baseline else None,
            "overhead_pct": row.overhead_pct,
            **{m: v.summary(m) for m in METRICS},
            **{f"diff_{m}": d for m, d in row.diffs.items()},
        }

    return _jsonable(
        {
            "command": command,
            "paper": PAPER,
            "conventions": {
                "diff": "baseline - variant (positive: variant better)",
                "interval": "95%, paired t when both sides have the same seeds, else Welch; n=1: none",
                "std": "sample standard deviation over seeds (ddof=1)",
            },
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
                    "status": r.status,
                    "reason": r.reason,
                    "source": r.source,
                    "machine": r.machine,
                    **r.metrics,
                }
                for r in runs
            ],
        }
    )


def collect_runs(sweeps: Iterable[Sweep]) -> list[Run]:
    """The runs of all specs; one run listed by two specs must be the same run."""
    runs: dict[str, Run] = {}
    for sweep in sweeps:
        for run in sweep.runs:
            seen = runs.get(run.run_name)
            if seen is None:
                runs[run.run_name] = run
            elif (seen.configs, seen.args) != (run.configs, run.args):
                raise SpecError(
                    f"run {run.run_name} is defined differently in {seen.spec} and {run.spec}, but both would read "
                    f"{run.run_name}/: rename the entry in one of them."
                )
    return list(runs.values())


def write_report(
    spec_paths: list[Path], runs_dir: Path, out: Path, records_dir: Path | None = None
) -> tuple[list[RunData], Path]:
    records_dir = out / "runs" if records_dir is None else records_dir
    words = ["ega", "report", *map(str, spec_paths), "--runs_dir", str(runs_dir), "--out", str(out)]
    command = shlex.join(words if records_dir == out / "runs" else [*words, "--records_dir", str(records_dir)])
    runs = [
        load_run(run, runs_dir, records_dir)
        for run in collect_runs(load_spec(p, check_files=False) for p in spec_paths)
    ]
    for r in runs:
        if r.source == FROM_EVENT_FILES:  # finished here: keep what the report read in git's reach
            record_run(r.run, r.run_dir, records_dir)
    variants = build_variants(runs)
    tables = build_tables(variants)
    out.mkdir(parents=True, exist_ok=True)
    report = out / "REPORT.md"
    report.write_text(render(tables, variants, runs, command, runs_dir, out))
    (out / "results.json").write_text(json.dumps(results(tables, runs, command), indent=2, allow_nan=False) + "\n")
    return runs, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ega report",
        description=__doc__.split("\n", 1)[1],  # what it reads and writes, and the conventions, as documented above
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("specs", nargs="+", type=Path, help="sweep spec(s) (YAML), as given to `ega sweep`")
    parser.add_argument("--runs_dir", type=Path, default=Path("lightning_logs"), help="where the runs were written")
    parser.add_argument("--out", type=Path, default=Path("results"), help="output directory")
    parser.add_argument(
        "--records_dir",
        type=Path,
        default=None,
        help="the runs' records: read for runs not finished under --runs_dir, refreshed for those that are "
        "(default: <out>/runs)",
    )
    args = parser.parse_args(argv)
    try:
        runs, report = write_report(args.specs, args.runs_dir, args.out, args.records_dir)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    done = sum(r.status == "done" for r in runs)
    print(f"wrote {report} and {args.out / 'results.json'}: {done} of {len(runs)} runs finished.")
    return 0
