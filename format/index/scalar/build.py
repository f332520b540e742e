"""Building BTREE and BITMAP indices in the files pylance 14 writes and reads as its own.

Both start from one column's values and the row id of each (deleted rows left out):
- BTREE: `page_data.lance` holds every value sorted (nulls first) beside its row id, and
  `page_lookup.lance` the first value (min), last value (max) and null count of each page of
  4096 rows, with metadata `batch_size` and `range_partitioned` as pylance writes them.
  Ties may come in any order (pylance's own sort is not stable either).
- BITMAP: `bitmap_page_lookup.lance` holds one row per distinct value, null included,
  sorted (nulls first), with the serialized row id map of its rows (`rows.parse_row_id_map`
  reads it: a count, then per fragment its id, byte size and portable Roaring bitmap), and
  `lance:index_stats` metadata.
The files are Lance files of the dataset's storage version (2.0 for legacy datasets), as
pylance writes them. Sorting and grouping run in Arrow's and numpy's kernels; one column's
values and row ids are held in memory while the index is built.
"""

from __future__ import annotations

import array
import json
import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from quiver.format.errors import InvalidInputError
from quiver.format.file.types import fixed_bits, is_var_binary
from quiver.format.index.files import write_index_file
from quiver.format.index.scalar import bitmap as _bitmap
from quiver.format.index.scalar import btree as _btree
from quiver.format.io.store import ObjectStore
from quiver.format.table.schema import LanceSchema

__all__ = ["BITMAP_DETAILS", "BTREE_DETAILS", "build_bitmap", "build_btree", "check_type"]

BTREE_DETAILS = "/lance.table.BTreeIndexDetails"
BITMAP_DETAILS = "/lance.table.BitmapIndexDetails"

_U32 = struct.Struct("<I")
_SHIFT = np.uint64(32)
_LOW = np.uint64(0xFFFFFFFF)


def check_type(kind: str, column: str, type_: pa.DataType) -> None:
    """Refuse a column a BTREE or BITMAP index cannot hold, as pylance refuses it: only
    flat scalar values (numbers, booleans, strings, binaries, times, decimals)."""
    if fixed_bits(type_) is None and not is_var_binary(type_):
        raise InvalidInputError(
            f"a {kind} index needs a column of scalar values: {column!r} is {type_}"
        )


def _float_keys(values: pa.Array) -> np.ndarray:
    """Integers that order floats as IEEE 754's total order does (-0.0 before 0.0, NaN
    after every number), as pylance's sort orders them; equal only for identical bits."""
    floats = values.fill_null(0).to_numpy(zero_copy_only=False)
    bits = floats.view(f"i{floats.dtype.itemsize}").astype(np.int64)
    width = 8 * floats.dtype.itemsize
    sign = (bits >> (width - 1)) & 1
    return np.where(sign == 1, ~(bits & ((1 << (width - 1)) - 1)), bits)


def _sort_order(values: pa.Array, row_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Positions of `values` in index order, as pylance sorts: nulls first, then values
    ascending (floats in IEEE total order), equal values by row id; and, for floats, the
    sorted values' order keys (equal keys: one BITMAP key)."""
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    nulls = np.flatnonzero(~valid)
    nulls = nulls[np.argsort(row_ids[nulls], kind="stable")]
    rest = np.flatnonzero(valid)
    if pa.types.is_floating(values.type):
        keys = _float_keys(values)
        rest = rest[np.lexsort((row_ids[rest], keys[rest]))]
        order = np.concatenate([nulls, rest]).astype(np.int64)
        return order, keys[order]
    table = pa.table({"v": values.take(pa.array(rest)), "id": pa.array(row_ids[rest])})
    by = pc.sort_indices(table, sort_keys=[("v", "ascending"), ("id", "ascending")])
    return np.concatenate([nulls, rest[by.to_numpy()]]).astype(np.int64), None


def _schema(fields: list[pa.Field], metadata: dict[str, str] | None = None) -> LanceSchema:
    return LanceSchema.from_arrow(pa.schema(fields, metadata=metadata))


def build_btree(
    store: ObjectStore,
    directory: str,
    values: pa.Array,
    row_ids: np.ndarray,
    version: str,
    batch_size: int = _btree.DEFAULT_BATCH_SIZE,
) -> list[tuple[str, int]]:
    """Write a BTREE of `values` (their row ids beside) into `directory`; (file, size) pairs."""
    row_ids = np.asarray(row_ids, dtype=np.uint64)
    order, _ = _sort_order(values, row_ids)
    values = values.take(pa.array(order))
    ids = pa.array(row_ids[order], pa.uint64())
    value_field = pa.field(_btree.VALUES, values.type)
    data_schema = _schema([value_field, pa.field(_btree.IDS, pa.uint64(), nullable=False)])
    n = len(values)
    starts = range(0, n, batch_size)
    pages = (
        pa.table(
            [values.slice(s, batch_size), ids.slice(s, batch_size)], schema=data_schema.to_arrow()
        )
        for s in starts
    )
    data_size = write_index_file(
        store, f"{directory}/{_btree.DATA_FILE}", data_schema, pages, version
    )
    firsts = np.fromiter(starts, dtype=np.int64, count=len(starts))
    lasts = np.minimum(firsts + batch_size, n) - 1
    nulls = np.clip(values.null_count - firsts, 0, lasts - firsts + 1)  # nulls come first
    lookup_schema = _schema(
        [
            pa.field("min", values.type),
            pa.field("max", values.type),
            pa.field("null_count", pa.uint32(), nullable=False),
            pa.field("page_idx", pa.uint32(), nullable=False),
        ],
        {"batch_size": str(batch_size), "range_partitioned": "false"},
    )
    lookup = pa.table(
        [
            values.take(pa.array(firsts)),
            values.take(pa.array(lasts)),
            pa.array(nulls.astype(np.uint32), pa.uint32()),
            pa.array(np.arange(len(firsts), dtype=np.uint32)),
        ],
        schema=lookup_schema.to_arrow(),
    )
    lookup_size = write_index_file(
        store, f"{directory}/{_btree.LOOKUP_FILE}", lookup_schema, [lookup], version
    )
    return [(_btree.DATA_FILE, data_size), (_btree.LOOKUP_FILE, lookup_size)]


def _row_id_map(ids: np.ndarray) -> bytes:
    """The serialized row id map of sorted row ids: per fragment, a portable Roaring bitmap
    of its row offsets."""
    frags = (ids >> _SHIFT).astype(np.int64)
    uniq, firsts = np.unique(frags, return_index=True)
    bounds = [*firsts[1:].tolist(), len(ids)]
    parts = [_U32.pack(len(uniq))]
    for frag, lo, hi in zip(uniq.tolist(), firsts.tolist(), bounds, strict=True):
        data = BitMap(array.array("I", (ids[lo:hi] & _LOW).astype(np.uint32).tobytes())).serialize()
        parts.append(_U32.pack(frag) + _U32.pack(len(data)) + data)
    return b"".join(parts)


def build_bitmap(
    store: ObjectStore,
    directory: str,
    values: pa.Array,
    row_ids: np.ndarray,
    version: str,
) -> list[tuple[str, int]]:
    """Write a BITMAP of `values` (their row ids beside) into `directory`; (file, size) pairs."""
    row_ids = np.asarray(row_ids, dtype=np.uint64)
    order, float_keys = _sort_order(values, row_ids)
    values = values.take(pa.array(order))
    ids = row_ids[order]
    n = len(values)
    if n:
        # a new key where the value changes: floats by their bits (-0.0 and 0.0 are two
        # keys, as in pylance), the nulls are one key
        valid = values.is_valid().to_numpy(zero_copy_only=False)
        if float_keys is not None:
            same = float_keys[1:] == float_keys[:-1]
            same &= valid[1:] == valid[:-1]
        else:
            same = (
                pc.equal(values.slice(1), values.slice(0, n - 1))
                .fill_null(False)
                .to_numpy(zero_copy_only=False)
            )
        same |= ~valid[1:] & ~valid[:-1]
        starts = np.concatenate(([0], np.flatnonzero(~same) + 1))
    else:
        starts = np.empty(0, np.int64)
    bounds = [*starts[1:].tolist(), n] if len(starts) else []
    keys = values.take(pa.array(starts, pa.int64()))
    blobs = [_row_id_map(ids[lo:hi]) for lo, hi in zip(starts.tolist(), bounds, strict=True)]
    schema = _schema(
        [pa.field(_bitmap.KEYS, values.type), pa.field(_bitmap.BITMAPS, pa.binary())],
        {"lance:index_stats": json.dumps({"num_bitmaps": len(blobs)}, separators=(",", ":"))},
    )
    lookup = pa.table([keys, pa.array(blobs, pa.binary())], schema=schema.to_arrow())
    size = write_index_file(store, f"{directory}/{_bitmap.LOOKUP_FILE}", schema, [lookup], version)
    return [(_bitmap.LOOKUP_FILE, size)]
