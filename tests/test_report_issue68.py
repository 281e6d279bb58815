"""Issue 68: the sixteen disagreements of the outside recomputation, the measure past the block, the claims table's
contents, the summary's other studies, the author's paths, the protocol's amendments and the CPU kind per segment.

Each test reads the committed results (results.json, REPORT.md) against the records, the evaluations beyond the block
and configs/protocol.yaml, recomputed here with json, numpy and scipy, not with the report's code."""

from __future__ import annotations

import ast
import json
import statistics
import subprocess
from datetime import datetime
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import yaml

from ega_lightning.experiments import protocol, provenance, rules
from ega_lightning.experiments.comparisons import RunData
from ega_lightning.experiments.spec import Run

from .helpers import REPO

RESULTS = REPO / "results"
RECORDS = RESULTS / "runs"
BEYOND = RESULTS / "beyond-the-block"


@cache
def results() -> dict:
    return json.loads((RESULTS / "results.json").read_text())


@cache
def record(run: str) -> dict:
    return json.loads((RECORDS / f"{run}.json").read_text())


def finding(kind: str, **where: object) -> list[dict]:
    return [f for f in results()["findings"] if f["kind"] == kind and all(f[k] == v for k, v in where.items())]


def loss(run: str) -> float:
    return next(r["final_val_loss"] for r in results()["runs"] if r["run_name"] == run)


def interval(values: list[float], level: float) -> tuple[float, float, float]:
    """The Student-t interval of a mean (paired differences), at ``level``."""
    x = np.asarray(values, dtype=float)
    half = scipy.stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return float(x.mean()), float(x.mean() - half), float(x.mean() + half)


def three_way(low: float, high: float, m: float) -> str:
    if low > m:
        return "holds"
    if -m <= low and high <= m:
        return "negligible"
    return "does not hold" if high < -m else "too few seeds to tell"


def margin() -> float:
    return yaml.safe_load(protocol.PATH.read_text())["margins"]["loss"]["value"]


def summary_lines() -> list[str]:
    lines = (RESULTS / "REPORT.md").read_text().splitlines()
    start = lines.index("## Summary")
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("`ega report "))
    return lines[start:end]


# ----------------------------------------------------------------------------- the sixteen


def test_context_registration_counts_only_the_runs_its_interval_reads():
    """The interval reads the longest minus the shortest block over the seeds every block ran: the block-128 runs
    enter no interval its label rests on, so its registration counts the runs of the two ends alone."""
    (f,) = finding("context")
    blocks = [b for b, _ in f["by_block"]]
    ends = {min(blocks), max(blocks)}
    expected = {
        run
        for run in f["code"]["read"]
        if record(run)["hparams"]["block_size"] in ends and record(run)["seed"] in f["seeds"]
    }
    assert len(expected) == 4 * len(f["seeds"])  # EGA-1 and the baseline at two blocks
    assert set(f["code"]["entered"][0]) == expected
    assert f["registration"]["runs"] == len(expected)


def test_the_positive_controls_reads_are_named_as_their_value_is_taken_baseline_minus_gate():
    (f,) = finding("control")
    base = {record(r)["seed"]: loss(r) for r in f["code"]["read"] if r.startswith("ts-none-")}
    for name, d in f["reads"]:
        first, gate = name.split(" − ")
        assert first == "baseline/none", name
        runs = {record(r)["seed"]: loss(r) for r in f["code"]["read"] if r.startswith(f"ts-{gate}-seed")}
        seeds = sorted(set(runs) & set(base))
        assert d["estimate"] == pytest.approx(statistics.mean(base[s] - runs[s] for s in seeds)), name


def _our_recipe_ega1(run: str) -> bool:
    """EGA-1 trained as in the paper under our recipe: our lr and dropout (ts-linear-seed1's), learned positions,
    tau learned, z over the causal prefix."""
    ours, h = record("ts-linear-seed1")["hparams"], record(run)["hparams"]
    options = h.get("gate_options") or {}
    return (
        record(run)["gate"] == "linear"
        and (h.get("position") or "learned") == "learned"
        and options.get("learn_tau", True)
        and options.get("znorm", "prefix") == "prefix"
        and (h.get("lr"), h.get("dropout")) == (ours.get("lr"), ours.get("dropout"))
    )


def test_the_tau_mechanism_names_the_runs_its_gradient_ratio_reads_our_recipes_alone():
    (f,) = finding("tau_mechanism")
    logged = {
        p.stem
        for p in RECORDS.glob("*.json")
        if _our_recipe_ega1(p.stem) and record(p.stem)["scalars"].get("gate/grad_norm/tau")
    }
    assert set(f["grad_norm_runs"]) == logged
    ratios = []
    for run in sorted(logged):
        scalars = record(run)["scalars"]
        tau, energy = (
            dict(map(tuple, scalars["gate/grad_norm/tau"])),
            dict(map(tuple, scalars["gate/grad_norm/energy"])),
        )
        ratios += [tau[s] / energy[s] for s in tau if energy.get(s)]
    assert f["grad_norm_ratio"] == pytest.approx(statistics.median(ratios))
    # the author's recipe's EGA-1 and the RoPE study's are not read
    assert not any(r.startswith(("author-", "rope-")) for r in f["grad_norm_runs"])


def test_the_rope_groups_read_every_design_against_the_registered_reference():
    """results.json's groups (and the study's table, written from the same rows): each of the four designs against
    `rope-none`, the baseline with no position signal a design too, paired by seed."""
    (group,) = [g for g in results()["groups"] if g["group"] == "rope"]
    by_label = {v["variant"]: v for v in group["variants"]}
    reference = {record(r)["seed"]: loss(r) for r in by_label["rope-none"]["runs"]}
    assert by_label["rope-none"]["baseline"] is None
    for label in ("rope-linear", "fox-nopos", "alibi-nopos", "none-nopos"):
        v = by_label[label]
        assert v["baseline"] == {"group": "rope", "variant": "rope-none"}, label
        own = {record(r)["seed"]: loss(r) for r in v["runs"]}
        estimate, low, high = interval([reference[s] - own[s] for s in sorted(own)], 0.95)
        d = v["diff_final_val_loss"]
        assert (d["estimate"], d["low"], d["high"]) == pytest.approx((estimate, low, high)), label
    # the leaderboard's RoPE board reads the same reference
    board = results()["leaderboard"]["rope"]
    assert board["baseline"]["variant"] == "rope-none"
    table = (RESULTS / "REPORT.md").read_text().split("## rope\n", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in table.splitlines() if line.startswith("| `none-nopos` |"))
    assert f"{by_label['none-nopos']['diff_final_val_loss']['estimate']:+.3f}" in row


def test_the_summary_reads_the_authors_b_minus_a_size_the_amendments_and_the_control_at_its_family_level():
    lines = summary_lines()
    (ba,) = [f for f in finding("author_gain") if f["key"] == "B − A"]
    lo, hi = ba["corrected"]["low"], ba["corrected"]["high"]
    figure = results()["paper"]["improvement"]["tinyshakespeare"]
    assert ba["paper"] == figure
    reading = "reproduced" if lo <= figure <= hi and lo > margin() else "not reproduced" if hi < figure else "undecided"
    assert ba["magnitude"]["reading"] == reading
    assert ba["magnitude"]["fraction"] == pytest.approx(ba["ours"]["estimate"] / figure)
    row = next(line for line in lines if "loss(A) − loss(B)" in line)
    assert f"size {reading}, {100 * ba['magnitude']['fraction']:.0f}% [{100 * lo / figure:.0f}%, " in row
    # every summary row whose finding an amendment changed says so, as the claims table does
    for f in results()["findings"]:
        amended = (f.get("registration") or {}).get("amended")
        if amended and f["kind"] in ("gap", "cost"):
            said = f"the amendment of {f['registration']['fixed'][:10]} changed its label (was: {amended})"
            assert any(said in line for line in lines), f["kind"]
    # the positive control at its family's level
    (control,) = finding("control")
    best = next(d for name, d in control["reads"] if d["estimate"] == control["ours"]["estimate"])
    t = scipy.stats.t.ppf(0.5 + control["family_level"] / 2, best["df"]) / scipy.stats.t.ppf(0.975, best["df"])
    half = (best["high"] - best["low"]) / 2 * t
    line = next(line for line in lines if line.startswith("Positive control"))
    assert f"[{best['estimate'] - half:+.3f}, {best['estimate'] + half:+.3f}]" in line


def test_the_method_text_of_level_tail_and_forgets_names_the_familys_level():
    texts = rules.rule_texts()
    for name in ("level", "tail", "forgets"):
        assert "95%" not in texts[name] and "family's level" in texts[name], name


# ----------------------------------------------------------------------------- past the block


def _past_the_block() -> dict[tuple[str, int], dict[int, tuple[float, float]]]:
    """(spec entry, window length) -> seed -> (mean loss at positions 97-128, mean loss at 129 to the length)."""
    out: dict[tuple[str, int], dict[int, tuple[float, float]]] = {}
    for path in sorted(BEYOND.glob("*.json")):
        e = json.loads(path.read_text())
        curve = np.asarray(e["loss_by_position"])
        entry, seed = e["run_name"].rsplit("-seed", 1)
        out.setdefault((entry, e["eval_block_size"]), {})[int(seed)] = (curve[96:128].mean(), curve[128:].mean())
    return out


def test_the_measure_past_the_block_recomputes_from_the_loss_by_position_and_reads_three_ways():
    measured = _past_the_block()
    found = finding("beyond_the_block")
    assert len(found) == len(measured) == 10
    amendment = next(a for a in yaml.safe_load(protocol.PATH.read_text())["amendments"] if a["issue"] == 68)
    assert amendment["issue"] == 68 and amendment["kinds"] == ["beyond_the_block"]
    latest_start = max(
        datetime.fromisoformat(record(r)["done"]["started_at"]) for f in found for r in f["code"]["read"]
    )
    for f in found:
        run = f["code"]["read"][0]
        entry = run.rsplit("-seed", 1)[0]
        per_seed = measured[(entry, f["eval_block_size"])]
        diffs = [edge - past for _, (edge, past) in sorted(per_seed.items())]
        (name, d), level = f["reads"][0], 1 - 0.05 / 10
        assert f["family_k"] == 10 and f["family_level"] == pytest.approx(level)
        assert (d["estimate"], d["low"], d["high"]) == pytest.approx(interval(diffs, 0.95)), name
        _, low, high = interval(diffs, level)
        assert f["verdict"] == three_way(low, high, margin()), name
        # the window contrast it replaced, kept as a figure, and the label it was read as
        base = {record(r)["seed"]: record(r)["scalars"]["val/loss"][-1][1] for r in f["code"]["read"]}
        longer = {
            s: json.loads((BEYOND / f"{entry}-seed{s}-T{f['eval_block_size']}.json").read_text())["val_loss"]
            for s in base
        }
        _, c_low, c_high = interval([base[s] - longer[s] for s in sorted(base)], level)
        assert f["replaces"] == three_way(c_low, c_high, margin()), name
        # an amendment after the data: exploratory, fixed after every run it reads
        assert f["registration"]["mark"] == "exploratory"
        assert datetime.fromisoformat(results()["protocol"]["fixed"]["beyond_the_block"]) > latest_start


# ----------------------------------------------------------------------------- the claims table


def test_the_claims_table_holds_tests_of_the_papers_claims_not_the_decomposition_steps():
    kinds = {f["kind"] for f in results()["findings"]}
    assert "author_step" in kinds
    steps = {f["key"] for f in finding("author_step")}
    assert steps == {"B − C", "C − D", "D − E", "E − A"}
    claims = "\n".join(
        line for line in (RESULTS / "REPORT.md").read_text().split("## Claims\n", 1)[1].split("\n## ")[0].splitlines()
    )
    assert not any(f". {step}," in claims for step in steps)
    assert len(results()["claims"]) == sum(
        1 for f in results()["findings"] if f["claim"] and f["kind"] != "author_step"
    )


def test_no_nominal_label_is_printed_beside_a_family_level_one():
    report = (RESULTS / "REPORT.md").read_text()
    changed = [f for f in results()["findings"] if f["nominal_verdict"] not in (None, f["verdict"])]
    assert changed  # there are labels the nominal level would read otherwise: none is printed
    assert "at nominal 95%" not in report


def _families_added() -> dict[str, str]:
    path = "ega_lightning/configs/protocol.yaml"
    log = subprocess.run(["git", "log", "--reverse", "--format=%H %cs", "--", path], cwd=REPO, capture_output=True)
    added: dict[str, str] = {}
    for line in log.stdout.decode().splitlines():
        commit, date = line.split()
        text = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=REPO, capture_output=True).stdout.decode()
        for name in yaml.safe_load(text).get("families") or {}:
            added.setdefault(name, date)
    return added


def test_the_method_note_states_the_study_wide_bound_and_the_families_added_later():
    registered = yaml.safe_load(protocol.PATH.read_text())
    wide = results()["conventions"]["study_wide"]
    read = {f["family"] for f in results()["findings"] if f["family"] and f["verdict"]}
    assert set(wide["read"]) == read and wide["registered"] == list(registered["families"])
    assert wide["bound"] == pytest.approx(len(read) * (1 - registered["level"]))
    added = _families_added()
    first = min(added.values())
    assert wide["added_after_first"] == [{"family": k, "added": d} for k, d in added.items() if d > first]
    assert {x["family"] for x in wide["added_after_first"]} >= {"author", "rope", "beyond", "paper_size"}


# ----------------------------------------------------------------------------- the summary's other studies


def test_the_summary_has_one_line_per_other_study_with_every_verdict_at_its_familys_level():
    lines = summary_lines()
    for kind, words in (("peer", "the peers"), ("rope_gain", "the RoPE study"), ("beyond_the_block", "past the block")):
        (line,) = [line for line in lines if line.startswith(f"| {words}")]
        for f in finding(kind):
            d = f["corrected"] or f["ours"]
            assert f"[{d['low']:+.3f}, {d['high']:+.3f}]" in line, (kind, f["subject"])
            assert f"**{f['verdict']}**" in line


# ----------------------------------------------------------------------------- the author's paths


def test_c_minus_d_names_the_test_that_holds_both_attention_paths_to_the_authors_forward():
    (study,) = results()["author"]
    step = next(s for s in study["steps"] if s["key"] == "C − D")
    paths = {x: record(study["variants"][x]["runs"][0])["hparams"].get("attention", "fused") for x in "CD"}
    assert paths["C"] != paths["D"]
    assert {k: step["paths"][k] for k in "CD"} == paths
    file, name = step["paths"]["held_by"].split("::")
    tree = ast.parse((REPO / file).read_text())
    (test,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    params = [
        ast.literal_eval(dec.args[1])
        for dec in test.decorator_list
        if isinstance(dec, ast.Call) and dec.args[0].value == "attention"
    ]
    assert params and set(paths.values()) <= set(params[0])
    # a step whose two sides trained on one path names no test; every other (B − A and F − A too) names it
    for s in study["steps"]:
        x, y = s["key"].split(" − ")
        sides = {z: record(study["variants"][z]["runs"][0])["hparams"].get("attention", "fused") for z in (x, y)}
        assert (s["paths"]["held_by"] is None) is (sides[x] == sides[y]), s["key"]


# ----------------------------------------------------------------------------- the protocol's amendments


def test_the_registration_counting_and_recipe_rules_are_dated_amendments_appended_at_the_end():
    registered = yaml.safe_load(protocol.PATH.read_text())
    head = subprocess.run(
        ["git", "show", "34c0ad9:ega_lightning/configs/protocol.yaml"], cwd=REPO, capture_output=True
    ).stdout.decode()
    assert protocol.PATH.read_text().startswith(head)  # appended: no earlier line edited
    issues = [a["issue"] for a in registered["amendments"]]
    last = registered["amendments"][issues.index(68) :][:3]  # the three of issue 68, only later issues' after them
    assert all(a["issue"] == 68 and datetime.fromisoformat(a["date"]) for a in last)
    assert 68 not in issues[issues.index(68) + 3 :]  # later amendments (issue 67's among them) appended after
    keys = {k for a in last for k in a}
    assert {"measure", "registration_counting", "recipe"} <= keys
    assert all(a["rules"] == [] for a in last)


# ----------------------------------------------------------------------------- the CPU kind per segment


def test_results_json_carries_each_runs_segments_and_the_report_says_which_it_cannot_check():
    runs = [r for r in results()["runs"] if r["status"] == "done"]
    for r in runs:
        assert r["segments"] == record(r["run_name"]).get("segments"), r["run_name"]
    unchecked = [r for r in runs if not r["segments"]]
    report = (RESULTS / "REPORT.md").read_text()
    assert f"cannot check the CPU kind of {len(unchecked)} past records" in report


def test_a_run_with_segments_is_named_and_one_without_is_listed_as_unchecked():
    def run(name: str, segments: list | None) -> RunData:
        spec = Run(Path("s.yaml"), name, 1, (), (), "rope", name)
        machine = "AMD EPYC x2"
        return RunData(
            run=spec,
            status="done",
            reason="",
            corpus="tinyshakespeare",
            gate="none",
            machine=machine,
            segments=segments,
        )

    cpu = {"model": "AMD EPYC", "capability": "AVX512", "units": ["AVX-512"], "cores": 2}
    lines = provenance.cpu_kinds([run("a", [{"from_step": 0, "to_step": None, "cpu": cpu}]), run("b", None)])
    assert lines[0].startswith("- CPU kind per segment: 1 of 2")
    assert "cannot check the CPU kind of 1 past records" in lines[1] and "rope 1 (AMD EPYC x2)" in lines[1]
