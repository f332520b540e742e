"""Remapping BTREE, BITMAP, NGRAM, INVERTED (`format.index.fts.remap`) and IVF indices after
compaction, as pylance 14 does by default.

Compaction moves the live rows of its old fragments, in order, to new fragments, so every
row address an index holds for an old fragment either names a deleted row (dropped) or has
a new address. A remapped index is a new index directory (fresh uuid) holding the same
index with the new addresses; the old one stays for `cleanup_old_versions`. A BTREE keeps
its sorted values and is paged again (pylance copies the page lookup, leaving pages short;
a fresh paging keeps them aligned for every reader), a BITMAP keeps its keys and gets its
row id maps rewritten, an NGRAM keeps its tokens and gets its posting lists rewritten.
Addresses of fragments not rewritten are kept as they are.
"""

from __future__ import annotations

import array
import contextlib
import os
import struct
import uuid as _uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyroaring import BitMap, BitMap64

from quiver.format.errors import CorruptFileError, LanceError
from quiver.format.index.files import IndexFile, write_index_file
from quiver.format.index.fts.remap import remap_inverted
from quiver.format.index.scalar import bitmap as _bitmap
from quiver.format.index.scalar import btree as _btree
from quiver.format.index.scalar import minhash as _minhash
from quiver.format.index.scalar import ngram as _ngram
from quiver.format.index.vector.remap import FILES as VECTOR_FILES
from quiver.format.index.vector.remap import remap_vector_index
from quiver.format.io.store import ObjectStore
from quiver.format.numeric import unique_sorted
from quiver.format.proto import table_pb2, transaction_pb2
from quiver.format.table.addresses import AddressMap

__all__ = ["RemappedIndex", "discard", "remap_index"]

_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)
_U32 = struct.Struct("<I")
_NO_ROWS = _U32.pack(0)  # a row id map of no fragments
# rows of a BITMAP lookup remapped at a time (each row's bitmap may be large)
_BITMAP_CHUNK = 256


@dataclass(frozen=True)
class RemappedIndex:
    """A remapped index: what the Rewrite transaction records, and its directory (relative
    to the store it was written to) for removal if the commit fails."""

    rewritten: transaction_pb2.Transaction.Rewrite.RewrittenIndex
    directory: str


def remap_index(
    store: ObjectStore,
    directory: str,
    kind: str,
    pb: table_pb2.IndexMetadata,
    amap: AddressMap,
) -> RemappedIndex:
    """Write index `pb` (a "BTREE", "BITMAP", "LABEL_LIST", "NGRAM", "INVERTED", "MINHASHLSH"
    or "VECTOR" (IVF) in `directory` of `store`) again with the addresses of `amap`, into a fresh
    `_indices/<uuid>` beside it."""
    new_uuid = _uuid.uuid4()
    parent = directory.rsplit("/", 1)[0] if "/" in directory else ""
    target = f"{parent}/{new_uuid}" if parent else str(new_uuid)
    try:
        if kind == "BTREE":
            files = _remap_btree(store, directory, target, amap)
        elif kind in ("BITMAP", "LABEL_LIST"):
            files = _remap_bitmap(store, directory, target, amap)
        elif kind == "NGRAM":
            files = _remap_ngram(store, directory, target, amap)
        elif kind == "INVERTED":
            files = remap_inverted(store, directory, target, amap.apply)
        elif kind == "VECTOR":
            files = remap_vector_index(store, directory, target, amap.apply)
        elif kind == "MINHASHLSH":
            files = _minhash.remap_minhash(store, directory, target, amap.apply)
        else:
            raise LanceError(f"cannot remap a {kind} index")
    except BaseException:
        names = (
            _btree.DATA_FILE, _btree.LOOKUP_FILE, _bitmap.LOOKUP_FILE, _ngram.POSTINGS_FILE,
            *VECTOR_FILES, *_minhash.FILES,
        )  # fmt: skip
        discard(store, target, names)
        raise
    rewritten = transaction_pb2.Transaction.Rewrite.RewrittenIndex(
        old_id=pb.uuid,
        new_id=table_pb2.UUID(uuid=new_uuid.bytes),
        new_index_details=pb.index_details,
        new_index_version=int(pb.index_version),
        new_index_files=[table_pb2.IndexFile(path=p, size_bytes=s) for p, s in sorted(files)],
    )
    return RemappedIndex(rewritten, target)


def discard(store: ObjectStore, directory: str, names: Sequence[str]) -> None:
    """Best effort: remove index files written for a commit that did not land, and their
    directory when it is local and left empty."""
    for name in names:
        with contextlib.suppress(Exception):
            store.delete(f"{directory}/{name}")
    if store.is_local:
        with contextlib.suppress(OSError):
            os.rmdir(store.full_path(directory))


def _remap_btree(
    store: ObjectStore, directory: str, target: str, amap: AddressMap
) -> list[tuple[str, int]]:
    """page_data with new addresses (deleted rows dropped), still sorted, paged again by the
    index's batch size, and its page lookup (min, max, null count per page)."""
    lookup = IndexFile(store, f"{directory}/{_btree.LOOKUP_FILE}")
    lookup.close()
    data = IndexFile(store, f"{directory}/{_btree.DATA_FILE}")
    batch = int(lookup.metadata.get("batch_size", b"%d" % _btree.DEFAULT_BATCH_SIZE))
    if batch < 1:
        raise CorruptFileError(lookup.path, f"BTREE batch_size {batch} is not positive")
    names = [f.name for f in data.schema.fields]
    if names != [_btree.VALUES, _btree.IDS]:
        raise CorruptFileError(data.path, f"BTREE page data has columns {names}")
    ids_field = data.schema.to_arrow().field(_btree.IDS)
    mins: list[pa.Array] = []
    maxs: list[pa.Array] = []
    nulls: list[int] = []

    def page(rows: pa.Table) -> pa.Table:
        """Record one page's statistics as pylance's training does: its first value is the
        min, its last the max (values are sorted, nulls first)."""
        values = rows.column(_btree.VALUES).combine_chunks()
        mins.append(values.slice(0, 1))
        maxs.append(values.slice(len(values) - 1, 1))
        nulls.append(values.null_count)
        return rows

    def pages() -> Iterator[pa.Table]:
        pending: list[pa.Table] = []
        held = 0
        for start in range(0, data.num_rows, batch):
            rows = data.read(names, start, min(start + batch, data.num_rows))
            ids, keep = amap.apply(rows.column(_btree.IDS).to_numpy(), data.path)
            rows = rows.set_column(1, ids_field, pa.array(ids, pa.uint64())).filter(keep)
            pending.append(rows)
            held += rows.num_rows
            while held >= batch:
                merged = pa.concat_tables(pending).combine_chunks()
                yield page(merged.slice(0, batch))
                pending, held = [merged.slice(batch)], merged.num_rows - batch
        if held:
            yield page(pa.concat_tables(pending).combine_chunks())

    try:
        data_size = write_index_file(
            store, f"{target}/{_btree.DATA_FILE}", data.schema, pages(), data.version
        )
    finally:
        data.close()
    arrow = lookup.schema.to_arrow()
    value_type = arrow.field("min").type
    table = pa.Table.from_arrays(
        [
            pa.concat_arrays(mins).cast(value_type) if mins else pa.array([], value_type),
            pa.concat_arrays(maxs).cast(value_type) if maxs else pa.array([], value_type),
            pa.array(nulls, pa.uint32()),
            pa.array(np.arange(len(nulls), dtype=np.uint32)),
        ],
        schema=arrow,
    )
    lookup_size = write_index_file(
        store, f"{target}/{_btree.LOOKUP_FILE}", lookup.schema, [table], lookup.version
    )
    return [(_btree.DATA_FILE, data_size), (_btree.LOOKUP_FILE, lookup_size)]


def _opened(store: ObjectStore, path: str, columns: list[str]) -> IndexFile:
    """An index file, checked to hold exactly `columns`."""
    opened = IndexFile(store, path)
    names = [f.name for f in opened.schema.fields]
    if names != columns:
        opened.close()
        raise CorruptFileError(opened.path, f"index file has columns {names}, not {columns}")
    return opened


def _remap_bitmap(
    store: ObjectStore, directory: str, target: str, amap: AddressMap
) -> list[tuple[str, int]]:
    """The lookup with every key kept and its row id map rewritten (a LABEL_LIST's map of
    null lists, in global buffer 1, too)."""
    lookup = _opened(store, f"{directory}/{_bitmap.LOOKUP_FILE}", [_bitmap.KEYS, _bitmap.BITMAPS])
    names = [_bitmap.KEYS, _bitmap.BITMAPS]
    arrow = lookup.schema.to_arrow()

    def chunks() -> Iterator[pa.Table]:
        for start in range(0, lookup.num_rows, _BITMAP_CHUNK):
            rows = lookup.read(names, start, min(start + _BITMAP_CHUNK, lookup.num_rows))
            blobs = rows.column(_bitmap.BITMAPS).combine_chunks()
            remapped = [
                None if b is None else remap_row_id_map(b, amap, lookup.path)
                for b in blobs.to_pylist()
            ]
            # as pylance, a key none of whose rows is left goes
            live = pa.array([b != _NO_ROWS for b in remapped], pa.bool_())
            rows = rows.set_column(
                1, arrow.field(_bitmap.BITMAPS), pa.array(remapped, arrow.field(1).type)
            )
            yield rows.filter(live)

    try:
        buffers = [
            remap_row_id_map(lookup.global_buffer(i), amap, lookup.path)
            for i in range(1, len(lookup.global_buffers))
        ]
        size = write_index_file(
            store,
            f"{target}/{_bitmap.LOOKUP_FILE}",
            lookup.schema,
            chunks(),
            lookup.version,
            buffers,
        )
    finally:
        lookup.close()
    return [(_bitmap.LOOKUP_FILE, size)]


def _remap_ngram(
    store: ObjectStore, directory: str, target: str, amap: AddressMap
) -> list[tuple[str, int]]:
    """The postings with every token kept (one whose rows were all deleted keeps an empty
    list, as pylance keeps it) and its rows moved to their new addresses."""
    names = [_ngram.TOKENS, _ngram.POSTINGS]
    postings = _opened(store, f"{directory}/{_ngram.POSTINGS_FILE}", names)
    arrow = postings.schema.to_arrow()

    def moved(blob: bytes) -> bytes:
        try:
            rows = np.frombuffer(BitMap64.deserialize(blob).to_array(), dtype=np.uint64)
        except ValueError as e:  # pyroaring refuses a malformed treemap
            raise CorruptFileError(postings.path, f"bad NGRAM posting list: {e}") from None
        new, keep = amap.apply(rows, postings.path)
        kept = np.sort(new[keep])
        return BitMap64(array.array("Q", kept.tobytes()), optimize=False).serialize()

    def chunks() -> Iterator[pa.Table]:
        for start in range(0, postings.num_rows, _BITMAP_CHUNK):
            rows = postings.read(names, start, min(start + _BITMAP_CHUNK, postings.num_rows))
            blobs = rows.column(_ngram.POSTINGS).to_pylist()
            remapped = pa.array([moved(b) for b in blobs], arrow.field(_ngram.POSTINGS).type)
            yield rows.set_column(1, arrow.field(_ngram.POSTINGS), remapped)

    try:
        size = write_index_file(
            store, f"{target}/{_ngram.POSTINGS_FILE}", postings.schema, chunks(), postings.version
        )
    finally:
        postings.close()
    return [(_ngram.POSTINGS_FILE, size)]


def remap_row_id_map(blob: bytes, amap: AddressMap, where: str) -> bytes:
    """A serialized row id map (the format `rows.parse_row_id_map` reads) with the rows of
    rewritten fragments moved to their new addresses; other fragments' entries are copied."""
    view = memoryview(blob)
    kept: dict[int, bytes] = {}
    moved: list[np.ndarray] = []
    try:
        (count,) = _U32.unpack_from(view, 0)
        pos = 4
        for _ in range(count):
            frag, size = _U32.unpack_from(view, pos)[0], _U32.unpack_from(view, pos + 4)[0]
            pos += 8
            if pos + size > len(view):
                raise CorruptFileError(where, "row id map runs past the end of its bitmap")
            if not amap.covers(frag):
                kept[frag] = bytes(view[pos - 8 : pos + size])
            elif size == 0:  # every row of the fragment
                low = np.arange(amap.length(frag), dtype=np.uint64)
                moved.append((np.uint64(frag) << _SHIFT) | low)
            else:
                bitmap = BitMap.deserialize(bytes(view[pos : pos + size]))
                low = np.frombuffer(bitmap.to_array(), dtype=np.uint32).astype(np.uint64)
                moved.append((np.uint64(frag) << _SHIFT) | low)
            pos += size
    except struct.error:
        raise CorruptFileError(where, "truncated row id map in a bitmap index") from None
    except ValueError as e:  # pyroaring refuses a malformed bitmap
        raise CorruptFileError(where, f"bad roaring bitmap in a bitmap index: {e}") from None
    if moved:
        new, keep = amap.apply(np.concatenate(moved), where)
        new = unique_sorted(new[keep])  # may be empty: every row of the key was deleted
        high = (new >> _SHIFT).astype(np.int64)
        frags, firsts = np.unique(high, return_index=True)
        bounds = [*firsts[1:].tolist(), len(new)] if len(new) else []
        for frag, lo, hi in zip(frags.tolist(), firsts.tolist(), bounds, strict=True):
            low = array.array("I", (new[lo:hi] & _LOW).astype(np.uint32).tobytes())
            data = BitMap(low).serialize()
            kept[frag] = _U32.pack(frag) + _U32.pack(len(data)) + data
    return _U32.pack(len(kept)) + b"".join(kept[f] for f in sorted(kept))
