"""General-purpose buffer compression of 2.1+ pages (`General{LZ4|ZSTD}`), both directions.

Framings (as pylance writes them):
* ZSTD: `u64 LE uncompressed length` + one zstd frame. A bare zstd frame is accepted too.
* LZ4: `u32 LE uncompressed length` + one LZ4 *block* (the lz4 crate's `prepend_size`).
"""

from __future__ import annotations

import struct
import threading

import lz4.block
import zstandard

from quiver.format.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from quiver.format.proto import encodings_v2_1_pb2 as pb

LZ4 = pb.COMPRESSION_ALGORITHM_LZ4
ZSTD = pb.COMPRESSION_ALGORITHM_ZSTD
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_LZ4_MAX_RATIO = 255  # an LZ4 block never expands data more than this


def scheme_name(scheme: int) -> str:
    """Human-readable name of a `CompressionScheme` value."""
    return {LZ4: "lz4", ZSTD: "zstd"}.get(scheme, f"scheme {scheme}")


def compress(data: bytes | memoryview, scheme: int, level: int | None = None) -> bytes:
    """Compress one buffer with the pylance framing of `scheme` (see module docstring)."""
    data = bytes(data)
    if scheme == ZSTD:
        frame = zstandard.ZstdCompressor(level=3 if not level else level).compress(data)
        return struct.pack("<Q", len(data)) + frame
    if scheme == LZ4:
        return lz4.block.compress(data, store_size=True)
    raise InvalidInputError(f"unknown general compression scheme {scheme}")


def decompress(data: bytes | memoryview, scheme: int, where: str) -> bytes:
    """Undo `compress`; corrupt input raises CorruptFileError naming `where`."""
    data = memoryview(data).cast("B")  # no copy of the compressed bytes (e.g. a page slice)
    if scheme == ZSTD:
        return _zstd(data, where)
    if scheme == LZ4:
        if len(data) < 4:
            raise CorruptFileError(where, f"LZ4 buffer of {len(data)} bytes has no size prefix")
        (size,) = struct.unpack_from("<I", data)
        if size > _LZ4_MAX_RATIO * len(data) + 64:
            raise CorruptFileError(
                where, f"LZ4 buffer of {len(data)} bytes claims {size} uncompressed bytes"
            )
        try:
            out = lz4.block.decompress(data)
        except lz4.block.LZ4BlockError as e:
            raise CorruptFileError(where, f"bad LZ4 block: {e}") from None
        if len(out) != size:
            raise CorruptFileError(where, f"LZ4 block decoded to {len(out)} bytes, not {size}")
        return out
    raise UnsupportedFeatureError(f"{where}: general compression {scheme_name(scheme)}")


_local = threading.local()


def _zstd_context() -> zstandard.ZstdDecompressor:
    """This thread's decompression context: creating one costs 4x decoding a 4 KiB chunk."""
    ctx = getattr(_local, "zstd", None)
    if ctx is None:
        ctx = _local.zstd = zstandard.ZstdDecompressor()
    return ctx


def _zstd(data: memoryview, where: str) -> bytes:
    if not data:
        return b""
    # A bare frame starts with the magic and a frame header whose reserved bit is clear.
    bare = len(data) < 8 or (data[:4] == _ZSTD_MAGIC and not data[4] & 0x10)
    frame = data if bare else data[8:]
    try:
        # Streaming decode: no allocation sized by an untrusted length field.
        obj = _zstd_context().decompressobj()
        out = obj.decompress(frame)
        if not obj.eof:
            raise CorruptFileError(where, "truncated zstd frame")
    except zstandard.ZstdError as e:
        raise CorruptFileError(where, f"bad zstd frame: {e}") from None
    if not bare:
        (size,) = struct.unpack_from("<Q", data)
        if len(out) != size:
            raise CorruptFileError(where, f"zstd frame decoded to {len(out)} bytes, not {size}")
    return out
