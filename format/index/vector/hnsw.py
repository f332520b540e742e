"""HNSW sub-indices of IVF indices (IVF_HNSW_FLAT, IVF_HNSW_SQ, IVF_HNSW_PQ), as pylance 14
writes and searches them.

Each partition of such an index has, besides its storage in `auxiliary.idx`, a graph in
`index.idx`: the partition's rows of that file (its IVF layout there says where) are the
graph's lists, level by level (`__vector_id` the node, its row in the partition; `__neighbors`
and `_distance` its list on that level), and the partition's entry of the `lance:hnsw`
metadata list holds the entry point, the build parameters and where each level's lists start
(`level_offsets`). A search goes from the entry point greedily down the upper levels, then
keeps the `ef` nearest nodes it reaches on the bottom level (`_kernels.hnsw_topk`).

Graphs are built by `_kernels.hnsw_build` (nodes inserted in order, pylance's neighbour
selection); a node's level is drawn as HNSW draws it (`floor(-ln U / ln m)`, at most
`max_level - 1`) from a generator seeded per partition, so a build is reproducible.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from quiver.format import _kernels
from quiver.format.errors import CorruptFileError, InvalidInputError
from quiver.format.file.parallel import map_parallel

HNSW_KEY = "lance:hnsw"
VECTOR_ID = "__vector_id"
NEIGHBORS = "__neighbors"
DISTANCE = "_distance"
SCHEMA = pa.schema(
    [
        pa.field(VECTOR_ID, pa.uint32()),
        pa.field(NEIGHBORS, pa.list_(pa.uint32())),
        pa.field(DISTANCE, pa.list_(pa.float32())),
    ]
)
# pylance's defaults (HnswBuildParams)
MAX_LEVEL = 7
M = 20
EF_CONSTRUCTION = 150
PREFETCH_DISTANCE = 2
# a prefilter leaving fewer than this share of a partition's rows: its rows are scanned, not
# walked through (pylance's switch)
FLAT_BELOW = 0.10


@dataclass(frozen=True)
class HnswParams:
    """Build parameters, as pylance names them (`create_index(..., m=, ef_construction=,
    max_level=)`)."""

    max_level: int = MAX_LEVEL
    m: int = M
    ef_construction: int = EF_CONSTRUCTION

    def as_json(self) -> dict[str, Any]:
        return {
            "max_level": self.max_level,
            "m": self.m,
            "ef_construction": self.ef_construction,
            "prefetch_distance": PREFETCH_DISTANCE,
        }


@dataclass(frozen=True)
class Graph:
    """One partition's graph as `_kernels.hnsw_topk` reads it: `rows` (levels x n) gives each
    node's list on each level (-1: not on it), list r is neighbors[offsets[r]:offsets[r + 1]]."""

    entry: int
    rows: np.ndarray
    offsets: np.ndarray
    neighbors: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.offsets.nbytes + self.neighbors.nbytes)

    def kernel_arg(self) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
        return (self.entry, self.rows.shape[0], self.rows, self.offsets, self.neighbors)


def partition_metadata(text: str, partitions: int, where: str) -> list[dict[str, Any]]:
    """The `lance:hnsw` metadata: one JSON object a partition."""
    try:
        items = [json.loads(s) for s in json.loads(text)]
    except (TypeError, ValueError) as e:
        raise CorruptFileError(where, f"bad {HNSW_KEY} metadata: {e}") from None
    if len(items) != partitions or not all(isinstance(i, dict) for i in items):
        raise CorruptFileError(where, f"{HNSW_KEY} lists {len(items)} graphs for {partitions}")
    return items


def read_graph(table: pa.Table, meta: dict[str, Any], n: int, where: str) -> Graph:
    """A partition's graph from its rows of `index.idx` and its metadata; `n` is the number of
    rows of its storage. Refuses what could send a search outside the partition."""
    try:
        entry = int(meta["entry_point"])
        level_offsets = np.asarray(meta["level_offsets"], dtype=np.int64)
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptFileError(where, f"bad {HNSW_KEY} entry: {e}") from None
    rows_total = table.num_rows
    if n == 0:
        no_rows = np.full((1, 0), -1, np.int32)
        return Graph(0, no_rows, np.zeros(1, np.int64), np.zeros(0, np.uint32))
    levels = len(level_offsets) - 1
    if (
        levels < 1
        or level_offsets[0] != 0
        or level_offsets[-1] != rows_total
        or np.any(np.diff(level_offsets) < 0)
        or not 0 <= entry < n
    ):
        raise CorruptFileError(where, f"graph levels {level_offsets.tolist()} do not fit")
    ids = table.column(VECTOR_ID).combine_chunks()
    lists = table.column(NEIGHBORS).combine_chunks()
    if ids.null_count or lists.null_count or lists.values.null_count:
        raise CorruptFileError(where, "a graph with null nodes or neighbours")
    node = ids.to_numpy().astype(np.int64)
    offsets = lists.offsets.to_numpy().astype(np.int64)
    offsets -= offsets[0]  # a sliced list array's offsets start past 0; flatten() does not
    neighbors = np.require(lists.flatten().to_numpy(), np.uint32, "CA")
    level = np.repeat(np.arange(levels), np.diff(level_offsets))
    if (node < 0).any() or (node >= n).any() or (len(neighbors) and neighbors.max() >= n):
        raise CorruptFileError(where, f"a graph naming nodes past its {n} rows")
    rows = np.full((levels, n), -1, np.int32)
    rows[level, node] = np.arange(rows_total, dtype=np.int32)
    if (rows[0] < 0).any():
        raise CorruptFileError(where, "a graph without every row on its bottom level")
    # levels above the highest holding a node change no search: not kept
    used = 1 + int(np.flatnonzero(np.diff(level_offsets))[-1])
    return Graph(entry, np.ascontiguousarray(rows[:used]), offsets, neighbors)


def draw_levels(n: int, params: HnswParams, seed: int) -> np.ndarray:
    """Each node's top level, HNSW's exponential draw (int32)."""
    u = 1.0 - np.random.default_rng(seed).random(n)
    level = np.floor(-np.log(u) / math.log(max(params.m, 2)))  # m = 1: as m = 2
    return np.minimum(level, params.max_level - 1).astype(np.int32)


def build_graph(
    vectors: np.ndarray, metric: int, params: HnswParams, seed: int
) -> tuple[pa.Table, dict[str, Any]]:
    """The graph of a partition's vectors (n x dim float32: the raw vectors, or what its
    quantized storage stands for) as its rows of `index.idx` and its `lance:hnsw` entry."""
    n, dim = vectors.shape
    levels = draw_levels(n, params, seed)
    vectors = np.require(vectors, np.float32, "CA")
    entry, counts, neighbors, distances = _kernels.hnsw_build(
        metric, vectors, dim, levels, params.m, params.ef_construction
    )
    counts = np.frombuffer(counts, np.uint32)
    if counts.sum(dtype=np.int64) >= 1 << 31:  # the file's lists have 32-bit offsets
        raise InvalidInputError(
            f"a partition of {n:,} rows is too large for one HNSW graph: use more partitions"
        )
    ids = [np.flatnonzero(levels >= lv).astype(np.uint32) for lv in range(params.max_level)]
    sizes = [len(i) for i in ids]
    offsets = pa.array(np.r_[0, np.cumsum(counts, dtype=np.int64)].astype(np.int32), pa.int32())
    table = pa.table(
        [
            pa.array(np.concatenate(ids) if n else np.empty(0, np.uint32), pa.uint32()),
            pa.ListArray.from_arrays(offsets, pa.array(np.frombuffer(neighbors, np.uint32))),
            pa.ListArray.from_arrays(offsets, pa.array(np.frombuffer(distances, np.float32))),
        ],
        schema=SCHEMA,
    )
    meta = {
        "entry_point": int(entry),
        "params": params.as_json(),
        "level_offsets": [0, *np.cumsum(sizes).tolist()],
    }
    return table, meta


# partitions whose graphs are built at once (in parallel, each by one thread): one per core,
# up to 8, their vectors holding no more than GROUP_BYTES together (at least one partition)
BUILD_GROUP = max(1, min(8, os.cpu_count() or 1))
GROUP_BYTES = 256 << 20


def empty_metadata(params: HnswParams) -> dict[str, Any]:
    """The `lance:hnsw` entry of a partition with no rows."""
    return {
        "entry_point": 0,
        "params": params.as_json(),
        "level_offsets": [0] * (params.max_level + 1),
    }


def _groups(
    partitions: Iterable[tuple[int, np.ndarray]],
) -> Iterator[list[tuple[int, np.ndarray]]]:
    """The (partition, vectors) pairs in groups built at once (see BUILD_GROUP)."""
    group: list[tuple[int, np.ndarray]] = []
    held = 0
    for item in partitions:
        if group and (len(group) == BUILD_GROUP or held + item[1].nbytes > GROUP_BYTES):
            yield group
            group, held = [], 0
        group.append(item)
        held += item[1].nbytes
    if group:
        yield group


class BuiltGraphs:
    """The graphs of an index's partitions, built from (partition, vectors) pairs in
    partition order and kept in a temporary Arrow IPC file until `index.idx` is written (its
    layout, in its first global buffer, must be known before its rows): a build holds a few
    partitions' graphs at once, not all of them."""

    def __init__(
        self,
        partitions: Iterable[tuple[int, np.ndarray]],
        num_partitions: int,
        metric: int,
        params: HnswParams,
        rng: np.random.Generator,
    ) -> None:
        self.metadata = [empty_metadata(params)] * num_partitions
        self.lengths = np.zeros(num_partitions, np.int64)
        seeds = rng.integers(0, 1 << 62, size=num_partitions)
        self._file = tempfile.TemporaryFile()
        try:
            with pa.ipc.new_file(self._file, SCHEMA) as out:
                for group in _groups(partitions):
                    built = map_parallel(
                        lambda item: build_graph(item[1], metric, params, int(seeds[item[0]])),
                        group,
                    )
                    for (p, _), (table, meta) in zip(group, built, strict=True):
                        self.metadata[p] = meta
                        self.lengths[p] = table.num_rows
                        out.write_table(table)
        except BaseException:
            self._file.close()
            raise

    def tables(self) -> Iterator[pa.Table]:
        """Every partition's graph rows, in partition order."""
        self._file.seek(0)
        reader = pa.ipc.open_file(self._file)
        for i in range(reader.num_record_batches):
            yield pa.Table.from_batches([reader.get_batch(i)])

    def close(self) -> None:
        self._file.close()
