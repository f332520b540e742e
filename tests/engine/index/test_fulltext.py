"""Full-text search in the engine against pylance 14's `to_table(full_text_query=...)` on the
same datasets: INVERTED indices built by pylance (format versions 1 and 2, with positions,
several partitions, stable row ids), rows appended after the index (searched by reading
them) and deleted rows, filters before and after the search, `fast_search`, several indexed
columns, a column without an index; the analyzer against `lance.tokenize`-visible behaviour
(stemming, stop words, case, accents, long tokens)."""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest
from fulltext_corpus import QUERIES, assert_same_answers, search, text_table

from quiver.format.dataset import dataset, fulltext
from quiver.format.errors import ColumnNotFoundError, InvalidInputError, UnsupportedFeatureError
from quiver.format.index.fts import blockmax
from quiver.format.index.fts import index as index_module
from quiver.format.index.fts.analyzer import Analyzer, AnalyzerParams
from quiver.format.index.fts.postings import unpack4x

pytestmark = pytest.mark.compat


def _compare_all(path: Path, what: str, options: list[dict[str, Any]]) -> None:
    theirs, ours = lance.dataset(str(path)), dataset(str(path))
    for query in QUERIES:
        for extra in options:
            label = f"{what} {query!r} {extra}"
            assert_same_answers(
                search(theirs, full_text_query=query, **extra),
                search(ours, full_text_query=query, **extra),
                label,
            )


OPTIONS = [
    {},
    {"limit": 5},
    {"filter": "cat = 'c1'", "prefilter": True, "limit": 10},
    {"filter": "cat != 'c2'", "prefilter": True},
    {"filter": "id % 2 = 0"},  # a postfilter over every match
]


@pytest.mark.parametrize(
    "index_options",
    [
        {},
        {"format_version": 1},
        {"with_position": True},
        {"remove_stop_words": False, "stem": False, "ascii_folding": False},
        {"lower_case": False, "max_token_length": 8},
        {"base_tokenizer": "whitespace"},
        {"base_tokenizer": "raw"},
    ],
    ids=["default", "v1", "positions", "plain", "case", "whitespace", "raw"],
)
def test_indexed_rows_score_as_pylance(tmp_path: Path, index_options: dict[str, Any]) -> None:
    path = tmp_path / "ds"
    ds = lance.write_dataset(text_table(1500, 1), str(path), max_rows_per_file=500)
    ds.create_scalar_index("text", "INVERTED", **index_options)
    _compare_all(path, str(index_options), OPTIONS)


def test_appended_deleted_and_fast_search(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ds = lance.write_dataset(text_table(1200, 2), str(path), max_rows_per_file=400)
    ds.create_scalar_index("text", "INVERTED")
    lance.write_dataset(text_table(300, 3, start=1200), str(path), mode="append")
    lance.dataset(str(path)).delete("id % 7 = 3")
    _compare_all(
        path, "appended", [*OPTIONS, {"fast_search": True}, {"fast_search": True, "limit": 3}]
    )
    # pylance's optimize_indices indexes the appended rows in a new partition
    lance.dataset(str(path)).optimize.optimize_indices()
    _compare_all(path, "optimized", [{}, {"limit": 8}])


def test_partitions_and_stable_row_ids(tmp_path: Path) -> None:
    path = tmp_path / "parts"
    rng = np.random.default_rng(1)
    vocabulary = ["w" + "".join(rng.choice(list("bcdfghjklmnpqrtvwxz"), 5)) for _ in range(3000)]
    texts = [" ".join(rng.choice(vocabulary, 30)) for _ in range(8000)]
    table = pa.table({"id": pa.array(range(8000), pa.int64()), "text": texts})
    ds = lance.write_dataset(table, str(path), max_rows_per_file=2000)
    ds.create_scalar_index("text", "INVERTED", memory_limit=1)  # several partitions
    assert len(list((path / "_indices").rglob("part_*_docs.lance"))) > 1
    theirs, ours = lance.dataset(str(path)), dataset(str(path))
    for query in [vocabulary[0], f"{vocabulary[1]} {vocabulary[2]} {vocabulary[2]}", "nothing"]:
        for extra in ({}, {"limit": 10}):
            assert_same_answers(
                search(theirs, full_text_query=query, **extra),
                search(ours, full_text_query=query, **extra),
                f"partitions {query} {extra}",
            )
    stable = tmp_path / "stable"
    ds = lance.write_dataset(
        text_table(800, 5), str(stable), max_rows_per_file=300, enable_stable_row_ids=True
    )
    ds.create_scalar_index("text", "INVERTED")
    ds.delete("id % 5 = 0")
    _compare_all(stable, "stable", [{}, {"filter": "cat = 'c3'", "prefilter": True}])


def test_columns_and_projection(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ds = lance.write_dataset(text_table(600, 6), str(path))
    ds.create_scalar_index("text", "INVERTED")
    ours = dataset(str(path))
    for kw in (
        {"columns": ["id", "text"]},
        {"columns": ["_score", "id"]},
        {"columns": ["id"], "with_row_id": True},
        {},
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = ds.to_table(full_text_query="apple dog", limit=4, **kw)
        got = ours.to_table(full_text_query="apple dog", limit=4, **kw)
        assert got.schema == theirs.schema, kw
    # a dict names the column; several indexed columns: a row scores its best column
    single = {"query": "fox apple", "columns": ["text"]}
    assert_same_answers(
        search(ds, full_text_query=single), search(ours, full_text_query=single), "dict"
    )
    ds.create_scalar_index("title", "INVERTED")
    ours = dataset(str(path))
    assert_same_answers(
        search(lance.dataset(str(path)), full_text_query="fox apple"),
        search(ours, full_text_query="fox apple"),
        "two indexed columns",
    )


def test_column_without_an_index_is_read(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ds = lance.write_dataset(text_table(400, 7), str(path))
    ds.create_scalar_index("text", "INVERTED")
    for text in ("river blue", "Blue rivers", "café résumé", "the of"):
        query = {"query": text, "columns": ["title"]}  # title has no index
        _same_set(
            search(ds, full_text_query=query), search(dataset(str(path)), full_text_query=query)
        )


def _same_set(theirs: pa.Table, ours: pa.Table) -> None:
    # pylance answers such a search unordered: compare as sets of (row, score)
    got = sorted(zip(ours["_rowid"].to_pylist(), ours["_score"].to_pylist(), strict=True))
    want = sorted(zip(theirs["_rowid"].to_pylist(), theirs["_score"].to_pylist(), strict=True))
    assert [r for r, _ in got] == [r for r, _ in want]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-6)


def test_refusals(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    lance.write_dataset(text_table(50, 8), str(path))
    ours = dataset(str(path))
    with pytest.raises(InvalidInputError, match="INVERTED index"):
        ours.to_table(full_text_query="apple")
    lance.dataset(str(path)).create_scalar_index("text", "INVERTED")
    ours = dataset(str(path))
    with pytest.raises(ColumnNotFoundError):
        ours.to_table(full_text_query={"query": "apple", "columns": ["nope"]})
    with pytest.raises(InvalidInputError, match="does not hold text"):
        ours.to_table(full_text_query={"query": "apple", "columns": ["id"]})
    with pytest.raises(InvalidInputError, match="unknown key"):
        ours.to_table(full_text_query={"query": "apple", "column": "text"})
    with pytest.raises(InvalidInputError, match="position is not found"):
        ours.to_table(full_text_query='"quick brown"')  # a phrase: this index has no positions
    with pytest.raises(UnsupportedFeatureError):
        ours.to_table(full_text_query=42)


def test_analyzer_matches_the_indexed_tokens(tmp_path: Path) -> None:
    """Every token the analyzer makes of a corpus is one the pylance index holds, with the
    same document counts."""
    path = tmp_path / "ds"
    table = text_table(500, 9)
    ds = lance.write_dataset(table, str(path))
    ds.create_scalar_index("text", "INVERTED")
    from quiver.format.dataset.fulltext import inverted_entries
    from quiver.format.index.fts.index import InvertedIndex

    core = dataset(str(path)).core
    [entry] = inverted_entries(core)["text"]
    store, directory = core.resolve(entry.directory, None, relative_to_root=True)
    analyzer = Analyzer(AnalyzerParams())
    counts: dict[str, int] = {}
    docs = 0
    for text in table["text"].to_pylist():
        tokens = analyzer.tokens(text)
        docs += bool(tokens)
        for t in set(tokens):
            counts[t] = counts.get(t, 0) + 1
    with InvertedIndex(store, directory) as index:
        assert index.num_docs == docs
        held = dict(index.partitions[0].tokens.items())
        assert set(held) == set(counts)
        for token, n in counts.items():
            assert index.document_frequency(token) == n, token
        # lookups follow one transition per byte: the same ids as the whole walk
        lookup = index.partitions[0].tokens
        for token, tid in held.items():
            assert lookup.get(token) == tid, token
        for absent in ("", "zzzzzzzzzz", "é", *(t + "q" for t in list(held)[:200])):
            assert lookup.get(absent) == held.get(absent), absent


@pytest.mark.parametrize("bits", range(33))
def test_bitpacker_every_width(bits: int) -> None:
    """The kernel unpacks three blocks of every width as the layout says, lane by lane."""
    rng = np.random.default_rng(bits)
    values = rng.integers(0, 1 << bits, (3, 128), dtype=np.uint64).astype(np.uint32)
    words = np.zeros((3, bits, 4), np.uint32)
    for b in range(3):
        for j in range(4):
            stream = 0
            for m, v in enumerate(values[b, j::4].tolist()):
                stream |= v << (m * bits)
            for k in range(bits):
                words[b, k, j] = (stream >> (32 * k)) & 0xFFFFFFFF
    np.testing.assert_array_equal(unpack4x(words.reshape(3, -1), bits), values)


def test_bitpacker_layout() -> None:
    """BitPacker4x: four interleaved lanes of 32 values, low bits first."""
    values = np.arange(128, dtype=np.uint32) % 13
    bits = 4
    lanes = [values[j::4] for j in range(4)]
    words = np.zeros((bits, 4), np.uint32)
    for j, lane in enumerate(lanes):
        stream = 0
        for m, v in enumerate(lane.tolist()):
            stream |= v << (m * bits)
        for k in range(bits):
            words[k, j] = (stream >> (32 * k)) & 0xFFFFFFFF
    np.testing.assert_array_equal(unpack4x(words.reshape(1, -1), bits)[0], values)


def test_structured_queries_score_as_pylance(tmp_path: Path) -> None:
    """The namespace's structured query form, against pylance's query objects."""
    from lance.query import (
        BooleanQuery,
        BoostQuery,
        FullTextOperator,
        MatchQuery,
        MultiMatchQuery,
        Occur,
    )

    path = tmp_path / "ds"
    ds = lance.write_dataset(text_table(1200, 51), str(path), max_rows_per_file=400)
    ds.create_scalar_index("text", "INVERTED")
    ds.create_scalar_index("title", "INVERTED")
    lance.write_dataset(text_table(150, 52, start=1200), str(path), mode="append")
    theirs, ours = lance.dataset(str(path)), dataset(str(path))

    def match(terms: str, column: str, **kw: Any) -> dict:
        return {"match": {"terms": terms, "column": column, **kw}}

    cases = [
        (MatchQuery("apple fox", "text"), match("apple fox", "text")),
        (
            MatchQuery("apple fox", "text", operator=FullTextOperator.AND),
            match("apple fox", "text", operator="And"),
        ),
        (MatchQuery("river", "title", boost=2.5), match("river", "title", boost=2.5)),
        (
            MultiMatchQuery("apple river", ["text", "title"], boosts=[1.0, 3.0]),
            {"multi_match": {"match_queries": [
                match("apple river", "text", boost=1.0)["match"],
                match("apple river", "title", boost=3.0)["match"],
            ]}},
        ),
        (
            BooleanQuery([(Occur.MUST, MatchQuery("apple", "text")),
                          (Occur.SHOULD, MatchQuery("fox", "text")),
                          (Occur.MUST_NOT, MatchQuery("dog", "title"))]),
            {"boolean": {"must": [match("apple", "text")], "should": [match("fox", "text")],
                         "must_not": [match("dog", "title")]}},
        ),
        (
            BooleanQuery([(Occur.SHOULD, MatchQuery("apple", "text")),
                          (Occur.SHOULD, MatchQuery("river", "title"))]),
            {"boolean": {"should": [match("apple", "text"), match("river", "title")]}},
        ),
        (
            BoostQuery(MatchQuery("apple", "text"), MatchQuery("fox", "text"), negative_boost=0.3),
            {"boost": {"positive": match("apple", "text"), "negative": match("fox", "text"),
                       "negative_boost": 0.3}},
        ),
    ]  # fmt: skip
    for pylance_query, quiver_query in cases:
        for extra in ({}, {"limit": 7}, {"filter": "cat = 'c1'", "prefilter": True}):
            assert_same_answers(
                search(theirs, full_text_query=pylance_query, **extra),
                search(ours, full_text_query=quiver_query, **extra),
                f"{quiver_query} {extra}",
            )
    with pytest.raises(InvalidInputError, match="position is not found"):
        ours.to_table(full_text_query={"phrase": {"terms": "apple fox", "column": "text"}})
    with pytest.raises(InvalidInputError, match="fuzziness"):
        ours.to_table(full_text_query=match("apple", "text", fuzziness=-1))
    with pytest.raises(InvalidInputError, match="one of"):
        ours.to_table(full_text_query={"match": {"terms": "a"}, "boolean": {}})


@pytest.mark.parametrize("summed_rows", [0, fulltext.SUMMED_ROWS])
def test_a_limit_reads_the_best_rows_as_the_whole_search_ranks_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, summed_rows: int
) -> None:
    """With a limit, each word's rows are read best first only as deep as the answer needs
    (the threshold algorithm), or, few rows together, all summed at once: the answers are
    the first rows of the search without one, ties by row id, on frequent and repeated
    words, deleted rows and prefilters."""
    monkeypatch.setattr(fulltext, "SUMMED_ROWS", summed_rows)
    rng = np.random.default_rng(5)
    words = np.array([f"w{i}" for i in range(40)])
    texts = [" ".join(rng.choice(words, rng.integers(1, 12))) for _ in range(6000)]
    table = pa.table({"id": np.arange(6000), "text": texts, "cat": np.arange(6000) % 3})
    path = str(tmp_path / "ds")
    lance.write_dataset(table, path, max_rows_per_file=2500)
    ours = dataset(path)
    ours.create_scalar_index("text", "INVERTED")
    queries = ["w0", "w0 w1", "w3 w3 w7", "w0 w1 w2 w3 w4 w5", "w39 w0", "nothing"]

    def check(ds: Any, **extra: Any) -> None:
        for q in queries:
            whole = search(ds, full_text_query=q, **extra)
            for limit in (1, 3, 10, 100):
                part = search(ds, full_text_query=q, limit=limit, **extra)
                assert part.equals(whole.slice(0, limit)), (q, limit, extra)

    check(ours)
    check(ours, filter="cat = 1", prefilter=True)
    lance.dataset(path).delete("id % 5 = 0")
    check(dataset(path))


def test_one_word_decodes_only_the_blocks_its_best_rows_can_be_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-word search with a limit decodes the posting blocks whose stored best scores,
    rescaled to the search's statistics, can beat its answers (block-max pruning), and
    answers as the whole search ranks: on pylance's index (several partitions) and
    Quiver's, with unindexed rows, a delta segment, deletions and a prefilter. Stored
    scores that do not bound the weights are caught, and the whole list is searched."""
    rng = np.random.default_rng(9)
    words = np.array([f"w{i}" for i in range(60)])
    p = 1.0 / np.arange(1, 61)
    n = 40_000
    texts = [" ".join(rng.choice(words, rng.integers(1, 14), p=p / p.sum())) for _ in range(n)]
    table = pa.table({"id": np.arange(n), "text": texts, "cat": np.arange(n) % 3})
    queries = ["w0", "w1", "w5", "w30", "w59"]
    decoded: list[int] = []
    decode = blockmax.decode_blocks

    def counted(data: Any, offsets: Any, blocks: Any, *rest: Any) -> Any:
        decoded.append(len(blocks))
        return decode(data, offsets, blocks, *rest)

    monkeypatch.setattr(blockmax, "decode_blocks", counted)

    def check(path: str, **extra: Any) -> None:
        ds = dataset(path)
        for q in queries:
            whole = search(ds, full_text_query=q, **extra)
            for limit in (1, 10, 100, 1000):
                part = search(ds, full_text_query=q, limit=limit, **extra)
                assert part.equals(whole.slice(0, limit)), (path, q, limit, extra)

    for builder in ("pylance", "quiver"):
        path = str(tmp_path / builder)
        lance.write_dataset(table, path, max_rows_per_file=15_000)
        if builder == "pylance":
            lance.dataset(path).create_scalar_index("text", "INVERTED", memory_limit=1)
        else:
            dataset(path).create_scalar_index("text", "INVERTED")
        decoded.clear()
        search(dataset(path), full_text_query="w0", limit=10)
        # w0 is in about a third of the rows: 100 blocks and more; its ten best in a few
        assert 0 < sum(decoded) < 40, (builder, decoded)
        decoded.clear()
        search(dataset(path), full_text_query="w0", limit=10)
        assert not decoded  # what a search decoded serves the word's next searches
        check(path)
        check(path, filter="cat = 1", prefilter=True)
        lance.write_dataset(table.slice(0, 3000), path, mode="append")
        check(path)  # unindexed rows: the search's statistics are not the index's
        lance.dataset(path).optimize.optimize_indices()
        check(path)  # a delta segment
        lance.dataset(path).delete("id % 7 = 0")
        check(path)

    original = index_module.block_scores
    monkeypatch.setattr(index_module, "block_scores", lambda *a: original(*a) * np.float32(0.5))
    path = str(tmp_path / "scaled")  # a new index: its blocks are read with the scores halved
    lance.write_dataset(table, path)
    dataset(path).create_scalar_index("text", "INVERTED")
    answers: list[object] = []
    best = blockmax.BlockMax.best

    def watched(self: blockmax.BlockMax, *args: Any) -> Any:
        found = best(self, *args)
        answers.append(found)
        return found

    monkeypatch.setattr(blockmax.BlockMax, "best", watched)
    check(path)
    assert answers and all(found is None for found in answers)


def test_a_batch_answers_each_query_as_alone(tmp_path: Path) -> None:
    """`full_text_query=[...]`: each query's answers in turn after its `query_index`, as
    each query alone answers (limit, offset, postfilter and prefilter per query)."""
    path = str(tmp_path / "ds")
    lance.write_dataset(text_table(800, 21), path, max_rows_per_file=300)
    ours = dataset(path)
    ours.create_scalar_index("text", "INVERTED")
    batch = [*QUERIES[:6], {"query": "blue river", "columns": ["text"]}]
    for extra in (
        {},
        {"limit": 4},
        {"limit": 3, "offset": 2},
        {"filter": "id % 3 = 0", "limit": 5},
        {"filter": "cat = 'c2'", "prefilter": True, "limit": 5},
    ):
        got = search(ours, full_text_query=batch, **extra)
        assert got.column_names[0] == "query_index"
        for i, q in enumerate(batch):
            mine = got.filter(pa.compute.equal(got["query_index"], i)).drop(["query_index"])
            assert mine.equals(search(ours, full_text_query=q, **extra)), (q, extra)
    with pytest.raises(InvalidInputError, match="empty"):
        ours.to_table(full_text_query=[])
    with pytest.raises(InvalidInputError, match="query_index"):
        ours.to_table(full_text_query=["apple"], columns=["query_index"])


@pytest.mark.parametrize("format_version", [1, 2])
def test_positions_of_pylance_indices(tmp_path: Path, format_version: int) -> None:
    """Every token's positions, read from pylance's index files (format 2's shared stream,
    format 1's per-document blobs), are where the analyzer finds the token in each row,
    including rows with more than 128 of them."""
    from quiver.format.dataset.fulltext import inverted_entries
    from quiver.format.index.fts.index import open_inverted

    path = str(tmp_path / "ds")
    texts = text_table(400, 31)["text"].to_pylist()
    texts += [" ".join(["apple banana"] * 150), "banana " * 300 + "cherry"]
    lance.write_dataset(pa.table({"text": texts}), path)
    lance.dataset(path).create_scalar_index(
        "text", "INVERTED", with_position=True, format_version=format_version
    )
    ours = dataset(path)
    [entry] = inverted_entries(ours.core)["text"]
    store, directory = ours.core.resolve(entry.directory, None, relative_to_root=True)
    index = open_inverted(store, directory, entry.uuid)
    analyzer = index.analyzer
    want: dict[str, dict[int, list[int]]] = {}
    for row, text in enumerate(texts):
        for position, token in analyzer.positioned(text):
            want.setdefault(token, {}).setdefault(row, []).append(position)
    checked = 0
    for part in index.partitions:
        for token, by_row in want.items():
            tid = part.token_id(token)
            assert tid is not None, token
            docs, freqs = part.postings(tid)
            flat = part.positions(tid).tolist()
            bounds = [0, *np.cumsum(freqs).tolist()]
            for k, doc in enumerate(docs):
                row = int(part.row_ids[doc])
                assert flat[bounds[k] : bounds[k + 1]] == by_row[row], (token, row)
                checked += 1
    assert checked > 1000


def _phrase_pair(text: str, slop: int, column: str = "text") -> tuple[Any, dict[str, Any]]:
    """The same phrase query for pylance (its query object) and Quiver (its JSON form)."""
    from lance.query import PhraseQuery

    return PhraseQuery(text, column, slop=slop), {
        "phrase": {"terms": text, "column": column, "slop": slop}
    }


def test_phrases_on_every_six_word_row(tmp_path: Path) -> None:
    """Every row of 6 words over 4 (4,096 rows): phrases with repeated words, slop 0 to 3,
    match the rows pylance's greedy walk matches (it misses some placements when words
    repeat, and is not monotonic in slop) with its scores."""
    import itertools

    words = {"x": "xa", "y": "yb", "z": "zc", "f": "fd"}
    combos = list(itertools.product("xyzf", repeat=6))
    texts = [" ".join(words[c] for c in combo) for combo in combos]
    path = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"id": np.arange(len(texts)), "text": texts}), path)
    lance.dataset(path).create_scalar_index("text", "INVERTED", with_position=True)
    theirs, ours = lance.dataset(path), dataset(path)
    for q in ["x y z", "x y", "x x", "x x x", "x y x", "x f y", "x y y", "y x y z"]:
        text = " ".join(words[c] for c in q.split())
        for slop in range(4):
            pq, js = _phrase_pair(text, slop)
            assert_same_answers(
                search(theirs, full_text_query=pq), search(ours, full_text_query=js), f"{q} {slop}"
            )


def test_phrases_of_a_word_always_first(tmp_path: Path) -> None:
    """A word at position 0 of every row: its position groups are all zero, packed in no
    bits (the empty group sits at an odd offset of the stream)."""
    path = str(tmp_path / "ds")
    texts = [f"alpha beta w{i % 5}" for i in range(400)]
    lance.write_dataset(pa.table({"id": np.arange(400), "text": texts}), path)
    lance.dataset(path).create_scalar_index("text", "INVERTED", with_position=True)
    for slop in (0, 1):
        pq, js = _phrase_pair("alpha beta", slop)
        want = search(lance.dataset(path), full_text_query=pq)
        assert want.num_rows == 400
        assert_same_answers(want, search(dataset(path), full_text_query=js), f"slop {slop}")


def test_phrases_as_pylance_answers_them(tmp_path: Path) -> None:
    """Phrase queries (structured and quoted strings) with pylance's answers: positions of
    format 2 and 1, stop words keeping their slots, a single word, rows appended since the
    index (pylance's other rule for them), deletions, prefilters, limits, optimize's second
    partition, a column without an index; refused on an index without positions."""
    path = str(tmp_path / "ds")
    lance.write_dataset(text_table(1500, 61), path, max_rows_per_file=500)
    lance.dataset(path).create_scalar_index("text", "INVERTED", with_position=True)
    phrases = ["quick brown", "brown fox", "the lazy dog", "running runs", "data dataset"]
    phrases += ["lazy the dog", "apple", "of the", "seven eight nine", "brown quick"]

    def compare(what: str, options: list[dict[str, Any]], column: str = "text") -> None:
        theirs, ours = lance.dataset(path), dataset(path)
        for text in phrases:
            for slop in (0, 1, 2):
                pq, js = _phrase_pair(text, slop, column)
                for extra in options:
                    label = f"{what} {text!r} slop {slop} {extra}"
                    want = search(theirs, full_text_query=pq, **extra)
                    assert_same_answers(want, search(ours, full_text_query=js, **extra), label)
            if column == "text":
                quoted = f'"{text}"'
                want = search(theirs, full_text_query=quoted)
                assert_same_answers(want, search(ours, full_text_query=quoted), quoted)

    limits = [{}, {"limit": 5}, {"filter": "cat = 'c1'", "prefilter": True, "limit": 7}]
    compare("indexed", limits)
    lance.write_dataset(text_table(300, 62, start=1500), path, mode="append")
    lance.dataset(path).delete("id % 7 = 3")
    compare("appended", [*limits, {"fast_search": True}])
    lance.dataset(path).optimize.optimize_indices()
    compare("optimized", [{}, {"limit": 4}])
    compare("no index", [{}], column="title")
    v1 = str(tmp_path / "v1")
    lance.write_dataset(text_table(600, 63), v1)
    lance.dataset(v1).create_scalar_index("text", "INVERTED", with_position=True, format_version=1)
    for text in phrases:
        pq, js = _phrase_pair(text, 1)
        want = search(lance.dataset(v1), full_text_query=pq)
        assert_same_answers(want, search(dataset(v1), full_text_query=js), f"v1 {text}")
    plain = str(tmp_path / "plain")
    lance.write_dataset(text_table(50, 64), plain)
    lance.dataset(plain).create_scalar_index("text", "INVERTED")
    with pytest.raises(InvalidInputError, match="position is not found"):
        dataset(plain).to_table(full_text_query='"quick fox"')
    with pytest.raises(InvalidInputError, match="slop"):
        dataset(path).to_table(full_text_query={"phrase": {"terms": "a b", "slop": -1}})


def test_fuzzy_matches_as_pylance_expands_them(tmp_path: Path) -> None:
    """Fuzzy match queries with pylance's answers: the query split only (case kept), its
    tokens expanded in byte order within the edit distance, one max_expansions budget for
    the whole query, the prefix in characters, AND needing an expansion of every token;
    appended rows matched exactly; a second partition after optimize."""
    from lance.query import FullTextOperator, MatchQuery

    rng = np.random.default_rng(9)
    words = "quick quik quack qiuck quicker brown brwn brow crown frown fox fix fax box"
    words += " jump jumps jumping café cafe cafés naïve über uber straße strasse the thy"
    vocabulary = words.split()
    texts = [" ".join(rng.choice(vocabulary, rng.integers(1, 9))) for _ in range(2500)]
    path = str(tmp_path / "ds")
    table = pa.table({"id": np.arange(len(texts)), "text": texts})
    lance.write_dataset(table, path, max_rows_per_file=1000)
    lance.dataset(path).create_scalar_index("text", "INVERTED")
    queries = ["quick", "Quick brown", "QUICK", "qiuck brwn fox", "the", "jumpin", "cafe über"]
    queries += ["strase naive", "fx bx", "brown quick"]
    settings = [
        {"fuzziness": 1},
        {"fuzziness": 2},
        {"fuzziness": 1, "max_expansions": 2},
        {"fuzziness": 2, "max_expansions": 3},
        {"fuzziness": 1, "prefix_length": 2},
        {"fuzziness": 2, "prefix_length": 1, "max_expansions": 4},
    ]

    def compare(what: str, options: list[dict[str, Any]]) -> None:
        theirs, ours = lance.dataset(path), dataset(path)
        for q in queries:
            for fuzzy in settings:
                for operator in ("Or", "And"):
                    pq = MatchQuery(
                        q, "text", operator=getattr(FullTextOperator, operator.upper()), **fuzzy
                    )
                    js = {"match": {"terms": q, "column": "text", "operator": operator, **fuzzy}}
                    for extra in options:
                        assert_same_answers(
                            search(theirs, full_text_query=pq, **extra),
                            search(ours, full_text_query=js, **extra),
                            f"{what} {q!r} {fuzzy} {operator} {extra}",
                        )

    compare("indexed", [{}, {"limit": 5}])
    lance.write_dataset(table.slice(0, 200), path, mode="append")
    lance.dataset(path).delete("id % 11 = 4")
    compare("appended", [{}, {"fast_search": True}])
    lance.dataset(path).optimize.optimize_indices()
    compare("optimized", [{}])


def test_fuzzy_automata_past_the_limit_are_refused_as_pylance(tmp_path: Path) -> None:
    """pylance refuses a fuzzy token whose Levenshtein automaton passes 10,000 states (the
    fst crate's for ASCII tokens, lance's own after the prefix for others); Quiver refuses
    exactly the same queries with the same message, and answers the others alike."""
    from lance.query import MatchQuery

    path = str(tmp_path / "ds")
    texts = ["abcdefghijkl quick", "mnopqrstuvwx fox", "ñandúñandú über", "quick brown"]
    lance.write_dataset(pa.table({"id": np.arange(4), "text": texts}), path)
    lance.dataset(path).create_scalar_index("text", "INVERTED")
    cases = [
        ("abcdefghijk", 3, 0),  # 9,865 states: answered
        ("abcdefghijkl", 3, 0),  # refused
        ("abcdefghijkl", 3, 4),  # a prefix does not help an ASCII token
        ("a" * 40, 5, 0),  # repeated characters stay small
        ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW", 2, 0),  # 9,829: answered
        ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX", 2, 0),  # refused
        ("αβγδεζηθικλμνξο", 4, 0),  # lance's Unicode builder: answered
        ("αβγδεζηθικλμνξοπ", 4, 0),  # refused
        ("αβγδεζηθικλμνξοπ", 4, 1),  # refused: 9,733 states only from a prefix of 2
        ("αβγδεζηθικλμνξοπ", 4, 2),  # answered
        ("quick abcdefghijklm", 3, 0),  # the second token refuses the query
    ]
    theirs, ours = lance.dataset(path), dataset(path)
    for term, distance, prefix in cases:
        pq = MatchQuery(term, "text", fuzziness=distance, prefix_length=prefix)
        js = {"match": {"terms": term, "column": "text", "fuzziness": distance,
                        "prefix_length": prefix}}  # fmt: skip
        try:
            want = search(theirs, full_text_query=pq)
        except ValueError as e:
            reason = str(e).split("failed to construct the fuzzy query: ")[1].split(",")[0]
            with pytest.raises(InvalidInputError, match=re.escape(reason)):
                search(ours, full_text_query=js)
            continue
        assert_same_answers(want, search(ours, full_text_query=js), f"{term} {distance}")


def test_best_positions_rank_as_a_full_sort() -> None:
    """A frequent word's best rows: the positions a full sort by weight (best first, ties
    by position) puts first, whatever the weights' ties and order."""
    from quiver.format.dataset.fulltext_ranking import best_positions

    rng = np.random.default_rng(7)
    shapes = (
        lambda n: rng.random(n),
        lambda n: np.round(rng.random(n) * 3, 1),
        lambda n: np.full(n, 1.5),
        lambda n: np.sort(rng.random(n)),
        lambda n: np.where(rng.random(n) < 0.999, 0.5, rng.random(n)),
    )
    for trial in range(1500):
        n = int(rng.integers(1, 5000)) if trial % 10 else int(rng.integers(50_000, 200_000))
        weights = shapes[trial % len(shapes)](n).astype(np.float32)
        k = int(rng.integers(1, min(n, 3000) + 1))
        expected = np.lexsort((np.arange(n), -weights))[:k]
        np.testing.assert_array_equal(best_positions(weights, k), expected, err_msg=f"{n} {k}")


def test_string_queries_leave_indices_of_list_elements_aside(tmp_path):
    """pylance's `document_granularity=LIST_ELEMENT` indices take each list element as a
    document; a string query (every indexed column) never uses them, in pylance nor in
    Quiver (a row index of the same column answers, or the search is refused as pylance
    refuses it); `optimize_indices` and compaction keep them indices of list elements
    (their searches: test_fulltext_elements.py)."""
    from lance.query import DocumentGranularity, MatchQuery

    tags = [["hello world", "foo"], ["bar baz", "hello hello there"], [], None] * 25
    table = pa.table({"id": np.arange(100), "tags": pa.array(tags, pa.list_(pa.string()))})
    only = str(tmp_path / "only.lance")
    lance.write_dataset(table, only, max_rows_per_file=50)
    granularity = DocumentGranularity.LIST_ELEMENT
    lance.dataset(only).create_scalar_index("tags", "INVERTED", document_granularity=granularity)
    with pytest.raises(InvalidInputError, match="unless an INVERTED index has been created"):
        dataset(only).to_table(full_text_query="hello")
    both = str(tmp_path / "both.lance")
    shutil.copytree(only, both)
    lance.dataset(both).create_scalar_index("tags", "INVERTED")
    ours = dataset(both).to_table(full_text_query="hello", columns=["id"]).sort_by("id")
    theirs = lance.dataset(both).to_table(full_text_query="hello", columns=["id"]).sort_by("id")
    assert ours.column("id").to_pylist() == theirs.column("id").to_pylist()  # (tied scores)
    assert np.allclose(ours.column("_score"), theirs.column("_score"), rtol=1e-4)
    lance.write_dataset(table, only, mode="append")
    dataset(only).optimize.optimize_indices()
    dataset(only).optimize.compact_files(target_rows_per_fragment=1000)
    match = MatchQuery("hello", "tags")
    theirs = lance.dataset(only).to_table(full_text_query=match, columns=["id"])
    assert theirs.num_rows == 100  # each "hello" element of the 200 rows, all indexed
    ours = dataset(only).to_table(
        full_text_query={"match": {"terms": "hello", "column": "tags"}}, columns=["id"]
    )
    assert sorted(ours["_score"].to_pylist()) == pytest.approx(sorted(theirs["_score"].to_pylist()))
