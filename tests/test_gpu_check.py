"""The GPU check as far as a CPU machine can run it: its numerical part, its refusal, the study's commands."""

import json
import os
import subprocess

import pytest
import torch

from ega_lightning import attention_paths
from ega_lightning.commands import device_check
from ega_lightning.experiments.sweep import fit_command, load_spec

from .helpers import CONFIGS, REPO, needs_flex


@pytest.mark.slow
@needs_flex
def test_device_check_compares_every_path_and_passes_on_cpu(tmp_path, capsys):
    out = tmp_path / "equality.json"
    assert device_check.main(["--device", "cpu", "--gates", "linear", "--bf16", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    seen = {(r["impl"], r["dtype"]) for r in rows}
    assert seen == {
        ("fused", "float32"),
        ("flex", "float32"),
        *((i, "bfloat16") for i in ("reference", "fused", "flex")),
    }
    fused32 = next(r for r in rows if r["impl"] == "fused" and r["dtype"] == "float32")
    assert 0 < fused32["value_err"] < attention_paths.FP32_TOL and fused32["grad_err"] < attention_paths.FP32_TOL
    assert all(r["grad_err"] is None for r in rows if r["impl"] == "flex")  # no CPU backward for flex
    assert "5 of 5 comparisons within bounds" in capsys.readouterr().out


def test_device_check_without_flex_attention_compares_the_other_paths_and_says_so(torch_without_flex, capsys):
    assert device_check.main(["--device", "cpu", "--gates", "linear", "--no-bf16"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]  # the GPU check's verdict line
    assert last.startswith("1 of 1 comparisons within bounds") and "flex not compared" in last


def test_device_check_fails_on_a_mismatch(monkeypatch, capsys):
    monkeypatch.setattr(attention_paths, "FP32_TOL", 0.0)  # fused and reference differ by float rounding
    assert device_check.main(["--device", "cpu", "--gates", "linear", "--no-bf16"]) == 1
    assert "MISMATCH" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the message is for machines without CUDA")
def test_gpu_check_without_cuda_says_so_and_exits_zero(tmp_path):
    env = {**os.environ, "EGA_CHECK_WORK": str(tmp_path / "work"), "EGA_CHECK_OUT": str(tmp_path)}
    result = subprocess.run([str(REPO / "scripts/gpu_check.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert "no CUDA device on this machine" in result.stdout and "Nothing was checked" in result.stdout
    assert not any(tmp_path.iterdir())  # no work directory, no archive: nothing pretends to be a result


def test_paper_study_is_the_main_table_at_the_paper_size_in_bf16():
    sweep = load_spec(CONFIGS / "sweeps/paper.yaml")
    assert {(r.entry, r.seed) for r in sweep.runs} == {
        (f"paper-{corpus}-{gate}", seed)
        for corpus in ("ts", "ptb")
        for gate in ("none", "linear")
        for seed in (1, 2, 3)
    }
    for run in sweep.runs:
        cmd = fit_command(run, REPO / "lightning_logs", resume=False)
        assert "configs/size/paper.yaml" in cmd and "--trainer.precision=bf16-mixed" in cmd
        assert f"configs/gate/{run.variant}.yaml" in cmd
