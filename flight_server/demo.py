"""Small demo datasets for `make serve`: `demo` (5,000 items of varied types in 5 fragments)
and `orders` (20,000 orders of those items in 4 fragments), enough for a join."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pyarrow as pa

from quiver.flight_server.names import dataset_uri, discover, normalize_root
from quiver.format.dataset import write_dataset

DEMO_NAME = "demo"
DEMO_ROWS = 5000
DEMO_ROWS_PER_FRAGMENT = 1000
ORDERS_NAME = "orders"
ORDERS_ROWS = 20_000
ORDERS_ROWS_PER_FRAGMENT = 5000


def demo_table(rows: int = DEMO_ROWS, seed: int = 4) -> pa.Table:
    """Deterministic rows: ints, floats, strings with nulls, bools, dates, timestamps,
    lists, a struct and a fixed-size vector."""
    rng = np.random.default_rng(seed)
    ids = np.arange(rows, dtype=np.int64)
    cities = ["Lisbon", "Osaka", "Quito", "Tromsø", "Nairobi", "Perth", "Lyon", "Austin"]
    categories = ["tools", "garden", "books", "toys", "food"]
    start = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    seconds = rng.integers(0, 365 * 24 * 3600, rows)
    note_null = rng.random(rows) < 0.2
    return pa.table(
        {
            "id": pa.array(ids),
            "name": pa.array([f"item-{i:05d}" for i in ids]),
            "category": pa.array([categories[i] for i in rng.integers(0, 5, rows)]),
            "price": pa.array(np.round(rng.gamma(2.0, 20.0, rows), 2)),
            "quantity": pa.array(rng.integers(0, 500, rows).astype(np.int32)),
            "in_stock": pa.array(rng.random(rows) < 0.8),
            "added": pa.array(
                [start + dt.timedelta(seconds=int(s)) for s in seconds],
                type=pa.timestamp("us", tz="UTC"),
            ),
            "ship_date": pa.array(
                [(start + dt.timedelta(days=int(s) // 86400 + 2)).date() for s in seconds],
                type=pa.date32(),
            ),
            "note": pa.array(
                [
                    None if null else f"note {i % 97}"
                    for i, null in zip(ids, note_null, strict=True)
                ],
                type=pa.string(),
            ),
            "tags": pa.array(
                [
                    [categories[(i + k) % 5] for k in range(int(n))]
                    for i, n in zip(ids, rng.integers(0, 4, rows), strict=True)
                ],
                type=pa.list_(pa.string()),
            ),
            "warehouse": pa.array(
                [
                    {"city": cities[int(c)], "aisle": int(a)}
                    for c, a in zip(
                        rng.integers(0, 8, rows), rng.integers(1, 40, rows), strict=True
                    )
                ],
                type=pa.struct([("city", pa.string()), ("aisle", pa.int16())]),
            ),
            "embedding": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(rows * 8).astype(np.float32)), 8
            ),
        }
    )


def orders_table(rows: int = ORDERS_ROWS, items: int = DEMO_ROWS, seed: int = 5) -> pa.Table:
    """Deterministic orders of `demo` items (`item_id` → `demo.id`; a few ids match no item):
    customers, unicode countries, statuses, quantities, nullable coupons, timestamps."""
    rng = np.random.default_rng(seed)
    countries = np.array(["Portugal", "日本", "Ecuador", "Norge", "Kenya", "Australia", "France"])
    statuses = np.array(["placed", "shipped", "delivered", "returned"])
    customer = rng.integers(0, 800, rows)
    coupons = np.array(["", "SPRING10", "VIP-20 ✓"])
    coupon = rng.integers(0, 3, rows)
    start = np.datetime64("2025-01-01T00:00:00", "us")
    return pa.table(
        {
            "order_id": pa.array(np.arange(rows, dtype=np.int64)),
            "item_id": pa.array(rng.integers(0, items + 20, rows, dtype=np.int64)),
            "customer": pa.array(np.char.add("cust-", np.char.zfill(customer.astype(str), 4))),
            "country": pa.array(countries[customer % len(countries)]),
            "status": pa.array(statuses[rng.choice(4, rows, p=[0.1, 0.3, 0.5, 0.1])]),
            "quantity": pa.array(rng.integers(1, 11, rows).astype(np.int32)),
            "coupon": pa.array(coupons[coupon], mask=rng.random(rows) < 0.7),
            "ordered_at": pa.array(
                start + rng.integers(0, 365 * 24 * 3600 * 10**6, rows).astype("timedelta64[us]")
            ).cast(pa.timestamp("us", tz="UTC")),
        }
    )


_DEMOS = {
    DEMO_NAME: (demo_table, DEMO_ROWS_PER_FRAGMENT),
    ORDERS_NAME: (orders_table, ORDERS_ROWS_PER_FRAGMENT),
}


def ensure_demo(root: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """Create the demo datasets missing from a root that holds no other dataset (an older
    demo root gains `orders`); returns the names created. `storage_options` reach the store
    as they do when serving (an S3 endpoint, credentials)."""
    root = normalize_root(root)
    present = {found.name for found in discover(root, storage_options)}
    if present - set(_DEMOS):
        return []  # the user's own data: leave it alone
    created = []
    for name, (make, per_fragment) in _DEMOS.items():
        if name not in present:
            write_dataset(
                make(),
                dataset_uri(root, name),
                mode="create",
                max_rows_per_file=per_fragment,
                storage_options=storage_options,
            )
            created.append(name)
    return created
