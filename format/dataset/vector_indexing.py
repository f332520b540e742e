"""Vector index segments built from a dataset's rows (IVF_FLAT, IVF_PQ, IVF_SQ and their
IVF_HNSW_* forms).

`vector_params` checks what pylance's `create_index` takes (type, metric, partitions,
sub-vectors, bits, given centroids or codebook) against the column; `build_vector_segment`
trains a model on a random sample of the live rows (or reuses one: given centroids, or an
existing segment's model when `optimize_indices` extends an index), encodes every live row a
batch at a time and writes the files (`index.vector.build`); `indexing` commits the segment.
"""

from __future__ import annotations

import dataclasses
import uuid as _uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from quiver.format.dataset import take as _take
from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fragment import LanceFragment
from quiver.format.dataset.index_segments import index_file_version, segment_record
from quiver.format.dataset.scan import ROW_ID_FIELD, Scanner
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError
from quiver.format.index.scalar.remap import discard
from quiver.format.index.vector import build as _build
from quiver.format.index.vector.build import VECTOR_DETAILS, VectorModel, VectorParams
from quiver.format.index.vector.hnsw import EF_CONSTRUCTION, MAX_LEVEL, HnswParams, M
from quiver.format.index.vector.index import INDEX_FILE, STORAGE_FILE, open_vector_index
from quiver.format.index.vector.rq import RaBitQ
from quiver.format.index.vector.rq_build import given_model
from quiver.format.index.vector.spill import EncodedRows
from quiver.format.proto import index_pb2, table_pb2
from quiver.format.table.indices import IndexEntry

__all__ = ["Progress", "build_vector_segment", "segment_model", "vector_params"]

# Told of each stage of a build: {"stage": ..., "index": name, ...counts}
Progress = Callable[[dict[str, Any]], None]

FILES = (INDEX_FILE, STORAGE_FILE)
# pylance's rows per partition when num_partitions is not given, and its cap on partitions
_TARGET_PARTITION_SIZE = {
    "IVF_FLAT": 4096,
    "IVF_PQ": 8192,
    "IVF_SQ": 8192,
    "IVF_RQ": 4096,
    "HNSW": 1 << 20,
}
_MAX_PARTITIONS = 4096
_METRICS = {"l2": "l2", "euclidean": "l2", "cosine": "cosine", "dot": "dot"}
BATCH_ROWS = 65536  # rows encoded at a time


def _positive(uri: str, name: str, value: object) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise InvalidInputError(f"{uri}: {name} must be a positive integer, not {value!r}")
    return int(value)


def vector_params(
    core: DatasetCore,
    column: str,
    index_type: str,
    metric: str,
    *,
    num_partitions: object,
    num_sub_vectors: object,
    num_bits: object,
    sample_rate: object,
    max_iters: object,
    target_partition_size: object,
    live_rows: int,
    hnsw: tuple[object, object, object] = (None, None, None),
) -> VectorParams:
    """The parameters of a vector index on `column`, checked as pylance checks them; defaults
    as pylance's (partitions: live rows / target partition size, at least 1, at most 4096;
    an HNSW form's graph: `hnsw` = (m, ef_construction, max_level), pylance's defaults for
    those not given)."""
    uri = core.uri
    kind = index_type.upper()
    stored = kind.replace("HNSW_", "")
    field_type = core.lance_schema.field_at(column, dataset=uri).to_arrow().type
    multivector = is_multivector(field_type)
    if multivector:  # lists of vectors: each vector an entry of the index, under its row's id
        field_type = field_type.value_type
    if not pa.types.is_fixed_size_list(field_type):
        raise InvalidInputError(
            f"{uri}: vector column {column!r} must be a fixed-size list of floats, not {field_type}"
        )
    if not pa.types.is_floating(field_type.value_type):
        raise UnsupportedFeatureError(
            f"{uri}: Quiver builds vector indices on float vectors; {column!r} holds "
            f"{field_type.value_type}"
        )
    dim = field_type.list_size
    name = _METRICS.get(str(metric).lower()) if isinstance(metric, str) else None
    if name is None:
        raise InvalidInputError(
            f"{uri}: metric must be one of l2, cosine, dot (or euclidean), not {metric!r}"
        )
    if multivector and name != "cosine":
        raise InvalidInputError(
            f"{uri}: multivector column {column!r}: multivector type supports only cosine "
            f"distance, not {name}"
        )
    if num_partitions is None:
        target = (
            _TARGET_PARTITION_SIZE["HNSW" if stored != kind else kind]
            if target_partition_size is None
            else _positive(uri, "target_partition_size", target_partition_size)
        )
        partitions = min(max(1, live_rows // target), _MAX_PARTITIONS)
    else:
        partitions = _positive(uri, "num_partitions", num_partitions)
    bits = 8
    subs = 0
    if stored == "IVF_PQ":
        if num_sub_vectors is None:
            raise InvalidInputError(
                f"{uri}: num_partitions and num_sub_vectors are required for IVF_PQ"
            )
        subs = _positive(uri, "num_sub_vectors", num_sub_vectors)
        if dim % subs:
            raise InvalidInputError(
                f"{uri}: dimension ({dim}) must be divisible by num_sub_vectors ({subs})"
            )
        bits = _positive(uri, "num_bits", 8 if num_bits is None else num_bits)
        if bits not in (4, 8):
            raise InvalidInputError(f"{uri}: num_bits must be 4 or 8 for IVF_PQ, not {bits}")
        if bits == 4 and subs % 2:
            raise InvalidInputError(
                f"{uri}: 4-bit PQ packs two codes a byte: num_sub_vectors ({subs}) must be even"
            )
    elif stored == "IVF_RQ":
        if multivector:
            raise UnsupportedFeatureError(
                f"{uri}: Quiver builds no IVF_RQ index of the multivector column {column!r}"
            )
        if dim % 8:
            raise InvalidInputError(
                f"{uri}: vector dimension must be divisible by 8 for IVF_RQ, not {dim}"
            )
        bits = 5 if num_bits is None else num_bits
        if isinstance(bits, float) and bits.is_integer():
            bits = int(bits)
        if isinstance(bits, bool) or not isinstance(bits, int | np.integer) or not 1 <= bits <= 9:
            raise InvalidInputError(f"{uri}: IVF_RQ num_bits must be in 1..=9, got {bits!r}")
        bits = int(bits)
    elif num_bits not in (None, 8):
        raise InvalidInputError(f"{uri}: {kind} takes no num_bits other than 8")
    graph = None
    if stored != kind:
        m, ef, levels = hnsw
        graph = HnswParams(
            max_level=_positive(uri, "max_level", MAX_LEVEL if levels is None else levels),
            m=_positive(uri, "m", M if m is None else m),
            ef_construction=_positive(
                uri, "ef_construction", EF_CONSTRUCTION if ef is None else ef
            ),
        )
    return VectorParams(
        kind=kind,
        metric=name,
        dimension=dim,
        num_partitions=partitions,
        num_sub_vectors=subs,
        num_bits=bits,
        sample_rate=_positive(uri, "sample_rate", sample_rate),
        max_iters=_positive(uri, "max_iters", max_iters),
        hnsw=graph,
    )


def is_multivector(arrow_type: pa.DataType) -> bool:
    """Whether a column type is lists of vectors (a multivector column)."""
    return (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)) and (
        pa.types.is_fixed_size_list(arrow_type.value_type)
    )


def _vectors(column: pa.Array, params: VectorParams) -> tuple[np.ndarray, np.ndarray]:
    """The vectors of a vector column that an index holds, as (n, dim) float32, and the
    position of each one's row in the column: as pylance, not null, no NaN (`filter_nan`),
    and for cosine not all zeros (no direction to compare). A multivector column's rows
    give each of their vectors (null and empty rows none)."""
    dim = params.dimension
    if is_multivector(column.type):
        lists = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        offsets = np.asarray(lists.offsets.to_numpy(zero_copy_only=False), np.int64)
        counts = np.diff(offsets)
        if lists.null_count:
            counts[~np.asarray(lists.is_valid())] = 0
        vectors = lists.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        rows = np.repeat(np.arange(len(lists)), np.diff(offsets))
        inside = np.repeat(counts > 0, np.diff(offsets))
        x, good = _vectors(vectors, params)  # positions of the vectors kept
        keep = inside[good]
        return x[keep], rows[good[keep]]
    valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    kept = column if valid.all() else column.filter(pa.array(valid))
    values = kept.flatten() if len(kept) else pa.array([], kept.type.value_type)
    x = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(-1, dim)
    rows = np.flatnonzero(valid)
    good = ~np.isnan(x).any(axis=1)
    if params.metric == "cosine":
        good &= (x != 0).any(axis=1)
    if not good.all():
        x, rows = x[good], rows[good]
    return x, rows


def _sample(
    core: DatasetCore,
    fragments: list[LanceFragment],
    column: str,
    params: VectorParams,
    rng: np.random.Generator,
) -> np.ndarray:
    """Up to `training_rows` live rows chosen at random, prepared, in random order."""
    live = sum(f.count_rows() for f in fragments)
    size = min(params.training_rows(), live)
    positions = np.sort(rng.choice(live, size=size, replace=False)) if size < live else None
    if positions is None:
        table = Scanner(core, fragments, columns=[column]).to_table()
    else:
        table = _take.take(core, fragments, positions, [column])
    x, _ = _vectors(_take.column_at(table, column).combine_chunks(), params)
    return _build.prepare(params, x[rng.permutation(len(x))])


def _batches(
    core: DatasetCore, fragments: list[LanceFragment], column: str, params: VectorParams
) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """The vectors an index holds of the fragments, prepared, a batch at a time, with their
    row ids and the number of rows the batch read."""
    scan = Scanner(
        core, fragments, columns=[column], with_row_id=True, batch_size=BATCH_ROWS
    ).to_batches()
    for batch in scan:
        x, rows = _vectors(batch.column(0), params)
        ids = batch.column(ROW_ID_FIELD.name).to_numpy(zero_copy_only=False)
        yield _build.prepare(params, x), np.asarray(ids, dtype=np.uint64)[rows], batch.num_rows


def _bounds(
    core: DatasetCore, fragments: list[LanceFragment], column: str, params: VectorParams
) -> tuple[float, float]:
    """The smallest and largest value of every prepared vector (SQ bounds)."""
    lo, hi = np.float32(np.inf), np.float32(-np.inf)
    for x, _, _ in _batches(core, fragments, column, params):
        if x.size:
            lo, hi = min(lo, np.nanmin(x)), max(hi, np.nanmax(x))
    return (0.0, 0.0) if lo > hi else (float(lo), float(hi))


def segment_model(
    core: DatasetCore, entry: IndexEntry, column: str, live_rows: int
) -> tuple[VectorParams, VectorModel | None]:
    """The parameters and trained model of an existing vector index segment (to extend it
    without retraining); for an untrained one, its recorded kind and parameters with
    pylance's defaults for the rest (partitions from `live_rows`), and no model: the
    segment that replaces it trains one, as pylance's optimize_indices does."""
    if _build.untrained(entry.files, entry.fragment_ids):
        details = index_pb2.VectorIndexDetails.FromString(entry.pb.index_details.value)
        hints = details.runtime_hints
        h = details.hnsw  # all 0 when unset: pylance's defaults
        metric = index_pb2.VectorMetricType.Name(details.metric_type).lower()
        return vector_params(
            core,
            column,
            _build.details_kind(details),
            metric,
            num_partitions=None,
            num_sub_vectors=details.pq.num_sub_vectors or None,
            num_bits=details.pq.num_bits or details.rq.num_bits or None,
            sample_rate=int(hints.get("lance.ivf.sample_rate", "256")),
            max_iters=int(hints.get("lance.ivf.max_iters", "50")),
            target_partition_size=None,
            live_rows=live_rows,
            hnsw=(h.m or None, h.ef_construction or None, h.max_level or None),
        ), None
    base = entry.pb.base_id if entry.pb.HasField("base_id") else None  # a clone's base
    store, directory = core.resolve(entry.directory, base, relative_to_root=True)
    index = open_vector_index(store, directory, entry.uuid, entry.name)
    details = index_pb2.VectorIndexDetails.FromString(entry.pb.index_details.value)
    hints = details.runtime_hints
    params, model = _build.model_of(index)
    params = dataclasses.replace(
        params,
        sample_rate=int(hints.get("lance.ivf.sample_rate", "256")),
        max_iters=int(hints.get("lance.ivf.max_iters", "50")),
    )
    return params, dataclasses.replace(model, loss=0.0)


def build_vector_segment(
    core: DatasetCore,
    params: VectorParams,
    column: str,
    field_id: int,
    name: str,
    new_uuid: _uuid.UUID,
    fragments: list[LanceFragment],
    dataset_version: int,
    covers: set[int],
    *,
    model: VectorModel | None = None,
    centroids: np.ndarray | None = None,
    codebook: np.ndarray | None = None,
    rabitq: RaBitQ | None = None,
    rng: np.random.Generator | None = None,
    progress: Progress | None = None,
) -> tuple[table_pb2.IndexMetadata, str]:
    """Train (unless `model` is given) and write one vector index segment over the live
    rows of `fragments`; its manifest record (covering `covers`) and directory. `progress`
    hears of each stage: "bounds" and "sample" (reading), "train" (then again with parts
    trained of the total), "encode" (with rows done of the total), "write"."""
    rng = np.random.default_rng() if rng is None else rng
    report = progress or (lambda _: None)
    directory = f"_indices/{new_uuid}"
    total = sum(f.count_rows() for f in fragments)
    try:
        if model is None:
            bounds = None
            if params.storage_kind == "IVF_SQ":
                report({"stage": "bounds", "index": name})
                bounds = _bounds(core, fragments, column, params)
            if centroids is not None and (params.storage_kind != "IVF_PQ" or codebook is not None):
                sample = np.empty((0, params.dimension), dtype=np.float32)
            else:
                report({"stage": "sample", "index": name})
                sample = _sample(core, fragments, column, params, rng)
            rows = len(sample)
            report({"stage": "train", "index": name, "rows": rows})

            def trained(done: int, parts: int) -> None:
                stage = {"stage": "train", "index": name, "rows": rows}
                report({**stage, "done": done, "total": parts})

            model = _build.train(
                params, sample, centroids=centroids, codebook=codebook, bounds=bounds,
                rabitq=rabitq, rng=rng, trained=trained,
            )  # fmt: skip
        model = dataclasses.replace(model, loss=0.0)  # summed over every row by `encode`
        width, dtype = _build.storage_row(params)
        encoded = EncodedRows(params.num_partitions, width, dtype)
        try:
            done = 0
            report({"stage": "encode", "index": name, "done": 0, "total": total})
            for x, row_ids, read in _batches(core, fragments, column, params):
                part, stored = _build.encode(params, model, x)
                encoded.add(part, row_ids, stored)
                done += read
                report({"stage": "encode", "index": name, "done": done, "total": total})
            report({"stage": "write", "index": name})
            if params.hnsw is not None:
                report({"stage": "graphs", "index": name})
            files = _build.write_files(
                core.store, directory, params, model, encoded, index_file_version(core), rng
            )
        finally:
            encoded.close()
    except BaseException:
        discard(core.store, directory, FILES)
        raise
    segment = segment_record(
        new_uuid,
        name,
        field_id,
        dataset_version,
        covers,
        (VECTOR_DETAILS, params.details()),
        params.index_version,
        files,
    )
    return segment, directory


def check_given(
    uri: str, params: VectorParams, centroids: object, codebook: object, rabitq_model: object
) -> tuple[np.ndarray | None, np.ndarray | None, RaBitQ | None]:
    """Given IVF centroids (partitions x dim) and PQ codebook (sub-vectors x 2^bits x
    dim / sub-vectors) as float32 arrays, and an IVF_RQ rotation (`rabitq_model`), checked
    against the parameters."""
    c = b = q = None
    if rabitq_model is not None:
        if params.storage_kind != "IVF_RQ":
            raise InvalidInputError(f"{uri}: rabitq_model is an option of IVF_RQ indices")
        q = given_model(rabitq_model, params.dimension, params.num_bits, params.metric, uri)
    if centroids is not None:
        c = np.asarray(centroids)
        if c.ndim != 2 or c.shape[1] != params.dimension or not len(c):
            raise InvalidInputError(
                f"{uri}: ivf_centroids must be a 2D array (clusters, {params.dimension}), "
                f"got shape {c.shape}"
            )
        if not np.issubdtype(c.dtype, np.floating):
            raise InvalidInputError(f"{uri}: IVF centroids must be floating numbers, got {c.dtype}")
        c = np.ascontiguousarray(c, dtype=np.float32)
    if codebook is not None:
        if c is None:
            raise InvalidInputError(f"{uri}: ivf_centroids must be given with pq_codebook")
        b = np.asarray(codebook)
        k = 1 << params.num_bits
        shape = (params.num_sub_vectors, k, params.dimension // max(params.num_sub_vectors, 1))
        if b.shape != shape:
            raise InvalidInputError(
                f"{uri}: PQ codebook must be a 3D array {shape} for num_bits="
                f"{params.num_bits}, got {b.shape}"
            )
        if not np.issubdtype(b.dtype, np.floating):
            raise InvalidInputError(f"{uri}: PQ codebook must be floating numbers, got {b.dtype}")
        b = np.ascontiguousarray(b, dtype=np.float32)
    return c, b, q
