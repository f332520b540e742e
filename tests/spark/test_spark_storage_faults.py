"""Spark jobs end to end against a server whose storage fails: moto's S3 behind the
fault-injecting proxy (`s3_faults`: throttling, 500s, resets mid-body, answers lost after a
PUT took effect) on about one request in ten, while a real Spark session appends, upserts
and reads through the data source.

A job may fail when its retries run out; what it may never do is land twice, land in part,
or make a read return rows of no version. After the faults stop, every version opens in
pylance, each id is there once, every job that succeeded is there whole, every job that
failed is there whole or not at all, and Spark reads what pylance reads.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

import lance  # noqa: E402
from moto_atomic import lance_options, moto_s3, s3fs_options  # noqa: E402
from s3_faults import FaultProxy, Rule, fault_proxy  # noqa: E402

from quiver.clients import Client  # noqa: E402
from quiver.flight_server.config import ServerConfig  # noqa: E402
from quiver.flight_server.server import build_server  # noqa: E402

pytestmark = pytest.mark.spark
JOB_ROWS = 240


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    with moto_s3("sparkfaults") as endpoint:
        yield endpoint


@pytest.fixture
def proxy(moto: str) -> Iterator[FaultProxy]:
    with fault_proxy(moto, seed=7) as p:
        yield p


def _rows(ids: range, value: float) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "value": pa.array([value] * len(ids), pa.float64()),
        }
    )


def _df(spark: Any, table: pa.Table) -> Any:
    return spark.createDataFrame(table.to_pylist(), "id long, value double").repartition(2)


def test_spark_jobs_under_storage_faults_land_once_or_not_at_all(
    spark: Any, proxy: FaultProxy, moto: str
) -> None:
    root = f"s3://sparkfaults/root-{uuid.uuid4().hex[:8]}"
    server = build_server(
        ServerConfig(
            root=root,
            port=0,
            storage_options=s3fs_options(proxy.endpoint),
            ticket_key=b"spark-fault-tests-ticket-key-0123",
        )
    )
    uri = server.locations[0]
    conn = {"uri": uri, "dataset": "t"}
    try:
        Client(uri).write("t", _rows(range(3), 0.0), mode="create")
        proxy.set_rules(
            Rule("slowdown", probability=0.04),
            Rule("error500", probability=0.03),
            Rule("reset", method="GET", probability=0.02),
            Rule("lost", method="PUT", probability=0.03),
        )
        # job -> (its ids, the value it writes, whether Spark reported success)
        jobs: dict[str, tuple[range, float, bool]] = {}
        counts: list[int] = []
        for j in range(3):
            ids = range(1000 * (j + 1), 1000 * (j + 1) + JOB_ROWS)
            jobs[f"append{j}"] = (ids, float(j + 1), _run(spark, _rows(ids, j + 1.0), conn))
            if j == 1:  # an upsert over half of an earlier job's rows and new ones
                upserted = range(1000 * j + JOB_ROWS // 2, 1000 * j + JOB_ROWS + 60)
                table = _rows(upserted, -(j + 1.0))
                jobs[f"upsert{j}"] = (upserted, -(j + 1.0), _run(spark, table, conn, upsert=True))
            try:
                counts.append(spark.read.format("quiver").options(**conn).load().count())
            except Exception:  # noqa: BLE001 - a read may fail under faults; never be wrong
                pass
        injected = sum(proxy.injected.values())
        proxy.set_rules()
        assert injected > 0

        ref = f"{root}/t.lance"
        ds = lance.dataset(ref, storage_options=lance_options(moto))
        versions = [v["version"] for v in ds.versions()]
        every_count = {
            lance.dataset(ref, version=v, storage_options=lance_options(moto)).count_rows()
            for v in versions
        }
        # a read under faults returned the rows of some version, or failed
        assert set(counts) <= every_count, (counts, every_count)
        final = ds.to_table().sort_by("id")
        value = dict(zip(final["id"].to_pylist(), final["value"].to_pylist(), strict=True))
        assert max(Counter(final.column("id").to_pylist()).values()) == 1
        assert {0, 1, 2} <= set(value)
        for name, (ids, _, succeeded) in jobs.items():
            present = [i for i in ids if i in value]
            if name.startswith("append"):
                # whole or not at all; the rows of a later upsert may have replaced values
                assert len(present) in (0, len(ids)), name
                assert not succeeded or len(present) == len(ids), name
        for name, (ids, written, succeeded) in jobs.items():
            if name.startswith("upsert"):
                landed = [value.get(i) == written for i in ids]
                # an upsert is one commit: every row of it, or none (nor its new ids)
                assert all(landed) or not any(landed), name
                assert not succeeded or all(landed), name
                if not any(landed):
                    assert not any(i in value for i in ids if i % 1000 >= JOB_ROWS), name
        # Spark reads what pylance reads
        got = spark.read.format("quiver").options(**conn).load().toArrow().sort_by("id")
        assert got.select(["id", "value"]).to_pylist() == final.to_pylist()
        assert any(ok for _, _, ok in jobs.values())
    finally:
        proxy.set_rules()
        server.shutdown()


def _run(spark: Any, table: pa.Table, conn: dict[str, str], *, upsert: bool = False) -> bool:
    """Run one write job; whether Spark reported it done."""
    writer = _df(spark, table).write.format("quiver").options(**conn).mode("append")
    if upsert:
        writer = writer.option("operation", "upsert").option("on", "id")
    try:
        writer.save()
    except Exception:  # noqa: BLE001 - a job may fail under faults; checked at the end
        return False
    return True
