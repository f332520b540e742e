"""Remapping an IVF index after compaction, as pylance 14 does for datasets without stable
row ids: the same centroids, codebook and partitions, each partition's rows given their new
addresses (rows compaction dropped as deleted leave the index), in row id order.

`index.idx` holds no row ids and is copied as it is; `auxiliary.idx` is written again a
partition at a time (PQ codes in the layout they had), with the new partition layout in global
buffer 1 and its other global buffers (the PQ codebook) as they were. An HNSW form's graphs
name rows by their place in the partition, which the remap changes: its partitions' graphs are
built again over the remapped rows, as pylance builds them again. An IVF_RQ index packs its
codes by their place in the partition too: its rows' codes and factors are unpacked, remapped
and packed again (the rotation kept).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from quiver.format.errors import CorruptFileError
from quiver.format.index.files import IndexFile, write_index_file
from quiver.format.index.vector import rq_build
from quiver.format.index.vector.build import model_of, storage_row, write_files
from quiver.format.index.vector.hnsw import HNSW_KEY
from quiver.format.index.vector.index import (
    INDEX_FILE,
    ROW_ID,
    STORAGE_FILE,
    STORAGE_KEY,
    VectorIndex,
)
from quiver.format.index.vector.ivf import IVF_KEY, read_message
from quiver.format.index.vector.rq import RaBitQ
from quiver.format.index.vector.rq import columns as rq_columns
from quiver.format.index.vector.spill import EncodedRows
from quiver.format.io.store import ObjectStore, discard
from quiver.format.proto import index_pb2

__all__ = ["FILES", "remap_vector_index"]

FILES = (INDEX_FILE, STORAGE_FILE)
# Maps old row addresses to new ones: (new addresses, mask of the rows still alive).
Remap = Callable[[np.ndarray, str], tuple[np.ndarray, np.ndarray]]


def remap_vector_index(
    store: ObjectStore, directory: str, target: str, remap: Remap
) -> list[tuple[str, int]]:
    """Write the index in `directory` into `target` with its row ids remapped; its files
    and their sizes."""
    with IndexFile(store, f"{directory}/{INDEX_FILE}") as index:
        graphs = HNSW_KEY in index.metadata
        packed = b"IVF_RQ" in index.metadata.get("lance:index", b"")
    if graphs or packed:
        return _rebuild(store, directory, target, remap)
    raw = store.read_all(f"{directory}/{INDEX_FILE}")
    sink = store.open_write(f"{target}/{INDEX_FILE}")
    try:
        sink.write(raw)
    except BaseException:
        discard(sink)
        raise
    sink.close()
    with IndexFile(store, f"{directory}/{STORAGE_FILE}") as aux:
        layout = read_message(aux, IVF_KEY, index_pb2.IVF)
        names = [f.name for f in aux.schema.fields]
        if len(names) != 2 or names[0] != ROW_ID:
            raise CorruptFileError(aux.path, f"vector index storage has columns {names}")
        column = names[1]
        transposed = column == "__pq_code" and _transposed(aux)
        buffers = [aux.global_buffer(i) for i in range(2, len(aux._container.global_buffers))]
        arrow = aux.schema.to_arrow()
        starts = np.asarray(layout.offsets, dtype=np.int64)
        lengths = np.asarray(layout.lengths, dtype=np.int64)
        ids = aux.read([ROW_ID]).column(ROW_ID).combine_chunks()
        new, alive = remap(np.asarray(ids.to_numpy(zero_copy_only=False), np.uint64), aux.path)
        kept = np.array(
            [np.count_nonzero(alive[s : s + n]) for s, n in zip(starts, lengths, strict=True)],
            dtype=np.int64,
        )
        offsets = np.concatenate(([0], np.cumsum(kept)[:-1])).astype(np.int64)

        def partitions() -> Iterator[pa.Table]:
            for start, length in zip(starts.tolist(), lengths.tolist(), strict=True):
                codes = aux.read([column], start, start + length).column(0).combine_chunks()
                width = codes.type.list_size
                flat = codes.values.to_numpy(zero_copy_only=False)
                flat = flat[codes.offset * width :][: len(codes) * width]
                rows = flat.reshape(width, length).T if transposed else flat.reshape(-1, width)
                keep = alive[start : start + length]
                moved, rows = new[start : start + length][keep], rows[keep]
                order = np.argsort(moved, kind="stable")
                moved, rows = moved[order], rows[order]
                out = (rows.T if transposed else rows).ravel()
                values = pa.FixedSizeListArray.from_arrays(pa.array(out), width)
                yield pa.table([pa.array(moved, pa.uint64()), values], schema=arrow)

        ivf = index_pb2.IVF(offsets=offsets.tolist(), lengths=kept.tolist())
        size = write_index_file(
            store,
            f"{target}/{STORAGE_FILE}",
            aux.schema,
            partitions(),
            aux.version,
            [ivf.SerializeToString(), *buffers],
        )
    return [(INDEX_FILE, len(raw)), (STORAGE_FILE, size)]


def _transposed(aux: IndexFile) -> bool:
    """Whether the PQ codes of `auxiliary.idx` are stored transposed (its storage metadata
    says; the segments of pylance's distributed builds hold them row by row)."""
    try:
        return bool(json.loads(json.loads(aux.text(STORAGE_KEY))[0]).get("transposed", False))
    except (ValueError, IndexError, TypeError, AttributeError) as e:
        raise CorruptFileError(aux.path, f"bad {STORAGE_KEY}: {e}") from None


def _rebuild(
    store: ObjectStore, directory: str, target: str, remap: Remap
) -> list[tuple[str, int]]:
    """An HNSW form (or an IVF_RQ index) remapped: its rows' storage, given their new ids,
    written again with new graphs (packed again; the model kept)."""
    index = VectorIndex(store, directory, "remap")
    try:
        params, model = model_of(index)
        aux = index.storage_file
        width, dtype = storage_row(params)
        column = index.storage.column
        encoded = EncodedRows(params.num_partitions, width, dtype)
        try:
            layout = index.ivf
            for p, (start, length) in enumerate(zip(layout.offsets, layout.lengths, strict=True)):
                if not length:
                    continue
                if isinstance(index.storage, RaBitQ):
                    table = aux.read(rq_columns(index.storage), int(start), int(start + length))
                    ids, records = rq_build.records_of(index.storage, table, aux.path)
                    new, alive = remap(ids, aux.path)
                    order = np.argsort(new[alive], kind="stable")
                    labels = np.full(int(alive.sum()), p, np.int32)
                    encoded.add(labels, new[alive][order], records[alive][order])
                    continue
                table = aux.read([ROW_ID, column], int(start), int(start + length))
                ids = table.column(ROW_ID).combine_chunks().to_numpy(zero_copy_only=False)
                new, alive = remap(np.asarray(ids, np.uint64), aux.path)
                codes = table.column(column).combine_chunks()
                flat = codes.flatten().to_numpy(zero_copy_only=False)
                transposed = getattr(index.storage, "transposed", False)
                rows = flat.reshape(width, -1).T if transposed else flat.reshape(-1, width)
                labels = np.full(int(alive.sum()), p, np.int32)
                encoded.add(labels, new[alive], np.ascontiguousarray(rows[alive], dtype=dtype))
            return write_files(store, target, params, model, encoded, aux.version)
        finally:
            encoded.close()
    finally:
        index.close()
