"""Index-pruned reads over pylance's BTREE and BITMAP indices: every filter gives exactly the
rows of the unindexed scan and of pylance, for ints, strings, dates and floats with NaN and
nulls, after Quiver appends unindexed rows and deletes indexed ones; and the indices do
narrow what is read."""

from __future__ import annotations

import datetime as dt

import lance
import numpy as np
import pyarrow as pa
import pytest
from compare import assert_same_table

from quiver.format.dataset import dataset, write_dataset
from quiver.format.errors import LanceError
from quiver.format.expr import apply_filter, compile_filter
from quiver.format.index import pruning
from quiver.format.index.pruning import BLOCK_ROWS
from quiver.format.table.schema import format_path, path_parts

ROWS = 9000  # three BTREE pages of 4096 values
PER_FILE = 2000
INDEXED = ("i", "s", "d", "f")


def _table(start: int, n: int) -> pa.Table:
    k = np.arange(start, start + n)
    f = np.where(k % 13 == 0, np.nan, (k % 500) - 250.5)
    f[k % 101 == 0] = -0.0
    return pa.table(
        {
            "i": pa.array(k * 3 % 7919, mask=k % 17 == 0),
            "s": pa.array([f"k{x % 40:02d}" for x in k], mask=k % 19 == 0),
            "d": pa.array(
                [dt.date(2020, 1, 1) + dt.timedelta(days=int(x % 300)) for x in k],
                pa.date32(),
                mask=k % 23 == 0,
            ),
            "f": pa.array(f, mask=k % 29 == 0),
            "plain": pa.array(k % 10),
        }
    )


FILTERS = [
    "i = 300",
    "i = 301 OR i = 5000",
    "i > 7800",
    "i >= 100 AND i < 160",
    "i BETWEEN 10 AND 40",
    "i IN (3, 6, 7900, 12345)",
    "i IS NULL",
    "i IS NOT NULL AND plain = 3",
    "NOT (i > 50)",
    "NOT (i > 50 OR s = 'k03')",
    "i < 100 AND plain = 4",
    "i < 100 OR plain = 4",
    "s = 'k07'",
    "s IN ('k01', 'k39', 'zz')",
    "s > 'k37'",
    "s IS NULL OR i = 7",
    "s LIKE 'k1%' AND i < 2000",
    "d = DATE '2020-02-01'",
    "d BETWEEN DATE '2020-10-01' AND DATE '2020-10-05'",
    "d < DATE '2020-01-03' OR d > DATE '2020-10-25'",
    "f > 240",
    "f = 0.0",
    "f < -249",
    "f IS NULL",
    "f = CAST('NaN' AS DOUBLE)",
    "f >= CAST('NaN' AS DOUBLE) OR f < -250",
    "isnan(f)",
    "f IN (-0.5, 1.5)",
    "NOT (f < 200) AND i > 10",
    "i > 7000 AND i <= 7010 AND i IN (7001, 7002, 7005, 1)",
    "i >= 10 AND 40 >= i AND s = 'k01'",
    "i > 100 AND i > 7000 AND plain = 3",
    "f > 0 AND f < 1.0",
    "f >= -1 AND f IS NOT NULL AND f < CAST('NaN' AS DOUBLE)",
    "s >= 'k05' AND s < 'k07' AND d >= DATE '2020-03-01' AND d < DATE '2020-03-09'",
]


UNPRUNED = {"i < 100 OR plain = 4"}


@pytest.fixture(scope="module", params=["BTREE", "BITMAP"])
def indexed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A pylance dataset with every INDEXED column indexed, then changed by Quiver: an
    unindexed fragment appended and indexed rows deleted."""
    uri = str(tmp_path_factory.mktemp(request.param.lower()) / "t.lance")
    ds = lance.write_dataset(_table(0, ROWS), uri, max_rows_per_file=PER_FILE)
    for column in INDEXED:
        ds.create_scalar_index(column, request.param)
    write_dataset(_table(ROWS, 700), uri, mode="append")
    dataset(uri).delete("i % 5 = 1 OR (plain = 2 AND i > 7000)")
    return uri


def _truth(uri: str, sql: str) -> pa.Table:
    """The unindexed answer: the whole table, filtered by the filter engine."""
    table = dataset(uri).to_table()
    return apply_filter(table, compile_filter(sql, table.schema))


def _check_filter(uri: str, sql: str, pruned: bool) -> None:
    """The filter is pruned (or not), and answers as the unindexed scan and pylance do,
    rows and count."""
    ours = dataset(uri)
    scanner = ours.scanner(filter=sql)
    assert (scanner.index_pruning is not None) == pruned, sql
    got = scanner.to_table()
    assert_same_table(got, _truth(uri, sql), f"{sql} vs unindexed scan")
    ref = lance.dataset(uri)
    assert_same_table(got, ref.to_table(filter=sql), f"{sql} vs pylance")
    assert ours.count_rows(sql) == ref.count_rows(sql) == got.num_rows


@pytest.mark.parametrize("sql", FILTERS)
def test_indexed_filter_is_the_scan(indexed: str, sql: str) -> None:
    # an OR with an unindexed column can match anywhere: nothing to prune
    _check_filter(indexed, sql, pruned=sql not in UNPRUNED)


def test_a_range_is_one_lookup(indexed: str) -> None:
    """`i >= 100 AND i < 160` asks the index once for the rows in the range, rather than
    for the rows of each side (most of the table) intersected."""
    pruning._answers.drop_where(lambda key: True)
    sql = "i >= 100 AND 160 > i AND plain < 5"
    found = dataset(indexed).scanner(filter=sql).index_pruning
    answers = [
        rows for key, (rows, _) in list(pruning._answers._items.items()) if key[0] == "answer"
    ]
    assert len(answers) == 1 and 0 < len(answers[0]) <= 120  # each value at most twice
    assert found is not None and np.array_equal(found.rows, answers[0])


def test_unindexed_rows_and_deletions(indexed: str) -> None:
    """Rows of the appended fragment (outside every index) are found; deleted rows never."""
    ours = dataset(indexed)
    appended = max(f.fragment_id for f in ours.get_fragments())
    sql = "i = 3249"  # k = 1083 (indexed) and k = 9002 (appended)
    pruning = ours.scanner(filter=sql).index_pruning
    assert pruning is not None and appended not in pruning.covered
    got = ours.to_table(filter=sql, with_row_id=True)
    assert_same_table(got.drop_columns(["_rowid"]), _truth(indexed, sql), sql)
    assert sorted(got.column("_rowid").to_pylist()) == [1083, (appended << 32) + 2]
    # i = 6 (k = 2) is in the index but was deleted (6 % 5 == 1)
    pruning = ours.scanner(filter="i = 6").index_pruning
    assert pruning is not None and 2 in pruning.rows.tolist()
    assert ours.count_rows("i = 6") == 0


def test_selective_filter_reads_few_rows(indexed: str) -> None:
    """A filter matching a handful of rows reads only their blocks of the indexed fragments
    and skips fragments without any."""
    ours = dataset(indexed)
    scanner = ours.scanner(filter="i = 300")
    pruning = scanner.index_pruning
    assert pruning is not None
    covered = [f for f in ours.get_fragments() if f.fragment_id in pruning.covered]
    assert len(covered) == ROWS // PER_FILE + 1
    read = 0
    skipped = 0
    for frag in covered:
        ranges = pruning.narrow(frag.fragment_id, frag.live_ranges(8192))
        read += sum(e - s for s, e in ranges)
        skipped += not ranges
    assert 0 < read <= 2 * BLOCK_ROWS
    assert skipped >= len(covered) - 2


def test_unusable_index_leaves_the_scan_whole(tmp_path) -> None:
    """A filter on no indexed column, or one an index cannot narrow (an OR with an
    unindexed column), is not pruned and still answers exactly."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(0, 3000), uri, max_rows_per_file=1000).create_scalar_index(
        "i", "BTREE"
    )
    ours = dataset(uri)
    for sql in ("plain = 3", "i = 3 OR plain = 3", "i + 1 = plain"):
        scanner = ours.scanner(filter=sql)
        assert scanner.index_pruning is None, sql
        assert_same_table(scanner.to_table(), _truth(uri, sql), sql)


def test_index_listing_is_pylance(indexed: str) -> None:
    """list_indices, describe_indices and index_statistics answer as pylance's do."""
    ours, ref = dataset(indexed), lance.dataset(indexed)
    with pytest.warns(DeprecationWarning):
        want = ref.list_indices()
    for i in want:
        i["fragment_ids"] = set(i["fragment_ids"])
    assert ours.list_indices() == want
    for got, exp in zip(ours.describe_indices(), ref.describe_indices(), strict=True):
        assert (got.name, got.type_url, got.index_type, got.num_rows_indexed, got.fields) == (
            exp.name,
            exp.type_url,
            exp.index_type,
            exp.num_rows_indexed,
            exp.fields,
        )
        assert got.num_segments == len(exp.segments)
        assert got.field_names == list(exp.field_names)
        assert got.total_size_bytes == exp.total_size_bytes
        assert ours.index_statistics(got.name) == ref.index_statistics(got.name)
    with pytest.raises(KeyError, match="nope"):
        ours.index_statistics("nope")


def test_indices_pylance_remapped_in_compaction(tmp_path) -> None:
    """pylance's compaction remaps index rows onto the new fragment and drops deleted ones
    from BTREE pages (shifting them): pruned reads stay exactly the scan's."""
    uri = str(tmp_path / "t.lance")
    k = np.arange(12000)
    ds = lance.write_dataset(pa.table({"id": k, "v": k % 977}), uri, max_rows_per_file=3000)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("v", "BITMAP")
    ds.delete("(id < 3000 AND id % 3 = 0) OR (id >= 6000 AND id < 7000)")
    ds.optimize.compact_files(materialize_deletions_threshold=0.01)
    ours = dataset(uri)
    assert {f.fragment_id for f in ours.get_fragments()} == set(
        ours.list_indices()[0]["fragment_ids"]
    )
    for sql in ("id = 4100", "id BETWEEN 4090 AND 8200", "id = 12", "id > 11990", "v = 5"):
        scanner = ours.scanner(filter=sql)
        assert scanner.index_pruning is not None, sql
        assert_same_table(scanner.to_table(), _truth(uri, sql), sql)


# -- stable row ids: the indices hold row ids, found in the fragments' row id sequences ------
@pytest.fixture(scope="module", params=["BTREE", "BITMAP"])
def stable_indexed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """As `indexed`, with stable row ids, and rows then updated by both engines: an updated
    row keeps its id and moves to a fragment no index covers, its old copy deleted where
    the index still finds it; compaction (pylance's) then rewrites two indexed fragments
    into one whose row id sequence is no longer a range."""
    uri = str(tmp_path_factory.mktemp(f"stable-{request.param.lower()}") / "t.lance")
    ds = lance.write_dataset(
        _table(0, ROWS), uri, max_rows_per_file=PER_FILE, enable_stable_row_ids=True
    )
    for column in INDEXED:
        ds.create_scalar_index(column, request.param)
    write_dataset(_table(ROWS, 700), uri, mode="append")
    dataset(uri).delete("i % 5 = 1 OR (plain = 2 AND i > 7000)")
    dataset(uri).update({"i": "i + 1", "s": "'moved'"}, where="plain = 7 AND i < 3000")
    lance.dataset(uri).update({"plain": "plain + 100"}, where="plain = 8 AND i > 6000")
    lance.dataset(uri).optimize.compact_files(
        target_rows_per_fragment=4000, materialize_deletions_threshold=0.01
    )
    return uri


@pytest.mark.parametrize("sql", FILTERS + ["s = 'moved'", "i = 301", "plain = 108"])
def test_stable_row_id_filters_are_pruned_and_exact(stable_indexed: str, sql: str) -> None:
    assert dataset(stable_indexed).has_stable_row_ids
    _check_filter(stable_indexed, sql, pruned=sql not in UNPRUNED and sql != "plain = 108")


def test_stable_row_ids_map_to_the_rows_addresses(stable_indexed: str) -> None:
    """The candidates of a covered fragment are its rows holding the ids the index
    answered, wherever compaction and updates put them: an updated row's new copy lies in
    a fragment no index covers (scanned whole), its deleted copy may be a candidate."""
    ours = dataset(stable_indexed)
    sql = "i = 3249"  # k = 1083 (indexed) and k = 9002 (appended)
    pruning = ours.scanner(filter=sql).index_pruning
    assert pruning is not None and pruning.covered
    got = ours.to_table(filter=sql, with_row_id=True, with_row_address=True)
    assert sorted(got.column("_rowid").to_pylist()) == [1083, 9002]
    addresses = set(got.column("_rowaddr").to_pylist())
    covered = {a for a in addresses if (a >> 32) in pruning.covered}
    assert covered and covered <= set(pruning.rows.tolist())
    assert_same_table(got.drop_columns(["_rowid", "_rowaddr"]), _truth(stable_indexed, sql), sql)


@pytest.mark.parametrize("kind", ["BTREE", "BITMAP"])
def test_stable_row_ids_after_quiver_compaction_and_optimize(tmp_path, kind: str) -> None:
    """Quiver's compaction and `optimize_indices` (a delta segment, then merged) on a
    dataset with stable row ids: pruned reads stay the scan's and pylance's (whose BITMAP
    answers also hold rows updated away from the value asked: see below)."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(0, 6000), uri, max_rows_per_file=1500, enable_stable_row_ids=True)
    dataset(uri).create_scalar_index("i", kind)
    dataset(uri).delete("i % 4 = 1")
    dataset(uri).update({"i": "i + 2"}, where="plain = 3")
    dataset(uri).optimize.compact_files(target_rows_per_fragment=2500)
    write_dataset(_table(6000, 900), uri, mode="append")
    for merge in (0, 1):
        dataset(uri).optimize.optimize_indices(num_indices_to_merge=merge)
        ours, ref = dataset(uri), lance.dataset(uri)
        for sql in ("i = 300", "i BETWEEN 10 AND 400", "i IS NULL", "i > 7800 AND plain = 5"):
            scanner = ours.scanner(filter=sql)
            assert scanner.index_pruning is not None, (merge, sql)
            got = scanner.to_table()
            assert_same_table(got, _truth(uri, sql), f"{merge}: {sql} vs unindexed scan")
            want = ref.to_table(filter=sql)
            if kind == "BITMAP":
                # pylance 14 trusts a BITMAP segment's rows: an updated row whose old value
                # matched is still answered (row id 133, i 399 -> 401, for `i BETWEEN 10
                # AND 400`) once a newer segment covers the fragment it moved to
                want = apply_filter(want, compile_filter(sql, want.schema))
            assert_same_table(got, want, f"{merge}: {sql} vs pylance")


# -- fields nested in structs ------------------------------------------------------------------
def _nested_table(start: int, n: int) -> pa.Table:
    k = np.arange(start, start + n)
    meta = pa.StructArray.from_arrays(
        [pa.array(k * 7 % 3001, mask=k % 13 == 0), pa.array([f"l{x % 30}" for x in k])],
        names=["score", "lang"],
        mask=pa.array(k % 17 == 0),
    )
    deep = pa.StructArray.from_arrays([meta], names=["inner"])
    return pa.table({"id": pa.array(k), "meta": meta, "deep": deep, "score": pa.array(k % 5)})


NESTED_FILTERS = [
    "meta.score = 700",
    "meta.score BETWEEN 10 AND 40",
    "meta.score IN (7, 14, 2999)",
    "meta.score IS NULL",
    "NOT (meta.score > 50)",
    "meta.lang = 'l7'",
    "meta.lang IN ('l1', 'l29') AND meta.score < 300",
    "meta.score < 30 OR meta.lang = 'l3'",
    "deep.inner.score = 1400",
    "deep.inner.score > 2990 AND score = 2",
    "meta.score = score",  # two columns: not pruned
    "score = 3",  # the top-level column of the same name as a nested one: not pruned
    "meta IS NULL",
]


@pytest.mark.parametrize("builder", ["quiver", "pylance"])
@pytest.mark.parametrize("kind", ["BTREE", "BITMAP"])
def test_fields_nested_in_structs_are_pruned(tmp_path, builder: str, kind: str) -> None:
    """Indices over nested fields (`meta.score`, `meta.lang`, `deep.inner.score`; NULL
    values and NULL parents) narrow filters on them by their paths, after an unindexed
    append and deletes; answers as the unindexed scan's and pylance's."""
    uri = str(tmp_path / "n.lance")
    lance.write_dataset(_nested_table(0, 6000), uri, max_rows_per_file=1500)
    engine = dataset if builder == "quiver" else lance.dataset
    for column in ("meta.score", "meta.lang", "deep.inner.score"):
        engine(uri).create_scalar_index(column, kind)
    write_dataset(_nested_table(6000, 500), uri, mode="append")
    dataset(uri).delete("id % 9 = 4")
    for sql in NESTED_FILTERS:
        _check_filter(uri, sql, pruned=sql not in NESTED_FILTERS[-3:])
    plan = dataset(uri).scanner(filter="meta.score = 700").explain_plan()
    assert "narrowed by meta.score_idx" in plan, plan
    dataset(uri).optimize.optimize_indices()  # Quiver's optimize covers the appended rows
    names = {i["name"]: set(i["fragment_ids"]) for i in lance.dataset(uri).list_indices()}
    fragments = {f.fragment_id for f in dataset(uri).get_fragments()}
    assert names == {f"{c}_idx": fragments for c in ("meta.score", "meta.lang", "deep.inner.score")}
    for sql in NESTED_FILTERS[:5]:
        _check_filter(uri, sql, pruned=True)


def test_nested_fields_differing_in_case_keep_their_own_indices(tmp_path) -> None:
    """`meta.lang` and `meta.Lang` are two fields (nested names are exact, as in pylance):
    the index of one never answers a filter on the other."""
    uri = str(tmp_path / "c.lance")
    n = 4000
    meta = pa.StructArray.from_arrays(
        [
            pa.array(["apple"] * n),
            pa.array([f"kiwi{i}" if i < n // 2 else "fig" for i in range(n)]),
        ],
        names=["lang", "Lang"],
    )
    lance.write_dataset(pa.table({"id": np.arange(n), "meta": meta}), uri, max_rows_per_file=1000)
    lance.dataset(uri).create_scalar_index("meta.lang", "NGRAM")
    lance.dataset(uri).create_scalar_index("meta.lang", "BLOOMFILTER")
    for sql, rows in (
        ("contains(meta.Lang, 'kiwi')", n // 2),
        ("meta.Lang = 'kiwi5'", 1),
        ("contains(meta.lang, 'kiwi')", 0),
        ("meta.lang = 'apple'", n),
    ):
        _check_filter(uri, sql, pruned="meta.lang" in sql)
        assert dataset(uri).count_rows(sql) == rows, sql


@pytest.mark.parametrize(
    "spelled",
    ["Meta.Lang", "meta.lang", "META.LANG", "`Meta`.`Lang`", "Meta.`Lang`", "ID", "`id`",
     "meta.LANG2", "Meta.Lang2"],
)  # fmt: skip
def test_a_scalar_index_column_is_resolved_as_pylance_resolves_it(tmp_path, spelled: str) -> None:
    """pylance finds a scalar index's column case-insensitively at each level of its path
    (an exact name first: `Lang` and `LANG2` differ only in case) and with backquoted names,
    and names the index by the schema's spelling; Quiver's builder the same."""
    meta = pa.StructArray.from_arrays(
        [pa.array(["a", "b"] * 50), pa.array(["c", "d"] * 50), pa.array(["e", "f"] * 50)],
        names=["Lang", "LANG2", "lang2"],
    )
    table = pa.table({"id": np.arange(100), "Meta": meta})
    listed = {}
    for engine in ("pylance", "quiver"):
        uri = str(tmp_path / f"{engine}.lance")
        lance.write_dataset(table, uri)
        ds = lance.dataset(uri) if engine == "pylance" else dataset(uri)
        ds.create_scalar_index(spelled, "BTREE")
        listed[engine] = [(i["name"], i["fields"]) for i in lance.dataset(uri).list_indices()]
    assert listed["quiver"] == listed["pylance"], spelled


def test_unknown_index_columns_are_refused_by_both(tmp_path) -> None:
    uri = str(tmp_path / "u.lance")
    meta = pa.StructArray.from_arrays([pa.array([1, 2])], names=["lang"])
    lance.write_dataset(pa.table({"id": [1, 2], "meta": meta}), uri)
    for spelled in ("meta.nope", "nope", "meta.lang.x", "`meta.lang`", "meta.`lang"):
        with pytest.raises(KeyError):
            lance.dataset(uri).create_scalar_index(spelled, "BTREE")
        with pytest.raises(LanceError, match="no column"):
            dataset(uri).create_scalar_index(spelled, "BTREE")


def _listing(ds: object) -> list[tuple[str, list[str]]]:
    return sorted((i["name"], i["fields"]) for i in ds.list_indices())  # type: ignore[attr-defined]


def test_field_names_holding_dots_are_quoted_paths_as_in_pylance(tmp_path) -> None:
    """Nested fields whose names hold a dot (or a backquote) are named by pylance's quoted
    paths (`` meta.`a.b`.c ``, a backquote doubled): indices built on them by either engine
    are listed alike, read by the other, and narrow filters on those paths."""
    k = np.arange(3000)
    inner = pa.StructArray.from_arrays([pa.array(k % 3), pa.array(k % 11)], names=["c", "d.e"])
    meta = pa.StructArray.from_arrays(
        [inner, pa.array(k % 5), pa.array(k % 2)], names=["a.b", "f.g", "t`x"]
    )
    table = pa.table({"id": k, "meta": meta})
    columns = {"meta.`a.b`.c": "BTREE", "META.`F.G`": "BITMAP", "meta.`a.b`.`d.e`": "BTREE"}
    filters = ["meta.`a.b`.c = 1", "meta.`f.g` IN (2, 4)", "meta.`a.b`.`d.e` < 3"]
    listed = {}
    for engine in ("pylance", "quiver"):
        uri = str(tmp_path / f"{engine}.lance")
        lance.write_dataset(table, uri, max_rows_per_file=1000)
        ds = lance.dataset(uri) if engine == "pylance" else dataset(uri)
        for column, kind in columns.items():
            ds.create_scalar_index(column, kind)
        listed[engine] = _listing(lance.dataset(uri))
        assert _listing(dataset(uri)) == listed[engine]
        for sql in filters:
            _check_filter(uri, sql, pruned=True)
            assert "ScalarIndexQuery" in lance.dataset(uri).scanner(filter=sql).explain_plan(), sql
    assert listed["quiver"] == listed["pylance"]
    assert ("meta.`a.b`.`d.e`_idx", ["meta.`a.b`.`d.e`"]) in listed["quiver"]
    # a backquote in a name is doubled in the path (the listing's fields, as pylance's)
    uri = str(tmp_path / "quiver.lance")
    dataset(uri).create_scalar_index("meta.`t``x`", "BTREE")
    assert ["meta.`t``x`"] in [i["fields"] for i in lance.dataset(uri).list_indices()]
    _check_filter(uri, "meta.`t``x` = 1", pruned=True)


@pytest.mark.parametrize(
    ("path", "parts"),
    [("meta.`a.b`.c", ["meta", "a.b", "c"]), ("`t``x`", ["t`x"]), ("a.`b```", ["a", "b`"]),
     ("plain", ["plain"]), ("`a.b", []), ("`a`b", [])],
)  # fmt: skip
def test_paths_parse_and_format_back(path: str, parts: list[str]) -> None:
    assert path_parts(path) == parts
    if parts:
        assert path_parts(format_path(parts)) == parts
