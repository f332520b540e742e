"""Blob values written out of line, as pylance 14 writes them, and the descriptions that
take their place in the blob column.

Legacy blobs (2.0 / 2.1 files: a binary field marked `lance-encoding:blob`) go into the
data file itself, each on a 64-byte boundary, described by (position, size); an empty value
is (0, 0), a null (1, 0) in 2.0 (whose descriptions have no nulls) and a null description
in 2.1. Blob v2 (2.2 files, the `lance.blob.v2` struct of `data` / `uri`) chooses by size:
up to the inline threshold (64 KiB) in the data file as above (kind 0; an empty value sits
at the aligned cursor), up to the dedicated threshold (4 MiB) appended to a pack sidecar
shared by several values (kind 1; a new pack once it would pass the pack-file threshold),
and above that a sidecar of its own (kind 2). Sidecars are numbered from 1 per data file,
one counter for both kinds; their file names come from `sidecar_name`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from quiver.format.errors import InvalidInputError, UnsupportedFeatureError

ALIGNMENT = 64
INLINE_THRESHOLD = 64 * 1024
DEDICATED_THRESHOLD = 4 * 1024 * 1024
PACK_FILE_THRESHOLD = 1024 * 1024 * 1024
THRESHOLD_KEYS = {
    "inline": "lance-encoding:blob-inline-size-threshold",
    "dedicated": "lance-encoding:blob-dedicated-size-threshold",
    "pack_file": "lance-encoding:blob-pack-file-size-threshold",
}
INLINE, PACKED, DEDICATED, EXTERNAL = 0, 1, 2, 3

LEGACY_DESCRIPTION = pa.struct([("position", pa.uint64()), ("size", pa.uint64())])
V2_DESCRIPTION = pa.struct(
    [
        pa.field("kind", pa.uint8(), False),
        pa.field("position", pa.uint64(), False),
        pa.field("size", pa.uint64(), False),
        pa.field("blob_id", pa.uint32(), False),
        pa.field("blob_uri", pa.string(), False),
    ]
)

# Opens a sidecar of the data file being written for writing, by file name.
SidecarOpener = Callable[[str], BinaryIO]


def sidecar_name(blob_id: int) -> str:
    """The file name of a blob v2 sidecar: the id's 32 bits, lowest first."""
    return format(blob_id, "032b")[::-1] + ".blob"


def thresholds(metadata: dict[str, bytes], where: str) -> tuple[int, int, int]:
    """(inline, dedicated, pack file) thresholds of a blob v2 field: its metadata's, else
    pylance's defaults."""
    out = []
    for key, default in (
        ("inline", INLINE_THRESHOLD),
        ("dedicated", DEDICATED_THRESHOLD),
        ("pack_file", PACK_FILE_THRESHOLD),
    ):
        raw = metadata.get(THRESHOLD_KEYS[key])
        try:
            value = default if raw is None else int(raw)
        except ValueError:
            raise InvalidInputError(
                f"{where}: {THRESHOLD_KEYS[key]} {raw!r} is not an integer"
            ) from None
        if value < (0 if key == "inline" else 1):
            raise InvalidInputError(f"{where}: {THRESHOLD_KEYS[key]} {value} is out of range")
        out.append(value)
    return out[0], out[1], out[2]


class BlobSpill:
    """Writes one data file's blob values out of line: into the data file through `write`
    (which appends a buffer at a 64-byte boundary and returns its position) and `cursor`
    (the file's current size), and into sidecars through `open_sidecar`."""

    def __init__(
        self,
        write: Callable[[bytes | memoryview], int],
        cursor: Callable[[], int],
        open_sidecar: SidecarOpener | None,
        where: str,
    ) -> None:
        self._write = write
        self._cursor = cursor
        self._open_sidecar = open_sidecar
        self._where = where
        self._next_id = 1
        self._pack: tuple[int, BinaryIO, int] | None = None  # (id, sink, bytes so far)
        self.sidecars: list[str] = []

    def legacy(self, values: pa.Array, *, null_description: bool) -> pa.StructArray:
        """Descriptions of legacy blob values, their bytes written into the data file; a
        null is a null description, or (1, 0) with `null_description` False (2.0)."""
        values = _binary(values, self._where)
        n = len(values)
        pos = np.zeros(n, np.uint64)
        size = np.zeros(n, np.uint64)
        valid = np.ones(n, bool) if values.null_count == 0 else values.is_valid().to_numpy(False)
        lengths = _lengths(values)
        for i in np.flatnonzero(valid & (lengths > 0)).tolist():
            pos[i] = self._write(values[i].as_buffer())
            size[i] = lengths[i]
        mask = None
        if not valid.all():
            if null_description:
                mask = pa.array(~valid)
            else:
                pos[~valid] = 1
        return pa.StructArray.from_arrays(
            [pa.array(pos, pa.uint64()), pa.array(size, pa.uint64())],
            fields=list(LEGACY_DESCRIPTION),
            mask=mask,
        )

    def v2(self, values: pa.Array, limits: tuple[int, int, int]) -> pa.StructArray:
        """Descriptions of blob v2 values (the `lance.blob.v2` storage struct, or binary),
        each value's bytes inline, packed or dedicated by size."""
        inline, dedicated, pack_limit = limits
        if isinstance(values, pa.ExtensionArray):
            values = values.storage
        if pa.types.is_struct(values.type):
            struct = values
            data = _binary(struct.field("data"), self._where)
            uri = struct.field("uri")
            if uri.null_count != len(uri) and _any_uri(uri, struct):
                raise UnsupportedFeatureError(
                    f"{self._where}: external blob references (a blob's 'uri') are not "
                    "written; give the blob's bytes"
                )
            valid = (
                np.ones(len(struct), bool)
                if struct.null_count == 0
                else struct.is_valid().to_numpy(False)
            )
        else:
            data = _binary(values, self._where)
            valid = (
                np.ones(len(data), bool)
                if data.null_count == 0
                else data.is_valid().to_numpy(False)
            )
        n = len(data)
        if n and (valid & ~data.is_valid().to_numpy(False)).any():
            raise InvalidInputError(
                f"{self._where}: a blob value has neither data nor uri (use None for a null "
                "blob and b'' for an empty one)"
            )
        kind = np.zeros(n, np.uint8)
        pos = np.zeros(n, np.uint64)
        size = np.zeros(n, np.uint64)
        blob_id = np.zeros(n, np.uint32)
        lengths = _lengths(data)
        for i in np.flatnonzero(valid).tolist():
            length = int(lengths[i])
            size[i] = length
            if length > dedicated:
                kind[i], blob_id[i] = DEDICATED, self._dedicated(data[i].as_buffer())
            elif length > inline:
                kind[i] = PACKED
                blob_id[i], pos[i] = self._packed(data[i].as_buffer(), pack_limit)
            elif length:
                pos[i] = self._write(data[i].as_buffer())
            else:  # an empty value sits at the aligned cursor
                pos[i] = -(-self._cursor() // ALIGNMENT) * ALIGNMENT
        children = [
            pa.array(kind, pa.uint8()),
            pa.array(pos, pa.uint64()),
            pa.array(size, pa.uint64()),
            pa.array(blob_id, pa.uint32()),
            pa.array([""] * n, pa.string()),
        ]
        mask = None if valid.all() else pa.array(~valid)
        return pa.StructArray.from_arrays(children, fields=list(V2_DESCRIPTION), mask=mask)

    def close(self) -> None:
        """Close the open pack sidecar, if any."""
        if self._pack is not None:
            self._pack[1].close()
            self._pack = None

    def abort(self) -> None:
        """Close the open pack sidecar without publishing it (where the sink can)."""
        if self._pack is not None:
            sink = self._pack[1]
            abort = getattr(sink, "abort", None)
            abort() if abort else sink.close()
            self._pack = None

    # -- sidecars -------------------------------------------------------------------------
    def _sidecar(self) -> tuple[int, BinaryIO]:
        if self._open_sidecar is None:
            raise UnsupportedFeatureError(
                f"{self._where}: blob values this large go to sidecar files, which this "
                "writer cannot create"
            )
        blob_id = self._next_id
        self._next_id += 1
        name = sidecar_name(blob_id)
        sink = self._open_sidecar(name)
        self.sidecars.append(name)
        return blob_id, sink

    def _dedicated(self, data: pa.Buffer) -> int:
        blob_id, sink = self._sidecar()
        try:
            sink.write(memoryview(data))
        finally:
            sink.close()
        return blob_id

    def _packed(self, data: pa.Buffer, limit: int) -> tuple[int, int]:
        if self._pack is not None and self._pack[2] and self._pack[2] + data.size > limit:
            self.close()
        if self._pack is None:
            blob_id, sink = self._sidecar()
            self._pack = (blob_id, sink, 0)
        blob_id, sink, at = self._pack
        sink.write(memoryview(data))
        self._pack = (blob_id, sink, at + data.size)
        return blob_id, at


def _any_uri(uri: pa.Array, struct: pa.Array) -> bool:
    """Whether any valid row of `struct` has a `uri`."""
    has = uri.is_valid().to_numpy(False)
    if struct.null_count:
        has &= struct.is_valid().to_numpy(False)
    return bool(has.any())


def _binary(values: pa.Array, where: str) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_large_binary(values.type):
        return values
    if pa.types.is_binary(values.type) or pa.types.is_binary_view(values.type):
        return values.cast(pa.large_binary())
    raise InvalidInputError(f"{where}: blob values must be binary, not {values.type}")


def _lengths(values: pa.Array) -> np.ndarray:
    offsets = np.frombuffer(values.buffers()[1], np.int64)[
        values.offset : values.offset + len(values) + 1
    ]
    return np.diff(offsets)
