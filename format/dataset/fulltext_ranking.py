"""A query word's rows ranked by weight only as deep as searches ask (the threshold
algorithm's input): partial sorts of many tied weights, without sorting them all."""

from __future__ import annotations

import threading

import numpy as np


class Ranked:
    """A query word's rows (ascending) and their weights, and the positions of its best
    weights, sorted best first only as deep as a search has asked: a search with a limit
    reads a frequent word's best few hundred rows, and a full sort of its 360,000 weights
    cost 25 ms the first time the word was asked for (a partition: 1 ms)."""

    def __init__(self, rows: np.ndarray, weights: np.ndarray) -> None:
        self.rows = rows
        self.weights = weights
        self._best = np.empty(0, np.int64)  # positions, best weight first (stable on ties)
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes + self.weights.nbytes + 8 * len(self.rows)

    def best(self, depth: int) -> np.ndarray:
        """Positions of the `depth` best weights (all rows when there are fewer)."""
        if depth >= len(self.rows):
            return np.arange(len(self.rows))
        return self._prefix(depth + 1)[:depth]

    def weight_after(self, depth: int) -> np.float32:
        """The weight ranked just after the `depth` best (depth < len(rows))."""
        return self.weights[self._prefix(depth + 1)[depth]]

    def _prefix(self, wanted: int) -> np.ndarray:
        best = self._best
        if len(best) >= wanted:
            return best
        with self._lock:
            if len(self._best) < wanted:
                k = min(len(self.weights), max(wanted, 2 * len(self._best)))
                self._best = best_positions(self.weights, k)
            return self._best


def best_positions(weights: np.ndarray, k: int) -> np.ndarray:
    """Positions of the `k` (<= len) best `weights`, best first, ties by position, without
    sorting them all: a strided sample sets a bar about 4k weights from the top, and only
    the weights above it are sorted. Weights tie a lot (short documents give a word a few
    distinct weights), so the ones at the bar are taken in position order as far as needed,
    never all gathered."""
    n = len(weights)
    if k >= n:
        return np.lexsort((np.arange(n), -weights))
    sample = weights[:: max(1, n // (16 * k))]
    rank = len(sample) - 1 - 4 * k * len(sample) // n
    if rank > 0:
        bar = np.partition(sample, rank)[rank]
        above = np.flatnonzero(weights > bar)
        if len(above) < k:
            ties = _first_equal(weights, bar, k - len(above))
            if len(ties) == k - len(above):
                return np.concatenate([above[np.lexsort((above, -weights[above]))], ties])
        elif len(above) <= n // 2:
            return above[_best_of(weights[above], k)]
    return _best_of(weights, k)


def _best_of(values: np.ndarray, k: int) -> np.ndarray:
    """`best_positions` by one partition of all `values`."""
    bar = np.partition(values, len(values) - k)[len(values) - k]
    above = np.flatnonzero(values > bar)
    above = above[np.lexsort((above, -values[above]))]
    return np.concatenate([above, _first_equal(values, bar, k - len(above))])


def _first_equal(values: np.ndarray, value: np.float32, m: int) -> np.ndarray:
    """The first `m` positions holding `value` (fewer if there are not as many)."""
    found, count, step = [], 0, max(4096, 8 * m)
    for start in range(0, len(values), step):
        hits = np.flatnonzero(values[start : start + step] == value) + start
        found.append(hits)
        count += len(hits)
        if count >= m:
            break
    return np.concatenate(found)[:m] if found else np.empty(0, np.int64)
