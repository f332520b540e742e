"""Approximate nearest-neighbour search over the IVF indices of a column (one index and its
deltas, each covering other fragments), as pylance runs it.

Each query probes the partitions whose centroids are nearest: `minimum` of them first (raised
to those within a factor of the nearest centroid's distance, pylance's early pruning, when
fewer than `maximum` are allowed), then, while fewer than k rows were found (a selective
prefilter), more partitions one at a time up to `maximum`. When the prefilter allows no more
than k rows and not all were found, the rest are returned with an infinite distance, as
pylance does. Rows the prefilter refuses (deleted rows always) never take a place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from format.index.vector.distance import normalize, smallest, top_k_per_query
from format.index.vector.index import VectorIndex

RowFilter = Callable[[np.ndarray], np.ndarray]  # row ids -> bool mask of allowed rows


@dataclass(frozen=True)
class Candidates:
    """Rows found for a batch of queries: query index, row id and distance of each."""

    query: np.ndarray
    row_ids: np.ndarray
    distance: np.ndarray

    @classmethod
    def empty(cls) -> Candidates:
        return cls(np.empty(0, np.int64), np.empty(0, np.uint64), np.empty(0, np.float32))

    @classmethod
    def concat(cls, parts: Sequence[Candidates]) -> Candidates:
        parts = [p for p in parts if len(p.query)]
        if not parts:
            return cls.empty()
        return cls(
            np.concatenate([p.query for p in parts]),
            np.concatenate([p.row_ids for p in parts]).astype(np.uint64, copy=False),
            np.concatenate([p.distance for p in parts]).astype(np.float32, copy=False),
        )

    def best(self, k: int) -> Candidates:
        """The k best per query, by (query, distance, row id)."""
        keep = top_k_per_query(self.query, self.row_ids, self.distance, k)
        return Candidates(self.query[keep], self.row_ids[keep], self.distance[keep])


def early_pruning(centroid_dist: np.ndarray, k: int) -> np.ndarray:
    """Per query, how many partitions lie within pylance's factor of the nearest centroid's
    distance (0.6 for k = 1, 7 up to k = 10, 81 beyond)."""
    factor = 0.6 if k <= 1 else 7.0 if k <= 10 else 81.0
    threshold = centroid_dist[:, :1] * np.float32(factor)
    return (centroid_dist <= threshold).sum(axis=1)


class _Search:
    """One delta's probing state for a batch of queries."""

    def __init__(
        self, index: VectorIndex, queries: np.ndarray, fetch: int, allowed: RowFilter | None
    ):
        self.index, self.fetch, self.allowed = index, fetch, allowed
        self.queries = normalize(queries) if index.metric == "cosine" else queries
        self.order, self.centroid_dist = index.ivf.probe_order(self.queries, index.metric)

    def probe(self, pairs_query: np.ndarray, pairs_partition: np.ndarray) -> Candidates:
        """Search the (query, partition) pairs: each query's best `fetch` rows per partition."""
        out = []
        prepared = self.index.prepare(self.queries[pairs_query], pairs_partition)
        order = np.argsort(pairs_partition, kind="stable")
        parts, starts = np.unique(pairs_partition[order], return_index=True)
        bounds = np.r_[starts, len(order)]
        for i, p in enumerate(parts):
            pairs = order[bounds[i] : bounds[i + 1]]
            part = self.index.partition(int(p))
            ids = part.row_ids
            if not len(ids):
                continue
            data = part.data
            if self.allowed is not None:
                keep = self.allowed(ids)
                if not keep.all():
                    ids, data = ids[keep], self.index.select(part, keep)
                    if not len(ids):
                        continue
            dist = self.index.score(prepared[pairs], data)
            best = smallest(dist, self.fetch)
            out.append(
                Candidates(
                    np.repeat(pairs_query[pairs], best.shape[1]),
                    ids[best].ravel(),
                    np.take_along_axis(dist, best, axis=1).ravel(),
                )
            )
        return Candidates.concat(out)


def ivf_search(
    indices: Sequence[VectorIndex],
    queries: np.ndarray,
    k: int,
    fetch: int,
    *,
    minimum: int,
    maximum: int | None,
    allowed: RowFilter | None = None,
    allowed_ids: np.ndarray | None = None,
) -> Candidates:
    """The best `fetch` rows per query over every delta of an index.

    `allowed` tells which row ids may be returned (deleted rows and, with a prefilter, rows
    not matching it are refused); `allowed_ids`, when known (a prefilter), lists them all.
    """
    nq = len(queries)
    searches = [_Search(ix, queries, fetch, allowed) for ix in indices]
    found_parts: list[Candidates] = []
    plans = []
    for s in searches:
        parts = s.index.ivf.num_partitions
        high = parts if maximum is None else min(maximum, parts)
        low = np.full(nq, min(minimum, high), dtype=np.int64)
        if high > low.max(initial=0):
            low = np.minimum(np.maximum(low, early_pruning(s.centroid_dist, k)), high)
        q = np.repeat(np.arange(nq), low)
        rank = np.arange(len(q)) - np.repeat(np.cumsum(low) - low, low)
        found_parts.append(s.probe(q, s.order[q, rank]))
        plans.append((low, high))
    initial = Candidates.concat(found_parts)
    found = np.minimum(np.bincount(initial.query, minlength=nq), k)
    limit = k if allowed_ids is None else min(k, len(allowed_ids))
    late: list[Candidates] = []
    if allowed_ids is not None and len(allowed_ids) <= k:
        # fewer rows allowed than asked for: those not found come back at infinite distance
        for q in np.flatnonzero(found < len(allowed_ids)):
            if all(high <= low[q] for low, high in plans):
                continue
            seen = initial.row_ids[initial.query == q]
            rest = np.setdiff1d(allowed_ids, seen)
            late.append(
                Candidates(
                    np.full(len(rest), q), rest, np.full(len(rest), np.inf, dtype=np.float32)
                )
            )
            found[q] = limit
    for s, (low, high) in zip(searches, plans, strict=True):
        for q in np.flatnonzero(found < limit):
            for rank in range(int(low[q]), high):
                got = s.probe(np.array([q]), s.order[q, rank : rank + 1])
                late.append(got)
                found[q] += len(got.query)
                if found[q] >= limit:
                    break
    return Candidates.concat([initial, *late]).best(fetch)
