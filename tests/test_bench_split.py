"""`ega bench`'s split of EGA-1's overhead: the attention kernel's share, the padded matmuls', the gate's
z-norm and sigmoid, the rest."""

import json
import math

import pytest
import torch

from ega_lightning.bench.harness import build, fixed_batch
from ega_lightning.bench.split import SPLIT_GATE, overhead_split, without_gate_arithmetic
from ega_lightning.commands.bench import main
from ega_lightning.experiments.stats import median_interval

from .test_bench import SHAPE, write_configs


def test_median_interval_uses_the_binomial_order_statistics():
    assert median_interval([5.0, 1, 7, 3, 2, 6, 4]) == (1, 7)  # n = 7: min and max (coverage 98.4%)
    values = [float(v) for v in range(21, 0, -1)]
    assert median_interval(values) == (6, 16)  # n = 21: the 6th and 16th smallest
    # their coverage is at least 95%, and the next narrower pair's is not
    coverage = 1 - 2 * sum(math.comb(21, i) for i in range(6)) / 2**21
    narrower = 1 - 2 * sum(math.comb(21, i) for i in range(7)) / 2**21
    assert coverage >= 0.95 > narrower


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_a_median_of_too_few_repetitions_for_any_95_interval_gets_min_and_max(n):
    """Below 6 values even (min, max) covers less than 95% (2 / 2**n of the probability is outside it)."""
    values = [float(v) for v in range(n, 0, -1)]
    assert 2 / 2**n > 0.05 and median_interval(values) == (1.0, float(n))


def test_overhead_split_adds_up_per_repetition():
    base, gated = [100.0, 110.0, 90.0], [110.0, 120.0, 99.0]
    plain, padded = [5.0, 5.5, 4.5], [5.5, 6.0, 5.0]
    matmuls = ([2.0, 2.0, 2.0], [2.25, 2.2, 2.2], 4)
    gate = ([107.0, 117.0, 98.1], gated, 1)  # the whole model without the gate's arithmetic: counted once
    split = overhead_split(gated, base, {"kernel": (plain, padded, 4), "matmuls": matmuls, "gate": gate})
    assert split["total"]["points"] == pytest.approx(10.0)  # 10%, 9.09%, 10%
    assert split["kernel"]["points"] == pytest.approx(100 * 4 * 0.5 / 100)  # 2.0, 1.82, 2.22 -> median 2.0
    assert split["matmuls"]["points"] == pytest.approx(80 / 90)  # 1.0, 0.727, 0.889 -> median 0.889
    assert split["gate"]["points"] == pytest.approx(300 / 110)  # 3.0, 2.73, 1.0 -> median 2.73
    # per repetition 4.0, 3.82, 5.89: the median of differences, not the difference of medians
    assert split["rest"]["points"] == pytest.approx(10 - 2 - 1 - 3)
    # the floor: kernel + matmuls per repetition (3.0, 2.55, 3.11), and the total above it (7.0, 6.55, 6.89):
    # medians of the per-repetition sums and differences, not sums of the parts' medians
    assert split["floor"]["points"] == pytest.approx(2.0 + 1.0)
    assert split["above_floor"]["points"] == pytest.approx(10.0 - 100 * 4 * (0.5 + 0.2) / 90)
    assert split["kernel"]["ratio"] == pytest.approx(5.5 / 5)
    assert split["matmuls"]["ms"] == pytest.approx({"plain": 2000.0, "padded": 2200.0})


def test_bench_reports_the_split_beside_the_table(tmp_path):
    write_configs(tmp_path / "configs")
    out = tmp_path / "out"
    args = ["--configs", str(tmp_path / "configs"), "--sizes", "tiny", "--repeats", "3", "--warmup", "1"]
    main([*args, "--no_generation", "--device", "cpu", "--out", str(out)])
    (size,) = json.loads((out / "bench-cpu-32-true.json").read_text())["sizes"]
    split = size["split"]
    hs = SHAPE["n_embd"] // SHAPE["n_head"]
    assert split["head_sizes"] == [hs, hs + 1]
    assert all(key not in size["rows"] for key in ("sdpa+0", "sdpa+1", "matmuls+0", "matmuls+1"))  # not contenders
    for part in ("total", "kernel", "matmuls", "gate", "rest", "floor", "above_floor"):
        low, high = split[part]["interval"]
        assert low <= split[part]["points"] <= high, part
    text = (out / "bench-cpu-32-true.md").read_text()
    assert "the attention kernel at head size 9 vs 8" in text and "c_proj matmuls at head size 9 vs 8" in text
    assert "the gate's z-norm and sigmoid" in text
    assert "the design's floor" in text and "`linear` over the floor" in text
    # the rows are the configured gates and the reference model: the split's own timings add none
    configured = {path.stem for path in (tmp_path / "configs/gate").glob("*.yaml")} | {"output_headwise"}
    assert set(size["rows"]) == configured | {"nanogpt_reference"}


def test_without_gate_arithmetic_is_the_baseline_on_the_gated_path():
    """The ablation the split times the gate's arithmetic against: log g = 0 everywhere, so the same loss as
    the baseline with the same weights, while the gated model's differs; every gate stays on its path."""
    shape = {"n_layer": 2, "n_head": 2, "n_embd": 16, "block_size": 16}
    batch = fixed_batch(shape, 3, torch.device("cpu"))
    none, gated = (build(shape, {"gate": g}, torch.device("cpu"), 0) for g in ("none", SPLIT_GATE))
    ablated = without_gate_arithmetic(build(shape, {"gate": SPLIT_GATE, "alpha_init": 3.0}, torch.device("cpu"), 0))
    for layer in ablated.model.gates:
        with torch.no_grad():
            layer.tau.fill_(1.0)  # a gate that would be far from 1 with its arithmetic
    loss = ablated.loss(batch)
    assert loss.item() == pytest.approx(none.loss(batch).item(), abs=1e-5)
    assert abs(gated.loss(batch).item() - none.loss(batch).item()) > 1e-4
    loss.backward()  # the ablated path trains: the energy projection still gets a (zero) gradient
    assert all(g.proj.weight.grad is not None and not g.proj.weight.grad.any() for g in ablated.model.gates)
