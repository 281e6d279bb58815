"""Issue 67: the paper-size study in the report, read through the engine from the protocol's issue-67 amendment. A
fake record set of A and B seed 1 (a shipped record's structure with the paper-size configs and a val/loss curve of
the test's own) gives "1 seed: no label" beside the paper's +0.103, B − A at every validation and A's final loss
read against the registered tolerance; a JSON of scripts/scrambled_future.py gives the leak's reading."""

from __future__ import annotations

import json
import math

import pytest

from ega_lightning.experiments import engine, protocol, report_assembly

from .helpers import REPO

SHIPPED = REPO / "results" / "runs" / "author-none-seed1.json"
SPEC = REPO / "ega_lightning" / "configs" / "sweeps" / "author_paper.yaml"
GATES = {"paper-author-none": "none", "paper-author-ega1": "author"}
STEPS = list(range(249, 5000, 250))  # a validation every 250 steps, the last at step 5,000


def _curve(start: float, end: float, wiggle: float) -> list[list[float]]:
    """A made-up val/loss curve from ``start`` to ``end``, not a straight line (B − A then differs step by step)."""
    n = len(STEPS) - 1
    return [[s, start + (end - start) * i / n + wiggle * math.sin(i)] for i, s in enumerate(STEPS)]


def _record(entry: str, curve: list[list[float]]) -> dict:
    """A shipped record's structure, made a paper-size run of ``entry`` (seed 1) with the given val/loss curve."""
    record = json.loads(SHIPPED.read_text(encoding="utf-8"))
    gate = GATES[entry]
    configs = ["configs/base.yaml", "configs/recipe/author_phase2.yaml", "configs/corpus/tinyshakespeare.yaml"]
    configs.append(f"configs/gate/{gate}.yaml")
    record |= {"run_name": f"{entry}-seed1", "configs": configs, "gate": gate, "max_steps": 5000}
    record["command"] = " ".join(["ega fit", *(f"-c {c}" for c in configs), *record["args"], "--seed_everything=1"])
    record["command"] += f" --run_name={entry}-seed1"
    record["hparams"] = record["hparams"] | {"gate": gate, "n_layer": 6, "n_head": 8, "n_embd": 256, "block_size": 256}
    record["scalars"] = {"val/loss": curve}
    return record


@pytest.fixture
def paper_report(tmp_path, monkeypatch):
    records = tmp_path / "results" / "runs"
    records.mkdir(parents=True)
    curves = {"paper-author-none": _curve(2.4, 1.49, 0.01), "paper-author-ega1": _curve(2.3, 1.40, 0.02)}
    for entry, curve in curves.items():
        (records / f"{entry}-seed1.json").write_text(json.dumps(_record(entry, curve)), encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # results/leak/ is read where the report runs: none there, nothing measured
    out = tmp_path / "report"
    report_assembly.write_report([SPEC], tmp_path / "no-runs", out, records)
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return curves, results, (out / "REPORT.md").read_text(encoding="utf-8")


def test_the_paper_size_section_reads_seed_one_with_no_label_beside_the_papers_numbers(paper_report):
    curves, results, report = paper_report
    a = {s: v for s, v in curves["paper-author-none"]}
    b = {s: v for s, v in curves["paper-author-ega1"]}
    (gain,) = [f for f in results["findings"] if f["kind"] == "paper_gain"]
    assert gain["ours"]["estimate"] == pytest.approx(a[4999] - b[4999]) and gain["ours"]["n"] == 1
    assert gain["verdict"] is None and (gain["runs_in"], gain["runs_planned"]) == (2, 12)
    assert gain["paper_figure"] == 0.103
    steps = [f for f in results["findings"] if f["kind"] == "paper_step"]
    assert len(steps) == 3 and all(f["ours"] is None and f["verdict"] is None for f in steps)  # no C, no E yet
    # B − A at every validation, from the records' values
    (curve,) = [d for d in results["drawn"] if d["kind"] == "curve_difference"]
    assert [step for step, _ in curve["by_seed"]["1"]] == STEPS
    assert [d for _, d in curve["by_seed"]["1"]] == pytest.approx([a[s] - b[s] for s in STEPS])
    # A's final loss against the paper's BASE and the registered tolerance
    base, ega = [d for d in results["drawn"] if d["kind"] == "against_figure"]
    ((seed,),) = [base["seeds"]]
    assert seed["minus_figure"] == pytest.approx(a[4999] - 1.4742)
    assert seed["within_tolerance"] is (abs(a[4999] - 1.4742) <= 0.04) and base["tolerance"] == 0.04
    assert ega["seeds"][0]["minus_figure"] == pytest.approx(b[4999] - 1.3712) and ega["tolerance"] is None
    # the summary and the claims table say it: one seed, no label, beside the paper's +0.103
    summary = report[: report.index("## Claims")]
    assert "**1 seed: no label; not read yet: 2 of 12 runs in**" in summary
    assert "B - A, loss(A) - loss(B) of `val/loss`" in summary and "the paper's +0.103" in summary
    assert "](paper_size-" in summary  # the curve of B - A, drawn
    assert "beside the paper's BASE 1.4742 (registered tolerance ±0.04)" in summary
    claims = report[report.index("## Claims") : report.index("## Method")]
    assert "at the paper's size) | +0.103 |" in claims and "**1 seed: no label; not read yet: 2 of 12" in claims
    assert "The leak at the paper's size (6 x 8 x 256, block 256), seed 1: not yet measured" in report


def test_the_leak_is_read_from_the_scrambled_future_json(tmp_path, monkeypatch):
    """A file of scripts/scrambled_future.py (made up here: two checkpoints, two cuts) read by the engine's figure
    kind: each cut's delta and interval and the total, of B and of its causal control, as the file holds them."""
    monkeypatch.chdir(tmp_path)

    def checkpoint(run: str, deltas: list[float]) -> dict:
        cuts = [
            {
                "cut": c,
                "windows": 8,
                "loss_true": 2.0,
                "loss_scrambled": 2.0 + d,
                "delta": d,
                "low": d - 0.01,
                "high": d + 0.01,
                "level": 0.95,
                "delta_by_position": [d] * c,
            }
            for c, d in zip((4, 8), deltas, strict=True)
        ]
        total = {"cuts": [4, 8], "windows": 8, "delta": sum(deltas) / 2, "low": -1.0, "high": 1.0, "level": 0.95}
        return {"run": run, "step": 20, "cuts": cuts, "total": total}

    leak = {
        "command": "python scripts/scrambled_future.py ...",
        "cpu": "a CPU",
        "checkpoints": [checkpoint("b-seed1", [0.03, 0.05]), checkpoint("c-seed1", [0.0, 0.0])],
    }
    (tmp_path / "leak.json").write_text(json.dumps(leak), encoding="utf-8")
    entry = {"kind": "scrambled_future", "file": "leak.json", "x": "b-seed1", "control": "c-seed1", "name": "toy"}
    inputs = engine.ReportInputs((), ())
    d = engine.FIGURES["scrambled_future"]("paper_size", entry, inputs)
    assert d.data["readings"]["x"]["total"]["delta"] == pytest.approx(0.04)
    assert [c["delta"] for c in d.data["readings"]["x"]["cuts"]] == [0.03, 0.05]
    assert d.data["readings"]["control"]["total"]["delta"] == 0.0
    assert "cut 4 +0.0300 [+0.0200, +0.0400]" in d.lines[0] and "every cut +0.0400" in d.lines[0]
    assert "`c-seed1` (the causal control)" in d.lines[0] and d.figure is not None
    gone = engine.FIGURES["scrambled_future"]("paper_size", entry | {"file": "none.json"}, inputs)
    assert "not yet measured" in gone.lines[0] and gone.figure is None
    assert protocol.current().figures["paper_size"]  # the protocol states them (its issue-67 amendment)
