"""Quiver's writes keep every index right for pylance: after appends, deletes, compaction,
column changes and restore by Quiver, pylance's indexed answers (BTREE, BITMAP and an exact
IVF_FLAT search) equal its unindexed ones, and Quiver's pruned reads equal both."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest
from compare import assert_same_table

from quiver.format.dataset import dataset, write_dataset

DIM = 8
FILTERS = [
    "id = 17",
    "id BETWEEN 300 AND 340",
    "id IN (2, 401, 777, 1299)",
    "cat = 'c2' AND id > 900",
    "cat IS NULL OR id < 5",
    "NOT (cat = 'c1') AND id >= 1200",
]


def _rows(start: int, n: int) -> pa.Table:
    k = np.arange(start, start + n)
    rng = np.random.default_rng(start)
    vectors = rng.random(n * DIM, dtype=np.float32)
    return pa.table(
        {
            "id": pa.array(k, pa.int64()),
            "cat": pa.array([f"c{x % 5}" for x in k], mask=k % 13 == 0),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors), DIM),
        }
    )


def _check(uri: str, step: str) -> None:
    """pylance's indexed answers equal its unindexed ones and Quiver's pruned reads."""
    ref, ours = lance.dataset(uri), dataset(uri)
    for sql in FILTERS:
        indexed = ref.to_table(filter=sql).sort_by("id")
        plain = ref.to_table(filter=sql, use_scalar_index=False).sort_by("id")
        assert_same_table(indexed, plain, f"{step}: pylance {sql}")
        assert_same_table(ours.to_table(filter=sql).sort_by("id"), plain, f"{step}: ours {sql}")
        assert ref.count_rows(sql) == ours.count_rows(sql) == plain.num_rows, (step, sql)
    q = np.full(DIM, 0.5, dtype=np.float32)
    near = {"column": "vec", "q": q, "k": 10, "nprobes": 4}
    found = ref.to_table(nearest=near, columns=["id"]).column("id").to_pylist()
    exact = ref.to_table(nearest={**near, "use_index": False}, columns=["id"])
    assert found == exact.column("id").to_pylist(), f"{step}: nearest"
    live = set(ours.to_table(columns=["id"]).column("id").to_pylist())
    assert set(found) <= live, f"{step}: nearest returned deleted rows"


@pytest.fixture
def indexed(tmp_path) -> str:
    uri = str(tmp_path / "t.lance")
    ds = lance.write_dataset(_rows(0, 1200), uri, max_rows_per_file=300)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    ds.create_index("vec", "IVF_FLAT", num_partitions=4)
    _check(uri, "built")
    return uri


def test_appends_deletes_and_compaction(indexed: str) -> None:
    write_dataset(_rows(1200, 200), indexed, mode="append", max_rows_per_file=100)
    _check(indexed, "append")
    ours = dataset(indexed)
    ours.delete("id % 7 = 3 OR id BETWEEN 590 AND 905 OR id = 17")
    _check(indexed, "delete")
    indexed_before = set(ours.list_indices()[0]["fragment_ids"])
    # a fragment the delete emptied stays in the bitmaps, as pylance 14 leaves it
    present = {f.fragment_id for f in ours.get_fragments()}
    assert indexed_before - present
    metrics = ours.optimize.compact_files(
        target_rows_per_fragment=1000, materialize_deletions_threshold=0.05
    )
    # indexed fragments were rewritten: the indices must stop claiming their rows
    left = {f.fragment_id for f in ours.get_fragments()}
    compacted = present - left
    assert metrics.fragments_removed and compacted & indexed_before
    for index in ours.list_indices():
        assert not index["fragment_ids"] & compacted
    _check(indexed, "compact")
    write_dataset(_rows(1400, 50), indexed, mode="append")
    ours = dataset(indexed)
    ours.delete("id < 20")
    _check(indexed, "append and delete after compaction")


def test_column_changes_and_restore(indexed: str) -> None:
    ours = dataset(indexed)
    ours.add_columns({"twice": "id * 2"})
    _check(indexed, "add_columns")
    ours.delete("id > 1100")
    ours.drop_columns(["twice"])
    _check(indexed, "drop_columns")
    before = ours.version
    ours.delete("cat = 'c3'")
    ours.checkout_version(before).restore()
    _check(indexed, "restore")
    assert lance.dataset(indexed).count_rows("cat = 'c3'") > 0
