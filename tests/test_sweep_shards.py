"""Which runs one `ega sweep` invocation runs: its shard of the spec (each seed on one shard) or one run by index."""

from __future__ import annotations

from ega_lightning.experiments import spec

from .helpers import REPO


def test_shards_partition_the_spec_and_keep_each_seed_together():
    sweep = spec.load_spec(REPO / "configs" / "sweeps" / "short.yaml", check_files=False)
    for n in (1, 2, 3, 4, 7):
        shards = [spec.shard(sweep.runs, k, n) for k in range(n)]
        names = [r.run_name for s in shards for r in s]
        assert sorted(names) == sorted(r.run_name for r in sweep.runs)  # every run once
        assert len(names) == len(set(names))  # none twice
        for s in shards:
            for seed in {r.seed for r in s}:
                assert {r.run_name for r in s if r.seed == seed} == {
                    r.run_name for r in sweep.runs if r.seed == seed
                }  # a seed's runs share one shard
        assert shards == [spec.shard(sweep.runs, k, n) for k in range(n)]  # deterministic
        # even: dealing whole seeds, no shard exceeds another by more than the largest seed's runs
        largest = max(sum(r.seed == seed for r in sweep.runs) for seed in {r.seed for r in sweep.runs})
        sizes = [len(s) for s in shards]
        assert max(sizes) - min(sizes) <= largest, sizes


def test_index_picks_one_run_and_past_the_end_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    from ega_lightning.experiments import sweep

    short = "configs/sweeps/short.yaml"
    n = len(spec.load_spec(short).runs)
    assert sweep.main([short, "--index", "1", "--dry_run", "--runs_dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("[1/1] ts-none-seed2:") and f"\n{n - 1:>2}  " in out  # the run, then the numbering
    assert sweep.main([short, "--index", str(n), "--runs_dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--index {n} is out of range" in err and f"--array=0-{n - 1}" in err
    assert sweep.main([short, "--shard", "3/3"]) == 2 and "--shard takes K/N" in capsys.readouterr().err
