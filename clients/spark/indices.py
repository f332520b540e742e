"""Index builds from a PySpark pipeline: the server builds and commits them, the driver only
asks (one action; no data moves through Spark).

```python
from quiver.clients.spark import indices

conn = {"uri": "grpc://host:8815", "dataset": "docs"}
embeddings.write.format("quiver").options(**conn).mode("append").save()
indices.create_index("vec", "IVF_PQ", num_partitions=256, num_sub_vectors=16, **conn)
indices.create_index("id", "BTREE", **conn)
# after later appends: index the new fragments
indices.optimize_indices(**conn)
```

Index options are pylance's (`create_index` for IVF_FLAT / IVF_PQ / IVF_SQ,
`create_scalar_index` for BTREE / BITMAP); `progress` is called with each stage of the
build as the server reports it. The other keyword arguments are the data source's
connection options (`uri`, `dataset`, `token` or `username` and `password`, TLS files).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from quiver.clients.spark.options import Conn, check_options

__all__ = ["create_index", "drop_index", "optimize_indices"]


def create_index(
    column: str,
    index_type: str,
    *,
    name: str | None = None,
    replace: bool | None = None,
    metric: str | None = None,
    num_partitions: int | None = None,
    num_sub_vectors: int | None = None,
    num_bits: int | None = None,
    sample_rate: int | None = None,
    max_iters: int | None = None,
    target_partition_size: int | None = None,
    ivf_centroids: Any = None,
    pq_codebook: Any = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    **options: Any,
) -> dict:
    """Build an index of `column` of the dataset in the server and commit it:
    `{"version", "name"}`."""
    check_options(options, "connection")
    conn = Conn.from_options(options)
    with conn.client() as client:
        return client.create_index(
            conn.dataset,
            column,
            index_type,
            name=name,
            replace=replace,
            metric=metric,
            num_partitions=num_partitions,
            num_sub_vectors=num_sub_vectors,
            num_bits=num_bits,
            sample_rate=sample_rate,
            max_iters=max_iters,
            target_partition_size=target_partition_size,
            ivf_centroids=ivf_centroids,
            pq_codebook=pq_codebook,
            progress=progress,
        )


def optimize_indices(
    *,
    num_indices_to_merge: int | None = None,
    index_names: list[str] | None = None,
    retrain: bool | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    **options: Any,
) -> dict:
    """Index the fragments appended since the dataset's indices were built (pylance's
    `optimize_indices`): `{"version", "optimized"}`."""
    check_options(options, "connection")
    conn = Conn.from_options(options)
    with conn.client() as client:
        return client.optimize_indices(
            conn.dataset,
            num_indices_to_merge=num_indices_to_merge,
            index_names=index_names,
            retrain=retrain,
            progress=progress,
        )


def drop_index(name: str, **options: Any) -> dict:
    """Drop the index `name` of the dataset (every segment): `{"version"}`."""
    check_options(options, "connection")
    conn = Conn.from_options(options)
    with conn.client() as client:
        return client.drop_index(conn.dataset, name)
