"""The `quiver` PySpark (>= 4.1) Python data source: batch and streaming reads and writes
over Flight. The pieces: `options.py` (options and the connection), `convert.py` (Arrow
types both ways), `pushdown.py` (filters), `batch.py` (batch reader and writer),
`streaming.py` (stream reader and sink); this module is the source Spark registers.

```python
from quiver.clients.spark import register

register(spark)
df = (spark.read.format("quiver").option("uri", "grpc://host:8815")
      .option("dataset", "sales").option("version", 3).load())
df.write.format("quiver").option("uri", "grpc://host:8815").option("dataset", "sales") \\
    .mode("append").save()
```

Options (all strings, as Spark passes them; an unknown one is refused, listing those known):
- `uri` (required), `dataset` (required; or the path given to `load()` / `save()`)
- `version` | `tag` | `as_of` (at most one): time travel
- `branch`: a branch of the dataset (created with `Client.create_branch`, pylance's
  `create_branch` or lance-spark): reads, writes, row changes and streams act on it
- `filter`: a server-side SQL predicate; `columns`: comma-separated projection (PySpark has
  no column-pruning hook, so a user `.schema(...)` also projects: its names are requested)
- `token`, or `username` + `password`; `tls_root_certs`, `cert_chain`, `private_key` (paths
  of PEM files); `timeout` (seconds)
- `max_rows_per_endpoint`: cut fragments into endpoints (= Spark partitions) of at most this
  many rows, overriding the server's setting
- `max_partitions`: pack the endpoints, in order, into at most this many Spark partitions
- `pushdown`: `true` lets the server apply Spark's filters (default `false`: PySpark 4.3
  reuses a DataFrame's pushed filters for a later query on the same DataFrame that pushes
  none, silently dropping rows; without pushdown Spark evaluates every filter)
- `nearest`: a JSON object `{"column", "q", "k", "nprobes", "refine_factor", "metric",
  ...}` reads the k rows nearest to `q` (one Spark partition, `_distance` column, nearest
  first; a list of vectors adds `query_index`), with `prefilter` (`true`: the filter picks
  the rows searched; default `false`: it drops rows from the k found). See `nearest.py`.
- `full_text_query`: the query text, `{"query", "columns"}` or a structured query as JSON,
  reads the matching rows best first with `_score` (one Spark partition), with `limit`,
  `prefilter` and `fast_search` (only rows an INVERTED index covers) as in pylance's
  `to_table`; a JSON list of queries is a batch (each one's `limit` rows after its
  `query_index`).
- `nearest` and `full_text_query` together: a hybrid search (`_relevance_score`, best first),
  fused as the `hybrid` option says (`{"fusion": "rrf" | "linear", "rrf_k", "weight",
  "normalize"}` as JSON; default reciprocal rank fusion), `limit` rows (default `k`).
- `blob_handling`: `all_binary` reads blob columns as their bytes (binary columns) instead
  of their descriptions (structs of where the bytes are), as pylance's scans
- writes: `blob_columns` (`"video,thumb"`): binary columns stored as Lance blob columns (values
  out of line; read back with `blob_handling`) when the write creates the dataset or
  replaces its schema; `vector_columns` (`"embedding:768,thumb:64"`): array columns stored as Lance
  vectors (fixed-size lists) when the write creates the dataset or overwrites it
- streams: see `streaming.py`
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from quiver.clients.spark.batch import QuiverReader, QuiverWriter, dataset_schema
from quiver.clients.spark.convert import spark_schema
from quiver.clients.spark.nearest import QuiverNearestReader, nearest_schema
from quiver.clients.spark.options import (
    Conn,
    QuiverOptionError,
    blob_columns,
    change_option,
    check_options,
    positive_option,
    pushdown_enabled,
    read_options,
    vector_columns,
)
from quiver.clients.spark.streaming import QuiverStreamReader, QuiverStreamWriter

__all__ = ["QuiverDataSource"]


class QuiverDataSource(DataSource):
    """`spark.read.format("quiver")` / `df.write.format("quiver")`: see the module docs."""

    @classmethod
    def name(cls) -> str:
        return "quiver"

    def schema(self) -> StructType:
        check_options(self.options, "any")
        conn = Conn.from_options(self.options)
        read = read_options(self.options)
        if "nearest" in read or "full_text_query" in read:
            return nearest_schema(conn, read)
        read.pop("filter", None)
        read.pop("max_rows_per_endpoint", None)
        with conn.client() as client:
            return spark_schema(client.schema(conn.dataset, **read))

    def reader(self, schema: StructType) -> QuiverReader:
        check_options(self.options, "read")
        read = read_options(self.options)
        if "nearest" in read or "full_text_query" in read:
            return QuiverNearestReader(Conn.from_options(self.options), read, schema)
        return QuiverReader(
            Conn.from_options(self.options),
            read_options(self.options),
            schema,
            pushdown_enabled(self.options),
            positive_option(self.options, "max_partitions"),
        )

    def writer(self, schema: StructType, overwrite: bool) -> QuiverWriter:
        check_options(self.options, "write")
        change = change_option(self.options)
        if change is not None and overwrite:
            raise QuiverOptionError(
                "the 'operation' option changes rows: write with mode('append'), not overwrite"
            )
        return self._writer(overwrite, change)

    def _writer(self, overwrite: bool, change: dict | None = None) -> QuiverWriter:
        conn = Conn.from_options(self.options)
        vectors = vector_columns(self.options)
        blobs = blob_columns(self.options)
        return QuiverWriter(conn, overwrite, dataset_schema(conn), vectors, change, blobs)

    def streamWriter(self, schema: StructType, overwrite: bool) -> QuiverStreamWriter:  # noqa: N802
        """`writeStream.format("quiver")`: exactly-once micro-batches (`streaming.py`)."""
        check_options(self.options, "stream write")
        return QuiverStreamWriter(self._writer(overwrite), self.options)

    def streamReader(self, schema: StructType) -> Any:  # noqa: N802
        """`readStream.format("quiver")`: the rows appended version after version."""
        check_options(self.options, "stream read")
        return QuiverStreamReader(Conn.from_options(self.options), self.options, schema)
