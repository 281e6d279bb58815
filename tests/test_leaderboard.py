"""EGA beside its peers (issue 30): the leaderboard, the positive control and the peers' own claims, from
synthetic records; every number recomputed independently (scipy, numpy), every verdict as its enum."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from ega_lightning.experiments import bench, findings, paper, rules, spec
from ega_lightning.experiments.comparisons import build_tables, build_variants
from ega_lightning.experiments.rules import Verdict
from ega_lightning.experiments.stats import Difference
from ega_lightning.experiments.studies import leaderboard

from .helpers import REPO, finished_runs, study_findings


def iv(low: float | None, high: float | None) -> Difference:
    mid = (low + high) / 2 if low is not None and high is not None else 0.05
    return Difference(mid, low, high, 3 if low is not None else 1, 2.0 if low is not None else None, "paired")


@pytest.mark.parametrize(
    "d,verdict",
    [
        (iv(0.006, 0.02), Verdict.HOLDS),
        (iv(0.001, 0.02), Verdict.TOO_FEW_SEEDS),  # above 0, yet not beyond the margin
        (iv(-0.004, 0.002), Verdict.NEGLIGIBLE),
        (iv(-0.03, -0.006), Verdict.DOES_NOT_HOLD),
        (iv(-0.008, -0.00004), Verdict.TOO_FEW_SEEDS),  # the output gate's: below 0, straddling −0.005
        (iv(-0.01, 0.02), Verdict.TOO_FEW_SEEDS),
        (iv(None, None), Verdict.TOO_FEW_SEEDS),
        (None, Verdict.NO_DATA),
    ],
)
def test_a_peers_lower_loss_is_read_three_ways_against_the_margin(d, verdict):
    assert rules.BY_NAME["lower"](d) is verdict


HALF = paper.IMPROVEMENT["tinyshakespeare"] / 2


@pytest.mark.parametrize(
    "diffs,verdict",
    [
        ([iv(HALF + 0.001, HALF + 0.05), iv(-0.01, 0.01)], Verdict.HOLDS),  # one gate clears it: enough
        ([iv(0.0, HALF - 0.001), iv(-0.01, 0.01)], Verdict.DOES_NOT_HOLD),  # every gate below it
        ([iv(HALF - 0.01, HALF + 0.01), iv(-0.01, 0.01)], Verdict.TOO_FEW_SEEDS),  # one holds the threshold
        ([iv(-0.01, 0.01), None], Verdict.TOO_FEW_SEEDS),  # a declared gate has not run: it might clear it
        ([iv(-0.01, 0.01), iv(None, None)], Verdict.TOO_FEW_SEEDS),  # one seed: no interval
        ([None, None], Verdict.NO_DATA),
    ],
)
def test_the_positive_control_needs_some_gate_wholly_above_half_the_papers_figure(diffs, verdict):
    assert rules.control_rule(*diffs) is verdict


def test_the_papers_figures_are_the_specs():
    """Every figure of the paper the report tests is the one EGA_SPEC.md section 4 states (the spec beside the
    checkout), and the positive control's threshold is half of its TinyShakespeare improvement."""
    path = REPO.parent / "shared" / "EGA_SPEC.md"
    if not path.is_file():  # a clone without ../shared: nothing to compare against, which is no failure
        pytest.skip(f"no {path} beside the checkout")
    spec = path.read_text()
    section = spec.split("## 4.", 1)[1].split("## 5.", 1)[0]
    for figure in (*paper.IMPROVEMENT.values(), paper.GAP["linear"], paper.GAP["none"], paper.TAU):
        assert f"{figure:g}" in section, figure
    assert f"~{100 * paper.FRAC_ABOVE_TAU:.0f}%" in section
    assert paper.IMPROVEMENT["tinyshakespeare"] / 2 == paper.POSITIVE_CONTROL


BASE = {1: 1.70, 2: 1.74, 3: 1.72, 4: 1.75, 5: 1.71}


def study(fox_gain: dict[int, float], elementwise_gain: dict[int, float]) -> list:
    """short.yaml's baseline and EGA-1 (seeds 1-3 in main and ablation, seeds 4-5 in main only, as a
    spec of more seeds may declare them), one ablation gate (seeds 1-3), and two peers (seeds 1-5): FoX and an
    output gate (an empty key-bias slot, gate `none`). The runs' own throughput differs from gate to gate
    (what a shared machine gives); the leaderboard must not read it."""
    speed = {s: 1000.0 + 10 * s for s in BASE}

    def seeds(loss: dict[int, float], which: tuple[int, ...], slower: float = 1.0) -> dict[int, dict[str, float]]:
        return {s: {"final_val_loss": loss[s], "tokens_per_sec": speed[s] / slower} for s in which}

    ega1 = {s: BASE[s] - 0.011 - 0.001 * s for s in BASE}
    db2 = {s: BASE[s] + 0.002 * (-1) ** s for s in BASE}
    runs = [
        *finished_runs("none", "none", seeds(BASE, (1, 2, 3)), group="main", also_in=("ablation",)),
        *finished_runs("none", "none", seeds(BASE, (4, 5)), group="main"),
        *finished_runs("linear", "linear", seeds(ega1, (1, 2, 3), 1.5), "main", ("ablation",), n_params=1020),
        *finished_runs("linear", "linear", seeds(ega1, (4, 5), 1.5), group="main", n_params=1020),
        *finished_runs("db2", "db2", seeds(db2, (1, 2, 3), 2.0), n_params=1020),
    ]
    peers = {
        "fox": ("fox", "none", fox_gain, 1044),
        "output_elementwise": ("none", "output_elementwise", elementwise_gain, 1064),
    }
    for entry, (gate, output_gate, gain, params) in peers.items():
        per_seed = {s: {"final_val_loss": BASE[s] - gain[s], "tokens_per_sec": speed[s] / 3.0} for s in gain}
        runs += finished_runs(entry, gate, per_seed, group="peers", output_gate=output_gate, n_params=params)
    for r in runs:
        r.hparams.update(SHAPE, batch_size=BATCH)
    return runs


SHAPE, BATCH = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 32}, 32  # the synthetic runs' model


FOX = {1: 0.080, 2: 0.090, 3: 0.085, 4: 0.095, 5: 0.088}  # well above half the paper's figure
WORSE = {1: -0.020, 2: -0.025, 3: -0.018, 4: -0.022, 5: -0.030}  # the baseline is better


def by_claim(runs: list) -> dict[str, list[findings.Finding]]:
    variants = build_variants(runs)
    out: dict[str, list[findings.Finding]] = {}
    for f in study_findings(build_tables(variants), variants):
        out.setdefault(f.claim or f.kind, []).append(f)
    return out


def test_the_leaderboard_pairs_every_gate_with_the_baseline_over_the_seeds_both_have():
    runs = study(FOX, WORSE)
    final = {(r.run.entry, r.run.seed): r.metrics["final_val_loss"] for r in runs}
    baseline, board = leaderboard.leaderboard(build_variants(runs))
    assert baseline.label == "none" and sorted(baseline.by_seed("final_val_loss")) == [1, 2, 3, 4, 5]
    assert [e.variant.label for e in board] == ["fox", "linear", "db2", "output_elementwise"]  # by the difference
    assert board[-1].variant.gate == "output_elementwise"  # an output gate is no baseline
    seeds = {"fox": [1, 2, 3, 4, 5], "linear": [1, 2, 3, 4, 5], "db2": [1, 2, 3], "output_elementwise": [1, 2, 3, 4, 5]}
    for e in board:
        label, own = e.variant.label, seeds[e.variant.label]
        ref = [final[("none", s)] for s in own]
        ci = scipy.stats.ttest_rel(ref, [final[(label, s)] for s in own]).confidence_interval(0.95)
        assert e.diff.n == len(own) and (e.diff.low, e.diff.high) == pytest.approx((ci.low, ci.high), abs=1e-9)
        assert e.timed is None  # no bench given: no step time, whatever the runs' throughput
    assert {e.variant.label: e.params_added for e in board} == {
        "fox": 44,
        "linear": 20,
        "db2": 20,
        "output_elementwise": 64,
    }
    assert board[1].groups == ["main", "ablation"]  # EGA-1 pooled over the sections that show it


def bench_json(path: Path, shape: dict, batch: int, rows: dict[str, tuple[float, list[float] | None]]) -> Path:
    """An `ega bench` result of one size: gate -> (median step-time ratio, quartiles)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    timed = {g: {"time_ratio": r, "time_ratio_q1_q3": q} for g, (r, q) in rows.items()}
    path.write_text(json.dumps({"sizes": [{"size": "x", "shape": shape, "batch_size": batch, "rows": timed}]}))
    path.with_suffix(".md").write_text("bench\n")
    return path


def test_the_leaderboards_step_times_are_the_benchs_at_the_baselines_size(tmp_path):
    """The bench of the runs' shape and batch gives each gate's step time (its first table that timed the gate:
    the full table, then a bench of its own gates); another size, a compiled row, an untimed gate give none."""
    results = tmp_path / "results"
    (results / "runs").mkdir(parents=True)
    bench_json(results / "bench-cpu-32-true.json", SHAPE, BATCH, {"none": (1.0, [1.0, 1.0]), "linear": (1.13, None)})
    bench_json(
        results / "bench-peers" / "bench-cpu-32-true.json",
        SHAPE,
        BATCH,
        {"linear": (1.08, [1.0, 1.1]), "fox": (1.30, [1.09, 1.33]), "db2+compile": (0.9, [0.8, 1.0])},
    )
    bench_json(results / "bench-cpu-32-true-compile.json", SHAPE, BATCH, {"db2": (5.0, [5.0, 5.0])})
    bench_json(results / "bench-gpu-32-true.json", {**SHAPE, "n_embd": 256}, BATCH, {"output_elementwise": (1.1, None)})
    found = bench.benches(results / "runs", results)
    assert [source for _, source in found] == [
        "bench-cpu-32-true.md",
        "bench-gpu-32-true.md",
        "bench-peers/bench-cpu-32-true.md",
        "bench-cpu-32-true-compile.md",
    ]
    baseline, board = leaderboard.leaderboard(build_variants(study(FOX, WORSE)), found)
    timed = {e.variant.label: e.timed for e in board}
    assert timed["linear"] == bench.Timed(1.13, None, None, "bench-cpu-32-true.md")  # the full table first
    assert timed["fox"] == bench.Timed(1.30, 1.09, 1.33, "bench-peers/bench-cpu-32-true.md")
    assert timed["db2"] == bench.Timed(5.0, 5.0, 5.0, "bench-cpu-32-true-compile.md")  # its uncompiled row
    assert timed["output_elementwise"] is None  # timed only at another size
    row = next(leaderboard.table_line(i, e, baseline) for i, e in enumerate(board, 1) if e.variant.label == "fox")
    assert row.endswith("| [×1.300 (1.090–1.330)](bench-peers/bench-cpu-32-true.md) |")


def test_the_peers_claims_and_the_positive_control_from_synthetic_records():
    got = by_claim(study(FOX, WORSE))
    assert got["peer:fox"][0].verdict is Verdict.HOLDS
    assert got["peer:output_elementwise"][0].verdict is Verdict.DOES_NOT_HOLD
    assert {f.family_k for f in got["peer:fox"] + got["peer:output_elementwise"]} == {2}
    assert got["peer:fox"][0].against == "baseline `none`"  # not the output gate, which also has gate none
    (control,) = got["control"]
    assert control.verdict is Verdict.HOLDS and control.family_k == 4  # fox clears it at 98.75%
    assert control.section == leaderboard.LEADERBOARD and "0.0" in control.regime  # qualified by the scale
    # the resolution: the pooled std of the per-seed differences of every gate, and t at each n present
    diffs = {
        "fox": list(FOX.values()),
        "linear": [0.011 + 0.001 * s for s in BASE],
        "db2": [-0.002 * (-1) ** s for s in (1, 2, 3)],
        "output_elementwise": list(WORSE.values()),
    }
    dof = sum(len(d) - 1 for d in diffs.values())
    pooled = math.sqrt(sum((len(d) - 1) * np.var(d, ddof=1) for d in diffs.values()) / dof)
    assert control.details["pooled_std"] == pytest.approx(pooled, rel=1e-9)
    for n in (3, 5):
        h = control.details["resolution"][n]
        assert h.nominal == pytest.approx(scipy.stats.t.ppf(0.975, n - 1) * pooled / math.sqrt(n), rel=1e-9)
        assert h.family == pytest.approx(scipy.stats.t.ppf(1 - 0.05 / 8, n - 1) * pooled / math.sqrt(n), rel=1e-9)


def test_no_gate_with_two_seeds_leaves_the_control_undecided_and_every_gate_below_it_fails_it():
    one_seed = [r for r in study({1: 0.09}, {1: 0.01}) if r.run.seed == 1]
    got = by_claim(one_seed)
    assert got["control"][0].verdict is Verdict.TOO_FEW_SEEDS and got["control"][0].details["resolution"] == {}
    assert got["peer:fox"][0].verdict is Verdict.TOO_FEW_SEEDS
    small = {s: 0.010 + 0.001 * s for s in BASE}  # every gate measurably below the threshold
    got = by_claim(study(small, small))
    assert got["control"][0].verdict is Verdict.DOES_NOT_HOLD
    assert got["peer:fox"][0].verdict is Verdict.HOLDS  # lower loss all the same: the peer's own claim holds


def test_a_peer_that_has_not_run_counts_in_its_family_and_reads_no_data():
    runs = [replace(r, status="missing") if r.run.entry == "output_elementwise" else r for r in study(FOX, WORSE)]
    got = by_claim(runs)
    (missing,) = got["peer:output_elementwise"]
    assert missing.verdict is Verdict.NO_DATA and missing.family_k == 2
    assert got["control"][0].verdict is Verdict.HOLDS  # fox alone decides it


def write_spec(path: Path, entries: list[str]) -> Path:
    path.write_text("name: x\nconfigs: [configs/base.yaml]\nruns:\n" + "".join(f"  - {e}\n" for e in entries))
    return path


def test_a_run_declared_in_two_specs_is_one_run_shown_in_the_sections_of_both(tmp_path):
    short = write_spec(
        tmp_path / "short.yaml",
        ["{name: ts-none, variant: none, group: main, also_in: [ablation], seeds: [1, 2, 3, 4, 5], configs: [a.yaml]}"],
    )
    extra = write_spec(
        tmp_path / "seeds45.yaml", ["{name: ts-none, variant: none, group: main, seeds: [4, 5], configs: [a.yaml]}"]
    )
    for order in ([short, extra], [extra, short]):
        runs = spec.collect_runs(spec.load_spec(p, check_files=False) for p in order)
        assert sorted(r.run_name for r in runs) == [f"ts-none-seed{s}" for s in (1, 2, 3, 4, 5)]
        assert all(set(r.groups) == {"main", "ablation"} for r in runs)
    relabelled = write_spec(
        tmp_path / "other.yaml", ["{name: ts-none, variant: base, group: main, seeds: [4], configs: [a.yaml]}"]
    )
    with pytest.raises(spec.SpecError, match="one run has one label"):
        spec.collect_runs(spec.load_spec(p, check_files=False) for p in (short, relabelled))
