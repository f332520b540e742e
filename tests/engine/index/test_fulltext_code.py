"""INVERTED indices of pylance 14's code analyzer (`analyzer="code"`: identifiers split at
underscores, camel case and digits, operators as tokens) against pylance: the tokens and
positions of crafted texts as pylance's index holds them, the same answers (phrases too) on
either engine's index with rows appended since, the same parameters, details and format
version, and pylance's refusals."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

import lance
import lance.query as lq
import pyarrow as pa
import pytest
from fulltext_corpus import assert_same_answers, search

from quiver.format.dataset import dataset
from quiver.format.dataset import query as qq
from quiver.format.errors import InvalidInputError
from quiver.format.index.fts.analyzer import CODE_FLAGS, Analyzer, AnalyzerParams
from quiver.format.index.fts.code_tokens import CodeOptions
from quiver.format.index.fts.index import open_partition
from quiver.format.io.store import open_store
from quiver.format.table.indices import indices_of

pytestmark = pytest.mark.compat

TEXTS = [
    "def getUserName(self): return self.user_name",
    "class HTTPServer2Go: pass",
    "x = a+b == c && y->z",
    "for i18n in range(10): print(i18n)",
    "XMLHttpRequest req = new XMLHttpRequest();",
    "__init__(self, snake_case_Name) _priv snake_ a__b",
    "v2 = abc123def >>>= 3 <<< 4 =~ 5 ?. 6",
    "if (a <= b || c != d) {} mixedCASEWord ABCdef AbC aBC ID2name",
    None,
    "",
    "café_Ünïcode getUser ÀbcDéf",
    "getUser getUserName",
    "user name get",
]
OPTIONS = [
    {"analyzer": "code"},
    {"analyzer": "code", "split_identifiers": True, "with_position": True},
    {
        "analyzer": "code",
        "split_identifiers": True,
        "split_on_numerics": False,
        "preserve_original": False,
        "index_operators": True,
        "with_position": True,
    },
    {"base_tokenizer": "code", "stem": True, "remove_stop_words": True, "split_identifiers": True},
]


def _indexed_positions(path: str) -> dict[str, list[int]]:
    """Every token of a one-partition index and its positions, as the files hold them."""
    [directory] = glob.glob(f"{path}/_indices/*")
    store = open_store(os.path.dirname(directory))
    part = open_partition(store, os.path.basename(directory), 0, "fst")
    return {tok: part.positions(tid).tolist() for tok, tid in part.tokens.items()}


@pytest.mark.parametrize("options", OPTIONS[1:3], ids=["split", "operators"])
def test_tokens_and_positions_are_pylance_s(tmp_path: Path, options: dict[str, Any]) -> None:
    flags = CodeOptions(**{k: v for k, v in options.items() if k in CODE_FLAGS})
    params = AnalyzerParams(base_tokenizer="code", stem=False, remove_stop_words=False, code=flags)
    analyzer = Analyzer(params)
    for i, text in enumerate(t for t in TEXTS if t):
        path = str(tmp_path / f"one{i}")
        lance.write_dataset(pa.table({"text": [text]}), path)
        lance.dataset(path).create_scalar_index("text", "INVERTED", **options)
        ours: dict[str, list[int]] = {}
        for position, token in analyzer.positioned(text):
            ours.setdefault(token, []).append(position)
        assert ours == _indexed_positions(path), text


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "split", "operators", "stemmed"])
def test_code_indices_answer_as_pylance(tmp_path: Path, options: dict[str, Any]) -> None:
    table = pa.table({"id": pa.array(range(len(TEXTS)), pa.int64()), "text": TEXTS})
    more = pa.table({"id": pa.array([100], pa.int64()), "text": ["getUserName user_name = i18n"]})
    paths = {}
    for who, build in (("quiver", dataset), ("pylance", lance.dataset)):
        paths[who] = str(tmp_path / who)
        lance.write_dataset(table, paths[who])
        build(paths[who]).create_scalar_index("text", "INVERTED", **options)
        lance.write_dataset(more, paths[who], mode="append")  # rows no index covers
    # the same parameters, details and format version as pylance's own build
    recorded = [indices_of(dataset(p)._core.manifest)[0] for p in paths.values()]
    assert recorded[0].details == recorded[1].details
    assert recorded[0].index_version == recorded[1].index_version
    queries = ["getUserName", "user", "i18n", "18", "http server", "xml", "==", "&&", ">>>=",
               "snake case", "__init__", "abc123def", "cafe unicode"]  # fmt: skip
    for text in queries:
        pairs = [(text, text)]
        if options.get("with_position"):
            pairs.append((lq.PhraseQuery(text, "text"), qq.PhraseQuery(text, "text")))
        for theirs, ours in pairs:
            want = search(lance.dataset(paths["pylance"]), full_text_query=theirs)
            for label, ds, query in (
                ("quiver on pylance's", dataset(paths["pylance"]), ours),
                ("quiver on quiver's", dataset(paths["quiver"]), ours),
                ("pylance on quiver's", lance.dataset(paths["quiver"]), theirs),
            ):
                got = search(ds, full_text_query=query)
                assert_same_answers(want, got, f"{label} {text!r} {options}")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"analyzer": "code", "format_version": 2}, "requires FTS format_version=3"),
        ({"analyzer": "code", "base_tokenizer": "simple"}, "requires base_tokenizer='code'"),
        ({"analyzer": "text", "split_identifiers": True}, "require analyzer='code'"),
        ({"analyzer": "prose"}, "unknown analyzer"),
    ],
)
def test_refusals_as_pylance(tmp_path: Path, options: dict, message: str) -> None:
    path = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"text": ["getUserName"]}), path)
    with pytest.raises(Exception, match=message):
        lance.dataset(path).create_scalar_index("text", "INVERTED", **options)
    with pytest.raises(InvalidInputError, match=message):
        dataset(path).create_scalar_index("text", "INVERTED", **options)
