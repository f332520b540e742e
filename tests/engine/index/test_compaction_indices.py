"""Compaction by Quiver keeps BTREE and BITMAP indices covering the rewritten rows, as
pylance 14's own compaction does: the indices are remapped to the new row addresses (new
index files, committed in the Rewrite transaction), pylance's indexed answers stay exact
and use the index on the new fragments, Quiver's pruned reads stay narrow, pylance can keep
writing and compacting afterwards, and cleanup removes the replaced index files."""

from __future__ import annotations

import datetime as dt
import os
import shutil

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from compare import assert_same_table

from quiver.format.dataset import dataset, write_dataset
from quiver.format.errors import CommitConflictError
from quiver.format.index.files import IndexFile
from quiver.format.index.pruning import BLOCK_ROWS
from quiver.format.io.store import ObjectStore, filesystem

PER_FRAGMENT = 1500
FRAGMENTS = 6  # 9000 indexed rows: three BTREE pages of 4096 values
FILTERS = {
    "id = 4321": pc.field("id") == 4321,
    "id BETWEEN 4000 AND 4100": (pc.field("id") >= 4000) & (pc.field("id") <= 4100),
    "id < 50 OR id > 8950": (pc.field("id") < 50) | (pc.field("id") > 8950),
    "id IN (3, 4097, 8191, 9999)": pc.field("id").isin([3, 4097, 8191, 9999]),
    "id IS NULL": pc.field("id").is_null(),
    "cat = 'c3'": pc.field("cat") == "c3",
    "cat IS NULL": pc.field("cat").is_null(),
    "cat = 'c1' AND id > 7000": (pc.field("cat") == "c1") & (pc.field("id") > 7000),
}


def _rows(start: int, n: int) -> pa.Table:
    k = np.arange(start, start + n)
    return pa.table(
        {
            "key": pa.array(k, pa.int64()),
            "id": pa.array(k, pa.int64(), mask=k % 97 == 5),
            "cat": pa.array([f"c{x % 7}" for x in k], mask=k % 41 == 0),
        }
    )


def _build(uri: str, **kwargs: object) -> None:
    """Six small fragments indexed by pylance (BTREE on id, BITMAP on cat), then deletions."""
    ds = lance.write_dataset(
        _rows(0, PER_FRAGMENT * FRAGMENTS), uri, max_rows_per_file=PER_FRAGMENT, **kwargs
    )
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    ds.delete("key % 10 = 7 OR key BETWEEN 1400 AND 1700")


def _check(uri: str, step: str) -> None:
    """pylance's indexed answers equal the unindexed truth and use the indices, and Quiver's
    answers equal both."""
    ref = lance.dataset(uri)
    truth = ref.to_table()
    for sql, expr in FILTERS.items():
        want = truth.filter(expr).sort_by("key")
        assert_same_table(ref.to_table(filter=sql).sort_by("key"), want, f"{step}: {sql}")
        assert ref.count_rows(sql) == want.num_rows, f"{step}: count {sql}"
        ours = dataset(uri).to_table(filter=sql).sort_by("key")
        assert_same_table(ours, want, f"{step}: Quiver {sql}")
    assert "ScalarIndexQuery" in ref.scanner(filter="id = 4321").explain_plan()
    assert "ScalarIndexQuery" in ref.scanner(filter="cat = 'c3'").explain_plan()


def _indices(uri: str) -> dict[str, dict]:
    with pytest.warns(DeprecationWarning):
        return {i["name"]: i for i in lance.dataset(uri).list_indices()}


def _store(uri: str) -> ObjectStore:
    fs, root = filesystem(uri)
    return ObjectStore(fs, root, uri)


def _index_rows(uri: str, uuid: str, kind: str) -> pa.Table:
    """A BTREE's (value, row address) pairs or a BITMAP's (key, row address) pairs, sorted."""
    store = _store(uri)
    if kind == "BTREE":
        f = IndexFile(store, f"_indices/{uuid}/page_data.lance")
        try:
            t = f.read(["values", "ids"])
        finally:
            f.close()
        return t.sort_by([("values", "ascending"), ("ids", "ascending")])
    from quiver.format.index.scalar.rows import parse_row_id_map

    f = IndexFile(store, f"_indices/{uuid}/bitmap_page_lookup.lance")
    try:
        t = f.read(["keys", "bitmaps"])
    finally:
        f.close()
    frags = {fr.fragment_id: fr.physical_rows for fr in dataset(uri).get_fragments()}
    keys, ids = [], []
    for key, blob in zip(
        t.column("keys").to_pylist(), t.column("bitmaps").to_pylist(), strict=True
    ):
        rows = parse_row_id_map(blob, frags, uuid)
        keys += [key] * len(rows)
        ids.append(rows)
    table = pa.table({"keys": pa.array(keys, pa.string()), "ids": np.concatenate(ids)})
    return table.sort_by([("keys", "ascending"), ("ids", "ascending")])


@pytest.fixture
def built(tmp_path) -> str:
    uri = str(tmp_path / "t.lance")
    _build(uri)
    return uri


def test_compaction_remaps_indices_like_pylance(built: str, tmp_path) -> None:
    """Quiver's compaction gives the same fragments, index coverage and index contents
    (value, row address pairs) as pylance's, and pylance's indexed answers are exact."""
    theirs = str(tmp_path / "pylance.lance")
    shutil.copytree(built, theirs)
    before = _indices(built)
    version = lance.dataset(built).version
    metrics = dataset(built).optimize.compact_files(target_rows_per_fragment=3000)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=3000)
    assert metrics.fragments_removed == FRAGMENTS and metrics.fragments_added == 2
    ours_ds, ref_ds = lance.dataset(built), lance.dataset(theirs)
    assert ours_ds.version == ref_ds.version == version + 2  # ReserveFragments, then Rewrite
    new_ids = {f.fragment_id for f in ours_ds.get_fragments()}
    assert new_ids == {f.fragment_id for f in ref_ds.get_fragments()} == {6, 7}
    after, pylance_after = _indices(built), _indices(theirs)
    for name, kind in (("id_idx", "BTREE"), ("cat_idx", "BITMAP")):
        assert set(after[name]["fragment_ids"]) == new_ids, name
        assert set(pylance_after[name]["fragment_ids"]) == new_ids, name
        assert after[name]["uuid"] != before[name]["uuid"], name
        assert after[name]["version"] == before[name]["version"], name
        assert_same_table(
            _index_rows(built, after[name]["uuid"], kind),
            _index_rows(theirs, pylance_after[name]["uuid"], kind),
            f"{name} contents",
        )
        # the replaced index stays for older versions until cleanup
        assert os.path.isdir(os.path.join(built, "_indices", before[name]["uuid"]))
    live = ours_ds.count_rows()
    for d in ours_ds.describe_indices():
        assert d.num_rows_indexed == live, d.name
    _check(built, "compacted")
    stats = ours_ds.stats.index_stats("id_idx")
    assert stats["num_unindexed_rows"] == 0 and stats["num_indexed_rows"] == live


def test_pruned_scan_of_compacted_rows_reads_few_rows(built: str) -> None:
    """Quiver's index-pruned scan of a selective filter on the rewritten rows reads only the
    blocks holding its matches."""
    ours = dataset(built)
    ours.optimize.compact_files(target_rows_per_fragment=3000)
    ours = dataset(built)
    scanner = ours.scanner(filter="id = 4321")
    pruning = scanner.index_pruning
    assert pruning is not None
    frags = ours.get_fragments()
    assert {f.fragment_id for f in frags} <= pruning.covered
    read = 0
    for frag in frags:
        ranges = pruning.narrow(frag.fragment_id, frag.live_ranges(8192))
        read += sum(e - s for s, e in ranges)
    assert 0 < read <= BLOCK_ROWS
    assert scanner.to_table().column("key").to_pylist() == [4321]


def test_partial_compaction_and_unindexed_fragments(tmp_path) -> None:
    """Only small fragments are rewritten (a large one keeps its addresses), fragments
    appended after the index stay unindexed, and every answer is exact."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_rows(0, 5000), uri, max_rows_per_file=5000)
    write_dataset(_rows(5000, 4000), uri, mode="append", max_rows_per_file=1000)
    ref = lance.dataset(uri)
    ref.create_scalar_index("id", "BTREE")
    ref.create_scalar_index("cat", "BITMAP")
    write_dataset(_rows(9000, 600), uri, mode="append", max_rows_per_file=200)
    lance.dataset(uri).delete("key % 11 = 4")
    dataset(uri).optimize.compact_files(target_rows_per_fragment=2500)
    frags = {f.fragment_id: f.physical_rows for f in lance.dataset(uri).get_fragments()}
    covered = set(_indices(uri)["id_idx"]["fragment_ids"])
    assert 0 in covered and frags[0] == 5000  # the large fragment was left alone
    assert covered == set(_indices(uri)["cat_idx"]["fragment_ids"])
    # the 4000 indexed rows became one covered fragment, the 600 unindexed ones another
    assert len(covered) == 2 and len(frags) == 3
    (unindexed,) = set(frags) - covered
    assert frags[unindexed] == lance.dataset(uri).count_rows("key >= 9000")
    _check(uri, "partial compaction")


def test_pylance_writes_and_compacts_after_ours(built: str) -> None:
    """After Quiver's compaction pylance appends, deletes and compacts, Quiver compacts
    again, and the indexed answers stay exact throughout."""
    dataset(built).optimize.compact_files(target_rows_per_fragment=3000)
    lance.write_dataset(_rows(9000, 900), built, mode="append", max_rows_per_file=300)
    lance.dataset(built).delete("key % 13 = 0 OR key BETWEEN 4300 AND 4330")
    _check(built, "pylance append and delete")
    lance.dataset(built).optimize.compact_files(target_rows_per_fragment=3000)
    _check(built, "pylance compaction")
    lance.dataset(built).optimize.optimize_indices()
    write_dataset(_rows(9900, 600), built, mode="append", max_rows_per_file=200)
    dataset(built).delete("key % 17 = 1")
    dataset(built).optimize.compact_files(
        target_rows_per_fragment=20000, materialize_deletions_threshold=0.01
    )
    _check(built, "Quiver compaction again")
    live = lance.dataset(built).count_rows()
    assert lance.dataset(built).stats.index_stats("id_idx")["num_indexed_rows"] < live
    fragments = {f.fragment_id for f in lance.dataset(built).get_fragments()}
    covered = set().union(
        *(set(i["fragment_ids"]) for i in _indices(built).values() if i["name"] == "id_idx")
    )
    assert covered <= fragments and covered


def test_cleanup_removes_replaced_index_files(built: str) -> None:
    """Once the versions before the compaction are cleaned up, the replaced index files go
    and the remapped ones answer."""
    old = {i["uuid"] for i in _indices(built).values()}
    ours = dataset(built)
    ours.optimize.compact_files(target_rows_per_fragment=3000)
    new = {i["uuid"] for i in _indices(built).values()}
    assert not old & new
    stats = dataset(built).cleanup_old_versions(older_than=dt.timedelta(0))
    assert stats.index_files_removed == 3  # page_data, page_lookup, bitmap_page_lookup
    left = set(os.listdir(os.path.join(built, "_indices")))
    assert left == new
    _check(built, "after cleanup")


def test_stable_row_ids(tmp_path) -> None:
    """With stable row ids pylance 14's BTREE holds row addresses (index_version 1) and is
    remapped, its BITMAP holds row ids and is kept as it is; both cover the new fragments,
    as after pylance's own compaction."""
    uri, theirs = str(tmp_path / "t.lance"), str(tmp_path / "pylance.lance")
    _build(uri, enable_stable_row_ids=True)
    shutil.copytree(uri, theirs)
    before = _indices(uri)
    dataset(uri).optimize.compact_files(target_rows_per_fragment=3000)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=3000)
    after, pylance_after = _indices(uri), _indices(theirs)
    frags = {f.fragment_id for f in lance.dataset(uri).get_fragments()}
    assert frags == {f.fragment_id for f in lance.dataset(theirs).get_fragments()} == {6, 7}
    for name in ("id_idx", "cat_idx"):
        assert set(after[name]["fragment_ids"]) == frags, name
        assert set(pylance_after[name]["fragment_ids"]) == frags, name
        kept = pylance_after[name]["uuid"] == before[name]["uuid"]
        assert (after[name]["uuid"] == before[name]["uuid"]) == kept, name
    assert after["cat_idx"]["uuid"] == before["cat_idx"]["uuid"]
    assert_same_table(
        _index_rows(uri, after["id_idx"]["uuid"], "BTREE"),
        _index_rows(theirs, pylance_after["id_idx"]["uuid"], "BTREE"),
        "id_idx contents",
    )
    _check(uri, "stable row ids")


def test_failed_compaction_leaves_no_index_files(built: str) -> None:
    """A compaction that loses to a concurrent change removes the index files it wrote."""
    ours = dataset(built)
    indices_before = set(os.listdir(os.path.join(built, "_indices")))
    # new data files for the fragments the compaction rewrites (a delete would be rebased)
    lance.dataset(built).add_columns({"again": "key + 1"})
    with pytest.raises(CommitConflictError):
        ours.optimize.compact_files(target_rows_per_fragment=3000)
    assert set(os.listdir(os.path.join(built, "_indices"))) == indices_before
    _check(built, "after the failed compaction")
