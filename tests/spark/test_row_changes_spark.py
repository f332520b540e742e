"""Row changes from Spark in local[2, 3] (tasks may be retried): upserts and merges by the
`operation` write option and `clients.spark.changes`, backfills of `_rowaddr`-keyed
DataFrames, update and delete; every result compared with the same change made by pylance
on a twin dataset; one version per job; failed jobs and retried tasks apply nothing twice."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

pyspark = pytest.importorskip("pyspark")

from quiver.clients import Client  # noqa: E402
from quiver.clients.spark import changes  # noqa: E402
from tests.compare import assert_same_table  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """local[2, 3]: two cores, a failed task tried up to three times."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from quiver.clients.spark import register

    session = (
        SparkSession.builder.master("local[2, 3]")
        .appName("quiver-row-changes")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    register(session)
    yield session
    session.stop()


def _rows(start: int, n: int, scale: float = 1.0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "value": pa.array([i * scale for i in ids], pa.float64()),
            "name": pa.array([f"n{i % 5}" for i in ids]),
        }
    )


def _twins(uri: str, root: Path, name: str) -> tuple[dict[str, str], str]:
    """Dataset `name` on the server and its pylance twin; the connection options."""
    with Client(uri) as qc:
        qc.write(name, _rows(0, 60), mode="create")
    ref = str(root / f"{name}-ref.lance")
    lance.write_dataset(lance.dataset(str(root / f"{name}.lance")).to_table(), ref)
    return {"uri": uri, "dataset": name}, ref


def _same(root: Path, name: str, ref: str, what: str) -> None:
    got = lance.dataset(str(root / f"{name}.lance")).to_table().sort_by("id")
    want = lance.dataset(ref).to_table().sort_by("id")
    assert_same_table(got, want, what)


def _files(root: Path, name: str) -> set[str]:
    return {p.name for p in (root / f"{name}.lance" / "data").iterdir()}


def _df(spark: Any, table: pa.Table, partitions: int = 3) -> Any:
    return spark.createDataFrame(
        table.to_pylist(), "id long, value double, name string"
    ).repartition(partitions)


def test_upsert_insert_new_and_delete_matching(spark, uri, root) -> None:
    conn, ref = _twins(uri, root, "sp_upsert")
    version = lance.dataset(str(root / "sp_upsert.lance")).version
    source = pa.concat_tables([_rows(50, 20, scale=-1.0)])  # 10 updates, 10 inserts
    _df(spark, source).write.format("quiver").options(**conn).option("operation", "upsert").option(
        "on", "id"
    ).mode("append").save()
    lance.dataset(ref).merge_insert(
        "id"
    ).when_matched_update_all().when_not_matched_insert_all().execute(source)
    _same(root, "sp_upsert", ref, "upsert")
    assert lance.dataset(str(root / "sp_upsert.lance")).version == version + 1  # one commit
    fresh = _rows(65, 10, scale=7.0)  # 5 existing (kept as they are), 5 new
    _df(spark, fresh).write.format("quiver").options(**conn).option(
        "operation", "insert_new"
    ).option("on", "id").mode("append").save()
    lance.dataset(ref).merge_insert("id").when_not_matched_insert_all().execute(fresh)
    _same(root, "sp_upsert", ref, "insert_new")
    gone = _rows(0, 10)
    _df(spark, gone).write.format("quiver").options(**conn).option(
        "operation", "delete_matching"
    ).mode("append").option("on", "id").save()
    lance.dataset(ref).merge_insert("id").when_matched_delete().execute(gone)
    _same(root, "sp_upsert", ref, "delete_matching")


def test_merge_helper_update_and_delete(spark, uri, root) -> None:
    conn, ref = _twins(uri, root, "sp_merge")
    source = _rows(20, 10, scale=0.5)
    changes.merge(
        _df(spark, source),
        on="id",
        matched_condition="source.value < target.value",
        when_not_matched=None,
        **conn,
    )
    lance.dataset(ref).merge_insert("id").when_matched_update_all(
        "source.value < target.value"
    ).execute(source)
    _same(root, "sp_merge", ref, "conditional merge")
    assert changes.update({"value": "value + 1"}, "id % 4 = 0", **conn)["updated_rows"] == 15
    lance.dataset(ref).update({"value": "value + 1"}, "id % 4 = 0")
    assert changes.delete("name = 'n3'", **conn)["deleted_rows"] == 12
    lance.dataset(ref).delete("name = 'n3'")
    _same(root, "sp_merge", ref, "update and delete")


def test_backfills_from_rowaddr(spark, uri, root) -> None:
    conn, ref = _twins(uri, root, "sp_backfill")
    before = _files(root, "sp_backfill")
    rows = spark.read.format("quiver").options(**conn).option("columns", "_rowaddr,value").load()
    feature = rows.selectExpr("_rowaddr", "value * 3 AS tripled")
    changes.add_columns(feature, **conn)
    lance.dataset(ref).add_columns({"tripled": "value * 3"})
    _same(root, "sp_backfill", ref, "add_columns from _rowaddr")
    assert before <= _files(root, "sp_backfill")  # no data file rewritten
    fix = rows.where("value < 10").selectExpr("_rowaddr", "-value AS value")
    changes.update_columns(fix, **conn)
    lance.dataset(ref).update({"value": "-value"}, "value < 10")
    _same(root, "sp_backfill", ref, "update_columns from _rowaddr")


def test_failed_jobs_and_retried_tasks_apply_each_row_once(spark, uri, root) -> None:
    conn, ref = _twins(uri, root, "sp_fail")
    version = lance.dataset(str(root / "sp_fail.lance")).version
    before = _files(root, "sp_fail")
    twice = pa.concat_tables([_rows(5, 3), _rows(5, 3)])  # ambiguous: two rows per target row
    with pytest.raises(Exception, match="Ambiguous"):
        _df(spark, twice, 2).write.format("quiver").options(**conn).option(
            "operation", "upsert"
        ).option("on", "id").mode("append").save()
    assert lance.dataset(str(root / "sp_fail.lance")).version == version
    assert _files(root, "sp_fail") == before  # the staged sources are gone too

    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    @udf("double")
    def flaky(value: float) -> float:
        # the first attempt of every task fails after its rows were read: Spark retries it
        if TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("a task attempt that dies")
        return value

    source = _rows(40, 40, scale=2.0)  # 20 updates, 20 inserts
    df = _df(spark, source, 4)
    df = df.withColumn("value", flaky(df.value))
    df.write.format("quiver").options(**conn).option("operation", "upsert").option("on", "id").mode(
        "append"
    ).save()
    lance.dataset(ref).merge_insert(
        "id"
    ).when_matched_update_all().when_not_matched_insert_all().execute(source)
    _same(root, "sp_fail", ref, "upsert with retried tasks")
    assert lance.dataset(str(root / "sp_fail.lance")).version == version + 1
    referenced = {
        df_.path
        for f in lance.dataset(str(root / "sp_fail.lance")).get_fragments()
        for df_ in f.data_files()
    }
    assert _files(root, "sp_fail") - before <= referenced  # no staged file left behind


def test_bad_options_are_refused(spark, uri, root) -> None:
    conn, _ = _twins(uri, root, "sp_opts")
    df = _df(spark, _rows(0, 3))
    cases = [
        ({"operation": "explode"}, "operation"),
        ({"operation": "upsert", "when_matched": "delete"}, "for operation 'merge'"),
        ({"operation": "merge", "when_matched": "shred"}, "when_matched"),
        ({"operation": "add_columns", "on": "id"}, "takes no 'on'"),
        ({"operation": "upsert", "conflict_retries": "-1"}, "conflict_retries"),
    ]
    for options, message in cases:
        with pytest.raises(Exception, match=message):
            df.write.format("quiver").options(**conn, **options).mode("append").save()
    with pytest.raises(Exception, match="mode\\('append'\\)"):
        df.write.format("quiver").options(**conn).option("operation", "upsert").mode(
            "overwrite"
        ).save()
    assert pc.sum(lance.dataset(str(root / "sp_opts.lance")).to_table()["id"]).as_py() == sum(
        range(60)
    )


def test_a_branch_read_and_written_by_spark(spark, uri, root) -> None:
    """The `branch` option: appends, upserts and reads go to the branch, checked against
    pylance on that branch; the main line is never touched."""
    name = "sp_branch"
    path = str(root / f"{name}.lance")
    with Client(uri) as qc:
        qc.write(name, _rows(0, 30), mode="create")
        qc.create_branch(name, "dev")
    conn = {"uri": uri, "dataset": name, "branch": "dev"}
    _df(spark, _rows(100, 12)).write.format("quiver").options(**conn).mode("append").save()
    _df(spark, _rows(20, 15, scale=-2.0)).write.format("quiver").options(**conn).option(
        "operation", "upsert"
    ).option("on", "id").mode("append").save()
    ref = lance.write_dataset(_rows(0, 30), str(root / f"{name}-ref.lance"))
    lance.write_dataset(_rows(100, 12), ref, mode="append")
    ref = lance.dataset(ref.uri)
    ref.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        _rows(20, 15, scale=-2.0)
    )
    dev = lance.dataset(path).checkout_version(("dev", None))
    assert dev.version == 3  # one commit per job
    assert_same_table(dev.to_table().sort_by("id"), ref.to_table().sort_by("id"), "branch")
    read = spark.read.format("quiver").options(**conn).load().toArrow().sort_by("id")
    assert read.column("id").to_pylist() == dev.to_table().sort_by("id").column("id").to_pylist()
    assert (
        read.column("value").to_pylist() == dev.to_table().sort_by("id").column("value").to_pylist()
    )
    assert lance.dataset(path).version == 1 and lance.dataset(path).count_rows() == 30
    with pytest.raises(Exception, match="branch 'nope'"):
        spark.read.format("quiver").options(**{**conn, "branch": "nope"}).load().collect()


def test_blob_columns_read_by_spark(spark, uri, root) -> None:
    """Blob columns in Spark: their descriptions by default (structs of where the bytes
    are, as pylance scans them), their bytes with `blob_handling` all_binary."""
    name = "sp_blobs"
    blob = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    values = [b"small", None, b"p" * 100_000, b"d" * 5_000_000]
    rows = pa.table({"id": range(4), "b": values}, schema=pa.schema([("id", pa.int64()), blob]))
    ref = lance.write_dataset(rows, str(root / f"{name}.lance"))
    conn = {"uri": uri, "dataset": name}
    described = spark.read.format("quiver").options(**conn).load().toArrow().sort_by("id")
    want = ref.to_table().sort_by("id")
    assert described.column("b").to_pylist() == want.column("b").to_pylist()
    read = spark.read.format("quiver").options(**conn).option("blob_handling", "all_binary")
    got = read.load().toArrow().sort_by("id")
    assert got.column("b").to_pylist() == values
    with pytest.raises(Exception, match="blob_handling"):
        spark.read.format("quiver").options(**conn).option("blob_handling", "x").load().collect()


def test_blob_columns_written_by_spark(spark, uri, root) -> None:
    """`blob_columns` makes a new dataset's binary column a blob column (blob v2, values
    out of line); later appends to it need no option."""
    name = "sp_blob_write"
    values = [b"a" * 10, None, b"b" * 100_000, b"c" * 5_000_000]
    df = spark.createDataFrame(
        [(i, None if v is None else bytearray(v)) for i, v in enumerate(values)],
        "id long, b binary",
    )
    conn = {"uri": uri, "dataset": name}
    df.write.format("quiver").options(**conn).option("blob_columns", "b").mode("overwrite").save()
    df.write.format("quiver").options(**conn).mode("append").save()
    ref = lance.dataset(str(root / f"{name}.lance"))
    assert ref.schema.field("b").type.extension_name == "lance.blob.v2"
    got = sorted(
        zip(
            ref.to_table(columns=["id"])["id"].to_pylist(),
            [f and f.readall() for f in ref.take_blobs("b", indices=range(8))],
            strict=True,
        ),
        key=lambda r: (r[0], r[1] or b""),
    )
    assert [v for _, v in got] == [v for v in values for _ in range(2)]
    kinds = {d["kind"] for d in ref.to_table()["b"].to_pylist() if d}
    assert kinds == {0, 1, 2}  # inline, packed and dedicated, as pylance would store them
