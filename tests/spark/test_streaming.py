"""Structured Streaming through the `quiver` data source against a real local Spark session
and a real Quiver server: the exactly-once sink (restart from the checkpoint, a replayed
batch) and the source that follows a dataset's appends."""

from __future__ import annotations

import datetime as dt
import decimal
import shutil
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pyspark = pytest.importorskip("pyspark")

from quiver.clients import Client  # noqa: E402
from quiver.clients.spark import QuiverDataSource  # noqa: E402
from quiver.clients.spark.convert import spark_schema  # noqa: E402
from quiver.clients.spark.options import QuiverOptionError  # noqa: E402
from quiver.clients.spark.streaming import (  # noqa: E402
    QuiverStreamMessage,
    QuiverStreamReader,
    checkpoint_query_id,
    idempotency_key,
)
from quiver.format.io.store import open_store  # noqa: E402
from quiver.format.table.commit import read_transaction  # noqa: E402
from quiver.format.table.transaction import IDEMPOTENCY_KEY  # noqa: E402
from quiver.format.table.versions import list_manifests, load_manifest  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def rows(start: int, n: int) -> pa.Table:
    """Varied rows: nulls, empty and non-ASCII strings, large values, nested types."""
    ids = list(range(start, start + n))
    utc = dt.timezone.utc
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "s": pa.array(
                [None if i % 5 == 0 else "" if i % 5 == 1 else f"ü→{i}✓" * (i % 4) for i in ids],
                pa.string(),
            ),
            "big": pa.array([(2**62 + i) * (-1) ** i for i in ids], pa.int64()),
            "f": pa.array([None if i % 6 == 0 else i / 3 for i in ids], pa.float64()),
            "ts": pa.array(
                [dt.datetime(2025, 1, 1, tzinfo=utc) + dt.timedelta(minutes=i) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "dec": pa.array([decimal.Decimal(i * 7) / 1000 for i in ids], pa.decimal128(12, 3)),
            "st": pa.array(
                [{"a": i, "b": None if i % 3 == 0 else f"n{i}"} for i in ids],
                pa.struct([("a", pa.int64()), ("b", pa.string())]),
            ),
            "li": pa.array([[i, None, -i] if i % 4 else None for i in ids], pa.list_(pa.int32())),
        }
    )


def pylance(root: Path, name: str) -> pa.Table:
    return lance.dataset(str(root / f"{name}.lance")).to_table().sort_by("id")


def same_rows(got: pa.Table, want: pa.Table) -> None:
    """Whole tables equal: values, nulls and (after casting to `got`'s types) types."""
    want = want.select(got.schema.names).cast(got.schema).sort_by("id")
    assert got.sort_by("id").equals(want)


def versions(uri: str, name: str) -> list[int]:
    with Client(uri) as qc:
        return [v["version"] for v in qc.versions(name)]


def data_files(root: Path, name: str) -> set[str]:
    return {p.name for p in (root / f"{name}.lance" / "data").iterdir()}


def referenced_files(root: Path, name: str) -> set[str]:
    ds = lance.dataset(str(root / f"{name}.lance"))
    return {Path(f.path).name for frag in ds.get_fragments() for f in frag.data_files()}


# ---------------------------------------------------------------------------------------------
# Sink


def run_sink(spark, uri: str, source: Path, checkpoint: Path, name: str) -> None:
    """One run of the file → quiver query: every file not yet done, one file per batch."""
    schema = spark_schema(rows(0, 1).schema)
    query = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .writeStream.format("quiver")
        .option("uri", uri)
        .option("dataset", name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None


def test_sink_exactly_once_across_restarts_and_replay(spark, uri, root, tmp_path) -> None:
    source, checkpoint, name = tmp_path / "in", tmp_path / "chk", "sink"
    source.mkdir()
    parts = [rows(i * 7, 7) for i in range(5)]
    for i in range(3):
        pq.write_table(parts[i], source / f"part{i}.parquet")
    run_sink(spark, uri, source, checkpoint, name)
    same_rows(pylance(root, name), pa.concat_tables(parts[:3]))
    assert versions(uri, name) == [1, 2, 3]  # one version per micro-batch

    # stopped; more input; restarted from the same checkpoint: only the new files
    for i in (3, 4):
        pq.write_table(parts[i], source / f"part{i}.parquet")
    run_sink(spark, uri, source, checkpoint, name)
    same_rows(pylance(root, name), pa.concat_tables(parts))
    assert versions(uri, name) == [1, 2, 3, 4, 5]
    files = data_files(root, name)
    assert files == referenced_files(root, name)

    # the last batch's sink commit landed but its checkpoint commit entry did not (a crash
    # in between): Spark runs batch 4 again with the same offsets and the same batch id
    (checkpoint / "commits" / "4").unlink()
    (checkpoint / "commits" / ".4.crc").unlink(missing_ok=True)  # Hadoop's checksum
    run_sink(spark, uri, source, checkpoint, name)
    assert (checkpoint / "commits" / "4").exists()  # the batch really ran again
    same_rows(pylance(root, name), pa.concat_tables(parts))  # no row twice
    assert versions(uri, name) == [1, 2, 3, 4, 5]
    assert data_files(root, name) == files  # the replay's staged files are gone

    # the key of version 5 is (the query id Spark keeps in the checkpoint, batch 4)
    query_id = checkpoint_query_id(str(checkpoint))
    assert query_id and checkpoint_query_id(f"file://{checkpoint}") == query_id
    store = open_store(str(root / f"{name}.lance"))
    manifest = load_manifest(store, list_manifests(store)[5])
    properties = read_transaction(store, manifest).transaction_properties
    assert properties[IDEMPOTENCY_KEY] == idempotency_key(query_id, 4)
    assert checkpoint_query_id(str(tmp_path / "nowhere")) is None


def test_failed_batch_leaves_nothing(spark, uri, root, tmp_path) -> None:
    """A task of a micro-batch fails: `abort` removes what the other task staged."""
    from pyspark.sql.functions import udf

    name, source = "sink_fail", tmp_path / "in"
    source.mkdir()
    with Client(uri) as qc:
        qc.write(name, rows(0, 2), mode="create")
    before, files = versions(uri, name), data_files(root, name)
    pq.write_table(rows(100, 40), source / "part0.parquet")

    ledger = root / f"{name}.lance" / "_quiver_staging"

    @udf("bigint")
    def boom(i: int) -> int:
        if i == 139:
            import time

            # the other task stages (its put is on the ledger) and reports first
            for _ in range(600):
                if any(ledger.glob("ss-*/*.json")):
                    break
                time.sleep(0.1)
            time.sleep(2.0)
            raise RuntimeError("task failure on purpose")
        return i

    query = (
        spark.readStream.schema(spark_schema(rows(0, 1).schema))
        .parquet(str(source))
        .repartition(2)
        .withColumn("id", boom("id"))
        .writeStream.format("quiver")
        .option("uri", uri)
        .option("dataset", name)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="task failure on purpose"):
        query.awaitTermination()
    assert versions(uri, name) == before
    assert data_files(root, name) == files


def test_sink_complete_mode_overwrites(spark, uri, root, tmp_path) -> None:
    """Output mode complete: each micro-batch replaces the dataset with the whole result."""
    from pyspark.sql.functions import col

    name, source = "sink_counts", tmp_path / "in"
    source.mkdir()
    parts = [rows(i * 10, 10 + i) for i in range(3)]
    for i, part in enumerate(parts):
        pq.write_table(part, source / f"part{i}.parquet")
    query = (
        spark.readStream.schema(spark_schema(rows(0, 1).schema))
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .groupBy((col("id") % 3).alias("k"))
        .count()
        .writeStream.format("quiver")
        .outputMode("complete")
        .option("uri", uri)
        .option("dataset", name)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    everything = pa.concat_tables(parts)
    k = pa.array([i % 3 for i in everything["id"].to_pylist()], pa.int64())
    want = pa.table({"k": k}).group_by("k").aggregate([("k", "count")])
    want = want.rename_columns(["k", "count"])
    got = lance.dataset(str(root / f"{name}.lance")).to_table().sort_by("k")
    assert got.column("k").to_pylist() == want.sort_by("k").column("k").to_pylist()
    assert got.column("count").to_pylist() == want.sort_by("k").column("count").to_pylist()
    assert versions(uri, name) == [1, 2, 3]  # one overwrite per micro-batch


def test_same_query_and_batch_commit_only_once(spark, uri, root) -> None:
    """A replayed commit of one (query id, batch id), seen from the sink's side."""
    name = "sink_replay"
    source = QuiverDataSource({"uri": uri, "dataset": name})
    with Client(uri) as qc:
        qc.write(name, rows(0, 3), mode="create")

    def batch(start: int, job: str | None) -> list[QuiverStreamMessage]:
        writer = source.streamWriter(spark_schema(rows(0, 1).schema), False)
        staged = writer.batch.stage(iter(rows(start, 4).to_batches()), job=job)
        return [QuiverStreamMessage(staged, "q-1", 7, job), None]

    writer = source.streamWriter(spark_schema(rows(0, 1).schema), False)
    writer.commit(batch(10, None), 7)
    assert versions(uri, name) == [1, 2]
    files = data_files(root, name)
    writer.commit(batch(10, None), 7)  # the same batch again, staged anew: no job
    writer.commit(batch(10, "ss-run2-7"), 7)  # ... and under a staging job
    assert versions(uri, name) == [1, 2]
    assert data_files(root, name) == files  # both replays' staged files removed
    same_rows(pylance(root, name), pa.concat_tables([rows(0, 3), rows(10, 4)]))
    writer.commit(batch(20, None), 8)  # the next batch appends
    assert versions(uri, name) == [1, 2, 3]
    assert idempotency_key("q-1", 7) != idempotency_key("q-1", 8)


def test_empty_batches(spark, uri, root) -> None:
    """Empty micro-batches: no version for an append; complete mode on a dataset that does
    not exist yet creates nothing (no rows, no schema to create it with)."""
    schema = spark_schema(rows(0, 1).schema)
    name = "sink_empty"
    empty = [QuiverStreamMessage([], "q-2", 0, "ss-run-0"), QuiverStreamMessage([], "q-2", 0)]
    QuiverDataSource({"uri": uri, "dataset": name}).streamWriter(schema, True).commit(empty, 0)
    assert not (root / f"{name}.lance").exists()
    with Client(uri) as qc:
        qc.write(name, rows(0, 3), mode="create")
    QuiverDataSource({"uri": uri, "dataset": name}).streamWriter(schema, False).commit(empty, 0)
    assert versions(uri, name) == [1]
    # the job ended (late attempts are refused and swept); nothing else is left behind
    ledger = root / f"{name}.lance" / "_quiver_staging"
    assert sorted(str(p.relative_to(ledger)) for p in ledger.rglob("*") if p.is_file()) == [
        "ss-run-0/_done"
    ]


# ---------------------------------------------------------------------------------------------
# Source


def follow(spark, uri: str, name: str, checkpoint: Path, seen: list[pa.Table]) -> None:
    """One run (Trigger.AvailableNow) of a stream over `name` from its checkpoint, each
    micro-batch's rows added to `seen`."""

    def collect(frame, batch_id: int) -> None:
        seen.append(frame.toArrow())

    query = (
        spark.readStream.format("quiver")
        .option("uri", uri)
        .option("dataset", name)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def everything(seen: list[pa.Table]) -> pa.Table:
    return pa.concat_tables([t for t in seen if t.num_rows])


def test_source_follows_appends(spark, uri, root, tmp_path) -> None:
    name, checkpoint = "followed", tmp_path / "chk"
    path = str(root / f"{name}.lance")
    seen: list[pa.Table] = []
    with Client(uri) as qc:
        qc.write(name, rows(0, 20), mode="create")  # v1: before the query starts
        follow(spark, uri, name, checkpoint, seen)
        assert sum(t.num_rows for t in seen) == 0  # starting_version=latest: later appends

        qc.write(name, rows(20, 10), mode="append")  # v2
        lance.write_dataset(rows(30, 15), path, mode="append", max_rows_per_file=8)  # v3
        follow(spark, uri, name, checkpoint, seen)
        same_rows(everything(seen), rows(20, 25))

        # a delete, a compaction and a tag add no rows; the deleted rows stay delivered
        qc.delete(name, "id >= 20 AND id < 25")
        qc.compact(name)
        qc.create_tag(name, "t1")
        qc.write(name, rows(45, 5), mode="append")
        follow(spark, uri, name, checkpoint, seen)
        same_rows(everything(seen), rows(20, 30))

        # an overwrite: the append before it is delivered, then the stream fails
        qc.write(name, rows(50, 4), mode="append")
        qc.write(name, rows(100, 2), mode="overwrite")
        overwrite = qc.describe(name)["version"]
        with pytest.raises(Exception) as failed:
            follow(spark, uri, name, checkpoint, seen)
        message = str(failed.value)
        assert f"version {overwrite} (overwrite)" in message and "'followed'" in message
        assert f"'starting_version', '{overwrite + 1}'" in message
        same_rows(everything(seen), rows(20, 34))
        assert seen[-1].num_rows == 4  # that append was its own micro-batch

        # the query cannot pass the overwrite; a new one after it follows the new appends
        with pytest.raises(Exception, match=f"version {overwrite}"):
            follow(spark, uri, name, checkpoint, seen)
        seen.clear()
        fresh = tmp_path / "chk-fresh"
        follow(spark, uri, name, fresh, seen)
        qc.write(name, rows(200, 3), mode="append")
        follow(spark, uri, name, fresh, seen)
        same_rows(everything(seen), rows(200, 3))


def settle(query) -> None:
    """Wait until the running query has read everything committed before this call.

    One `processAllAvailable` can return on a trigger that looked for data just before the
    caller's last commit; a trigger that finds nothing after the first call returned
    started after that commit, so the second call is exact."""
    query.processAllAvailable()
    query.processAllAvailable()


def test_source_picks_up_appends_while_running(spark, uri, tmp_path) -> None:
    name = "live"
    with Client(uri) as qc:
        qc.write(name, rows(0, 5), mode="create")
        query = (
            spark.readStream.format("quiver")
            .option("uri", uri)
            .option("dataset", name)
            .load()
            .writeStream.format("memory")
            .queryName("live_out")
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        try:
            settle(query)
            qc.write(name, rows(5, 6), mode="append")
            settle(query)
            same_rows(spark.table("live_out").toArrow(), rows(5, 6))
            qc.delete(name, "id < 7")
            qc.write(name, rows(11, 3), mode="append")
            qc.write(name, rows(14, 2), mode="append")
            settle(query)
            same_rows(spark.table("live_out").toArrow(), rows(5, 11))
        finally:
            query.stop()


def test_source_earliest_with_filter_and_columns(spark, uri, root, tmp_path) -> None:
    name = "replayed"
    with Client(uri) as qc:
        qc.write(name, rows(0, 12), mode="create")
        qc.write(name, rows(12, 12), mode="append")
        qc.delete(name, "id < 6")
        qc.write(name, rows(24, 6), mode="append")
    query = (
        spark.readStream.format("quiver")
        .option("uri", uri)
        .option("dataset", name)
        .option("starting_version", "earliest")
        .option("columns", "id,s,st")
        .option("filter", "id % 3 = 0")
        .load()
        .writeStream.format("memory")
        .queryName("replayed_out")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    got = spark.table("replayed_out").toArrow()
    assert got.schema.names == ["id", "s", "st"]
    everything = rows(0, 30)  # the deleted rows were appended too
    want = everything.filter(pa.array([i % 3 == 0 for i in everything["id"].to_pylist()]))
    same_rows(got, want.select(["id", "s", "st"]))

    # from version 2 on: the first append and what follows, nothing of the creation
    shutil.rmtree(tmp_path / "chk2", ignore_errors=True)
    query = (
        spark.readStream.format("quiver")
        .option("uri", uri)
        .option("dataset", name)
        .option("starting_version", "2")
        .load()
        .writeStream.format("memory")
        .queryName("replayed_from_2")
        .option("checkpointLocation", str(tmp_path / "chk2"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    same_rows(spark.table("replayed_from_2").toArrow(), rows(12, 18))


def test_source_max_fragments_per_trigger(spark, uri, root, tmp_path) -> None:
    """Read limit: at most N appended fragments per micro-batch, whole versions at a time."""
    name = "limited"
    path = str(root / f"{name}.lance")
    with Client(uri) as qc:
        qc.write(name, rows(0, 4), mode="create")  # v1: 1 fragment
        for start in (4, 8, 12):
            qc.write(name, rows(start, 4), mode="append")  # v2..v4: 1 fragment each
        lance.write_dataset(rows(16, 9), path, mode="append", max_rows_per_file=3)  # 3 frags
        qc.write(name, rows(25, 4), mode="append")
    seen: list[pa.Table] = []
    query = (
        spark.readStream.format("quiver")
        .option("uri", uri)
        .option("dataset", name)
        .option("starting_version", "earliest")
        .option("max_fragments_per_trigger", "2")
        .load()
        .writeStream.foreachBatch(lambda frame, _: seen.append(frame.toArrow()))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert [t.num_rows for t in seen if t.num_rows] == [8, 8, 9, 4]
    same_rows(everything(seen), rows(0, 29))


def test_source_option_errors(uri) -> None:
    schema = spark_schema(rows(0, 1).schema)
    from quiver.clients.spark.options import Conn

    conn = Conn.from_options({"uri": uri, "dataset": "x"})
    for bad in ("0", "-3", "soon", "1.5"):
        with pytest.raises(QuiverOptionError, match="'starting_version' option"):
            QuiverStreamReader(conn, {"starting_version": bad}, schema)
    with pytest.raises(QuiverOptionError, match="'max_fragments_per_trigger' option"):
        QuiverStreamReader(conn, {"max_fragments_per_trigger": "0"}, schema)
    with pytest.raises(QuiverOptionError, match="'version' option pins one version"):
        QuiverStreamReader(conn, {"version": "3"}, schema)
    reader = QuiverStreamReader(conn, {"starting_version": "EARLIEST"}, schema)
    assert reader.initialOffset() == {"version": 0}
    assert QuiverStreamReader(conn, {"starting_version": "5"}, schema).initialOffset() == {
        "version": 4
    }
