"""Issue 69: the registered protocol names every comparison as data (configs/protocol.yaml, the amendment of issue
69), and the report reads them from there (`engine`): a labelled comparison the protocol does not name fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ega_lightning.experiments import engine, findings, protocol, studies
from ega_lightning.experiments.stats import Difference

RESULTS = Path(__file__).resolve().parents[1] / "results" / "results.json"
ENGINE_FAMILIES = ("peers", "frozen", "rope", "beyond", "context", "improvement", "gap", "levels")  # the engine gives


def _sides(key: str) -> frozenset[str]:
    """The variants a finding's read names ("gap: main/linear vs main/none" -> both sides)."""
    return frozenset(re.sub(r"^[a-z_]+: ", "", key).split(" vs "))


def test_the_restructure_changes_no_rule_and_re_dates_no_verdict() -> None:
    p = protocol.current()
    # the restructure and the amendment after it that states the tau_init family's claim (issue 69)
    restructures = [a for a in p.amendments if a.issue == 69]
    # a rule it changed would re-read every label it governs; a kind it named would be fixed at its date
    assert len(restructures) == 2 and all(a.rules == () and a.kinds == () for a in restructures)
    # appended: no earlier line of the file moved; those after them (issue 67's) re-date no verdict they state
    later = p.amendments[p.amendments.index(restructures[-1]) + 1 :]
    assert list(p.amendments[p.amendments.index(restructures[0]) :][:2]) == restructures
    assert all(a.lines[0] > restructures[-1].lines[1] and a.rules == () and a.kinds == () for a in later)
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
    for module in ("peers.py", "frozen_tau.py", "context.py"):
        assert not (Path(studies.__file__).parent / module).exists()
    # the head-to-head's findings are the engine's: its module declares no kind of finding of its own
    kinds = [x for x in vars(studies.main).values() if isinstance(x, type) and issubclass(x, findings.Finding)]
    assert [x for x in kinds if x.__module__ == studies.main.__name__] == []


@pytest.mark.skipif(not RESULTS.is_file(), reason="no committed report")
def test_a_tables_delta_is_against_the_reference_the_protocol_names_for_its_gain() -> None:
    """The descriptive Δ column of a section read against a named reference (peers and the RoPE designs, each a
    gain over a baseline) is against the reference the protocol's comparison names, not one the code picks again.
    (The frozen-tau table's Δ is its column "vs baseline", not the learned-tau comparison: not checked here.)"""
    p = protocol.current()
    rows = {
        (g["group"], g["corpus"], v["variant"]): v["baseline"]
        for g in json.loads(RESULTS.read_text(encoding="utf-8"))["groups"]
        for v in g["variants"]
    }
    checked = 0
    for c in (*p.comparisons["peers"], *p.comparisons["rope"]):
        for (group, _, label), baseline in rows.items():
            if f"{group}/{label}" == c.x:
                assert baseline is not None and f"{baseline['group']}/{baseline['variant']}" == c.y, (c.x, baseline)
                checked += 1
    assert checked == 10  # six peers, four RoPE designs


@pytest.mark.parametrize("n", [3, 5])
def test_a_label_read_at_fewer_seeds_than_its_family_plans_says_so(n: int) -> None:
    """Issue 72: a verdict read at fewer paired seeds than the family plans for its sides (FoX 5, the baseline 11 in
    `peers`) carries "interim: n of N seeds" beside its label; at the planned seeds, nothing."""
    d = Difference(0.02, 0.01, 0.03, n, n - 1.0, "paired")
    runs = [f"{entry}-seed{s}" for entry in ("ts-fox", "ts-none") for s in range(1, n + 1)]
    where = findings.Where("peers", "tinyshakespeare", "r", "FoX `fox`", "baseline `none`")
    code = findings.Code([], None, [], runs)
    f = engine.judge("peer", where, [("fox", d)], claim="peer:fox", family="peers", code=code, details={"source": "s"})
    said = engine.measured(f)
    assert f.verdict is not None and f.verdict.value in said
    assert ("(interim: 3 of 5 seeds)" in said) is (n == 3) and ("interim" in said) is (n == 3)
