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


@pytest.mark.skipif(not all((SHIPPED / f"{r}-seed1.json").is_file() for r in COPIED.values()), reason="no records")
def test_the_docs_study_entry_adds_its_section_to_the_report_with_no_python(tmp_path, monkeypatch):
    sweep, family, verdict = _blocks(DOC.read_text(encoding="utf-8"))
    # the protocol, its two entries pasted where the doc says (under families: and under verdicts:)
    text = protocol.PATH.read_text(encoding="utf-8")
    text = text.replace("\n# verdicts by the kind of finding", "\n" + family + "# verdicts by the kind of finding", 1)
    text = text.replace("\nverdicts:\n", "\nverdicts:\n" + verdict, 1)
    copy = tmp_path / "protocol.yaml"
    copy.write_text(text, encoding="utf-8")
    registered = protocol.load(copy)
    monkeypatch.setattr(protocol, "current", lambda: registered)
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
