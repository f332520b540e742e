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
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from quiver.format.errors import InvalidInputError, UnsupportedFeatureError
from quiver.format.io.store import discard, open_store
from quiver.format.table.schema import BLOB_DESCRIPTION, BLOB_V2_DESCRIPTION

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

LEGACY_DESCRIPTION = BLOB_DESCRIPTION
V2_DESCRIPTION = BLOB_V2_DESCRIPTION

# Opens a sidecar of the data file being written for writing, by file name.
SidecarOpener = Callable[[str], BinaryIO]
EXTERNAL_MODES = ("reference", "ingest")


@dataclass(frozen=True)
class ExternalBlobs:
    """How blob values given as a URI are written (pylance's `external_blob_mode` and
    `allow_external_blob_outside_bases`): kept as references to the URI ("reference"; with
    no base path registered, only where references outside bases are allowed), or read and
    stored as any value ("ingest")."""

    allow_outside_bases: bool = False
    mode: str = "reference"
    storage_options: dict[str, Any] | None = None
    # references rows being rewritten carried already (kept whatever the rule above)
    carried: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.mode not in EXTERNAL_MODES:
            raise InvalidInputError(
                f"external_blob_mode must be one of {', '.join(EXTERNAL_MODES)}, not {self.mode!r}"
            )
        if self.allow_outside_bases and self.mode != "reference":
            raise InvalidInputError(
                "allow_external_blob_outside_bases only applies when external_blob_mode is "
                '"reference"'
            )

    def check(self, uri: str, where: str) -> str:
        """`uri`, if it may be stored as a reference."""
        if not self.allow_outside_bases and uri not in self.carried:
            raise InvalidInputError(
                f"{where}: external blob URI {uri!r} is outside registered external bases "
                "(the dataset root is not allowed); set allow_external_blob_outside_bases "
                "to store it as an absolute external URI"
            )
        if "://" not in uri:
            raise InvalidInputError(f"{where}: external blob URI {uri!r} is not absolute")
        return uri

    def read(self, reference: tuple[str, int, int], where: str) -> bytes:
        """The bytes a reference names: its range, or the whole object for (0, 0)."""
        uri, position, size = reference
        if "://" not in uri:
            raise InvalidInputError(f"{where}: external blob URI {uri!r} is not absolute")
        parent, _, name = uri.rstrip("/").rpartition("/")
        if not parent or not name:
            raise InvalidInputError(f"{where}: external blob URI {uri!r} names no object")
        try:
            with open_store(parent, self.storage_options).open(name) as f:
                if size == 0:
                    position, size = 0, f.size
                return bytes(f.read(position, size))
        except (FileNotFoundError, EOFError) as e:
            raise InvalidInputError(f"{where}: external blob {uri!r}: {e}") from None


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
        external: ExternalBlobs | None = None,
    ) -> None:
        self._write = write
        self._cursor = cursor
        self._open_sidecar = open_sidecar
        self._where = where
        self._external = external or ExternalBlobs()
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
        each value's bytes inline, packed or dedicated by size; a value given as a URI is
        an external reference, or its bytes with `external.mode` "ingest"."""
        inline, dedicated, pack_limit = limits
        if isinstance(values, pa.ExtensionArray):
            values = values.storage
        refs: dict[int, tuple[str, int, int]] = {}  # row -> (uri, position, size)
        if pa.types.is_struct(values.type):
            valid = _valid(values)
            data = _binary(values.field("data"), self._where)
            refs = _references(values, valid, self._where)
        else:
            data = _binary(values, self._where)
            valid = _valid(data)
        n = len(data)
        has_data = _valid(data)
        missing = valid & ~has_data
        missing[list(refs)] = False
        if missing.any():
            raise InvalidInputError(
                f"{self._where}: a blob value has neither data nor uri (use None for a null "
                "blob and b'' for an empty one)"
            )
        kind = np.zeros(n, np.uint8)
        pos = np.zeros(n, np.uint64)
        size = np.zeros(n, np.uint64)
        blob_id = np.zeros(n, np.uint32)
        uris = [""] * n
        for i in np.flatnonzero(valid).tolist():
            if i in refs:
                reference = refs[i]
                if self._external.mode == "reference":
                    kind[i], uris[i] = EXTERNAL, self._external.check(reference[0], self._where)
                    pos[i], size[i] = reference[1], reference[2]
                    continue
                payload = pa.py_buffer(self._external.read(reference, self._where))
            else:
                payload = data[i].as_buffer()
            length = payload.size
            size[i] = length
            if length > dedicated:
                kind[i], blob_id[i] = DEDICATED, self._dedicated(payload)
            elif length > inline:
                kind[i] = PACKED
                blob_id[i], pos[i] = self._packed(payload, pack_limit)
            elif length:
                pos[i] = self._write(payload)
            else:  # an empty value sits at the aligned cursor
                pos[i] = -(-self._cursor() // ALIGNMENT) * ALIGNMENT
        children = [
            pa.array(kind, pa.uint8()),
            pa.array(pos, pa.uint64()),
            pa.array(size, pa.uint64()),
            pa.array(blob_id, pa.uint32()),
            pa.array(uris, pa.string()),
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
            discard(self._pack[1])
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


def _valid(values: pa.Array) -> np.ndarray:
    return (
        np.ones(len(values), bool) if values.null_count == 0 else values.is_valid().to_numpy(False)
    )


def _references(
    struct: pa.StructArray, valid: np.ndarray, where: str
) -> dict[int, tuple[str, int, int]]:
    """Row -> (uri, position, size) of the valid values given as a URI ((0, 0): all of it)."""
    uri = struct.field("uri")
    rows = np.flatnonzero(valid & _valid(uri))
    if not len(rows):
        return {}
    if (_valid(struct.field("data"))[rows]).any():
        raise InvalidInputError(f"{where}: a blob value has both data and a uri")
    names = [struct.type.field(i).name for i in range(struct.type.num_fields)]
    ranged = "position" in names and "size" in names
    out = {}
    for i in rows.tolist():
        position = size = 0
        if ranged and struct.field("position")[i].is_valid:
            position, size = (
                int(struct.field("position")[i].as_py()),
                int(struct.field("size")[i].as_py() or 0),
            )
            if size <= 0:
                raise InvalidInputError(f"{where}: an external blob range must have a size above 0")
        out[i] = (str(uri[i].as_py()), position, size)
    return out


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
