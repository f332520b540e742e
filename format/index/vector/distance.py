"""Distances between vectors as pylance computes them, and top-k selection.

Metrics: `l2` is the squared Euclidean distance, `cosine` is 1 - cos(x, q), `dot` is 1 - x.q.
Both `paired` (a[i] with b[i]) and `matrix` (every query with every row, one matrix product)
work in float64, so the result is exact to float32, the type of `_distance`. Results are
ordered as pylance orders them: by distance, then row id.
"""

from __future__ import annotations

import numpy as np

from quiver.format.errors import InvalidInputError, UnsupportedFeatureError

METRICS = ("l2", "cosine", "dot")
_ALIASES = {"l2": "l2", "euclidean": "l2", "cosine": "cosine", "dot": "dot"}


def metric_name(value: object, *, where: str = "nearest") -> str:
    """The canonical metric for a user's spelling ("L2", "cosine", "dot"...)."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{where}: metric must be a string, not {value!r}")
    name = _ALIASES.get(value.lower())
    if name is None:
        if value.lower() == "hamming":
            raise UnsupportedFeatureError(f"{where}: the hamming metric is not supported")
        raise InvalidInputError(
            f"{where}: unknown metric {value!r} (expected one of {', '.join(METRICS)})"
        )
    return name


def normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (cosine searches compare normalised vectors)."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (x / norms).astype(np.float32, copy=False)


def paired(metric: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance between a[i] and b[i] (either side may broadcast), float32."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if metric == "l2":
            diff = a - b
            out = np.einsum("...i,...i->...", diff, diff)
        elif metric == "dot":
            out = 1.0 - np.einsum("...i,...i->...", a, b)
        else:
            dot = np.einsum("...i,...i->...", a, b)
            na = np.einsum("...i,...i->...", a, a)
            nb = np.einsum("...i,...i->...", b, b)
            out = 1.0 - dot / np.sqrt(na * nb)
    return np.asarray(out, dtype=np.float32)


def matrix(metric: str, rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """(len(queries), len(rows)) distances through one matrix product, float64."""
    x = np.asarray(rows, dtype=np.float64)
    q = np.asarray(queries, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        dots = q @ x.T
        if metric == "dot":
            return 1.0 - dots
        xx = np.einsum("ij,ij->i", x, x)
        qq = np.einsum("ij,ij->i", q, q)
        if metric == "l2":
            return np.maximum(qq[:, None] + xx[None, :] - 2.0 * dots, 0.0)
        return 1.0 - dots / np.sqrt(qq[:, None] * xx[None, :])


def smallest(dist: np.ndarray, k: int) -> np.ndarray:
    """Per row of `dist` (queries x candidates), the column positions of its k smallest values
    (unordered; NaN counts as largest). Shape (queries, min(k, candidates))."""
    n = dist.shape[1]
    if n <= k:
        return np.broadcast_to(np.arange(n), (dist.shape[0], n))
    key = np.where(np.isnan(dist), np.inf, dist)
    return np.argpartition(key, k - 1, axis=1)[:, :k]


def top_k_per_query(query: np.ndarray, row_ids: np.ndarray, dist: np.ndarray, k: int) -> np.ndarray:
    """Positions of the candidates kept: for each query its k best by (distance, row id),
    ordered by (query, distance, row id). NaN distances sort last, as in pylance."""
    if not len(query):
        return np.empty(0, dtype=np.int64)
    order = np.lexsort((row_ids, dist, query))
    q = query[order]
    starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
    first = np.repeat(starts, np.diff(np.r_[starts, len(q)]))
    return order[np.arange(len(q)) - first < k]
