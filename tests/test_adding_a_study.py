"""Issue 69: a study whose metrics exist is one family and one verdict in the protocol and one sweep file, with no
Python. docs/adding-a-study.md's example, copied as written, on a copy of shipped records, adds its section, its
claim's row and its finding to the report."""

from __future__ import annotations

import json
import re
import statistics

import pytest

from ega_lightning.experiments import engine, protocol, report_assembly

from .helpers import REPO

DOC = REPO / "docs" / "adding-a-study.md"
SHIPPED = REPO / "results" / "runs"
# the doc's entries, read from the shipped runs of the same configuration (short.yaml's baseline, peers.yaml's FoX)
COPIED = {"fs-none": "ts-none", "fs-fox": "ts-fox"}
SEEDS = (1, 2, 3, 4, 5)


def _blocks(text: str) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", text, flags=re.S)


def _pasted(tmp_path, monkeypatch, family: str, verdict: str) -> protocol.Protocol:
    """The shipped protocol with a doc's two entries pasted where the doc says (under families: and under
    verdicts:), loaded from a copy and made the one the report reads."""
    text = protocol.PATH.read_text(encoding="utf-8")
    text = text.replace("\n# verdicts by the kind of finding", "\n" + family + "# verdicts by the kind of finding", 1)
    text = text.replace("\nverdicts:\n", "\nverdicts:\n" + verdict, 1)
    copy = tmp_path / "protocol.yaml"
    copy.write_text(text, encoding="utf-8")
    registered = protocol.load(copy)
    monkeypatch.setattr(protocol, "current", lambda: registered)
    return registered


@pytest.mark.skipif(not all((SHIPPED / f"{r}-seed1.json").is_file() for r in COPIED.values()), reason="no records")
def test_the_docs_study_entry_adds_its_section_to_the_report_with_no_python(tmp_path, monkeypatch):
    sweep, family, verdict = _blocks(DOC.read_text(encoding="utf-8"))
    registered = _pasted(tmp_path, monkeypatch, family, verdict)
    assert "fox_study" in registered.families and registered.verdicts["fox_study"].rule == "lower"
    # a copy of five shipped seeds of each side, under the doc's run names
    records = tmp_path / "results" / "runs"
    records.mkdir(parents=True)
    losses: dict[str, dict[int, float]] = {}
    for new, old in COPIED.items():
        for seed in SEEDS:
            record = json.loads((SHIPPED / f"{old}-seed{seed}.json").read_text(encoding="utf-8"))
            record["run_name"] = f"{new}-seed{seed}"
            (records / f"{new}-seed{seed}.json").write_text(json.dumps(record), encoding="utf-8")
            losses.setdefault(new, {})[seed] = record["scalars"]["val/loss"][-1][1]
    spec = tmp_path / "fox-study.yaml"
    spec.write_text(sweep, encoding="utf-8")
    monkeypatch.chdir(REPO)  # its configs, as the doc names them, from the repository root
    out = tmp_path / "report"
    report_assembly.write_report([spec], tmp_path / "no-runs", out, records)

    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    (finding,) = [f for f in results["findings"] if f["kind"] == "fox_study"]
    per_seed = [losses["fs-none"][s] - losses["fs-fox"][s] for s in SEEDS]  # y − x, paired by seed
    assert finding["ours"]["estimate"] == pytest.approx(statistics.mean(per_seed))
    assert finding["ours"]["n"] == 5 and finding["family"] == "fox_study" and finding["family_k"] == 1
    assert finding["rule_name"] == "lower" and finding["registration"]["runs"] == 10  # marked
    assert finding["verdict"] in ("holds", "negligible", "does not hold", "too few seeds to tell")
    (row,) = [c for c in results["claims"] if c["claim"] == "fox-study:fox"]
    assert row["section"] == "fox-study" and row["verdict"] == finding["verdict"]
    report = (out / "REPORT.md").read_text(encoding="utf-8")
    section = report[report.index("## fox-study\n") :]
    assert "- FoX `fox` against its baseline `none`: " in section  # its sentence, from the engine's templates
    assert "| FoX: a lower final val loss than its baseline" in report  # its row of the claims table
    assert "fox_study" in engine.unplaced(set()).families  # read by the engine: no module of its own


GATE_DOC = REPO / "docs" / "your-own-gate.md"
# the leaderboard's gates the test's report holds beside the user's (short.yaml's and peers.yaml's, as shipped)
BOARD_SPEC = """name: board
configs: [configs/base.yaml, configs/size/cpu.yaml]
args: [--trainer.enable_progress_bar=false]
runs:
  - {name: ts-none, variant: none, group: main, also_in: [ablation], seeds: [1, 2, 3, 4, 5],
     configs: [configs/corpus/tinyshakespeare.yaml, configs/gate/none.yaml]}
  - {name: ts-linear, variant: linear, group: main, also_in: [ablation], seeds: [1, 2, 3, 4, 5],
     configs: [configs/corpus/tinyshakespeare.yaml, configs/gate/linear.yaml]}
  - {name: ts-fox, variant: fox, group: peers, seeds: [1, 2, 3, 4, 5],
     configs: [configs/corpus/tinyshakespeare.yaml, configs/gate/fox.yaml]}
"""
# the user's runs, read from shipped runs of one setup: their baseline is a copy of the shipped one's, their gate
# ALiBi's records renamed `mygate`
USERS = {"mg-none": ("ts-none", None), "mg-mygate": ("ts-alibi", "mygate")}


def _copy_records(records, copies: dict[str, tuple[str, str | None]]) -> dict[str, dict[int, float]]:
    """Writes each shipped record of ``copies`` under its new run name (its gate renamed where one is given);
    returns each new entry's final val loss by seed."""
    losses: dict[str, dict[int, float]] = {}
    for new, (old, gate) in copies.items():
        for seed in SEEDS:
            record = json.loads((SHIPPED / f"{old}-seed{seed}.json").read_text(encoding="utf-8"))
            record["run_name"] = f"{new}-seed{seed}"
            if gate is not None:  # as the user's sweep ran it: their gate's config in place of the shipped one's
                shipped = f"configs/gate/{record['gate']}.yaml"
                record["configs"] = [f"configs/gate/{gate}.yaml" if c == shipped else c for c in record["configs"]]
                record["gate"] = record["hparams"]["gate"] = gate
            (records / f"{new}-seed{seed}.json").write_text(json.dumps(record), encoding="utf-8")
            losses.setdefault(new, {})[seed] = record["scalars"]["val/loss"][-1][1]
    return losses


def _t_interval(values: list[float], level: float) -> tuple[float, float]:
    from scipy import stats

    half = stats.t.ppf(0.5 + level / 2, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return statistics.mean(values) - half, statistics.mean(values) + half


@pytest.mark.skipif(
    not all(
        (SHIPPED / f"{r}-seed{s}.json").is_file() for r in ("ts-none", "ts-linear", "ts-fox", "ts-alibi") for s in SEEDS
    ),
    reason="no records",
)
def test_the_users_gate_reaches_the_leaderboard_with_its_interval_and_band_outside_the_control(tmp_path, monkeypatch):
    """Issue 69's 'Done when': docs/your-own-gate.md's study entry, copied as written, puts the user's gate on the
    leaderboard with its interval (against its own baseline, paired by seed) and its band; the shipped gates beside
    it and the positive control read as they do without it."""
    sweep, entries = _blocks(GATE_DOC.read_text(encoding="utf-8"))[-2:]
    family, verdict = entries.split("# protocol.yaml, under verdicts:\n")
    registered = _pasted(tmp_path, monkeypatch, family, verdict)
    assert registered.families["mygate"].leaderboard and "mygate" not in registered.leaderboard
    records = tmp_path / "results" / "runs"
    records.mkdir(parents=True)
    losses = _copy_records(records, {r: (r, None) for r in ("ts-none", "ts-linear", "ts-fox")})
    losses |= _copy_records(records, USERS)
    board, users = tmp_path / "board.yaml", tmp_path / "mygate.yaml"
    board.write_text(BOARD_SPEC, encoding="utf-8")
    users.write_text(sweep, encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # no bench of the repository: the board's step times are not what is read here

    def report(specs: list, name: str) -> dict:
        report_assembly.write_report(specs, tmp_path / "no-runs", tmp_path / name, records)
        return json.loads((tmp_path / name / "results.json").read_text(encoding="utf-8"))

    with_gate, without = report([board, users], "with"), report([board], "without")
    rows = {r["variant"]: r for r in with_gate["leaderboard"]["rows"]}
    mine = rows["mygate"]
    per_seed = [losses["mg-none"][s] - losses["mg-mygate"][s] for s in SEEDS]  # its own baseline − its gate
    assert mine["against"] == "mygate/none" and mine["seeds_paired"] == list(SEEDS)
    # its interval: the paired Student-t interval at 95 % of its own baseline − its gate, from the records' losses
    low, high = _t_interval(per_seed, 0.95)
    assert mine["diff_final_val_loss"]["estimate"] == pytest.approx(statistics.mean(per_seed))
    assert (mine["diff_final_val_loss"]["low"], mine["diff_final_val_loss"]["high"]) == pytest.approx((low, high))
    ranked = [r["diff_final_val_loss"]["estimate"] for r in with_gate["leaderboard"]["rows"]]
    assert ranked == sorted(ranked, reverse=True)  # ranked with the shipped gates, best first
    # its band, walked down from the best as the board says: a gate joins the band of the band's first gate while
    # their paired difference includes 0 at 1 − 0.05/k, k the control family's gates (linear and FoX)
    runs = {"linear": "ts-linear", "fox": "ts-fox", "mygate": "mg-mygate"}
    bands, band, first = {}, 0, None
    for row in with_gate["leaderboard"]["rows"]:
        name = runs[row["variant"]]
        if first is not None:
            lo, hi = _t_interval([losses[name][s] - losses[first][s] for s in SEEDS], 1 - 0.05 / 2)
            first = first if lo <= 0 <= hi else None
        band, first = (band + 1, name) if first is None else (band, first)
        bands[row["variant"]] = band
    assert {r["variant"]: r["band"] for r in with_gate["leaderboard"]["rows"]} == bands
    # the shipped gates beside it are read as without it, against the board's own baseline
    before = {r["variant"]: r for r in without["leaderboard"]["rows"]}
    assert (
        set(before) == set(rows) - {"mygate"}
        and with_gate["leaderboard"]["baseline"] == without["leaderboard"]["baseline"]
    )
    for name, row in before.items():
        assert rows[name]["diff_final_val_loss"] == row["diff_final_val_loss"] and "against" not in rows[name]
    # the positive control reads the shipped gates alone: its k and its label as without the user's gate
    (control,) = [f for f in with_gate["findings"] if f["kind"] == "control"]
    (control_before,) = [f for f in without["findings"] if f["kind"] == "control"]
    assert control["family_k"] == len(before) == control_before["family_k"]
    assert (control["verdict"], control["ours"]) == (control_before["verdict"], control_before["ours"])
    report_md = (tmp_path / "with" / "REPORT.md").read_text(encoding="utf-8")
    board_text = report_md[report_md.index("## leaderboard\n") :]
    assert "`mygate` |" in board_text and "ranked by their own family" in board_text
