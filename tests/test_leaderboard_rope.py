"""The leaderboard's RoPE board (issue 56): each design of configs/sweeps/rope.yaml against the RoPE baseline the study
names, ranked and banded on its own, in the section, the figure and results.json beside the learned-position board,
and absent, every output as it was, while no RoPE baseline has finished. Synthetic records; every interval
recomputed with scipy from the per-seed differences."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from ega_lightning.experiments import bench, studies
from ega_lightning.experiments.comparisons import RunData, build_tables, build_variants
from ega_lightning.experiments.figure_choice import save_png
from ega_lightning.experiments.spec import Run
from ega_lightning.experiments.studies import leaderboard, rope
from ega_lightning.experiments.study import ReportInputs

from .test_leaderboard import FOX, WORSE, study
from .test_rope_study import GAINS, SEEDS, finished, losses, runs

ROPE_SHAPE = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128}  # test_rope_study's runs
BATCH = 32


def with_batch(rows: list[RunData]) -> list[RunData]:
    for r in rows:
        if r.status == "done":
            r.hparams["batch_size"] = BATCH  # `ega bench` names a size by shape and batch
    return rows


def decoy() -> list[RunData]:
    """A learned-position model labelled like the RoPE baseline, in another section, far below every design: the
    board must not take it for the study's reference."""
    out = []
    for seed in SEEDS:
        run = Run(Path("configs/sweeps/short.yaml"), "ts-decoy", seed, (), (), "main", rope.REFERENCE)
        out.append(finished(run, "none", "learned", 0.9))
    return out


def everything(by_variant: dict[str, dict[int, float]] | None = None) -> list[RunData]:
    """The learned-position leaderboard of tests/test_leaderboard.py and the RoPE study's runs, one report's."""
    return study(FOX, WORSE) + with_batch(runs(losses() if by_variant is None else by_variant, learned_baseline=False))


def inputs_of(rows: list[RunData], benches=()) -> ReportInputs:
    variants = build_variants(rows)
    return ReportInputs(tuple(build_tables(variants)), tuple(variants), benches=tuple(benches))


def gains_of(by_variant: dict[str, dict[int, float]], design: str) -> list[float]:
    return [by_variant[rope.REFERENCE][s] - by_variant[design][s] for s in SEEDS]


def test_each_design_is_paired_by_seed_with_rope_none_never_a_learned_position_none():
    by_variant = losses()
    rows = with_batch(runs(by_variant) + decoy())  # a learned `none` (1.0) and a learned `rope-none` (0.9) present
    baseline, board = leaderboard.leaderboard(build_variants(rows), panel=leaderboard.ROPE)
    assert baseline.label == rope.REFERENCE and {r.run.entry for r in baseline.runs} == {"rope-ts-none"}
    assert {r.hparams["position"] for r in baseline.done} == {"rope"}
    assert sorted(e.variant.label for e in board) == sorted(rope.DESIGNS)  # none-nopos, gate-less, among them
    for e in board:
        ci = scipy.stats.ttest_1samp(gains_of(by_variant, e.variant.label), 0.0).confidence_interval(0.95)
        assert e.diff.n == 5 and e.diff.estimate == pytest.approx(np.mean(gains_of(by_variant, e.variant.label)))
        assert (e.diff.low, e.diff.high) == pytest.approx((ci.low, ci.high), abs=1e-12)
        assert e.groups == [rope.GROUP] and e.params_added == 0
    # best first; bands walk down from the best at 1 - 0.05/k, k the four designs ranked (the control's k is 4 too,
    # but of other gates): a design joins the band while design − the band's first includes 0
    estimates = [e.diff.estimate for e in board]
    assert estimates == sorted(estimates, reverse=True)
    bands, band, first = [], 0, None
    for e in board:
        if first is not None:
            d = [by_variant[e.variant.label][s] - by_variant[first][s] for s in SEEDS]
            low, high = scipy.stats.ttest_1samp(d, 0.0).confidence_interval(1 - 0.05 / 4)
            first = first if low <= 0 <= high else None
        if first is None:
            band, first = band + 1, e.variant.label
        bands.append(band)
    assert [e.band for e in board] == bands == [1, 1, 2, 3]
    # no RoPE baseline finished: no board to rank, though a learned `none` and a learned `rope-none` have
    no_reference = {v: by_seed for v, by_seed in by_variant.items() if v != rope.REFERENCE}
    rows = with_batch(runs(no_reference) + decoy())
    baseline, board = leaderboard.leaderboard(build_variants(rows), panel=leaderboard.ROPE)
    assert baseline is None and len(board) == 4 and all(e.diff is None for e in board)


def test_a_design_of_another_setup_than_the_rope_baseline_is_left_out_of_the_board():
    rows = with_batch(runs(losses()))
    for r in rows:
        if r.run.variant == "fox-nopos":
            r.hparams["dropout"] = 0.1  # another recipe than the RoPE baseline's, not only another position
    _, board = leaderboard.leaderboard(build_variants(rows), panel=leaderboard.ROPE)
    assert sorted(e.variant.label for e in board) == sorted(set(rope.DESIGNS) - {"fox-nopos"})


def test_the_section_json_and_figure_are_the_learned_boards_alone_until_a_rope_baseline_finishes(tmp_path):
    """Without RoPE runs, and with RoPE runs none of which has finished, the section, results.json's leaderboard and
    the figure's PNG are those of the learned board alone; the positive control reads the learned board either way."""
    alone = inputs_of(study(FOX, WORSE))
    unfinished = inputs_of(everything({}))  # every RoPE run declared, none finished
    outputs = {}
    for name, inputs in (("alone", alone), ("unfinished", unfinished), ("rope", inputs_of(everything()))):
        (m,) = studies.measure(inputs, [leaderboard.STUDY])
        found = studies.run_studies(inputs, [m])
        drawn = [("leaderboard", "leaderboard-tinyshakespeare.png")]
        (figure,) = leaderboard.board_figure(inputs, m.data)
        png = save_png(figure[2], tmp_path / f"{name}.png")
        outputs[name] = {
            "section": leaderboard.leaderboard_section(inputs, m.data, found, drawn),
            "json": json.loads(json.dumps(leaderboard.as_json(inputs, m.data), default=repr)),
            "png": (tmp_path / png).read_bytes(),
            "axes": len(figure[2].axes),
            "control": [
                (f.family, f.family_k, f.details["gates"], f.details["best"]) for f in found if f.kind == "control"
            ],
        }
    assert outputs["unfinished"] == outputs["alone"]
    assert outputs["alone"]["axes"] == 1 and "rope" not in outputs["alone"]["json"]
    assert not any(line.startswith("###") for line in outputs["alone"]["section"])
    with_rope = outputs["rope"]
    assert with_rope["control"] == outputs["alone"]["control"] == [("control", 4, 4, "FoX `fox`")]
    # the learned board's lines stand as they were, the RoPE board after them, the figure's link last
    cut = with_rope["section"].index(f"### {leaderboard.ROPE.name}")
    assert with_rope["section"][:cut] == outputs["alone"]["section"][:-2]
    assert with_rope["section"][-2:] == outputs["alone"]["section"][-2:]
    assert {k: v for k, v in with_rope["json"].items() if k != "rope"} == outputs["alone"]["json"]
    assert with_rope["axes"] == 2 and with_rope["png"] != outputs["alone"]["png"]


def test_the_rope_board_has_its_sub_heading_sentence_table_and_json_rows():
    by_variant = losses()
    inputs = inputs_of(everything(by_variant))
    (m,) = studies.measure(inputs, [leaderboard.STUDY])
    _, board = m.data.rope
    lines = leaderboard.leaderboard_section(inputs, m.data, studies.run_studies(inputs, [m]), [])
    start = lines.index(f"### {leaderboard.ROPE.name}")
    sentence, head, rows = lines[start + 2], lines[start + 4], lines[start + 5 : start + 9]
    assert f"`{rope.REFERENCE}` (5 finished seeds)" in sentence and "(k = 4)" in sentence
    assert head.startswith("| rank | band | design |") and "RoPE baseline − design" in head
    learned_head = lines[lines.index(leaderboard.table_head())]
    assert head.count("|") == learned_head.count("|")  # the same columns
    assert lines[start + 9] == ""
    for rank, (row, e) in enumerate(zip(rows, board, strict=True), 1):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[:2] == [str(rank), str(e.band)] and f"`{e.variant.label}`" in cells[2]
        assert cells[3] == rope.GROUP and cells[4] == "5 (1, 2, 3, 4, 5)" and cells[-1] == "—"
    rope_json = leaderboard.as_json(inputs, m.data)["rope"]
    assert rope_json["baseline"] == {"variant": rope.REFERENCE, "seeds": list(SEEDS)}
    assert [r["variant"] for r in rope_json["rows"]] == [e.variant.label for e in board]
    for r in rope_json["rows"]:
        assert r["diff_final_val_loss"].estimate == pytest.approx(np.mean(gains_of(by_variant, r["variant"])))
        assert r["seeds_paired"] == list(SEEDS) and r["groups"] == [rope.GROUP]


def test_the_figure_puts_the_rope_designs_in_a_second_panel_with_their_intervals():
    by_variant = losses()
    inputs = inputs_of(everything(by_variant))
    (m,) = studies.measure(inputs, [leaderboard.STUDY])
    ((_, name, fig),) = leaderboard.board_figure(inputs, m.data)
    assert name == "leaderboard-tinyshakespeare.png"
    learned_ax, rope_ax = fig.axes
    assert (learned_ax.get_title(), rope_ax.get_title()) == ("learned positions", "RoPE baseline")
    for ax, labels in ((learned_ax, ["fox", "linear", "db2", "output_elementwise"]), (rope_ax, None)):
        drawn = points_of(ax)
        if labels is not None:
            assert list(drawn) == labels
            continue
        assert sorted(drawn) == sorted(rope.DESIGNS)
        for design, (estimate, low, high) in drawn.items():
            gains = gains_of(by_variant, design)
            ci = scipy.stats.ttest_1samp(gains, 0.0).confidence_interval(0.95)
            assert (estimate, low, high) == pytest.approx((np.mean(gains), ci.low, ci.high), abs=1e-12)
    # the positive control's threshold on the board it reads alone
    dashed = [[line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"] for ax in fig.axes]
    assert dashed == [[pytest.approx(0.0515)], []]


def points_of(ax) -> dict[str, tuple[float, float, float]]:
    """label -> (estimate, low, high) of each row an errorbar drew, top row first."""
    labels = {tick: label.get_text() for tick, label in zip(ax.get_yticks(), ax.get_yticklabels(), strict=True)}
    rows = []
    for container in ax.containers:
        data, _, (bars,) = container.lines
        (x,), (y,) = data.get_xdata(), data.get_ydata()
        ((low, _), (high, _)) = bars.get_segments()[0]
        rows.append((y, labels[y], (x, low, high)))
    return {label: values for _, label, values in sorted(rows, key=lambda row: -row[0])}


def test_a_rope_bench_times_the_rope_designs_at_their_position_and_the_learned_board_never_reads_it(tmp_path):
    """`ega bench --position rope` at the runs' shape times rope-linear (its row `linear`); a design without positions
    has no row at RoPE (—), and a bench without --position, whose baseline is learned, times no RoPE design."""
    results = tmp_path / "results"
    (results / "runs").mkdir(parents=True)
    write_bench(results / "bench-cpu-32-true.json", None, {"linear": 1.5, "fox_nopos": 1.6})
    write_bench(results / "bench-rope" / "bench-cpu-32-true.json", "rope", {"linear": 1.1, "fox": 1.2})
    write_bench(results / "bench-learned" / "bench-cpu-32-true.json", "learned", {"fox": 1.3})
    found = bench.benches(results / "runs", results)
    assert [bench.bench_position(result) for result, _ in found] == ["learned", "learned", "rope"]
    rows = with_batch(runs(losses()))
    _, board = leaderboard.leaderboard(build_variants(rows), found, leaderboard.ROPE)
    timed = {e.variant.label: e.timed for e in board}
    assert timed == {
        "rope-linear": bench.Timed(1.1, None, None, "bench-rope/bench-cpu-32-true.md"),
        "fox-nopos": None,
        "alibi-nopos": None,
        "none-nopos": None,
    }
    # the learned board of the same shape: its `fox` from the learned bench, never the RoPE bench's row
    learned = study(FOX, WORSE)
    for r in learned:
        r.hparams.update(ROPE_SHAPE, batch_size=BATCH)
    _, board = leaderboard.leaderboard(build_variants(learned), found)
    assert {e.variant.label: e.timed and e.timed.ratio for e in board} == {
        "fox": 1.3,
        "linear": 1.5,
        "db2": None,
        "output_elementwise": None,
    }


def write_bench(path: Path, position: str | None, ratios: dict[str, float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = {"none": {"time_ratio": 1.0}, **{g: {"time_ratio": r} for g, r in ratios.items()}}
    size = {"size": "cpu", "shape": ROPE_SHAPE, "batch_size": BATCH, "rows": rows}
    path.write_text(json.dumps({"position": position, "sizes": [size]}))
    path.with_suffix(".md").write_text("bench\n")


def test_no_rope_board_without_rope_variants():
    boards = leaderboard.measure(build_variants(study(FOX, WORSE)))
    assert boards.rope == (None, [])
    assert set(GAINS) == {rope.REFERENCE, *rope.DESIGNS}  # the fixture covers every design the study names
