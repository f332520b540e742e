"""Deletion files: which physical rows of a fragment are deleted.

A fragment's ``DeletionFile`` points at ``_deletions/{fragment_id}-{read_version}-{id}.{ext}``
holding 0-based physical row offsets (previously deleted rows included), in one of two formats:

* ``ARROW_ARRAY`` (``.arrow``): an Arrow IPC *file* with exactly one record batch and one
  non-nullable ``UInt32`` column ``row_id``; pylance compresses the body with ZSTD and writes
  the values in hash-set order.
* ``BITMAP`` (``.bin``): a 32-bit roaring bitmap in the portable serialization.

pylance keeps a deletion vector as a set while it has at most 5000 entries and writes it as
``.arrow``; bigger vectors become ``.bin``. Readers accept either format at any size.
"""

from __future__ import annotations

import array
import secrets
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyroaring

from quiver.format.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from quiver.format.io.store import ObjectStore
from quiver.format.proto import table_pb2

__all__ = [
    "ARROW_ARRAY",
    "BITMAP",
    "BITMAP_THRESHOLD",
    "DELETION_SCHEMA",
    "DeletionFileInfo",
    "deletion_file_path",
    "encode_deletion_file",
    "live_mask",
    "live_offsets",
    "parse_deletion_file",
    "read_deletion_file",
    "read_fragment_deletions",
    "with_deletion_file",
    "write_deletion_file",
]

ARROW_ARRAY: int = table_pb2.DeletionFile.ARROW_ARRAY  # 0, ".arrow"
BITMAP: int = table_pb2.DeletionFile.BITMAP  # 1, ".bin"
# More deleted rows than this are written as a roaring bitmap (pylance's BITMAP_THRESDHOLD).
BITMAP_THRESHOLD = 5000
DELETION_SCHEMA = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])
DELETIONS_DIR = "_deletions"
_U32_MAX = 0xFFFF_FFFF


class DeletionFileInfo(NamedTuple):
    """What `write_deletion_file` wrote: the fields a ``DeletionFile`` message needs."""

    path: str
    file_type: int
    file_id: int
    num_deleted_rows: int


def deletion_file_path(fragment_id: int, read_version: int, file_id: int, bitmap: bool) -> str:
    """Path of a deletion file relative to the dataset root, as pylance names it."""
    suffix = "bin" if bitmap else "arrow"
    return f"{DELETIONS_DIR}/{fragment_id}-{read_version}-{file_id}.{suffix}"


def _file_type_is_bitmap(file_type: int, path: str) -> bool:
    """Map a DeletionFileType to "is a bitmap", rejecting unknown values."""
    if file_type == ARROW_ARRAY:
        return False
    if file_type == BITMAP:
        return True
    raise CorruptFileError(path, f"unknown deletion file type {file_type}")


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values as uint32 (sort-based: much faster than np.unique on numpy 2.4)."""
    ordered = np.sort(values.astype(np.uint32, copy=False))
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def _parse_arrow(data: bytes, path: str) -> np.ndarray:
    """Deleted offsets from the bytes of an ``.arrow`` deletion file (validated like pylance)."""
    try:
        reader = ipc.open_file(pa.py_buffer(data))
        n_batches = reader.num_record_batches
        if n_batches != 1:
            raise CorruptFileError(
                path, f"expected exactly one record batch in deletion file, got {n_batches}"
            )
        if not reader.schema.equals(DELETION_SCHEMA, check_metadata=True):
            want = DELETION_SCHEMA.to_string(show_schema_metadata=False)
            got = reader.schema.to_string(show_schema_metadata=True)
            raise CorruptFileError(path, f"expected deletion file schema {want!r}, got {got!r}")
        batch = reader.get_batch(0)
        batch.validate(full=True)
    except (pa.ArrowException, OSError) as e:  # pyarrow's IO errors are OSErrors
        raise CorruptFileError(path, f"not a readable Arrow IPC file: {e}") from None
    column = batch.column(0)
    if column.null_count:
        raise CorruptFileError(path, f"{column.null_count} null values in deletion file")
    values = column.to_numpy(zero_copy_only=False)
    return _sorted_unique(values)


def _parse_bitmap(data: bytes, path: str) -> np.ndarray:
    """Deleted offsets from the bytes of a ``.bin`` (portable 32-bit roaring) deletion file."""
    if len(data) < 8:
        raise CorruptFileError(path, f"roaring bitmap truncated: only {len(data)} bytes")
    try:
        bitmap = pyroaring.BitMap.deserialize(bytes(data))
    except (ValueError, IndexError, OverflowError) as e:
        raise CorruptFileError(path, f"not a portable roaring bitmap: {e}") from None
    return np.frombuffer(bitmap.to_array(), dtype=np.uint32).copy()


def parse_deletion_file(data: bytes, file_type: int, path: str = "<deletion file>") -> np.ndarray:
    """Sorted unique deleted offsets (uint32) from deletion-file bytes; `path` names errors."""
    if _file_type_is_bitmap(file_type, path):
        return _parse_bitmap(data, path)
    return _parse_arrow(data, path)


def read_deletion_file(store: ObjectStore, path: str, file_type: int) -> np.ndarray:
    """Read a deletion file and return its sorted unique deleted row offsets (uint32)."""
    try:
        data = store.read_all(path)
    except FileNotFoundError:
        raise CorruptFileError(path, "deletion file listed in the manifest is missing") from None
    return parse_deletion_file(data, file_type, path)


def read_fragment_deletions(store: ObjectStore, fragment: table_pb2.DataFragment) -> np.ndarray:
    """Deleted offsets (uint32, sorted) of a fragment; empty when it has no deletion file."""
    if not fragment.HasField("deletion_file"):
        return np.empty(0, dtype=np.uint32)
    df = fragment.deletion_file
    if df.HasField("base_id"):
        raise UnsupportedFeatureError(
            f"fragment {fragment.id}: deletion file in base path {df.base_id} is not supported"
        )
    bitmap = _file_type_is_bitmap(df.file_type, f"fragment {fragment.id} deletion file")
    path = deletion_file_path(fragment.id, df.read_version, df.id, bitmap)
    offsets = read_deletion_file(store, path, df.file_type)
    if df.num_deleted_rows and df.num_deleted_rows != offsets.size:
        raise CorruptFileError(
            path,
            f"holds {offsets.size} deleted rows but the manifest says {df.num_deleted_rows}",
        )
    if fragment.physical_rows and offsets.size and int(offsets[-1]) >= fragment.physical_rows:
        raise CorruptFileError(
            path,
            f"deletes offset {int(offsets[-1])} of a fragment with "
            f"{fragment.physical_rows} physical rows",
        )
    return offsets


def _normalise_offsets(offsets: np.ndarray) -> np.ndarray:
    """Sorted unique uint32 offsets from any integer array; rejects values outside u32."""
    arr = np.asarray(offsets)
    if arr.ndim != 1:
        raise InvalidInputError(f"deleted offsets must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return np.empty(0, dtype=np.uint32)
    if arr.dtype.kind not in "iu":
        raise InvalidInputError(f"deleted offsets must be integers, got dtype {arr.dtype}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi > _U32_MAX:
        raise InvalidInputError(f"deleted offsets must lie in [0, 2**32), got [{lo}, {hi}]")
    return _sorted_unique(arr)


def encode_deletion_file(offsets: np.ndarray, bitmap: bool) -> bytes:
    """Bytes of a deletion file holding `offsets`: ZSTD Arrow IPC file, or portable roaring."""
    values = _normalise_offsets(offsets)
    if bitmap:
        # Array containers up to 4096 values, bitsets above, no run containers: cookie 12346,
        # byte-identical to what pylance (Rust `roaring`) writes.
        bm = pyroaring.BitMap(array.array("I", values.tobytes()), optimize=False)
        return bm.serialize()
    batch = pa.record_batch([pa.array(values, type=pa.uint32())], schema=DELETION_SCHEMA)
    sink = pa.BufferOutputStream()
    options = ipc.IpcWriteOptions(compression="zstd")
    with ipc.new_file(sink, DELETION_SCHEMA, options=options) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def write_deletion_file(
    store: ObjectStore, fragment_id: int, read_version: int, offsets: np.ndarray
) -> DeletionFileInfo:
    """Write the deletion file for a fragment's deleted offsets and describe it for the manifest.

    At most `BITMAP_THRESHOLD` distinct offsets give an ``.arrow`` file, more give a ``.bin``
    roaring bitmap; the file id is a random u64. Writing no offsets is an error: a fragment
    without deletions has no deletion file.
    """
    values = _normalise_offsets(offsets)
    if values.size == 0:
        raise InvalidInputError(
            f"fragment {fragment_id}: no deleted offsets, so no deletion file to write"
        )
    bitmap = values.size > BITMAP_THRESHOLD
    file_id = secrets.randbits(64)
    path = deletion_file_path(fragment_id, read_version, file_id, bitmap)
    store.put(path, encode_deletion_file(values, bitmap))
    return DeletionFileInfo(path, BITMAP if bitmap else ARROW_ARRAY, file_id, int(values.size))


def with_deletion_file(
    store: ObjectStore, fragment: table_pb2.DataFragment, read_version: int, offsets: np.ndarray
) -> tuple[table_pb2.DataFragment, str]:
    """A copy of `fragment` whose deletion file holds `offsets` (all its deleted rows),
    written now as of `read_version`, and the new file's path."""
    info = write_deletion_file(store, int(fragment.id), read_version, offsets)
    out = table_pb2.DataFragment()
    out.CopyFrom(fragment)
    out.deletion_file.CopyFrom(
        table_pb2.DeletionFile(
            file_type=info.file_type,
            read_version=read_version,
            id=info.file_id,
            num_deleted_rows=info.num_deleted_rows,
        )
    )
    return out, info.path


def live_mask(physical_rows: int, deleted: np.ndarray) -> np.ndarray:
    """Boolean mask over a fragment's physical rows: True where the row is not deleted."""
    if physical_rows < 0:
        raise InvalidInputError(f"physical_rows must be non-negative, got {physical_rows}")
    mask = np.ones(physical_rows, dtype=bool)
    deleted = np.asarray(deleted)
    if deleted.size:
        if deleted.dtype.kind not in "iu":
            raise InvalidInputError(f"deleted offsets must be integers, got dtype {deleted.dtype}")
        lo, hi = int(deleted.min()), int(deleted.max())
        if lo < 0 or hi >= physical_rows:
            raise InvalidInputError(
                f"deleted offsets [{lo}, {hi}] fall outside a fragment of {physical_rows} rows"
            )
        mask[deleted.astype(np.int64, copy=False)] = False
    return mask


def live_offsets(physical_rows: int, deleted: np.ndarray) -> np.ndarray:
    """Physical offsets (uint32) of the rows of a fragment that are not deleted, in order."""
    return np.flatnonzero(live_mask(physical_rows, deleted)).astype(np.uint32)
