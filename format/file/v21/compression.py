"""The `CompressiveEncoding` tree of Lance 2.1/2.2 pages: decoding what lives inside a buffer.

Three contexts use the tree (`lance.encodings21.CompressiveEncoding`):

* mini-block chunks (`decode_chunks`): every chunk of a page holds its own small buffers
  (rep, def, value buffers); all chunks of a page are decoded together, vectorised;
* blocks (`decode_block`): one whole buffer, e.g. a dictionary or constant-page levels;
* full-zip values (`decode_fullzip_fixed` / `decode_fullzip_variable`): per-value encodings.

Decoded values are *physical* arrays: Flat(1) -> bool, Flat(8..64) -> uint8..uint64, other
byte multiples -> fixed_size_binary, Variable/Fsst -> large_binary, FixedSizeList -> a
FixedSizeListArray of the inner physical array. Every size, offset and width read from the
file is bounds-checked; corrupt input raises CorruptFileError naming `where`; variants a
2.1/2.2 file cannot hold (Range, Delta, generic Variable offsets, VariablePackedStruct outside
full-zip values) raise UnsupportedFeatureError naming them.

Encoders for the writer live next to their decoders: `bitpacking` (FastLanes inline and
out-of-line), `rle`, `general` (LZ4/zstd framing), `byte_stream_split`, `fsst`, and here the
Variable chunk and block layouts (`encode_variable_chunks`, `encode_variable_block`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np
import pyarrow as pa

from quiver.format import _kernels
from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.file.v21 import bitpacking as bp
from quiver.format.file.v21 import byte_stream_split as bss
from quiver.format.file.v21 import codecs23, fsst, general, rle
from quiver.format.file.v21.gather import (
    I64,
    as_i64,
    check_ranges,
    copy_ranges,
    gather,
    load_uint,
    outside,
    read_uint,
)
from quiver.format.proto import encodings_v2_1_pb2 as pb

Encoding = pb.CompressiveEncoding

# Field numbers of `CompressiveEncoding.compression` this engine's proto does not know.
_FUTURE_VARIANTS = {14: "Range", 15: "Delta"}
_UINT = {8: pa.uint8(), 16: pa.uint16(), 32: pa.uint32(), 64: pa.uint64()}
_NP_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_ITEM_BITS = tuple(range(8, 4097, 8))


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
        tag = raw[0] if raw[0] < 0x80 or len(raw) < 2 else raw[0] & 0x7F | raw[1] << 7
        field = tag >> 3
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
    raw = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
    width = bits // 8
    if bits in _UINT:
        typed = raw.view(_NP_UINT[bits])
        if not typed.flags.aligned:
            raw = typed.copy().view(np.uint8)
    # from_buffers wraps the numpy memory as is (pa.array costs ~10x more per call).
    typ = _UINT[bits] if bits in _UINT else pa.binary(width)
    return pa.Array.from_buffers(typ, len(raw) // width, [None, pa.py_buffer(raw)])


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
        counts = as_i64(counts)
        nbytes = (counts + 7) // 8
        total = int(counts.sum())
        if not (counts[:-1] % 8).any():  # chunks end on byte boundaries: reuse the bitmap
            raw = chunk_prefixes(ch, nbytes, where, "Flat(1) bitmap", "Flat(1) chunk")
            return pa.Array.from_buffers(pa.bool_(), total, [None, pa.py_buffer(raw)])
        starts = check_prefixes(ch, nbytes, where, "Flat(1) bitmap", "Flat(1) chunk")
        if counts.min() < 0:  # -7..-1 values would pass as 0 bytes
            raise CorruptFileError(where, "Flat(1) chunk with a negative value count")
        bitmap = np.zeros((total + 7) // 8, dtype=np.uint8)
        _kernels.copy_bits(np.ascontiguousarray(ch.data), starts, counts, bitmap)
        return pa.Array.from_buffers(pa.bool_(), total, [None, pa.py_buffer(bitmap)])
    if bits <= 0 or bits % 8:
        raise _unsupported(where, f"Flat compression with {bits} bits per value")
    what = f"Flat({bits}) chunk" if bits in _UINT else "Flat chunk"
    raw = chunk_prefixes(ch, as_i64(counts) * (bits // 8), where, f"Flat({bits}) buffer", what)
    return fixed_array(raw, bits)


def chunk_prefixes(
    ch: Chunks, nbytes: np.ndarray, where: str, short_what: str, range_what: str
) -> np.ndarray:
    """The first `nbytes[i]` bytes of every chunk buffer, concatenated (a view for a single
    chunk); each must fit in its chunk's size and in the data."""
    starts = check_prefixes(ch, nbytes, where, short_what, range_what)
    if len(starts) == 1:
        s = int(starts[0])
        return ch.data[s : s + int(nbytes[0])]
    return copy_ranges(ch.data, starts, nbytes)


def check_prefixes(
    ch: Chunks, nbytes: np.ndarray, where: str, short_what: str, range_what: str
) -> np.ndarray:
    """Raise CorruptFileError unless the first `nbytes[i]` bytes of every chunk buffer fit in
    its size and in the data; returns the chunk starts as int64 for the unchecked kernels."""
    starts, sizes, nbytes = as_i64(ch.starts), as_i64(ch.sizes), as_i64(nbytes)
    status, i = _kernels.check_prefixes(len(ch.data), starts, sizes, nbytes)
    if status == _kernels.SHORT:
        raise _short(ch, int(nbytes[i]), i, where, short_what)
    if status == _kernels.OUTSIDE:
        raise outside(len(ch.data), starts, nbytes, i, where, range_what)
    return starts


def _short(ch: Chunks, needed: int, i: int, where: str, what: str) -> CorruptFileError:
    return CorruptFileError(
        where,
        f"{what} of chunk {i} has {int(ch.sizes[i])} bytes, its {int(ch.counts[i])} values "
        f"need {needed}",
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
    starts, counts, n_bytes = check_variable_chunks(bits, ch, where)
    offsets = np.empty(int(counts.sum()) + 1, dtype=I64)
    data = np.empty(n_bytes, dtype=np.uint8)
    _kernels.variable_gather(
        np.ascontiguousarray(ch.data), starts, counts, bits // 8, offsets, data
    )
    return binary_array(offsets, data)


def check_variable_chunks(bits: int, ch: Chunks, where: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Validate Variable{Flat bits} chunks (offsets inside their chunk, non-decreasing) and
    return their (starts, counts) as int64 for the unchecked kernels, and the strings' total
    byte size."""
    width = bits // 8
    starts, sizes, counts = as_i64(ch.starts), as_i64(ch.sizes), as_i64(ch.counts)
    data = np.ascontiguousarray(ch.data)
    status, i, n_bytes = _kernels.variable_check(data, starts, sizes, counts, width)
    if status == _kernels.SHORT and counts[i] >= 0:
        raise _short(ch, (int(counts[i]) + 1) * width, i, where, f"Variable({bits}) offsets")
    if status == _kernels.SHORT:
        raise CorruptFileError(where, f"Variable chunk {i} has a negative value count")
    if status == _kernels.OUTSIDE:
        raise outside(len(ch.data), starts, (counts + 1) * width, i, where, "Variable offsets")
    if status == _kernels.BAD_OFFSET:
        raise CorruptFileError(where, f"Variable offsets of chunk {i} point outside its buffer")
    if status == _kernels.BYTES_OUTSIDE:
        s = int(starts[i])
        first, last = (int(load_uint(ch.data, s + k * width, width)) for k in (0, counts[i]))
        raise CorruptFileError(
            where,
            f"Variable bytes #{i} spans [{s + first}, {s + last}) outside a {len(ch.data)}-byte "
            "buffer",
        )
    if status == _kernels.DECREASING:
        raise CorruptFileError(where, "Variable offsets decrease")
    return starts, counts, n_bytes


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
    starts, sizes = as_i64(ch.starts), as_i64(ch.sizes)
    word_starts, word_sizes = np.empty(len(starts), dtype=I64), np.empty(len(starts), dtype=I64)
    status, i = _kernels.word_layout(len(ch.data), starts, sizes, width, word_starts, word_sizes)
    if status == _kernels.OUTSIDE:
        raise outside(len(ch.data), starts, sizes, i, where, "chunk buffer")
    if status == _kernels.SHORT:
        raise CorruptFileError(
            where, f"chunk {i} buffer of {int(sizes[i])} bytes is not whole {bits}-bit words"
        )
    if status == _kernels.OK:
        data = ch.data[: len(ch.data) - len(ch.data) % width]
        return data.view(_NP_UINT[bits]), word_starts, word_sizes
    packed = copy_ranges(ch.data, starts, sizes)
    return packed.view(_NP_UINT[bits]), np.cumsum(word_sizes) - word_sizes, word_sizes


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


# -- run-length, byte-stream-split, general ---------------------------------------------------
def _flat_bits(enc: Encoding, what: str, where: str, allowed: tuple[int, ...]) -> int:
    if variant(enc, where) != "flat":
        raise CorruptFileError(where, f"{what} must be Flat, not {variant(enc, where)}")
    bits = int(enc.flat.bits_per_value)
    if bits not in allowed:
        raise CorruptFileError(where, f"{what} of {bits} bits (expected one of {allowed})")
    return bits


def rle_frames(ch: Chunks, where: str) -> tuple[Chunks, Chunks]:
    """Split block-form Rle buffers `[u64 LE values byte size][run values][run lengths]` (one
    per chunk, as used for levels and constant pages) into value and length buffers."""
    if (ch.sizes < 8).any():
        raise CorruptFileError(where, "Rle block shorter than its 8-byte header")
    vsize = read_uint(ch.data, ch.starts, 8, where, "Rle block header")
    if (vsize > (ch.sizes - 8).astype(np.uint64)).any():
        i = int(np.argmax(vsize > (ch.sizes - 8).astype(np.uint64)))
        raise CorruptFileError(where, f"Rle block {i} claims {int(vsize[i])} bytes of run values")
    vsize = vsize.astype(I64)
    vals = Chunks(ch.data, ch.starts + 8, vsize, ch.counts)
    lens = Chunks(ch.data, ch.starts + 8 + vsize, ch.sizes - 8 - vsize, ch.counts)
    return vals, lens


def rle_chunks(enc: pb.Rle, bufs: list[Chunks], where: str, block: bool) -> pa.Array:
    """Rle: per chunk a run-value buffer (Flat 8/16/32/64) and a u8 run-length buffer; as
    mini-block values two chunk buffers, as a block (levels, constant pages) one framed buffer
    (see `rle_frames`)."""
    bits = _flat_bits(enc.values, "Rle values", where, (8, 16, 32, 64))
    if variant(enc.run_lengths, where) == "flat" and enc.run_lengths.flat.bits_per_value != 8:
        raise _unsupported(
            where,
            f"Rle with {enc.run_lengths.flat.bits_per_value}-bit run lengths (2.1/2.2 "
            "use 8-bit run lengths)",
        )
    _flat_bits(enc.run_lengths, "Rle run lengths", where, (8,))
    vals, lens = rle_frames(bufs[0], where) if block or len(bufs) < 2 else (bufs[0], bufs[1])
    width = bits // 8
    if (vals.sizes % width).any():
        raise CorruptFileError(where, "Rle run values are not whole values")
    runs = vals.sizes // width
    if (lens.sizes != runs).any():
        i = int(np.argmax(lens.sizes != runs))
        raise CorruptFileError(
            where, f"Rle chunk {i} has {int(runs[i])} run values but {int(lens.sizes[i])} lengths"
        )
    values = _words(vals, vals.starts, runs, bits, where, "Rle run values")
    lengths = gather(lens.data, lens.starts, lens.sizes, where, "Rle run lengths")
    return fixed_array(rle.decode(values, lengths, runs, vals.counts, where), bits)


def bss_chunks(enc: pb.ByteStreamSplit, ch: Chunks, where: str) -> pa.Array:
    """ByteStreamSplit{Flat(32|64)}: per chunk W byte streams of `count` bytes each."""
    bits = _flat_bits(enc.values, "ByteStreamSplit values", where, (32, 64))
    width = bits // 8
    counts = as_i64(ch.counts)
    what = "ByteStreamSplit"
    starts = check_prefixes(ch, counts * width, where, f"{what} buffer", f"{what} chunk")
    return fixed_array(bss.join_chunks(ch.data, starts, counts, width), bits)


def _scheme(comp: pb.BufferCompression, where: str) -> int:
    if comp.scheme not in (general.LZ4, general.ZSTD):
        raise _unsupported(where, f"general compression {general.scheme_name(comp.scheme)}")
    return comp.scheme


_ZEROS = bytes(8)


def decompress_chunks(ch: Chunks, scheme: int, where: str) -> Chunks:
    """Each chunk's buffer decompressed (one library call per chunk), repacked 8-aligned."""
    check_ranges(len(ch.data), ch.starts, ch.sizes, where, "compressed chunk buffer")
    parts = []
    sizes = np.zeros(len(ch.counts), dtype=I64)
    for i, (s, n) in enumerate(zip(ch.starts.tolist(), ch.sizes.tolist(), strict=True)):
        out = general.decompress(ch.data[s : s + n], scheme, f"{where} chunk {i}")
        sizes[i] = len(out)
        parts += (out, _ZEROS[: -len(out) % 8])
    padded = (sizes + 7) // 8 * 8
    data = np.frombuffer(b"".join(parts), dtype=np.uint8)
    return Chunks(data, np.cumsum(padded) - padded, sizes, ch.counts)


# -- FixedSizeList, packed struct, constant ----------------------------------------------------
def _fsl_layers(enc: Encoding, where: str) -> tuple[list[tuple[int, bool]], Encoding]:
    """The nested FixedSizeList layers (dimension, has_validity), outermost first, and the
    encoding of the innermost items."""
    layers = []
    total = 1
    while variant(enc, where) == "fixed_size_list":
        fsl = enc.fixed_size_list
        dim = int(fsl.items_per_value)
        layers.append((dim, bool(fsl.has_validity)))
        # Arrow list sizes are int32; bounding the product also keeps size maths exact.
        total *= dim
        if dim < 1 or total >= 2**31:
            raise CorruptFileError(where, f"FixedSizeList of {dim} items")
        enc = fsl.values
    return layers, enc


def with_validity(arr: pa.Array, valid: np.ndarray) -> pa.Array:
    """`arr` (offset 0) with a validity bitmap (True = valid)."""
    if pa.types.is_fixed_size_list(arr.type):
        return pa.FixedSizeListArray.from_arrays(
            arr.values, type=arr.type, mask=pa.array(~valid, type=pa.bool_())
        )
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(arr.type, len(arr), [bitmap, *arr.buffers()[1:]])


def _nest_fsl(items: pa.Array, layers: list[tuple[int, bool]], valids: list) -> pa.Array:
    arr = items
    for (dim, has_validity), valid in zip(reversed(layers), reversed(valids), strict=True):
        if has_validity and not pa.types.is_null(arr.type):  # null items: no bitmap to add
            arr = with_validity(arr, valid)
        arr = pa.FixedSizeListArray.from_arrays(arr, dim)
    return arr


def fsl_chunks(enc: Encoding, bufs: list[Chunks], where: str, block: bool) -> pa.Array:
    """FixedSizeList{k, has_validity, inner}: per chunk one validity bitmap (`count * cum_dim`
    bits) per layer with validity, outermost first, then the inner buffer of `count * dims`
    items."""
    layers, inner = _fsl_layers(enc, where)
    nvalid = sum(hv for _, hv in layers)
    if len(bufs) < nvalid + 1:
        raise CorruptFileError(where, f"FixedSizeList needs {nvalid + 1} buffers per chunk")
    counts = bufs[0].counts
    cum = list(accumulate(dim for dim, _ in layers))
    valids: list = []
    k = 0
    for (_, hv), c in zip(layers, cum, strict=True):
        if hv:
            v = bufs[k]
            bits = flat_chunks(1, Chunks(v.data, v.starts, v.sizes, counts * c), where)
            valids.append(bits.to_numpy(zero_copy_only=False))
            k += 1
        else:
            valids.append(None)
    d = bufs[nvalid]
    items = _decode(
        inner,
        [Chunks(d.data, d.starts, d.sizes, counts * cum[-1]), *bufs[nvalid + 1 :]],
        where,
        block,
    )
    return _nest_fsl(items, layers, valids)


def packed_struct_chunks(enc: pb.PackedStruct, ch: Chunks, where: str) -> pa.Array:
    """PackedStruct{bits per field, Flat(total)}: row-major rows of the fields' LE bytes.
    Returns a struct array with children "0", "1", ... of the fields' physical types."""
    widths = [int(b) for b in enc.bits_per_value]
    if not widths or any(b <= 0 or b % 8 for b in widths):
        raise _unsupported(where, f"PackedStruct with field widths {widths}")
    total = sum(widths)
    _flat_bits(enc.values, "PackedStruct values", where, (total,))
    rows = flat_chunks(total, ch, where)
    raw = np.frombuffer(rows.buffers()[1], dtype=np.uint8)[: len(rows) * total // 8]
    table = raw.reshape(len(rows), total // 8)
    children, pos = [], 0
    for b in widths:
        children.append(fixed_array(np.ascontiguousarray(table[:, pos : pos + b // 8]), b))
        pos += b // 8
    return pa.StructArray.from_arrays(children, names=[str(i) for i in range(len(widths))])


def constant_values(enc: pb.Constant, count: int, where: str) -> pa.Array:
    """Constant{value}: `count` copies of the LE scalar `value` (all null when absent)."""
    if not enc.HasField("value"):
        return pa.nulls(count)
    raw = enc.value
    if not raw:
        raise CorruptFileError(where, "Constant with an empty value")
    rep = np.tile(np.frombuffer(raw, dtype=np.uint8), count)
    return fixed_array(rep, 8 * len(raw))


def take_dictionary(items: pa.Array, indices: pa.Array, where: str) -> pa.Array:
    """Dictionary pages: the items at `indices` (any integer array), bounds-checked."""
    idx = np.asarray(indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    if len(idx) and (idx.max() >= len(items)):
        raise CorruptFileError(
            where, f"dictionary index {int(idx.max())} beyond the {len(items)} dictionary items"
        )
    return items.take(pa.array(idx))


# -- full-zip per-value encodings --------------------------------------------------------------
def decode_fullzip_fixed(enc: Encoding, data: np.ndarray, count: int, where: str) -> pa.Array:
    """Fixed-width full-zip values: `count` values back to back (Flat, Constant), or for
    FixedSizeList per row `[validity bytes of each layer with validity][item bytes]`, the
    validity of a layer taking ceil(cum_dim / 8) bytes (LSB-first bits); items are Flat, or
    Constant (no item bytes) when they are all null."""
    data = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    kind = variant(enc, where)
    if kind == "flat":
        return _decode(enc, [Chunks.single(data, count)], where, block=True)
    if kind == "constant":
        return constant_values(enc.constant, count, where)
    if kind != "fixed_size_list":
        raise _unsupported(where, f"{kind} compression of fixed-width full-zip values")
    layers, inner = _fsl_layers(enc, where)
    cum = [int(c) for c in np.cumprod([dim for dim, _ in layers])]
    # Items that are all null (pylance writes Constant without a value) take no bytes.
    constant = variant(inner, where) == "constant"
    bits = 0 if constant else _flat_bits(inner, "FixedSizeList items", where, _ITEM_BITS)
    vbytes = [(c + 7) // 8 if hv else 0 for (_, hv), c in zip(layers, cum, strict=True)]
    row = sum(vbytes) + bits // 8 * cum[-1]
    if len(data) < row * count:
        raise CorruptFileError(
            where, f"{len(data)} bytes of full-zip values, {count} rows need {row * count}"
        )
    table = data[: row * count].reshape(count, row)
    valids, pos = [], 0
    for c, nb in zip(cum, vbytes, strict=True):
        if nb:
            bits_rows = np.unpackbits(table[:, pos : pos + nb], axis=1, bitorder="little")
            valids.append(bits_rows[:, :c].reshape(-1).astype(bool))
        else:
            valids.append(None)
        pos += nb
    if constant:
        return _nest_fsl(constant_values(inner.constant, count * cum[-1], where), layers, valids)
    items = np.ascontiguousarray(table[:, pos:]).reshape(-1)
    return _nest_fsl(fixed_array(items, bits), layers, valids)


def decode_fullzip_variable(
    enc: Encoding, offsets: np.ndarray, data: np.ndarray, where: str
) -> pa.Array:
    """Variable-width full-zip values `data[offsets[i]:offsets[i+1]]`, decoded per value:
    Variable (as-is), Fsst{table, Variable} (FSST strings) or General{scheme, Variable} (each
    value compressed on its own), all to large_binary; VariablePackedStruct to a struct."""
    data = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    offsets = np.asarray(offsets, dtype=I64)
    if (
        len(offsets) == 0
        or (np.diff(offsets) < 0).any()
        or offsets[0] < 0
        or (offsets[-1] > len(data))
    ):
        raise CorruptFileError(where, "full-zip value offsets are out of order or out of bounds")
    kind = variant(enc, where)
    if kind == "variable":
        _offset_bits(enc.variable, where)
        return binary_array(offsets - offsets[0], data[offsets[0] : offsets[-1]])
    if kind == "fsst":
        table = fsst.parse_table(enc.fsst.symbol_table, where)
        if variant(enc.fsst.values, where) != "variable":
            raise _unsupported(where, "Fsst over a non-Variable encoding")
        out_offsets, out = fsst.decode(table, offsets, data, where)
        return binary_array(out_offsets, out)
    if kind == "general":
        scheme = _scheme(enc.general.compression, where)
        parts = []
        for i, (s, e) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)):
            parts.append(
                general.decompress(data[s:e], scheme, f"{where} value {i}") if e > s else b""
            )
        lengths = np.fromiter((len(p) for p in parts), dtype=I64, count=len(parts))
        out_offsets = np.concatenate([[0], np.cumsum(lengths)])
        return binary_array(out_offsets, np.frombuffer(b"".join(parts), dtype=np.uint8))
    if kind == "variable_packed_struct":
        return variable_packed_struct_values(enc.variable_packed_struct, offsets, data, where)
    raise _unsupported(where, f"{kind} compression of variable-width full-zip values")


def variable_packed_struct_values(
    enc: pb.VariablePackedStruct, offsets: np.ndarray, data: np.ndarray, where: str
) -> pa.Array:
    """VariablePackedStruct (2.2 full-zip): value i = `data[offsets[i]:offsets[i+1]]` holds
    the fields back to back, a fixed-width one as `bits_per_value / 8` bytes, a variable-width
    one as `[length (bits_per_length)][bytes]`; each field's bytes decode with its own
    per-value encoding. Empty values (null rows) give zero / empty fields. Returns a struct
    array with children "0", "1", ... of the fields' physical types."""
    if not enc.fields:
        raise _unsupported(where, "VariablePackedStruct without fields")
    n = len(offsets) - 1
    pos, end = offsets[:-1].copy(), offsets[1:]
    present = end > pos
    children = []
    for i, fe in enumerate(enc.fields):
        what = f"VariablePackedStruct field {i}"
        layout = fe.WhichOneof("layout")
        if layout == "bits_per_value":
            bits = int(fe.bits_per_value)
            if bits <= 0 or bits % 8:
                raise _unsupported(where, f"{what} of {bits} bits")
            if variant(fe.value, where) == "flat" and int(fe.value.flat.bits_per_value) != bits:
                raise CorruptFileError(
                    where, f"{what}: Flat({int(fe.value.flat.bits_per_value)}) in {bits} bits"
                )
            width = np.where(present, bits // 8, 0)
            raw = gather(data, pos, width, where, what)
            table = np.zeros((n, bits // 8), dtype=np.uint8)
            table[present] = raw.reshape(-1, bits // 8)
            children.append(decode_fullzip_fixed(fe.value, table.reshape(-1), n, where))
            pos = pos + width
        elif layout == "bits_per_length":
            lw = int(fe.bits_per_length) // 8
            if lw not in (1, 2, 4, 8) or int(fe.bits_per_length) % 8:
                raise CorruptFileError(where, f"{what}: lengths of {fe.bits_per_length} bits")
            lens = np.zeros(n, dtype=I64)
            lens[present] = read_uint(data, pos[present], lw, where, f"{what} length").astype(I64)
            start = pos + np.where(present, lw, 0)
            if (lens < 0).any() or (start + lens > end).any():
                raise CorruptFileError(where, f"{what}: a value runs past its end")
            body = gather(data, start, lens, where, what)
            offs = np.zeros(n + 1, dtype=I64)
            np.cumsum(lens, out=offs[1:])
            children.append(decode_fullzip_variable(fe.value, offs, body, where))
            pos = start + lens
        else:
            raise CorruptFileError(where, f"{what} has neither a width nor a length width")
        if (pos > end).any():
            raise CorruptFileError(where, f"{what}: a value runs past its end")
    if (pos != end)[present].any():
        raise CorruptFileError(where, "VariablePackedStruct values have bytes left over")
    return pa.StructArray.from_arrays(children, names=[str(i) for i in range(len(children))])


# -- dispatch --------------------------------------------------------------------------------
def decode_chunks(
    enc: Encoding, buffers: Sequence[Chunks], where: str, select: np.ndarray | None = None
) -> pa.Array:
    """All chunks' values, concatenated in chunk order, as a *physical* array; with `select`
    (sorted positions, checked to lie among the values) only those values.

    `buffers` are the per-chunk buffers the encoding consumes, in chunk-header order (one for
    levels; `num_buffers` value buffers for values). Level buffers decode to uint16.
    """
    if select is None:
        return _decode(enc, list(buffers), where, block=False)
    if variant(enc, where) == "fsst":
        picked = _fsst_selected(enc.fsst, buffers[0], select, where)
        if picked is not None:
            return picked
    return _decode(enc, list(buffers), where, block=False).take(pa.array(select))


def _fsst_selected(enc: pb.Fsst, ch: Chunks, select: np.ndarray, where: str) -> pa.Array | None:
    """Only the strings at `select` of FSST-compressed Variable chunks: each string is
    compressed on its own, so a few of them cost their codes, not their chunks' (None where
    the strings are not compressed Variable chunks)."""
    table = fsst.parse_table(enc.symbol_table, where)
    if not table.compressed or variant(enc.values, where) != "variable" or not ch.data.size:
        return None
    bits = _offset_bits(enc.values.variable, where)
    width = bits // 8
    starts, counts, _ = check_variable_chunks(bits, ch, where)  # offsets in their chunks
    chunk = np.searchsorted(np.cumsum(counts), select, side="right")
    at = starts[chunk] + (select - (np.cumsum(counts) - counts)[chunk]) * width
    lo = read_uint(ch.data, at, width, where, "FSST string offsets").astype(I64)
    hi = read_uint(ch.data, at + width, width, where, "FSST string offsets").astype(I64)
    codes = gather(ch.data, starts[chunk] + lo, hi - lo, where, "FSST strings")
    offsets = np.zeros(len(select) + 1, dtype=I64)
    np.cumsum(hi - lo, out=offsets[1:])
    out_offsets, out = fsst.decode(table, offsets, codes, where)
    return binary_array(out_offsets, out)


def decode_block(enc: Encoding, data: np.ndarray, count: int, where: str) -> pa.Array:
    """A block-compressed buffer (dictionary items; constant-layout levels) of `count` values."""
    return _decode(enc, [Chunks.single(data, count)], where, block=True)


def _decode(enc: Encoding, bufs: list[Chunks], where: str, block: bool) -> pa.Array:
    kind = variant(enc, where)
    if not bufs:
        raise CorruptFileError(where, f"{kind} compression has no buffer to read")
    ch = bufs[0]
    if codecs23.handles(enc, bufs, block):  # Range, Delta, ... (2.3)
        if kind == "fixed_size_list":  # a 2.3 block of such lists is laid out row by row
            s, n = int(ch.starts[0]), int(ch.sizes[0])
            return decode_fullzip_fixed(enc, ch.data[s : s + n], ch.total, where)
        return codecs23.decode(enc, bufs, where, block, _decode)
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
    if kind == "rle":
        return rle_chunks(enc.rle, bufs, where, block)
    if kind == "byte_stream_split":
        return bss_chunks(enc.byte_stream_split, ch, where)
    if kind == "general":
        g = enc.general
        inner = decompress_chunks(ch, _scheme(g.compression, where), where)
        return _decode(g.values, [inner, *bufs[1:]], where, block)
    if kind == "fsst":
        table = fsst.parse_table(enc.fsst.symbol_table, where)
        inner = enc.fsst.values
        if not block and table.compressed and variant(inner, where) == "variable":
            # Decode straight from the chunks: no gathered copy of the codes.
            bits = _offset_bits(inner.variable, where)
            starts, counts, n_codes = check_variable_chunks(bits, ch, where)
            out_offsets, out = fsst.decode_chunks(
                table, ch.data, starts, counts, bits // 8, n_codes, where
            )
            return binary_array(out_offsets, out)
        compressed = _decode(inner, bufs, where, block)
        if not pa.types.is_large_binary(compressed.type):
            raise CorruptFileError(where, "Fsst over a fixed-width encoding")
        offsets = np.frombuffer(compressed.buffers()[1], dtype=I64)[: len(compressed) + 1]
        data = np.frombuffer(compressed.buffers()[2] or b"", dtype=np.uint8)
        out_offsets, out = fsst.decode(table, offsets, data, where)
        return binary_array(out_offsets, out)
    if kind == "fixed_size_list":
        return fsl_chunks(enc, bufs, where, block)
    if kind == "packed_struct":
        return packed_struct_chunks(enc.packed_struct, ch, where)
    if kind == "constant":
        return constant_values(enc.constant, ch.total, where)
    if kind == "dictionary":
        raise _unsupported(
            where, "Dictionary compression inside a buffer (Lance writes page dictionaries)"
        )
    if kind == "variable_packed_struct":
        raise _unsupported(
            where, "VariablePackedStruct compression (only legal in 2.2+ full-zip pages)"
        )
    raise _unsupported(where, f"compression {kind}")
