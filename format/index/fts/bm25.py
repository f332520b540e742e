"""BM25 as pylance 14 scores full-text matches, to the bit: every step in float32, in
pylance's order of operations (k1 = 1.2, b = 0.75).

A posting's weight for a token is ``idf * ((k1 + 1) * f / (f + k1 * ((1 - b) + b * length
/ avgdl)))``, with ``idf = ln((N - n + 0.5) / (n + 0.5) + 1)`` for N documents of which n
hold the token, f its frequency in the document and avgdl the documents' mean length in
tokens. Searches weigh with the statistics of every segment searched; index builds store
each block's best weight under their partition's statistics.
"""

from __future__ import annotations

import numpy as np

from quiver.format import _kernels
from quiver.format.errors import CorruptFileError

K1 = np.float32(1.2)
B = np.float32(0.75)
_F = np.float32


def idf(matching: np.ndarray | int, documents: int) -> np.ndarray:
    """Inverse document frequency of tokens held by `matching` of `documents` documents
    (the C library's logf, as pylance's: numpy's float32 log differs in the last bit)."""
    n = np.asarray(matching, np.float32)
    flat = np.ascontiguousarray(n.reshape(-1))
    out = np.empty_like(flat)
    _kernels.bm25_idf(flat, float(_F(documents)), out)
    return out.reshape(n.shape)[()]


def mean_length(tokens: int, documents: int) -> np.float32:
    """avgdl: the documents' mean length in tokens."""
    return _F(_F(tokens) / _F(documents))


def norms(lengths: np.ndarray, avgdl: np.float32) -> np.ndarray:
    """Each document's length term, ``k1 * ((1 - b) + b * length / avgdl)``."""
    return K1 * (_F(1) - B + B * lengths.astype(np.float32) / avgdl)


def weights(token_idf: np.ndarray | np.float32, freqs: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """Postings' weights from their frequencies and their documents' `norms`."""
    f = freqs.astype(np.float32)
    return (token_idf * ((K1 + _F(1)) * f / (f + norm))).astype(np.float32)


def gathered(
    docs: np.ndarray,
    freqs: np.ndarray,
    row_ids: np.ndarray,
    lengths: np.ndarray,
    token_idf: np.float32,
    avgdl: np.float32,
    where: str,
) -> tuple[np.ndarray, np.ndarray, bool]:
    """One token's postings in a partition (document ids and frequencies, uint32) as
    (row ids, weights, whether the row ids ascend), from the partition's row id and length
    per document: one pass of a kernel, the same bits as `weights` over `norms`."""
    rows = np.empty(len(docs), np.uint64)
    out = np.empty(len(docs), np.float32)
    bad, ascending = _kernels.bm25_gather(
        np.ascontiguousarray(docs, np.uint32),
        np.ascontiguousarray(freqs, np.uint32),
        np.ascontiguousarray(row_ids, np.uint64),
        np.ascontiguousarray(lengths, np.float32),
        float(token_idf),
        float(avgdl),
        rows,
        out,
    )
    if bad >= 0:
        raise CorruptFileError(where, "a posting names a document that is not there")
    return rows, out, bool(ascending)


def summed(rows: list[np.ndarray], weights: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(row ids ascending, scores): per row holding any of the query's tokens (`rows[i]`
    ascending, one list per token in query order, a repeated token repeated), its weights
    summed in query order in float32, as a search sums them token after token."""
    every = np.concatenate(rows)
    weight = np.concatenate(weights)
    order = np.argsort(every, kind="stable")  # merges the sorted runs, keeps query order
    every, weight = every[order], weight[order]
    firsts = np.flatnonzero(np.concatenate(([True], every[1:] != every[:-1])))
    sizes = np.diff(np.append(firsts, len(every)))
    scores = weight[firsts].astype(np.float32)
    for j in range(1, int(sizes.max()) if len(sizes) else 0):
        more = sizes > j
        scores[more] += weight[firsts[more] + j]
    return every[firsts], scores
