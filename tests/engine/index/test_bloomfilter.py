"""BLOOMFILTER indices: Quiver builds pylance's own (the same zones, filters and null maps
for every storage version and supported type, after deletions), pylance uses them, both
engines' indexed filters equal their unindexed scans, `optimize_indices` keeps the old
zones as pylance does, and Quiver's scans are pruned by an index of either engine."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from compare import assert_same_table

import quiver
from quiver.format.errors import InvalidInputError
from quiver.format.index.files import IndexFile
from quiver.format.io.store import open_store

ROWS = 21000  # fragments of 9000 rows: two zones in each full one
PER_FILE = 9000


def _table(n: int = ROWS, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    nulls = rng.random(n) < 0.05
    ints = rng.integers(-3000, 3000, n)
    floats = np.round(rng.normal(size=n), 2)
    floats[rng.random(n) < 0.01] = np.nan
    floats[rng.random(n) < 0.01] = -0.0
    return pa.table(
        {
            "i64": pa.array(ints, pa.int64(), mask=nulls),
            "i32": pa.array(ints.astype(np.int32) % 50, pa.int32()),
            "i8": pa.array((ints % 100).astype(np.int8), pa.int8(), mask=nulls),
            "u16": pa.array(np.abs(ints).astype(np.uint16), pa.uint16()),
            "f32": pa.array(floats.astype(np.float32), pa.float32(), mask=nulls),
            "f64": pa.array(floats, pa.float64()),
            "s": pa.array([f"s{v}" for v in ints], pa.string(), mask=nulls),
            "ls": pa.array([f"t{v % 40}" for v in ints], pa.large_string()),
            "bin": pa.array([str(v).encode() for v in ints], pa.binary(), mask=nulls),
            "d": pa.array((ints + 19000).astype("datetime64[D]"), pa.date32(), mask=nulls),
            "ts": pa.array(ints.astype("datetime64[ms]"), pa.timestamp("us")),
            "t": pa.array(np.abs(ints).astype(np.int64) * 1000, pa.time64("us")),
        }
    )


def _value(column: str, row: int = 17) -> str:
    """A SQL literal of a value the column holds."""
    v = _table().column(column)[row].as_py()
    return repr(v) if not isinstance(v, str) else f"'{v}'"


FILTERS = [
    f"i64 = {_value('i64')}",
    "i64 IS NULL",
    f"i64 IN (5, {_value('i64', 40)}, -9999)",
    "i32 = 7 OR i32 = 8",
    "i8 = -3",
    f"u16 = {_value('u16')}",
    f"f32 = {_value('f32')}",
    "f32 = 0",  # -0.0 rows are equal to 0 and hash apart
    "f64 = 0.0",
    "f64 = 1.5 AND i32 = 3",
    "s = 's17'",
    "s IN ('s1', 's-2', 'nope') AND i32 > 10",
    "s IS NULL OR ls = 't3'",
    "ls = 'none'",
    "bin = X'3137'",
    "d = DATE '2022-01-08'",
    "ts = TIMESTAMP '1970-01-01 00:00:01.5'",
    "t IS NULL",
    "NOT (i32 = 3)",  # a negation is not answered by a bloom filter
    "i64 = NULL",
]
COLUMNS = list(_table(1).column_names)


def _twins(tmp_path: Path, version: str) -> tuple[str, str]:
    """The same data (with deletions, one fragment wholly deleted) for each engine."""
    paths = []
    for who in ("quiver", "pylance"):
        path = str(tmp_path / f"{who}.lance")
        lance.write_dataset(
            _table(), path, max_rows_per_file=PER_FILE, data_storage_version=version
        )
        lance.dataset(path).delete("i32 = 3 AND i64 < 0")
        lance.write_dataset(_table(500, seed=1), path, mode="append")
        lance.dataset(path).delete("i64 < -2990")
        paths.append(path)
    return paths[0], paths[1]


def _file(path: str, name: str) -> tuple[pa.Table, dict, list[bytes]]:
    ds = lance.dataset(path)
    [idx] = [i for i in ds.list_indices() if i["name"] == name]
    with IndexFile(open_store(path), f"_indices/{idx['uuid']}/bloomfilter.lance") as f:
        table = f.read([x.name for x in f.schema.fields])
        buffers = [f.global_buffer(i) for i in range(1, len(f.global_buffers))]
        return table, dict(f.metadata), buffers


def _rows(table: pa.Table) -> pa.Table:
    return table.sort_by([(c, "ascending") for c in ["i64", "i32", "s", "ts"]])


def _check_filters(path: str) -> None:
    """Every filter through pylance (indexed) and Quiver equals pylance's unindexed scan."""
    ds = lance.dataset(path)
    for f in FILTERS:
        want = _rows(ds.scanner(filter=f, use_scalar_index=False).to_table())
        assert_same_table(_rows(quiver.dataset(path).to_table(filter=f)), want, f)
        if "= NULL" not in f:
            assert_same_table(_rows(ds.to_table(filter=f)), want, f)


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_indices_equal_pylance_s_own(tmp_path: Path, version: str) -> None:
    ours, theirs = _twins(tmp_path, version)
    for column in COLUMNS:
        quiver.dataset(ours).create_scalar_index(column, "BLOOMFILTER")
        lance.dataset(theirs).create_scalar_index(column, "BLOOMFILTER")
    for column in COLUMNS:
        name = f"{column}_idx"
        a, b = _file(ours, name), _file(theirs, name)
        assert_same_table(a[0], b[0], column)
        assert a[1:] == b[1:], column  # metadata and the null rows' map
        stats = lance.dataset(ours).stats.index_stats(name)
        assert quiver.dataset(ours).index_statistics(name) == stats
        assert stats["segments"][0]["number_of_items"] == 8192
    ds = lance.dataset(ours)
    described = [(d.name, d.type_url, d.num_rows_indexed) for d in ds.describe_indices()]
    assert sorted(described) == sorted(
        (d.name, d.type_url, d.num_rows_indexed) for d in lance.dataset(theirs).describe_indices()
    )
    plan = ds.scanner(filter="s = 's17'").explain_plan()
    assert "ScalarIndexQuery" in plan and "BloomFilter" in plan, plan
    _check_filters(ours)
    _check_filters(theirs)


def test_quiver_scans_are_pruned_by_either_engine_s_index(tmp_path: Path) -> None:
    ours, theirs = _twins(tmp_path, "2.1")
    quiver.dataset(ours).create_scalar_index("s", "BLOOMFILTER")
    lance.dataset(theirs).create_scalar_index("s", "BLOOMFILTER")
    for path in (ours, theirs):
        plan = quiver.dataset(path).scanner(filter="s = 's17'").explain_plan()
        assert "narrowed by s_idx" in plan and "fragments skipped" in plan, plan
        for f in ("s = 's17' OR i32 = 1", "NOT (s = 's17')", "s > 's1'"):
            assert "s_idx" not in quiver.dataset(path).scanner(filter=f).explain_plan(), f
        assert "s_idx" in quiver.dataset(path).scanner(filter="s IS NULL").explain_plan()
        assert quiver.dataset(path).to_table(filter="s = 'absent'").num_rows == 0


def test_optimize_keeps_the_old_zones_as_pylance(tmp_path: Path) -> None:
    paths = []
    for engine, who in ((quiver, "q"), (lance, "p")):
        path = str(tmp_path / f"{who}.lance")
        lance.write_dataset(_table(12000), path, max_rows_per_file=PER_FILE)
        lance.dataset(path).create_scalar_index("i64", "BLOOMFILTER")
        lance.dataset(path).delete("i32 < 20")  # zones built before keep these rows
        lance.write_dataset(_table(900, seed=2), path, mode="append")
        engine.dataset(path).optimize.optimize_indices()
        paths.append(path)
    (a, a_meta, a_nulls), (b, b_meta, b_nulls) = (
        _file(paths[0], "i64_idx"),
        _file(paths[1], "i64_idx"),
    )
    assert_same_table(a, b, "zones")
    assert (a_meta, a_nulls) == (b_meta, b_nulls)
    assert a.column("fragment_id").to_pylist() == [0, 0, 1, 2]
    listed = [
        [
            (i["name"], sorted(i["fragment_ids"]), i["version"])
            for i in lance.dataset(p).list_indices()
        ]
        for p in paths
    ]
    assert listed[0] == listed[1]
    _check_filters(paths[0])


def test_compaction_and_writes_keep_answers_right(tmp_path: Path) -> None:
    path = str(tmp_path / "w.lance")
    lance.write_dataset(_table(6000), path, max_rows_per_file=1500)
    quiver.dataset(path).create_scalar_index("i64", "BLOOMFILTER")
    quiver.write_dataset(_table(3000, seed=1), path, mode="append", max_rows_per_file=1000)
    q = quiver.dataset(path)
    q.delete("i64 = 7")
    q.update({"i32": "i32 + 10"}, where="i64 = 8")
    q.optimize.compact_files(target_rows_per_fragment=4000)
    _check_filters(path)


def test_types_and_options_as_pylance(tmp_path: Path) -> None:
    path = str(tmp_path / "t.lance")
    table = pa.table({"b": [True, None], "x": pa.array([1.5, None], pa.float16()), "n": [1, 2]})
    lance.write_dataset(table, path)
    q = quiver.dataset(path)
    for column in ("b", "x"):
        with pytest.raises(InvalidInputError, match=f"BLOOMFILTER.*{column}"):
            q.create_scalar_index(column, "BLOOMFILTER")
    # pylance 14 takes and ignores options (its 8192 items at 0.00057 stand)
    q.create_scalar_index("n", "BLOOMFILTER", number_of_items=10, probability=0.5)
    stats = lance.dataset(path).stats.index_stats("n_idx")["segments"][0]
    assert (stats["number_of_items"], stats["probability"]) == (8192, 0.00057)
    assert lance.dataset(path).to_table(filter="n = 2").num_rows == 1


@pytest.mark.parametrize("builder", ["quiver", "pylance"])
def test_stable_row_ids_are_pruned_through_zones(tmp_path: Path, builder: str) -> None:
    """With stable row ids a BLOOMFILTER's zones are still fragments' row offsets (each
    engine writes them so, updates having moved rows first): filters are pruned by them
    and answer as pylance's unindexed scan, after more updates and compaction too."""
    path = str(tmp_path / "s.lance")
    lance.write_dataset(_table(), path, max_rows_per_file=PER_FILE, enable_stable_row_ids=True)
    lance.dataset(path).update({"i32": "i32 + 1"}, where="i64 < -2900")
    engine = quiver if builder == "quiver" else lance
    for column in ("i64", "s", "d"):
        engine.dataset(path).create_scalar_index(column, "BLOOMFILTER")
    assert quiver.dataset(path).has_stable_row_ids
    _check_filters(path)
    for f in (f"i64 = {_value('i64')}", "s = 's17'", "i64 IS NULL", "d = DATE '2022-01-08'"):
        plan = quiver.dataset(path).scanner(filter=f).explain_plan()
        assert "narrowed by" in plan, (f, plan)
    quiver.dataset(path).update({"i64": "i64 + 1"}, where="i32 = 5")
    lance.dataset(path).optimize.compact_files(target_rows_per_fragment=12000)
    _check_filters(path)
