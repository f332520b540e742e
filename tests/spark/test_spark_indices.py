"""Index builds from a PySpark pipeline (`clients.spark.indices`): a DataFrame of embeddings
written through the data source, indexed by the server on the driver's request, searched by
Spark's `nearest` read and by pylance on the same index with the same answers; appends
indexed by `optimize_indices`; unknown options refused before anything is built."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

pyspark = pytest.importorskip("pyspark")

from quiver.clients.spark import indices  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

DIM = 8


def _embeddings(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return pa.table(
        {
            "id": np.arange(n, dtype=np.int64) + seed * 100_000,
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM),
        }
    )


def _write(spark: Any, uri: str, table: pa.Table, mode: str) -> None:
    df = spark.createDataFrame(table.to_pylist(), "id long, vec array<float>")
    (
        df.repartition(2)
        .write.format("quiver")
        .option("uri", uri)
        .option("dataset", "emb")
        .option("vector_columns", f"vec:{DIM}")
        .mode(mode)
        .save()
    )


def test_index_from_a_pipeline(spark: Any, uri: str, root: Path) -> None:
    conn = {"uri": uri, "dataset": "emb"}
    _write(spark, uri, _embeddings(5_000, 0), "overwrite")
    stages: list[dict] = []
    built = indices.create_index(
        "vec", "IVF_PQ", num_partitions=4, num_sub_vectors=4, progress=stages.append, **conn
    )
    assert built["name"] == "vec_idx" and stages[-1]["stage"] == "commit"
    assert indices.create_index("id", "BTREE", **conn)["name"] == "id_idx"
    path = str(root / "emb.lance")
    q = np.random.default_rng(3).normal(size=DIM).astype(np.float32)
    nearest = {"column": "vec", "q": q.tolist(), "k": 6, "nprobes": 2}
    df = (
        spark.read.format("quiver")
        .options(**conn)
        .option("nearest", json.dumps(nearest))
        .option("columns", "id")
        .load()
    )
    got = df.toArrow()
    expected = lance.dataset(path).to_table(nearest={**nearest, "q": q}, columns=["id"])
    assert got.column("id").to_pylist() == expected.column("id").to_pylist()
    _write(spark, uri, _embeddings(1_000, 1), "append")
    assert lance.dataset(path).stats.index_stats("vec_idx")["num_unindexed_rows"] == 1_000
    assert indices.optimize_indices(**conn)["optimized"]
    for name in ("vec_idx", "id_idx"):
        assert lance.dataset(path).stats.index_stats(name)["num_unindexed_rows"] == 0
    assert indices.drop_index("id_idx", **conn)["version"] == lance.dataset(path).version
    from quiver.clients.spark.options import QuiverOptionError

    version = lance.dataset(path).version
    with pytest.raises(QuiverOptionError, match="num_partition"):
        indices.create_index("vec", "IVF_FLAT", num_partition=3, **conn)
    assert lance.dataset(path).version == version
