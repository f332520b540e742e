"""Full-text search over INVERTED indices of text fields nested in structs (`meta.body`,
`` meta.`a.b` ``: a name holding a dot is quoted in the path), as pylance searches them:
indices built by either engine, queries over every index or naming the column, phrases,
rows no index covers, deletions, and text searches filtered by a vector search."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import lance
import lance.query as lq
import numpy as np
import pyarrow as pa
import pytest
from fulltext_corpus import assert_same_answers, docs, search
from lance.dataset import VectorSearchQuery as PylanceVectorQuery

from quiver.format.dataset import dataset
from quiver.format.dataset import query as qq
from quiver.format.dataset.search_filter import VectorSearchQuery

BODY, DOTTED = "meta.body", "meta.`a.b`"


def _table(n: int, seed: int, start: int = 0) -> pa.Table:
    meta = pa.StructArray.from_arrays(
        [pa.array(docs(n, seed)), pa.array(docs(n, seed + 50))], names=["body", "a.b"]
    )
    vectors = np.random.default_rng(seed).random((n, 4), dtype=np.float32)
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "meta": meta,
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 4),
        }
    )


@pytest.fixture(params=["pylance", "quiver"])
def path(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Indices built by one engine on both nested fields, then rows no index covers and
    deletions."""
    out = str(tmp_path / "ds")
    lance.write_dataset(_table(500, 1), out, max_rows_per_file=200)
    engine = lance.dataset if request.param == "pylance" else dataset
    engine(out).create_scalar_index(BODY, "INVERTED", with_position=True)
    engine(out).create_scalar_index(DOTTED, "INVERTED")
    lance.write_dataset(_table(80, 2, start=500), out, mode="append")
    lance.dataset(out).delete("id % 13 = 3")
    return out


QUERIES: list[tuple[str, Any, Any]] = [
    ("every index", "apple river", "apple river"),
    ("meta.body", {"query": "quick fox", "columns": [BODY]}, None),
    ("the dotted field", {"query": "blue dog", "columns": [DOTTED]}, None),
    ("both named", {"query": "lance data", "columns": [BODY, DOTTED]}, None),
    (
        "phrase",
        lq.PhraseQuery("brown fox", BODY, slop=1),
        qq.PhraseQuery("brown fox", BODY, slop=1),
    ),
    ("match", lq.MatchQuery("vector", DOTTED), qq.MatchQuery("vector", DOTTED)),
    (
        "multi-match",
        lq.MultiMatchQuery("apple fox", [BODY, DOTTED]),
        qq.MultiMatchQuery("apple fox", [BODY, DOTTED]),
    ),
    (
        "combined fields",
        lq.CombinedFieldsQuery("apple fox", [BODY, DOTTED]),
        qq.CombinedFieldsQuery("apple fox", [BODY, DOTTED]),
    ),
]


@pytest.mark.parametrize(("label", "theirs", "ours"), QUERIES, ids=[q[0] for q in QUERIES])
def test_nested_text_fields_search_as_pylance(path: str, label: str, theirs: Any, ours: Any):
    ours = theirs if ours is None else ours
    for extra in (
        {},
        {"limit": 5},
        {"filter": "id > 100", "prefilter": True},
        {"columns": ["id", BODY, DOTTED]},  # nested fields' values, named by their paths
    ):
        want = search(lance.dataset(path), full_text_query=theirs, **extra)
        got = search(dataset(path), full_text_query=ours, **extra)
        assert_same_answers(want, got, f"{label} {extra}")
        if not extra:
            assert got.num_rows, label  # the corpus holds every query's words
    fast = search(dataset(path), full_text_query=ours, fast_search=True)
    assert_same_answers(
        search(lance.dataset(path), full_text_query=theirs, fast_search=True), fast, label
    )


def test_nested_text_filtered_by_a_vector_search(path: str) -> None:
    """A text search on a nested field after a vector search (and prefiltered by one: the
    rows it chose, searched as no index holds them)."""
    q = np.full(4, 0.5, np.float32)
    common = {"columns": ["id"], "full_text_query": {"query": "apple", "columns": [BODY]}}
    for prefilter in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = lance.dataset(path).to_table(
                **common, filter=PylanceVectorQuery("vec", q, 40), prefilter=prefilter
            )
        got = dataset(path).to_table(
            **common, filter=VectorSearchQuery("vec", q, 40), prefilter=prefilter
        )
        assert got["id"].to_pylist() == want["id"].to_pylist(), prefilter
        np.testing.assert_allclose(got["_score"], want["_score"], rtol=1e-5)
        assert got.num_rows, prefilter
