"""Building IVF_FLAT, IVF_PQ and IVF_SQ indices in the files pylance 14 writes and searches.

A build trains a model on a sample of the column, then encodes every row:
- IVF: k-means centroids (`kmeans`); each row goes to its nearest (cosine on normalised rows,
  by l2; dot by 1 - dot).
- PQ: one codebook of 2^bits centroids per sub-vector, trained on the sample's residuals from
  their centroids (l2, cosine; dot quantizes the vectors themselves); a row's code names the
  nearest entry per sub-vector. 4-bit codes are packed two to a byte, the even sub-vector in
  the low nibble.
- SQ: the column's minimum and maximum over every row bound 8-bit codes.

`index.idx` then holds the centroids (an `IVF` message in global buffer 1) and no rows;
`auxiliary.idx` holds `_rowid` and the storage column, partition after partition, rows by
row id within one, PQ codes transposed within each partition, the partition layout in global
buffer 1 and the PQ codebook in buffer 2. Rows are encoded a batch at a time; the encoded
rows wait for the writing in memory while small, else in temporary files by partition
range (`spill`), so a build holds a batch of vectors and a fraction of the codes at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from quiver.format import _kernels
from quiver.format.errors import InvalidInputError
from quiver.format.index.files import write_index_file
from quiver.format.index.vector import flat as _flat
from quiver.format.index.vector import pq as _pq
from quiver.format.index.vector import rq_build
from quiver.format.index.vector import sq as _sq
from quiver.format.index.vector.hnsw import HNSW_KEY, PREFETCH_DISTANCE, BuiltGraphs, HnswParams
from quiver.format.index.vector.hnsw import SCHEMA as GRAPH_SCHEMA
from quiver.format.index.vector.index import (
    INDEX_FILE,
    INDEX_KEY,
    ROW_ID,
    STORAGE_FILE,
    STORAGE_KEY,
    VectorIndex,
)
from quiver.format.index.vector.ivf import IVF_KEY
from quiver.format.index.vector.kmeans import assign, kmeans, normalize
from quiver.format.index.vector.pq import ProductQuantizer
from quiver.format.index.vector.rq import RaBitQ
from quiver.format.index.vector.rq import normalized as rq_normalized
from quiver.format.index.vector.spill import EncodedRows
from quiver.format.index.vector.sq import ScalarQuantizer
from quiver.format.io.store import ObjectStore
from quiver.format.proto import index_pb2
from quiver.format.table.schema import LanceSchema

__all__ = ["VECTOR_DETAILS", "VECTOR_INDEX_TYPES", "VectorModel", "VectorParams", "encode", "train"]

VECTOR_DETAILS = "/lance.index.pb.VectorIndexDetails"
VECTOR_INDEX_TYPES = (
    "IVF_FLAT",
    "IVF_PQ",
    "IVF_SQ",
    "IVF_HNSW_FLAT",
    "IVF_HNSW_PQ",
    "IVF_HNSW_SQ",
    "IVF_RQ",
)
_METRIC_CODES = {
    "l2": index_pb2.L2,
    "cosine": index_pb2.Cosine,
    "dot": index_pb2.Dot,
}
_FLAT_KEY = "lance:flat"


@dataclass(frozen=True)
class VectorParams:
    """What to build: the index type, metric and training parameters (pylance's names)."""

    kind: str
    metric: str
    dimension: int
    num_partitions: int
    num_sub_vectors: int = 0
    num_bits: int = 8
    sample_rate: int = 256
    max_iters: int = 50
    # the graph parameters of an IVF_HNSW_* index (None for the others)
    hnsw: HnswParams | None = None

    @property
    def storage_kind(self) -> str:
        """How rows are stored: IVF_FLAT, IVF_PQ or IVF_SQ (an HNSW form as its plain one)."""
        return self.kind.replace("HNSW_", "")

    @property
    def index_version(self) -> int:
        """The manifest entry's index version (pylance 14 writes 2 for IVF_RQ, else 1)."""
        return rq_build.STORAGE_VERSION if self.storage_kind == "IVF_RQ" else 1

    @property
    def assign_metric(self) -> str:
        """The metric rows are assigned to partitions by (cosine rows are normalised)."""
        return "dot" if self.metric == "dot" else "l2"

    @property
    def residual(self) -> bool:
        """Whether PQ codes quantize the residual from the partition centroid."""
        return self.storage_kind == "IVF_PQ" and self.metric != "dot"

    def training_rows(self) -> int:
        """Rows the sample needs: sample_rate per partition, and per PQ centroid."""
        rows = self.num_partitions * self.sample_rate
        if self.storage_kind == "IVF_PQ":
            rows = max(rows, (1 << self.num_bits) * self.sample_rate)
        return rows

    def runtime_hints(self) -> dict[str, str]:
        """The build parameters pylance records in the index details."""
        hints = {
            "lance.ivf.sample_rate": str(self.sample_rate),
            "lance.ivf.max_iters": str(self.max_iters),
            "lance.ivf.shuffle_partition_concurrency": "2",
            "lance.ivf.shuffle_partition_batches": "10240",
            "lance.skip_transpose": "false",
        }
        if self.storage_kind == "IVF_PQ":
            hints.update(
                {
                    "lance.pq.sample_rate": str(self.sample_rate),
                    "lance.pq.max_iters": str(self.max_iters),
                    "lance.pq.kmeans_redos": "1",
                }
            )
        elif self.storage_kind == "IVF_SQ":
            hints["lance.sq.sample_rate"] = str(self.sample_rate)
        if self.hnsw is not None:
            hints["lance.hnsw.prefetch_distance"] = str(PREFETCH_DISTANCE)
        return hints

    def details(self) -> bytes:
        """The serialized `VectorIndexDetails` of the manifest entry."""
        d = index_pb2.VectorIndexDetails(metric_type=_METRIC_CODES[self.metric])
        if self.storage_kind == "IVF_PQ":
            d.pq.num_bits = self.num_bits
            d.pq.num_sub_vectors = self.num_sub_vectors
        elif self.storage_kind == "IVF_SQ":
            d.sq.num_bits = 8
        elif self.storage_kind == "IVF_RQ":
            d.rq.num_bits = self.num_bits  # rotation_type 0: the fast rotation
        else:
            d.flat.SetInParent()
        if self.hnsw is not None:
            d.hnsw.m = self.hnsw.m
            d.hnsw.ef_construction = self.hnsw.ef_construction
            d.hnsw.max_level = self.hnsw.max_level
        d.runtime_hints.update(self.runtime_hints())
        return d.SerializeToString()


@dataclass
class VectorModel:
    """What a build trained: centroids (and their k-means loss), a PQ codebook
    (m, 2^bits, dim / m), SQ bounds or an RQ quantizer (its rotation's signs)."""

    centroids: np.ndarray
    loss: float = 0.0
    codebook: np.ndarray | None = None
    bounds: tuple[float, float] | None = None
    rabitq: RaBitQ | None = None


def untrained(files: object, fragment_ids: object) -> bool:
    """Whether a vector index segment (its recorded files and covered fragments) is
    pylance's `train=False` one: no files, no rows."""
    return not files and fragment_ids == frozenset()


def details_kind(details: index_pb2.VectorIndexDetails) -> str:
    """The index type a segment's details name (IVF_PQ, IVF_HNSW_SQ, ...), as pylance
    names an untrained one's."""
    storage = {"pq": "PQ", "sq": "SQ", "rq": "RQ"}.get(
        details.WhichOneof("compression") or "", "FLAT"
    )
    return f"IVF_{'HNSW_' if details.HasField('hnsw') else ''}{storage}"


def model_of(index: VectorIndex) -> tuple[VectorParams, VectorModel]:
    """The parameters and trained model of an open index (to encode more rows with it, or
    write it again): training parameters are pylance's defaults."""
    storage = index.storage
    subs, bits, codebook, bounds, rabitq = 0, 8, None, None, None
    if isinstance(storage, RaBitQ):
        bits, rabitq = storage.num_bits, storage
    elif isinstance(storage, ProductQuantizer):
        subs, bits = storage.num_sub_vectors, storage.bits
        codebook = storage.codebook[:, : 1 << bits]
    elif isinstance(storage, ScalarQuantizer):
        bounds = (storage.start, storage.end)
    params = VectorParams(
        kind=index.kind,
        metric=index.metric,
        dimension=index.dimension,
        num_partitions=index.ivf.num_partitions,
        num_sub_vectors=subs,
        num_bits=bits,
        hnsw=index.hnsw_params,
    )
    return params, VectorModel(index.ivf.centroids, index.ivf.loss, codebook, bounds, rabitq)


def prepare(params: VectorParams, vectors: np.ndarray) -> np.ndarray:
    """Rows as the index compares them: float32, normalised for cosine (an IVF_RQ index's
    rows as pylance's RaBitQ scales them)."""
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    if params.metric != "cosine":
        return x
    return rq_normalized(x) if params.storage_kind == "IVF_RQ" else normalize(x)


def train(
    params: VectorParams,
    sample: np.ndarray,
    *,
    centroids: np.ndarray | None = None,
    codebook: np.ndarray | None = None,
    bounds: tuple[float, float] | None = None,
    rabitq: RaBitQ | None = None,
    rng: np.random.Generator | None = None,
    trained: Callable[[int, int], None] | None = None,
) -> VectorModel:
    """Train the model of an index on `sample` (prepared rows, in random order): IVF
    centroids on its first num_partitions * sample_rate rows unless given, then the PQ
    codebook on the residuals of its first 2^bits * sample_rate rows unless given. SQ bounds
    come from the caller (they span every row, not the sample). `trained(done, total)` hears
    of each part trained (the centroids, then each sub-vector's codebook): a long training
    reports as it goes, and a build that is cancelled stops between parts."""
    rng = np.random.default_rng() if rng is None else rng
    p = params
    told = trained or (lambda done, total: None)
    parts = (centroids is None) + (p.num_sub_vectors if p.storage_kind == "IVF_PQ" else 0)
    loss = 0.0
    if centroids is None:
        rows = sample[: p.num_partitions * p.sample_rate]
        if len(rows) < p.num_partitions:
            raise InvalidInputError(
                f"cannot train {p.num_partitions} partitions on {len(rows)} vectors: "
                "use fewer partitions"
            )
        fitted = kmeans(rows, p.num_partitions, p.assign_metric, max_iters=p.max_iters, rng=rng)
        centroids, loss = fitted.centroids, fitted.loss
        told(1, parts)
    model = VectorModel(np.ascontiguousarray(centroids, dtype=np.float32), loss, bounds=bounds)
    if p.storage_kind == "IVF_RQ":  # nothing to train: a random rotation, unless given
        model.rabitq = rabitq or rq_build.new_quantizer(p.dimension, p.num_bits, p.metric, rng)
    if p.storage_kind == "IVF_PQ":
        before = parts - p.num_sub_vectors
        model.codebook = (
            np.ascontiguousarray(codebook, dtype=np.float32)
            if codebook is not None
            else _train_codebook(p, model.centroids, sample, rng, lambda j: told(before + j, parts))
        )
    return model


def _train_codebook(
    p: VectorParams,
    centroids: np.ndarray,
    sample: np.ndarray,
    rng: np.random.Generator,
    trained: Callable[[int], None],
) -> np.ndarray:
    k = 1 << p.num_bits
    rows = sample[: k * p.sample_rate]
    if len(rows) < k:
        raise InvalidInputError(
            f"a {p.num_bits}-bit PQ codebook needs at least {k} vectors to train, not {len(rows)}"
        )
    if p.residual:
        labels, _ = assign(rows, centroids, p.assign_metric)
        rows = rows - centroids[labels]
    sub = p.dimension // p.num_sub_vectors
    books = []
    for j in range(p.num_sub_vectors):
        part = np.ascontiguousarray(rows[:, j * sub : (j + 1) * sub])
        books.append(kmeans(part, k, "l2", max_iters=p.max_iters, rng=rng).centroids)
        trained(j + 1)
    return np.stack(books)


def encode(
    params: VectorParams, model: VectorModel, x: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Prepared rows' partitions (int32) and storage rows: PQ codes (n, m or m / 2 packed)
    uint8, SQ codes (n, dim) uint8, RQ records (`rq_build.encode`) or the vectors (n, dim)
    float32. Their distances to their centroids add to `model.loss` (the IVF loss pylance
    records is over every row)."""
    labels, dists = assign(x, model.centroids, params.assign_metric, settle_ties=True)
    model.loss += float(dists.sum(dtype=np.float64))
    if params.storage_kind == "IVF_FLAT":
        return labels, x
    if params.storage_kind == "IVF_RQ":
        assert model.rabitq is not None
        return labels, rq_build.encode(model.rabitq, model.centroids, x, labels)
    if params.storage_kind == "IVF_SQ":
        start, end = model.bounds or (0.0, 0.0)
        span = float(end) - float(start)
        if span == 0:
            return labels, np.zeros(x.shape, dtype=np.uint8)
        scaled = (x.astype(np.float64) - float(start)) / span * 255.0  # in float64, as pylance
        return labels, np.trunc(np.clip(np.nan_to_num(scaled), 0, 255)).astype(np.uint8)
    rows = x - model.centroids[labels] if params.residual else x
    book = model.codebook
    assert book is not None
    sub = book.shape[2]
    codes = np.empty((len(x), params.num_sub_vectors), dtype=np.uint8)
    for j in range(params.num_sub_vectors):
        codes[:, j] = assign(rows, book[j], "l2", columns=(j * sub, (j + 1) * sub))[0]
    if params.num_bits == 4:
        codes = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return labels, codes


def storage_row(params: VectorParams) -> tuple[int, np.dtype]:
    """The width and type of one row's storage: PQ codes, SQ codes or the vector."""
    if params.storage_kind == "IVF_PQ":
        m = params.num_sub_vectors
        return (m if params.num_bits == 8 else m // 2), np.dtype(np.uint8)
    if params.storage_kind == "IVF_SQ":
        return params.dimension, np.dtype(np.uint8)
    if params.storage_kind == "IVF_RQ":
        return rq_build.record_width(params.dimension, params.num_bits), np.dtype(np.uint8)
    return params.dimension, np.dtype(np.float32)


def write_files(
    store: ObjectStore,
    directory: str,
    params: VectorParams,
    model: VectorModel,
    encoded: EncodedRows,
    version: str,
    rng: np.random.Generator | None = None,
) -> list[tuple[str, int]]:
    """Write `index.idx` and `auxiliary.idx` of the encoded rows (every row's partition, row
    id and storage row); the files and their sizes. An HNSW form's graphs are built here,
    partition by partition (`rng` draws their levels)."""
    parts = params.num_partitions
    lengths = encoded.lengths()
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    metric = params.metric
    ivf = index_pb2.IVF(offsets=offsets.tolist(), lengths=lengths.tolist())
    if params.storage_kind == "IVF_RQ":
        q = model.rabitq
        assert q is not None
        columns = rq_build.schema(q)
        storage_json = rq_build.storage_json(q)
        buffers: list[bytes] = []
    else:
        storage_meta, column, buffers = _storage_layout(params, model)
        columns = pa.schema([pa.field(ROW_ID, pa.uint64()), column])
        storage_json = json.dumps([json.dumps(storage_meta, separators=(",", ":"))])
    schema = LanceSchema.from_arrow(
        columns.with_metadata({"distance_type": metric, IVF_KEY: "1", STORAGE_KEY: storage_json})
    )
    arrow_schema = schema.to_arrow()

    def tables() -> Iterable[pa.Table]:
        transposed = params.storage_kind == "IVF_PQ"
        for ids, block in encoded.partitions():
            if params.storage_kind == "IVF_RQ":
                yield rq_build.partition_table(model.rabitq, ids, block, arrow_schema)  # type: ignore[arg-type]
                continue
            flat = (block.T if transposed else block).ravel()
            width = arrow_schema.field(1).type.list_size
            values = pa.FixedSizeListArray.from_arrays(pa.array(flat), width)
            yield pa.table([pa.array(ids, pa.uint64()), values], schema=arrow_schema)

    aux_size = write_index_file(
        store,
        f"{directory}/{STORAGE_FILE}",
        schema,
        tables(),
        version,
        [ivf.SerializeToString(), *buffers],
    )
    if params.hnsw is not None:
        index_size = _write_graphs(store, directory, params, model, encoded, version, rng)
        return [(INDEX_FILE, index_size), (STORAGE_FILE, aux_size)]
    model_ivf = index_pb2.IVF(
        offsets=[0] * parts,
        lengths=[0] * parts,
        centroids_tensor=_tensor(model.centroids),
        loss=model.loss,
    )
    index_schema = LanceSchema.from_arrow(
        pa.schema(
            [pa.field("__flat_marker", pa.uint64(), nullable=False)],
            metadata={
                IVF_KEY: "1",
                INDEX_KEY: _index_key(params),
                _FLAT_KEY: json.dumps([""] * parts, separators=(",", ":")),
            },
        )
    )
    index_size = write_index_file(
        store,
        f"{directory}/{INDEX_FILE}",
        index_schema,
        [],
        version,
        [model_ivf.SerializeToString()],
    )
    return [(INDEX_FILE, index_size), (STORAGE_FILE, aux_size)]


def _index_key(params: VectorParams) -> str:
    return json.dumps({"type": params.kind, "distance_type": params.metric}, separators=(",", ":"))


def _write_graphs(
    store: ObjectStore,
    directory: str,
    params: VectorParams,
    model: VectorModel,
    encoded: EncodedRows,
    version: str,
    rng: np.random.Generator | None,
) -> int:
    """Build each partition's graph and write `index.idx` with them; its size."""
    hnsw = params.hnsw
    assert hnsw is not None
    # graphs of cosine indices link normalised vectors: l2 ranks them alike
    metric = _kernels.METRIC_DOT if params.metric == "dot" else _kernels.METRIC_L2
    filled = np.flatnonzero(encoded.lengths())
    pairs = (
        (int(p), _dense(params, model, int(p), block))
        for p, (_, block) in zip(filled, encoded.partitions(), strict=True)
    )
    rng = np.random.default_rng() if rng is None else rng
    graphs = BuiltGraphs(pairs, params.num_partitions, metric, hnsw, rng)
    try:
        lengths = graphs.lengths
        ivf = index_pb2.IVF(
            offsets=np.r_[0, np.cumsum(lengths)[:-1]].astype(np.int64).tolist(),
            lengths=lengths.tolist(),
            centroids_tensor=_tensor(model.centroids),
            loss=model.loss,
        )
        entries = [json.dumps(m, separators=(",", ":")) for m in graphs.metadata]
        schema = LanceSchema.from_arrow(
            GRAPH_SCHEMA.with_metadata(
                {
                    IVF_KEY: "1",
                    INDEX_KEY: _index_key(params),
                    HNSW_KEY: json.dumps(entries, separators=(",", ":")),
                }
            )
        )
        return write_index_file(
            store,
            f"{directory}/{INDEX_FILE}",
            schema,
            graphs.tables(),
            version,
            [ivf.SerializeToString()],
        )
    finally:
        graphs.close()


def _dense(params: VectorParams, model: VectorModel, p: int, block: np.ndarray) -> np.ndarray:
    """What a partition's storage rows stand for, as float32 vectors (an HNSW graph links
    them): the vectors themselves, SQ codes scaled back, PQ codes' codebook entries (plus
    the centroid, for residual codes)."""
    kind = params.storage_kind
    if kind == "IVF_FLAT":
        return block
    if kind == "IVF_SQ":
        start, end = model.bounds or (0.0, 0.0)
        return (start + block.astype(np.float32) * np.float32((end - start) / 255.0)).astype(
            np.float32
        )
    book = model.codebook
    assert book is not None
    codes = block
    if params.num_bits == 4:
        codes = np.empty((len(block), params.num_sub_vectors), np.uint8)
        codes[:, 0::2], codes[:, 1::2] = block & 0x0F, block >> 4
    parts = [book[j][codes[:, j]] for j in range(params.num_sub_vectors)]
    x = np.concatenate(parts, axis=1) if parts else np.empty((len(block), 0), np.float32)
    if params.residual:
        x = x + model.centroids[p]
    return np.ascontiguousarray(x, dtype=np.float32)


def _tensor(values: np.ndarray) -> index_pb2.Tensor:
    return index_pb2.Tensor(
        data_type=index_pb2.Tensor.FLOAT32,
        shape=list(values.shape),
        data=np.ascontiguousarray(values, dtype="<f4").tobytes(),
    )


def _storage_layout(params: VectorParams, model: VectorModel) -> tuple[dict, pa.Field, list[bytes]]:
    """The storage column, its `storage_metadata` and the global buffers after the layout."""
    dim = params.dimension
    if params.storage_kind == "IVF_PQ":
        book = model.codebook
        assert book is not None
        m, k = params.num_sub_vectors, 1 << params.num_bits
        tensor = _tensor(book.reshape(m * k, dim // m))
        del tensor.shape[:]
        tensor.shape.extend([k, dim])
        meta = {
            "codebook_position": 2,
            "nbits": params.num_bits,
            "num_sub_vectors": m,
            "dimension": dim,
            "codebook_tensor": [],
            "transposed": True,
        }
        code_bytes = m if params.num_bits == 8 else m // 2
        col = pa.field(_pq.CODE_COLUMN, pa.list_(pa.uint8(), code_bytes))
        return meta, col, [tensor.SerializeToString()]
    if params.storage_kind == "IVF_SQ":
        start, end = model.bounds or (0.0, 0.0)
        meta = {"dim": dim, "num_bits": 8, "bounds": {"start": float(start), "end": float(end)}}
        return meta, pa.field(_sq.CODE_COLUMN, pa.list_(pa.uint8(), dim)), []
    flat = pa.field(_flat.FLAT_COLUMN, pa.list_(pa.float32(), dim), nullable=False)
    return {"dim": dim}, flat, []
