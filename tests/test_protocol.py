"""The registered protocol (configs/protocol.yaml): it reads, it agrees with the specs it plans, and the date of
each entry comes from git, so that a verdict's registration follows the commit of its rule."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ega_lightning.experiments import protocol
from ega_lightning.experiments.spec import load_spec

from .conftest import CONFIGS


def test_the_protocol_plans_the_seeds_each_spec_declares():
    """Every spec entry the protocol plans seeds for declares exactly that many seeds in its spec, and every
    run a planned entry names exists: the plan and the runs it governs cannot drift apart."""
    planned = protocol.load().planned()
    declared: dict[str, int] = {}
    for path in sorted((CONFIGS / "sweeps").glob("*.yaml")):
        for run in load_spec(path, check_files=False).runs:
            declared[run.entry] = declared.get(run.entry, 0) + 1
    assert {e: declared.get(e) for e in planned} == planned


def test_every_confirmatory_entry_has_a_family_and_its_margins_exist():
    p = protocol.load()
    for entry in p.verdicts.values():
        assert not entry.confirmatory or entry.family in p.families, entry.kind
        assert all(m in p.margins for m in entry.margins), entry.kind


def test_a_protocol_naming_an_unknown_rule_or_family_is_refused(tmp_path):
    text = protocol.PATH.read_text()
    bad = tmp_path / "protocol.yaml"
    bad.write_text(
        text.replace("improvement: {rule: effect, family: improvement", "improvement: {rule: efect, family: x")
    )
    with pytest.raises(protocol.ProtocolError) as err:
        protocol.load(bad)
    assert "'efect'" in str(err.value) and "'x'" in str(err.value)


def _git(repo: Path, *args: str, date: str | None = None) -> None:
    env = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date} if date else {}
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        env={**os.environ, **env},
    )


def test_an_entrys_date_is_the_newest_commit_of_its_lines_its_familys_and_its_margins(tmp_path):
    """Committed on 1 Dec, then the loss margin changed on 3 Dec: every entry that reads the loss margin is
    fixed on 3 Dec, the others stay on 1 Dec; outside git, the file's stated date."""
    repo = tmp_path / "repo"
    repo.mkdir()
    path = repo / "protocol.yaml"
    path.write_text(protocol.PATH.read_text())
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "protocol", date="2026-12-01T10:00:00+00:00")
    loss = "    value: 0.005\n    unit: nats/char"
    path.write_text(path.read_text().replace(loss, loss.replace("0.005", "0.004"), 1))
    _git(repo, "commit", "-qam", "margin", date="2026-12-03T10:00:00+00:00")
    dates = protocol.entry_dates(protocol.load(path))
    assert dates.source == "git"
    dec1, dec3 = datetime(2026, 12, 1, 10, tzinfo=UTC), datetime(2026, 12, 3, 10, tzinfo=UTC)
    assert dates.by_kind["frozen_tau"] == dec3 and dates.by_kind["ablation_pair"] == dec3
    assert dates.by_kind["improvement"] == dec1 and dates.by_kind["tail"] == dec1
    outside = tmp_path / "protocol.yaml"
    outside.write_text(path.read_text())
    stated = protocol.entry_dates(protocol.load(outside))
    assert stated.source == "stated" and stated.by_kind["tail"] == datetime(2026, 12, 2, tzinfo=UTC)
