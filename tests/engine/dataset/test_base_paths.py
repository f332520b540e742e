"""Shallow clones: data and deletion files resolved through the manifest's base paths."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from format.dataset import dataset


@pytest.mark.parametrize("storage_version", ["legacy", "2.0"])
def test_shallow_clone_reads_through_base_paths(tmp_path: Path, storage_version: str):
    t = pa.table({"a": list(range(10)), "s": [f"v{i}" for i in range(10)]})
    src = lance.write_dataset(
        t, str(tmp_path / "src"), data_storage_version=storage_version, max_rows_per_file=4
    )
    src.delete("a = 1 OR a = 6")
    clone_uri = str(tmp_path / "clone")
    src.shallow_clone(clone_uri, src.version)
    lance.write_dataset(t.slice(0, 3), clone_uri, mode="append")
    ours, ref = dataset(clone_uri), lance.dataset(clone_uri)
    assert len(ours.manifest.pb.base_paths) == 1
    assert any(f.files[0].HasField("base_id") for f in ours.manifest.pb.fragments)
    for kwargs in ({}, {"with_row_id": True}, {"filter": "a > 2"}):
        assert ours.to_table(**kwargs) == ref.to_table(**kwargs), kwargs
    assert ours.take([0, 7, 3]) == ref.take([0, 7, 3])
