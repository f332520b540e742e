"""Exact search: the IVF_FLAT storage (raw vectors per partition) and the brute-force top-k
pylance runs over data no index covers (and over whole datasets without an index)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from quiver.format import _kernels
from quiver.format.errors import CorruptFileError
from quiver.format.index.vector.distance import matrix, smallest, top_k_per_query

FLAT_COLUMN = "flat"


@dataclass(frozen=True)
class FlatStorage:
    """IVF_FLAT partitions keep the vectors themselves."""

    dimension: int
    metric: str

    column = FLAT_COLUMN
    residual = False

    def load(self, vectors: pa.FixedSizeListArray, where: str) -> np.ndarray:
        """A partition's vectors as (rows, dim) float32."""
        if vectors.type.list_size != self.dimension:
            raise CorruptFileError(
                where, f"vectors of {vectors.type.list_size} values, not {self.dimension}"
            )
        return vector_matrix(vectors)

    def row_bias(self, vectors: np.ndarray, centroid: np.ndarray) -> None:
        """No per-row term: vectors are compared with the query as they are."""
        return None

    def prepare(self, queries: np.ndarray) -> np.ndarray:
        """The queries as float64 (raw vectors are compared as they are)."""
        return queries.astype(np.float64)

    def base(self, queries: np.ndarray, centroids: np.ndarray) -> np.ndarray:
        """No per-pair term."""
        return np.zeros(len(queries))

    @property
    def kernel_params(self) -> tuple[int, float, float, float]:
        """The storage kind and constants `_kernels.ivf_topk` takes."""
        return _kernels.IVF_FLAT, 0.0, 0.0, 0.0


def vector_matrix(vectors: pa.Array) -> np.ndarray:
    """A fixed-size-list array without nulls as a (rows, dim) float32 matrix."""
    d = vectors.type.list_size
    values = vectors.values.to_numpy(zero_copy_only=False)
    flat = values[vectors.offset * d :][: len(vectors) * d]
    return np.asarray(flat, dtype=np.float32).reshape(len(vectors), d)


class TopK:
    """The k nearest rows per query seen so far, fed batch by batch (row ids, vectors)."""

    def __init__(
        self,
        metric: str,
        queries: np.ndarray,
        k: int,
        distance_range: tuple[float, float] = (-np.inf, np.inf),
    ) -> None:
        """`distance_range` (lower, upper): only rows at lower <= distance < upper count."""
        self.metric, self.queries, self.k = metric, queries, k
        self.lower, self.upper = distance_range
        self._query: list[np.ndarray] = []
        self._ids: list[np.ndarray] = []
        self._dist: list[np.ndarray] = []
        self._held = 0

    def add(self, row_ids: np.ndarray, vectors: pa.Array) -> None:
        """Rows of one batch; rows whose vector is null have no distance and are skipped."""
        if vectors.null_count:
            valid = np.asarray(vectors.is_valid())
            row_ids, vectors = row_ids[valid], vectors.filter(pa.array(valid))
        if not len(row_ids):
            return
        dist = matrix(self.metric, vector_matrix(vectors), self.queries).astype(np.float32)
        self.add_distances(row_ids, dist)

    def add_multivectors(self, row_ids: np.ndarray, lists: pa.Array) -> None:
        """Rows of a multivector column (lists of vectors) against the one multivector
        query (all of `queries`): a row's distance is, summed over the query's vectors, the
        distance to its nearest vector, as pylance measures it. Null or empty rows have no
        distance and are skipped."""
        keep, nearest = nearest_in_lists(self.metric, lists, self.queries)
        if keep.any():
            self.add_distances(row_ids[keep], nearest.sum(axis=0, dtype=np.float32)[None, :])

    def add_distances(self, row_ids: np.ndarray, dist: np.ndarray) -> None:
        """Rows' distances (queries x rows) measured already."""
        ranged = self.lower > -np.inf or self.upper < np.inf
        if ranged:  # out of range: never kept (NaN, not in any range, neither)
            dist[~((dist >= self.lower) & (dist < self.upper))] = np.inf
        keep = smallest(dist, self.k)
        nq = dist.shape[0]
        query = np.repeat(np.arange(nq, dtype=np.int64), keep.shape[1])
        ids, kept = row_ids[keep].ravel(), np.take_along_axis(dist, keep, axis=1).ravel()
        if ranged:
            inside = kept < np.inf
            query, ids, kept = query[inside], ids[inside], kept[inside]
        self._query.append(query)
        self._ids.append(ids)
        self._dist.append(kept)
        self._held += len(ids)
        if self._held > 8 * self.k * nq + 65536:
            self._compact()

    def _compact(self) -> None:
        q, ids, dist = self.result()
        self._query, self._ids, self._dist, self._held = [q], [ids], [dist], len(q)

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query index, row id, distance) of the kept rows, by (query, distance, row id)."""
        if not self._query:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty.astype(np.uint64), np.empty(0, dtype=np.float32)
        q, ids, dist = (np.concatenate(x) for x in (self._query, self._ids, self._dist))
        keep = top_k_per_query(q, ids, dist, self.k)
        return q[keep], ids[keep], dist[keep]


def nearest_in_lists(
    metric: str, lists: pa.Array | pa.ChunkedArray, queries: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Which rows of a multivector column have vectors (not null, not empty), and per query
    vector the distance to each such row's nearest vector, (queries x kept rows) float32."""
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    offsets = np.asarray(lists.offsets.to_numpy(zero_copy_only=False), np.int64)
    keep = np.diff(offsets) > 0
    if lists.null_count:
        keep &= np.asarray(lists.is_valid())
    if not keep.any():
        return keep, np.empty((len(queries), 0), np.float32)
    vectors = lists.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    pair = matrix(metric, vector_matrix(vectors), queries).astype(np.float32)
    starts = (offsets[:-1] - offsets[0])[keep]
    return keep, np.minimum.reduceat(pair, starts, axis=1)  # empty rows were dropped
