"""INVERTED indices of 256-document posting blocks (pylance 14's `format_version=3,
block_size=256`): pylance's searched with its scores (quantized document lengths, phrase
positions in 256-document segments), Quiver's written with pylance's postings byte for byte
and searched by pylance as its own, through appends, `optimize_indices` and compaction."""

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
from lance.query import PhraseQuery

from quiver.format.dataset import dataset
from quiver.format.index.fts import bm25
from quiver.format.index.fts.wide import pack8x, quantized_lengths, unpack8x

pytestmark = pytest.mark.compat

# vowel-less words pass the English analyzer unchanged (no stemming, no stop word)
WORDS = ["".join(w) for w in np.random.default_rng(0).choice(list("bcdfghjklmnprstvwxz"), (400, 4))]


def _table(rng: np.random.Generator, rows: int, start: int = 0) -> pa.Table:
    """Zipf-distributed words, documents of 1 to ~600 words, some words repeated hundreds
    of times (frequencies past the packed width: exceptions), every 31st row null."""
    weights = 1 / np.arange(1, len(WORDS) + 1)
    weights /= weights.sum()
    texts: list[str | None] = []
    for i in range(start, start + rows):
        if i % 31 == 0:
            texts.append(None)
            continue
        n = int(rng.choice([1, 3, 9, 20, 70, 600], p=[0.1, 0.3, 0.3, 0.2, 0.08, 0.02]))
        words = list(rng.choice(WORDS, n, p=weights))
        if i % 97 == 0:
            words += [WORDS[3]] * int(rng.integers(100, 3000))
        texts.append(" ".join(words))
    return pa.table({"id": pa.array(range(start, start + rows)), "text": texts})


def _scores(t: pa.Table) -> dict[int, float]:
    return dict(zip(t["_rowid"].to_pylist(), t["_score"].to_pylist(), strict=True))


def _run(ds: Any, query: Any, **kw: Any) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ds.to_table(full_text_query=query, columns=[], with_row_id=True, **kw)


def _same(uri: str, seed: int, what: str, reference: str | None = None) -> None:
    """Quiver's answers on `uri` (and pylance's on it) as pylance's on `reference` (default
    `uri`): every row's score bit for bit; the same rows but for those tied at the last
    score a limit cuts (pylance picks among them arbitrarily)."""
    rng = np.random.default_rng(seed)
    for i in range(12):
        q = " ".join(rng.choice(WORDS[:60], 1 + i % 3))
        for kw in ({}, {"limit": 10}):
            want = _scores(_run(lance.dataset(reference or uri), q, **kw))
            for got in (
                _scores(_run(dataset(uri), q, **kw)),
                _scores(_run(lance.dataset(uri), q, **kw)),
            ):
                assert len(got) == len(want), (what, q, kw)
                for row in set(got) & set(want):
                    assert got[row] == want[row], (what, q, kw, row)
                last = min(want.values(), default=0)
                assert {r for r, s in got.items() if s > last} == {
                    r for r, s in want.items() if s > last
                }, (what, q, kw)


def test_bitpacker8x_and_quantized_lengths() -> None:
    rng = np.random.default_rng(1)
    for bits in (0, 1, 7, 13, 32):
        values = rng.integers(0, 1 << bits, (5, 256), dtype=np.uint64).astype(np.uint32)
        words = pack8x(values, bits)
        assert words.shape == (5, 8 * bits)
        np.testing.assert_array_equal(unpack8x(words, bits), values)
    lengths = np.array([0, 1, 15, 16, 17, 31, 35, 100, 1000, 140704])
    expected = [0, 1, 15, 16, 16, 30, 32, 96, 960, 131072]
    assert quantized_lengths(lengths).tolist() == expected
    # the C library's logf, as pylance's scorer: bit for bit where numpy's log is not
    assert bm25.idf(10833, 11755) == np.float32(0.08172053)


def test_pylance_wide_indices_answer_as_pylance(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    uri = str(tmp_path / "docs.lance")
    lance.write_dataset(_table(rng, 2500), uri, max_rows_per_file=1000).create_scalar_index(
        "text", "INVERTED", block_size=256, with_position=True
    )
    _same(uri, 3, "pylance's index")
    for i in range(6):
        row = _table(np.random.default_rng(i), 40)["text"][5 + i].as_py() or ""
        phrase = " ".join(row.split()[1:3])
        if not phrase:
            continue
        theirs = _run(lance.dataset(uri), PhraseQuery(phrase, "text"))
        ours = _run(dataset(uri), {"phrase": {"terms": phrase, "column": "text"}})
        assert _scores(ours) == _scores(theirs), phrase
    lance.write_dataset(_table(rng, 300, 2500), uri, mode="append")
    lance.dataset(uri).delete("id % 11 = 0")
    _same(uri, 4, "after an append and a delete")


def test_quiver_writes_wide_indices_as_pylance(tmp_path: Path) -> None:
    """The same documents and postings (bytes) as pylance's index of the same rows, the
    same details; pylance's answers on Quiver's index are its own; optimize_indices and
    compaction by Quiver keep the blocks wide and the answers pylance's."""
    rng = np.random.default_rng(5)
    table = _table(rng, 2000)
    ours_uri, theirs_uri = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    lance.write_dataset(table, ours_uri)
    lance.write_dataset(table, theirs_uri).create_scalar_index(
        "text", "INVERTED", block_size=256, with_position=True
    )
    dataset(ours_uri).create_scalar_index("text", "INVERTED", block_size=256, with_position=True)

    def files(uri: str) -> dict[str, pa.Table]:
        directory = f"{uri}/_indices/{os.listdir(f'{uri}/_indices')[0]}"
        return {
            name: LanceFileReader(f"{directory}/part_0_{name}.lance").read_all().to_table()
            for name in ("docs", "invert")
        }

    ours, theirs = files(ours_uri), files(theirs_uri)
    assert ours["docs"].equals(theirs["docs"])
    for column in ("_posting", "_length", "_compressed_position", "_position_block_offset"):
        assert ours["invert"][column].equals(theirs["invert"][column]), column
    assert ours["invert"].schema.metadata[b"posting_block_size"] == b"256"
    (mine,) = lance.dataset(ours_uri).describe_indices()
    assert mine.name == "text_idx"
    _same(ours_uri, 6, "pylance and Quiver on Quiver's index", reference=theirs_uri)
    dataset(ours_uri).insert(_table(rng, 200, 2000))
    dataset(ours_uri).optimize.optimize_indices()
    _same(ours_uri, 7, "after Quiver's optimize_indices")
    dataset(ours_uri).delete("id % 9 = 0")
    dataset(ours_uri).optimize.compact_files(target_rows_per_fragment=5000)
    _same(ours_uri, 8, "after Quiver's compaction")
