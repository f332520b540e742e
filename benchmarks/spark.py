"""Spark benchmark: the same queries through Quiver, through the ceiling of any Python data
source, and through `spark.read.parquet`.

    .venv/bin/python -m benchmarks.spark [--rows 4000000] [--parts 8] [--rounds 5]
                                         [--storage-version 2.2] [--max-partitions N]

One run, one Spark session (`local[2]`): the benchmark table (benchmarks/data.py) is
written once as a Lance dataset (`--storage-version`, `--parts` fragments) and once as
Parquet (one file, `--parts` row groups) under benchmarks/.data/; `quiver serve` runs in its
own process on loopback. The three sources:

- Quiver: `spark.read.format("quiver")` with its defaults;
- the ceiling: `bench_ceiling`, a PySpark Python data source whose `read()` reads the same
  Parquet file with pyarrow, one partition per row group (= per Lance fragment): what a
  Python data source costs when the data is at hand, decoded by C++;
- Parquet: Spark's own reader (JVM, vectorized, no Python worker).

Each query runs once per source per round, the order rotating between rounds, after a
warm-up; ratios are speeds (the other's time / this one's: 1.0 is as fast) taken within each
round, then the median over the rounds, so a busy moment of the shared machine skews one
round rather than one source. Python data sources have no column pruning, so the Quiver and
ceiling reads ask for the columns each query uses (`columns` option), as a user would.
PySpark's per-task floor is `count()` over an in-memory Python data source with as many
partitions.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from benchmarks.data import batches, schema_

HERE = Path(__file__).resolve().parent
CEILING_BATCH_ROWS = 65_536  # pyarrow's default batch size for iter_batches
ROOT = HERE.parent


def ensure_data(rows: int, parts: int, storage_version: str) -> tuple[Path, Path]:
    """The Lance dataset and the Parquet file of the same rows, written once and reused."""
    base = HERE / ".data"
    base.mkdir(exist_ok=True)
    per_part = -(-rows // parts)
    uri = base / f"spark-{rows}-{parts}-{storage_version.replace('.', '_')}.lance"
    parquet = base / f"spark-{rows}-{parts}.parquet"
    if not uri.exists():
        reader = pa.RecordBatchReader.from_batches(schema_(), batches(rows, per_part))
        lance.write_dataset(
            reader, str(uri), data_storage_version=storage_version, max_rows_per_file=per_part
        )
    if not parquet.exists():
        with pq.ParquetWriter(str(parquet), schema_()) as writer:
            for batch in batches(rows, per_part):
                writer.write_batch(batch, row_group_size=per_part)
    return uri, parquet


class FloorSource(DataSource):
    """`bench_floor`: `n` partitions of int64 ids made in memory, the cheapest Python source."""

    @classmethod
    def name(cls) -> str:
        return "bench_floor"

    def schema(self) -> str:
        return "id bigint"

    def reader(self, schema: Any) -> DataSourceReader:
        return _FloorReader(int(self.options["n"]), int(self.options["rows"]))


class _FloorReader(DataSourceReader):
    def __init__(self, n: int, rows: int) -> None:
        self.n, self.rows = n, rows

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.n)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        import numpy as np

        per = -(-self.rows // self.n)
        start, stop = partition.value * per, min(self.rows, (partition.value + 1) * per)
        for lo in range(start, stop, 8192):
            ids = np.arange(lo, min(stop, lo + 8192), dtype=np.int64)
            yield pa.record_batch([pa.array(ids)], names=["id"])


class CeilingSource(DataSource):
    """`bench_ceiling`: the Parquet file read by pyarrow inside `read()`, one partition per
    row group: the fastest a PySpark Python data source can be on this data (no network, no
    server, the file already decoded by C++), so the ceiling for Quiver. Options `path` and
    `columns` (comma-separated, as Quiver's)."""

    @classmethod
    def name(cls) -> str:
        return "bench_ceiling"

    def schema(self) -> Any:
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(_ceiling_schema(self.options))

    def reader(self, schema: Any) -> DataSourceReader:
        return _CeilingReader(self.options["path"], schema)


def _ceiling_schema(options: Any) -> pa.Schema:
    schema = pq.read_schema(options["path"])
    columns = options.get("columns")
    if columns:
        schema = pa.schema([schema.field(c) for c in columns.split(",")])
    return schema


class _CeilingReader(DataSourceReader):
    def __init__(self, path: str, schema: Any) -> None:
        self.path, self.schema = path, schema

    def partitions(self) -> list[InputPartition]:
        groups = pq.ParquetFile(self.path).metadata.num_row_groups
        return [InputPartition(i) for i in range(groups)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.pandas.types import to_arrow_schema

        target = to_arrow_schema(self.schema, timezone="UTC")
        parquet = pq.ParquetFile(self.path)
        for batch in parquet.iter_batches(
            batch_size=CEILING_BATCH_ROWS, row_groups=[partition.value], columns=target.names
        ):
            yield batch.cast(target)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(root: Path, port: int, extra: list[str]) -> subprocess.Popen:
    args = ["serve", "--root", str(root), "--host", "127.0.0.1", "--port", str(port), *extra]
    args.append("--exit-with-parent")  # an interrupted benchmark leaves no server behind
    proc = subprocess.Popen(
        [sys.executable, "-m", "quiver.flight_server", *args, "--log-level", "WARNING"], cwd=ROOT
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.2)
    proc.terminate()
    raise TimeoutError(f"quiver serve did not listen on port {port}")


def session() -> Any:
    """The Spark session both sources share (the settings docs/spark.md recommends)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Python workers import this module (FloorSource); `benchmarks` is not an installed package
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    from pyspark.sql import SparkSession

    from quiver.clients.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("quiver-bench")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "3g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(FloorSource)
    spark.dataSource.register(CeilingSource)
    return spark


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


SOURCES = ("quiver", "ceiling", "parquet")


def queries(
    spark: Any, uri: str, name: str, parquet: Path, max_partitions: int | None = None
) -> dict[str, dict[str, Callable[[], Any]]]:
    """Each case: one query per source, each returning comparable Python values."""
    from pyspark.sql import functions as F

    def quiver(columns: str | None) -> Any:
        r = spark.read.format("quiver").option("uri", uri).option("dataset", name)
        if max_partitions is not None:
            r = r.option("max_partitions", max_partitions)
        return (r.option("columns", columns) if columns else r).load()

    def ceiling(columns: str | None) -> Any:
        r = spark.read.format("bench_ceiling").option("path", str(parquet))
        return (r.option("columns", columns) if columns else r).load()

    def parq(columns: str | None) -> Any:
        return spark.read.parquet(str(parquet))

    def group(df: Any) -> list[tuple]:
        out = df.groupBy("category").agg(F.sum("value").alias("s"), F.count("*").alias("n"))
        return sorted((r.category, round(r.s, 6), r.n) for r in out.collect())

    def noop(df: Any) -> int:
        df.write.format("noop").mode("overwrite").save()  # reads every column, keeps nothing
        return 0

    sources = {"quiver": quiver, "ceiling": ceiling, "parquet": parq}

    def case(run: Callable[[Any], Any], columns: str | None) -> dict[str, Callable[[], Any]]:
        return {k: (lambda src=src: run(src(columns))) for k, src in sources.items()}

    return {
        "count()": case(lambda df: df.count(), "id"),
        "sum(value), count by category": case(group, "category,value"),
        "full scan, every column (noop write)": case(noop, None),
    }


def run_rounds(
    cases: dict[str, dict[str, Callable[[], Any]]], rounds: int
) -> dict[str, dict[str, list[float]]]:
    """Seconds per case and source, `rounds` times: each round runs every source once per
    case, in an order that rotates from round to round, so the sources see the same load."""
    times: dict[str, dict[str, list[float]]] = {c: {s: [] for s in SOURCES} for c in cases}
    for label, runs in cases.items():
        answers = {s: runs[s]() for s in SOURCES}  # warm-up: JIT, Python workers, caches
        assert answers["quiver"] == answers["parquet"] == answers["ceiling"], (label, answers)
    for r in range(rounds):
        for label, runs in cases.items():
            order = SOURCES[r % 3 :] + SOURCES[: r % 3]
            for source in order:
                times[label][source].append(_timed(runs[source])[0])
    return times


def _median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    """Run every query through the three sources and print seconds and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--storage-version", default="2.2")
    parser.add_argument(
        "--max-partitions", type=int, help="the Spark option: pack endpoints into N tasks"
    )
    parser.add_argument(
        "--server-batch-size", type=int, help="rows per streamed batch (quiver serve --batch-size)"
    )
    args = parser.parse_args()
    extra = [] if args.server_batch_size is None else ["--batch-size", str(args.server_batch_size)]
    uri, parquet = ensure_data(args.rows, args.parts, args.storage_version)
    name = uri.name[: -len(".lance")]
    port = _free_port()
    # the server's root is the data directory itself (it serves no link leading out of it)
    server = _serve(uri.parent, port, extra)
    try:
        spark = session()
        try:
            cases = queries(spark, f"grpc://127.0.0.1:{port}", name, parquet, args.max_partitions)
            floor = spark.read.format("bench_floor").option("n", args.parts)
            floor = floor.option("rows", args.rows).load()
            floor.count()
            times = run_rounds(cases, args.rounds)
            t_floor = _median([_timed(floor.count)[0] for _ in range(args.rounds)])
        finally:
            spark.stop()
    finally:
        server.terminate()
        server.wait(timeout=60)
    size = sum(p.stat().st_size for p in uri.rglob("*") if p.is_file())
    print(
        f"{args.rows:,} rows ({size / 1e6:.0f} MB of Lance {args.storage_version} in "
        f"{args.parts} fragments, max_partitions {args.max_partitions or 'unset'}; "
        f"Parquet {parquet.stat().st_size / 1e6:.0f} MB in {args.parts} row groups), "
        f"Spark local[2], medians of {args.rounds} interleaved rounds"
    )
    print(
        "| query | Quiver s | ceiling s | Parquet s | Quiver / ceiling | Quiver / Parquet "
        "| ceiling / Parquet |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, t in times.items():
        q, c, p = t["quiver"], t["ceiling"], t["parquet"]
        pairs = ((q, c), (q, p), (c, p))
        speed = [_median([b / a for a, b in zip(x, y, strict=True)]) for x, y in pairs]
        print(
            f"| {label} | {_median(q):.2f} | {_median(c):.2f} | {_median(p):.2f} | "
            + " | ".join(f"{v:.2f}" for v in speed)
            + " |"
        )
    print(
        f"\nPySpark's per-task floor: count() over an in-memory Python data source with the "
        f"same {args.parts} partitions takes {t_floor:.2f} s; Quiver's count() "
        f"{_median(times['count()']['quiver']):.2f} s"
    )


if __name__ == "__main__":
    main()
