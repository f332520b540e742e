"""Blobs over Flight as ranged reads: the `take_blobs` action locates the blobs of some rows
(their row addresses and sizes, pinned to a version) and `read_blob` returns a byte range
of one of them, a JSON header first, then the bytes in Results of up to `CHUNK_BYTES`. A
client reads a video's frames or an archive's members without fetching the whole blob
(`clients.blobs`); whole blob columns also stream in scans with `blob_handling`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quiver.flight_server.errors import InvalidArgument
from quiver.flight_server.protocol import Fields, version_ref
from quiver.format.dataset.blobs import BlobFile, locate_blobs
from quiver.wire.requests import BLOB_RANGE_BYTES

if TYPE_CHECKING:
    from quiver.flight_server.actions import ActionContext

MAX_ROWS = 100_000  # rows one take_blobs may locate (its answer is one JSON message)
CHUNK_BYTES = 1 << 20  # bytes per Result of a read_blob


@dataclass(frozen=True)
class BlobBytes:
    """A `read_blob` answer: a JSON header, then the bytes in chunks."""

    header: dict[str, Any]
    data: bytes

    def chunks(self) -> Iterator[memoryview]:
        view = memoryview(self.data)
        for start in range(0, len(view), CHUNK_BYTES):
            yield view[start : start + CHUNK_BYTES]


def _selection(f: Fields) -> dict[str, list[int]]:
    given = {k: f.list(k) for k in ("indices", "ids", "addresses") if f.has(k)}
    if len(given) != 1:
        raise InvalidArgument(f"{f.what}: give exactly one of 'indices', 'ids' and 'addresses'")
    ((key, values),) = given.items()
    if len(values) > MAX_ROWS:
        raise InvalidArgument(f"{f.what}: '{key}' holds {len(values)} rows; at most {MAX_ROWS}")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise InvalidArgument(f"{f.what}: '{key}' must hold non-negative integers")
    return {key: values}


def take_blobs(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    """{dataset, column, indices | ids | addresses, version | tag | as_of} -> {version,
    blobs: [{row_address, size}]} in the order asked, `size` null for a null blob."""
    name = f.dataset()
    column = f.str("column", required=True)
    version, tag, as_of = version_ref(f)
    selection = _selection(f)
    ds = ctx.handles.open_ref(name, version, tag, as_of)
    located = locate_blobs(ds.core, ds.get_fragments(), column, **selection)
    return {
        "version": ds.version,
        "blobs": [
            {"row_address": addr, "size": None if loc is None else loc.size}
            for addr, loc in located
        ],
    }


def read_blob(ctx: ActionContext, f: Fields) -> BlobBytes:
    """{dataset, version, column, address, offset?, length?} -> the header {row_address,
    size, offset, length} and `length` bytes of the blob at `offset` (without a length, to
    its end or BLOB_RANGE_BYTES, whichever comes first: the header says how many)."""
    name = f.dataset()
    column = f.str("column", required=True)
    version = f.int("version", required=True, minimum=1)
    address = f.int("address", required=True, minimum=0)
    offset = f.int("offset", minimum=0) or 0
    length = f.int("length", minimum=0)
    ds = ctx.handles.open_version(name, version)
    ((addr, loc),) = locate_blobs(ds.core, ds.get_fragments(), column, addresses=[address])
    if loc is None:
        raise InvalidArgument(f"read_blob: the blob at row address {address} is null")
    if offset > loc.size:
        raise InvalidArgument(f"read_blob: offset {offset} is past the blob's {loc.size} bytes")
    if length is None:
        length = min(loc.size - offset, BLOB_RANGE_BYTES)
    if offset + length > loc.size:
        raise InvalidArgument(
            f"read_blob: range {offset}+{length} ends past the blob's {loc.size} bytes"
        )
    if length > BLOB_RANGE_BYTES:
        raise InvalidArgument(
            f"read_blob: {length} bytes asked; one call returns at most {BLOB_RANGE_BYTES}"
        )
    with BlobFile(loc, buffer_size=0) as blob:
        data = blob.read_range(offset, length)
    header = {"row_address": addr, "size": loc.size, "offset": offset, "length": length}
    return BlobBytes(header, data)
