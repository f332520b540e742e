"""update, merge_insert and delete against pylance 14: the same call on twin datasets
through both engines, the results read through both (values, types, nulls, row ids and
row versions), the counts returned and the transactions committed (read back by pylance)
compared; errors that must commit nothing; index coverage and search after each commit."""

from __future__ import annotations

import threading
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from quiver.format.dataset import commit, dataset
from quiver.format.errors import (
    ColumnNotFoundError,
    CommitConflictError,
    InvalidInputError,
    SchemaMismatchError,
)
from quiver.format.table.commit import commit_transaction
from tests.compare import assert_same_table

VERSIONS = ["2.0", "2.2"]
SYSTEM = ["_rowid", "_row_created_at_version", "_row_last_updated_at_version"]


def _table(n: int = 30, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "cat": pa.array([f"c{i % 4}" for i in ids]),
            "score": pa.array([None if i % 9 == 5 else float(i) for i in ids], pa.float64()),
            "tags": pa.array([[f"t{i}"] * (i % 3) for i in ids], pa.list_(pa.string())),
        }
    )


@pytest.fixture(params=[(v, s) for v in VERSIONS for s in (False, True)], ids=str)
def twins(request, tmp_path) -> tuple[str, str]:
    """Two identical datasets (3 fragments of 10 rows and an appended one), one per engine."""
    version, stable = request.param
    paths = []
    for name in ("ours", "ref"):
        uri = str(tmp_path / f"{name}.lance")
        lance.write_dataset(
            _table(),
            uri,
            max_rows_per_file=10,
            data_storage_version=version,
            enable_stable_row_ids=stable,
        )
        lance.write_dataset(_table(5, 100), uri, mode="append")
        paths.append(uri)
    return paths[0], paths[1]


def _columns(uri: str) -> list[str]:
    ds = lance.dataset(uri)
    names = ds.schema.names
    return names + (SYSTEM if ds.has_stable_row_ids else [])


def _shape(uri: str) -> dict:
    """The latest transaction as pylance reads it, without file names and uuids."""
    ds = lance.dataset(uri)
    op = ds.read_transaction(ds.version).operation
    out = {"kind": type(op).__name__}
    if out["kind"] == "Update":
        out.update(
            removed=sorted(op.removed_fragment_ids),
            updated=sorted(
                (f.id, f.deletion_file.num_deleted_rows if f.deletion_file else 0)
                for f in op.updated_fragments
            ),
            new_rows=sum(f.physical_rows for f in op.new_fragments),
            fields_modified=list(op.fields_modified),
            # pylance lists an update's columns in hash-map order: compared as a set
            preserving=sorted(op.fields_for_preserving_frag_bitmap),
            mode=op.update_mode,
        )
    elif out["kind"] == "Delete":
        out.update(
            updated=sorted((f.id, f.deletion_file.num_deleted_rows) for f in op.updated_fragments),
            removed=sorted(op.deleted_fragment_ids),
        )
    return out


def _same(ours: str, ref: str, what: str) -> None:
    """Both datasets equal, each read through both engines, and the same transaction."""
    cols = _columns(ref)
    expected = lance.dataset(ref).to_table(columns=cols).sort_by("id")
    assert lance.dataset(ours).version == lance.dataset(ref).version, what
    for reader in (lambda u: lance.dataset(u), lambda u: dataset(u)):
        for uri in (ours, ref):
            got = reader(uri).to_table(columns=cols).sort_by("id")
            assert_same_table(got, expected, f"{what}: {uri}")
    assert _shape(ours) == _shape(ref), what


UPDATES = [
    ({"score": "score * 2"}, "id < 15"),
    ({"score": "id + 1", "cat": "'x'"}, "cat = 'c1' OR id > 100"),
    ({"id": "score"}, "score > 20"),  # a double cast into the int64 key
    ({"cat": "upper(cat)"}, None),
    ({"score": "0.5"}, "id > 1000"),  # nothing matches: still a version
    ({"score": "NULL"}, "id BETWEEN 20 AND 29"),  # a whole fragment
]


@pytest.mark.parametrize("updates, where", UPDATES, ids=[str(i) for i in range(len(UPDATES))])
def test_update_is_pylances(twins, updates, where) -> None:
    ours, ref = twins
    got = dataset(ours).update(updates, where)
    want = lance.dataset(ref).update(updates, where)
    assert got == want
    _same(ours, ref, f"update {updates} where {where}")


def test_delete_counts_and_commit_are_pylances(twins) -> None:
    ours, ref = twins
    for predicate in ("id % 4 = 1", "id BETWEEN 10 AND 19", "id > 5000"):
        assert dataset(ours).delete(predicate) == lance.dataset(ref).delete(predicate)
        _same(ours, ref, f"delete {predicate}")


def _source(ids: list[int | None], *, score: float = 7.5, columns: list[str] | None = None):
    n = len(ids)
    t = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "cat": pa.array([f"s{i}" for i in range(n)]),
            "score": pa.array([score + i for i in range(n)], pa.float64()),
            "tags": pa.array([["new"]] * n, pa.list_(pa.string())),
        }
    )
    return t.select(columns) if columns else t


MERGES = {
    "upsert": lambda b: b.when_matched_update_all().when_not_matched_insert_all(),
    "insert_if_not_exists": lambda b: b.when_not_matched_insert_all(),
    "update_only": lambda b: b.when_matched_update_all(),
    "conditional": lambda b: b.when_matched_update_all("source.score > target.score"),
    "matched_delete": lambda b: b.when_matched_delete(),
    "replace_range": lambda b: (
        b.when_matched_update_all()
        .when_not_matched_insert_all()
        .when_not_matched_by_source_delete("id < 12")
    ),
    "delete_by_source": lambda b: b.when_not_matched_by_source_delete(),
}


@pytest.mark.parametrize("clauses", list(MERGES))
def test_merge_insert_is_pylances(twins, clauses) -> None:
    ours, ref = twins
    source = _source([3, 14, 14000, 102, None, 27, 14001])
    build = MERGES[clauses]
    got = build(dataset(ours).merge_insert("id")).execute(source)
    want = build(lance.dataset(ref).merge_insert("id")).execute(source)
    assert got == want
    _same(ours, ref, f"merge {clauses}")


def test_partial_schema_merges_are_pylances(twins) -> None:
    ours, ref = twins
    source = _source([2, 13, 500], columns=["id", "score"])
    for build in (
        lambda b: b.when_matched_update_all().when_not_matched_insert_all(),
        lambda b: b.when_matched_update_all("source.score < target.score"),
    ):
        got = build(dataset(ours).merge_insert("id").write_mode("rewrite_rows")).execute(source)
        want = build(lance.dataset(ref).merge_insert("id").write_mode("rewrite_rows")).execute(
            source
        )
        assert got == want
        _same(ours, ref, "partial-schema merge")


def test_composite_keys_and_repeated_merges(twins) -> None:
    ours, ref = twins
    for round_ in range(3):
        source = _source([1 + round_, 2, 40 + round_, 101], score=float(round_))
        source = source.set_column(1, "cat", pa.array(["c1", "c2", "z", "c1"]))
        for uri, engine in ((ours, dataset), (ref, lance.dataset)):
            b = engine(uri).merge_insert(["id", "cat"])
            b.when_matched_update_all().when_not_matched_insert_all().execute(source)
        _same(ours, ref, f"composite-key merge {round_}")


def test_merge_errors_commit_nothing(twins) -> None:
    ours, _ = twins
    ds = dataset(ours)
    version = ds.version
    files = sorted(p.name for p in Path(ours).rglob("*"))
    with pytest.raises(InvalidInputError, match=r"Ambiguous merge.*\(id = 3\)"):
        ds.merge_insert("id").when_matched_update_all().execute(_source([3, 3]))
    with pytest.raises(InvalidInputError, match="when_matched_fail"):
        ds.merge_insert("id").when_matched_fail().when_not_matched_insert_all().execute(
            _source([999, 4])
        )
    with pytest.raises(ColumnNotFoundError, match="'nope'"):
        ds.merge_insert("nope")
    with pytest.raises(SchemaMismatchError, match="'extra'"):
        ds.merge_insert("id").when_not_matched_insert_all().execute(
            _source([1]).append_column("extra", pa.array([1]))
        )
    with pytest.raises(SchemaMismatchError, match="'cat'"):
        ds.merge_insert("id").when_not_matched_insert_all().execute(
            _source([1]).set_column(1, "cat", pa.array([[1]]))
        )
    with pytest.raises(SchemaMismatchError, match="every column"):
        ds.merge_insert("id").when_not_matched_by_source_delete().execute(
            _source([1], columns=["id", "score"])
        )
    with pytest.raises(InvalidInputError, match="not configured to change"):
        ds.merge_insert("id").execute(_source([1]))
    with pytest.raises(InvalidInputError, match="join keys"):
        ds.merge_insert()
    with pytest.raises(ColumnNotFoundError, match="'nope'"):
        ds.update({"nope": "1"})
    with pytest.raises(InvalidInputError):
        ds.update({"score": "'abc'"})
    assert dataset(ours).version == version
    assert sorted(p.name for p in Path(ours).rglob("*")) == files


def test_errors_leave_no_files(tmp_path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(), uri, max_rows_per_file=10)
    before = sorted(p.name for p in (tmp_path / "t.lance").rglob("*"))
    ds = dataset(uri)
    with pytest.raises(SchemaMismatchError):
        ds.merge_insert("id").when_matched_update_all().execute(
            _source([1]).set_column(2, "score", pa.array(["x"]))
        )
    with pytest.raises(InvalidInputError):
        ds.update({"score": "CAST(cat AS DOUBLE)"})
    assert sorted(p.name for p in (tmp_path / "t.lance").rglob("*")) == before


def test_primary_key_is_the_default_key(tmp_path) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), False, {"lance-schema:unenforced-primary-key": "true"}),
            pa.field("v", pa.string()),
        ]
    )
    t = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=schema)
    uris = [str(tmp_path / n) for n in ("ours", "ref")]
    for uri in uris:
        lance.write_dataset(t, uri)
    src = pa.table({"id": [3, 4], "v": ["C", "D"]}, schema=schema)
    got = dataset(uris[0]).merge_insert().when_matched_update_all()
    want = lance.dataset(uris[1]).merge_insert().when_matched_update_all()
    assert got.when_not_matched_insert_all().execute(src) == (
        want.when_not_matched_insert_all().execute(src)
    )
    for uri in uris:
        assert lance.dataset(uri).to_table().sort_by("id").to_pylist() == [
            {"id": 1, "v": "a"},
            {"id": 2, "v": "b"},
            {"id": 3, "v": "C"},
            {"id": 4, "v": "D"},
        ]


def test_execute_uncommitted_then_commit(tmp_path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(), uri, max_rows_per_file=10)
    ds = dataset(uri)
    txn, stats = (
        ds.merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute_uncommitted(_source([1, 77]))
    )
    assert stats == {"num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 0}
    assert dataset(uri).version == 1
    done = commit(uri, txn)
    assert done.version == 2
    assert sorted(lance.dataset(uri).to_table().column("id").to_pylist()) == [
        *range(30),
        77,
    ]


def _vectors(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    vec = rng.random((n, 8), dtype=np.float32)
    return pa.table(
        {
            "id": pa.array(np.arange(n), pa.int64()),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), 8),
        }
    )


def _coverage(ds: lance.LanceDataset) -> list:
    return sorted((x["name"], sorted(x["fragment_ids"])) for x in ds.list_indices())


def test_search_after_every_kind_of_commit(tmp_path) -> None:
    """The issue's case: a delete emptying indexed fragments, then updates and merges; the
    index sections equal pylance's after each, and search answers k live rows."""
    data = _vectors(12_000)
    uris = [str(tmp_path / n) for n in ("ours", "ref")]
    for uri in uris:
        ds = lance.write_dataset(data, uri, max_rows_per_file=4000)
        ds.create_index("vec", "IVF_FLAT", num_partitions=4)
        ds.create_scalar_index("id", "BTREE")
    q = data.column("vec")[5000].values.to_numpy()
    steps = [
        lambda d: d.delete("id < 4000"),
        lambda d: d.update({"id": "id + 100000"}, "id >= 4000 AND id < 4100"),
        lambda d: (
            d.merge_insert("id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(_vectors(12_000).slice(9_000, 10))
        ),
        lambda d: d.delete("id >= 8000 AND id < 12000"),
    ]
    for i, step in enumerate(steps):
        step(dataset(uris[0]))
        step(lance.dataset(uris[1]))
        ours, ref = lance.dataset(uris[0]), lance.dataset(uris[1])
        assert _coverage(ours) == _coverage(ref), f"step {i}"
        found = dataset(uris[0]).to_table(nearest={"column": "vec", "q": q, "k": 10})
        assert found.num_rows == 10, f"step {i}"
        live = set(dataset(uris[0]).to_table(columns=["id"]).column("id").to_pylist())
        assert set(found.column("id").to_pylist()) <= live
        exact = dataset(uris[0]).to_table(
            nearest={"column": "vec", "q": q, "k": 10, "use_index": False}
        )
        # IVF_FLAT over every partition is exact
        probed = dataset(uris[0]).to_table(nearest={"column": "vec", "q": q, "k": 10, "nprobes": 4})
        assert probed.column("id").to_pylist() == exact.column("id").to_pylist(), f"step {i}"


def test_update_rebases_over_a_concurrent_delete_of_other_rows(tmp_path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(), uri, max_rows_per_file=10)
    from quiver.format.dataset.row_changes import commit_change
    from quiver.format.dataset.update import _plan

    planned = _plan(dataset(uri).core, {"score": "-1.0"}, "id IN (1, 2)")
    lance.dataset(uri).delete("id IN (3, 4)")  # same fragment, other rows
    commit_change(planned)
    got = lance.dataset(uri).to_table().sort_by("id")
    assert 3 not in got.column("id").to_pylist() and 4 not in got.column("id").to_pylist()
    assert got.filter(pa.compute.field("id").isin([1, 2])).column("score").to_pylist() == [-1, -1]
    assert got.num_rows == 28


def test_update_conflicting_with_a_concurrent_delete_retries(tmp_path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(), uri, max_rows_per_file=10)
    from quiver.format.dataset.row_changes import commit_change
    from quiver.format.dataset.update import _plan

    planned = _plan(dataset(uri).core, {"score": "-1.0"}, "id IN (1, 2)")
    lance.dataset(uri).delete("id = 2")  # one of the rows the update rewrites
    with pytest.raises(CommitConflictError) as err:
        commit_change(planned)
    assert err.value.retryable
    # the whole call retries on the new version: row 2 stays deleted
    assert dataset(uri).update({"score": "-1.0"}, "id IN (1, 2)") == {"num_rows_updated": 1}
    ids = lance.dataset(uri).to_table().column("id").to_pylist()
    assert 2 not in ids and ids.count(1) == 1


def test_racing_updates_and_pylance_deletes_lose_nothing(tmp_path) -> None:
    """Quiver updates of even ids and pylance deletes of odd ids, concurrently: every
    even row updated once, every odd row gone, no row twice."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(40), uri, max_rows_per_file=10)
    errors: list[BaseException] = []

    def quiver() -> None:
        try:
            for i in range(0, 40, 4):
                dataset(uri).update({"score": "-1.0"}, f"id IN ({i}, {i + 2})")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def pylance() -> None:
        try:
            for i in range(1, 40, 4):
                lance.dataset(uri).delete(f"id IN ({i}, {i + 2})")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=quiver), threading.Thread(target=pylance)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = lance.dataset(uri).to_table().sort_by("id")
    assert got.column("id").to_pylist() == list(range(0, 40, 2))
    assert set(got.column("score").to_pylist()) == {-1.0}


def test_commit_transaction_without_affected_rows_cannot_rebase(tmp_path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(), uri, max_rows_per_file=10)
    from quiver.format.dataset.row_changes import change_transaction
    from quiver.format.dataset.update import _plan

    txn, _ = change_transaction(_plan(dataset(uri).core, {"score": "1.0"}, "id = 1"))
    lance.dataset(uri).delete("id = 5")
    with pytest.raises(CommitConflictError):
        commit_transaction(dataset(uri).core.store, txn)


PK = {"lance-schema:unenforced-primary-key": "true"}


def _pk_schema() -> pa.Schema:
    return pa.schema([pa.field("id", pa.int64(), False, PK), pa.field("who", pa.string())])


def test_primary_key_rules_are_pylances(tmp_path) -> None:
    from quiver.format.dataset import write_dataset

    bad = {
        "nullable": pa.schema([pa.field("id", pa.int64(), True, PK)]),
        "not a leaf": pa.schema(
            [pa.field("s", pa.struct([pa.field("a", pa.int64(), False)]), False, PK)]
        ),
        "in a list": pa.schema(
            [pa.field("l", pa.list_(pa.field("item", pa.int64(), False, PK)), False)]
        ),
        "under a nullable struct": pa.schema(
            [pa.field("s", pa.struct([pa.field("a", pa.int64(), False, PK)]), True)]
        ),
    }
    for what, schema in bad.items():
        with pytest.raises(Exception) as ref_err:
            lance.write_dataset(schema.empty_table(), str(tmp_path / f"ref{len(what)}"))
        with pytest.raises(InvalidInputError, match="primary key"):
            write_dataset(schema.empty_table(), str(tmp_path / f"ours{len(what)}"))
        assert "Primary key" in str(ref_err.value), what
    positioned = pa.schema(
        [
            pa.field("a", pa.string(), False, {**PK, PK_POSITION: "2"}),
            pa.field("b", pa.int32(), False, {**PK, PK_POSITION: "1"}),
        ]
    )
    uri = str(tmp_path / "pos")
    write_dataset(positioned.empty_table(), uri)
    from quiver.format.dataset.merge_insert import primary_key

    assert primary_key(dataset(uri).lance_schema) == ("b", "a")
    assert lance.dataset(uri).schema.field("a").metadata == positioned.field("a").metadata


PK_POSITION = "lance-schema:unenforced-primary-key:position"


def test_primary_key_merges_record_the_keys_they_insert_as_pylance(tmp_path) -> None:
    uris = [str(tmp_path / n) for n in ("ours", "ref")]
    base = pa.table({"id": [1, 2, 3], "who": ["a", "b", "c"]}, schema=_pk_schema())
    source = pa.table({"id": [3, 4, 5], "who": ["x", "y", "z"]}, schema=_pk_schema())
    for uri in uris:
        lance.write_dataset(base, uri)
    dataset(uris[0]).merge_insert().when_matched_update_all().when_not_matched_insert_all().execute(
        source
    )
    lance.dataset(
        uris[1]
    ).merge_insert().when_matched_update_all().when_not_matched_insert_all().execute(source)
    from quiver.format.table.commit import read_transaction

    filters = [read_transaction(dataset(u).core.store, dataset(u).manifest) for u in uris]
    assert filters[0].update.inserted_rows == filters[1].update.inserted_rows
    assert filters[0].update.inserted_rows.bloom.num_bits == 262_144


def test_racing_primary_key_upserts_never_insert_a_key_twice(tmp_path) -> None:
    """Two Quiver writers and a pylance writer upsert overlapping new keys at once: every
    key ends up once, holding one writer's row."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": [0], "who": ["seed"]}, schema=_pk_schema()), uri)
    errors: list[BaseException] = []

    def writer(who: str, engine) -> None:
        try:
            for round_ in range(6):
                keys = list(range(1 + round_ * 3, 7 + round_ * 3))  # overlaps the next round
                src = pa.table({"id": keys, "who": [who] * len(keys)}, schema=_pk_schema())
                b = engine(uri).merge_insert("id").conflict_retries(50)
                b.when_matched_update_all().when_not_matched_insert_all().execute(src)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [
        threading.Thread(target=writer, args=("q1", dataset)),
        threading.Thread(target=writer, args=("q2", dataset)),
        threading.Thread(target=writer, args=("py", lance.dataset)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    ids = lance.dataset(uri).to_table().column("id").to_pylist()
    assert sorted(ids) == list(range(22)), "a key was inserted twice or lost"
    assert dataset(uri).count_rows() == 22


@pytest.mark.parametrize("kind", ["BITMAP", "BTREE"])
def test_rows_moved_by_an_update_stay_indexed_as_pylance_keeps_them(tmp_path, kind) -> None:
    """With stable row ids, rows an update moves unchanged stay covered by an index that
    holds row ids (BITMAP), not by one holding addresses (BTREE v1), as in pylance 14."""
    uris = [str(tmp_path / n) for n in ("ours", "ref")]
    table = pa.table({"id": list(range(20)), "k": [i % 3 for i in range(20)], "c": [0] * 20})
    for uri, engine in zip(uris, (dataset, lance.dataset), strict=True):
        ds = lance.write_dataset(table, uri, max_rows_per_file=5, enable_stable_row_ids=True)
        ds.create_scalar_index("k", kind)
        engine(uri).update({"c": "c + 1"}, "id < 7")
    assert _coverage(lance.dataset(uris[0])) == _coverage(lance.dataset(uris[1]))
    for uri in uris:
        assert lance.dataset(uri).count_rows("k = 1") == dataset(uri).count_rows("k = 1") == 7


def test_primary_key_stays_non_nullable_and_declared(tmp_path) -> None:
    uri = str(tmp_path / "pk")
    lance.write_dataset(pa.table({"id": [1, 2], "who": ["a", "b"]}, schema=_pk_schema()), uri)
    ds = dataset(uri)
    with pytest.raises(Exception) as ref:
        lance.dataset(uri).alter_columns({"path": "id", "nullable": True})
    with pytest.raises(InvalidInputError, match="primary key"):
        ds.alter_columns({"path": "id", "nullable": True})
    assert "Primary key" in str(ref.value)
    ds.alter_columns({"path": "id", "data_type": pa.int32()})  # a cast keeps the key
    from quiver.format.dataset.merge_insert import primary_key

    assert primary_key(dataset(uri).lance_schema) == ("id",)
    assert lance.dataset(uri).schema.field("id").metadata == _pk_schema().field("id").metadata
