"""Run records: the one schema (`records.Record`) read and written as the files hold it, format 1 migrated,
no machine's path in a shipped record, and atomic writes."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from ega_lightning import CharLM
from ega_lightning.data.corpora import CORPORA
from ega_lightning.experiments import records
from ega_lightning.io import write_atomic

from .helpers import REPO


def test_migration_rewrites_a_format_1_record_without_machine_paths(tmp_path):
    v2 = json.loads((REPO / "results" / "runs" / "ts-linear-seed1.json").read_text())
    v1 = {k: v for k, v in v2.items() if k not in ("command", "git_commit", "git_dirty", "versions", "n_params")}
    v1 |= {"format": 1, "hparams": {**v2["hparams"], "data_dir": "/somewhere/data"}}
    v1["done"] = {**v2["done"], "command": ["/opt/venv/bin/python", "-m", "ega_lightning.cli", "fit", "--runs_dir=/x"]}
    (tmp_path / "r.json").write_text(json.dumps(v1))
    assert records.migrate(tmp_path) == [tmp_path / "r.json"]
    migrated = json.loads((tmp_path / "r.json").read_text())
    assert migrated["command"] == v2["command"] and migrated["command"].startswith("ega fit -c configs/base.yaml")
    assert migrated["git_commit"] is None and migrated["versions"] is None  # never known: not invented
    assert migrated["fingerprint"] is None
    # counted again, from the hyper-parameters the record keeps: the model itself, and EGA-1's formula (docs/gates.md)
    h = v2["hparams"]
    model = CharLM(CORPORA[h["corpus"]].vocab, **{k: h[k] for k in ("n_layer", "n_head", "n_embd", "block_size")})
    assert migrated["n_params"] == sum(p.numel() for p in model.parameters())
    assert migrated["gate_params"] == h["n_layer"] * h["n_head"] * (h["n_embd"] + 2)
    assert "/somewhere" not in json.dumps(migrated) and "/opt/venv" not in json.dumps(migrated)
    assert records.migrate(tmp_path) == []  # once is enough


def test_shipped_records_hold_no_absolute_path():
    for path in (REPO / "results" / "runs").glob("*.json"):
        text = path.read_text()
        assert '"/' not in text and json.loads(text)["format"] == records.FORMAT, path


def test_atomic_write_leaves_the_old_file_and_no_temporary_on_failure(tmp_path):
    target = tmp_path / "f.json"
    write_atomic(target, "old")

    with pytest.raises(TypeError):
        write_atomic(target, 123)  # type: ignore[arg-type]
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.json"]
    shutil.rmtree(tmp_path / "sub", ignore_errors=True)
    write_atomic(tmp_path / "sub" / "g", b"\x00")
    assert (tmp_path / "sub" / "g").read_bytes() == b"\x00"


def test_every_shipped_record_is_a_record_and_the_schema_writes_it_back_as_it_is():
    # git_modified (issue 52) and segments (issue 67): written where a sweep kept them, left out where not, so records
    # before them keep their bytes
    today = [f.name for f in dataclasses.fields(records.Record)]
    before_67 = [name for name in today if name != "segments"]
    before_52 = [name for name in before_67 if name != "git_modified"]
    complete, with_paths = 0, 0
    for path in sorted((REPO / "results" / "runs").glob("*.json")):
        record = records.read(path)
        text = path.read_text()
        assert record.run_name == path.stem and record.scalars["val/loss"], path
        if list(json.loads(text)) in (today, before_67, before_52):  # every field of its schema, in its order
            assert record.to_json() == text, path
            complete += 1
        else:  # records from before the fingerprint was kept: read, the fingerprint unknown
            assert set(before_52) - set(json.loads(text)) == {"fingerprint"} and record.fingerprint is None, path
        if record.git_modified is not None:  # the paths a dirty tree had modified, none for a clean one
            assert bool(record.git_modified) == record.git_dirty, path
            with_paths += 1
    assert complete > 0 and with_paths > 0  # the RoPE study's records (issue 56) are the first that kept them
    assert records.read_record(path) == json.loads(record.to_json())  # plain data, as the file would hold it


def test_a_record_of_another_format_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"format": 3, "run_name": "r-seed1", "seed": 1}))
    with pytest.raises(records.RecordError, match=r"r\.json is not a run record this version reads .*format 3"):
        records.read(path)
    path.write_text(json.dumps({"format": 2, "seed": 1}))  # no run name
    with pytest.raises(records.RecordError, match="is not a run record this version reads"):
        records.read(path)
