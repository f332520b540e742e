"""The inserted-keys filter of a merge on the unenforced primary key
(`Transaction.Update.inserted_rows`, a `KeyExistenceFilter`), as pylance 14 writes it, and
the test of two such filters for a key both may hold.

Two merges that race to insert the same new key must not both commit: each records the
keys it inserted, and the conflict check refuses (retryably) a merge whose filter may
share a key with one committed since its read version. pylance records them in a
split-block bloom filter (`format.table.sbbf`) (32 KiB: 8192 items at a 0.00057 false-positive
rate) of each key's xxHash64 (seed 0) over its bytes: integers, booleans, dates and
times as little-endian int64, floats as float64 bits (-0.0 as 0.0, one NaN), strings as
UTF-8 and binaries as they are; a key of several columns is each column's bytes followed
by a zero byte. Quiver writes the same filter, so pylance and Quiver test each other's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.errors import UnsupportedFeatureError
from quiver.format.proto import transaction_pb2
from quiver.format.table.sbbf import filter_bytes, xxh64_values

KeyExistenceFilter = transaction_pb2.Transaction.KeyExistenceFilter
NUM_BITS = 262_144  # 32 KiB, what pylance sizes for its default 8192 items
NUMBER_OF_ITEMS = 8192
PROBABILITY = 0.00057


def _column_bytes(col: pa.Array) -> list[bytes]:
    """Each value's key bytes (see the module's description)."""
    t = col.type
    if pa.types.is_dictionary(t):
        col = col.dictionary_decode()
        t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return [v.encode() for v in col.to_pylist()]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return list(col.to_pylist())
    if pa.types.is_floating(t):
        values = pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False).copy()
        values[values == 0.0] = 0.0  # -0.0 folded
        values[np.isnan(values)] = np.nan
        raw = values.astype("<f8").tobytes()
    elif pa.types.is_integer(t) or pa.types.is_boolean(t):
        raw = pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False).astype("<i8").tobytes()
    elif pa.types.is_temporal(t):
        storage = pa.int32() if t.bit_width == 32 else pa.int64()
        raw = col.view(storage).to_numpy(zero_copy_only=False).astype("<i8").tobytes()
    else:
        raise UnsupportedFeatureError(f"a primary key of type {t} cannot be hashed")
    return [raw[i : i + 8] for i in range(0, len(raw), 8)]


def key_hashes(keys: pa.Table | pa.RecordBatch) -> np.ndarray:
    """The xxHash64 of each row's key (the table's columns, in primary-key order)."""
    columns = [
        _column_bytes(c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c)
        for c in keys.columns
    ]
    if len(columns) == 1:
        rows = columns[0]
    else:
        rows = [b"".join(part + b"\0" for part in parts) for parts in zip(*columns, strict=True)]
    return xxh64_values(rows)


def inserted_keys_filter(field_ids: Sequence[int], hashes: np.ndarray) -> KeyExistenceFilter:
    """The filter a merge on the primary key (`field_ids`) commits for its inserted keys."""
    out = KeyExistenceFilter(field_ids=list(field_ids))
    out.bloom.bitmap = filter_bytes(hashes, NUM_BITS // 8)
    out.bloom.num_bits = NUM_BITS
    out.bloom.number_of_items = NUMBER_OF_ITEMS
    out.bloom.probability = PROBABILITY
    return out


def may_share_a_key(a: KeyExistenceFilter, b: KeyExistenceFilter) -> bool:
    """Whether two inserted-keys filters may hold a common key (never a false "no").

    Filters over other key fields, of other shapes or sizes cannot be compared and are
    taken to share one. Two exact sets share a key when their hashes meet; two bloom
    filters may when some block has, in each of its eight words, a bit both set (a key
    in both sets the same bit of every word of one block in each)."""
    if list(a.field_ids) != list(b.field_ids) or a.WhichOneof("data") != b.WhichOneof("data"):
        return True
    if a.WhichOneof("data") == "exact":
        return bool(set(a.exact.key_hashes) & set(b.exact.key_hashes))
    if a.WhichOneof("data") != "bloom" or a.bloom.num_bits != b.bloom.num_bits:
        return True
    wa = np.frombuffer(a.bloom.bitmap, dtype="<u4")
    wb = np.frombuffer(b.bloom.bitmap, dtype="<u4")
    if len(wa) != len(wb) or len(wa) % 8:
        return True
    both = (wa & wb).reshape(-1, 8)
    return bool((both != 0).all(axis=1).any())
