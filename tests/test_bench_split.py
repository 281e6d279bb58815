"""`ega bench`'s split of EGA-1's overhead: the attention kernel's share, the padded matmuls', the rest."""

import json
import math

import pytest

from ega_lightning.bench import main, median_interval, overhead_split

from .test_bench import SHAPE, write_configs


def test_median_interval_uses_the_binomial_order_statistics():
    assert median_interval([5.0, 1, 7, 3, 2, 6, 4]) == (1, 7)  # n = 7: min and max (coverage 98.4%)
    values = [float(v) for v in range(21, 0, -1)]
    assert median_interval(values) == (6, 16)  # n = 21: the 6th and 16th smallest
    # their coverage is at least 95%, and the next narrower pair's is not
    coverage = 1 - 2 * sum(math.comb(21, i) for i in range(6)) / 2**21
    narrower = 1 - 2 * sum(math.comb(21, i) for i in range(7)) / 2**21
    assert coverage >= 0.95 > narrower


def test_overhead_split_adds_up_per_repetition():
    base, gated = [100.0, 110.0, 90.0], [110.0, 120.0, 99.0]
    plain, padded = [5.0, 5.5, 4.5], [5.5, 6.0, 5.0]
    matmuls = ([2.0, 2.0, 2.0], [2.25, 2.2, 2.2])
    split = overhead_split(gated, base, {"kernel": (plain, padded), "matmuls": matmuls}, n_layer=4)
    assert split["total"]["points"] == pytest.approx(10.0)  # 10%, 9.09%, 10%
    assert split["kernel"]["points"] == pytest.approx(100 * 4 * 0.5 / 100)  # 2.0, 1.82, 2.22 -> median 2.0
    assert split["matmuls"]["points"] == pytest.approx(80 / 90)  # 1.0, 0.727, 0.889 -> median 0.889
    # per repetition 7.0, 6.55, 6.89: the median of differences, not the difference of medians
    assert split["rest"]["points"] == pytest.approx(10 - 200 / 90 - 80 / 90)
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
    for part in ("total", "kernel", "matmuls", "rest"):
        low, high = split[part]["interval"]
        assert low <= split[part]["points"] <= high, part
    text = (out / "bench-cpu-32-true.md").read_text()
    assert "the attention kernel at head size 9 vs 8" in text and "c_proj matmuls at head size 9 vs 8" in text
