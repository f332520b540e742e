"""Approximate nearest-neighbour search over the IVF indices of a column (one index and its
deltas, each covering other fragments), as pylance runs it.

Each query probes the partitions whose centroids are nearest: `minimum` of them first (raised
to those within a factor of the nearest centroid's distance, pylance's early pruning, when
fewer than `maximum` are allowed), then, while fewer than k rows were found (a selective
prefilter), more partitions one at a time up to `maximum`. When the prefilter allows no more
than k rows and not all were found, the rest are returned with an infinite distance, as
pylance does. Rows the prefilter refuses (deleted rows always) never take a place.

Each probing step is one call of the compiled `_kernels.ivf_topk` over every (query,
partition) pair probed: it scores the partitions' cached rows against per-query tables and
keeps each query's best rows in a heap, so nothing per partition or per row runs in Python.
Queries go through in chunks (bounding the tables and probe orders held), and a large step
is split over the decoding pool's threads (the kernel releases the GIL).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from quiver.format import _kernels
from quiver.format.file.parallel import map_parallel
from quiver.format.index.vector.distance import normalize, top_k_per_query
from quiver.format.index.vector.index import Partition, VectorIndex
from quiver.format.index.vector.ivf import nearest_first
from quiver.format.index.vector.rq import rq_search

RowFilter = Callable[[np.ndarray], np.ndarray]  # row ids -> bool mask of allowed rows
_METRICS = {"l2": _kernels.METRIC_L2, "cosine": _kernels.METRIC_COSINE, "dot": _kernels.METRIC_DOT}
# Bytes of per-query tables (and probe orders) held at once: queries go in chunks below it.
CHUNK_BYTES = 16 << 20
# Kernel steps (rows x PQ sub-vectors or dimension) worth a thread of their own.
THREAD_WORK = 1 << 20
# Rows a graph search measures, per unit of ef (an estimate, for splitting work over threads).
GRAPH_VISITS = 16


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

    def within(self, lower: float, upper: float) -> Candidates:
        """The candidates at lower <= distance < upper."""
        if lower == -np.inf and upper == np.inf:
            return self
        keep = (self.distance >= lower) & (self.distance < upper)
        return Candidates(self.query[keep], self.row_ids[keep], self.distance[keep])

    def best(self, k: int) -> Candidates:
        """The k best per query, by (query, distance, row id)."""
        keep = top_k_per_query(self.query, self.row_ids, self.distance, k)
        return Candidates(self.query[keep], self.row_ids[keep], self.distance[keep])


# pylance 14's probing without nprobes, by metric and k (up to 1, up to 10, beyond): the
# partitions whose centroid distance (cosine: l2 of the normalised query) is within a ratio of
# the nearest's, at least and at most so many (None: every partition). Measured against
# pylance 14.0.2's `partitions_searched` on IVF indices of 16 and 64 partitions, 16 and 128
# dimensions, queries near and far from the data: the ratios fit every query to 1e-3 (their
# origin is not documented). The dot metric probes every partition.
_PROBING = {
    "l2": ((1, 1.2175, 5, 19), (10, 1.2651, 6, 24), (None, 1.3301, 11, 38)),
    "cosine": ((1, 1.2356, 3, None), (10, 1.2875, 8, None), (None, 1.3806, 7, None)),
}


def early_pruning(centroid_dist: np.ndarray, k: int, metric: str) -> np.ndarray:
    """Per query, how many partitions to probe at least, as pylance 14 chooses without
    `nprobes`: those within its ratio of the nearest centroid's distance (compared in
    float32), within its bounds; every partition for the dot metric."""
    parts = centroid_dist.shape[1]
    if metric == "dot":
        return np.full(len(centroid_dist), parts)
    dist = centroid_dist.astype(np.float32)
    nearest = dist.min(axis=1, keepdims=True)
    _, ratio, lo, hi = next(b for b in _PROBING[metric] if b[0] is None or k <= b[0])
    within = (dist <= nearest * np.float32(ratio)).sum(axis=1)
    return np.clip(within, min(lo, parts), parts if hi is None else min(hi, parts))


Pruning = Callable[[np.ndarray, int, str], np.ndarray]


def effort_pruning(effort: float, minimum: int, maximum: int | None) -> Pruning:
    """pylance 14's `search_effort`: per query, the partitions probed first go from the
    caller's minimum (at least one) at 0 to the automatic choice (`early_pruning`) at 0.5
    and every partition allowed (`maximum`) at 1, geometrically in between, rounded up
    (more are still probed while fewer than k rows are found, as without an effort)."""

    def pruned(centroid_dist: np.ndarray, k: int, metric: str) -> np.ndarray:
        parts = centroid_dist.shape[1] if maximum is None else min(maximum, centroid_dist.shape[1])
        low = float(min(max(minimum, 1), parts))
        auto = np.maximum(early_pruning(centroid_dist, k, metric).astype(np.float64), low)
        if effort <= 0.5:
            budget = low * (auto / low) ** (2 * effort)
        else:
            budget = auto * (parts / auto) ** (2 * effort - 1)
        return np.ceil(budget - 1e-9).astype(np.int64)

    return pruned


class _Search:
    """One delta's probing state for a batch of queries."""

    def __init__(
        self,
        index: VectorIndex,
        queries: np.ndarray,
        fetch: int,
        allowed: RowFilter | None,
        distance_range: tuple[float, float],
        ef: int | None = None,
    ):
        self.index, self.fetch, self.allowed = index, fetch, allowed
        # nodes an HNSW search keeps (pylance's default: 1.5 times the rows it returns)
        self.ef = fetch + fetch // 2 if ef is None else ef
        self.lower, self.upper = distance_range
        self.queries = normalize(queries) if index.metric == "cosine" else queries
        self.centroid_dist = index.ivf.distances(self.queries, index.metric)
        self.row_cost = index.row_cost
        self.prepared = index.prepare(self.queries)
        self.kind, *self.constants = index.storage.kernel_params
        self.metric = _METRICS[index.metric]

    def order(self, q: int) -> np.ndarray:
        """Every partition, nearest first to query `q` (for probing past the first step)."""
        return np.argsort(self.centroid_dist[q], kind="stable")

    def _partitions(self, parts: np.ndarray) -> list[Partition]:
        """The partitions `parts`, without the rows `allowed` refuses."""
        loaded = [self.index.partition(int(p)) for p in parts]
        if self.allowed is None:
            return loaded
        sizes = np.array([len(p.row_ids) for p in loaded])
        ids = np.concatenate([p.row_ids for p in loaded])
        keep = np.asarray(self.allowed(ids), dtype=bool)
        bounds = np.r_[0, np.cumsum(sizes)]
        kept = np.add.reduceat(keep, bounds[:-1]) if len(ids) else sizes
        for i in np.flatnonzero(kept != sizes):
            loaded[i] = self.index.select(loaded[i], keep[bounds[i] : bounds[i + 1]])
        return loaded

    def _graph_partitions(
        self, parts: np.ndarray
    ) -> tuple[list[Partition], list[np.ndarray | None], np.ndarray]:
        """The partitions `parts` whole (a graph is walked through refused rows too), a mask of
        the rows `allowed` accepts in each (None: all), and whether each is searched through
        its graph: pylance scans instead a partition whose prefilter leaves under a tenth of
        its rows."""
        loaded = [self.index.partition(int(p)) for p in parts]
        masks: list[np.ndarray | None] = [None] * len(loaded)
        walk = np.ones(len(loaded), dtype=bool)
        if self.allowed is None:
            return loaded, masks, walk
        for i, part in enumerate(loaded):
            keep = np.asarray(self.allowed(part.row_ids), dtype=bool)
            kept = int(keep.sum())
            if kept < len(keep):
                masks[i] = keep.view(np.uint8)
                walk[i] = kept >= len(keep) * 10 // 100
        return loaded, masks, walk

    def probe(self, pairs_query: np.ndarray, pairs_partition: np.ndarray) -> Candidates:
        """Search the (query, partition) pairs: each query's best `fetch` rows over all of
        its pairs."""
        if not len(pairs_query):
            return Candidates.empty()
        by_query = np.argsort(pairs_query, kind="stable")
        pairs_query = pairs_query[by_query].astype(np.int64, copy=False)
        pairs_partition = pairs_partition[by_query]
        parts, slot = np.unique(pairs_partition, return_inverse=True)
        base = self.index.base(self.queries[pairs_query], pairs_partition)
        if not self.index.hnsw:
            return self._score(pairs_query, slot, base, self._partitions(parts))
        loaded, masks, walk = self._graph_partitions(parts)
        through = walk[slot]
        found = []
        if through.any():
            found.append(
                self._score(pairs_query[through], slot[through], base[through], loaded, masks)
            )
        if not through.all():
            scanned = [
                p if m is None else self.index.select(p, m.view(bool))
                for p, m in zip(loaded, masks, strict=True)
            ]
            rest = ~through
            found.append(self._score(pairs_query[rest], slot[rest], base[rest], scanned))
        return Candidates.concat(found)

    def _score(
        self,
        pairs_query: np.ndarray,
        slot: np.ndarray,
        base: np.ndarray,
        loaded: list[Partition],
        masks: list[np.ndarray | None] | None = None,
    ) -> Candidates:
        """Each query's best `fetch` rows over its (query, partition) pairs (sorted by
        query; `slot` indexes `loaded`): every row of a partition scored, or, given `masks`,
        the rows its graph search reaches."""
        used, slot = np.unique(slot, return_inverse=True)
        loaded = [loaded[i] for i in used]
        data = tuple(p.data for p in loaded)
        ids = tuple(p.row_ids for p in loaded)
        bias = tuple(p.bias for p in loaded) if loaded[0].bias is not None else None
        sizes = np.array([len(i) for i in ids])
        if masks is not None:
            graphs = tuple(loaded[i].graph.kernel_arg() for i in range(len(loaded)))
            masks = tuple(masks[i] for i in used)
            sizes = np.minimum(sizes, self.ef * GRAPH_VISITS)
        work = np.cumsum(sizes[slot]) * self.row_cost
        threads = _threads(int(work[-1]))
        cuts = np.searchsorted(work, work[-1] * np.arange(1, threads) / threads)
        spans = [
            (a, b) for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(work)], strict=True) if b > a
        ]

        def run(span: tuple[int, int]) -> Candidates:
            a, b = span
            first, last = int(pairs_query[a]), int(pairs_query[b - 1]) + 1
            out_ids = np.zeros((last - first, self.fetch), np.uint64)
            out_dist = np.zeros((last - first, self.fetch), np.float32)
            count = np.zeros(last - first, np.int64)
            head = (
                self.kind,
                self.metric,
                self.prepared[first:last],
                self.prepared.shape[1],
                *self.constants,
                pairs_query[a:b] - first,
                slot[a:b],
                base[a:b],
                data,
                ids,
                bias,
            )
            tail = (self.fetch, out_ids, out_dist, count, self.lower, self.upper)
            if masks is None:
                _kernels.ivf_topk(*head, *tail)
            else:
                _kernels.hnsw_topk(*head, graphs, masks, self.ef, *tail)
            held = np.arange(self.fetch) < count[:, None]
            query = np.broadcast_to(np.arange(first, last)[:, None], held.shape)
            return Candidates(query[held], out_ids[held], out_dist[held])

        return Candidates.concat(map_parallel(run, spans))


def _threads(work: int) -> int:
    """Threads worth starting for `work` kernel steps."""
    return int(max(1, min(os.cpu_count() or 1, 8, work // THREAD_WORK)))


def ivf_search(
    indices: Sequence[VectorIndex],
    queries: np.ndarray,
    k: int,
    fetch: int,
    *,
    minimum: int,
    maximum: int | None,
    allowed: RowFilter | Sequence[RowFilter | None] | None = None,
    allowed_ids: np.ndarray | None = None,
    distance_range: tuple[float, float] = (-np.inf, np.inf),
    ef: int | None = None,
    effort: float | None = None,
    approx_mode: str = "normal",
) -> Candidates:
    """The best `fetch` rows per query over every delta of an index, only rows at
    `distance_range` (lower <= distance < upper, as the index measures it) counting; `ef`
    is the number of nodes HNSW graph searches keep (at least `fetch`); `effort` is
    pylance's `search_effort` (see `effort_pruning`); `approx_mode` how IVF_RQ segments
    estimate distances (`format.index.vector.rq`; other indices ignore it).

    `allowed` tells which row ids may be returned (deleted rows and, with a prefilter, rows
    not matching it are refused), one filter for every delta or one per delta (each answers
    only for the fragments it covers); `allowed_ids`, when known (a prefilter), lists them
    all.
    """
    if allowed is None or callable(allowed):
        allowed = [allowed] * len(indices)
    # per query: its tables, and its distance, order and rank of every partition
    held = sum(8 * ix.query_width + 24 * ix.ivf.num_partitions for ix in indices)
    step = max(1, CHUNK_BYTES // max(held, 1))
    found = []
    for start in range(0, len(queries), step):
        part = _search(
            indices,
            queries[start : start + step],
            k,
            fetch,
            minimum,
            maximum,
            allowed,
            allowed_ids,
            distance_range,
            ef,
            early_pruning if effort is None else effort_pruning(effort, minimum, maximum),
            approx_mode,
        )
        found.append(dataclasses.replace(part, query=part.query + start))
    return Candidates.concat(found)


def _search(
    indices: Sequence[VectorIndex],
    queries: np.ndarray,
    k: int,
    fetch: int,
    minimum: int,
    maximum: int | None,
    allowed: Sequence[RowFilter | None],
    allowed_ids: np.ndarray | None,
    distance_range: tuple[float, float],
    ef: int | None,
    pruning: Pruning = None,  # type: ignore[assignment]
    approx_mode: str = "normal",
) -> Candidates:
    """`ivf_search` of a chunk of queries; `pruning` tells how many partitions each query
    probes first."""
    pruning = pruning or early_pruning
    rq = [i for i, ix in enumerate(indices) if ix.storage_kind == "IVF_RQ"]
    if rq:  # RaBitQ segments: one heap per query across the partitions it probes
        parts = [
            Candidates(*rq_search(indices[i], queries, k, fetch, minimum, maximum, allowed[i],
                                  pruning, distance_range, approx_mode))
            for i in rq
        ]  # fmt: skip
        rest = [i for i in range(len(indices)) if i not in rq]
        if rest:
            parts.append(
                _search(
                    [indices[i] for i in rest], queries, k, fetch, minimum, maximum,
                    [allowed[i] for i in rest], allowed_ids, distance_range, ef, pruning,
                )
            )  # fmt: skip
        return Candidates.concat(parts).best(fetch)
    nq = len(queries)
    searches = [
        _Search(ix, queries, fetch, f, distance_range, ef)
        for ix, f in zip(indices, allowed, strict=True)
    ]
    found_parts: list[Candidates] = []
    plans = []
    for s in searches:
        parts = s.index.ivf.num_partitions
        high = parts if maximum is None else min(maximum, parts)
        low = np.full(nq, min(minimum, high), dtype=np.int64)
        if high > low.max(initial=0):
            pruned = pruning(s.centroid_dist, k, s.index.metric)
            low = np.minimum(np.maximum(low, pruned), high)
        q = np.repeat(np.arange(nq), low)
        rank = np.arange(len(q)) - np.repeat(np.cumsum(low) - low, low)
        order = nearest_first(s.centroid_dist, int(low.max(initial=0)))
        found_parts.append(s.probe(q, order[q, rank]))
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
            order = s.order(q)
            for rank in range(int(low[q]), high):
                got = s.probe(np.array([q]), order[rank : rank + 1])
                late.append(got)
                found[q] += len(got.query)
                if found[q] >= limit:
                    break
    return Candidates.concat([initial, *late]).best(fetch)


# Entries each query vector of a multivector search keeps, per row asked for (pylance's
# LANCE_XTR_OVERFETCH default).
XTR_OVERFETCH = 10


def xtr_scores(found: Candidates, vectors: int) -> Candidates:
    """One multivector query's rows, scored as pylance 14 scores its vectors' index searches
    (XTR): `found` holds each query vector's best entries (its query index the vector's);
    a vector gives a row the similarity 1 - distance of its best entry of that row, or, not
    having found the row, that of its own worst entry (0 when it found nothing). A row's
    distance is the number of vectors less its summed similarities, summed in float32 in
    pylance's order (the vector that found it first, then those before, then the rest).
    All rows come back as query 0, in no order."""
    order = np.lexsort((found.row_ids, found.distance, found.query))
    query, rows, dist = found.query[order], found.row_ids[order], found.distance[order]
    uniq = np.unique(rows)
    sims = np.full((vectors, len(uniq)), np.nan, np.float32)
    worst = np.zeros(vectors, np.float32)
    for j in range(vectors):
        mine = query == j
        if not mine.any():
            continue
        r, d = rows[mine], dist[mine]
        worst[j] = np.float32(1) - d[-1]
        first = np.unique(r, return_index=True)[1]  # each row's best entry (sorted by distance)
        sims[j, np.searchsorted(uniq, r[first])] = np.float32(1) - d[first]
    found_by = ~np.isnan(sims)
    first_j = np.argmax(found_by, axis=0)
    # pylance adds the worst similarities of the vectors before the first one that found the
    # row one after another (in float32), then that sum to the row's own similarity
    before = np.zeros(vectors, np.float32)
    for j in range(1, vectors):
        before[j] = np.float32(before[j - 1] + worst[j - 1])
    total = sims[first_j, np.arange(len(uniq))] + before[first_j]
    for j in range(1, vectors):
        later = first_j < j
        term = np.where(found_by[j], sims[j], worst[j])
        total[later] = total[later] + term[later]
    distance = (np.float32(vectors) - total).astype(np.float32)
    return Candidates(np.zeros(len(uniq), np.int64), uniq, distance)
