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

__all__ = [
    "BITMAP_DETAILS",
    "BTREE_DETAILS",
    "LABEL_LIST_DETAILS",
    "build_bitmap",
    "build_btree",
    "build_label_list",
    "check_type",
]

BTREE_DETAILS = "/lance.table.BTreeIndexDetails"
BITMAP_DETAILS = "/lance.table.BitmapIndexDetails"
LABEL_LIST_DETAILS = "/lance.table.LabelListIndexDetails"

_U32 = struct.Struct("<I")
_SHIFT = np.uint64(32)
_LOW = np.uint64(0xFFFFFFFF)


def check_type(kind: str, column: str, type_: pa.DataType) -> None:
    """Refuse a column an index cannot hold, as pylance refuses it: flat scalar values
    (numbers, booleans, strings, binaries, times, decimals), or for LABEL_LIST lists of
    them."""
    if kind in ("INVERTED", "MINHASHLSH"):
        if not (pa.types.is_string(type_) or pa.types.is_large_string(type_)):
            raise InvalidInputError(f"an {kind} index needs a text column: {column!r} is {type_}")
        return
    if kind == "NGRAM":
        if not (
            pa.types.is_string(type_)
            or pa.types.is_large_string(type_)
            or pa.types.is_string_view(type_)
        ):
            raise InvalidInputError(f"an NGRAM index needs a text column: {column!r} is {type_}")
        return
    if kind == "LABEL_LIST":
        if not (pa.types.is_list(type_) or pa.types.is_large_list(type_)):
            raise InvalidInputError(
                f"a LABEL_LIST index needs a column of lists: {column!r} is {type_}"
            )
        type_ = type_.value_type
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


def _ranks(values: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Each row's key as a rank among the distinct non-null values (-1 for null), and those
    values in index order. Floats are told apart by their bits (-0.0 and 0.0 are two keys,
    as in pylance; all NaNs of one bit pattern are one)."""
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_floating(values.type):
        keys = _float_keys(values)
        distinct, first, inverse = np.unique(keys[valid], return_index=True, return_inverse=True)
        ranks = np.full(len(values), -1, dtype=np.int64)
        ranks[valid] = inverse
        return ranks, values.filter(pa.array(valid)).take(pa.array(first))
    encoded = values.dictionary_encode()
    dictionary = encoded.dictionary
    by_value = pc.array_sort_indices(dictionary).to_numpy()
    rank_of_code = np.empty(len(dictionary), dtype=np.int64)
    rank_of_code[by_value] = np.arange(len(dictionary))
    codes = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    ranks = np.where(valid, rank_of_code[codes] if len(dictionary) else -1, -1)
    return ranks, dictionary.take(pa.array(by_value))


def _btree_order(values: pa.Array) -> np.ndarray:
    """Positions of `values` in index order, as pylance sorts: nulls first, then values
    ascending (NaN after every number). Ties come in any order, as in pylance."""
    t = values.type
    if (pa.types.is_floating(t) or pa.types.is_integer(t)) and _few_distinct(values):
        keys = _dictionary_ranks(values)  # a radix sort of small ranks
    elif pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_boolean(t):
        # NaN sorts last; -0.0 and 0.0 tie, as their values do
        keys = values.fill_null(False if pa.types.is_boolean(t) else 0)
        keys = keys.to_numpy(zero_copy_only=False)
    elif pa.types.is_temporal(t):
        keys = values.view(pa.int64() if t.bit_width == 64 else pa.int32()).fill_null(0)
        keys = keys.to_numpy(zero_copy_only=False)
    else:  # strings, binaries, decimals: ranks among the distinct values
        keys = _ranks(values)[0]
    if not values.null_count:
        return _argsort(keys)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    rest = np.flatnonzero(valid)
    return np.concatenate([np.flatnonzero(~valid), rest[_argsort(keys[rest])]])


def _argsort(keys: np.ndarray) -> np.ndarray:
    """The order of `keys`: a radix sort for small integers, a scatter for distinct integers
    filling most of their range (as ids do), else numpy's sort."""
    if keys.dtype.itemsize <= 2:
        return np.argsort(keys, kind="stable")
    if np.issubdtype(keys.dtype, np.integer) and len(keys) > 1:
        low, high = int(keys.min()), int(keys.max())
        if high - low < 2 * len(keys):
            slots = np.full(high - low + 1, -1, dtype=np.int64)
            offsets = keys - low if low else keys
            slots[offsets] = np.arange(len(keys))
            order = slots[slots >= 0]
            if len(order) == len(keys):  # every key distinct: the scatter lost none
                return order
    return np.argsort(keys)


# A column whose sample holds at most this many distinct values is sorted by value rank.
_FEW_DISTINCT = 4096
_SAMPLE = 16384


def _few_distinct(values: pa.Array) -> bool:
    """Whether a large column (a strided sample of it) holds few distinct values."""
    n = len(values)
    if n < 4 * _SAMPLE:
        return False
    sample = values.take(pa.array(np.arange(0, n, n // _SAMPLE)))
    return len(pc.unique(sample)) <= _FEW_DISTINCT


def _dictionary_ranks(values: pa.Array) -> np.ndarray:
    """Each value's rank among the distinct values (int16 when they fit, -1 for null, NaN
    after every number; -0.0 and 0.0 may rank either way: they tie): a hash encoding of the
    column and a sort of its dictionary only."""
    encoded = values.dictionary_encode()
    dictionary = encoded.dictionary.to_numpy(zero_copy_only=False)
    rank_of_code = np.empty(len(dictionary), dtype=np.int64)
    rank_of_code[np.argsort(dictionary, kind="stable")] = np.arange(len(dictionary))
    small = np.int16 if len(dictionary) < 32767 else np.int64
    codes = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
    return rank_of_code.astype(small)[codes]


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
    order = _btree_order(values)
    values = values.take(pa.array(order))
    ids = pa.array(row_ids[order], pa.uint64())
    value_field = pa.field(_btree.VALUES, values.type)
    data_schema = _schema([value_field, pa.field(_btree.IDS, pa.uint64(), nullable=False)])
    n = len(values)
    starts = range(0, n, batch_size)
    # written in large slices: the file's own pages need not follow the index's
    chunk = batch_size * 64
    pages = (
        pa.table([values.slice(s, chunk), ids.slice(s, chunk)], schema=data_schema.to_arrow())
        for s in range(0, n, chunk)
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


def row_id_map(ids: np.ndarray) -> bytes:
    """The serialized row id map of sorted row ids: per fragment, a portable Roaring bitmap
    of its row offsets."""
    if not len(ids):
        return _U32.pack(0)
    frags = (ids >> _SHIFT).astype(np.int64)
    uniq, firsts = np.unique(frags, return_index=True)
    bounds = [*firsts[1:].tolist(), len(ids)]
    parts = [_U32.pack(len(uniq))]
    for frag, lo, hi in zip(uniq.tolist(), firsts.tolist(), bounds, strict=True):
        data = BitMap(array.array("I", (ids[lo:hi] & _LOW).astype(np.uint32).tobytes())).serialize()
        parts.append(_U32.pack(frag) + _U32.pack(len(data)) + data)
    return b"".join(parts)


def _bitmaps(values: pa.Array, row_ids: np.ndarray) -> tuple[pa.Array, list[bytes]]:
    """One key per distinct value (the null key first when there are nulls), sorted, and the
    serialized row id map of the rows holding each."""
    row_ids = np.asarray(row_ids, dtype=np.uint64)
    ranks, keys = _ranks(values)
    # rows grouped by key (the null key first), in scan order within each key
    order = np.argsort(ranks.astype(np.int16 if len(keys) < 32767 else np.int64), kind="stable")
    ids = row_ids[order]
    counts = np.bincount(ranks + 1, minlength=len(keys) + 1)
    if counts[0] == 0:  # no null key
        counts = counts[1:]
    else:
        keys = pa.concat_arrays([pa.nulls(1, keys.type), keys])
    bounds = np.cumsum(counts)
    starts = bounds - counts
    if len(row_ids) > 1 and not np.all(row_ids[1:] > row_ids[:-1]):  # stable row ids
        ids = np.concatenate([np.sort(ids[lo:hi]) for lo, hi in zip(starts, bounds, strict=True)])
    bounds, starts = bounds.tolist(), starts.tolist()
    return keys, [row_id_map(ids[lo:hi]) for lo, hi in zip(starts, bounds, strict=True)]


def _write_bitmaps(
    store: ObjectStore,
    directory: str,
    keys: pa.Array,
    blobs: list[bytes],
    version: str,
    metadata: dict[str, str] | None = None,
    buffers: tuple[bytes, ...] = (),
) -> list[tuple[str, int]]:
    stats = json.dumps({"num_bitmaps": len(blobs)}, separators=(",", ":"))
    schema = _schema(
        [pa.field(_bitmap.KEYS, keys.type), pa.field(_bitmap.BITMAPS, pa.binary())],
        {"lance:index_stats": stats, **(metadata or {})},
    )
    lookup = pa.table([keys, pa.array(blobs, pa.binary())], schema=schema.to_arrow())
    path = f"{directory}/{_bitmap.LOOKUP_FILE}"
    size = write_index_file(store, path, schema, [lookup], version, buffers)
    return [(_bitmap.LOOKUP_FILE, size)]


def build_bitmap(
    store: ObjectStore,
    directory: str,
    values: pa.Array,
    row_ids: np.ndarray,
    version: str,
) -> list[tuple[str, int]]:
    """Write a BITMAP of `values` (their row ids beside) into `directory`; (file, size) pairs."""
    keys, blobs = _bitmaps(values, row_ids)
    return _write_bitmaps(store, directory, keys, blobs, version)


def build_label_list(
    store: ObjectStore,
    directory: str,
    values: pa.Array,
    row_ids: np.ndarray,
    version: str,
) -> list[tuple[str, int]]:
    """Write a LABEL_LIST of list `values` (their row ids beside) into `directory`, as
    pylance writes it: a BITMAP of the lists' elements (a row once per distinct element,
    null elements under the null key, empty lists nowhere), and the row id map of the null
    lists in global buffer 1 (`lance:label_list_nulls`); (file, size) pairs."""
    row_ids = np.asarray(row_ids, dtype=np.uint64)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    parents = pc.list_parent_indices(values).to_numpy()
    keys, blobs = _bitmaps(pc.list_flatten(values), row_ids[parents])
    nulls = np.sort(row_ids[~valid])
    return _write_bitmaps(
        store,
        directory,
        keys,
        blobs,
        version,
        {"lance:label_list_nulls": "1"},
        (row_id_map(nulls),),
    )
