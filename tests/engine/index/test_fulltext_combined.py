"""Combined-fields (BM25F) queries against pylance 14's `CombinedFieldsQuery` on the same
datasets: boosts, AND, a column without an index, rows appended since the indices and rows
deleted, filters before and after, limits, `fast_search`, inside boolean and boost
queries, on pylance's and on Quiver's indices; pylance's refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lance
import lance.query as lq
import pyarrow as pa
import pytest
from fulltext_corpus import assert_same_answers, search, text_table

from quiver.format.dataset import dataset
from quiver.format.dataset import query as qq
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError

pytestmark = pytest.mark.compat

EXTRAS = [
    {},
    {"limit": 3},
    {"fast_search": True},
    {"filter": "id > 2", "prefilter": True},
    {"filter": "id > 2"},
]


def _pair(text: str, columns: list[str], boosts: list[float] | None, op: str) -> tuple[Any, Any]:
    """The same combined-fields query for pylance and for Quiver."""
    return (
        lq.CombinedFieldsQuery(
            text, columns, boosts=boosts, operator=getattr(lq.FullTextOperator, op)
        ),
        qq.CombinedFieldsQuery(
            text, columns, boosts=boosts, operator=getattr(qq.FullTextOperator, op)
        ),
    )


def _compare(path: str, texts: list[str], column_sets: list[list[str]], extras: list) -> None:
    """Every text, column set, boost and operator, each with the first of `extras` and one
    more in turn (so that each extra meets each text, column set, boost and operator)."""
    count = 0
    for t, text in enumerate(texts):
        for c, columns in enumerate(column_sets):
            for b, boosts in enumerate((None, [2.5] + [1.0] * (len(columns) - 1))):
                for o, op in enumerate(("OR", "AND")):
                    theirs, ours = _pair(text, columns, boosts, op)
                    other = extras[1 + (t + c + b + o) % (len(extras) - 1)]
                    for extra in (extras[0], other):
                        label = f"{text!r} {columns} {boosts} {op} {extra}"
                        want = search(lance.dataset(path), full_text_query=theirs, **extra)
                        got = search(dataset(path), full_text_query=ours, **extra)
                        assert_same_answers(want, got, label)
                        count += want.num_rows
    assert count  # the queries found rows


def _fruit(path: str, build: Any) -> None:
    """Three text columns, two indexed (stemming, no stop words), the third not; rows
    appended since and rows deleted."""
    a = ["apple", "kiwi", None, None, "Kiwi apple", None, "plum", None, None, None]
    b = ["kiwi kiwi", "apple pear", "kiwi", "kiwi plum", "pear", "kiwi apple pear", "pear"]
    b += ["fig", "kiwi", None]
    c = ["kiwi", "KIWI pears", None, "x", "plum plum", "", "kiwi", "fig", "a b c", "kiwi"]
    lance.write_dataset(pa.table({"id": range(10), "a": a, "b": b, "c": c}), path)
    for column in ("a", "b"):
        build(path).create_scalar_index(column, "INVERTED", remove_stop_words=False)
    more = {
        "id": [20, 21, 22, 1, 30],
        "a": ["kiwi kiwi", None, "pear", "plum", "kiwi"],
        "b": ["plum", "kiwi", None, "kiwi x y z", "pear"],
        "c": ["kiwi", None, "pear", None, "plum"],
    }
    lance.write_dataset(pa.table(more), path, mode="append")
    lance.dataset(path).delete("id = 2")


@pytest.mark.parametrize("built_by", ["pylance", "quiver"])
def test_combined_fields_score_as_pylance(tmp_path: Path, built_by: str) -> None:
    path = str(tmp_path / "fruit")
    _fruit(path, lance.dataset if built_by == "pylance" else dataset)
    texts = ["kiwi", "pears", "plum kiwi", "kiwi kiwi", "apple pear fig", "nothing"]
    _compare(path, texts, [["a", "b"], ["b", "a"], ["a", "b", "c"], ["a"]], EXTRAS)


def test_combined_fields_over_a_corpus(tmp_path: Path) -> None:
    """Two indexed columns of a larger corpus, several fragments, appends and deletions."""
    path = str(tmp_path / "corpus")
    lance.write_dataset(text_table(1500, 5), path, max_rows_per_file=400)
    lance.dataset(path).create_scalar_index("text", "INVERTED")
    dataset(path).create_scalar_index("title", "INVERTED")
    lance.write_dataset(text_table(200, 6, start=1500), path, mode="append")
    lance.dataset(path).delete("id % 9 = 4")
    extras = [{}, {"limit": 7}, {"filter": "cat = 'c1'", "prefilter": True, "limit": 5}]
    _compare(path, ["running fox", "the quick brown fox", "café"], [["text", "title"]], extras)


def test_combined_fields_inside_other_queries(tmp_path: Path) -> None:
    path = str(tmp_path / "fruit")
    _fruit(path, lance.dataset)
    theirs, ours = _pair("kiwi", ["a", "b"], None, "OR")
    plum_theirs, plum_ours = lq.MatchQuery("plum", "b"), qq.MatchQuery("plum", "b")
    pairs = [
        (
            lq.BooleanQuery([(lq.Occur.MUST, theirs), (lq.Occur.SHOULD, plum_theirs)]),
            qq.BooleanQuery([(qq.Occur.MUST, ours), (qq.Occur.SHOULD, plum_ours)]),
        ),
        (lq.BoostQuery(theirs, plum_theirs), qq.BoostQuery(ours, plum_ours)),
    ]
    for want_query, our_query in pairs:
        want = search(lance.dataset(path), full_text_query=want_query)
        assert_same_answers(want, search(dataset(path), full_text_query=our_query), str(want_query))
    # the structured form Flight, Spark and the namespace take
    structured = {"combined_fields": {"query": "kiwi", "columns": ["a", "b"], "boost": [1, 2]}}
    boosted = lq.CombinedFieldsQuery("kiwi", ["a", "b"], boosts=[1, 2])
    assert_same_answers(
        search(lance.dataset(path), full_text_query=boosted),
        search(dataset(path), full_text_query=structured),
        "structured",
    )


def test_combined_fields_refusals(tmp_path: Path) -> None:
    path = str(tmp_path / "fruit")
    _fruit(path, lance.dataset)
    for args, kwargs, message in [
        (("kiwi", []), {}, "no columns"),
        (("kiwi", ["a", "a"]), {}, "must be unique"),
        (("kiwi", ["a", "b"]), {"boosts": [1.0]}, "number of boosts"),
        (("kiwi", ["a", "b"]), {"boosts": [0.5, 1.0]}, r"\[1, 1048576\]"),
        (("kiwi", ["a", "b"]), {"boosts": [float("nan"), 1.0]}, r"\[1, 1048576\]"),
    ]:
        with pytest.raises(ValueError):
            lq.CombinedFieldsQuery(*args, **kwargs)
        with pytest.raises(InvalidInputError, match=message):
            qq.CombinedFieldsQuery(*args, **kwargs)
    with pytest.raises(TypeError):
        lq.CombinedFieldsQuery("kiwi", "a")
    with pytest.raises(TypeError, match="not a string"):
        qq.CombinedFieldsQuery("kiwi", "a")
    refused = [
        (["c"], InvalidInputError, "requires an inverted index"),
        (["a", "id"], InvalidInputError, "does not hold text"),
        (["a", "nope"], Exception, "nope"),
    ]
    for columns, error, message in refused:
        with pytest.raises(Exception):  # noqa: B017 (pylance's errors vary in type)
            search(lance.dataset(path), full_text_query=lq.CombinedFieldsQuery("kiwi", columns))
        with pytest.raises(error, match=message):
            search(dataset(path), full_text_query=qq.CombinedFieldsQuery("kiwi", columns))
    # positions are no part of the tokenizer: an index keeping them combines with one without
    lance.dataset(path).create_scalar_index(
        "c", "INVERTED", remove_stop_words=False, with_position=True
    )
    query = ("kiwi", ["a", "c"])
    assert_same_answers(
        search(lance.dataset(path), full_text_query=lq.CombinedFieldsQuery(*query)),
        search(dataset(path), full_text_query=qq.CombinedFieldsQuery(*query)),
        "with and without positions",
    )
    lance.dataset(path).create_scalar_index("c", "INVERTED", stem=False)
    for ds in (lance.dataset(path), dataset(path)):
        query = (lq if ds.__class__.__module__.startswith("lance") else qq).CombinedFieldsQuery
        with pytest.raises(Exception, match="share the same tokenizer"):
            search(ds, full_text_query=query("kiwi", ["a", "c"]))


def test_combined_fields_need_row_indices(tmp_path: Path) -> None:
    path = str(tmp_path / "elements")
    table = pa.table({"id": [0, 1], "a": ["kiwi", "x"], "tags": [["kiwi", "y"], ["z"]]})
    lance.write_dataset(table, path)
    lance.dataset(path).create_scalar_index("a", "INVERTED")
    lance.dataset(path).create_scalar_index(
        "tags", "INVERTED", document_granularity=lq.DocumentGranularity.LIST_ELEMENT
    )
    with pytest.raises(Exception, match="Row document granularity"):
        search(lance.dataset(path), full_text_query=lq.CombinedFieldsQuery("kiwi", ["a", "tags"]))
    with pytest.raises(UnsupportedFeatureError, match="list elements"):
        search(dataset(path), full_text_query=qq.CombinedFieldsQuery("kiwi", ["a", "tags"]))
