"""An open IVF vector index (IVF_FLAT, IVF_PQ, IVF_SQ and their IVF_HNSW_* forms, as pylance
14 writes them).

`index.idx` says what the index is (`lance:index`: type and metric) and holds the centroids
(and, for HNSW forms, each partition's graph: see `format.index.vector.hnsw`);
`auxiliary.idx` holds the rows, partition after partition: `_rowid` and the partition's
storage (raw vectors, PQ codes or SQ codes) described by its `storage_metadata`. Indices are
opened once per process (`open_vector_index`: centroids and codebooks parsed once) and
partitions are read on first use, decoded (with the per-row terms of PQ distances), and kept
in a cache bounded by bytes, shared by every index.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.index.files import IndexFile
from quiver.format.index.vector.distance import metric_name
from quiver.format.index.vector.flat import FlatStorage
from quiver.format.index.vector.hnsw import (
    HNSW_KEY,
    NEIGHBORS,
    VECTOR_ID,
    Graph,
    HnswParams,
    partition_metadata,
    read_graph,
)
from quiver.format.index.vector.ivf import IVF_KEY, IvfModel, read_message
from quiver.format.index.vector.pq import ProductQuantizer
from quiver.format.index.vector.rq import RaBitQ, RqPartition, decode_partition
from quiver.format.index.vector.rq import columns as rq_columns
from quiver.format.index.vector.sq import ScalarQuantizer
from quiver.format.io.lru import ByteLRU, OpenOnce
from quiver.format.io.store import ObjectStore
from quiver.format.proto import index_pb2
from quiver.format.table.frag_reuse import FragReuse

INDEX_FILE = "index.idx"
STORAGE_FILE = "auxiliary.idx"
INDEX_KEY = "lance:index"
STORAGE_KEY = "storage_metadata"
ROW_ID = "_rowid"
SUPPORTED = (
    "IVF_FLAT", "IVF_PQ", "IVF_SQ", "IVF_HNSW_FLAT", "IVF_HNSW_PQ", "IVF_HNSW_SQ", "IVF_RQ",
)  # fmt: skip
# Bytes of decoded partitions kept across queries, over all open indices.
PARTITION_CACHE_BYTES = 256 << 20
# Open indices kept (centroids, codebooks: small).
OPEN_INDICES = 32

Storage = FlatStorage | ProductQuantizer | ScalarQuantizer | RaBitQ


@dataclass(frozen=True)
class Partition:
    """One partition's row ids, storage (vectors or codes) and per-row distance terms (PQ
    residuals: see `ProductQuantizer.row_bias`), in file order, and its HNSW graph."""

    row_ids: np.ndarray
    data: np.ndarray
    bias: np.ndarray | None = None
    graph: Graph | None = None

    @property
    def nbytes(self) -> int:
        extra = 0 if self.bias is None else self.bias.nbytes
        extra += 0 if self.graph is None else self.graph.nbytes
        return int(self.row_ids.nbytes + self.data.nbytes + extra)


PARTITIONS: ByteLRU[Partition] = ByteLRU(PARTITION_CACHE_BYTES)


class VectorIndex:
    """One IVF index: its type, metric, IVF model and storage, partitions read lazily."""

    def __init__(self, store: ObjectStore, directory: str, name: str) -> None:
        self.name = name
        self.key = store.uri_of(directory)
        with IndexFile(store, f"{directory}/{INDEX_FILE}") as index:
            try:
                info = json.loads(index.text(INDEX_KEY))
                kind, metric = str(info["type"]).upper(), str(info["distance_type"])
            except (ValueError, KeyError, TypeError) as e:
                raise CorruptFileError(index.path, f"bad {INDEX_KEY} metadata: {e}") from None
            if kind not in SUPPORTED:
                raise UnsupportedFeatureError(
                    f"{self.key}: vector index {name!r} is {kind}; Quiver searches "
                    f"{', '.join(SUPPORTED)} (use_index: false searches exactly)"
                )
            self.kind = kind
            # the storage's kind: an HNSW form stores its rows as the plain form does
            self.storage_kind = kind.replace("HNSW_", "")
            self.metric = metric_name(metric, where=index.path)
            self._storage_file = IndexFile(store, f"{directory}/{STORAGE_FILE}")
            try:
                self.ivf = IvfModel.read(index, self._storage_file)
                self.storage = self._read_storage()
            except BaseException:
                self._storage_file.close()
                raise
        self._graph_file: IndexFile | None = None
        if self.hnsw:
            self._graph_file = IndexFile(store, f"{directory}/{INDEX_FILE}")
            try:
                self._read_graph_layout(self._graph_file)
            except BaseException:
                self.close()
                raise
        self._lock = threading.Lock()

    @property
    def hnsw(self) -> bool:
        """Whether partitions are searched through HNSW graphs."""
        return self.kind != self.storage_kind

    @property
    def graph_metadata(self) -> list[dict]:
        """Each partition's `lance:hnsw` entry (entry point, parameters, level offsets)."""
        return list(self._graph_meta) if self.hnsw else []

    @property
    def hnsw_params(self) -> HnswParams | None:
        """The parameters the graphs were built with (None: not an HNSW form)."""
        if not self.hnsw:
            return None
        given = self._graph_meta[0].get("params") if self._graph_meta else None
        try:
            return HnswParams(
                max_level=int(given["max_level"]),
                m=int(given["m"]),
                ef_construction=int(given["ef_construction"]),
            )
        except (TypeError, KeyError, ValueError):
            return HnswParams()

    def _read_graph_layout(self, f: IndexFile) -> None:
        """Where each partition's graph lies in `index.idx`, and its `lance:hnsw` entry."""
        layout = read_message(f, IVF_KEY, index_pb2.IVF)
        parts = self.ivf.num_partitions
        self._graph_offsets = np.asarray(layout.offsets, dtype=np.int64)
        self._graph_lengths = np.asarray(layout.lengths, dtype=np.int64)
        if len(self._graph_offsets) != parts or len(self._graph_lengths) != parts:
            raise CorruptFileError(f.path, f"graph layout of {len(layout.offsets)} partitions")
        self._graph_meta = partition_metadata(f.text(HNSW_KEY), parts, f.path)

    def _read_storage(self) -> Storage:
        f = self._storage_file
        try:
            metas = json.loads(f.text(STORAGE_KEY))
            meta: dict[str, Any] = json.loads(metas[0])
        except (ValueError, IndexError, TypeError) as e:
            raise CorruptFileError(f.path, f"bad {STORAGE_KEY}: {e}") from None
        dim = self.ivf.dimension
        if self.storage_kind == "IVF_RQ":
            storage: Storage = RaBitQ.read(meta, self.metric, dim, f.path)
        elif self.storage_kind == "IVF_PQ":
            storage = ProductQuantizer.read(f, meta, self.metric)
        elif self.storage_kind == "IVF_SQ":
            storage = ScalarQuantizer.read(meta, self.metric, f.path)
        else:
            storage = FlatStorage(dim, self.metric)
        f.field(ROW_ID)
        f.field(storage.column)
        return storage

    @property
    def storage_file(self) -> IndexFile:
        """The open `auxiliary.idx`."""
        return self._storage_file

    @property
    def dimension(self) -> int:
        return self.ivf.dimension

    @property
    def query_width(self) -> int:
        """Values of a prepared query: PQ table entries (m * 256), else the dimension."""
        if isinstance(self.storage, ProductQuantizer):
            return self.storage.num_sub_vectors * 256
        return self.dimension

    @property
    def row_cost(self) -> int:
        """Kernel steps to score one row: PQ table lookups (m), else the dimension."""
        if isinstance(self.storage, ProductQuantizer):
            return self.storage.num_sub_vectors
        return self.dimension

    def partition(self, p: int) -> Partition:
        """Partition `p`'s row ids and storage, from the cache or the file."""
        key = (self.key, p)
        part = PARTITIONS.get(key)
        if part is not None:
            return part
        start = int(self.ivf.offsets[p])
        stop = start + int(self.ivf.lengths[p])
        f = self._storage_file
        with self._lock:  # one reader per file: its page caches are not shared safely
            table = f.read([ROW_ID, self.storage.column], start, stop)
        ids = table.column(ROW_ID).combine_chunks()
        codes = table.column(self.storage.column).combine_chunks()
        if ids.null_count or codes.null_count:
            raise CorruptFileError(f.path, f"partition {p} has null row ids or codes")
        data = np.require(self.storage.load(codes, f.path), requirements="CA")
        part = Partition(
            np.require(ids.to_numpy().astype(np.uint64, copy=False), requirements="CA"),
            data,
            self.storage.row_bias(data, self.ivf.centroids[p]),
            self._graph(p, len(ids)) if self.hnsw else None,
        )
        PARTITIONS.put(key, part, part.nbytes)
        return part

    @functools.cached_property
    def rotated_centroids(self) -> np.ndarray:
        """An IVF_RQ index's centroids rotated as its rows are (float32)."""
        assert isinstance(self.storage, RaBitQ)
        return self.storage.rotate(self.ivf.centroids.astype(np.float32))

    def rq_partition(self, p: int) -> RqPartition:
        """An IVF_RQ index's partition `p`, decoded, from the cache or the file."""
        assert isinstance(self.storage, RaBitQ)
        key = (self.key, p)
        part = PARTITIONS.get(key)
        if part is not None:
            return part  # type: ignore[return-value]
        start = int(self.ivf.offsets[p])
        stop = start + int(self.ivf.lengths[p])
        with self._lock:  # one reader per file: its page caches are not shared safely
            table = self._storage_file.read(rq_columns(self.storage), start, stop)
        decoded = decode_partition(self.storage, table, f"{self._storage_file.path} partition {p}")
        PARTITIONS.put(key, decoded, decoded.nbytes)  # type: ignore[arg-type]
        return decoded

    def _graph(self, p: int, n: int) -> Graph:
        """Partition `p`'s graph, read from `index.idx` (`n`: the partition's rows)."""
        f = self._graph_file
        assert f is not None
        start = int(self._graph_offsets[p])
        stop = start + int(self._graph_lengths[p])
        with self._lock:
            table = f.read([VECTOR_ID, NEIGHBORS], start, stop)
        return read_graph(table, self._graph_meta[p], n, f"{f.path}: partition {p}")

    def prepare(self, queries: np.ndarray) -> np.ndarray:
        """What the storage compares rows with, per query (normalised for cosine): (n, width)
        float64, `_kernels.ivf_topk`'s `queries`."""
        return self.storage.prepare(queries)

    def base(self, queries: np.ndarray, partitions: np.ndarray) -> np.ndarray:
        """Per (query vector, partition) pair, the distance term shared by the partition's
        rows (float64)."""
        return self.storage.base(queries, self.ivf.centroids64[partitions])

    def select(self, part: Partition, keep: np.ndarray) -> Partition:
        """The rows `keep` (a boolean mask) of a partition."""
        bias = None if part.bias is None else part.bias[keep]
        return Partition(part.row_ids[keep], part.data[keep], bias)

    def close(self) -> None:
        self._storage_file.close()
        if self._graph_file is not None:
            self._graph_file.close()


_OPEN: OpenOnce[VectorIndex] = OpenOnce(OPEN_INDICES)
# partitions' row ids as a fragment reuse index moves them: (index, partition, reuse index)
_MOVED_IDS: ByteLRU[np.ndarray] = ByteLRU(PARTITION_CACHE_BYTES // 8)


class ReusedIndex:
    """A vector index read through a fragment reuse index (compactions that deferred their
    remap): its partitions' row ids are the rows' addresses now, `GONE` for rows a compaction
    dropped (they lie in no fragment, so no search answers them), everything else as
    stored; otherwise it is the index itself."""

    def __init__(self, index: VectorIndex, reuse: FragReuse) -> None:
        self._index = index
        self._reuse = reuse

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)

    def _moved(self, p: int, row_ids: np.ndarray) -> np.ndarray:
        key = (self._index.key, p, self._reuse.uuid)
        ids = _MOVED_IDS.get(key)
        if ids is None:
            ids = np.require(self._reuse.apply(row_ids)[0], requirements="CA")
            _MOVED_IDS.put(key, ids, ids.nbytes + 64)
        return ids

    def partition(self, p: int) -> Partition:
        part = self._index.partition(p)
        return dataclasses.replace(part, row_ids=self._moved(p, part.row_ids))

    def rq_partition(self, p: int) -> RqPartition:
        part = self._index.rq_partition(p)
        return dataclasses.replace(part, row_ids=self._moved(p, part.row_ids))


def open_vector_index(store: ObjectStore, directory: str, uuid: str, name: str) -> VectorIndex:
    """The index in `directory` of `store`, opened once per process (by URI and uuid)."""
    return _OPEN.get((store.uri_of(directory), uuid), lambda: VectorIndex(store, directory, name))
