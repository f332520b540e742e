"""Full-text reads from Spark (the `full_text_query` option): one partition, `_score`, the
rows pylance's `to_table(full_text_query=...)` returns on the same dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lance
import pytest
from fulltext_corpus import assert_same_answers, search, text_table

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def docs(root: Path) -> str:
    path = str(root / "texts.lance")
    ds = lance.write_dataset(text_table(600, 31), path, max_rows_per_file=200)
    ds.create_scalar_index("text", "INVERTED")
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


def test_bad_full_text_options_are_refused(spark: Any, uri: str, docs: str) -> None:
    def base() -> Any:
        return spark.read.format("quiver").option("uri", uri).option("dataset", "texts")

    with pytest.raises(Exception, match="JSON object"):
        base().option("full_text_query", "{not json").load()
    with pytest.raises(Exception, match="go with 'full_text_query'"):
        base().option("fast_search", "true").load()
    with pytest.raises(Exception, match="not both"):
        base().option("full_text_query", "x").option(
            "nearest", json.dumps({"column": "v", "q": [1]})
        ).load()
