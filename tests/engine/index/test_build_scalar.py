"""BTREE, BITMAP and ZONEMAP indices built by Quiver are pylance's own: for every storage
version and scalar type, pylance lists and describes them as it does the indices it builds
on the same data, their contents equal pylance's (sorted values and row ids, page
statistics, keys and row sets, zone statistics and null maps), pylance's indexed filters use
them and equal its scans, the CreateIndex commit
has pylance's shape, replacing, dropping and refusing work as in pylance, and concurrent
compaction conflicts as pylance 14's rules say."""

from __future__ import annotations

import datetime as dt
import struct
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from compare import assert_same_table
from pyroaring import BitMap

import quiver
from quiver.format.errors import (
    ColumnNotFoundError,
    CommitConflictError,
    IndexNotFoundError,
    InvalidInputError,
)
from quiver.format.index.files import IndexFile
from quiver.format.io.store import open_store

ROWS = 9500  # three BTREE pages of 4096 values and a short one, over four fragments
PER_FILE = 2600


def _table(n: int = ROWS, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    nulls = rng.random(n) < 0.08
    ints = rng.integers(-40, 40, n)
    floats = np.round(rng.normal(size=n), 1)
    floats[rng.random(n) < 0.02] = np.nan
    strings = np.array([f"s{v % 9}" for v in ints], dtype=object)
    return pa.table(
        {
            "i64": pa.array(ints, pa.int64(), mask=nulls),
            "i32": pa.array(ints.astype(np.int32) % 5, pa.int32()),
            "f64": pa.array(floats, pa.float64(), mask=nulls),
            "s": pa.array(strings, pa.string(), mask=nulls),
            "d": pa.array((ints + 19000).astype("datetime64[D]"), pa.date32(), mask=nulls),
            "ts": pa.array(ints.astype("datetime64[s]"), pa.timestamp("us"), mask=nulls),
            "b": pa.array(ints % 2 == 0, pa.bool_(), mask=nulls),
            "bin": pa.array([x.encode() for x in strings], pa.binary(), mask=nulls),
        }
    )


FILTERS = {
    "i64": ["i64 = 7", "i64 IS NULL", "i64 > 30", "i64 BETWEEN -3 AND 3", "i64 IN (1, 39, -40)"],
    "i32": ["i32 = 2", "i32 IN (0, 4)"],
    "f64": ["f64 = 0.5", "f64 < -1.5", "f64 IS NULL"],
    "s": ["s = 's3'", "s IS NULL", "s > 's6'"],
    "d": ["d = date '2022-01-08'", "d < date '2022-01-01'"],
    "ts": ["ts > timestamp '1970-01-01 00:00:20'"],
    "b": ["b = true", "b IS NULL"],
    "bin": ["bin = X'7334'"],
}


def _twins(tmp_path: Path, version: str) -> tuple[str, str]:
    """The same data (with deletions) twice: one for Quiver's index, one for pylance's."""
    paths = []
    for who in ("quiver", "pylance"):
        path = str(tmp_path / f"{who}.lance")
        lance.write_dataset(
            _table(), path, max_rows_per_file=PER_FILE, data_storage_version=version
        )
        lance.dataset(path).delete("i32 = 3 AND i64 < 0")
        paths.append(path)
    return paths[0], paths[1]


def _files(path: str, name: str) -> dict[str, pa.Table]:
    ds = lance.dataset(path)
    [idx] = [i for i in ds.list_indices() if i["name"] == name]
    store = open_store(path)
    out = {}
    for f in sorted((Path(path) / "_indices" / idx["uuid"]).iterdir()):
        with IndexFile(store, f"_indices/{idx['uuid']}/{f.name}") as ix:
            table = ix.read([x.name for x in ix.schema.fields], 0, ix.num_rows)
            out[f.name] = table.replace_schema_metadata(ix.schema.to_arrow().metadata)
            out[f.name + ":version"] = ix.version
            out[f.name + ":buffers"] = [
                ix.global_buffer(i) for i in range(1, len(ix._container.global_buffers))
            ]
    return out


def _row_sets(bitmaps: pa.ChunkedArray) -> list[set[int]]:
    out = []
    for blob in bitmaps.to_pylist():
        rows: set[int] = set()
        (count,) = struct.unpack_from("<I", blob, 0)
        pos = 4
        for _ in range(count):
            frag, size = struct.unpack_from("<II", blob, pos)
            pos += 8
            rows |= {frag << 32 | r for r in BitMap.deserialize(blob[pos : pos + size])}
            pos += size
        out.append(rows)
    return out


def _same_contents(kind: str, ours: dict[str, pa.Table], theirs: dict[str, pa.Table]) -> None:
    assert ours.keys() == theirs.keys()
    for name in ours:
        if name.endswith((":version", ":buffers")):
            assert ours[name] == theirs[name], name
            continue
        a, b = ours[name], theirs[name]
        assert a.schema == b.schema, (name, a.schema, b.schema)
        assert a.schema.metadata == b.schema.metadata, name
        if name == "page_data.lance":  # ties may come in any order
            assert_same_table(a.select(["values"]), b.select(["values"]), name)
            order = [("values", "ascending"), ("ids", "ascending")]
            assert_same_table(a.sort_by(order), b.sort_by(order), name)
        elif name == "bitmap_page_lookup.lance":
            assert_same_table(a.select(["keys"]), b.select(["keys"]), name)
            assert _row_sets(a.column("bitmaps")) == _row_sets(b.column("bitmaps"))
        else:
            assert_same_table(a, b, name)


def _rows(table: pa.Table) -> pa.Table:
    """A table's rows in one order (indexed answers may come in another than scans)."""
    return table.sort_by([(c, "ascending") for c in table.column_names])


def _described(path: str) -> list[tuple]:
    ds = lance.dataset(path)
    listed = sorted(
        (i["name"], i["type"], tuple(i["fields"]), tuple(sorted(i["fragment_ids"])))
        for i in ds.list_indices()
    )
    described = sorted(
        (d.name, d.type_url, d.index_type, d.num_rows_indexed, tuple(d.fields), len(d.segments))
        for d in ds.describe_indices()
    )
    return [listed, described]


@pytest.mark.parametrize("version", ["legacy", "2.0", "2.1", "2.2"])
@pytest.mark.parametrize("kind", ["BTREE", "BITMAP", "ZONEMAP"])
def test_indices_equal_pylance_s_own(tmp_path: Path, version: str, kind: str) -> None:
    ours, theirs = _twins(tmp_path, version)
    q = quiver.dataset(ours)
    for column in FILTERS:
        q.create_scalar_index(column, kind)
        lance.dataset(theirs).create_scalar_index(column, kind)
    assert _described(ours) == _described(theirs)
    ds = lance.dataset(ours)
    for column, filters in FILTERS.items():
        _same_contents(kind, _files(ours, f"{column}_idx"), _files(theirs, f"{column}_idx"))
        stats = ds.stats.index_stats(f"{column}_idx")
        assert quiver.dataset(ours).index_statistics(f"{column}_idx") == stats
        for f in filters:
            plan = ds.scanner(filter=f).explain_plan()
            assert "ScalarIndexQuery" in plan or "MaterializeIndex" in plan, (f, plan)
            want = _rows(ds.scanner(filter=f, use_scalar_index=False).to_table())
            assert_same_table(_rows(ds.to_table(filter=f)), want, f)
            assert_same_table(_rows(quiver.dataset(ours).to_table(filter=f)), want, f)


def test_the_commit_is_pylance_s(tmp_path: Path) -> None:
    ours, theirs = _twins(tmp_path, "2.2")
    quiver.dataset(ours).create_scalar_index("i64", "BTREE", name="by_i64")
    lance.dataset(theirs).create_scalar_index("i64", "BTREE", name="by_i64")

    def shape(path: str) -> tuple:
        ds = lance.dataset(path)
        txn = ds.read_transaction(ds.version)
        [new] = txn.operation.new_indices
        return (
            txn.read_version,
            type(txn.operation).__name__,
            new.name,
            new.fields,
            new.dataset_version,
            sorted(new.fragment_ids),
            new.index_version,
            new.index_details,
            [f.path for f in new.files],
            new.base_id,
            txn.operation.removed_indices,
        )

    assert shape(ours) == shape(theirs)
    ds = lance.dataset(ours)
    created = ds.read_transaction(ds.version).operation.new_indices[0].created_at
    assert abs(created - dt.datetime.now(dt.timezone.utc)) < dt.timedelta(minutes=5)


def test_replace_refuse_and_drop_as_pylance(tmp_path: Path) -> None:
    path = str(tmp_path / "d.lance")
    lance.write_dataset(_table(2000), path)
    q = quiver.dataset(path)
    q.create_scalar_index("i64", "BTREE")
    [first] = lance.dataset(path).list_indices()
    q.create_scalar_index("i64", "BITMAP", name="i64_idx")  # replaces by name: a new uuid
    [second] = lance.dataset(path).list_indices()
    assert second["type"] == "Bitmap" and second["uuid"] != first["uuid"]
    ds = lance.dataset(path)
    removed = ds.read_transaction(ds.version).operation.removed_indices
    assert [r.uuid for r in removed] == [first["uuid"]]
    with pytest.raises(InvalidInputError, match="already exists, please"):
        q.create_scalar_index("i64", "BITMAP", replace=False)  # the BITMAP on i64 exists
    with pytest.raises(InvalidInputError, match="different fields"):
        q.create_scalar_index("s", "BTREE", name="i64_idx")
    with pytest.raises(ColumnNotFoundError, match="nope"):
        q.create_scalar_index("nope", "BTREE")
    with pytest.raises(InvalidInputError, match="index type"):
        q.create_scalar_index("i64", "FOO")
    with pytest.raises(InvalidInputError, match="RTREE index needs a GeoArrow column"):
        q.create_scalar_index("s", "RTREE")
    with pytest.raises(InvalidInputError, match="NGRAM index needs a text column"):
        q.create_scalar_index("i64", "NGRAM")
    lance.write_dataset(
        pa.table({"v": pa.array([[1.0, 2.0]], pa.list_(pa.float32(), 2))}), str(tmp_path / "v")
    )
    with pytest.raises(InvalidInputError, match="scalar values"):
        quiver.dataset(str(tmp_path / "v")).create_scalar_index("v", "BTREE")
    version = lance.dataset(path).version
    q.drop_index("i64_idx")
    assert lance.dataset(path).list_indices() == [] and lance.dataset(path).version == version + 1
    with pytest.raises(IndexNotFoundError, match="i64_idx"):
        q.drop_index("i64_idx")
    assert (
        lance.dataset(path)
        .to_table(filter="i64 = 5")
        .equals(lance.dataset(path).scanner(filter="i64 = 5", use_scalar_index=False).to_table())
    )


def test_unnamed_indices_are_named_as_pylance_names_them(tmp_path: Path) -> None:
    names = []
    for engine, path in ((quiver, str(tmp_path / "q.lance")), (lance, str(tmp_path / "p.lance"))):
        lance.write_dataset(_table(300), path)
        for column, kind, name in [
            ("i64", "BTREE", None),
            ("i64", "BITMAP", None),  # another type: a second index, i64_idx_2
            ("i64", "BITMAP", None),  # the same type again: replaces i64_idx_2
            ("s", "BTREE", "i64_idx_3"),  # takes the next free name
            ("i64", "BTREE", None),  # replaces i64_idx
            ("i64", "BITMAP", "i64_idx"),  # by name: i64_idx becomes a BITMAP
        ]:
            engine.dataset(path).create_scalar_index(column, kind, name=name)
        ds = lance.dataset(path)
        names.append(
            sorted((i.name, i.index_type, i.field_names[0]) for i in ds.describe_indices())
        )
    assert names[0] == names[1]
    assert [n for n, _, _ in names[0]] == ["i64_idx", "i64_idx_2", "i64_idx_3"]


def test_indices_stay_right_after_quiver_writes_and_compaction(tmp_path: Path) -> None:
    path = str(tmp_path / "w.lance")
    lance.write_dataset(_table(6000), path, max_rows_per_file=1500)
    q = quiver.dataset(path)
    q.create_scalar_index("i64", "BTREE")
    q.create_scalar_index("s", "BITMAP")
    quiver.write_dataset(_table(3000, seed=1), path, mode="append", max_rows_per_file=1000)
    q = quiver.dataset(path)
    q.delete("i64 = 7")
    q.update({"i32": "i32 + 10"}, where="i64 = 8")
    q.optimize.compact_files(target_rows_per_fragment=4000)
    ds = lance.dataset(path)
    for f in FILTERS["i64"] + FILTERS["s"]:
        want = _rows(ds.scanner(filter=f, use_scalar_index=False).to_table())
        assert_same_table(_rows(ds.to_table(filter=f)), want, f)
        assert_same_table(_rows(quiver.dataset(path).to_table(filter=f)), want, f)


def test_a_compaction_of_the_indexed_fragments_makes_the_build_retry(tmp_path: Path) -> None:
    path = str(tmp_path / "c.lance")
    lance.write_dataset(_table(4000), path, max_rows_per_file=500)
    builder = quiver.dataset(path)  # reads this version
    quiver.dataset(path).optimize.compact_files(target_rows_per_fragment=4000)
    with pytest.raises(CommitConflictError) as conflict:
        builder.create_scalar_index("i64", "BTREE")
    assert conflict.value.retryable
    assert lance.dataset(path).list_indices() == []
    assert not list((Path(path) / "_indices").glob("*/*"))  # its files were removed
    # an append meanwhile is no conflict: the index covers the fragments it read
    builder = quiver.dataset(path)
    quiver.write_dataset(_table(100), path, mode="append")
    builder.create_scalar_index("i64", "BTREE")
    [idx] = lance.dataset(path).list_indices()
    assert sorted(idx["fragment_ids"]) == [f.fragment_id for f in builder.get_fragments()][:-1]


def test_a_dataset_with_stable_row_ids(tmp_path: Path) -> None:
    paths = []
    for who in ("quiver", "pylance"):
        path = str(tmp_path / f"{who}.lance")
        lance.write_dataset(_table(5000), path, max_rows_per_file=2000, enable_stable_row_ids=True)
        lance.dataset(path).delete("i32 = 1")
        lance.dataset(path).update({"i64": "i64 + 1"}, where="i32 = 2")  # rows move
        paths.append(path)
    quiver.dataset(paths[0]).create_scalar_index("i64", "BTREE")
    quiver.dataset(paths[0]).create_scalar_index("s", "BITMAP")
    lance.dataset(paths[1]).create_scalar_index("i64", "BTREE")
    lance.dataset(paths[1]).create_scalar_index("s", "BITMAP")
    # a BTREE holds row addresses (index version 1), a BITMAP row ids, as in pylance 14
    _same_contents("BTREE", _files(paths[0], "i64_idx"), _files(paths[1], "i64_idx"))
    _same_contents("BITMAP", _files(paths[0], "s_idx"), _files(paths[1], "s_idx"))

    def index_versions(path: str) -> list[tuple[str, int]]:
        ds = lance.dataset(path)
        commits = (ds.read_transaction(v) for v in (ds.version - 1, ds.version))
        return sorted((m.name, m.index_version) for t in commits for m in t.operation.new_indices)

    assert index_versions(paths[0]) == index_versions(paths[1]) == [("i64_idx", 1), ("s_idx", 0)]
    ds = lance.dataset(paths[0])
    for f in FILTERS["i64"] + FILTERS["s"]:
        want = ds.scanner(filter=f, use_scalar_index=False).to_table()
        assert_same_table(_rows(ds.to_table(filter=f)), _rows(want), f)


def test_an_empty_dataset_indexes_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "e.lance")
    lance.write_dataset(_table(10), path)
    lance.dataset(path).delete("true")
    quiver.dataset(path).create_scalar_index("i64", "BTREE")
    quiver.dataset(path).create_scalar_index("s", "BITMAP")
    ds = lance.dataset(path)
    assert {i["name"] for i in ds.list_indices()} == {"i64_idx", "s_idx"}
    assert ds.to_table(filter="i64 = 1").num_rows == 0
    quiver.write_dataset(_table(10), path, mode="append")
    assert (
        lance.dataset(path).to_table(filter="i64 IS NOT NULL").num_rows
        == _table(10).filter(pa.compute.is_valid(_table(10).column("i64"))).num_rows
    )


def _segments(path: str) -> list[tuple]:
    ds = lance.dataset(path)
    txn = ds.read_transaction(ds.version)
    new = sorted(
        (i.name, sorted(i.fragment_ids), i.dataset_version) for i in txn.operation.new_indices
    )
    removed = sorted((i.name, sorted(i.fragment_ids)) for i in txn.operation.removed_indices)
    return [ds.version, new, removed]


@pytest.mark.parametrize(
    "calls",
    [
        [{}],
        [{"num_indices_to_merge": 0}],
        [{"index_names": ["i64_idx"]}],
        [{"num_indices_to_merge": 0}, "append", {}],
        [{"num_indices_to_merge": 0}, {"num_indices_to_merge": 2}],
        [{}, {}],  # nothing new the second time: no commit
    ],
)
def test_optimize_indices_as_pylance(tmp_path: Path, calls: list) -> None:
    states = []
    for engine, path in ((quiver, str(tmp_path / "q.lance")), (lance, str(tmp_path / "p.lance"))):
        lance.write_dataset(_table(3000), path, max_rows_per_file=1000)
        lance.dataset(path).create_scalar_index("i64", "BTREE")
        lance.dataset(path).create_scalar_index("s", "BITMAP")
        lance.dataset(path).create_scalar_index("f64", "ZONEMAP")
        lance.write_dataset(_table(700, seed=2), path, mode="append")
        for call in calls:
            if call == "append":
                lance.write_dataset(_table(300, seed=3), path, mode="append")
            else:
                engine.dataset(path).optimize.optimize_indices(**call)
        states.append(_segments(path))
        ds = lance.dataset(path)
        for f in FILTERS["i64"] + FILTERS["s"]:
            want = _rows(ds.scanner(filter=f, use_scalar_index=False).to_table())
            assert_same_table(_rows(ds.to_table(filter=f)), want, f)
            assert_same_table(_rows(quiver.dataset(path).to_table(filter=f)), want, f)
        assert lance.dataset(path).stats.index_stats("i64_idx")["num_unindexed_rows"] == 0
    assert states[0] == states[1]


def _labels(n: int = 3000, seed: int = 0) -> pa.Table:
    """Lists of labels: duplicates, null elements, empty and null lists."""
    rng = np.random.default_rng(seed)
    words = ["red", "green", "blue", "cyan", None]
    tags = []
    for i in range(n):
        if i % 17 == 0:
            tags.append(None)
        else:
            tags.append([words[k] for k in rng.integers(0, 5, rng.integers(0, 4))])
    nums = [None if t is None else [len(w or "") for w in t] for t in tags]
    return pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "tags": pa.array(tags, pa.list_(pa.string())),
            "nums": pa.array(nums, pa.list_(pa.int32())),
        }
    )


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("stable", [False, True])
def test_label_lists_equal_pylance_s_own(tmp_path: Path, version: str, stable: bool) -> None:
    paths = []
    for engine in (quiver, lance):
        path = str(tmp_path / f"{engine.__name__}.lance")
        lance.write_dataset(
            _labels(),
            path,
            max_rows_per_file=800,
            data_storage_version=version,
            enable_stable_row_ids=stable,
        )
        lance.dataset(path).delete("id % 11 = 3")
        if stable:
            lance.dataset(path).update({"id": "id + 100000"}, where="id % 13 = 5")
        for column in ("tags", "nums"):
            engine.dataset(path).create_scalar_index(column, "LABEL_LIST")
        paths.append(path)
    ours, theirs = paths
    assert _described(ours) == _described(theirs)
    for column in ("tags", "nums"):
        a, b = _files(ours, f"{column}_idx"), _files(theirs, f"{column}_idx")
        _same_contents("LABEL_LIST", a, b)
        stats = lance.dataset(ours).stats.index_stats(f"{column}_idx")
        assert quiver.dataset(ours).index_statistics(f"{column}_idx") == stats
    ds = lance.dataset(ours)
    for f in [
        "array_has_any(tags, ['red'])",
        "array_has_all(tags, ['red', 'blue'])",
        "array_contains(tags, 'cyan')",
        "array_has_any(nums, [4, 5])",
    ]:
        if "tags" in f:  # (pylance casts int32 lists to compare them: no index there)
            assert "ScalarIndexQuery" in ds.scanner(filter=f).explain_plan(), f
        want = ds.scanner(filter=f, use_scalar_index=False).to_table().sort_by("id")
        assert_same_table(ds.to_table(filter=f).sort_by("id"), want, f)
    with pytest.raises(InvalidInputError, match="lists"):
        quiver.dataset(ours).create_scalar_index("id", "LABEL_LIST")


def test_compaction_remaps_label_lists_as_pylance(tmp_path: Path) -> None:
    paths = []
    for engine in (quiver, lance):
        path = str(tmp_path / f"{engine.__name__}.lance")
        lance.write_dataset(_labels(), path, max_rows_per_file=500)
        lance.dataset(path).create_scalar_index("tags", "LABEL_LIST")
        lance.dataset(path).delete("id % 7 = 2")
        engine.dataset(path).optimize.compact_files(target_rows_per_fragment=1500)
        paths.append(path)
    ours, theirs = paths
    assert _described(ours) == _described(theirs)  # the index covers the new fragments
    _same_contents("LABEL_LIST", _files(ours, "tags_idx"), _files(theirs, "tags_idx"))
    ds = lance.dataset(ours)
    for f in ["array_has_any(tags, ['red'])", "array_contains(tags, 'cyan')"]:
        want = ds.scanner(filter=f, use_scalar_index=False).to_table().sort_by("id")
        assert_same_table(ds.to_table(filter=f).sort_by("id"), want, f)


def test_large_columns_of_few_values_equal_pylance_s_own(tmp_path: Path) -> None:
    """Columns long enough (70,000 rows) for the build to sort them by value rank (few
    distinct floats, NaN, -0.0, 0.0 and nulls among them, and integers) or by scattering
    distinct integers of a dense range."""
    rng = np.random.default_rng(5)
    n = 70_000
    floats = np.round(rng.normal(size=n), 1)
    floats[rng.random(n) < 0.01] = np.nan
    floats[rng.random(n) < 0.01] = -0.0
    table = pa.table(
        {
            "f64": pa.array(floats, mask=rng.random(n) < 0.05),
            "i32": pa.array(rng.integers(-300, 300, n).astype(np.int32)),
            "id": pa.array(rng.permutation(n) - 5000, pa.int64()),  # distinct, a dense range
        }
    )
    paths = []
    for engine in (quiver, lance):
        path = str(tmp_path / f"{engine.__name__}.lance")
        lance.write_dataset(table, path, max_rows_per_file=30_000)
        lance.dataset(path).delete("i32 = 7")
        for column in ("f64", "i32", "id"):
            engine.dataset(path).create_scalar_index(column, "BTREE")
        paths.append(path)
    for column in ("f64", "i32", "id"):
        _same_contents(
            "BTREE", _files(paths[0], f"{column}_idx"), _files(paths[1], f"{column}_idx")
        )
    ds = lance.dataset(paths[0])
    for f in ["f64 = 0.5", "f64 < -1.5", "f64 IS NULL", "i32 BETWEEN -3 AND 3", "id < -4990"]:
        want = _rows(ds.scanner(filter=f, use_scalar_index=False).to_table())
        assert_same_table(_rows(ds.to_table(filter=f)), want, f)
