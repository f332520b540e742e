"""A Spark pipeline over Quiver: read two datasets, join and aggregate, write the result as a
new dataset, read it back.

    make spark-example                          # its own server on a temporary demo root
    make serve                                  # or: in one terminal, then in another
    make spark-example URI=grpc://127.0.0.1:8815

    .venv/bin/python clients/spark/examples/pipeline.py [--uri URI | --root DIR]

Revenue per item category and warehouse city, from the demo datasets `orders` (20,000 orders)
and `demo` (5,000 items): orders that shipped or were delivered are joined to their items;
the result is written as the dataset `revenue_by_category_city` (overwritten on each run).
Without `--uri` the example starts `quiver serve` on a free port over `--root` (default: a
temporary directory), creating the demo datasets there first.

The streaming variant (`--mode streaming`; both run by default) follows `orders` with
`readStream.format("quiver")`, joins each micro-batch to the items and appends it to
`orders_enriched` with `writeStream.format("quiver")`, exactly once per micro-batch; it runs
twice from one checkpoint with new orders appended in between (so run it against a scratch
root: it appends to `orders`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RESULT = "revenue_by_category_city"
REPO = Path(__file__).resolve().parents[3]


def session(app: str = "quiver-pipeline") -> Any:
    """A local Spark session set up for the `quiver` data source (see docs/spark.md)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers: this interpreter
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from quiver.clients.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.sql.python.filterPushdown.enabled", "true")  # with option pushdown
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def run(spark: Any, uri: str) -> Any:
    """The batch pipeline; returns the result as read back through Quiver."""
    from pyspark.sql import functions as F

    def quiver(dataset: str) -> Any:
        return spark.read.format("quiver").option("uri", uri).option("dataset", dataset)

    # Spark has no column pruning for Python data sources: ask for the columns we use
    items = quiver("demo").option("columns", "id,category,price,warehouse").load()
    # pushdown: the server applies `status IN (...)` (safe: this DataFrame serves one query)
    orders = quiver("orders").option("pushdown", "true").load()
    orders = orders.filter(F.col("status").isin("shipped", "delivered"))

    revenue = (
        orders.join(items, orders.item_id == items.id)  # inner: unknown items drop out
        .withColumn("cents", F.round(F.col("price") * 100).cast("bigint") * F.col("quantity"))
        .groupBy("category", F.col("warehouse.city").alias("city"))
        .agg(
            F.count("*").alias("orders"),
            F.countDistinct("customer").alias("customers"),
            F.sum("quantity").alias("units"),
            F.sum("cents").alias("revenue_cents"),
            F.max("ordered_at").alias("last_order"),
        )
    )
    # one job, one new version of the dataset; every task stages, the driver commits once
    revenue.write.format("quiver").option("uri", uri).option("dataset", RESULT).mode(
        "overwrite"
    ).save()
    return quiver(RESULT).load()


STREAM_RESULT = "orders_enriched"
NEW_ORDERS = 1000


def run_streaming(spark: Any, uri: str, checkpoint: str) -> Any:
    """The streaming variant: follow `orders` as it grows, enrich each new order with its
    item's category and city, and append it to `orders_enriched` exactly once. Runs the
    query twice from the same checkpoint (Trigger.AvailableNow), with new orders appended in
    between: the second run reads only those. Returns the result as read back."""
    from pyspark.sql import functions as F

    from quiver.clients import Client
    from quiver.clients.errors import NotFound

    with Client(uri) as qc:  # a fresh result and checkpoint each run
        with contextlib.suppress(NotFound):
            qc.action("drop_dataset", {"dataset": STREAM_RESULT})
    items = (
        spark.read.format("quiver")
        .option("uri", uri)
        .option("dataset", "demo")
        .option("columns", "id,category,warehouse")
        .load()
        .select(F.col("id").alias("item_id"), "category", F.col("warehouse.city").alias("city"))
    )
    orders = (
        spark.readStream.format("quiver")
        .option("uri", uri)
        .option("dataset", "orders")
        .option("columns", "order_id,item_id,customer,quantity,ordered_at")
        .option("starting_version", "earliest")  # every order ever appended, then new ones
        .load()
    )
    enriched = orders.join(items, "item_id")  # a stream-static join

    def catch_up() -> None:
        query = (
            enriched.writeStream.format("quiver")
            .option("uri", uri)
            .option("dataset", STREAM_RESULT)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    catch_up()
    with Client(uri) as qc:  # new orders arrive while the pipeline is down
        qc.write("orders", new_orders(first_id=qc.describe("orders")["rows"]), mode="append")
    catch_up()  # restarts from the checkpoint: only the new orders, each exactly once
    return spark.read.format("quiver").option("uri", uri).option("dataset", STREAM_RESULT).load()


def new_orders(first_id: int) -> Any:
    """`NEW_ORDERS` more orders, numbered from `first_id`."""
    import pyarrow.compute as pc

    from quiver.flight_server.demo import orders_table

    more = orders_table(NEW_ORDERS, seed=first_id)
    ids = pc.add(more["order_id"], first_id)
    return more.set_column(more.schema.get_field_index("order_id"), "order_id", ids)


def report(result: Any) -> None:
    """Print the result, biggest revenue first."""
    from pyspark.sql import functions as F

    rows = result.count()
    print(f"{RESULT}: {rows} rows")
    result.orderBy(F.desc("revenue_cents"), "category", "city").show(10, truncate=False)


@contextlib.contextmanager
def temporary_server(root: Path) -> Iterator[str]:
    """`quiver serve` on a free loopback port over `root`, with the demo datasets in it."""
    quiver = [sys.executable, "-m", "quiver.flight_server"]
    subprocess.run([*quiver, "demo", "--root", str(root)], check=True, cwd=REPO)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # --exit-with-parent: killed, the example takes its server with it
    args = ["serve", "--root", str(root), "--host", "127.0.0.1", "--port", str(port)]
    args.append("--exit-with-parent")
    args += ["--log-level", "WARNING"]
    server = subprocess.Popen([*quiver, *args], cwd=REPO)
    uri = f"grpc://127.0.0.1:{port}"
    try:
        _wait_healthy(uri, server)
        yield uri
    finally:
        server.terminate()
        server.wait(timeout=60)


def _wait_healthy(uri: str, server: subprocess.Popen, timeout: float = 60.0) -> None:
    from quiver.clients import Client

    deadline = time.monotonic() + timeout
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"quiver serve exited with code {server.returncode}")
        try:
            with Client(uri, timeout=2) as qc:
                qc.healthcheck()
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> None:
    """Run the pipeline against `--uri`, or against a server of its own."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--uri", help="a running Quiver server with the demo datasets")
    where.add_argument("--root", help="serve this root (demo datasets created if it has none)")
    parser.add_argument(
        "--mode", choices=("batch", "streaming", "both"), default="both", help="default both"
    )
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        uri = args.uri
        if uri is None:
            root = args.root or stack.enter_context(tempfile.TemporaryDirectory())
            uri = stack.enter_context(temporary_server(Path(root)))
        spark = session()
        stack.callback(spark.stop)
        print(f"pipeline against {uri}")
        if args.mode in ("batch", "both"):
            report(run(spark, uri))
        if args.mode in ("streaming", "both"):
            checkpoint = stack.enter_context(tempfile.TemporaryDirectory())
            result = run_streaming(spark, uri, checkpoint)
            print(f"{STREAM_RESULT}: {result.count()} rows")


if __name__ == "__main__":
    main()
