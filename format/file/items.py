"""Dictionary items gathered row by row (the 2.0 reader's dictionary pages).

Dictionary pages store each row as an index into a page's items. Arrow's `take` rebuilds
string rows at ~5 ns each (the benchmark's low-cardinality column: a quarter of a 2.0 full
scan's decoding); `_kernels.take_items` copies each short item with one 16-byte store.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from format import _kernels

# Arrow's int32 offsets: string and binary rows end below this.
_INT32_END = (1 << 31) - 1


def take_items(items: pa.Array, idx: np.ndarray, *, base: int = 0) -> pa.Array:
    """Rows `items[idx - base]` (null where `idx < base`), of the items' type.

    `idx` holds unsigned integers below `len(items) + base` (callers check that first: an
    index beyond them is corruption, named by the caller)."""
    t = items.type
    fast = (pa.types.is_string(t) or pa.types.is_binary(t)) and len(items) and not items.null_count
    if not fast or idx.dtype.kind != "u":
        return _arrow_take(items, idx, base)
    idx = np.ascontiguousarray(idx)
    bounds = np.frombuffer(
        items.buffers()[1], dtype=np.int32, count=len(items) + 1, offset=4 * items.offset
    )
    bounds = bounds.astype(np.int64)
    if len(idx) * int(np.diff(bounds).max()) > _INT32_END:  # may overflow: Arrow's error
        return _arrow_take(items, idx, base)
    # the items' bytes with 16 to spare, so that every item is copied by one 16-byte store
    data = np.zeros(int(bounds[-1]) + 16, dtype=np.uint8)
    raw = items.buffers()[2]
    if raw is not None:
        data[: int(bounds[-1])] = np.frombuffer(raw, dtype=np.uint8, count=int(bounds[-1]))
    ends = np.empty(len(idx) + 1, dtype=np.int32)
    out = _kernels.take_items(bounds, data, idx, idx.itemsize, base, ends)
    validity = None
    if base:
        null = idx < base
        if null.any():
            validity = pa.py_buffer(np.packbits(~null, bitorder="little"))
    return pa.Array.from_buffers(t, len(idx), [validity, pa.py_buffer(ends), pa.py_buffer(out)])


def _arrow_take(items: pa.Array, idx: np.ndarray, base: int) -> pa.Array:
    if not base:
        return items.take(pa.array(idx))
    null = idx < base
    at = pa.array(idx.astype(np.int64) - base, pa.int64(), mask=null if null.any() else None)
    return items.take(at)
