"""Backfills against pylance 14: `merge` (a key join), `add_columns` with a function of
each batch, merges rewriting columns in place (`write_mode("rewrite_columns")`, and "auto"
where pylance picks it), and Quiver's backfills by row address; existing data files are
never rewritten, transactions match pylance's, bad input commits nothing."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from quiver.format.dataset import dataset
from quiver.format.errors import ColumnNotFoundError, InvalidInputError, SchemaMismatchError
from tests.compare import assert_same_table

VERSIONS = ["2.0", "2.2"]


def _table(n: int = 40) -> pa.Table:
    ids = np.arange(n)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "a": pa.array(ids * 10, pa.int32()),
            "s": pa.array([None if i % 7 == 3 else f"s{i}" for i in ids]),
            "f": pa.array(ids * 0.25, pa.float64()),
        }
    )


@pytest.fixture(params=VERSIONS)
def twins(request, tmp_path) -> tuple[str, str]:
    paths = []
    for name in ("ours", "ref"):
        uri = str(tmp_path / f"{name}.lance")
        ds = lance.write_dataset(
            _table(), uri, max_rows_per_file=15, data_storage_version=request.param
        )
        ds.delete("id % 6 = 1")
        paths.append(uri)
    return paths[0], paths[1]


def _data_files(uri: str) -> set[str]:
    return {p.name for p in (Path(uri) / "data").iterdir()}


def _same(ours: str, ref: str, what: str) -> None:
    want = lance.dataset(ref).to_table().sort_by("id")
    for reader in (lance.dataset, dataset):
        assert_same_table(reader(ours).to_table().sort_by("id"), want, f"{what}: {reader}")
    a = lance.dataset(ours).read_transaction(lance.dataset(ours).version).operation
    b = lance.dataset(ref).read_transaction(lance.dataset(ref).version).operation
    assert type(a) is type(b), what
    if type(a).__name__ == "Update":
        # pylance lists modified fields in hash-map order: compared as sets
        assert (sorted(a.fields_modified), a.update_mode, a.removed_fragment_ids) == (
            sorted(b.fields_modified),
            b.update_mode,
            b.removed_fragment_ids,
        ), what
        # pylance lists updated fragments in no fixed order
        assert sorted((f.id, [d.fields for d in f.files]) for f in a.updated_fragments) == sorted(
            (f.id, [d.fields for d in f.files]) for f in b.updated_fragments
        ), what
        assert len(a.new_fragments) == len(b.new_fragments), what


def test_merge_joins_new_columns_as_pylance(twins) -> None:
    ours, ref = twins
    before = _data_files(ours)
    source = pa.table({"key": [3, 1, 99, 3, 20], "b": ["x", "y", "z", "w", None], "c": [1.5] * 5})
    dataset(ours).merge(source, "id", "key")
    lance.dataset(ref).merge(source, "id", "key")
    _same(ours, ref, "merge")
    assert before <= _data_files(ours)  # no file rewritten
    with pytest.raises(InvalidInputError, match="exists in both"):
        dataset(ours).merge(pa.table({"id": [1], "a": [1]}), "id")
    with pytest.raises(ColumnNotFoundError):
        dataset(ours).merge(pa.table({"k": [1], "z": [1]}), "id", "nope")


def test_function_columns_as_pylance(twins) -> None:
    ours, ref = twins

    def twice(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.record_batch([pc.multiply(batch["a"], 2)], names=["twice"])

    @lance.batch_udf(output_schema=pa.schema([pa.field("upper", pa.string())]))
    def upper(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.record_batch([pc.utf8_upper(batch["s"])], names=["upper"])

    for func, cols in ((twice, ["a"]), (upper, None)):
        dataset(ours).add_columns(func, read_columns=cols)
        lance.dataset(ref).add_columns(func, read_columns=cols)
        _same(ours, ref, f"add_columns({func})")
    with pytest.raises(InvalidInputError, match="rows for a batch"):
        dataset(ours).add_columns(lambda b: pa.record_batch([pa.array([1])], names=["one"]))


SOURCES = {
    "values": pa.table(
        {"id": [2, 5, 14, 16, 500], "a": pa.array([-2, -5, -14, -16, -500], pa.int32())}
    ),
    "two columns": pa.table(
        {"s": ["u", None, "w"], "id": [0, 9, 39], "a": pa.array([0, 1, 2], pa.int32())}
    ),
}


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("condition", [None, "source.a < target.a"])
def test_rewrite_columns_merges_as_pylance(twins, source, condition) -> None:
    ours, ref = twins
    before = _data_files(ours)
    src = SOURCES[source]
    got = (
        dataset(ours)
        .merge_insert("id")
        .when_matched_update_all(condition)
        .write_mode("rewrite_columns")
        .execute(src)
    )
    want = (
        lance.dataset(ref)
        .merge_insert("id")
        .when_matched_update_all(condition)
        .write_mode("rewrite_columns")
        .execute(src)
    )
    assert got == want
    _same(ours, ref, f"rewrite_columns {source} {condition}")
    assert before <= _data_files(ours)


def test_auto_rewrites_columns_where_pylance_does(twins) -> None:
    ours, ref = twins
    for uri in twins:
        lance.dataset(uri).create_scalar_index("id", "BTREE")
    src = SOURCES["values"]
    for uri, engine in ((ours, dataset), (ref, lance.dataset)):
        engine(uri).merge_insert("id").when_matched_update_all().execute(src)
    _same(ours, ref, "auto with an indexed key")
    # the rewritten fragments leave the index on the rewritten column only: none here
    assert sorted(
        (i["name"], sorted(i["fragment_ids"])) for i in lance.dataset(ours).list_indices()
    ) == sorted((i["name"], sorted(i["fragment_ids"])) for i in lance.dataset(ref).list_indices())
    assert dataset(ours).to_table(filter="id = 5").column("a").to_pylist() == [-5]


def test_rewrite_columns_refuses_what_it_cannot_express(twins) -> None:
    ours, _ = twins
    b = dataset(ours).merge_insert("id").write_mode("rewrite_columns")
    cases = [
        (b.when_matched_update_all().when_not_matched_insert_all(), SOURCES["values"], "inserting"),
        (
            dataset(ours)
            .merge_insert("id")
            .write_mode("rewrite_columns")
            .when_matched_update_all(),
            _table(3),
            "every dataset column",
        ),
        (
            dataset(ours)
            .merge_insert("id")
            .write_mode("rewrite_columns")
            .when_matched_update_all(),
            pa.table({"id": [1]}),
            "besides the join key",
        ),
        (
            dataset(ours).merge_insert("id").write_mode("rewrite_columns").when_matched_delete(),
            SOURCES["values"],
            "when_matched must update",
        ),
    ]
    version = dataset(ours).version
    for builder, src, message in cases:
        with pytest.raises(InvalidInputError, match=message):
            builder.execute(src)
    assert dataset(ours).version == version


def test_backfills_by_row_address(twins) -> None:
    """add_columns and update_columns from rows naming their `_rowaddr` (what a Spark job
    computes): the same table as pylance's add_columns / column-rewriting merge."""
    ours, ref = twins
    rows = dataset(ours).to_table(columns=["id", "a"], with_row_address=True)
    score = pc.multiply(pc.cast(rows["a"], pa.float64()), 0.5)
    before = _data_files(ours)
    dataset(ours).add_columns(pa.table({"_rowaddr": rows["_rowaddr"], "score": score}))
    lance.dataset(ref).add_columns({"score": "CAST(a AS DOUBLE) * 0.5"})
    _same(ours, ref, "add by address")
    # a second backfill naming some rows only: the others are NULL
    some = rows.filter(pc.less(rows["id"], 10))
    dataset(ours).add_columns(
        pa.table({"_rowaddr": some["_rowaddr"], "flag": pc.greater(some["id"], 4)})
    )
    got = dataset(ours).to_table(columns=["id", "flag"]).sort_by("id")
    assert got.column("flag").to_pylist() == [
        (i > 4) if i < 10 else None for i in got.column("id").to_pylist()
    ]
    assert before <= _data_files(ours)
    # update_columns: new values of `a` for some rows, as a column-rewriting merge does
    pick = rows.filter(pc.equal(pc.bit_wise_and(rows["id"], 3), 0))
    new_a = pc.negate(pick["a"])
    assert dataset(ours).update_columns(pa.table({"_rowaddr": pick["_rowaddr"], "a": new_a})) == {
        "num_rows_updated": pick.num_rows
    }
    lance.dataset(ref).merge_insert("id").when_matched_update_all().write_mode(
        "rewrite_columns"
    ).execute(pa.table({"id": pick["id"], "a": new_a}))
    want = lance.dataset(ref).to_table(columns=["id", "a", "s", "f", "score"]).sort_by("id")
    got = lance.dataset(ours).to_table(columns=["id", "a", "s", "f", "score"]).sort_by("id")
    assert_same_table(got, want, "update_columns")


def test_backfill_errors_commit_nothing(twins) -> None:
    ours, _ = twins
    ds = dataset(ours)
    version, files = ds.version, _data_files(ours)
    rows = ds.to_table(columns=["id"], with_row_address=True)
    addr = rows["_rowaddr"]
    deleted = 1  # row 1 was deleted: fragment 0, offset 1
    cases = [
        (
            lambda: ds.add_columns(
                pa.table({"_rowaddr": pa.array([deleted], pa.uint64()), "z": [1]})
            ),
            "not a live row",
        ),
        (
            lambda: ds.add_columns(
                pa.table({"_rowaddr": pa.array([77 << 32], pa.uint64()), "z": [1]})
            ),
            "not a live row",
        ),
        (lambda: ds.add_columns(pa.table({"_rowaddr": addr, "a": rows["id"]})), "already exists"),
        (
            lambda: ds.add_columns(
                pa.table(
                    {"_rowaddr": pa.concat_arrays([addr.combine_chunks()[:1]] * 2), "z": [1, 2]}
                )
            ),
            "appears twice",
        ),
        (lambda: ds.update_columns(pa.table({"_rowaddr": addr, "nope": rows["id"]})), "'nope'"),
        (lambda: ds.update_columns(pa.table({"id": rows["id"]})), "_rowaddr"),
    ]
    for call, message in cases:
        with pytest.raises((InvalidInputError, SchemaMismatchError), match=message):
            call()
    assert dataset(ours).version == version
    assert _data_files(ours) == files
