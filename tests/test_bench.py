"""`ega bench` on a tiny shape: the table's structure and the numbers that do not depend on timing."""

import json
import os
import re
import statistics
from pathlib import Path

import pytest
import torch
import yaml

from ega_lightning import CharLM
from ega_lightning.bench.harness import VOCAB, cold_compiler_caches
from ega_lightning.bench.reference import NanoGPTReference
from ega_lightning.bench.settings import gate_settings, size_settings
from ega_lightning.bench.table import to_markdown
from ega_lightning.commands.bench import main
from ega_lightning.config_files import PACKAGED_CONFIGS
from ega_lightning.errors import UserError
from ega_lightning.experiments import bench
from ega_lightning.fit_args import TENSORBOARD_LOGGER

SHAPE = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16}


def write_configs(root):
    (root / "size").mkdir(parents=True)
    (root / "gate").mkdir()
    (root / "size/tiny.yaml").write_text(yaml.safe_dump({"model": SHAPE, "data": {"batch_size": 2}}))
    gates = {"none": {"gate": "none"}, "linear": {"gate": "linear"}, "db2": {"gate": "db2"}}
    gates["linear_window"] = {"gate": "linear", "gate_options": {"znorm": "window"}}
    gates["fox"] = {"gate": "fox"}
    for name, model in gates.items():
        (root / f"gate/{name}.yaml").write_text(yaml.safe_dump({"model": model}))
    (root / "output_gate").mkdir()
    (root / "output_gate/headwise.yaml").write_text(yaml.safe_dump({"model": {"output_gate": "output_headwise"}}))


def test_bench_writes_tables_with_ratios_memory_and_generation(tmp_path):
    write_configs(tmp_path / "configs")
    out = tmp_path / "out"
    main(
        [
            "--configs",
            str(tmp_path / "configs"),
            "--sizes",
            "tiny",
            "--generation_sizes",
            "tiny",
            "--repeats",
            "3",
            "--warmup",
            "1",
            "--new_tokens",
            "20",
            "--device",
            "cpu",
            "--out",
            str(out),
        ]
    )
    result = json.loads((out / "bench-cpu-32-true.json").read_text())
    (size,) = result["sizes"]
    rows = size["rows"]
    # the baseline first; an output gate (configs/output_gate/) by its gate name, on the baseline
    assert list(rows) == ["none", "db2", "fox", "linear", "linear_window", "output_headwise", "nanogpt_reference"]
    assert rows["none"]["time_ratio"] == 1.0 and all(r["repeats"] == 3 for r in rows.values())
    # the cost verdict reads the per-repetition ratios (their median is the ratio) and the kernel floor beside them
    ratios = rows["linear"]["time_ratios"]
    assert len(ratios) == 3 and statistics.median(ratios) == rows["linear"]["time_ratio"]
    assert rows["linear"]["kernel_floor"] > 0 and size["split"]["head_sizes"][1] > size["split"]["head_sizes"][0]
    assert rows["linear"]["params"] - rows["none"]["params"] == SHAPE["n_layer"] * SHAPE["n_head"] * (16 + 2)
    assert rows["fox"]["params"] - rows["none"]["params"] == SHAPE["n_layer"] * SHAPE["n_head"] * (16 + 1)
    assert rows["output_headwise"]["params"] - rows["none"]["params"] == SHAPE["n_layer"] * 16 * SHAPE["n_head"]
    assert rows["linear"]["train_state_mb"] > rows["none"]["train_state_mb"]
    assert rows["linear"]["activation_mb"] > rows["none"]["activation_mb"] > 0
    (generation,) = result["generation"]
    # the leaky z-norm has no cached form
    assert set(generation["rows"]) == {"none", "db2", "fox", "linear", "output_headwise"}
    assert generation["uncached"] == ["linear_window"]
    assert all(r["speedup"] > 0 for r in generation["rows"].values())
    markdown = (out / "bench-cpu-32-true.md").read_text()
    assert "| linear |" in markdown and "ours / nanoGPT" in markdown and "KV cache tokens/s" in markdown
    # the machine is named by what sets its kernels' speed, in the table's title
    device_name = result["environment"]["device_name"]
    assert torch.backends.cpu.get_cpu_capability() in device_name and f"{os.cpu_count()} logical cores" in device_name
    assert markdown.startswith(f"# Benchmark: {device_name}, 32-true")


def test_generation_only_times_generation_alone_into_its_own_files(tmp_path):
    write_configs(tmp_path / "configs")
    out = tmp_path / "out"
    args = ["--configs", str(tmp_path / "configs"), "--gates", "linear", "--generation_sizes", "tiny"]
    args += ["--generation_only", "--generation_repeats", "3", "--new_tokens", "8", "--device", "cpu"]
    main([*args, "--out", str(out)])
    assert sorted(p.name for p in out.iterdir()) == [
        "bench-cpu-32-true-generation.json",
        "bench-cpu-32-true-generation.md",
    ]
    result = json.loads((out / "bench-cpu-32-true-generation.json").read_text())
    assert result["sizes"] == []
    (generation,) = result["generation"]
    assert set(generation["rows"]) == {"none", "linear"}
    assert all(r["repeats"] == 3 and r["speedup"] > 0 for r in generation["rows"].values())
    markdown = (out / "bench-cpu-32-true-generation.md").read_text()
    assert "medians of 3 alternating repetitions" in markdown and "Training step" not in markdown


@pytest.mark.parametrize(("bench", "compiled"), [("bench-compile", True), ("bench-aligned", False)])
def test_the_reference_table_says_when_both_models_ran_compiled(bench, compiled):
    """Under --compile the nanoGPT-style model is compiled and set against our compiled baseline: the committed
    benches' tables say which (their JSON through `to_markdown`)."""
    (path,) = (Path(__file__).resolve().parents[1] / "results" / bench).glob("*.json")
    result = json.loads(path.read_text())
    (heading,) = [line for line in to_markdown(result).splitlines() if "nanoGPT-style model" in line]
    assert heading.endswith("same batch, both compiled)") is compiled
    ours = [size["rows"]["none+compile" if compiled else "none"]["median_ms"] for size in result["sizes"]]
    cells = [
        line.split(" | ")[1] for line in to_markdown(result).splitlines() if line.startswith(("| cpu |", "| paper |"))
    ]
    assert cells[-len(ours) :] == [f"{ms:.1f}" for ms in ours]


def test_nanogpt_reference_has_the_baselines_shape():
    ours = CharLM(VOCAB, **SHAPE, gate="none")
    reference = NanoGPTReference(len(VOCAB), **SHAPE)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in reference.parameters())
    idx = torch.randint(0, len(VOCAB), (2, SHAPE["block_size"] + 1))
    assert reference.loss((idx[:, :-1], idx[:, 1:])).item() > 0


def test_bench_compiles_into_empty_compiler_caches_and_restores_the_environment(monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/kept")
    with cold_compiler_caches():
        folder = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
        assert folder.is_dir() and not any(folder.iterdir())  # nothing an earlier compilation left
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/somewhere/kept" and not folder.exists()
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    with cold_compiler_caches():
        pass
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ


@pytest.mark.parametrize(
    ("path", "text", "said"),
    [
        ("size/tiny.yaml", "model: {n_layer: 1, n_head: 2, n_embd: 8, block_size: 8}\n", "must set model.n_layer"),
        ("size/tiny.yaml", "model: [\n", "size/tiny.yaml is not valid YAML (line 2, column 1)"),
        ("gate/broken.yaml", "- a list\n", "gate/broken.yaml holds a list, not a mapping of options"),
    ],
)
def test_a_broken_configs_directory_is_named_before_anything_is_timed(tmp_path, path, text, said):
    configs = tmp_path / "configs"
    good = {
        "size/tiny.yaml": "model: {n_layer: 1, n_head: 2, n_embd: 8, block_size: 8}\ndata: {batch_size: 2}\n",
        "gate/none.yaml": "model: {gate: none}\n",
    }
    for sub, body in good.items():
        (configs / sub).parent.mkdir(parents=True, exist_ok=True)
        (configs / sub).write_text(body)
    assert size_settings(configs, "tiny") == ({"n_layer": 1, "n_head": 2, "n_embd": 8, "block_size": 8}, 2)
    (configs / path).write_text(text)
    reader = size_settings if path.startswith("size/") else gate_settings  # the one that reads the broken file
    with pytest.raises(UserError, match=re.escape(said)):
        reader(configs, "tiny" if reader is size_settings else None)


@pytest.mark.slow
def test_pipeline_row_pairs_each_ega_fit_step_with_a_bare_step_of_the_same_model(tmp_path, data_dir, monkeypatch):
    """The machinery, not the timing: `ega fit` ran (every callback of the default configs, its logger) with a
    bare step between its steps, as many of each as repetitions, and the row's ratios are those of the pairs."""
    write_configs(tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EGA_DATA_DIR", str(data_dir))
    args = ["--configs", "configs", "--sizes", "tiny", "--gates", "none", "fox", "--repeats", "3", "--warmup", "1"]
    main([*args, "--no_generation", "--pipeline", "--device", "cpu", "--out", "out"])
    result = json.loads((tmp_path / "out/bench-cpu-32-true.json").read_text())
    assert [(r["size"], r["gate"]) for r in result["pipeline"]] == [("tiny", "none"), ("tiny", "fox")]
    base = yaml.safe_load((PACKAGED_CONFIGS / "base.yaml").read_text())["trainer"]
    configured = {c["class_path"].rsplit(".", 1)[1] for c in base["callbacks"]}
    for row in result["pipeline"]:
        fit, bare = row["fit_s"], row["bare_s"]
        assert len(fit) == len(bare) == row["repeats"] == 3 and min(fit + bare) > 0
        assert row["steps"] == 1 + 3 + 1  # warm-up, timed, and the step that closes the last interval
        assert row["batch_shape"] == [2, SHAPE["block_size"]]  # the size's batch, Lightning's own batches
        assert configured | {"LastCheckpoint"} <= set(row["callbacks"])
        assert row["loggers"] == [TENSORBOARD_LOGGER["class_path"].rsplit(".", 1)[1]]  # `ega fit`'s own logger
        assert row["gradient_clip_val"] == base["gradient_clip_val"]
        assert row["time_ratio"] == statistics.median(sorted(f / b for f, b in zip(fit, bare, strict=True)))
        assert row["total_ratio"] == pytest.approx(sum(fit) / sum(bare))
    assert not (tmp_path / "lightning_logs").exists()  # the fits' run directories went with their temporary folder
    markdown = (tmp_path / "out/bench-cpu-32-true.md").read_text()
    assert "## The pipeline's own cost" in markdown and "| tiny | fox |" in markdown


def test_bench_builds_each_model_at_its_position_encoding(tmp_path):
    """A gate config's ``position`` (alibi_nopos, fox_nopos) reaches its model, and --position sets every model's,
    the baseline's too: read from the parameter counts, which lose the learned embedding (block_size x n_embd).
    A config that sets another position than --position's is no row of that bench (issue 72: fox_nopos ran with
    learned positions under --position learned): named in --gates, refused before anything is timed."""
    write_configs(tmp_path / "configs")
    (tmp_path / "configs/gate/fox_nopos.yaml").write_text(
        yaml.safe_dump({"model": {"gate": "fox", "position": "none"}})
    )
    params = {}
    for position, gates in ((None, ["fox", "fox_nopos"]), ("rope", ["fox"])):
        out = tmp_path / f"out-{position}"
        argv = ["--configs", str(tmp_path / "configs"), "--sizes", "tiny", "--gates", *gates]
        argv += ["--repeats", "3", "--warmup", "0", "--no_generation", "--device", "cpu", "--out", str(out)]
        main(argv + ([] if position is None else ["--position", position]))
        result = json.loads((out / "bench-cpu-32-true.json").read_text())
        # the report reads whose baseline a bench's ratios are over from the result itself (`bench.bench_position`)
        assert result["position"] == position and bench.bench_position(result) == (position or "learned")
        (size,) = result["sizes"]
        params[position] = {name: row["params"] for name, row in size["rows"].items() if "params" in row}
    embedding = SHAPE["block_size"] * SHAPE["n_embd"]
    assert params[None]["fox"] - params[None]["fox_nopos"] == embedding
    assert params[None]["none"] - params["rope"]["none"] == embedding  # --position reaches the baseline
    assert params["rope"]["fox"] == params[None]["fox_nopos"] and "fox_nopos" not in params["rope"]
    argv = ["--configs", str(tmp_path / "configs"), "--sizes", "tiny", "--gates", "fox", "fox_nopos"]
    with pytest.raises(UserError, match=r"--position rope would replace the position of fox_nopos \(position none\)"):
        main([*argv, "--no_generation", "--position", "rope", "--out", str(tmp_path / "refused")])
    assert not (tmp_path / "refused").exists()
