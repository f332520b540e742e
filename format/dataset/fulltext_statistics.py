"""The statistics BM25 scores against, and rows no index covers analysed into them.

A search weighs indexed rows with their index's statistics and rows no index covers
(appended since, or a column without an index) with those plus theirs: documents (texts
with a token), their tokens, and documents per token. `analysed_batch` reads a batch of
such rows at once through the analyzer's bulk split (`Analyzer.occurrences`).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa

from quiver.format.index.fts import bm25
from quiver.format.index.fts.analyzer import Analyzer

_F = np.float32


class Corpus:
    """Statistics BM25 scores against: documents, their tokens, documents per token."""

    def __init__(self, docs: int = 0, tokens: int = 0, df: Counter[str] | None = None) -> None:
        self.docs, self.tokens, self.df = docs, tokens, df or Counter()

    def __add__(self, other: Corpus) -> Corpus:
        return Corpus(self.docs + other.docs, self.tokens + other.tokens, self.df + other.df)

    def statistics(self, token: str) -> tuple[np.float32, np.float32]:
        """(idf, avgdl) BM25 weighs `token`'s postings with."""
        return _F(bm25.idf(self.df[token], self.docs)), bm25.mean_length(self.tokens, self.docs)

    def weights(self, token: str, freqs: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Each document's BM25 weight for `token` (float32, pylance's order of operations)."""
        idf, avgdl = self.statistics(token)
        return bm25.weights(idf, freqs, bm25.norms(lengths, avgdl))


def analysed_batch(
    texts: pa.Array,
    ids: np.ndarray,
    masked: np.ndarray | None,
    analyzer: Analyzer,
    wanted: set[str],
    corpus: Corpus,
    hits: dict[str, tuple[list[int], list[int], list[int]]],
) -> np.ndarray:
    """One batch of rows no index covers, analysed in bulk into the statistics and the
    query tokens' `hits` (row ids, frequencies, lengths; rows `masked` drops count in the
    statistics only); each row's length in tokens."""
    found = analyzer.occurrences(texts, positions=False)
    lengths = np.bincount(found.rows, minlength=len(texts))
    corpus.docs += int(np.count_nonzero(lengths))
    corpus.tokens += int(lengths.sum())
    numbers = {token: i for i, token in enumerate(found.vocabulary)}
    for token in wanted:
        tid = numbers.get(token)
        if tid is None:
            continue
        rows, freqs = np.unique(found.rows[found.token_ids == tid], return_counts=True)
        corpus.df[token] += len(rows)
        if masked is not None:
            keep = masked[rows]
            rows, freqs = rows[keep], freqs[keep]
        held = hits[token]
        held[0].extend(ids[rows].tolist())
        held[1].extend(freqs.tolist())
        held[2].extend(lengths[rows].tolist())
    return lengths
