"""Dictionary items gathered row by row (string dictionary pages of 2.0 and 2.1+ files).

Dictionary pages store each row as an index into a page's items. Arrow's `take` rebuilds
string rows at ~5 ns each (the benchmark's low-cardinality column: a quarter of a 2.0 full
scan's decoding); `_kernels.take_items` copies each short item with one 16-byte store.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from quiver.format import _kernels

# Arrow's int32 offsets: string and binary rows end below this.
_INT32_END = (1 << 31) - 1


@dataclass(frozen=True)
class ItemTable:
    """A dictionary's string items laid out for `_kernels.take_items`, once per page: their
    int64 bounds, and their bytes with 16 to spare (every item is copied by one 16-byte
    store)."""

    type: pa.DataType
    bounds: np.ndarray
    data: np.ndarray
    widest: int


def item_table(items: pa.Array, as_type: pa.DataType | None = None) -> ItemTable | None:
    """The items' table, gathering rows of `as_type` (the items' own type by default; a
    string or binary type with 32-bit offsets), or None where the compiled loop does not
    apply (nulls among the items, 64-bit row offsets, non-string types, no items): Arrow's
    `take` then gathers."""
    t = items.type if as_type is None else as_type
    large = pa.types.is_large_string(items.type) or pa.types.is_large_binary(items.type)
    narrow = pa.types.is_string(items.type) or pa.types.is_binary(items.type)
    if not (pa.types.is_string(t) or pa.types.is_binary(t)) or not (large or narrow):
        return None
    if not len(items) or items.null_count:
        return None
    bounds = np.frombuffer(
        items.buffers()[1],
        dtype=np.int64 if large else np.int32,
        count=len(items) + 1,
        offset=(8 if large else 4) * items.offset,
    ).astype(np.int64)
    if int(bounds[-1]) > _INT32_END:
        return None
    data = np.zeros(int(bounds[-1]) + 16, dtype=np.uint8)
    raw = items.buffers()[2]
    if raw is not None:
        data[: int(bounds[-1])] = np.frombuffer(raw, dtype=np.uint8, count=int(bounds[-1]))
    return ItemTable(t, bounds, data, int(np.diff(bounds).max()))


def take_items(
    items: pa.Array, idx: np.ndarray, *, base: int = 0, table: ItemTable | None = None
) -> pa.Array:
    """Rows `items[idx - base]` (null where `idx < base`), of the items' type (or the type
    `table` was made for); `table` is `item_table(items)` when the caller keeps it across
    calls.

    `idx` holds unsigned integers below `len(items) + base` (callers check that first: an
    index beyond them is corruption, named by the caller)."""
    if table is None:
        table = item_table(items)
    if table is None or idx.dtype.kind != "u" or len(idx) * table.widest > _INT32_END:
        return _arrow_take(items, idx, base)  # (past int32 offsets: Arrow's error)
    idx = np.ascontiguousarray(idx)
    ends = np.empty(len(idx) + 1, dtype=np.int32)
    out, nulls = _kernels.take_items(table.bounds, table.data, idx, idx.itemsize, base, ends)
    validity = None
    if nulls:
        validity = pa.py_buffer(np.packbits(idx >= base, bitorder="little"))
    return pa.Array.from_buffers(
        table.type, len(idx), [validity, pa.py_buffer(ends), pa.py_buffer(out)], null_count=nulls
    )


def _arrow_take(items: pa.Array, idx: np.ndarray, base: int) -> pa.Array:
    if not base:
        return items.take(pa.array(idx))
    null = idx < base
    at = pa.array(idx.astype(np.int64) - base, pa.int64(), mask=null if null.any() else None)
    return items.take(at)
