"""INVERTED indices of the `ngram` tokenizer (character n-grams of the whole text, all at
position 0) against pylance 14: the same answers for every query kind on pylance's and on
Quiver's indices, with rows appended since the index and deleted rows, and pylance's own
rules for n-grams (any n-gram matches under `AND` and in a phrase; a query's repeated
n-grams count once among indexed rows, each time among rows no index covers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lance
import lance.query as lq
import pyarrow as pa
import pytest
from fulltext_corpus import QUERIES, assert_same_answers, search, text_table

from quiver.format.dataset import dataset
from quiver.format.dataset import query as qq
from quiver.format.errors import InvalidInputError

pytestmark = pytest.mark.compat


def _queries(text: str) -> list[tuple[str, Any, Any]]:
    """(label, pylance's query, Quiver's) of one text: a string, AND, a phrase, fuzzy."""
    and_ = lq.FullTextOperator.AND
    return [
        (text, text, text),
        (
            f"AND {text}",
            lq.MatchQuery(text, "text", operator=and_),
            qq.MatchQuery(text, "text", operator=qq.FullTextOperator.AND),
        ),
        (f"phrase {text}", lq.PhraseQuery(text, "text"), qq.PhraseQuery(text, "text")),
        (
            f"fuzzy {text}",
            lq.MatchQuery(text, "text", fuzziness=1),
            qq.MatchQuery(text, "text", fuzziness=1),
        ),
    ]


def _dataset_pair(tmp_path: Path, options: dict[str, Any]) -> tuple[str, str]:
    """The same rows indexed by pylance and by Quiver with `options`, then rows appended
    (no index covers them) and rows deleted."""
    paths = str(tmp_path / "pylance"), str(tmp_path / "quiver")
    more = text_table(100, 7, start=5000)
    for path, build in zip(paths, (lance.dataset, dataset), strict=True):
        lance.write_dataset(text_table(1000, 41), path, max_rows_per_file=400)
        build(path).create_scalar_index("text", "INVERTED", **options)
        lance.write_dataset(more, path, mode="append")
        lance.dataset(path).delete("id % 7 = 3")
    return paths


@pytest.mark.parametrize(
    "options",
    [
        {"base_tokenizer": "ngram", "with_position": True},
        {"base_tokenizer": "ngram", "min_ngram_length": 2, "max_ngram_length": 4},
    ],
    ids=["trigrams", "2-to-4"],
)
def test_ngram_queries_answer_as_pylance(tmp_path: Path, options: dict[str, Any]) -> None:
    theirs, ours = _dataset_pair(tmp_path, options)
    wide = options.get("max_ngram_length", 3) > 3  # (many n-grams a query: fewer queries)
    texts = [*QUERIES[: 4 if wide else 8], "ick", "the quick", "apple apple"]
    for text in texts:
        for label, pylance_query, quiver_query in _queries(text):
            if "phrase" in label and not options.get("with_position"):
                continue
            if wide and label.startswith("fuzzy"):
                continue
            for extra in ({}, {"limit": 6}) if wide else ({}, {"limit": 6}, {"fast_search": True}):
                want = search(lance.dataset(theirs), full_text_query=pylance_query, **extra)
                for name, ds, q in (
                    ("quiver on pylance's", dataset(theirs), quiver_query),
                    ("quiver on quiver's", dataset(ours), quiver_query),
                    ("pylance on quiver's", lance.dataset(ours), pylance_query),
                ):
                    got = search(ds, full_text_query=q, **extra)
                    assert_same_answers(want, got, f"{name} {label!r} {extra}")


def test_repeated_ngrams_count_once_among_indexed_rows(tmp_path: Path) -> None:
    """pylance collects a query's (position, token) pairs: n-grams, all at position 0,
    count once among indexed rows ("ell ell" is "ell" plus the n-grams between), and each
    time among rows no index covers."""
    path = str(tmp_path / "ds")
    rows = ["Hello World", "héllo wörld ab", "abc", None, "The quick-brown fox's"]
    lance.write_dataset(pa.table({"id": range(5), "text": rows}), path)
    lance.dataset(path).create_scalar_index("text", "INVERTED", base_tokenizer="ngram")
    once = dataset(path).to_table(full_text_query="ell")
    twice = dataset(path).to_table(full_text_query="ell ell")
    assert once.column("_score").to_pylist() == twice.column("_score").to_pylist()
    lance.write_dataset(pa.table({"id": [9], "text": ["hello"]}), path, mode="append")
    for text in ("ell", "ell ell", "hello hello", "hello world hello"):
        assert_same_answers(
            search(lance.dataset(path), full_text_query=text),
            search(dataset(path), full_text_query=text),
            text,
        )


@pytest.mark.parametrize(
    "options",
    [
        {"min_ngram_length": 0},
        {"min_ngram_length": 4, "max_ngram_length": 3},
        {"max_ngram_length": "3"},
        {"prefix_only": "no"},
    ],
)
def test_bad_ngram_lengths_are_refused_as_pylance(tmp_path: Path, options: dict) -> None:
    path = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"text": ["Hello World"]}), path)
    with pytest.raises((ValueError, TypeError)):
        lance.dataset(path).create_scalar_index(
            "text", "INVERTED", base_tokenizer="ngram", **options
        )
    with pytest.raises(InvalidInputError, match="ngram_length|prefix_only"):
        dataset(path).create_scalar_index("text", "INVERTED", base_tokenizer="ngram", **options)
    assert not dataset(path).list_indices()


def test_numpy_lengths_and_budgeted_ranges(tmp_path: Path) -> None:
    """n-gram lengths may be numpy integers; a build's row ranges are cut greedily, none
    over the budget but a single row that alone is."""
    import numpy as np

    from quiver.format.index.fts.analyzer import AnalyzerParams
    from quiver.format.index.fts.build import row_ranges

    path = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"text": ["Hello World", "abc"]}), path)
    dataset(path).create_scalar_index(
        "text", "INVERTED", base_tokenizer="ngram", min_ngram_length=np.int64(2)
    )
    assert dataset(path).to_table(full_text_query="he")["text"].to_pylist() == ["Hello World"]
    params = AnalyzerParams(base_tokenizer="ngram", min_ngram_length=1, max_ngram_length=1)
    texts = pa.array(["x" * 9, "xx", "x" * 9, "x" * 9, "x" * 30, "x"])  # 9, 2, 9, 9, 30, 1
    assert row_ranges(params, texts, 10) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
    texts = pa.array(["x" * 4] * 6 + ["x" * 30])
    assert row_ranges(params, texts, 10) == [(0, 2), (2, 4), (4, 6), (6, 7)]
    assert row_ranges(params, texts, 1000) == [(0, 7)]
