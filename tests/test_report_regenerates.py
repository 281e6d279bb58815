"""The committed report is what the committed code makes of the committed records, on any CPU (issue 49)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from .helpers import REPO, run_ega

GENERATED = ("REPORT.md", "results.json")


def committed_specs() -> list[str]:
    """The sweep specs of the committed report's own command (results.json), so that a study joining the report
    (its spec added to the command) is regenerated here too."""
    shown = subprocess.run(
        ["git", "-C", str(REPO), "show", "HEAD:results/results.json"], capture_output=True, text=True, check=True
    )
    return [word for word in json.loads(shown.stdout)["command"].split() if word.endswith(".yaml")]


def _history_is_whole() -> bool:
    done = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--is-shallow-repository"], capture_output=True, text=True
    )
    return done.returncode == 0 and done.stdout.strip() == "false"


@pytest.mark.slow
@pytest.mark.skipif(not _history_is_whole(), reason="needs the whole git history (registration dates from git blame)")
def test_ega_report_under_the_narrowest_kernels_reproduces_the_committed_report_byte_for_byte(tmp_path):
    """The report compares each record's code fingerprint with today's, computed here: under ATen's scalar
    kernels and MKL's SSE4.2 path (other bits than the AVX2 / AVX-512 / AMX machines the records and the report
    came from) it must still say which runs ran today's code exactly as the committed report does. In a clone of
    the commit (the report's links are relative to its --out, and registration reads git history)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    env = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"}
    specs = committed_specs()
    assert specs and all((clone / spec).is_file() for spec in specs), specs
    done = run_ega(["report", *specs, "--out", "results"], cwd=clone, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in GENERATED:
        committed = subprocess.run(
            ["git", "-C", str(REPO), "show", f"HEAD:results/{name}"], capture_output=True, text=True, check=True
        ).stdout
        assert (clone / "results" / name).read_text() == committed, f"{name} differs from the committed one"


def _script(name: str) -> Any:
    """scripts/<name>.py as a module (scripts/ is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_results_diff_lists_every_value_that_moved_and_by_how_much():
    """scripts/results_diff.py, which issue 53's byte-for-byte check falls back on: a float moved in its last bit,
    a flag that became the number 1, a key on one side only; and nothing for two equal files."""
    results_diff = _script("results_diff")
    old = {"rows": [{"low": 0.1 + 0.2, "n": 3}], "holds": True, "gone": "x"}
    new = {"rows": [{"low": 0.3, "n": 3}], "holds": 1}
    assert results_diff.differences(old, new) == [
        (".gone", "x", "<missing>"),
        (".holds", True, 1),
        (".rows[0].low", 0.1 + 0.2, 0.3),
    ]
    absolute, relative = results_diff.size(0.1 + 0.2, 0.3)
    assert absolute == abs(0.1 + 0.2 - 0.3) > 0 and relative == absolute / (0.1 + 0.2)
    assert results_diff.size(True, 1) is None and results_diff.differences(old, old) == []


def test_results_diff_pairs_findings_by_what_names_them_not_by_their_place():
    """A rewrite that lists the same findings in another order moves no number: the findings are paired by kind,
    section, corpus, subject, against and claim, and the new order is one leaf; a moved number is still found."""
    results_diff = _script("results_diff")
    a = {"kind": "pair", "section": "ablation", "subject": "EGA-2", "low": 0.01}
    b = {"kind": "pair", "section": "ablation", "subject": "EGA-4", "low": 0.02}
    found = results_diff.differences({"findings": [a, b]}, {"findings": [b, {**a, "low": 0.03}]})
    assert [path for path, *_ in found] == [".findings<order>", ".findings.pair/ablation/None/EGA-2/None/None#0.low"]
    assert found[1][1:] == (0.01, 0.03)
    assert results_diff.differences({"findings": [a, b]}, {"findings": [b, a]})[0][0] == ".findings<order>"
    assert len(results_diff.differences({"findings": [a, b]}, {"findings": [b, a]})) == 1


def test_results_diff_takes_the_report_folders_and_refuses_what_is_no_results_json_in_one_line(tmp_path, capsys):
    """`results_diff.py OLD NEW` given the folders `ega report --out` wrote (it raised IsADirectoryError), and a
    path that is neither: one line and status 2, no traceback."""
    results_diff = _script("results_diff")
    for name, value in (("old", 1.0), ("new", 1.5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"x": value}))
    assert results_diff.main([str(tmp_path / "old"), str(tmp_path / "new" / "results.json")]) == 1
    assert capsys.readouterr().out.splitlines()[0] == ".x: 1.0 -> 1.5 (abs 0.5, rel 0.5)"
    (tmp_path / "empty").mkdir()
    assert results_diff.main([str(tmp_path / "old"), str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "empty/results.json is not a file" in err
    assert results_diff.main([]) == 2  # the usage: the docstring's whole first paragraph, as one line
    usage = capsys.readouterr().err
    assert usage.count("\n") == 1 and usage.rstrip().endswith("the folder `ega report --out` wrote it in).")
    (tmp_path / "bad.json").write_text("{")
    assert results_diff.main([str(tmp_path / "old"), str(tmp_path / "bad.json")]) == 2
    assert "must be the results.json" in capsys.readouterr().err


def test_the_line_count_splits_a_module_into_code_docstrings_comments_and_blank_lines():
    """scripts/report_lines.py's split, which issue 53's closing note reads: docstrings of the module, a class and a
    function (one of two lines), a comment, a string that is not a docstring, blank lines."""
    module = (
        '"""The module."""\n'
        "\n"
        "# a comment\n"
        "class A:\n"
        '    """A class,\n'
        '    over two lines."""\n'
        "\n"
        "    def f(self):\n"
        '        """Its method."""\n'
        '        x = "not a docstring"\n'
        "        return x  # code with a comment\n"
    )
    counts = _script("report_lines").kinds(module)
    assert counts == {"code": 4, "docstrings": 4, "comments": 1, "blank": 2}
    assert sum(counts.values()) == module.count("\n")
