"""Manifest files: naming, the length-prefixed framing, feature flags, (de)serialisation.

A manifest file is ``[index section][transaction]<u32 len><Manifest>`` followed by the
16-byte footer ``i64 manifest position | u16 0 | u16 2 | "LANC"``; the Manifest must end
exactly where the footer begins.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from google.protobuf.message import DecodeError

from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.proto import table_pb2, transaction_pb2
from quiver.format.table.schema import LanceSchema

MAGIC = b"LANC"
FOOTER_SIZE = 16
_U64_MAX = (1 << 64) - 1
_V2_NAME_LEN = 20 + len(".manifest")
_DETACHED = 1 << 63

# Feature flags (manifest reader/writer words).
FLAG_DELETION_FILES = 1
FLAG_STABLE_ROW_IDS = 2
FLAG_USE_V2_FORMAT_DEPRECATED = 4
FLAG_TABLE_CONFIG = 8
FLAG_BASE_PATHS = 16
FLAG_DISABLE_TRANSACTION_FILE = 32
FLAG_UNSTABLE_DATA_OVERLAY_FILES = 64
FLAG_COVERED_INDEX_METADATA = 128
FLAG_MIXED_DATA_FILE_VERSIONS = 256
FLAG_FRAGMENT_REUSE_INDEX = 1024
FLAG_MANAGED_BLOBS = 2048
READABLE_FLAGS = (
    FLAG_DELETION_FILES
    | FLAG_STABLE_ROW_IDS
    | FLAG_USE_V2_FORMAT_DEPRECATED
    | FLAG_TABLE_CONFIG
    | FLAG_BASE_PATHS
    | FLAG_DISABLE_TRANSACTION_FILE
    | FLAG_COVERED_INDEX_METADATA
    | FLAG_MIXED_DATA_FILE_VERSIONS
    | FLAG_FRAGMENT_REUSE_INDEX
    | FLAG_MANAGED_BLOBS
)
_FLAG_NAMES = {
    FLAG_UNSTABLE_DATA_OVERLAY_FILES: "data overlay files",
    512: "flag 512 (unreleased)",
}

STORAGE_VERSIONS = ("0.1", "2.0", "2.1", "2.2", "2.3")
_FILE_VERSION_NAMES = {
    (0, 0): "0.1",
    (0, 1): "0.1",
    (0, 2): "0.1",
    (0, 3): "2.0",
    (2, 0): "2.0",
    (2, 1): "2.1",
    (2, 2): "2.2",
    (2, 3): "2.3",
}


def storage_version_of_file(major: int, minor: int) -> str:
    """The storage version string ("0.1", "2.0", ...) of a DataFile's (major, minor)."""
    try:
        return _FILE_VERSION_NAMES[(major, minor)]
    except KeyError:
        raise UnsupportedFeatureError(f"unknown Lance data file version {major}.{minor}") from None


# -- naming ------------------------------------------------------------------------------
def manifest_name(version: int, *, v2: bool = True) -> str:
    """The file name (under ``_versions/``) of a version's manifest in either scheme."""
    if version & _DETACHED:
        return f"d{version}.manifest"
    return f"{_U64_MAX - version:020d}.manifest" if v2 else f"{version}.manifest"


def parse_manifest_name(name: str) -> tuple[int, bool] | None:
    """(version, is_v2_scheme) of a manifest file name, or None for anything else."""
    if not name.endswith(".manifest") or name.startswith("d"):
        return None
    stem = name[: -len(".manifest")]
    if not stem.isdigit():
        return None
    if len(name) == _V2_NAME_LEN:
        return _U64_MAX - int(stem), True
    return int(stem), False


# -- reading -----------------------------------------------------------------------------
def _parse(message_type: type, data: bytes, where: str, what: str):  # noqa: ANN202
    msg = message_type()
    try:
        msg.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise CorruptFileError(where, f"{what} does not decode: {e}") from None
    return msg


@dataclass
class Manifest:
    """One version of a dataset: a decoded manifest and where it came from."""

    pb: table_pb2.Manifest
    path: str  # relative to the dataset root
    size: int
    raw: bytes | None = None  # the whole file when it was read in one piece
    # reads a file of the dataset (a path relative to its root), for what the manifest
    # names outside itself (a fragment reuse index's details)
    read_file: Callable[[str], bytes] | None = field(default=None, repr=False, compare=False)

    @property
    def version(self) -> int:
        """The dataset version this manifest describes."""
        return int(self.pb.version)

    @cached_property
    def schema(self) -> LanceSchema:
        """The table schema, with field ids."""
        return LanceSchema.from_protos(
            self.pb.fields, dict(self.pb.schema_metadata), where=self.path
        )

    @property
    def fragments(self) -> list[table_pb2.DataFragment]:
        """The fragments of this version, in manifest order."""
        return list(self.pb.fragments)

    @property
    def timestamp(self) -> dt.datetime:
        """Commit time (UTC, timezone-aware)."""
        ts = self.pb.timestamp
        return dt.datetime.fromtimestamp(ts.seconds, dt.timezone.utc) + dt.timedelta(
            microseconds=ts.nanos // 1000
        )

    @property
    def data_storage_version(self) -> str:
        """The storage version every data file of this version uses ("0.1", "2.0", ...)."""
        if self.pb.HasField("data_format") and self.pb.data_format.version:
            v = self.pb.data_format.version
            return "0.1" if v == "legacy" else v
        for frag in self.pb.fragments:
            for f in frag.files:
                return storage_version_of_file(f.file_major_version, f.file_minor_version)
        return "2.0"

    @property
    def transaction_position(self) -> int | None:
        """Offset of the inline transaction in this file, if any."""
        if self.pb.HasField("transaction_section"):
            return int(self.pb.transaction_section)
        if self.pb.HasField("transaction_section_deprecated"):
            return int(self.pb.transaction_section_deprecated)
        return None

    @property
    def uses_stable_row_ids(self) -> bool:
        """Whether fragments carry stable row id sequences."""
        return bool(self.pb.reader_feature_flags & FLAG_STABLE_ROW_IDS)

    def check_readable(self, dataset: str) -> None:
        """Refuse reader feature flags this engine does not implement."""
        unknown = self.pb.reader_feature_flags & ~READABLE_FLAGS
        if unknown:
            names = [
                _FLAG_NAMES.get(1 << b, f"flag {1 << b}") for b in range(64) if unknown & (1 << b)
            ]
            raise UnsupportedFeatureError(
                f"{dataset} version {self.version} needs unsupported reader features: "
                + ", ".join(names)
            )
        if self.data_storage_version not in STORAGE_VERSIONS:
            raise UnsupportedFeatureError(
                f"{dataset} version {self.version}: unsupported data storage version "
                f"{self.data_storage_version!r}"
            )


def decode_manifest(data: bytes, path: str) -> Manifest:
    """Decode a whole manifest file held in memory."""
    size = len(data)
    if size < FOOTER_SIZE + 4 or data[-4:] != MAGIC:
        raise CorruptFileError(path, "not a Lance manifest (missing footer magic)")
    (pos,) = struct.unpack_from("<q", data, size - FOOTER_SIZE)
    if pos < 0 or pos + 4 > size - FOOTER_SIZE:
        raise CorruptFileError(path, f"manifest position {pos} outside the file ({size} bytes)")
    (length,) = struct.unpack_from("<I", data, pos)
    if length != size - pos - 4 - FOOTER_SIZE:
        raise CorruptFileError(
            path,
            f"manifest length {length} at {pos} does not reach the footer "
            f"(expected {size - pos - 4 - FOOTER_SIZE}); the file is truncated or damaged",
        )
    pb = _parse(table_pb2.Manifest, data[pos + 4 : pos + 4 + length], path, "manifest")
    return Manifest(pb, path, size, data)


def read_section(manifest: Manifest, position: int, message_type: type, what: str):  # noqa: ANN201
    """Decode a u32-length-prefixed section (transaction, index section) of a manifest file."""
    data = manifest.raw
    if data is None or position + 4 > len(data):
        raise CorruptFileError(manifest.path, f"{what} position {position} outside the file")
    (length,) = struct.unpack_from("<I", data, position)
    if position + 4 + length > len(data):
        raise CorruptFileError(manifest.path, f"{what} at {position} runs past the end")
    return _parse(message_type, data[position + 4 : position + 4 + length], manifest.path, what)


def inline_transaction(manifest: Manifest) -> transaction_pb2.Transaction | None:
    """The transaction stored inside the manifest file, if it has one."""
    pos = manifest.transaction_position
    if pos is None:
        return None
    return read_section(manifest, pos, transaction_pb2.Transaction, "transaction")


# -- writing -----------------------------------------------------------------------------
def encode_manifest(
    pb: table_pb2.Manifest,
    *,
    transaction: transaction_pb2.Transaction | None = None,
    index_section: bytes | None = None,
    prefix: bytes = b"",
) -> bytes:
    """Serialise a manifest file: [prefix], index section, inline transaction, manifest, footer.

    `prefix` holds legacy datasets' dictionary values, which pylance reads from the head
    of the manifest file. Sets `index_section` and `transaction_section` positions on `pb`.
    """
    parts: list[bytes] = [prefix]
    offset = len(prefix)
    if index_section is not None:
        pb.index_section = offset
        parts.append(struct.pack("<I", len(index_section)) + index_section)
        offset += 4 + len(index_section)
    else:
        pb.ClearField("index_section")
    if transaction is not None:
        body = transaction.SerializeToString()
        pb.transaction_section = offset
        parts.append(struct.pack("<I", len(body)) + body)
        offset += 4 + len(body)
    body = pb.SerializeToString()
    parts.append(struct.pack("<I", len(body)) + body)
    parts.append(struct.pack("<qHH", offset, 0, 2) + MAGIC)
    return b"".join(parts)
