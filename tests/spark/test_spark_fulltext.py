"""Full-text and hybrid reads from Spark (the `full_text_query`, `nearest` and `hybrid`
options): one partition, `_score`, the rows pylance's `to_table(full_text_query=...)`
returns on the same dataset; a JSON list of queries as a batch (`query_index`); a vector
and a text query fused as the Python client's `hybrid` fuses them (checked against
LanceDB's fusion in `tests/engine/index/test_hybrid.py`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest
from fulltext_corpus import assert_same_answers, search, text_table

from quiver.clients import Client

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def docs(root: Path) -> str:
    path = str(root / "texts.lance")
    ds = lance.write_dataset(text_table(600, 31), path, max_rows_per_file=200)
    ds.create_scalar_index("text", "INVERTED")
    vectors = np.random.default_rng(32).standard_normal((600, 8)).astype(np.float32)
    table = text_table(600, 31).append_column(
        "vec", pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 8)
    )
    both = lance.write_dataset(table, str(root / "both.lance"), max_rows_per_file=200)
    both.create_scalar_index("text", "INVERTED")
    both.create_index("vec", "IVF_FLAT", num_partitions=2)
    return path


def read(spark: Any, uri: str, **options: str) -> Any:
    reader = spark.read.format("quiver").option("uri", uri).option("dataset", "texts")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_full_text_read_matches_pylance(spark: Any, uri: str, docs: str) -> None:
    for options, kwargs in (
        ({"full_text_query": "apple fox", "limit": "8"},
         {"full_text_query": "apple fox", "limit": 8}),
        (
            {
                "full_text_query": json.dumps({"query": "river", "columns": ["text"]}),
                "filter": "cat = 'c2'",
                "prefilter": "true",
            },
            {"full_text_query": {"query": "river", "columns": ["text"]}, "filter": "cat = 'c2'",
             "prefilter": True},
        ),
    ):  # fmt: skip
        df = read(spark, uri, columns="id", **options)
        assert df.rdd.getNumPartitions() == 1
        assert df.columns == ["id", "_score"]
        got = df.toArrow()
        expected = search(lance.dataset(docs), **kwargs).select(["id", "_score"])
        assert_same_answers(
            expected.append_column("_rowid", expected.column("id")),
            got.append_column("_rowid", got.column("id")),
            f"spark {options}",
        )


def test_full_text_batch_reads_each_query(spark: Any, uri: str, docs: str) -> None:
    queries = ["apple fox", {"query": "river", "columns": ["text"]}, "nothing-here-at-all"]
    df = read(spark, uri, columns="id", full_text_query=json.dumps(queries), limit="5")
    assert df.rdd.getNumPartitions() == 1
    assert df.columns == ["query_index", "id", "_score"]
    got = df.toArrow()
    for i, q in enumerate(queries):
        mine = got.filter(pa.compute.equal(got["query_index"], i)).drop(["query_index"])
        expected = search(lance.dataset(docs), full_text_query=q, limit=5).select(["id", "_score"])
        assert_same_answers(
            expected.append_column("_rowid", expected.column("id")),
            mine.append_column("_rowid", mine.column("id")),
            f"spark batch {q}",
        )


@pytest.mark.parametrize(
    "hybrid", [None, {"fusion": "linear", "weight": 0.6, "normalize": "rank"}, {"rrf_k": 40}]
)
def test_hybrid_read_fuses_as_the_client(spark: Any, uri: str, docs: str, hybrid: Any) -> None:
    q = np.random.default_rng(33).standard_normal(8).astype(np.float32).tolist()
    options = {"columns": "id,cat", "limit": "12", "filter": "cat != 'c1'", "prefilter": "true"}
    if hybrid is not None:
        options["hybrid"] = json.dumps(hybrid)
    df = (
        spark.read.format("quiver").option("uri", uri).option("dataset", "both")
        .option("nearest", json.dumps({"column": "vec", "q": q, "k": 12, "nprobes": 2}))
        .option("full_text_query", "apple river")
        .options(**options)
        .load()
    )  # fmt: skip
    assert df.rdd.getNumPartitions() == 1
    got = df.toArrow()
    with Client(uri) as qc:
        want = qc.hybrid(
            "both", "vec", q, "apple river", 12, nprobes=2, columns=["id", "cat"],
            filter="cat != 'c1'", prefilter=True, **(hybrid or {}),
        )  # fmt: skip
    assert got.column_names == want.column_names == ["id", "cat", "_relevance_score"]
    assert got.num_rows == want.num_rows == 12
    assert got["id"].to_pylist() == want["id"].to_pylist()
    np.testing.assert_allclose(
        got["_relevance_score"].to_numpy(), want["_relevance_score"].to_numpy(), rtol=1e-6
    )


def test_bad_full_text_options_are_refused(spark: Any, uri: str, docs: str) -> None:
    def base() -> Any:
        return spark.read.format("quiver").option("uri", uri).option("dataset", "texts")

    with pytest.raises(Exception, match="JSON object"):
        base().option("full_text_query", "{not json").load()
    with pytest.raises(Exception, match="go with 'full_text_query'"):
        base().option("fast_search", "true").load()
    with pytest.raises(Exception, match="goes with both 'nearest' and 'full_text_query'"):
        base().option("full_text_query", "x").option("hybrid", "{}").load()
    with pytest.raises(Exception, match="keys among fusion"):
        base().option("full_text_query", "x").option(
            "nearest", json.dumps({"column": "v", "q": [1]})
        ).option("hybrid", json.dumps({"fusion": "rrf", "k": 3})).load()
    with pytest.raises(Exception, match="not a list"):
        base().option("full_text_query", '["x", "y"]').option(
            "nearest", json.dumps({"column": "v", "q": [1]})
        ).load()
    with pytest.raises(Exception, match="JSON list of them"):
        base().option("full_text_query", "[]").load()
