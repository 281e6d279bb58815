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


def slurm_array_script() -> str:
    text = (REPO / "docs" / "reproducing.md").read_text()
    (script,) = [block for block in re.findall(r"```bash\n(.*?)```", text, re.S) if "#SBATCH --array" in block]
    return script


@pytest.mark.parametrize(
    "sweep_exit,script_exit,requeued",
    [(0, 0, False), (1, 1, False), (2, 2, False), (75, 0, False), (143, 143, True)],
    ids=["done", "failed", "user-error", "busy", "stopped"],
)
def test_the_documented_slurm_array_script_reads_each_exit_code_of_ega_sweep(
    tmp_path, sweep_exit, script_exit, requeued
):
    """A run another task trains (75) is nothing to do here, a stop by SIGTERM (143) is requeued, a failure is not
    retried: the script of docs/reproducing.md run with stand-ins for srun, scontrol and `ega sweep`'s exit."""
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_ins = {
        "srun": 'exec "$@"\n',
        "scontrol": f'echo "$@" >> {tmp_path}/scontrol\n',
        "ega": f'echo "$@" > {tmp_path}/ega\nexit {sweep_exit}\n',
    }
    for name, body in stand_ins.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "job.sh").write_text(slurm_array_script())
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_ARRAY_TASK_ID": "3", "SLURM_JOB_ID": "77"}
    result = subprocess.run(["bash", "job.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == script_exit, result.stderr
    assert (tmp_path / "ega").read_text().split() == ["sweep", "configs/sweeps/short.yaml", "--index", "3"]
    scontrol = tmp_path / "scontrol"
    assert (scontrol.read_text().split() if scontrol.exists() else None) == (["requeue", "77"] if requeued else None)


def test_the_peers_cost_table_of_docs_cost_md_is_the_committed_bench():
    """Every ratio of docs/cost.md's peers table is results/bench-peers/'s: the step-time median with its
    quartiles and the memory ratio, per gate and size, as the bench wrote them (a rerun that changes the
    bench without the doc fails here)."""
    import json

    bench = json.loads((REPO / "results" / "bench-peers" / "bench-cpu-32-true.json").read_text())
    rows = {size["size"]: size["rows"] for size in bench["sizes"]}
    text = (REPO / "docs" / "cost.md").read_text()
    section = text[text.index("## EGA's peers") :]
    table = [line for line in section.split("\n\n")[3].splitlines()[2:] if line.startswith("| ")]
    assert len(table) == len(rows["cpu"]) - 2  # every gate but the baseline and the nanoGPT reference
    for line in table:
        label, cpu, paper, memory = (cell.strip() for cell in line.strip("|").split("|"))
        (gate,) = re.findall(r"`([a-z_]+)`", label)

        def step(size: str, gate: str = gate) -> str:
            row = rows[size][gate]
            q1, q3 = row["time_ratio_q1_q3"]
            return f"{row['time_ratio']:.3f} ({q1:.3f}-{q3:.3f})"

        assert (cpu, paper) == (step("cpu"), step("paper")), gate
        assert memory == f"{rows['cpu'][gate]['memory_ratio']:.3f} / {rows['paper'][gate]['memory_ratio']:.3f}"
    assert f"--repeats {bench['repeats']} --out results/bench-peers" in section.replace("\\\n  ", "")


def test_the_pipeline_table_of_docs_cost_md_is_the_committed_bench():
    """docs/cost.md's pipeline rows are results/pipeline/'s, row by row."""
    import json

    bench = json.loads((REPO / "results" / "pipeline" / "bench-cpu-32-true.json").read_text())
    text = (REPO / "docs" / "cost.md").read_text()
    section = text[text.index("## The pipeline's own cost") :]
    table = [line for line in section.splitlines() if re.match(r"\| (cpu|paper) \| ", line)]
    expected = [
        f"| {row['size']} | {row['gate']} | {row['bare_median_ms']:.1f} | {row['fit_median_ms']:.1f} | "
        f"{row['time_ratio']:.3f} ({row['time_ratio_q1_q3'][0]:.3f}-{row['time_ratio_q1_q3'][1]:.3f}) | "
        f"{row['total_ratio']:.3f} |"
        for row in bench["pipeline"]
    ]
    assert table == expected


def test_the_readmes_first_test_command_is_the_fast_suite_and_ci_runs_both_halves():
    """A contributor's command skips the slow tests; CI runs the README's commands, which together select every
    test (a marker expression that left a test out of both would drop it from CI unseen)."""
    tests = (REPO / "README.md").read_text().split("## Tests", 1)[1]
    readme = [line.split("#", 1)[0].strip() for line in re.findall(r"^pytest .*$", tests, re.M)]
    assert readme[0].endswith('-m "not slow"'), readme
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("pytest")]
    assert ci == readme
    assert sorted(command.split(" -m ", 1)[1] for command in ci) == ['"not slow"', "slow"]
