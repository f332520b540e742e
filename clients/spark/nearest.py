"""Searches of the `quiver` data source: the `nearest` and `full_text_query` options (both:
a hybrid search, fused as the `hybrid` option says).

```python
df = (spark.read.format("quiver").option("uri", uri).option("dataset", "docs")
      .option("nearest", json.dumps({"column": "vec", "q": q, "k": 10, "nprobes": 20}))
      .option("filter", "lang = 'en'").option("prefilter", "true").load())
```

The server runs the whole search (`flight_server.nearest`): the read is one endpoint, so one
Spark partition, whose rows come nearest first with their `_distance` (and `query_index`
when `q` is a list of vectors), or, for `full_text_query`, best first with their `_score`
(`query_index` first for a list of queries), or, for a hybrid search, best first with their
`_relevance_score`.
Spark's filters are never pushed into such a read: with a
prefilter they would choose the rows searched rather than drop rows from those found.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import Filter
from pyspark.sql.types import StructType

from quiver.clients.spark.batch import QuiverReader
from quiver.clients.spark.convert import spark_schema
from quiver.clients.spark.options import Conn

QUERY_INDEX = "query_index"

__all__ = ["QuiverNearestReader", "nearest_schema"]


def nearest_schema(conn: Conn, read: dict[str, Any]) -> StructType:
    """The Spark schema of a nearest read: the columns asked for, `_distance` (and
    `query_index` first for a list of query vectors)."""
    with conn.client() as client:
        return spark_schema(client.flight_info(conn.dataset, **read).schema)


class QuiverNearestReader(QuiverReader):
    """The reader of a `nearest` read: one partition, the server's order kept."""

    def __init__(self, conn: Conn, read: dict[str, Any], schema: StructType) -> None:
        super().__init__(conn, read, schema, pushdown=False, max_partitions=None)

    def _push(self, filters: list[Filter]) -> Iterator[Filter]:
        self.pushed = []
        yield from filters  # all evaluated by Spark, after the search

    def _command(self) -> dict[str, Any]:
        options = super()._command()
        # the result's own columns: `_distance` is placed where named, `query_index` comes
        # with a list of query vectors
        options["columns"] = [c for c in options["columns"] if c != QUERY_INDEX]
        return options
