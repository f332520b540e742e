"""Combined-fields (BM25F) full-text queries: pylance 14's `CombinedFieldsQuery`.

The target columns are scored as one field (Lucene's `CombinedFieldQuery`, Elasticsearch's
``combined_fields``), each column weighted by its boost w (1 by default):

- a row's frequency of a token is ``sum(w * tf)`` over the columns, its length
  ``sum(w * length)`` (a column's length: its tokens, 0 for a null or empty text);
- the documents N are the most any one column has (documents: texts with a token), the
  mean length ``sum(w * tokens) / N``, a token's document frequency the most any one
  column has;
- a row then scores as BM25 scores one field (`format.index.fts.bm25`), summed over the
  query's distinct tokens; with `AND`, only rows holding every token somewhere.

Checked against pylance's answers (`tests/engine/index/test_fulltext_combined.py`): the
statistics of a column are its index's (rows deleted since still count) plus those of its
rows no index covers, read and analysed with the index's analyzer, as are the rows of a
target column without an index; every target column must share one analyzer, and at least
one must have a row index. With `fast_search`, rows no index covers are left out, and a
target column without an index leaves no answer at all, as in pylance.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from quiver.format.dataset.fulltext_query import Combined
from quiver.format.dataset.fulltext_statistics import Corpus, analysed_batch
from quiver.format.dataset.scan import ROW_ID_FIELD
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError
from quiver.format.index.fts import bm25
from quiver.format.index.fts.analyzer import Analyzer
from quiver.format.index.fts.index import InvertedIndex

if TYPE_CHECKING:
    from quiver.format.dataset.fulltext import FullTextSearch

_F = np.float32


@dataclass
class _Column:
    """One target column's statistics and the query tokens' postings in it."""

    stats: Corpus = field(default_factory=Corpus)  # documents, tokens, per-token documents
    # per token: (row ids, frequencies) of the rows that may answer
    hits: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    indices: list[InvertedIndex] = field(default_factory=list)
    # rows no index covers: their row ids (sorted) and lengths
    flat_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    flat_lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))

    def lengths(self, rows: np.ndarray) -> np.ndarray:
        """The length of each of `rows` (sorted row ids) in this column (0: no text)."""
        out = np.zeros(len(rows), np.float32)
        for index in self.indices:
            for part in index.partitions:
                ordered, lengths = part.by_row_id
                _fill(out, rows, ordered, lengths)
        _fill(out, rows, self.flat_rows, self.flat_lengths)
        return out


def _fill(out: np.ndarray, rows: np.ndarray, keys: np.ndarray, values: np.ndarray) -> None:
    """out[i] = values[j] where rows[i] == keys[j] (`keys` sorted)."""
    if not len(keys) or not len(rows):
        return
    at = np.minimum(np.searchsorted(keys, rows), len(keys) - 1)
    hit = keys[at] == rows
    out[hit] = values[at[hit]]


def combined_rows(search: FullTextSearch, query: Combined) -> tuple[np.ndarray, np.ndarray]:
    """(row ids ascending, scores) of the rows a combined-fields query matches."""
    where = search.core.uri
    entries = {c: search.indexed_columns.get(c, []) for c in query.columns}
    for column in query.columns:
        if not entries[column] and column in search.element_entries:
            raise UnsupportedFeatureError(
                f"{where}: combined_fields (BM25F) scores whole rows and needs a row "
                f"full-text index on every indexed target column, but {column!r} only has "
                "an index of list elements"
            )
    if not any(entries.values()):
        raise InvalidInputError(
            f"{where}: combined_fields requires an inverted index on at least one of "
            f"{list(query.columns)}"
        )
    opened = {c: [search.open_index(e) for e in entries[c]] for c in query.columns}
    analyzer = _shared_analyzer(opened, query.columns, where)
    tokens = list(dict.fromkeys(t for _, t in analyzer.query_tokens(query.text)))
    empty = np.empty(0, np.uint64), np.empty(0, np.float32)
    if not tokens or (search.fast_search and not all(opened.values())):
        return empty
    columns = [_gather(search, c, entries[c], opened[c], analyzer, tokens) for c in query.columns]
    weights = [_F(w) for w in query.boosts]
    parts = [rows for col in columns for rows, _ in col.hits.values()]
    if not parts:
        return empty
    rows = np.unique(np.concatenate(parts))
    documents = max(col.stats.docs for col in columns)
    if not documents:
        return empty
    total = _F(0)
    for col, w in zip(columns, weights, strict=True):
        total += w * _F(col.stats.tokens)
    avgdl = _F(total / _F(documents))
    length = np.zeros(len(rows), np.float32)
    for col, w in zip(columns, weights, strict=True):
        length += w * col.lengths(rows)
    norm = bm25.norms(length, avgdl)
    scores = np.zeros(len(rows), np.float32)
    holds_all = np.ones(len(rows), bool)
    for token in tokens:
        freq = np.zeros(len(rows), np.float32)
        for col, w in zip(columns, weights, strict=True):
            if token in col.hits:
                ids, counts = col.hits[token]
                freq[np.searchsorted(rows, ids)] += w * counts.astype(np.float32)
        held = freq > 0
        holds_all &= held
        df = max(col.stats.df[token] for col in columns)
        if df:
            idf = _F(bm25.idf(df, documents))
            scores[held] += bm25.weights(idf, freq[held], norm[held])
    keep = scores > 0
    if query.require_all:
        keep &= holds_all
    return rows[keep], scores[keep]


def _shared_analyzer(
    opened: dict[str, list[InvertedIndex]], columns: tuple[str, ...], where: str
) -> Analyzer:
    """The one analyzer of every indexed target column (pylance refuses others; whether an
    index keeps positions is no part of how it tokenizes)."""
    indexed = [c for c in columns if opened[c]]
    first = opened[indexed[0]][0]
    config = replace(first.params, with_position=False)
    differ = [c for c in indexed[1:] if replace(opened[c][0].params, with_position=False) != config]
    if differ:
        raise InvalidInputError(
            f"{where}: combined_fields requires every target column to share the same "
            f"tokenizer/index configuration; column(s) {differ} differ from column "
            f"{indexed[0]!r}"
        )
    return first.analyzer


def _gather(
    search: FullTextSearch,
    column: str,
    entries: list,
    indices: list[InvertedIndex],
    analyzer: Analyzer,
    tokens: list[str],
) -> _Column:
    """A column's statistics and postings: its index segments', then its rows no index
    covers (unless `fast_search`), read and analysed."""
    out = _Column(indices=indices)
    covered = search.covered_fragments(entries) if entries else set()
    for index in indices:
        out.stats.docs += index.num_docs
        out.stats.tokens += index.total_tokens
        for token in tokens:
            out.stats.df[token] += index.document_frequency(token)
    for token, (ids, freqs, _) in search.indexed_postings(indices, tokens, covered).items():
        out.hits[token] = (ids, freqs)
    rest = [f for f in search.fragments if f.fragment_id not in covered]
    if rest and not search.fast_search:
        _read_flat(search, column, rest, analyzer, set(tokens), out)
    return out


def _read_flat(
    search: FullTextSearch,
    column: str,
    fragments: list,
    analyzer: Analyzer,
    wanted: set[str],
    out: _Column,
) -> None:
    """Rows of `fragments` analysed into `out`: statistics, lengths and postings. Every
    live row counts in the statistics; rows a prefilter or a row mask drops never answer
    (pylance's combined-fields statistics take them all)."""
    allowed = None
    if search.prefilter and search.filter is not None:
        kept = [
            b.column(ROW_ID_FIELD.name).to_numpy() for b in search.read_rows(fragments, [], True)
        ]
        allowed = np.sort(np.concatenate(kept)) if kept else np.zeros(0, np.uint64)
    rows, lengths = [], []
    hits: dict[str, tuple[list[int], list[int], list[int]]] = {t: ([], [], []) for t in wanted}
    for batch in search.read_rows(fragments, [column], False):
        ids = batch.column(ROW_ID_FIELD.name).to_numpy()
        masked = None if search.row_mask is None else search.row_mask.keep(ids)
        if allowed is not None:
            inside = np.isin(ids, allowed)
            masked = inside if masked is None else masked & inside
        per_row = analysed_batch(
            batch.column(column), ids, masked, analyzer, wanted, out.stats, hits
        )
        held = per_row > 0
        rows.append(ids[held].astype(np.uint64))
        lengths.append(per_row[held].astype(np.float32))
    every = np.concatenate(rows) if rows else np.zeros(0, np.uint64)
    order = np.argsort(every, kind="stable")
    out.flat_rows = every[order]
    out.flat_lengths = (np.concatenate(lengths) if lengths else np.zeros(0, np.float32))[order]
    for t, (ids, freqs, _) in hits.items():
        if not ids:
            continue
        ids_a, freqs_a = np.array(ids, np.uint64), np.array(freqs, np.uint32)
        if t in out.hits:
            ids_a = np.concatenate([out.hits[t][0], ids_a])
            freqs_a = np.concatenate([out.hits[t][1], freqs_a])
        out.hits[t] = (ids_a, freqs_a)
