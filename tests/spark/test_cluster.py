"""The `quiver` data source in `local-cluster[2,1,1024]` mode: two executor JVMs, each with its
own Python workers, read and write through a real Quiver server on loopback.

What a pip-installed pyspark needs for local-cluster (checked with pyspark 4.3): nothing
beyond local mode except that executors must find the interpreter and our packages, so the
session sets `spark.executorEnv.PYSPARK_PYTHON` and `spark.executorEnv.PYTHONPATH` (the
directory the driver imported `clients` from; an editable install would do too). pyspark
finds SPARK_HOME (its own package directory) itself.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import sys
import time
from pathlib import Path

import lance
import pyarrow as pa
import pytest

pyspark = pytest.importorskip("pyspark")

from quiver.clients import Client  # noqa: E402
from quiver.clients.spark import register  # noqa: E402
from quiver.clients.spark.convert import arrow_schema, spark_schema  # noqa: E402
from quiver.flight_server.config import ServerConfig  # noqa: E402
from quiver.flight_server.server import build_server  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(420)]

from quiver import clients  # noqa: E402

# executors import the very `clients` package the driver imported
CODE_ROOT = Path(clients.__file__).resolve().parents[1]
EXECUTORS = 2


@pytest.fixture(scope="module")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(f"local-cluster[{EXECUTORS},1,1024]")
        .appName("quiver-cluster-tests")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.executorEnv.PYTHONPATH", str(CODE_ROOT))
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.task.maxFailures", "2")  # the failing task is retried once
        .getOrCreate()
    )
    # the executor JVMs register after the session starts (seconds on a busy machine)
    deadline = time.monotonic() + 120
    while session.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < EXECUTORS + 1:
        if time.monotonic() > deadline:
            break  # test_two_executors says how many came
        time.sleep(0.2)
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("quiver-cluster-root")
    srv = build_server(ServerConfig(root=str(root), port=0))
    yield srv.locations[0], root
    srv.shutdown()


def varied(start: int, n: int) -> pa.Table:
    """Rows of many types: nulls, empty and unicode strings, extremes, nested values."""
    ids = list(range(start, start + n))
    utc = dt.timezone.utc
    words = ["", "Tromsø", "日本語テキスト", "emoji 🦜", "x" * 3000, "plain"]
    big = 2**63 - 1
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "i8": pa.array([None if i % 9 == 0 else (i % 256) - 128 for i in ids], pa.int8()),
            "i64": pa.array([big - i if i % 2 else -big + i for i in ids], pa.int64()),
            "f32": pa.array([None if i % 11 == 0 else i * 0.5 for i in ids], pa.float32()),
            "f64": pa.array([float("inf") if i % 13 == 0 else -i / 3 for i in ids], pa.float64()),
            "s": pa.array([None if i % 7 == 0 else words[i % 6] for i in ids], pa.string()),
            "ls": pa.array([f"ł{i}" * (i % 4) for i in ids], pa.large_string()),
            "bin": pa.array([None if i % 5 == 0 else bytes([i % 256]) * (i % 3) for i in ids]),
            "b": pa.array([None if i % 4 == 0 else i % 3 == 0 for i in ids], pa.bool_()),
            "d": pa.array([dt.date(1970, 1, 1) + dt.timedelta(days=i * 37) for i in ids]),
            "ts": pa.array(
                [dt.datetime(2024, 2, 29, tzinfo=utc) + dt.timedelta(microseconds=i) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "ts_ny": pa.array(
                [dt.datetime(2024, 3, 10, 6, tzinfo=utc) + dt.timedelta(minutes=i) for i in ids],
                pa.timestamp("us", tz="America/New_York"),
            ),
            "ntz": pa.array(
                [None if i % 6 == 0 else dt.datetime(1999, 12, 31, 23, 59) for i in ids],
                pa.timestamp("us"),
            ),
            "dec": pa.array(
                [decimal.Decimal(f"{10**27 - i}.{i % 10**9:09d}") for i in ids],
                pa.decimal128(38, 9),
            ),
            "st": pa.array(
                # storage version 2.0 has no struct validity: the nulls are inside
                [{"a": None if i % 10 == 0 else i, "t": words[i % 6], "l": [i, None]} for i in ids],
                pa.struct([("a", pa.int32()), ("t", pa.string()), ("l", pa.list_(pa.int64()))]),
            ),
            "li": pa.array(
                [None if i % 3 == 0 else [words[(i + k) % 6] for k in range(i % 4)] for i in ids],
                pa.list_(pa.string()),
            ),
            "vec": pa.FixedSizeListArray.from_arrays(
                pa.array([float(i + k) for i in ids for k in range(4)], pa.float32()), 4
            ),
            "cat": pa.array([["red", "green", "blue"][i % 3] for i in ids]),
        }
    )


def spark_view(table: pa.Table) -> pa.Table:
    """`table` as Spark shows it: each column cast to the Arrow type of its Spark type."""
    target = arrow_schema(spark_schema(table.schema))
    return table.cast(target).sort_by("id")


def tree(root: Path) -> dict[str, int]:
    """Every file under `root` with its size (what a failed job must leave unchanged), but
    the staging ledger's ended-job markers (`_quiver_staging/<job>/_done`, no data: they
    refuse late puts into an aborted job until the sweep forgets the job)."""
    files = (p for p in root.rglob("*") if p.is_file())
    return {
        str(p.relative_to(root)): p.stat().st_size
        for p in files
        if not (p.name == "_done" and p.parent.parent.name == "_quiver_staging")
    }


def test_two_executors(spark) -> None:
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    assert status.size() == EXECUTORS + 1  # the driver and two executor JVMs


def test_multi_fragment_read_equals_pylance(spark, server) -> None:
    uri, root = server
    path = root / "wide.lance"
    # pylance 14 writes 2.2 by default; Quiver's reader supports up to 2.0 for now
    first = varied(0, 1500)
    lance.write_dataset(first, str(path), max_rows_per_file=300, data_storage_version="2.0")
    lance.write_dataset(varied(1500, 700), str(path), mode="append", max_rows_per_file=400)
    lance.dataset(str(path)).delete("id % 97 = 5")  # deletion files in several fragments
    reference = lance.dataset(str(path)).to_table()

    df = spark.read.format("quiver").option("uri", uri).option("dataset", "wide").load()
    assert df.rdd.getNumPartitions() == 7  # one per fragment
    got = df.toArrow().sort_by("id")
    want = spark_view(reference)
    assert got.num_rows == reference.num_rows == 2200 - len(range(5, 2200, 97))
    assert got.schema.equals(want.schema)
    assert got.equals(want)

    # an aggregation and a pushed filter run on the executors too (a fresh DataFrame per
    # query: PySpark reuses a DataFrame's pushed filters, see the data source's docs)
    fresh = spark.read.format("quiver").option("uri", uri).option("dataset", "wide").load()
    counts = {r["cat"]: r["count"] for r in fresh.groupBy("cat").count().collect()}
    values, n = pa.compute.value_counts(reference["cat"]).flatten()
    assert counts == dict(zip(values.to_pylist(), n.to_pylist(), strict=True))
    pushed = spark.read.format("quiver").option("uri", uri).option("dataset", "wide")
    pushed = pushed.option("pushdown", "true").load()
    some = pushed.filter("id >= 1000 AND s IS NOT NULL").select("id").toArrow().sort_by("id")
    mask = pa.compute.and_(pa.compute.greater_equal(want["id"], 1000), want["s"].is_valid())
    assert some["id"].equals(want.filter(mask)["id"])


def test_append_write_read_back_by_pylance(spark, server) -> None:
    uri, root = server
    source = varied(0, 900).drop_columns(["ts_ny", "vec"])
    df = spark.createDataFrame(source)

    def save(frame) -> None:
        frame.write.format("quiver").option("uri", uri).option("dataset", "out").mode(
            "append"
        ).save()

    save(df.filter("id < 500").repartition(4))  # creates the dataset
    save(df.filter("id >= 500").repartition(3))
    ds = lance.dataset(str(root / "out.lance"))
    assert ds.version == 2  # one commit per job
    assert len(ds.get_fragments()) >= 5  # staged by tasks on both executors
    back = ds.to_table().sort_by("id")
    expect = df.toArrow().sort_by("id")
    assert back.num_rows == 900
    assert back.cast(expect.schema).equals(expect)
    assert spark_view(back).equals(expect)


@pytest.mark.parametrize(
    "row_bytes",
    [
        pytest.param(8, id="fails-before-staging"),
        # the failed attempts' DoPuts end cleanly (the JVM closes the worker's input when
        # the upstream fails) and stage fragments whose commit messages Spark drops: only
        # the writer's staging job lets the abort find and remove them
        pytest.param(2000, id="fails-while-staging"),
    ],
)
def test_failed_task_leaves_dataset_and_disk_unchanged(spark, server, row_bytes: int) -> None:
    uri, root = server
    name = f"fail{row_bytes}"
    first = pa.table({"id": pa.array([1, 2], pa.int64()), "pad": pa.array(["a", "b"])})
    with Client(uri) as qc:
        qc.write(name, first, mode="create")
        before = qc.versions(name)
    files = tree(root)

    from pyspark.sql.functions import udf

    @udf("string")
    def pad(i: int) -> str:
        if i == 750:  # partway through the last task, after the other tasks staged theirs
            import time

            time.sleep(1.5)
            raise RuntimeError("task failure on purpose")
        # with big rows the UDF worker flushes its output as it goes, so the failing task's
        # writer has already received rows and begun its DoPut; small rows stay buffered
        return "p" * row_bytes

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    try:
        df = spark.range(0, 800, numPartitions=4).select("id", pad("id").alias("pad"))
        with pytest.raises(Exception, match="task failure on purpose"):
            df.write.format("quiver").option("uri", uri).option("dataset", name).mode(
                "append"
            ).save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    with Client(uri) as qc:
        assert qc.versions(name) == before
        assert qc.read(name).equals(first)
    after = tree(root)
    assert after == files, sorted(set(after) ^ set(files))  # no staged file left by any attempt


def test_dictionary_column_read(spark, server) -> None:
    uri, root = server
    table = varied(0, 60)
    table = table.set_column(
        table.schema.get_field_index("cat"), "cat", table["cat"].dictionary_encode()
    )
    lance.write_dataset(table, str(root / "dict.lance"), data_storage_version="2.0")
    df = spark.read.format("quiver").option("uri", uri).option("dataset", "dict").load()
    assert df.toArrow().sort_by("id").equals(spark_view(table))
