"""pylance's API surface, issue 19 item 6: alter_columns casts that lose time precision,
cleanup_old_versions on a dataset with branches, IS NULL on a legacy blob column; each
compared with pylance doing the same on a twin dataset."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from compare import assert_same_table

from quiver.format.dataset import dataset
from quiver.format.dataset import write_dataset as dataset_write

pytestmark = pytest.mark.compat

TIMES = [dt.datetime(2024, 1, 1, 1, 1, 1, 123456), None, dt.datetime(1969, 12, 31, 23, 59, 59)]


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (pa.timestamp("us"), pa.timestamp("ms")),
        (pa.timestamp("us"), pa.timestamp("s")),
        (pa.timestamp("ms"), pa.timestamp("s")),
        (pa.timestamp("us"), pa.timestamp("ns")),
        (pa.timestamp("us"), pa.date32()),
        (pa.int32(), pa.int64()),
        (pa.float64(), pa.float32()),
        (pa.string(), pa.large_string()),
    ],
)
def test_alter_columns_casts_match_pylance(tmp_path: Path, source: pa.DataType, target):
    values = TIMES if pa.types.is_timestamp(source) else None
    if values is None:
        values = {"string": ["a", None, "c"]}.get(str(source), [1, None, 3])
    table = pa.table({"x": pa.array(values, source), "k": [1, 2, 3]})
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    lance.write_dataset(table, ours, max_rows_per_file=2)
    lance.write_dataset(table, ref, max_rows_per_file=2)
    dataset(ours).alter_columns({"path": "x", "data_type": target})
    lance.dataset(ref).alter_columns({"path": "x", "data_type": target})
    expected = lance.dataset(ref).to_table()
    assert expected.schema.field("x").type == target
    assert_same_table(lance.dataset(ours).to_table(), expected, "pylance reading ours")
    assert_same_table(dataset(ours).to_table(), expected, "ours")


def _with_branch(uri: str) -> None:
    lance.write_dataset(pa.table({"a": [1, 2, 3]}), uri, data_storage_version="2.0")
    lance.write_dataset(pa.table({"a": [4]}), uri, mode="append")
    lance.dataset(uri).create_branch("dev", 2).insert(pa.table({"a": [10, 20]}))
    lance.write_dataset(pa.table({"a": [99]}), uri, mode="overwrite")
    lance.write_dataset(pa.table({"a": [98]}), uri, mode="append")


def _data_files(uri: str) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, f), uri)
        for d, _, files in os.walk(uri)
        for f in files
        if f.endswith(".lance")
    )


def test_cleanup_keeps_the_versions_branches_start_from(tmp_path: Path):
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    _with_branch(ours)
    _with_branch(ref)
    stats = dataset(ours).cleanup_old_versions(older_than=dt.timedelta(0))
    expected = lance.dataset(ref).cleanup_old_versions(older_than=dt.timedelta(0))
    assert stats.old_versions == expected.old_versions == 2
    assert [v["version"] for v in lance.dataset(ours).versions()] == [2, 4]
    assert [v["version"] for v in lance.dataset(ref).versions()] == [2, 4]
    assert len(_data_files(ours)) == len(_data_files(ref))
    for uri in (ours, ref):
        branch = lance.dataset(uri).checkout_version(("dev", 3))
        assert sorted(branch.to_table().column("a").to_pylist()) == [1, 2, 3, 4, 10, 20]
        assert dataset(uri, version=2).to_table().column("a").to_pylist() == [1, 2, 3, 4]
    assert_same_table(dataset(ours).to_table(), lance.dataset(ref).to_table(), "latest")
    # the version kept for the branch keeps its files but not its transaction, as in pylance
    for sub in ("_transactions", "_versions", "_deletions"):
        mine = os.listdir(f"{ours}/{sub}") if os.path.isdir(f"{ours}/{sub}") else []
        theirs = os.listdir(f"{ref}/{sub}") if os.path.isdir(f"{ref}/{sub}") else []
        assert len(mine) == len(theirs), sub


def test_is_null_on_a_legacy_blob_column(tmp_path: Path):
    uri = str(tmp_path / "blobs")
    field = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    schema = pa.schema([pa.field("id", pa.int64()), field])
    table = pa.table({"id": [1, 2, 3, 4], "b": [b"abc", None, b"", b"xyz"]}, schema=schema)
    lance.write_dataset(table, uri, data_storage_version="legacy")
    for sql in ("b IS NULL", "b IS NOT NULL", "id > 2 AND b IS NULL"):
        expected = lance.dataset(uri).to_table(filter=sql, columns=["id"])
        assert_same_table(dataset(uri).to_table(filter=sql, columns=["id"]), expected, sql)
        assert dataset(uri).count_rows(sql) == lance.dataset(uri).count_rows(sql)


def test_insert_moves_the_dataset_as_pylance_s(tmp_path: Path) -> None:
    rows = pa.table({"x": [1, 2], "s": ["a", None]})
    seen = []
    for engine, path in ((dataset, tmp_path / "q.lance"), (lance.dataset, tmp_path / "p.lance")):
        lance.write_dataset(rows, path)
        ds = engine(str(path))
        ds.insert(pa.table({"x": [3], "s": ["c"]}))
        ds.insert(rows.slice(1), mode="overwrite", max_rows_per_file=1)
        ds.insert(rows)
        seen.append((ds.version, ds.to_table().sort_by("x"), ds.count_rows()))
        twin = lance.dataset(str(path))
        seen.append([type(twin.read_transaction(v).operation).__name__ for v in (2, 3, 4)])
    assert seen[0][0] == seen[2][0] == 4
    assert_same_table(seen[0][1], seen[2][1], "after inserts")
    assert seen[1] == seen[3] == ["Append", "Overwrite", "Append"]


def _files(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]


def test_io_stats_count_every_read_and_write(tmp_path: Path) -> None:
    path = tmp_path / "io.lance"
    ds = dataset_write(pa.table({"x": list(range(50_000))}), path)
    written = ds.io_stats_snapshot()
    files = _files(path)
    assert (written.write_iops, written.written_bytes) == (
        len(files),
        sum(p.stat().st_size for p in files),
    )
    assert written.read_iops == 0
    # pylance counts the same writes for the same files
    twin = lance.write_dataset(pa.table({"x": list(range(50_000))}), tmp_path / "p.lance")
    assert twin.io_stats_snapshot().write_iops == written.write_iops
    ds = dataset(str(path))
    ds.io_stats_incremental()  # opening read the manifest
    ds.to_table()
    scanned = ds.io_stats_snapshot()
    data = next(p for p in files if p.suffix == ".lance" and p.parent.name == "data")
    assert scanned.read_iops >= 1 and scanned.read_bytes >= data.stat().st_size
    assert ds.io_stats_snapshot() == scanned  # a snapshot leaves the counts
    assert ds.io_stats_incremental() == scanned
    assert ds.io_stats_incremental().read_iops == 0  # taken: counting starts again
    ds.delete("x < 10")
    changed = ds.io_stats_incremental()
    assert changed.write_iops >= 3 and changed.read_iops >= 1  # deletion file, txn, manifest
    # reads through a shallow clone's base path are the clone's
    clone = ds.shallow_clone(str(tmp_path / "clone.lance"))
    clone.io_stats_incremental()
    assert clone.count_rows() == 49_990 and clone.to_table().num_rows == 49_990
    assert clone.io_stats_incremental().read_bytes >= data.stat().st_size


def test_session_reports_the_process_caches(tmp_path: Path) -> None:
    path = str(tmp_path / "s.lance")
    lance.write_dataset(pa.table({"x": list(range(20_000)), "s": ["a", "b"] * 10_000}), path)
    ds = dataset(path)
    ds.create_scalar_index("s", "BITMAP")
    ds.to_table(filter="s = 'a'")
    session = ds.session()
    assert session.index_cache_size_bytes > 0
    assert (
        session.size_bytes() == session.index_cache_size_bytes + session.metadata_cache_size_bytes
    )
    assert session.is_same_as(dataset(path).session())
