"""Repeated takes from the same 2.1+ data files: after a few, fixed-width columns are
served from whole decoded columns (`TAKEN_COLUMNS`), with the same rows, types and nulls
as pylance's takes; other columns keep reading pages."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from quiver.format.dataset import dataset, write_dataset
from quiver.format.dataset.fragment import LanceFragment
from quiver.format.file.v21 import reader as v21


def _table(rows: int) -> pa.Table:
    rng = np.random.default_rng(5)
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "f": pa.array(rng.random(rows).astype(np.float32), mask=rng.random(rows) < 0.1),
            "flag": pa.array(rng.random(rows) < 0.5, mask=rng.random(rows) < 0.1),
            "ts": pa.array(np.arange(rows, dtype=np.int64) * 1_000, pa.timestamp("us")),
            "s": pa.array([f"s{i}" for i in range(rows)]),
            "tags": pa.array([[i, i + 1] for i in range(rows)]),
        }
    )


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_repeated_takes_equal_pylance_before_and_after_the_columns_are_kept(
    tmp_path: Path, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(v21, "TAKEN_COLUMNS", v21.ByteLRU(64 << 20))
    uri = str(tmp_path / "ds")
    write_dataset(_table(9_000), uri, max_rows_per_file=3_000, data_storage_version=version)
    ds = dataset(uri)
    ds.delete("id % 11 = 4")
    ds = dataset(uri)
    oracle = lance.dataset(uri)
    rng = np.random.default_rng(1)
    for round_ in range(2 * v21._TAKES_BEFORE_KEEPING):
        indices = np.sort(rng.choice(ds.count_rows(), 25, replace=False))
        for columns in (["id", "f", "flag", "ts"], ["id", "s", "tags"], ["f"]):
            got = ds.take(indices, columns=columns)
            want = oracle.take(indices, columns=columns)
            assert got.schema == want.schema, (round_, columns)
            assert got.to_pylist() == want.to_pylist(), (round_, columns)
    kept = {key[2] for key in v21.TAKEN_COLUMNS._items}
    fields = {f.name: f.id for f in ds.lance_schema.fields}
    assert {fields["id"], fields["f"], fields["flag"], fields["ts"]} <= kept
    assert fields["s"] not in kept and fields["tags"] not in kept

    # kept columns are taken without opening a data file, row id columns beside them
    def no_files(*_: object) -> None:
        raise AssertionError("a data file was opened")

    monkeypatch.setattr(LanceFragment, "reader", no_files)
    indices = [0, 5, 1_000, ds.count_rows() - 1]
    got = ds.take(indices, columns=["ts", "id"], with_row_id=True, with_row_address=True)
    whole = oracle.to_table(columns=["ts", "id"], with_row_id=True, with_row_address=True)
    assert got.to_pylist() == whole.take(indices).to_pylist()


def test_a_column_too_big_to_keep_is_read_from_its_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(v21, "TAKEN_COLUMNS", v21.ByteLRU(64 << 20))
    monkeypatch.setattr(v21, "TAKEN_COLUMN_BYTES", 1_000)
    uri = str(tmp_path / "ds")
    write_dataset(_table(2_000), uri, data_storage_version="2.2")
    ds = dataset(uri)
    for _ in range(2 * v21._TAKES_BEFORE_KEEPING):
        assert ds.take([3, 1_999], columns=["id"]).column("id").to_pylist() == [3, 1_999]
    assert len(v21.TAKEN_COLUMNS) == 0


def test_a_column_is_kept_only_over_one_with_fewer_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Takes spread over more columns than fit do not decode column after column: a new
    column replaces a kept one only once it has served more takes."""
    uri = str(tmp_path / "ds")
    write_dataset(_table(2_000), uri, max_rows_per_file=1_000, data_storage_version="2.2")
    ds = dataset(uri)
    one_column = 1_000 * 9  # int64 values and their validity, as the reader sizes them
    monkeypatch.setattr(v21, "TAKEN_COLUMNS", v21.ByteLRU(one_column + 100))
    monkeypatch.setattr(v21, "_take_counts", {})
    first, second = ds.get_fragments()

    names = {f.data_files()[0].path: i for i, f in enumerate((first, second))}

    def kept() -> list[int]:  # which fragments' columns are kept
        return sorted(names[key[0].rsplit("/", 1)[1]] for key in v21.TAKEN_COLUMNS._items)

    for _ in range(6):
        assert first.take([1, 2], columns=["id"]).column("id").to_pylist() == [1, 2]
    assert kept() == [0]
    for _ in range(6):  # as many takes as the kept column: not worth more
        assert second.take([3], columns=["id"]).column("id").to_pylist() == [1_003]
    assert kept() == [0]
    assert second.take([4], columns=["id"]).column("id").to_pylist() == [1_004]
    assert kept() == [1]


def test_cleanup_drops_the_kept_columns_and_page_indexes_of_the_files_it_removes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compaction replaces the files, cleanup removes them: what the caches kept of those
    files goes with them (nothing reads them again), what they keep of live files stays."""
    monkeypatch.setattr(v21, "TAKEN_COLUMNS", v21.ByteLRU(64 << 20))
    monkeypatch.setattr(v21, "PAGE_INDEXES", v21.ByteLRU(16 << 20))
    uri = str(tmp_path / "ds")
    write_dataset(_table(9_000), uri, max_rows_per_file=3_000, data_storage_version="2.1")
    write_dataset(_table(300), uri, mode="append", data_storage_version="2.1")

    def take_often() -> set[str]:
        ds = dataset(uri)
        for _ in range(2 * v21._TAKES_BEFORE_KEEPING):
            ds.take(np.arange(0, ds.count_rows(), 97), columns=["id", "f"])
        return {key[0] for key in v21.TAKEN_COLUMNS._items}

    before = take_often()
    assert len(before) == 4 and {key[0] for key in v21.PAGE_INDEXES._items}
    dataset(uri).optimize.compact_files(target_rows_per_fragment=20_000)
    after = take_often() - before  # the compacted file's columns, beside the old ones
    assert len(after) == 1
    dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))
    assert {key[0] for key in v21.TAKEN_COLUMNS._items} == after
    assert {key[0] for key in v21.PAGE_INDEXES._items} <= after
