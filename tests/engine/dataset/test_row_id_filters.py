"""Filters on `_rowid` / `_rowaddr`, which pylance accepts whether or not they are output."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest


@pytest.mark.parametrize("stable", [False, True])
def test_row_id_filters_match_pylance(tmp_path: Path, stable: bool):
    from quiver.format.dataset import dataset

    uri = str(tmp_path / "ds")
    t = pa.table({"a": list(range(50)), "s": [f"x{i}" for i in range(50)]})
    ds = lance.write_dataset(
        t, uri, data_storage_version="2.0", max_rows_per_file=20, enable_stable_row_ids=stable
    )
    ds.delete("a % 7 = 0")
    if stable:
        ds.optimize.compact_files(target_rows_per_fragment=100)
    ref, ours = lance.dataset(uri), dataset(uri)
    for flt in ["_rowid > 10", "_rowaddr >= 4294967296", "_rowid IN (1, 2, 30) AND a > 1"]:
        for kwargs in ({}, {"columns": ["s"]}, {"with_row_id": True}):
            assert ours.to_table(filter=flt, **kwargs) == ref.to_table(filter=flt, **kwargs), (
                flt,
                kwargs,
            )
        assert ours.count_rows(filter=flt) == ref.count_rows(filter=flt)


def test_columns_may_name_row_id_columns(tmp_path: Path):
    from quiver.format.dataset import dataset

    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"a": list(range(10))}), uri, data_storage_version="2.0")
    for cols in (["_rowid", "a"], ["a", "_rowaddr"], ["_rowaddr", "_rowid"]):
        assert dataset(uri).to_table(columns=cols) == lance.dataset(uri).to_table(columns=cols)


def test_tags_unicode_and_on_branches(tmp_path: Path):
    from quiver.format.dataset import dataset

    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"a": [1, 2, 3]}), uri, data_storage_version="2.0")
    lance.dataset(uri).create_branch("dev", 1).insert(pa.table({"a": [10, 20]}))
    lance.write_dataset(pa.table({"a": [99]}), uri, mode="append")
    lance.dataset(uri).tags.create("devtag", ("dev", 2))
    lance.dataset(uri).tags.create("ü", 1)
    assert (
        dataset(uri, version="devtag").to_table() == lance.dataset(uri, version="devtag").to_table()
    )
    assert dataset(uri, version="ü").to_table() == pa.table({"a": [1, 2, 3]})
    assert set(dataset(uri).tags.list()) == {"devtag", "ü"}
