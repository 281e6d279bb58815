"""Variants, baselines and differences: plain functions of run records, no file I/O, no prose.

A variant is the seeds of one labelled configuration in one report section on one corpus. It is
compared with its reference (`reference`, the one rule): the gate-less variant of the same corpus,
model and recipe, found in its own section first, else in another, unless a study names another.
Differences are baseline minus variant (positive: the variant has the lower loss, like the paper's
improvement), paired by seed on the seeds both sides share (see `ega_lightning.experiments.stats.compare`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from ega_lightning.experiments import protocol
from ega_lightning.experiments.paper import paper_name
from ega_lightning.experiments.records import Record
from ega_lightning.experiments.rundirs import FROM_EVENT_FILES, Loaded
from ega_lightning.experiments.spec import Run, SpecError
from ega_lightning.experiments.stats import Difference, Summary, compare, summarize
from ega_lightning.experiments.text import seed_list
from ega_lightning.host import machine_kind

# A model's shape: the seeds of one variant must share it, or their numbers are not one configuration's
SHAPE_KEYS = ("n_layer", "n_head", "n_embd", "block_size")
# A run's recipe is every hyper-parameter it recorded but its shape and these (the seed, the corpus a variant is
# of, its vocabulary, and compile, which changes no arithmetic): the optimizer, its schedule, dropout, the gate, the
# data and the evaluation, and the step budget (``max_steps``). A key a record made before it existed lacks is read
# at its default (the arguments of CharLM and CharDataModule; tests/test_experiments.py holds them equal).
NOT_RECIPE = ("seed", "corpus", "vocab", "compile", *SHAPE_KEYS)
RECIPE_DEFAULTS: dict[str, Any] = {
    "dropout": 0.0,
    "bias": True,
    "gate": "linear",
    "tau_init": 0.0,
    "alpha_init": 1.0,
    "gate_options": None,
    "eval_znorm": None,
    "attention": "fused",
    "lr": 1e-3,
    "min_lr": 1e-4,
    "warmup_steps": 100,
    "weight_decay": 0.1,
    "betas": [0.9, 0.99],
    "output_gate": "none",
    "qkv_bias": None,
    "scale_residual_init": True,
    "dropout_before_gate": False,
    "decay_every_parameter": False,
    "position": "learned",
    "attention_options": None,
    "batch_size": 64,
    "eval_batch_size": None,
    "max_eval_windows": None,
    "random_eval_batches": None,
    "random_eval_seed": 0,
    "eval_block_size": None,
}
# A run's reference (`reference`) shares its corpus, model shape and recipe save these keys. GATE_OWN: the options only
# a gated model has, what a gated variant changes against its gate-less baseline (which records them at their defaults:
# records.count_parameters builds it with dropout_before_gate False): both gate slots, the gate's own options and
# initialisation, the evaluation of its z, and the author's attention order (dropout, gate, renormalise: meaningless
# without a gate). PATH_KEYS: how the same model is computed, not which (conformance.py holds the attention paths
# equal; the author's order trains on the reference path only, so its baseline is the plain model on the fused one).
GATE_OWN = ("gate", "output_gate", "gate_options", "tau_init", "alpha_init", "eval_znorm", "dropout_before_gate")
PATH_KEYS = ("attention", "attention_options")
LEFT_OUT = "left out"  # the status of a finished run whose model shape or recipe is not its variant's (`set_apart`)
DIVERGED = "diverged"  # the status of a finished run whose final val loss is not finite (`set_apart_diverged`)
METRICS = ("final_val_loss", "best_val_loss", "final_gap", "final_tau_mean", "final_frac_above_tau", "tokens_per_sec")
DIFF_METRICS = ("final_val_loss", "best_val_loss", "final_gap")
UNKNOWN_CODE = {"fingerprint": None, "status": "unknown", "how": ""}  # a run whose code nothing established


@dataclass(frozen=True, kw_only=True)
class RunData:
    """One run of a spec: its record's numbers when it is finished (``status`` done), else why not. Built once,
    by `run_rows`, with every field the report reads (the corpus resolved, the code established, a run of another
    model shape already left out): no later stage rewrites a row."""

    run: Run
    # done | incomplete | missing | left out (finished, another model shape or recipe than its variant's) | diverged
    status: str
    reason: str
    corpus: str
    gate: str  # the key-bias slot (`model.gate`)
    gate_options: dict[str, Any] | None = None  # for a run that never finished: from its configs
    output_gate: str = "none"  # the output-gate slot (`model.output_gate`; records before it: none)
    hparams: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None
    scalars: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # where a finished run's numbers come from: its event files or its record
    machine: str | None = None  # where it ran; None: not known
    n_params: int | None = None
    fingerprint: str | None = None  # of the code path it trained, as its record keeps it (None: not kept)
    # which code it ran, as far as the record and results/provenance.json establish it (`provenance.code_status`)
    code: dict[str, Any] = field(default_factory=lambda: dict(UNKNOWN_CODE))
    started: datetime | None = None  # its first attempt's start (the protocol's registration reads it)
    # which CPU kind trained which steps (its record's `segments`, issue 67); None: a record before them, which names
    # only the machine that finished the run, so its CPU kind per step cannot be checked
    segments: list[dict[str, Any]] | None = None


def _tail_gap(final: dict[str, Any]) -> float | None:
    """The gate summary's share of keys above tau minus the mean over heads of 1 - Phi(tau_head): the
    run's one value for the tail identity (the share of keys is already a mean over heads)."""
    taus = [t for row in final.get("tau") or [] for t in row]
    if final.get("frac_above_tau") is None or not taus:
        return None
    return final["frac_above_tau"] - math.fsum(0.5 * math.erfc(t / math.sqrt(2.0)) for t in taus) / len(taus)


def run_metrics(scalars: dict[str, list[tuple[int, float]]], summary: dict[str, Any] | None) -> dict[str, Any]:
    """A finished run's numbers: the last point of each curve (the gate summary's where no curve was logged)."""
    summary = summary or {}

    def last(tag: str, summary_key: str | None = None) -> float | None:
        if scalars.get(tag):
            return scalars[tag][-1][1]
        return (summary.get("final") or {}).get(summary_key) if summary_key else None

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
        "tau_converged": summary.get("converged"),
        "final_tail_gap": _tail_gap(summary.get("final") or {}),
        "tau_converged_step": summary.get("converged_step"),
    }


def _row(loaded: Loaded, corpus: str, code: dict[str, Any] | None) -> RunData:
    """The row of a run as the reader left it: a finished run from its record (which holds a val/loss curve),
    any other named from its saved config or its spec entry."""
    record = loaded.record
    if record is None:
        common = {"gate_options": loaded.gate_options, "output_gate": loaded.output_gate}
        return RunData(
            run=loaded.run, status=loaded.status, reason=loaded.reason, corpus=corpus, gate=loaded.gate, **common
        )
    scalars = {tag: [(int(s), float(v)) for s, v in points] for tag, points in (record.scalars or {}).items()}
    hparams = record.hparams or {}
    return RunData(
        run=loaded.run,
        status="done",
        reason="",
        corpus=corpus,
        gate=str(record.gate or "?"),
        output_gate=str(hparams.get("output_gate") or "none"),
        hparams=hparams,
        max_steps=record.max_steps,
        scalars=scalars,
        metrics=run_metrics(scalars, record.gate_summary),
        source=FROM_EVENT_FILES if loaded.fresh else "record",
        machine=record.machine,
        n_params=record.n_params,
        fingerprint=record.code_fingerprint,
        code=dict(code) if code is not None else dict(UNKNOWN_CODE),
        started=started(record),
        segments=record.segments,
    )


def run_rows(loaded: Sequence[Loaded], codes: Mapping[str, dict[str, Any]]) -> list[RunData]:
    """Every run the reader loaded (`rundirs.read_runs`) as its row, each built once with what the report knows
    of it: ``codes`` (run name -> `provenance.code_status`) for the finished ones, the corpus of its spec entry,
    and ``left out`` for a finished run of another model shape or recipe than its variant's (`set_apart`)."""

    def corpus(x: Loaded) -> str:
        return str((x.record.corpus if x.record is not None else x.corpus) or "?")

    # a run that never wrote its config (and whose config files are gone) takes the corpus of its
    # spec entry's other seeds: one entry is one set of configs
    entry_corpus = {(x.run.spec, x.run.entry): corpus(x) for x in loaded if corpus(x) != "?"}
    rows = [_row(x, entry_corpus.get((x.run.spec, x.run.entry), corpus(x)), codes.get(x.run.run_name)) for x in loaded]
    return set_apart(set_apart_diverged(rows))


def started(record: Record) -> datetime | None:
    """When a run's first attempt started: its record's ``started_at``, else (records before it) its
    ``finished_at`` minus its wall seconds; None when neither is known."""
    done = record.done
    try:
        if done.started_at:
            return datetime.fromisoformat(done.started_at)
        if done.finished_at and done.wall_seconds is not None:
            return datetime.fromisoformat(done.finished_at) - timedelta(seconds=done.wall_seconds)
    except (TypeError, ValueError):
        return None
    return None


def gate_name(gate: str, output_gate: str = "none") -> str:
    """What a model changes against the baseline, both slots in one name: ``linear``, ``output_headwise``
    (the key-bias slot empty), ``fox+output_elementwise``; ``none`` only when both slots are empty."""
    if output_gate in ("none", ""):
        return gate
    return output_gate if gate == "none" else f"{gate}+{output_gate}"


def device(machine: str | None) -> str:
    """``CPU``, ``GPU (<names>)`` or ``device not known``, from a record's machine (`host.machine`)."""
    if not machine:
        return "device not known"
    devices = machine.split(";", 1)[0]
    return f"GPU ({devices.split(' + ', 1)[1]})" if " + " in devices else "CPU"


def split_seeds(*variants: Variant | None) -> list[int]:
    """The seeds whose runs on the sides of a comparison name different machines: rounding differs between
    machines and grows over training to about the seed-to-seed spread, so such a pair measures the machines
    as well as the configurations (docs/reproducing.md). Runs that name no machine are not counted, and machines
    that differ only in the kernel's release are one (`host.machine_kind`)."""
    machines: dict[int, set[str]] = {}
    for v in variants:
        for r in v.done if v is not None else []:
            if r.machine:
                machines.setdefault(r.run.seed, set()).add(machine_kind(r.machine))
    return sorted(seed for seed, named in machines.items() if len(named) > 1)


def split_text(seeds: list[int]) -> str:
    """The flag of a comparison whose pairs ran on two machines ('' for none)."""
    return f"⚠ two machines: {seed_list(seeds)}" if seeds else ""


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
    def left_out(self) -> list[RunData]:
        """Finished runs of another model shape or recipe than the variant's (`set_apart`): in no number."""
        return [r for r in self.runs if r.status == LEFT_OUT]

    @property
    def diverged(self) -> list[RunData]:
        """Finished runs whose final val loss is not finite (`set_apart_diverged`): in no number, named."""
        return [r for r in self.runs if r.status == DIVERGED]

    @property
    def gate(self) -> str:
        """Both slots (`gate_name`): a model with an output gate is no baseline, whatever its key bias."""
        first = (self.done or self.runs)[0]
        return gate_name(first.gate, first.output_gate)

    @property
    def gated(self) -> bool:
        """A gate in either slot; a variant with none is a baseline, the reference of the gated (`reference`)."""
        return self.gate != "none"

    def hp(self, key: str) -> Any:
        return self.done[0].hparams.get(key) if self.done else None

    @property
    def setup_key(self) -> str | None:
        """What a variant's reference shares with it (`reference`), as JSON: its corpus, model shape and recipe
        (`recipe`) less the gate's own options (`GATE_OWN`) and the attention path (`PATH_KEYS`); None unfinished."""
        return self.setup()

    def setup(self, apart_from: Sequence[str] = ()) -> str | None:
        """`setup_key` less the recipe keys ``apart_from`` too (a named reference of another position encoding)."""
        if not self.done:
            return None
        r = self.done[0]
        own = {k: v for k, v in recipe(r).items() if k not in (*GATE_OWN, *PATH_KEYS, *apart_from)}
        return json.dumps({"corpus": r.corpus, "shape": shape(r.hparams), **own}, sort_keys=True)

    @property
    def paper_name(self) -> str | None:
        # a variant with no finished run still has its configs: its name must not wait for a run
        return paper_name(self.gate, self.hp("gate_options") if self.done else self.runs[0].gate_options)

    @property
    def n_params(self) -> int | None:
        return self.done[0].n_params if self.done else None

    @property
    def options(self) -> dict[str, Any]:
        """The gate's options (``gate_options``), {} where none were given."""
        return self.hp("gate_options") or {}

    @property
    def as_in_paper(self) -> bool:
        """tau learned, z over the causal prefix and learned positions (a record from before the option has them):
        not a frozen-tau or whole-window diagnostic, nor a model of another position encoding (the RoPE study's)."""
        as_trained = bool(self.options.get("learn_tau", True)) and self.options.get("znorm", "prefix") == "prefix"
        return as_trained and (self.hp("position") or RECIPE_DEFAULTS["position"]) == "learned"

    @property
    def evaluated_znorm(self) -> str:
        """The z-norm its validation computed: ``eval_znorm`` where set, else the gate's as trained (prefix by
        default)."""
        return str(self.hp("eval_znorm") or self.options.get("znorm", "prefix"))

    @property
    def causal_evaluation(self) -> bool:
        """Its val loss is a causal loss: no gate, or a gate whose z its evaluation computed over the causal prefix
        (z over the whole window reads later characters: ``--model.eval_znorm=window``, or a gate trained so and
        evaluated as trained)."""
        return not self.gated or self.evaluated_znorm == "prefix"

    def by_seed(self, metric: str) -> dict[int, float]:
        return {r.run.seed: x for r in self.done if (x := r.metrics.get(metric)) is not None and math.isfinite(x)}

    def summary(self, metric: str) -> Summary:
        return summarize(list(self.by_seed(metric).values()))


def shape(hparams: Mapping[str, Any]) -> tuple[Any, ...]:
    """The model shape of a run's (or a config's) hyper-parameters: their ``SHAPE_KEYS``."""
    return tuple(hparams.get(k) for k in SHAPE_KEYS)


def shape_text(dims: tuple[Any, ...]) -> str:
    """A model shape as the report writes it: ``6×8×256 T256``."""
    n_layer, n_head, n_embd, block_size = dims
    return f"{n_layer}×{n_head}×{n_embd} T{block_size}"


def _variant_keys(runs: Sequence[RunData]) -> dict[tuple[str, str, str], list[int]]:
    """(group, corpus, variant label) -> the indices of its runs in ``runs``, in the order the specs list them."""
    keys: dict[tuple[str, str, str], list[int]] = {}
    for i, r in enumerate(runs):
        for group in r.run.groups:
            keys.setdefault((group, r.corpus, r.run.variant), []).append(i)
    return keys


def set_apart_diverged(runs: Sequence[RunData]) -> list[RunData]:
    """``runs`` with each finished run whose final val loss is NaN or infinite ``diverged``: it has no final loss
    to difference, so no number of its variant counts it, and every verdict that reads its variant names it (the
    protocol's rule for a diverged seed: `protocol.Protocol.rule_text`)."""
    out = []
    for r in runs:
        final = r.metrics.get("final_val_loss") if r.status == "done" else 0.0
        if final is not None and math.isfinite(final):
            out.append(r)
            continue
        points = r.scalars.get("val/loss") or []
        first = next(((step, v) for step, v in points if not math.isfinite(v)), None)
        at = f" (first {first[1]} at step {first[0]}, as logged)" if first is not None else ""
        reason = (
            f"it diverged: its final val loss is {final}{at}. It has no final loss to difference, so it is in no "
            "number of its variant, and each verdict that reads the variant names it ("
            f"{diverged_rule()})"
        )
        out.append(replace(r, status=DIVERGED, reason=reason))
    return out


def diverged_rule() -> str:
    """How a verdict treats a diverged seed, as the protocol states it (its amendment), in a few words."""
    found = protocol.current().rule_text("diverged")
    if found is None:
        return "left out of every interval; the protocol states no rule for it"
    return (
        f"the protocol's rule, its amendment of {found[0]}: left out of every interval, the verdict read over the "
        "seeds that did not diverge"
    )


def recipe(r: RunData) -> dict[str, str]:
    """A finished run's recipe (see ``NOT_RECIPE``): each key with its value as JSON, a key its record lacks at its
    default."""
    keys = (set(RECIPE_DEFAULTS) | set(r.hparams)) - set(NOT_RECIPE)
    values = {k: r.hparams.get(k, RECIPE_DEFAULTS.get(k)) for k in sorted(keys)} | {"max_steps": r.max_steps}
    return {k: json.dumps(v, sort_keys=True) for k, v in values.items()}


def recipe_difference(r: RunData, own: dict[str, str]) -> list[str]:
    """Each key of ``r``'s recipe that is not ``own``'s: ``lr 0.01 (the variant's 0.001)``."""
    mine = recipe(r)
    return [f"{k} {mine.get(k, 'null')} (the variant's {v})" for k, v in own.items() if mine.get(k, "null") != v] + [
        f"{k} {v} (the variant's null)" for k, v in mine.items() if k not in own and v != "null"
    ]


def _most_common(done: list[int], key: Callable[[int], Any]) -> Any:
    """The value of ``key`` most of the runs ``done`` (indices, sorted by seed) share; a tie: the lowest seed's."""
    counts = Counter(key(i) for i in done)
    most = max(counts.values())
    return next(key(i) for i in done if counts[key(i)] == most)


def set_apart(runs: Sequence[RunData]) -> list[RunData]:
    """``runs`` with each finished run of another model shape, or of another recipe, than its variant's ``left
    out``. The variant's shape is the one most of its finished seeds trained (a tie: the lowest seed's), and its
    recipe the one most of the seeds of that shape recorded (a tie likewise); a finished run of another (its config
    edited between seeds) is paired with nothing: no number of the variant, no pair, no interval counts it, and its
    reason says why. Variants are read in spec order, and a run left out of one is not a finished run of the next."""
    reasons: dict[int, str] = {}
    for (_, _, label), members in _variant_keys(runs).items():
        done = sorted(
            (i for i in members if runs[i].status == "done" and i not in reasons), key=lambda i: runs[i].run.seed
        )
        if not done:
            continue
        own = _most_common(done, lambda i: shape(runs[i].hparams))
        for i in done:
            r = runs[i]
            if shape(r.hparams) != own:
                params = f"{r.n_params:,} parameters" if r.n_params else "parameters not recorded"
                reasons[i] = (
                    f"its model is {shape_text(shape(r.hparams))} ({params}), and the variant's "
                    f"'{label}' is {shape_text(own)} (most of its seeds, ties to the lowest seed): the config "
                    "changed between seeds, so it is paired with nothing. Rerun it at the variant's shape, or give "
                    "its spec entry another `variant:`."
                )
        done = [i for i in done if i not in reasons]
        own_recipe = json.loads(_most_common(done, lambda i: json.dumps(recipe(runs[i]), sort_keys=True)))
        for i in done:
            if differs := recipe_difference(runs[i], own_recipe):
                reasons[i] = (
                    f"its recorded recipe is not the variant's '{label}' (most of its seeds of its shape, ties to the "
                    f"lowest seed): {'; '.join(differs)}. The config changed between seeds, so it is paired with "
                    "nothing (the code fingerprint does not cover the recipe). Rerun it with the variant's recipe, or "
                    "give its spec entry another `variant:`."
                )
    return [replace(r, status=LEFT_OUT, reason=reasons[i]) if i in reasons else r for i, r in enumerate(runs)]


def build_variants(runs: Sequence[RunData]) -> list[Variant]:
    """The variants of ``runs`` (rows as `run_rows` built them), in spec order; a :class:`SpecError` for two runs
    of one variant that share a seed or run different configurations."""
    variants: list[Variant] = []
    for (group, corpus, label), members in _variant_keys(runs).items():
        variant = Variant(group, corpus, label, [])
        for r in (runs[i] for i in members):
            clash = [o.run.run_name for o in variant.runs if o.run.seed == r.run.seed]
            if clash:
                raise SpecError(
                    f"variant '{label}' (group '{group}', corpus {corpus}) has two runs with seed {r.run.seed}: "
                    f"{clash[0]} and {r.run.run_name}; give their spec entries distinct `variant:` labels."
                )
            other = next((o for o in variant.runs if (o.run.configs, o.run.args) != (r.run.configs, r.run.args)), None)
            if other is not None:  # pooled, their numbers would read as one configuration's seeds
                raise SpecError(
                    f"variant '{label}' (group '{group}', corpus {corpus}) holds {other.run.run_name} and "
                    f"{r.run.run_name}, which run different configs or args: one variant is one configuration. "
                    "Give their spec entries distinct `variant:` labels."
                )
            variant.runs.append(r)
        variants.append(variant)
    return variants


def reference(
    variant: Variant,
    variants: Sequence[Variant],
    named: Callable[[Variant], bool] | None = None,
    apart_from: Sequence[str] = (),
) -> Variant | None:
    """What ``variant`` is measured against: the one answer every study and the leaderboard ask for.

    The rule: a gated variant pairs with the finished gate-less variant (`Variant.gated` false) of the same setup
    (`Variant.setup_key`: the same corpus, model shape and recipe, i.e. every model option such as model.position,
    the optimizer and schedule, the data, the evaluation and max_steps), save the options only a gated model has
    (`GATE_OWN`: the gate slots, the gate's own options and initialisation, the author's dropout_before_gate) and
    the attention path (`PATH_KEYS`), compared nowhere. A gate-less variant has no reference. A study that names
    another reference passes ``named``, which variants may be it (e.g. EGA-1's gate ``linear``, or the same
    gate with tau learned); it is still of the same setup, save the recipe keys it names ``apart_from`` (the RoPE
    study's baseline is set against designs of another position encoding: ``position``). Of several: the
    variant's own group first, then the same tau_init, then spec order. The pairs are the seeds both ran
    (`difference`)."""
    own = variant.setup(apart_from)
    if own is None or (named is None and not variant.gated):
        return None
    wanted = named or (lambda x: not x.gated)
    candidates = [x for x in variants if x is not variant and x.done and wanted(x) and x.setup(apart_from) == own]
    candidates.sort(key=lambda x: (x.group != variant.group, x.hp("tau_init") != variant.hp("tau_init")))
    return candidates[0] if candidates else None


def learned(v: Variant) -> Callable[[Variant], bool]:
    """A study's named reference: ``v``'s gate from its tau_init as the paper trains it (tau learned, z over the
    causal prefix), what a frozen-tau or whole-window variant is set against."""
    return lambda x: x.gate == v.gate and x.hp("tau_init") == v.hp("tau_init") and x.as_in_paper


def rerun_of(v: Variant, variants: list[Variant]) -> Variant | None:
    """The variant that ``v`` repeats run for run (same hyper-parameters, seeds and budget) on more seeds:
    a rerun kept for its checkpoints is evidence for nothing its original does not already give."""

    def runs(x: Variant) -> dict[int, str]:
        # keys that later code added at their defaults (None, compile) are no difference in what was trained
        def same(r: RunData) -> dict[str, Any]:
            return {k: v for k, v in r.hparams.items() if v is not None and k != "compile"}

        return {r.run.seed: repr(sorted({**same(r), "max_steps": r.max_steps}.items())) for r in x.done}

    own = runs(v)
    for other in variants:
        theirs = runs(other) if other is not v and len(other.done) > len(v.done) else {}
        if own and all(theirs.get(seed) == config for seed, config in own.items()):
            return other
    return None


def difference(
    reference: Variant | None, variant: Variant, metric: str, seeds: set[int] | None = None
) -> Difference | None:
    """reference - variant over seeds (only ``seeds`` when given); None when either side has no value."""
    if reference is None:
        return None
    ref, own = reference.by_seed(metric), variant.by_seed(metric)
    if seeds is not None:
        ref, own = {s: v for s, v in ref.items() if s in seeds}, {s: v for s, v in own.items() if s in seeds}
    return compare(ref, own) if ref and own else None


@dataclass
class Row:
    variant: Variant
    baseline: Variant | None
    diffs: dict[str, Difference | None]

    @property
    def split_seeds(self) -> list[int]:
        """Seeds whose run and baseline run name different machines (`split_seeds`)."""
        return split_seeds(self.baseline, self.variant) if self.baseline is not None else []

    @property
    def overhead_pct(self) -> float | None:
        """The variant's extra parameters, in % of its baseline's."""
        base = self.baseline.n_params if self.baseline else None
        own = self.variant.n_params
        if own is None or not base:
            return None
        return 100.0 * (own - base) / base


# a spec group whose study names its reference (the RoPE study's `rope-none`): group -> (which variants may be it,
# the recipe keys a design may differ in from it), registered by the study's module. Every variant of the group but
# the reference itself is then a design read against it, a gate-less one too (`make_row`)
NAMED_REFERENCES: dict[str, tuple[Callable[[Variant], bool], tuple[str, ...]]] = {}


def make_row(variant: Variant, variants: list[Variant]) -> Row:
    named, apart_from = NAMED_REFERENCES.get(variant.group, (None, ()))
    baseline = reference(variant, variants, named, apart_from)
    return Row(variant, baseline, {m: difference(baseline, variant, m) for m in DIFF_METRICS})


@dataclass
class Table:
    group: str
    corpus: str
    rows: list[Row]

    @property
    def title(self) -> str:
        return f"{self.group} / {self.corpus}"

    @property
    def finished_gates(self) -> list[Variant]:
        """The gated variants of the table with a finished run, in its order."""
        return [r.variant for r in self.rows if r.variant.gated and r.variant.done]


def build_tables(variants: list[Variant]) -> list[Table]:
    tables: dict[tuple[str, str], Table] = {}
    for v in variants:
        tables.setdefault((v.group, v.corpus), Table(v.group, v.corpus, [])).rows.append(make_row(v, variants))
    return list(tables.values())


def tau_trajectory(run: RunData, tau_init: Any) -> list[tuple[int, float]]:
    """(step, mean tau) from tau_init at step 0 (every gate starts each tau there) through the values
    logged at each validation."""
    start = [(0, float(tau_init))] if isinstance(tau_init, int | float) else []
    return start + [(s, v) for s, v in run.scalars.get("gate/tau_mean", []) if s > 0 or not start]
