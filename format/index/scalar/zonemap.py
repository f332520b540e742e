"""Building ZONEMAP indices in the file pylance 14 writes and uses as its own.

A zone is up to 8,192 live rows of one fragment, in row order. `zonemap.lance` holds one row
per zone: the minimum and maximum of its non-null values (a NaN counts as the largest float,
so a zone holding one has a NaN maximum; the minimum is of the other values, null without
any),
its null and NaN counts, its fragment, and where it lies in the fragment (the offset of its
first live row and the span to its last), with metadata `rows_per_zone` and `null_bitmap`
(the position of global buffer 1: the row address map of every null row, fragments without
one left out). Each zone's statistics are Arrow's or numpy's reductions of one slice.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.file.types import is_var_binary
from quiver.format.index.files import write_index_file
from quiver.format.index.scalar.build import row_id_map
from quiver.format.io.store import ObjectStore
from quiver.format.table.schema import LanceSchema

__all__ = ["ZONEMAP_DETAILS", "ZONEMAP_FILE", "build_zonemap", "zonemap_details", "zones"]

ZONEMAP_DETAILS = "/lance.table.ZoneMapIndexDetails"
ZONEMAP_FILE = "zonemap.lance"
ROWS_PER_ZONE = 8192
_SHIFT = np.uint64(32)
_LOW = np.uint64(0xFFFFFFFF)


def zonemap_details(type_: pa.DataType) -> bytes:
    """The `ZoneMapIndexDetails` pylance records: rows per zone (field 1), whether the
    values are variable-width or decimals (field 2), and 1 (field 3)."""
    wide = is_var_binary(type_) or pa.types.is_decimal(type_)
    return bytes([0x08, 0x80, 0x40, 0x10, 1 if wide else 0, 0x18, 0x01])


def zones(addresses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each zone's rows start and stop among the scanned rows: runs of one fragment,
    cut every ROWS_PER_ZONE rows (none without rows)."""
    if not len(addresses):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    frags = addresses >> _SHIFT
    cuts = np.flatnonzero(frags[1:] != frags[:-1]) + 1
    runs = zip(np.concatenate(([0], cuts)).tolist(), [*cuts.tolist(), len(addresses)], strict=True)
    starts = [s for lo, hi in runs for s in range(lo, hi, ROWS_PER_ZONE)]
    return np.asarray(starts, np.int64), np.asarray([*starts[1:], len(addresses)], np.int64)


def _float_stats(values: pa.Array) -> tuple[list, list, list]:
    """Per zone min, max and NaN count of a float slice (see the module docstring)."""
    floats = values.to_numpy(zero_copy_only=False)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    nan = np.isnan(floats) & valid
    numbers = floats[valid & ~nan]
    lo = hi = None
    if len(numbers):
        lo, hi = float(numbers.min()), float(numbers.max())
    if nan.any():
        hi = float("nan")
    return lo, hi, int(nan.sum())


def build_zonemap(
    store: ObjectStore,
    directory: str,
    values: pa.Array,
    addresses: np.ndarray,
    version: str,
) -> list[tuple[str, int]]:
    """Write a ZONEMAP of `values` (their row addresses beside, in scan order) into
    `directory`; (file, size) pairs."""
    addresses = np.asarray(addresses, dtype=np.uint64)
    starts, stops = zones(addresses)
    floating = pa.types.is_floating(values.type)
    mins, maxs, nulls, nans = [], [], [], []
    for lo, hi in zip(starts.tolist(), stops.tolist(), strict=True):
        part = values.slice(lo, hi - lo)
        nulls.append(part.null_count)
        if floating:
            low, high, nan_count = _float_stats(part)
        else:
            found = pc.min_max(part)
            low, high, nan_count = found["min"].as_py(), found["max"].as_py(), 0
        mins.append(low)
        maxs.append(high)
        nans.append(nan_count)
    offsets = addresses & _LOW
    first, last = offsets[starts] if len(starts) else [], offsets[stops - 1] if len(stops) else []
    null_rows = addresses[~values.is_valid().to_numpy(zero_copy_only=False)]
    fields = [
        pa.field("min", values.type),
        pa.field("max", values.type),
        pa.field("null_count", pa.uint32(), nullable=False),
        pa.field("nan_count", pa.uint32(), nullable=False),
        pa.field("fragment_id", pa.uint64(), nullable=False),
        pa.field("zone_start", pa.uint64(), nullable=False),
        pa.field("zone_length", pa.uint64(), nullable=False),
    ]
    schema = LanceSchema.from_arrow(
        pa.schema(fields, metadata={"null_bitmap": "1", "rows_per_zone": str(ROWS_PER_ZONE)})
    )
    table = pa.table(
        [
            pa.array(mins, values.type),
            pa.array(maxs, values.type),
            pa.array(nulls, pa.uint32()),
            pa.array(nans, pa.uint32()),
            pa.array(addresses[starts] >> _SHIFT if len(starts) else [], pa.uint64()),
            pa.array(first, pa.uint64()),
            pa.array(np.asarray(last, np.uint64) - np.asarray(first, np.uint64) + 1, pa.uint64()),
        ],
        schema=schema.to_arrow(),
    )
    size = write_index_file(
        store, f"{directory}/{ZONEMAP_FILE}", schema, [table], version, [row_id_map(null_rows)]
    )
    return [(ZONEMAP_FILE, size)]
