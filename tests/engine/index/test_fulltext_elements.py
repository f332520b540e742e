"""Full-text search over list elements (pylance's `document_granularity=LIST_ELEMENT`):
pylance's indices searched with its answers (documents, `_doc_index`, BM25 over elements),
Quiver's indices written as pylance writes them and searched by pylance as its own, through
appends, deletions, `optimize_indices` and compaction; the choice of granularity refused
where pylance refuses it."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.file import LanceFileReader
from lance.query import DocumentGranularity, FullTextOperator, MatchQuery, PhraseQuery

from quiver.format.dataset import dataset
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError

pytestmark = pytest.mark.compat

WORDS = ["apple", "pear", "red", "green", "sky", "blue", "tree", "pie", "the", "cat"]
LE = DocumentGranularity.LIST_ELEMENT


def _table(rng: np.random.Generator, rows: int, start: int = 0) -> pa.Table:
    """Lists of 0-4 elements of 0-6 words (every 23rd list null, some elements null or
    empty)."""
    lists: list[Any] = []
    for i in range(start, start + rows):
        if i % 23 == 0:
            lists.append(None)
            continue
        items: list[str | None] = []
        for _ in range(int(rng.integers(0, 5))):
            n = int(rng.integers(0, 7))
            items.append(None if n == 6 else " ".join(rng.choice(WORDS, n)))
        lists.append(items)
    return pa.table(
        {"id": pa.array(range(start, start + rows)), "tags": pa.array(lists, pa.list_(pa.string()))}
    )


def _run(ds: Any, query: Any, **kw: Any) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ds.to_table(full_text_query=query, columns=["id"], with_row_id=True, **kw)


def _same(theirs: pa.Table, ours: pa.Table, what: str) -> None:
    """The same columns and documents with the same scores (1e-6 relative); documents
    outside the last tie band the same when cut by a limit (pylance orders ties
    arbitrarily)."""
    assert ours.schema.equals(theirs.schema), (what, ours.schema, theirs.schema)

    def docs(t: pa.Table) -> dict[tuple[int, int], float]:
        elements = [d[0] for d in t["_doc_index"].to_pylist()]
        keys = zip(t["_rowid"].to_pylist(), elements, strict=True)
        return dict(zip(keys, t["_score"].to_pylist(), strict=True))

    got, want = docs(ours), docs(theirs)
    assert len(got) == len(want) == ours.num_rows, what
    assert np.all(np.diff(ours["_score"].to_numpy()) <= 0), f"{what}: not best first"
    last = min(want.values(), default=0.0)
    for key, score in want.items():
        if key in got:
            assert abs(got[key] - score) <= 1e-6 * abs(score), (what, key)
        else:
            assert abs(score - last) <= 1e-6 * abs(last), (what, key, "missing")
    assert {k for k, s in got.items() if s > last * (1 + 1e-6)} == {
        k for k, s in want.items() if s > last * (1 + 1e-6)
    }, what


QUERIES = [
    (MatchQuery("apple", "tags"), {"match": {"terms": "apple", "column": "tags"}}),
    (
        MatchQuery("red apple pear", "tags", boost=2.0),
        {"match": {"terms": "red apple pear", "column": "tags", "boost": 2.0}},
    ),
    (
        MatchQuery("green tree", "tags", operator=FullTextOperator.AND),
        {"match": {"terms": "green tree", "column": "tags", "operator": "And"}},
    ),
    (
        MatchQuery("sky", "tags", document_granularity=LE),
        {"match": {"terms": "sky", "column": "tags", "document_granularity": "list_element"}},
    ),
    (PhraseQuery("red apple", "tags"), {"phrase": {"terms": "red apple", "column": "tags"}}),
    (
        PhraseQuery("apple pie", "tags", slop=1),
        {"phrase": {"terms": "apple pie", "column": "tags", "slop": 1}},
    ),
]


def _compare(uri: str, what: str, extras: list[dict[str, Any]]) -> None:
    for theirs_q, ours_q in QUERIES:
        for extra in extras:
            label = f"{what}: {ours_q} {extra}"
            _same(
                _run(lance.dataset(uri), theirs_q, **extra),
                _run(dataset(uri), ours_q, **extra),
                label,
            )


EXTRAS = [
    {},
    {"limit": 5},
    {"filter": "id % 2 = 0", "prefilter": True},
    {"filter": "id % 3 = 0"},
    {"limit": 4, "offset": 2},
]


def test_pylance_list_element_indices_answer_as_pylance(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    uri = str(tmp_path / "tags.lance")
    lance.write_dataset(_table(rng, 400), uri, max_rows_per_file=150).create_scalar_index(
        "tags", "INVERTED", document_granularity=LE, with_position=True
    )
    _compare(uri, "pylance's index", EXTRAS)
    lance.write_dataset(_table(rng, 60, 400), uri, mode="append")  # elements not indexed
    lance.dataset(uri).delete("id % 7 = 0")
    _compare(uri, "after an append and a delete", [{}, {"limit": 5}, {"fast_search": True}])


def test_quiver_writes_list_element_indices_as_pylance(tmp_path: Path) -> None:
    """The same documents file as pylance's (every element of every list, null elements as
    documents of no token), the same name, and pylance's answers on Quiver's index equal to
    those on its own; `optimize_indices` and compaction by Quiver keep them so."""
    rng = np.random.default_rng(2)
    table = _table(rng, 300)
    ours_uri, theirs_uri = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    lance.write_dataset(table, ours_uri, max_rows_per_file=100)
    lance.write_dataset(table, theirs_uri, max_rows_per_file=100).create_scalar_index(
        "tags", "INVERTED", document_granularity=LE, with_position=True
    )
    dataset(ours_uri).create_scalar_index(
        "tags", "INVERTED", document_granularity="list_element", with_position=True
    )
    names = [i.name for i in lance.dataset(ours_uri).describe_indices()]
    assert names == ["tags_list_element_idx"]

    def docs(uri: str) -> pa.Table:
        directory = f"{uri}/_indices/{os.listdir(f'{uri}/_indices')[0]}"
        return LanceFileReader(f"{directory}/part_0_docs.lance").read_all().to_table()

    assert docs(ours_uri).equals(docs(theirs_uri))
    for theirs_q, _ in QUERIES:
        for extra in ({}, {"limit": 5}):
            label = f"pylance on Quiver's index: {theirs_q} {extra}"
            ours = _run(lance.dataset(ours_uri), theirs_q, **extra)
            _same(_run(lance.dataset(theirs_uri), theirs_q, **extra), ours, label)
    dataset(ours_uri).insert(_table(rng, 50, 300))
    dataset(ours_uri).optimize.optimize_indices()
    assert len(lance.dataset(ours_uri).describe_indices()) == 1
    _compare(ours_uri, "after Quiver's optimize_indices", [{}, {"fast_search": True}])
    dataset(ours_uri).delete("id % 5 = 0")
    dataset(ours_uri).optimize.compact_files(target_rows_per_fragment=1000)
    _compare(ours_uri, "after Quiver's compaction", [{}, {"limit": 5}])


def test_the_granularity_is_chosen_and_refused_as_pylance(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    uri = str(tmp_path / "tags.lance")
    table = _table(rng, 100).append_column("text", pa.array(["red apple"] * 100))
    lance.write_dataset(table, uri)
    ours = dataset(uri)
    ours.create_scalar_index("tags", "INVERTED", document_granularity="list_element")
    ours = dataset(uri)
    row = {"match": {"terms": "apple", "column": "tags", "document_granularity": "row"}}
    with pytest.raises(InvalidInputError, match="list_element documents"):
        ours.to_table(full_text_query=row)
    with pytest.raises(InvalidInputError, match="INVERTED index"):
        ours.to_table(full_text_query="apple")  # string queries search row indices only
    inside = {"boolean": {"must": [{"match": {"terms": "apple", "column": "tags"}}]}}
    with pytest.raises(UnsupportedFeatureError, match="inside a boolean"):
        ours.to_table(full_text_query=inside)
    fuzzy = {"match": {"terms": "appel", "column": "tags", "fuzziness": 1}}
    with pytest.raises(UnsupportedFeatureError, match="fuzzy"):
        ours.to_table(full_text_query=fuzzy)
    with pytest.raises(InvalidInputError, match="row or list_element"):
        ours.to_table(full_text_query={"match": {"terms": "a", "document_granularity": "page"}})
    with pytest.raises(InvalidInputError, match="list of strings"):
        ours.create_scalar_index("text", "INVERTED", document_granularity="list_element")
    lance.dataset(uri).create_scalar_index("text", "INVERTED")
    both = dataset(uri)
    assert both.to_table(full_text_query={"query": "apple", "columns": ["text"]}).num_rows == 100
    element = {
        "match": {"terms": "apple", "column": "text", "document_granularity": "list_element"}
    }
    with pytest.raises(InvalidInputError, match="asks for list_element documents, but its index"):
        both.to_table(full_text_query=element)
