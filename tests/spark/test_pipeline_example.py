"""`make spark-example` end to end: the pipeline script starts its own server over a fresh root,
and the dataset it writes equals the same join and aggregation done by pyarrow over pylance's
reads of the demo datasets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "clients" / "spark" / "examples" / "pipeline.py"


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


def test_pipeline_example_runs_end_to_end(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = expected(tmp_path).sort_by([("category", "ascending"), ("city", "ascending")])
    assert f"revenue_by_category_city: {want.num_rows} rows" in proc.stdout
    assert "|category|city" in proc.stdout  # the table read back is printed

    ds = lance.dataset(str(tmp_path / "revenue_by_category_city.lance"))
    assert ds.version == 1  # one job, one commit
    got = ds.to_table().sort_by([("category", "ascending"), ("city", "ascending")])
    assert got.column_names == want.column_names
    assert got.equals(want.cast(got.schema))
    assert got.num_rows == 40  # 5 categories x 8 cities

    # the streaming variant: every order (the demo's, then 1,000 appended between the two
    # runs from one checkpoint) enriched exactly once
    orders = lance.dataset(str(tmp_path / "orders.lance")).to_table(
        columns=["order_id", "item_id", "customer", "quantity", "ordered_at"]
    )
    assert orders.num_rows == 21_000
    demo = lance.dataset(str(tmp_path / "demo.lance")).to_table()
    items = pa.table(
        {
            "item_id": demo["id"],
            "category": demo["category"],
            "city": pc.struct_field(demo["warehouse"], "city"),
        }
    )
    want_stream = orders.join(items, keys="item_id", join_type="inner").sort_by("order_id")
    enriched = lance.dataset(str(tmp_path / "orders_enriched.lance"))
    got_stream = enriched.to_table().sort_by("order_id")
    assert f"orders_enriched: {want_stream.num_rows} rows" in proc.stdout
    assert got_stream.select(want_stream.column_names).equals(
        want_stream.cast(got_stream.select(want_stream.column_names).schema)
    )
    assert pc.count_distinct(got_stream["order_id"]).as_py() == got_stream.num_rows
