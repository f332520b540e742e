"""Row changes from PySpark. Spark runs no SQL MERGE, UPDATE or DELETE against a Python
data source, so they are offered as Hudi and pyiceberg offer them: a write option and a
few helpers.

```python
from quiver.clients.spark import changes

conn = {"uri": "grpc://host:8815", "dataset": "sales"}
updates.write.format("quiver").options(**conn).option("operation", "upsert") \\
    .option("on", "id").mode("append").save()
changes.merge(updates, on="id", when_matched="update_all", when_not_matched=None, **conn)
changes.update({"price": "price * 1.1"}, where="region = 'eu'", **conn)
changes.delete("expired", **conn)
features = spark.read.format("quiver").options(**conn).option("columns", "_rowaddr,x").load()
changes.add_columns(features.select("_rowaddr", (features.x * 2).alias("x2")), **conn)
```

Writes with an `operation` stage each task's rows on the server; the job's commit applies
all of them as one change (one version), so retried and speculative tasks never apply a
row twice and a failed job leaves no file. `update` and `delete` run on the server from the
driver (no data moves).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from quiver.clients.spark.options import Conn

__all__ = ["add_columns", "delete", "merge", "update", "update_columns"]


def _write(df: Any, operation: str, options: Mapping[str, Any]) -> None:
    writer = df.write.format("quiver").mode("append").option("operation", operation)
    for key, value in options.items():
        if value is not None:
            writer = writer.option(key, value)
    writer.save()


def merge(
    df: Any,
    *,
    on: str | Sequence[str] | None = None,
    when_matched: str = "update_all",
    matched_condition: str | None = None,
    when_not_matched: str | None = "insert_all",
    when_not_matched_by_source: str | None = None,
    by_source_filter: str | None = None,
    **options: Any,
) -> None:
    """Merge `df` into the dataset the connection `options` name (pylance's
    merge_insert), one version: matched on `on` (default: its primary key);
    `when_matched` "update_all" (where `matched_condition` holds, over `source.` and
    `target.` columns), "delete", "fail" or "nothing"; `when_not_matched` "insert_all" or
    None; `when_not_matched_by_source` "delete" (rows matching `by_source_filter`) or None."""
    _write(
        df,
        "merge",
        {
            **options,
            "on": on if on is None or isinstance(on, str) else ",".join(on),
            "when_matched": when_matched,
            "matched_condition": matched_condition,
            "when_not_matched": when_not_matched or "none",
            "when_not_matched_by_source": when_not_matched_by_source,
            "by_source_filter": by_source_filter,
        },
    )


def add_columns(df: Any, **options: Any) -> None:
    """Backfill new columns: `df` holds `_rowaddr` and the new columns (rows it does not
    name get NULL); no existing data file is rewritten."""
    _write(df, "add_columns", options)


def update_columns(df: Any, **options: Any) -> None:
    """Rewrite existing columns in place: `df` holds `_rowaddr` and new values of some
    columns for some rows."""
    _write(df, "update_columns", options)


def update(updates: Mapping[str, str], where: str | None = None, **options: Any) -> dict:
    """Set columns to SQL expressions on the rows matching `where`, on the server, in one
    version: `{"version", "updated_rows"}`."""
    conn = Conn.from_options(options)
    with conn.client() as client:
        return client.update(conn.dataset, updates, where)


def delete(predicate: str, **options: Any) -> dict:
    """Delete the rows matching a SQL predicate, on the server, in one version:
    `{"version", "deleted_rows"}`."""
    conn = Conn.from_options(options)
    with conn.client() as client:
        return client.delete(conn.dataset, predicate)
