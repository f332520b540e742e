"""The Spark pipeline example (clients/spark/examples/pipeline.py, `make spark-example`) end
to end, as the compose file's Spark job (deploy/compose/spark_job.py) runs it: against a
server that requires a login, with the compose file's own auth file, ticket key and the job's
password file. The datasets it writes equal the same join and aggregation done by pyarrow
over pylance's reads of the demo datasets. The example's own server (`--root`) is checked
without Spark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "clients" / "spark" / "examples"
DEPLOY = REPO / "deploy"


def expected(root: Path) -> pa.Table:
    """Revenue per (category, city) of shipped or delivered orders, computed by pyarrow."""
    demo = lance.dataset(str(root / "demo.lance")).to_table()
    items = pa.table(
        {
            "id": demo["id"],
            "category": demo["category"],
            "price": demo["price"],
            "city": pc.struct_field(demo["warehouse"], "city"),
        }
    )
    # the demo's orders: version 1 (the streaming variant appends more afterwards)
    orders = lance.dataset(str(root / "orders.lance"), version=1).to_table(
        filter="status IN ('shipped', 'delivered')"
    )
    joined = orders.join(items, keys="item_id", right_keys="id", join_type="inner")
    cents = pc.multiply(
        pc.cast(pc.round(pc.multiply(joined["price"], 100)), pa.int64()),
        pc.cast(joined["quantity"], pa.int64()),
    )
    joined = joined.append_column("cents", cents)
    grouped = joined.group_by(["category", "city"]).aggregate(
        [
            ("order_id", "count"),
            ("customer", "count_distinct"),
            ("quantity", "sum"),
            ("cents", "sum"),
            ("ordered_at", "max"),
        ]
    )
    return pa.table(
        {
            "category": grouped["category"],
            "city": grouped["city"],
            "orders": grouped["order_id_count"],
            "customers": grouped["customer_count_distinct"],
            "units": pc.cast(grouped["quantity_sum"], pa.int64()),
            "revenue_cents": grouped["cents_sum"],
            "last_order": grouped["ordered_at_max"],
        }
    )


def test_the_example_serves_its_own_demo_root(tmp_path: Path) -> None:
    """`--root` without `--uri`: the example's server, with the demo datasets created."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import pipeline
    finally:
        sys.path.remove(str(EXAMPLES))
    from quiver.clients import Client

    with pipeline.temporary_server(tmp_path) as uri, Client(uri) as q:
        assert {"demo", "orders"} <= set(q.datasets())
        assert q.read("orders").num_rows == 20_000
    assert lance.dataset(str(tmp_path / "demo.lance")).count_rows() == 5_000


def test_the_compose_job_logs_in_seeds_and_runs_the_pipeline(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "tests" / "flight"))
    from server_process import quiver_serve

    from quiver.clients import Client
    from quiver.clients.errors import Unauthenticated

    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    secrets = {name: str(DEPLOY / s["file"]) for name, s in compose["secrets"].items()}
    job_env = compose["services"]["spark-job"]["environment"]
    args = ("--auth-file", secrets["auth_file"], "--ticket-key-file", secrets["ticket_key"])
    root = tmp_path / "root"
    root.mkdir()
    with quiver_serve(root, *args) as (uri, _pid):
        with Client(uri) as anonymous, pytest.raises(Unauthenticated):
            anonymous.datasets()
        env = {
            **os.environ,
            "QUIVER_URI": uri,
            "QUIVER_USER": job_env["QUIVER_USER"],
            "QUIVER_PASSWORD_FILE": secrets["pipeline_password"],
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        proc = subprocess.run(
            [sys.executable, str(DEPLOY / "compose" / "spark_job.py")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=360,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        user = {"username": job_env["QUIVER_USER"]}
        with open(secrets["pipeline_password"]) as f:
            user["password"] = f.read().strip()
        with Client(uri, **user) as q:
            names = set(q.datasets())
            assert {"demo", "orders", "revenue_by_category_city", "orders_enriched"} <= names
            served = q.read("revenue_by_category_city")

    want = expected(root).sort_by([("category", "ascending"), ("city", "ascending")])
    assert f"revenue_by_category_city: {want.num_rows} rows" in proc.stdout
    assert "|category|city" in proc.stdout  # the table read back is printed

    ds = lance.dataset(str(root / "revenue_by_category_city.lance"))
    assert ds.version == 1  # one job, one commit
    got = ds.to_table().sort_by([("category", "ascending"), ("city", "ascending")])
    assert got.column_names == want.column_names
    assert got.equals(want.cast(got.schema))
    assert got.num_rows == 40  # 5 categories x 8 cities
    assert served.sort_by([("category", "ascending"), ("city", "ascending")]).equals(got)

    # the streaming variant: every order (the demo's, then 1,000 appended between the two
    # runs from one checkpoint) enriched exactly once
    orders = lance.dataset(str(root / "orders.lance")).to_table(
        columns=["order_id", "item_id", "customer", "quantity", "ordered_at"]
    )
    assert orders.num_rows == 21_000
    demo = lance.dataset(str(root / "demo.lance")).to_table()
    items = pa.table(
        {
            "item_id": demo["id"],
            "category": demo["category"],
            "city": pc.struct_field(demo["warehouse"], "city"),
        }
    )
    want_stream = orders.join(items, keys="item_id", join_type="inner").sort_by("order_id")
    enriched = lance.dataset(str(root / "orders_enriched.lance"))
    got_stream = enriched.to_table().sort_by("order_id")
    assert f"orders_enriched: {want_stream.num_rows} rows" in proc.stdout
    assert got_stream.select(want_stream.column_names).equals(
        want_stream.cast(got_stream.select(want_stream.column_names).schema)
    )
    assert pc.count_distinct(got_stream["order_id"]).as_py() == got_stream.num_rows
