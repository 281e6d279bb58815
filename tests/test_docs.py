"""What the README and docs/ link to exists in a clone: no link leaves the repository or points at nothing;
the README is a short front door that links every doc."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves_inside_the_repository(doc):
    targets = [t.split("#", 1)[0] for t in LINK.findall(doc.read_text()) if not re.match(r"[a-z]+:", t)]
    targets = [t for t in targets if t]  # a bare #anchor stays in the same file
    assert targets or doc.name != "README.md"
    for target in targets:
        path = (doc.parent / target).resolve()
        assert path.is_relative_to(REPO), f"{doc.name} links {target}, outside the repository"
        assert path.exists(), f"{doc.name} links {target}, which does not exist"


@pytest.mark.parametrize("doc", [str(p.relative_to(REPO)) for p in DOCS[1:]])
def test_the_readme_links_every_doc(doc):
    assert doc in [t.split("#", 1)[0] for t in LINK.findall((REPO / "README.md").read_text())]


def test_the_readme_is_a_front_door():
    """Small, with the quickstart on its first screen; the long sections live in docs/, one link away."""
    text = (REPO / "README.md").read_text()
    assert len(text.encode()) <= 15_000, f"README.md is {len(text.encode())} bytes: move a section to docs/"
    head = text.splitlines()[:60]
    assert any(line.startswith("#") and "Quickstart" in line for line in head), "no Quickstart heading in 60 lines"


def test_the_documented_counts_of_a_specs_runs_are_the_specs():
    """The SLURM array of docs/reproducing.md and its run count of short.yaml follow the spec as it is now."""
    from ega_lightning.experiments.spec import load_spec

    n = len(load_spec(REPO / "configs" / "sweeps" / "short.yaml", check_files=False).runs)
    text = (REPO / "docs" / "reproducing.md").read_text()
    assert f"--array=0-{n - 1} " in text and f"configs/sweeps/short.yaml      # {n} runs" in text
