"""Issue 56's registered study (configs/sweeps/rope.yaml, families `rope` and `beyond` of configs/protocol.yaml): each
design against the RoPE baseline the study names, and each design beyond its training block, read three ways at the
family's Bonferroni level once every planned run and evaluation is in, with no label before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import scipy.stats

from ega_lightning.errors import UserError
from ega_lightning.experiments import beyond_the_block, engine, figure_choice, report_markdown, rules, studies
from ega_lightning.experiments.beyond_the_block import BeyondTheBlock
from ega_lightning.experiments.comparisons import RunData, build_tables, build_variants
from ega_lightning.experiments.spec import Run, load_spec
from ega_lightning.experiments.studies import rope
from ega_lightning.experiments.study import Measured, ReportInputs

from .helpers import CONFIGS

SEEDS = (1, 2, 3, 4, 5)
FACTORS = (2, 4)  # the lengths the protocol's family `beyond` reads (`at:`), in blocks
GAIN = {2: 0.02, 4: -0.05}  # each run's loss on windows of 2 and 4 blocks below its own (about: `longer`)
# the spec's entries, read from it: variant -> (entry, gate, position)
SPEC = {r.variant: (r.entry, r.configs) for r in load_spec(CONFIGS / "sweeps/rope.yaml", check_files=False).runs}
GATES = {"rope-none": ("none", "rope"), "rope-linear": ("linear", "rope"), "fox-nopos": ("fox", "none")}
GATES |= {"alibi-nopos": ("alibi", "none"), "none-nopos": ("none", "none")}
# each variant's gain over the RoPE baseline per seed, chosen to land on every reading of the three-way rule
GAINS = {
    "rope-none": (0.0,) * 5,
    "rope-linear": (0.030, 0.034, 0.029, 0.031, 0.033),  # lower by more than the margin: holds
    "fox-nopos": (0.001, -0.001, 0.0005, 0.0, -0.0005),  # within +/-0.005: negligible
    "alibi-nopos": (-0.040, -0.044, -0.041, -0.039, -0.043),  # higher by more than the margin: does not hold
    "none-nopos": (0.02, -0.03, 0.04, -0.02, 0.0),  # straddles: too few seeds to tell
}


def losses() -> dict[str, dict[int, float]]:
    return {v: {s: 1.60 + 0.01 * s - g for s, g in zip(SEEDS, gains, strict=True)} for v, gains in GAINS.items()}


def runs(by_variant: dict[str, dict[int, float]], learned_baseline: bool = True) -> list[RunData]:
    """The study's runs (finished where ``by_variant`` has the seed's loss), and a learned-position baseline of the
    same size in another group, which no design of the study may be set against."""
    out = []
    for variant, (gate, position) in GATES.items():
        entry = SPEC[variant][0]
        for seed in SEEDS:
            run = Run(Path("configs/sweeps/rope.yaml"), entry, seed, (), (), rope.GROUP, variant)
            out.append(finished(run, gate, position, by_variant.get(variant, {}).get(seed)))
    for seed in SEEDS if learned_baseline else ():
        run = Run(Path("configs/sweeps/short.yaml"), "ts-none", seed, (), (), "main", "none")
        out.append(finished(run, "none", "learned", 1.0))  # far below every RoPE design: it would win every pair
    return out


def finished(run: Run, gate: str, position: str, loss: float | None) -> RunData:
    common = {"run": run, "corpus": "tinyshakespeare", "gate": gate}
    if loss is None:
        return RunData(status="missing", reason="not run", **common)
    model = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128, "dropout": 0.0, "position": position}
    hparams = {"corpus": "tinyshakespeare", "gate": gate, "seed": run.seed, **model}
    metrics = {"final_val_loss": loss, "best_val_loss": loss, "final_gap": 0.1}
    return RunData(
        status="done", reason="", hparams=hparams, metrics=metrics, max_steps=1500, n_params=800_000, **common
    )


def longer(by_variant: dict[str, dict[int, float]], gain: dict[int, float]) -> tuple[BeyondTheBlock, ...]:
    """Each finished run's loss on windows of ``f`` x 128: its own loss less ``gain[f]``, plus f/4000 x seed; its loss
    by position a curve of its own."""
    return tuple(
        BeyondTheBlock(f"{SPEC[v][0]}-seed{s}", 1499, f * 128, loss - gain[f] + 0.00025 * f * s, curve(loss, s, f), "c")
        for v, by_seed in by_variant.items()
        for s, loss in by_seed.items()
        for f in FACTORS
    )


PAST = {2: 0.02, 4: -0.05}  # each run's loss past its block below its loss at the block's last 32 positions


def curve(loss: float, seed: int, factor: int) -> tuple[float, ...]:
    """The loss along a window of ``factor`` blocks: flat over the block, then lower by ``PAST[factor]`` (less
    factor/4000 x seed) at every position past it."""
    edge = loss + 0.001 * seed
    past = edge - PAST[factor] + 0.00025 * factor * seed
    return tuple(edge if p < 128 else past for p in range(factor * 128))


def found(by_variant, gain=None, learned_baseline=True):
    return measured_and_found(by_variant, gain, learned_baseline)[2]


def measured_and_found(by_variant, gain=None, learned_baseline=True):
    """The inputs of the report, what the study measured of them, and its findings (families corrected)."""
    variants = build_variants(runs(by_variant, learned_baseline))
    evaluations = longer(by_variant, gain or GAIN)
    inputs = ReportInputs(tuple(build_tables(variants)), tuple(variants), beyond_the_block=evaluations)
    (measured,) = studies.measure(inputs, [rope.STUDY])
    return inputs, measured.data, studies.run_studies(inputs, [measured])


def three_way(values: list[float], k: int) -> tuple[str, tuple[float, float]]:
    lo, hi = scipy.stats.ttest_1samp(values, 0.0).confidence_interval(1 - 0.05 / k)
    m = rules.margin_of("loss")
    label = "holds" if lo > m else "negligible" if -m <= lo and hi <= m else "does not hold" if hi < -m else None
    return label or "too few seeds to tell", (lo, hi)


def test_each_design_is_read_against_the_rope_baseline_three_ways_at_k_4():
    by_variant = losses()
    gains = [f for f in found(by_variant) if f.kind == "rope_gain"]
    assert [f.claim for f in gains] == [f"rope:{v}" for v in rope.DESIGNS]
    for f in gains:
        variant = f.claim.removeprefix("rope:")
        values = [by_variant["rope-none"][s] - by_variant[variant][s] for s in SEEDS]  # never the learned baseline's
        label, interval = three_way(values, 4)
        assert (f.family, f.family_k, f.rule_name) == ("rope", 4, "effect")
        assert (f.corrected.low, f.corrected.high) == pytest.approx(interval, abs=1e-12)
        assert f.verdict.value == label, variant
        assert "`rope-none`" in (f.against or "")
    assert {f.verdict.value for f in gains} == {"holds", "negligible", "does not hold", "too few seeds to tell"}


def test_each_design_past_its_block_is_its_loss_at_the_blocks_end_less_past_it_in_the_same_windows_at_k_10():
    """The amendment of 2026-12-07: per checkpoint, the mean loss at positions 97-128 minus at 129 to the window's
    length, of the same windows; the window contrast it replaced (loss on windows of the block − on the longer
    windows) kept beside it, with the label it was read as."""
    by_variant = losses()
    beyond = [f for f in found(by_variant) if f.kind == "beyond_the_block"]
    assert sorted((f.claim, f.details["eval_block_size"]) for f in beyond) == sorted(
        (f"beyond:{v}", L) for v in GAINS for L in (256, 512)
    )
    for f in beyond:
        # past the block of 256, every loss lower by about 0.02 (reads past its block); of 512 higher by about 0.05
        # (does not extrapolate)
        length = f.details["eval_block_size"]
        factor = length // 128
        values = [PAST[factor] - 0.00025 * factor * s for s in SEEDS]
        label, interval = three_way(values, 10)
        assert (f.family, f.family_k, f.details["block_size"]) == ("beyond", 10, 128)
        assert (f.corrected.low, f.corrected.high) == pytest.approx(interval, abs=1e-9)
        assert f.verdict.value == label == ("holds" if length == 256 else "does not hold")
        reading = "reads past its block" if length == 256 else "does not extrapolate"
        contrast = [GAIN[factor] - 0.00025 * factor * s for s in SEEDS]
        window = f.details["window_contrast"]
        assert (window.low, window.high) == pytest.approx(three_way(contrast, 1)[1], abs=1e-9)
        assert f.details["replaces"] == three_way(contrast, 10)[0]
        replaced = f"in place of the window contrast's **{f.details['replaces']}** (exploratory)"
        assert engine.label_text(f) == f"effect **{label}** ({reading}); {replaced}"


def test_no_label_is_read_before_the_last_planned_run_and_evaluation():
    by_variant = losses()
    del by_variant["alibi-nopos"][3]  # 24 of 25 runs, so 48 of 50 evaluations
    for f in found(by_variant):
        assert f.verdict is None and f.rule_name is None
        assert (
            "24 of 25 planned runs in" if f.kind == "rope_gain" else "48 of 50 planned evaluations in"
        ) in engine.verdict_cell(f)
    gain = next(f for f in found(by_variant) if f.claim == "rope:alibi-nopos")
    assert gain.interval is not None and gain.interval.n == 4  # the interim interval, on the seeds both sides have
    assert all(
        "no run finished yet (0 of 25" in engine.verdict_cell(f)
        for f in found({}, learned_baseline=False)
        if f.kind == "rope_gain"
    )


def test_the_report_reads_what_the_runner_writes_and_refuses_a_file_of_another_run(tmp_path):
    good = {"run_name": "nopos-ts-fox-seed1", "step": 1499, "eval_block_size": 4, "val_loss": 1.5}
    good |= {"loss_by_position": [1.7, 1.5, 1.45, 1.35], "command": "ega validate ...", "cpu": "AMD EPYC"}
    (tmp_path / "nopos-ts-fox-seed1-T4.json").write_text(json.dumps(good))
    (read,) = beyond_the_block.load(tmp_path)
    assert (read.run_name, read.eval_block_size, read.loss, read.by_position) == good_values(good)
    (tmp_path / "nopos-ts-fox-seed2-T4.json").write_text(json.dumps(good))  # seed 1's numbers under seed 2's name
    with pytest.raises(UserError, match=r"nopos-ts-fox-seed2-T4\.json is not an evaluation beyond the block"):
        beyond_the_block.load(tmp_path)


def good_values(record: dict) -> tuple:
    return record["run_name"], record["eval_block_size"], record["val_loss"], tuple(record["loss_by_position"])


def test_the_loss_by_position_figure_draws_each_designs_mean_curve_with_the_block_marked():
    by_variant = losses()
    inputs, data, _ = measured_and_found(by_variant)
    drawn = rope.figures(inputs, data)
    assert [name for _, name, _ in drawn] == ["rope-beyond-T256.png", "rope-beyond-T512.png"]
    for _, name, fig in drawn:
        length = int(name.removesuffix(".png").split("-T")[1])
        lines = {line.get_label().split(" (n=")[0]: line for line in fig.axes[0].get_lines()}
        assert set(lines) - {"_child0", "_child1"} >= set(GAINS)
        width = length // 32  # 32 points along the window, each the mean of `width` positions
        for variant, by_seed in by_variant.items():  # the mean over seeds of each run's own curve, bin by bin
            per_position = [
                sum(curve(loss, s, length // 128)[p] for s, loss in by_seed.items()) / 5 for p in range(length)
            ]
            expected = [sum(per_position[b * width : (b + 1) * width]) / width for b in range(32)]
            assert list(lines[variant].get_xdata()) == [b * width + (width + 1) / 2 for b in range(32)]
            assert list(lines[variant].get_ydata()) == pytest.approx(expected, abs=1e-12)
        marks = [line for line in fig.axes[0].get_lines() if line.get_linestyle() == "--"]
        assert [list(line.get_xdata()) for line in marks] == [[128, 128]]  # the training block


def test_its_figures_are_drawn_in_its_groups_section_under_its_findings_and_absent_without_runs(tmp_path):
    """The study has no section of its own (its findings are its group's sentences): `figure_choice.draw` saves its
    loss-by-position figures under the title of its group's table, which `report_markdown.section` links there."""
    inputs, data, _ = measured_and_found(losses())
    drawn, by_study = figure_choice.draw(tmp_path, inputs, [Measured(rope.STUDY, data)])
    (table,) = [t for t in inputs.tables if t.group == rope.GROUP]
    assert drawn[table.title][-2:] == [
        ("loss by position, windows of 256", "rope-beyond-T256.png"),
        ("loss by position, windows of 512", "rope-beyond-T512.png"),
    ]
    assert (tmp_path / "rope-beyond-T512.png").is_file() and "rope" not in by_study
    section = report_markdown.section(rope.GROUP, [table], [], drawn, tmp_path)
    assert f"![{table.title}: loss by position, windows of 256](rope-beyond-T256.png)" in section
    empty = ReportInputs((), ())
    assert rope.figures(empty) == []
