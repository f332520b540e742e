"""Search filters against pylance 14: a full-text query filtering a vector search and a
vector search (`VectorSearchQuery`) filtering a full-text search, before and after, with a
SQL filter beside (`{"expr_filter", "search_filter"}`), limits and offsets, with and without
a vector index, rows appended since the indices; pylance's refusals."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import lance
import lance.query as lq
import numpy as np
import pyarrow as pa
import pytest
from lance.dataset import VectorSearchQuery as PylanceVectorQuery

from quiver.format.dataset import ScannerBuilder, dataset
from quiver.format.dataset import query as qq
from quiver.format.dataset.search_filter import VectorSearchQuery
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError

pytestmark = pytest.mark.compat

WORDS = ["apple", "banana", "kiwi", "plum", "fig", "pear", "lime"]


def _table(n: int, seed: int, start: int = 0) -> pa.Table:
    """Texts of 1 to 6 words (the first rows hold "kiwi" 1 to 9 times with fillers, so the
    best "kiwi" rows score apart), 8-dimensional vectors, a category."""
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, rng.integers(1, 7))) for _ in range(n)]
    for i in range(min(9, n)):
        texts[i] = " ".join(["kiwi"] * (i + 1) + ["lime"] * (9 - i))
    vectors = rng.normal(size=(n, 8)).astype(np.float32)
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "text": texts,
            "cat": [f"c{i % 3}" for i in range(start, start + n)],
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 8),
        }
    )


@pytest.fixture(params=["flat", "ivf", "appended"])
def path(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    out = str(tmp_path / "ds")
    lance.write_dataset(_table(300, 1), out, max_rows_per_file=100)
    lance.dataset(out).create_scalar_index("text", "INVERTED")
    if request.param == "ivf":
        lance.dataset(out).create_index("vec", "IVF_FLAT", num_partitions=4)
    if request.param == "appended":  # rows no index covers, some deleted
        lance.write_dataset(_table(60, 2, start=300), out, mode="append")
        lance.dataset(out).delete("id % 11 = 5")
    return out


def _same(path: str, theirs: dict[str, Any], ours: dict[str, Any], label: str) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = lance.dataset(path).to_table(**theirs)
    got = dataset(path).to_table(**ours)
    assert got.schema.names == want.schema.names, label
    for name in want.schema.names:
        if name in ("_score", "_distance"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, err_msg=label)
        else:
            assert got[name].to_pylist() == want[name].to_pylist(), (label, name)
    return want.num_rows


def _query_vector(path: str, row: int) -> np.ndarray:
    vector = lance.dataset(path).take([row], columns=["vec"])["vec"][0].as_py()
    return np.asarray(vector, np.float32) + np.float32(0.05)


EXTRAS = [
    {},
    {"prefilter": True},
    {"limit": 3},
    {"offset": 2},
    {"prefilter": True, "offset": 1, "limit": 3},
    {"with_row_id": True},
]


def test_vector_searches_filtered_by_text(path: str) -> None:
    q = _query_vector(path, 4)
    nearest = {"column": "vec", "q": q, "k": 10}
    rows = 0
    for text in ("kiwi", "apple fig"):
        theirs, ours = lq.MatchQuery(text, "text"), qq.MatchQuery(text, "text")
        for extra in EXTRAS:
            for expr in (None, "cat != 'c2'"):
                pf = theirs if expr is None else {"expr_filter": expr, "search_filter": theirs}
                qf = ours if expr is None else {"expr_filter": expr, "search_filter": ours}
                common = {"columns": ["id", "cat"], "nearest": nearest, **extra}
                label = f"{text} {extra} {expr}"
                rows += _same(path, {**common, "filter": pf}, {**common, "filter": qf}, label)
    assert rows
    # before the search, any query (after it, only matches: below)
    boolean = (
        [lq.Occur.MUST, lq.MatchQuery("kiwi", "text")],
        [qq.Occur.MUST, qq.MatchQuery("kiwi", "text")],
    )
    not_fig = lq.MatchQuery("fig", "text"), qq.MatchQuery("fig", "text")
    theirs = lq.BooleanQuery([tuple(boolean[0]), (lq.Occur.MUST_NOT, not_fig[0])])
    ours = qq.BooleanQuery([tuple(boolean[1]), (qq.Occur.MUST_NOT, not_fig[1])])
    common = {"columns": ["id"], "nearest": nearest, "prefilter": True}
    _same(path, {**common, "filter": theirs}, {**common, "filter": ours}, "boolean")


def test_text_searches_filtered_by_a_vector_search(path: str) -> None:
    q = _query_vector(path, 7)
    rows = 0
    for k in (4, 12):
        theirs, ours = PylanceVectorQuery("vec", q, k), VectorSearchQuery("vec", q, k)
        for extra in EXTRAS:
            for expr in (None, "cat = 'c1'"):
                pf = theirs if expr is None else {"expr_filter": expr, "search_filter": theirs}
                qf = ours if expr is None else {"expr_filter": expr, "search_filter": ours}
                common = {"columns": ["id", "cat"], "full_text_query": "kiwi", **extra}
                label = f"k={k} {extra} {expr}"
                rows += _same(path, {**common, "filter": pf}, {**common, "filter": qf}, label)
                # pylance's own VectorSearchQuery objects are read too
                _same(path, {**common, "filter": pf}, {**common, "filter": pf}, label)
    assert rows
    for columns in (["id", "_distance"], None):
        common = {"columns": columns, "full_text_query": "kiwi"}
        theirs = {**common, "filter": PylanceVectorQuery("vec", q, 5)}
        _same(path, theirs, {**common, "filter": VectorSearchQuery("vec", q, 5)}, str(columns))


def test_builder_and_refusals(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    lance.write_dataset(_table(100, 3), path)
    lance.dataset(path).create_scalar_index("text", "INVERTED")
    q = _query_vector(path, 2)
    ours = dataset(path)
    # the builder keeps a SQL filter and a search filter side by side, as pylance's does
    built = (
        ScannerBuilder(ours)
        .full_text_search("kiwi")
        .filter("cat = 'c0'")
        .filter(VectorSearchQuery("vec", q, 6))
        .columns(["id"])
        .to_scanner()
        .to_table()
    )
    want = ours.to_table(
        columns=["id"],
        full_text_query="kiwi",
        filter={"expr_filter": "cat = 'c0'", "search_filter": VectorSearchQuery("vec", q, 6)},
    )
    assert built.equals(want)
    nearest = {"column": "vec", "q": q, "k": 5}
    refused = [
        ({"filter": qq.MatchQuery("kiwi", "text")}, InvalidInputError, "only be used"),
        ({"filter": VectorSearchQuery("vec", q, 3)}, InvalidInputError, "only be used"),
        (
            {"nearest": nearest, "filter": VectorSearchQuery("vec", q, 3)},
            InvalidInputError,
            "vector filter",
        ),
        (
            {"full_text_query": "kiwi", "filter": qq.MatchQuery("fig", "text")},
            InvalidInputError,
            "full-text filter",
        ),
        (
            {"nearest": nearest, "filter": qq.PhraseQuery("kiwi", "text")},
            UnsupportedFeatureError,
            "only match queries",
        ),
        (
            {"full_text_query": "kiwi", "prefilter": True, "columns": ["id", "_distance"],
             "filter": VectorSearchQuery("vec", q, 3)},
            InvalidInputError,
            "_distance",
        ),
        ({"nearest": nearest, "filter": 42}, InvalidInputError, "filter must be"),
    ]  # fmt: skip
    for options, error, message in refused:
        with pytest.raises(error, match=message):
            ours.to_table(**options)
    # a dict of neither is no filter at all
    empty = {"expr_filter": None, "search_filter": None}
    assert ours.to_table(columns=["id"], filter=empty).equals(ours.to_table(columns=["id"]))


def test_list_element_searches_are_refused_as_filters(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    table = _table(50, 4).append_column("tags", pa.array([["kiwi", f"t{i}"] for i in range(50)]))
    lance.write_dataset(table, path)
    lance.dataset(path).create_scalar_index(
        "tags", "INVERTED", document_granularity=lq.DocumentGranularity.LIST_ELEMENT
    )
    q = _query_vector(path, 1)
    elements = {
        "match": {"terms": "kiwi", "column": "tags", "document_granularity": "list_element"}
    }
    for prefilter in (False, True):
        with pytest.raises(UnsupportedFeatureError, match="list elements"):
            dataset(path).to_table(
                full_text_query=elements, filter=VectorSearchQuery("vec", q, 5), prefilter=prefilter
            )
        with pytest.raises(UnsupportedFeatureError, match="list elements"):
            dataset(path).to_table(
                nearest={"column": "vec", "q": q, "k": 5}, filter=elements, prefilter=prefilter
            )
