"""`ega bench`'s split of EGA-1's overhead into the attention kernel's share and everything else."""

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
    split = overhead_split(gated, base, plain, padded, n_layer=4)
    assert split["total"]["points"] == pytest.approx(10.0)  # 10%, 9.09%, 10%
    assert split["kernel"]["points"] == pytest.approx(100 * 4 * 0.5 / 100)  # 2.0, 1.82, 2.22 -> median 2.0
    # per repetition 8.0, 7.27, 7.78: the median of differences, not the difference of medians
    assert split["rest"]["points"] == pytest.approx(10 - 200 / 90)
    assert split["kernel_ratio"] == pytest.approx(5.5 / 5)


def test_bench_reports_the_split_beside_the_table(tmp_path):
    write_configs(tmp_path / "configs")
    out = tmp_path / "out"
    args = ["--configs", str(tmp_path / "configs"), "--sizes", "tiny", "--repeats", "3", "--warmup", "1"]
    main([*args, "--no_generation", "--device", "cpu", "--out", str(out)])
    (size,) = json.loads((out / "bench-cpu-32-true.json").read_text())["sizes"]
    split = size["split"]
    hs = SHAPE["n_embd"] // SHAPE["n_head"]
    assert split["head_sizes"] == [hs, hs + 1]
    assert all(key not in size["rows"] for key in ("sdpa+0", "sdpa+1"))  # not contenders of the table
    low, high = split["rest"]["interval"]
    assert low <= split["rest"]["points"] <= high
    assert "the attention kernel at head size 9 vs 8" in (out / "bench-cpu-32-true.md").read_text()
