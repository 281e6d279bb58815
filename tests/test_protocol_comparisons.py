"""Issue 69: the registered protocol names every comparison as data (configs/protocol.yaml, the amendment of issue
69), and the report reads them from there (`engine`): a labelled comparison the protocol does not name fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ega_lightning.experiments import engine, protocol, studies

RESULTS = Path(__file__).resolve().parents[1] / "results" / "results.json"
ENGINE_FAMILIES = ("peers", "frozen", "rope")  # the families whose findings the engine gives


def _sides(key: str) -> frozenset[str]:
    """The variants a finding's read names ("gap: main/linear vs main/none" -> both sides)."""
    return frozenset(re.sub(r"^[a-z_]+: ", "", key).split(" vs "))


def test_the_restructure_changes_no_rule_and_re_dates_no_verdict() -> None:
    p = protocol.current()
    (restructure,) = [a for a in p.amendments if a.issue == 69]
    # a rule it changed would re-read every label it governs; a kind it named would be fixed at its date
    assert restructure.rules == () and restructure.kinds == ()
    assert restructure is p.amendments[-1]  # appended: no earlier line of the file moved
    # every family whose verdicts the protocol registers states its comparisons
    assert {e.family for e in p.verdicts.values() if e.family} <= set(p.comparisons)


def test_every_engine_comparison_reads_a_registered_metric_and_a_registered_rule() -> None:
    p = protocol.current()
    for family in ENGINE_FAMILIES:
        for c in p.comparisons[family]:
            assert c.metric in engine.METRICS, (family, c)
            assert c.kind in p.verdicts and p.verdicts[c.kind].family == family, (family, c)
            assert c.y is None or c.y.count("/") == 1, c


@pytest.mark.skipif(not RESULTS.is_file(), reason="no committed report")
def test_every_labelled_comparison_of_the_committed_report_is_one_the_protocol_names() -> None:
    p = protocol.current()
    named = {
        family: {frozenset(filter(None, (c.x, c.y))) for c in items} | {frozenset({c.x}) for c in items}
        for family, items in p.comparisons.items()
    }
    checked = 0
    for f in json.loads(RESULTS.read_text(encoding="utf-8"))["findings"]:
        if f["verdict"] is None or f["family"] is None:
            continue
        for key, _ in f["reads"]:
            sides = _sides(key)
            if not all(re.fullmatch(r"[\w.=-]+/[\w.=-]+", s) for s in sides):
                continue  # a read named by what it measures, not by its variants (a slope, a contrast, a position)
            assert sides in named[f["family"]], (f["kind"], f["family"], key)
            checked += 1
    assert checked >= 30  # the pairs of improvement, gap, levels, ablation, frozen, leak, peers, author and rope


def test_the_engine_families_are_read_by_the_engine_alone() -> None:
    """Each family on the engine is a study whose findings are `engine.family_findings`' (no study module of its own
    decides its comparisons again)."""
    assert set(ENGINE_FAMILIES) <= studies.PLACED  # placed in the report's order, each read through `engine`
    for module in ("peers.py", "frozen_tau.py"):
        assert not (Path(studies.__file__).parent / module).exists()
