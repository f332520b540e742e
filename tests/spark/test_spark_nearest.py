"""Nearest-neighbour reads from Spark (the `nearest` option): one partition, `_distance`,
the rows pylance's `to_table(nearest=...)` returns on the same dataset, in its order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from vectors import DIM, assert_same_neighbours, build, pylance_nearest

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def docs(root: Path) -> str:
    return build(root / "docs.lance", "IVF_PQ", "l2")


def read(spark: Any, uri: str, nearest: dict, **options: str) -> Any:
    reader = spark.read.format("quiver").option("uri", uri).option("dataset", "docs")
    reader = reader.option("nearest", json.dumps(nearest))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_nearest_read_matches_pylance(spark: Any, uri: str, docs: str) -> None:
    q = np.random.default_rng(1).standard_normal(DIM).astype(np.float32)
    nearest = {"column": "vec", "q": q.tolist(), "k": 12, "nprobes": 2, "refine_factor": 2}
    for options, kwargs in (
        ({"columns": "id,cat"}, {"columns": ["id", "cat"]}),
        (
            {"columns": "id", "filter": "cat = 'c3'", "prefilter": "true"},
            {"columns": ["id"], "filter": "cat = 'c3'", "prefilter": True},
        ),
    ):
        df = read(spark, uri, nearest, **options)
        assert df.rdd.getNumPartitions() == 1
        assert df.columns == [*kwargs["columns"], "_distance"]
        got = df.toArrow()
        expected = pylance_nearest(docs, nearest={**nearest, "q": q}, **kwargs)
        assert_same_neighbours(got, expected, f"spark {options}")


def test_a_list_of_query_vectors_adds_query_index(spark: Any, uri: str, docs: str) -> None:
    q = np.random.default_rng(2).standard_normal((3, DIM)).astype(np.float32)
    nearest = {"column": "vec", "q": q.tolist(), "k": 4, "nprobes": 3}
    df = read(spark, uri, nearest, columns="id")
    assert df.columns == ["query_index", "id", "_distance"]
    got = df.toArrow()
    expected = pylance_nearest(docs, nearest={**nearest, "q": q}, columns=["id"])
    # Spark reads query_index as a nullable int: compare values
    assert got.column("query_index").to_pylist() == expected.column("query_index").to_pylist()
    assert got.column("id").equals(expected.column("id"))
    assert np.allclose(got.column("_distance"), expected.column("_distance"), rtol=1e-4)
    # Spark's own filters apply after the search
    nearest_ids = [r["id"] for r in df.filter("query_index = 1").orderBy("_distance").collect()]
    assert (
        nearest_ids
        == expected.filter(expected.column("query_index").to_numpy() == 1)["id"].to_pylist()
    )


def test_bad_nearest_options_are_refused(spark: Any, uri: str, docs: str) -> None:
    from quiver.clients.spark.options import QuiverOptionError

    def base() -> Any:  # a reader keeps its options: a fresh one per case
        return spark.read.format("quiver").option("uri", uri).option("dataset", "docs")

    with pytest.raises(Exception, match="JSON object"):
        base().option("nearest", "vec").load()
    with pytest.raises(Exception, match="needs 'q'"):
        base().option("nearest", json.dumps({"column": "vec"})).load()
    with pytest.raises(Exception, match="goes with the 'nearest'"):
        base().option("prefilter", "true").load()
    assert issubclass(QuiverOptionError, ValueError)
