"""K-means, as vector index builds train it: IVF centroids and PQ codebooks.

Lloyd's algorithm as pylance 14 runs it: centroids start as distinct rows chosen at random,
then every iteration assigns each row to its nearest centroid (squared l2, or 1 - dot for the
dot metric; cosine callers normalise rows first and train by l2) and moves each centroid to
the mean of its rows, until the loss (the sum of the distances) changes by less than
`tolerance` of itself or `max_iters` pass. A centroid left without rows takes half of a
populous cluster (both nudged apart), so none stays empty.

Assignment is the cost. It is one matrix product per chunk of rows (BLAS), chunks spread over
the cores:
|x - c|^2 = |x|^2 + (|c|^2 - 2 x.c), the bracket from rows extended with a 1 against
centroids extended with |c|^2, then an argmin per row. The product rounds otherwise than
pylance's own distance kernel, so the final assignment of an index's rows settles near-ties
(the few rows whose best centroids are closer than the roundings can tell) with pylance's
float32 distance (`f32.l2_lanes`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from threadpoolctl import ThreadpoolController

from quiver.format.index.vector.f32 import l2_lanes

__all__ = ["KMeans", "assign", "kmeans", "normalize"]

# Rows per matrix product: the (rows x centroids) block stays in cache.
_CHUNK_ROWS = 8192
_POOL = ThreadPoolExecutor(max_workers=max(1, min(os.cpu_count() or 1, 8)))
_BLAS: list[ThreadpoolController] = []
T = TypeVar("T")
R = TypeVar("R")


def in_parallel(run: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """`run` of every item, spread over the build pool's threads (for work that releases
    the GIL: kernels, large numpy operations)."""
    return list(_POOL.map(run, items)) if len(items) > 1 else [run(i) for i in items]


def _blas_limit() -> Any:
    """A context in which BLAS runs each product on the calling thread."""
    if not _BLAS:
        _BLAS.append(ThreadpoolController())
    return _BLAS[0].limit(limits=1, user_api="blas")


# Centroids a near-tie is settled among (the best few by the matrix product).
_NEAR_TIE_CANDIDATES = 4
# How far apart the two halves of a split cluster start.
_SPLIT_EPS = np.float32(1.0 / 1024.0)


@dataclass(frozen=True)
class KMeans:
    """Trained centroids (k, dim) float32 and the loss of the last assignment."""

    centroids: np.ndarray
    loss: float


def normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit l2 norm (float32); all-zero rows stay zero."""
    norms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64)).astype(np.float32)
    norms[norms == 0] = 1.0
    return x / norms[:, None]


def assign(
    x: np.ndarray,
    centroids: np.ndarray,
    metric: str = "l2",
    *,
    columns: tuple[int, int] | None = None,
    settle_ties: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's nearest centroid (int32) and its distance (float32). `x` is (n, width)
    float32; `columns` (start, stop) compares only that slice of each row (a PQ sub-vector)
    with centroids of that many values. With `settle_ties` (l2), a row whose nearest
    centroids the product cannot tell apart takes the one pylance's float32 distance
    takes (`_settle_near_ties`): an index's partitions are then pylance's row for row."""
    if columns is not None:
        x = x[:, columns[0] : columns[1]]
    n, dim = x.shape
    c = np.asarray(centroids, dtype=np.float32)
    if c.ndim != 2 or c.shape[1] != dim:
        raise ValueError(f"centroids of shape {c.shape} for rows of {dim} values")
    dot = metric == "dot"
    # (dim + 1, k): -2c over |c|^2 (l2) or -c over 1 (dot: 1 - x.c)
    table = np.empty((dim + 1, len(c)), dtype=np.float32)
    table[:dim] = c.T * np.float32(-1.0 if dot else -2.0)
    table[dim] = 1.0 if dot else np.einsum("ij,ij->i", c, c)
    labels = np.empty(n, dtype=np.int32)
    dists = np.empty(n, dtype=np.float32)

    reach = _near_tie_reach(x, c) if settle_ties and not dot and len(c) > 1 else None

    def run(lo: int) -> None:
        hi = min(lo + _CHUNK_ROWS, n)
        block = np.empty((hi - lo, dim + 1), dtype=np.float32)
        block[:, :dim] = x[lo:hi]
        block[:, dim] = 1.0
        scores = block @ table
        best = scores.argmin(axis=1)
        labels[lo:hi] = best
        dists[lo:hi] = np.take_along_axis(scores, best[:, None], axis=1)[:, 0]
        if reach is not None:
            _settle_near_ties(x[lo:hi], c, scores, reach[lo:hi], labels[lo:hi], dists[lo:hi])

    starts = range(0, n, _CHUNK_ROWS)
    if len(starts) > 1:
        # products and argmins release the GIL: a chunk per core, each product on one
        # thread (BLAS threads of their own would fight the chunks for the cores)
        with _blas_limit():
            list(_POOL.map(run, starts))
    else:
        for lo in starts:
            run(lo)
    if not dot:
        xx = np.einsum("ij,ij->i", x, x)
        np.maximum(dists + xx, 0.0, out=dists)
    return labels, dists


def _near_tie_reach(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Per row, how far apart two centroids' scores (|c|^2 - 2 x.c) may be and still be in
    the other order by pylance's float32 distance: the worst case of both roundings (each
    score's product, and pylance's sum of squares, off by at most dim * 2^-24 times the
    magnitudes |x|^2 + |c|^2 they add)."""
    xx = np.einsum("ij,ij->i", x, x, dtype=np.float64)
    cc = float(np.einsum("ij,ij->i", c, c, dtype=np.float64).max())
    return ((xx + cc) * (x.shape[1] * 2.0**-22)).astype(np.float32)


def _settle_near_ties(
    x: np.ndarray,
    c: np.ndarray,
    scores: np.ndarray,
    reach: np.ndarray,
    labels: np.ndarray,
    dists: np.ndarray,
) -> None:
    """For the rows whose runner-up centroid scored within `reach` of their best score
    (`dists`, in place with `labels`): the nearest of their four best centroids by pylance's
    own float32 distance (`f32.l2_lanes`), the first of equals, and its score. A matrix
    product rounds otherwise than pylance's kernel, which at a near-tie picks the other
    partition."""
    bound = (dists + reach)[:, None]
    close = np.flatnonzero((scores <= bound).sum(axis=1) >= 2)
    if not len(close):
        return
    k = min(_NEAR_TIE_CANDIDATES, scores.shape[1])
    candidates = np.argpartition(scores[close], k - 1, axis=1)[:, :k]
    d = l2_lanes((x[close][:, None, :] - c[candidates]).astype(np.float32))
    first = np.where(d == d.min(axis=1, keepdims=True), candidates, scores.shape[1]).min(axis=1)
    labels[close] = first
    dists[close] = scores[close, first]


def _means(x: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per centroid, the mean of its rows (zeros where it has none) and its row count."""
    counts = np.bincount(labels, minlength=k)
    sums = np.empty((k, x.shape[1]), dtype=np.float64)
    for j in range(x.shape[1]):
        sums[:, j] = np.bincount(labels, weights=x[:, j], minlength=k)
    safe = np.maximum(counts, 1)[:, None]
    return (sums / safe).astype(np.float32), counts


def _fill_empty(centroids: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> None:
    """Give every empty centroid half of a cluster chosen with probability growing with its
    size, the two centroids nudged apart (in place)."""
    n = int(counts.sum())
    for i in np.flatnonzero(counts == 0):
        weights = np.maximum(counts - 1, 0).astype(np.float64)
        if weights.sum() <= 0 or n == 0:
            return
        j = int(rng.choice(len(counts), p=weights / weights.sum()))
        counts[i] = counts[j] // 2
        counts[j] -= counts[i]
        sign = np.where(np.arange(centroids.shape[1]) % 2 == 0, 1.0, -1.0).astype(np.float32)
        base = centroids[j].copy()
        centroids[i] = base * (1 + sign * _SPLIT_EPS)
        centroids[j] = base * (1 - sign * _SPLIT_EPS)


def kmeans(
    x: np.ndarray,
    k: int,
    metric: str = "l2",
    *,
    max_iters: int = 50,
    tolerance: float = 1e-4,
    init: np.ndarray | None = None,
    rng: np.random.Generator | None = None,
) -> KMeans:
    """Train `k` centroids on the rows of `x` ((n, dim) float32, n >= k)."""
    rng = np.random.default_rng() if rng is None else rng
    x = np.asarray(x, dtype=np.float32)
    if init is not None:
        centroids = np.array(init, dtype=np.float32)
    else:
        centroids = x[np.sort(rng.choice(len(x), size=k, replace=False))].copy()
    loss = last = float("inf")
    for _ in range(max(1, max_iters)):
        labels, dists = assign(x, centroids, metric)
        loss = float(dists.sum(dtype=np.float64))
        moved, counts = _means(x, labels, k)
        keep = counts == 0
        moved[keep] = centroids[keep]
        _fill_empty(moved, counts, rng)
        centroids = moved
        if abs(loss - last) < tolerance * last:
            break
        last = loss
    return KMeans(centroids, loss)
