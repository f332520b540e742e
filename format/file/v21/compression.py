"""The `CompressiveEncoding` tree of Lance 2.1/2.2 pages: decoding what lives inside a buffer.

Three contexts use the tree (`lance.encodings21.CompressiveEncoding`):

* mini-block chunks (`decode_chunks`): every chunk of a page holds its own small buffers
  (rep, def, value buffers); all chunks of a page are decoded together, vectorised;
* blocks (`decode_block`): one whole buffer, e.g. a dictionary or constant-page levels;
* full-zip values (`decode_fullzip_fixed` / `decode_fullzip_variable`): per-value encodings.

Decoded values are *physical* arrays: Flat(1) -> bool, Flat(8..64) -> uint8..uint64, other
byte multiples -> fixed_size_binary, Variable/Fsst -> large_binary, FixedSizeList -> a
FixedSizeListArray of the inner physical array. Every size, offset and width read from the
file is bounds-checked; corrupt input raises CorruptFileError naming `where`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from format.errors import CorruptFileError, UnsupportedFeatureError
from format.file.v21 import bitpacking as bp
from format.file.v21.gather import I64, check_ranges, gather, range_index, read_uint
from format.proto import encodings_v2_1_pb2 as pb

Encoding = pb.CompressiveEncoding

# Field numbers of `CompressiveEncoding.compression` this engine's proto does not know.
_FUTURE_VARIANTS = {14: "Range", 15: "Delta"}
_UINT = {8: pa.uint8(), 16: pa.uint16(), 32: pa.uint32(), 64: pa.uint64()}
_NP_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


@dataclass(frozen=True)
class Chunks:
    """One buffer (rep, def, or value buffer k) of all mini-block chunks of a page."""

    data: np.ndarray  # uint8: the page's whole chunk-data buffer
    starts: np.ndarray  # int64: where this buffer begins inside `data`, per chunk
    sizes: np.ndarray  # int64: its byte size (padding excluded), per chunk
    counts: np.ndarray  # int64: number of values (or level entries) in the chunk

    @staticmethod
    def single(data: np.ndarray, count: int) -> Chunks:
        """The whole of `data` as one chunk of `count` values (a block)."""
        data = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        one = np.ones(1, dtype=I64)
        return Chunks(data, 0 * one, one * len(data), one * count)

    @property
    def total(self) -> int:
        """Values in all chunks."""
        return int(self.counts.sum())


# -- helpers ---------------------------------------------------------------------------------
def variant(enc: Encoding, where: str) -> str:
    """The name of the oneof variant set in `enc`; unknown variants are refused by name."""
    kind = enc.WhichOneof("compression")
    if kind is not None:
        return kind
    raw = enc.SerializeToString()
    if raw:
        field = raw[0] >> 3 if raw[0] < 0x80 else (raw[0] & 0x7F | raw[1] << 7) >> 3
        name = _FUTURE_VARIANTS.get(field, f"#{field}")
        raise UnsupportedFeatureError(
            f"{where}: compression {name} is not part of Lance 2.1/2.2 (it needs file version "
            "2.3 or a newer reader)"
        )
    raise CorruptFileError(where, "compressive encoding has no compression set")


def _unsupported(where: str, what: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(f"{where}: {what}")


def fixed_array(values: np.ndarray, bits: int) -> pa.Array:
    """Physical Arrow array of little-endian fixed-width values (numpy uint or raw bytes)."""
    if bits in _UINT:
        return pa.array(values.view(_NP_UINT[bits]), type=_UINT[bits])
    width = bits // 8
    raw = np.ascontiguousarray(values).view(np.uint8)
    return pa.Array.from_buffers(pa.binary(width), len(raw) // width, [None, pa.py_buffer(raw)])


def binary_array(offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    """large_binary array from int64 offsets (starting anywhere) and the bytes they index."""
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    data = np.ascontiguousarray(data, dtype=np.uint8)
    return pa.Array.from_buffers(
        pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _words(
    ch: Chunks, byte_starts: np.ndarray, n_words: np.ndarray, bits: int, where: str, what: str
) -> np.ndarray:
    """`n_words[i]` little-endian `bits`-wide words from byte `byte_starts[i]`, concatenated."""
    width = bits // 8
    dtype = _NP_UINT[bits]
    if width == 1:
        return gather(ch.data, byte_starts, n_words, where, what)
    byte_starts = np.asarray(byte_starts, dtype=I64)
    n_words = np.asarray(n_words, dtype=I64)
    check_ranges(len(ch.data), byte_starts, n_words * width, where, what)
    if len(byte_starts) and not (byte_starts % width).any():
        view = ch.data[: len(ch.data) - len(ch.data) % width].view(dtype)
        return gather(view, byte_starts // width, n_words, where, what)
    return gather(ch.data, byte_starts, n_words * width, where, what).view(dtype)


# -- Flat ------------------------------------------------------------------------------------
def flat_chunks(bits: int, ch: Chunks, where: str) -> pa.Array:
    """Flat(bits): each chunk buffer holds `count` values packed LE (bits=1: LSB-first bitmap).

    Widths other than 1 must be whole bytes: 8/16/32/64 decode to uint, others to binary(w).
    """
    counts = ch.counts
    if bits == 1:
        nbytes = (counts + 7) // 8
        _check_sizes(ch, nbytes, where, "Flat(1) bitmap")
        raw = gather(ch.data, ch.starts, nbytes, where, "Flat(1) chunk")
        bits_all = np.unpackbits(raw, bitorder="little")
        out_starts = 8 * (np.cumsum(nbytes) - nbytes)
        return pa.array(bits_all[range_index(out_starts, counts)].view(bool), type=pa.bool_())
    if bits <= 0 or bits % 8:
        raise _unsupported(where, f"Flat compression with {bits} bits per value")
    width = bits // 8
    _check_sizes(ch, counts * width, where, f"Flat({bits}) buffer")
    if bits in _UINT:
        return fixed_array(_words(ch, ch.starts, counts, bits, where, f"Flat({bits}) chunk"), bits)
    return fixed_array(gather(ch.data, ch.starts, counts * width, where, "Flat chunk"), bits)


def _check_sizes(ch: Chunks, needed: np.ndarray, where: str, what: str) -> None:
    short = ch.sizes < needed
    if short.any():
        i = int(np.argmax(short))
        raise CorruptFileError(
            where,
            f"{what} of chunk {i} has {int(ch.sizes[i])} bytes, its {int(ch.counts[i])} values "
            f"need {int(needed[i])}",
        )


# -- Variable --------------------------------------------------------------------------------
def _offset_bits(var: pb.Variable, where: str) -> int:
    if variant(var.offsets, where) != "flat":
        raise _unsupported(
            where,
            f"Variable offsets compressed with {variant(var.offsets, where)}: generic variable "
            "offsets require Lance 2.3; 2.1/2.2 use Flat offsets",
        )
    bits = int(var.offsets.flat.bits_per_value)
    if bits not in (32, 64):
        raise CorruptFileError(where, f"Variable offsets of {bits} bits (expected 32 or 64)")
    if var.HasField("values"):
        raise _unsupported(where, "Variable with compressed value bytes")
    return bits


def variable_chunks(bits: int, ch: Chunks, where: str) -> pa.Array:
    """Variable{Flat bits} mini-block form: per chunk `count + 1` offsets (u32/u64, relative to
    the chunk buffer's start; the first equals `(count + 1) * bits / 8`), then the bytes, then
    0x48 padding. Returns large_binary of all chunks' strings."""
    width = bits // 8
    n_off = ch.counts + 1
    _check_sizes(ch, n_off * width, where, f"Variable({bits}) offsets")
    offs = _words(ch, ch.starts, n_off, bits, where, "Variable offsets").astype(I64)
    first_idx = np.cumsum(n_off) - n_off
    last_idx = first_idx + ch.counts
    first, last = offs[first_idx], offs[last_idx]
    chunk_of = np.repeat(np.arange(len(ch.counts)), n_off)
    bad = (offs < n_off[chunk_of] * width) | (offs > ch.sizes[chunk_of])
    if bad.any():
        c = int(chunk_of[np.argmax(bad)])
        raise CorruptFileError(where, f"Variable offsets of chunk {c} point outside its buffer")
    lengths = last - first
    data = gather(ch.data, ch.starts + first, lengths, where, "Variable bytes")
    # Rebase every chunk's offsets onto the concatenated bytes; drop each chunk's leading
    # offset except the very first (it equals the previous chunk's last).
    base = np.cumsum(lengths) - lengths
    rebased = offs - first[chunk_of] + base[chunk_of]
    keep = np.ones(len(offs), dtype=bool)
    keep[first_idx[1:]] = False
    out = rebased[keep] if len(offs) else np.zeros(1, dtype=I64)
    if (np.diff(out) < 0).any():
        raise CorruptFileError(where, "Variable offsets decrease")
    return binary_array(out, data)


def variable_block(bits: int, data: np.ndarray, count: int, where: str) -> pa.Array:
    """Variable block form: `[u32 32][u32 bytes_start]` (or `[u64 64][u64 bytes_start]`), then
    `count + 1` Arrow offsets into the bytes that start at `bytes_start`. The legacy header
    `[u8 bits][count][bytes_start]` is accepted too."""
    n = len(data)
    if n < 4:
        raise CorruptFileError(where, f"Variable block of {n} bytes has no header")
    legacy = bool(data[1] or data[2] or data[3])
    if legacy:
        width = int(data[0]) // 8
        head = 1 + 2 * width
    else:
        width = int(read_uint(data, [0], 4, where, "Variable block header")[0]) // 8
        head = 2 * width
    if width not in (4, 8):
        raise CorruptFileError(where, f"Variable block with {8 * width}-bit offsets")
    if width * 8 != bits:
        raise CorruptFileError(
            where, f"Variable block has {8 * width}-bit offsets, expected {bits}"
        )
    start = int(read_uint(data, [head - width], width, where, "Variable block header")[0])
    if start != head + (count + 1) * width or start > n:
        raise CorruptFileError(
            where, f"Variable block of {count} values has its bytes at {start} (size {n})"
        )
    offs = read_uint(data, head + width * np.arange(count + 1), width, where, "offsets")
    offs = offs.astype(I64)
    body = n - start
    if (np.diff(offs) < 0).any() or offs[0] < 0 or offs[-1] > body:
        raise CorruptFileError(where, "Variable block offsets are out of order or out of bounds")
    return binary_array(offs - offs[0], data[start + offs[0] : start + offs[-1]])


# -- bit-packing -----------------------------------------------------------------------------
def word_view(ch: Chunks, bits: int, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chunk buffers as `bits`-wide words: (words, word_starts, word_sizes). Buffers must
    be whole words; misaligned starts (never written by Lance) are repacked into a copy."""
    width = bits // 8
    check_ranges(len(ch.data), ch.starts, ch.sizes, where, "chunk buffer")
    if (ch.sizes % width).any():
        i = int(np.argmax(ch.sizes % width))
        raise CorruptFileError(
            where, f"chunk {i} buffer of {int(ch.sizes[i])} bytes is not whole {bits}-bit words"
        )
    if not (ch.starts % width).any():
        data = ch.data[: len(ch.data) - len(ch.data) % width]
        return data.view(_NP_UINT[bits]), ch.starts // width, ch.sizes // width
    packed = gather(ch.data, ch.starts, ch.sizes, where, "chunk buffer")
    sizes = ch.sizes // width
    return packed.view(_NP_UINT[bits]), np.cumsum(sizes) - sizes, sizes


def _word_bits(bits: int, what: str, where: str) -> int:
    if bits not in _UINT:
        raise CorruptFileError(where, f"{what} of {bits}-bit values (expected 8/16/32/64)")
    return bits


def inline_chunks(enc: pb.InlineBitpacking, ch: Chunks, where: str) -> pa.Array:
    """InlineBitpacking(T): per chunk `[T-bit width w][w * 1024 / T FastLanes words]`, <= 1024
    values (the last chunk of a page is zero-padded to 1024)."""
    bits = _word_bits(int(enc.uncompressed_bits_per_value), "InlineBitpacking", where)
    if enc.HasField("values"):
        raise _unsupported(where, "InlineBitpacking with buffer compression")
    words, starts, sizes = word_view(ch, bits, where)
    return fixed_array(bp.inline_decode(words, starts, sizes, ch.counts, bits, where), bits)


def outofline_chunks(enc: pb.OutOfLineBitpacking, ch: Chunks, where: str) -> pa.Array:
    """OutOfLineBitpacking{T, Flat(w)}: one block per chunk, see `bitpacking.outofline_decode`."""
    bits = _word_bits(int(enc.uncompressed_bits_per_value), "OutOfLineBitpacking", where)
    if variant(enc.values, where) != "flat":
        raise CorruptFileError(where, "OutOfLineBitpacking values must be Flat")
    width = int(enc.values.flat.bits_per_value)
    words, starts, sizes = word_view(ch, bits, where)
    values = bp.outofline_decode(words, starts, sizes, ch.counts, width, bits, where)
    return fixed_array(values, bits)


# -- dispatch --------------------------------------------------------------------------------
def decode_chunks(enc: Encoding, buffers: Sequence[Chunks], where: str) -> pa.Array:
    """All chunks' values, concatenated in chunk order, as a *physical* array.

    `buffers` are the per-chunk buffers the encoding consumes, in chunk-header order (one for
    levels; `num_buffers` value buffers for values). Level buffers decode to uint16.
    """
    return _decode(enc, list(buffers), where, block=False)


def decode_block(enc: Encoding, data: np.ndarray, count: int, where: str) -> pa.Array:
    """A block-compressed buffer (dictionary items; constant-layout levels) of `count` values."""
    return _decode(enc, [Chunks.single(data, count)], where, block=True)


def _decode(enc: Encoding, bufs: list[Chunks], where: str, block: bool) -> pa.Array:
    kind = variant(enc, where)
    if not bufs:
        raise CorruptFileError(where, f"{kind} compression has no buffer to read")
    ch = bufs[0]
    if kind == "flat":
        if enc.flat.HasField("data"):
            raise _unsupported(where, "Flat with buffer compression")
        return flat_chunks(int(enc.flat.bits_per_value), ch, where)
    if kind == "variable":
        bits = _offset_bits(enc.variable, where)
        if block:
            return variable_block(bits, ch.data[: int(ch.sizes[0])], int(ch.counts[0]), where)
        return variable_chunks(bits, ch, where)
    if kind == "inline_bitpacking":
        return inline_chunks(enc.inline_bitpacking, ch, where)
    if kind == "out_of_line_bitpacking":
        return outofline_chunks(enc.out_of_line_bitpacking, ch, where)
    if kind == "variable_packed_struct":
        raise _unsupported(
            where, "VariablePackedStruct compression (not readable in mini-block chunks)"
        )
    raise _unsupported(where, f"compression {kind} is not supported yet")
