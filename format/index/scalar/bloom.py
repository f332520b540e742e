"""BLOOMFILTER indices in the file pylance 14 writes and uses as its own, and their search.

Zones are the ZONEMAP's (`format.index.scalar.zonemap.zones`): up to 8,192 live rows of one
fragment, spanning the physical offsets from the first to the last. `bloomfilter.lance`
holds one row per zone: its fragment, first offset and span, whether it holds a null, and
a split-block bloom filter (`format.table.sbbf`, 32 KiB for pylance's 8,192 values at a
0.00057 false-positive rate) of its non-null values, each hashed as its own little-endian
bytes (an int32 as 4 bytes, a float32 as its 4 bits, a timestamp as its int64, strings and
binaries as they are); metadata `bloomfilter_item`, `bloomfilter_probability` and
`null_bitmap` (global buffer 1: the row address map of every null row).

A search answers `=`, `IN` and `IS NULL`: the rows of every zone whose filter may hold one
of the values (or, for `IS NULL`, exactly the null rows), a superset of the matches the
scan then filters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.errors import CorruptFileError, InvalidInputError
from quiver.format.index.files import IndexFile, write_index_file
from quiver.format.index.scalar.build import row_id_map
from quiver.format.index.scalar.rows import EMPTY, parse_row_id_map
from quiver.format.index.scalar.zonemap import zones
from quiver.format.io.store import ObjectStore
from quiver.format.table.sbbf import (
    check_hashes,
    filters_bytes,
    log2_bytes,
    xxh64_fixed,
    xxh64_values,
)
from quiver.format.table.schema import LanceSchema

__all__ = [
    "BLOOM_DETAILS",
    "BLOOM_FILE",
    "BloomIndex",
    "build_bloomfilter",
    "check_bloom_type",
    "value_hashes",
]

BLOOM_DETAILS = "/lance.index.pb.BloomFilterIndexDetails"
BLOOM_FILE = "bloomfilter.lance"
NUMBER_OF_ITEMS = 8192
PROBABILITY = "0.00057"
_EMPTY_HASHES = np.empty(0, np.uint64)
_SHIFT = np.uint64(32)
_LOW = np.uint64(0xFFFFFFFF)


def _supported(type_: pa.DataType) -> bool:
    t = pa.types
    return (
        (t.is_integer(type_) or t.is_floating(type_) and not t.is_float16(type_))
        or t.is_string(type_)
        or t.is_large_string(type_)
        or t.is_binary(type_)
        or t.is_large_binary(type_)
        or t.is_date(type_)
        or t.is_time(type_)
        or t.is_timestamp(type_)
    )


def check_bloom_type(column: str, type_: pa.DataType) -> None:
    """Refuse a column pylance's BLOOMFILTER cannot hold (it hashes integers, floats,
    strings, binaries, dates, times and timestamps)."""
    if not _supported(type_):
        raise InvalidInputError(
            f"a BLOOMFILTER index holds numbers, strings, binaries, dates and times: "
            f"{column!r} is {type_}"
        )


def value_hashes(values: pa.Array) -> np.ndarray:
    """The xxHash64 of each value as the bloom filter hashes it (see the module
    docstring); `values` holds no nulls."""
    type_ = values.type
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return xxh64_values([v.encode() for v in values.to_pylist()])
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_):
        return xxh64_values(values.to_pylist())
    if not (pa.types.is_integer(type_) or pa.types.is_floating(type_)):
        storage = pa.int32() if type_.bit_width == 32 else pa.int64()
        values = values.view(storage)
    return xxh64_fixed(values.to_numpy(zero_copy_only=False))


def build_bloomfilter(
    store: ObjectStore,
    directory: str,
    values: pa.Array,
    addresses: np.ndarray,
    version: str,
    previous: Sequence[tuple[ObjectStore, str]] = (),
    physical_rows: Mapping[int, int] | None = None,
) -> list[tuple[str, int]]:
    """Write a BLOOMFILTER of `values` (their row addresses beside, in scan order) into
    `directory`; (file, size) pairs. With `previous` segments (store, directory), their
    zones come first, as they are (pylance's update of the index keeps them, rows deleted
    since included), and their null rows of the fragments in `physical_rows` too."""
    addresses = np.asarray(addresses, dtype=np.uint64)
    starts, stops = zones(addresses)
    size = 1 << log2_bytes(NUMBER_OF_ITEMS, float(PROBABILITY))
    # every zone's non-null values hashed at once, zone after zone
    edges = np.concatenate((starts, stops[-1:])) if len(starts) else np.zeros(1, np.int64)
    if values.null_count:
        valid = values.is_valid().to_numpy(zero_copy_only=False)
        nulls_before = np.concatenate(([0], np.cumsum(~valid)))[edges]
        nulls = addresses[~valid]
        del valid
    else:
        nulls_before = np.zeros(len(edges), np.int64)
        nulls = addresses[:0]
    bounds = edges - nulls_before
    has_null = (np.diff(nulls_before) > 0).tolist()
    present = values.drop_null() if values.null_count else values
    # hashed a million values at a time: the hash's temporaries stay small
    step = 1 << 20
    hashes = [value_hashes(present.slice(i, step)) for i in range(0, len(present), step)]
    filters = filters_bytes(np.concatenate(hashes or [_EMPTY_HASHES]), bounds, size)
    offsets = addresses & _LOW
    first = offsets[starts] if len(starts) else np.zeros(0, np.uint64)
    last = offsets[stops - 1] if len(stops) else np.zeros(0, np.uint64)
    fields = [
        pa.field("fragment_id", pa.uint64(), nullable=False),
        pa.field("zone_start", pa.uint64(), nullable=False),
        pa.field("zone_length", pa.uint64(), nullable=False),
        pa.field("has_null", pa.bool_(), nullable=False),
        pa.field("bloom_filter_data", pa.binary(), nullable=False),
    ]
    metadata = {
        "bloomfilter_item": str(NUMBER_OF_ITEMS),
        "bloomfilter_probability": PROBABILITY,
        "null_bitmap": "1",
    }
    schema = LanceSchema.from_arrow(pa.schema(fields, metadata=metadata))
    table = pa.table(
        [
            pa.array(addresses[starts] >> _SHIFT if len(starts) else [], pa.uint64()),
            pa.array(first, pa.uint64()),
            pa.array(last - first + np.uint64(1), pa.uint64()),
            pa.array(has_null, pa.bool_()),
            pa.array(filters, pa.binary()),
        ],
        schema=schema.to_arrow(),
    )
    if previous:
        olds = [_read_segment(s, d, physical_rows or {}) for s, d in previous]
        table = pa.concat_tables([t for t, _ in olds] + [table])
        nulls = np.unique(np.concatenate([n for _, n in olds] + [nulls]))
    null_rows = row_id_map(nulls)
    written = write_index_file(
        store, f"{directory}/{BLOOM_FILE}", schema, [table], version, [null_rows]
    )
    return [(BLOOM_FILE, written)]


def _read_segment(
    store: ObjectStore, directory: str, physical_rows: Mapping[int, int]
) -> tuple[pa.Table, np.ndarray]:
    """A segment's zones, and its null rows in the fragments of `physical_rows`."""
    with IndexFile(store, f"{directory}/{BLOOM_FILE}") as f:
        names = ["fragment_id", "zone_start", "zone_length", "has_null", "bloom_filter_data"]
        return f.read(names), parse_row_id_map(f.global_buffer(1), physical_rows, f.path)


@dataclass(frozen=True)
class BloomIndex:
    """The zones of one BLOOMFILTER index segment and their filters."""

    store: ObjectStore
    directory: str
    fragments: np.ndarray  # uint64 per zone
    starts: np.ndarray
    lengths: np.ndarray
    # the zones' filters by size: (zone numbers, a uint8 matrix of their filters' bytes)
    filters: list[tuple[np.ndarray, np.ndarray]]

    @classmethod
    def load(cls, store: ObjectStore, directory: str) -> BloomIndex:
        """Read the zones of the index in `directory` (relative to `store`)."""
        columns = ["fragment_id", "zone_start", "zone_length", "bloom_filter_data"]
        with IndexFile(store, f"{directory}/{BLOOM_FILE}") as f:
            table = f.read(columns)
            where = f.path
        if any(table.column(c).null_count for c in columns):
            raise CorruptFileError(where, "BLOOMFILTER zones with nulls")
        data = table.column("bloom_filter_data").combine_chunks()
        sizes = pc.binary_length(data).to_numpy(zero_copy_only=False)
        if (sizes % 32).any() or (sizes == 0).any():
            raise CorruptFileError(where, "a bloom filter's size is not a multiple of 32 bytes")
        offsets = np.frombuffer(data.buffers()[1], np.int32)[data.offset : data.offset + len(data)]
        raw = np.frombuffer(data.buffers()[2], np.uint8)
        filters = []
        for size in np.unique(sizes).tolist():
            zones_ = np.flatnonzero(sizes == size)
            at = offsets[zones_].astype(np.int64)[:, None] + np.arange(size)[None, :]
            filters.append((zones_, raw[at]))
        return cls(
            store,
            directory,
            *(table.column(c).to_numpy() for c in columns[:3]),
            filters,
        )

    def search(self, values: Sequence[pa.Scalar], type_: pa.DataType) -> np.ndarray:
        """Sorted row addresses of the zones whose filter may hold one of `values` (Arrow
        scalars of the indexed column's type, none null)."""
        if not values:
            return EMPTY
        array = pa.array([v.as_py() for v in values], type_)
        if pa.types.is_floating(type_):  # 0.0 = -0.0, which hash apart
            zeros = pc.equal(array, 0).to_numpy(zero_copy_only=False)
            array = pa.concat_arrays([array, pc.negate(array.filter(zeros))])
        hashes = value_hashes(array)
        hit = np.sort(
            np.concatenate(
                [z[check_hashes(m, hashes).any(axis=1)] for z, m in self.filters] or [EMPTY]
            )
        ).astype(np.int64)
        if not len(hit):
            return EMPTY
        base = (self.fragments[hit] << _SHIFT) + self.starts[hit]
        spans = zip(base.tolist(), self.lengths[hit].tolist(), strict=True)
        return np.concatenate([np.arange(b, b + n, dtype=np.uint64) for b, n in spans])

    def null_rows(self, physical_rows: Mapping[int, int]) -> np.ndarray:
        """Sorted row addresses of the null rows of the fragments in `physical_rows`."""
        with IndexFile(self.store, f"{self.directory}/{BLOOM_FILE}") as f:
            if f.metadata.get("null_bitmap") != b"1":
                raise CorruptFileError(f.path, "no null_bitmap buffer")
            return parse_row_id_map(f.global_buffer(1), physical_rows, f.path)
