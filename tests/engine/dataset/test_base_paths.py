"""Shallow clones: data and deletion files resolved through the manifest's base paths."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from quiver.format.dataset import dataset


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


@pytest.mark.parametrize("storage_version", ["legacy", "2.0"])
def test_our_shallow_clone_is_read_and_extended_by_pylance(tmp_path: Path, storage_version: str):
    from quiver.format.dataset import write_dataset

    t = pa.table({"a": list(range(10)), "s": [f"v{i}" for i in range(10)]})
    src_uri = str(tmp_path / "src")
    write_dataset(t, src_uri, data_storage_version=storage_version, max_rows_per_file=4)
    src = dataset(src_uri)
    src.delete("a = 2")
    src.tags.create("snap", 2)
    write_dataset(t.slice(0, 2), src_uri, mode="append")  # the clone must not see this
    clone_uri = str(tmp_path / "clone")
    clone = dataset(src_uri).shallow_clone(clone_uri, "snap")
    assert clone.version == 2
    expected = lance.dataset(src_uri, version=2).to_table()
    assert lance.dataset(clone_uri).to_table() == expected
    lance.write_dataset(t.slice(5, 1), clone_uri, mode="append")
    write_dataset(t.slice(6, 1), clone_uri, mode="append")
    dataset(clone_uri).delete("a = 0")
    ref = lance.dataset(clone_uri)
    assert ref.version == 5
    assert ref.to_table() == dataset(clone_uri).to_table()
    assert ref.to_table().column("a").to_pylist() == [1, 3, 4, 5, 6, 7, 8, 9, 5, 6]
    assert lance.dataset(src_uri).count_rows() == 11  # the source is untouched
    assert len(list((tmp_path / "clone" / "data").glob("*.lance"))) == 2  # only the appends
