"""Spark benchmark: the same queries read through Quiver and through `spark.read.parquet`.

    .venv/bin/python -m benchmarks.spark [--rows 1000000] [--parts 8] [--repeat 3]
                                         [--storage-version 2.2] [--max-partitions N]

One run, one Spark session (`local[2]`): the benchmark table (benchmarks/data.py) is
written once as a Lance dataset (`--storage-version`, `--parts` fragments) and once as
Parquet (one file, `--parts` row groups) under benchmarks/.data/; `quiver serve` runs in its
own process on loopback. Each query runs `--repeat` times per source, in turns, after a
warm-up; the best time is kept and the ratio parquet_time / quiver_time printed (1.0: as
fast as Parquet).

Python data sources have no column pruning, so the Quiver reads ask for the columns each
query uses (`columns` option), as a user would. For reference, the same `count()` runs over
an in-memory Python data source with as many partitions (what any Python data source costs).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(root: Path, port: int, extra: list[str]) -> subprocess.Popen:
    args = ["serve", "--root", str(root), "--host", "127.0.0.1", "--port", str(port), *extra]
    proc = subprocess.Popen(
        [sys.executable, "-m", "flight_server", *args, "--log-level", "WARNING"], cwd=ROOT
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
    """The Spark session both sources share (the settings the README recommends)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Python workers import this module (FloorSource); `benchmarks` is not an installed package
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    from pyspark.sql import SparkSession

    from clients.spark import register

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
    return spark


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def _best_alternating(q: Callable[[], Any], p: Callable[[], Any], repeat: int) -> tuple:
    """Best times of `q` and `p`, run in turns so both see the same (shared) machine."""
    best_q = best_p = float("inf")
    got = want = None
    for _ in range(repeat):
        t, got = _timed(q)
        best_q = min(best_q, t)
        t, want = _timed(p)
        best_p = min(best_p, t)
    return best_q, got, best_p, want


def queries(
    spark: Any, uri: str, name: str, parquet: Path, max_partitions: int | None = None
) -> dict[str, tuple[Callable, ...]]:
    """Each case: (Quiver query, Parquet query), both returning comparable Python values."""
    from pyspark.sql import functions as F

    def quiver(columns: str | None) -> Any:
        r = spark.read.format("quiver").option("uri", uri).option("dataset", name)
        if max_partitions is not None:
            r = r.option("max_partitions", max_partitions)
        return (r.option("columns", columns) if columns else r).load()

    def parq() -> Any:
        return spark.read.parquet(str(parquet))

    def group(df: Any) -> list[tuple]:
        out = df.groupBy("category").agg(F.sum("value").alias("s"), F.count("*").alias("n"))
        return sorted((r.category, round(r.s, 6), r.n) for r in out.collect())

    def noop(df: Any) -> int:
        df.write.format("noop").mode("overwrite").save()  # reads every column, keeps nothing
        return 0

    return {
        "count()": (lambda: quiver("id").count(), lambda: parq().count()),
        "sum(value), count by category": (
            lambda: group(quiver("category,value")),
            lambda: group(parq()),
        ),
        "full scan, every column (noop write)": (lambda: noop(quiver(None)), lambda: noop(parq())),
    }


def main() -> None:
    """Run every query through both sources and print a table of seconds and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
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
    results = []
    with tempfile.TemporaryDirectory(dir=uri.parent) as tmp:
        (Path(tmp) / uri.name).symlink_to(uri)
        server = _serve(Path(tmp), port, extra)
        spark = session()
        try:
            cases = queries(spark, f"grpc://127.0.0.1:{port}", name, parquet, args.max_partitions)
            floor = spark.read.format("bench_floor").option("n", args.parts)
            floor = floor.option("rows", args.rows).load()
            floor.count()
            t_floor = min(_timed(floor.count)[0] for _ in range(args.repeat))
            for label, (q, p) in cases.items():
                q(), p()  # warm-up: JIT, Python workers, file caches
                t_q, got, t_p, want = _best_alternating(q, p, args.repeat)
                assert got == want, (label, got, want)
                results.append((label, t_q, t_p))
        finally:
            spark.stop()
            server.terminate()
            server.wait(timeout=60)
    size = sum(p.stat().st_size for p in uri.rglob("*") if p.is_file())
    print(
        f"{args.rows} rows ({size / 1e6:.0f} MB of Lance {args.storage_version} in "
        f"{args.parts} fragments, max_partitions {args.max_partitions or 'unset'}; "
        f"Parquet {parquet.stat().st_size / 1e6:.0f} MB in {args.parts} row groups), "
        f"Spark local[2], best of {args.repeat}"
    )
    print("| query | Quiver s | Parquet s | ratio parquet/quiver |")
    print("|---|---|---|---|")
    for label, t_q, t_p in results:
        print(f"| {label} | {t_q:.2f} | {t_p:.2f} | {t_p / t_q:.2f} |")
    floor_ratio = results[0][2] / t_floor
    print(
        f"\nPySpark's floor: count() over an in-memory Python data source with the same "
        f"{args.parts} partitions takes {t_floor:.2f} s (parquet/floor {floor_ratio:.2f})"
    )


if __name__ == "__main__":
    main()
