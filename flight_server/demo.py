"""A small demo dataset for `make serve`: 5,000 rows of varied types in 5 fragments."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa

from flight_server.names import dataset_uri, discover, normalize_root
from format.dataset import write_dataset

DEMO_NAME = "demo"
DEMO_ROWS = 5000
DEMO_ROWS_PER_FRAGMENT = 1000


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


def ensure_demo(root: str) -> str | None:
    """Create the `demo` dataset if the root holds no dataset; returns its name if created."""
    root = normalize_root(root)
    if discover(root):
        return None
    write_dataset(
        demo_table(),
        dataset_uri(root, DEMO_NAME),
        mode="create",
        max_rows_per_file=DEMO_ROWS_PER_FRAGMENT,
    )
    return DEMO_NAME
