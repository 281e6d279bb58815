"""A record names which CPU kind trained which steps: one segment per fit (issue 67)."""

import json

from ega_lightning import host
from ega_lightning.experiments.records import Record
from ega_lightning.experiments.rundirs import _segments
from ega_lightning.runs import SEGMENTS, read_segments

AVX2 = {"model": "AMD EPYC", "capability": "AVX2", "units": ["AVX2"], "cores": 2}
AVX512 = {"model": "AMD EPYC", "capability": "AVX512", "units": ["AVX2", "AVX-512", "AVX-512 BF16"], "cores": 2}


def write_segments(run_dir, *segments):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / SEGMENTS).write_text("".join(json.dumps(s) + "\n" for s in segments))


def test_each_segment_ends_where_the_next_fit_resumed_and_the_last_at_the_run_end(tmp_path):
    write_segments(tmp_path, {"from_step": 0, "cpu": AVX512}, {"from_step": 2400, "cpu": AVX2})
    assert [(s["from_step"], s["to_step"]) for s in read_segments(tmp_path)] == [(0, 2400), (2400, None)]
    found = _segments(tmp_path, 5000)
    assert [(s["from_step"], s["to_step"], s["cpu"]["capability"]) for s in found] == [
        (0, 2400, "AVX512"),
        (2400, 5000, "AVX2"),
    ]


def test_a_run_dir_without_segments_gives_none_and_a_record_without_them_keeps_its_bytes(tmp_path):
    assert read_segments(tmp_path) is None and _segments(tmp_path, 100) is None
    record = Record(run_name="r", seed=1)
    assert "segments" not in record.as_data()
    with_segments = Record(run_name="r", seed=1, segments=[{"from_step": 0, "to_step": 100, "cpu": AVX2}])
    assert Record.from_json(json.loads(with_segments.to_json())) == with_segments


def test_the_cpu_kind_names_the_vector_units_that_set_its_kernels():
    epyc_avx2 = {"fma", "avx", "avx2"}
    epyc_avx512 = epyc_avx2 | {"avx512f", "avx512bw", "avx512_bf16"}
    xeon_amx = epyc_avx512 | {"amx_tile", "amx_bf16"}
    assert host.vector_units(epyc_avx2) == ["AVX2"]
    assert host.vector_units(epyc_avx512) == ["AVX2", "AVX-512", "AVX-512 BF16"]
    assert host.vector_units(xeon_amx) == ["AVX2", "AVX-512", "AVX-512 BF16", "AMX"]
    assert host.cpu_kind("AVX512", xeon_amx)["units"][-1] == "AMX"
    assert "(AVX2 kernels; AVX2)" in host.cpu_kind_line("AVX2", epyc_avx2)  # CI's line beside each suite's time
