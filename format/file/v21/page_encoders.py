"""Encode one leaf page of a Lance 2.1 / 2.2 file: levels + visible values -> PageLayout + buffers.

Layouts (reference §10):

* mini-block: values cut into chunks of a power-of-two value count (the last takes the
  rest), each chunk ``[header][rep][def][value buffers]`` 8-byte aligned, one metadata word
  per chunk (u16 in 2.1, u32 in 2.2) and, with lists, a repetition index of
  ``(rows completed, leftover entries)`` per chunk. Values are Flat / Variable /
  FixedSizeList, or FastLanes InlineBitpacking (1024-value chunks) for integers when that
  saves space; levels are OutOfLineBitpacking at the page's widest level (Flat 16 when
  nothing is saved);
* full-zip for values of 256 bytes or more: per level entry a control word
  ``rep << bits_def | def`` followed by the value (fixed width: every visible slot, a
  validity bitmap first for vectors with null items; variable width: ``length + bytes``
  for valid visible values), plus a row-offset index;
* all-null: 2.1 ``AllNullLayout`` (raw u16 rep/def buffers when levels are needed), 2.2
  ``ConstantLayout`` without a value (levels described as ``Flat(16)``);
* constant (2.2, before full-zip, as pylance): a flat page whose values, NULLs aside, are
  all one scalar is a ``ConstantLayout``: a fixed-width value inline (a boolean as one
  byte), a variable-width one in a buffer (u32 2, the offsets' and bytes' lengths, the
  offsets ``[0, len]`` at the column's offset width, the bytes), then, with NULLs, an
  empty repetition buffer and the raw u16 definition levels;
* dictionary: mini-block indices (u32, or the key width of dictionary-typed fields) plus
  one block-encoded dictionary buffer, when pylance's size estimate says it pays.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.errors import UnsupportedFeatureError
from quiver.format.file.v21 import bitpacking as bp
from quiver.format.file.v21 import rle
from quiver.format.file.v21.layers import Layer, max_def, max_rep
from quiver.format.file.v21.values import (
    FixedValues,
    NullValues,
    Physical,
    VariableValues,
    physical,
)
from quiver.format.proto import encodings_v2_1_pb2 as pb

FILL = 0xFE  # mini-block header and buffer padding
VAR_PAD = 0x48  # padding after variable-width chunk data
CHUNK_TARGET = 4096  # value bytes aimed at per mini-block chunk
MAX_CHUNK_VALUES = 4096
MAX_CHUNK_BYTES = 32 * 1024  # what a u16 metadata word can describe (kept in 2.2 too)
MAX_CHUNK_LEVELS = 32767  # u16 level-buffer sizes with 16-bit levels
FULLZIP_MIN_BYTES = 256  # values this wide (or wider) are written full-zip
DICT_MIN_VALUES = 100
DICT_RATIO = 0.8


class TooDense(Exception):
    """A chunk cannot hold even one value with its levels: the page must be split by rows."""


@dataclass
class EncodedPage:
    """A page's layout message and buffers, in buffer order."""

    layout: pb.PageLayout
    buffers: list[bytes | memoryview | np.ndarray]


def _flat(bits: int) -> pb.CompressiveEncoding:
    enc = pb.CompressiveEncoding()
    enc.flat.bits_per_value = bits
    return enc


def _variable_enc(bits: int = 32) -> pb.CompressiveEncoding:
    enc = pb.CompressiveEncoding()
    enc.variable.offsets.CopyFrom(_flat(bits))
    return enc


def _value_encoding(vals: FixedValues) -> pb.CompressiveEncoding:
    """Flat, wrapped in FixedSizeList per fsl level (innermost inside)."""
    enc = _flat(vals.bits)
    for layer in reversed(vals.fsl):
        outer = pb.CompressiveEncoding()
        outer.fixed_size_list.items_per_value = layer.size
        outer.fixed_size_list.has_validity = layer.validity is not None
        outer.fixed_size_list.values.CopyFrom(enc)
        enc = outer
    return enc


# -- segment copies ------------------------------------------------------------------------
def scatter(
    out: np.ndarray, dest: np.ndarray, src: np.ndarray, src_start: np.ndarray, sizes: np.ndarray
) -> None:
    """Copy ``src[src_start[i]:+sizes[i]]`` to ``out[dest[i]:]`` for every i."""
    keep = sizes > 0
    if not keep.any():
        return
    dest, src_start, sizes = dest[keep], src_start[keep], sizes[keep]
    if len(sizes) * 64 <= int(sizes.sum()):  # few large segments: slice copies
        for d, s, z in zip(dest.tolist(), src_start.tolist(), sizes.tolist(), strict=True):
            out[d : d + z] = src[s : s + z]
        return
    step = max(1, (1 << 22) // max(1, int(sizes.max())))
    for i in range(0, len(sizes), step):
        d, s, z = dest[i : i + step], src_start[i : i + step], sizes[i : i + step]
        total = int(z.sum())
        within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(z) - z, z)
        out[np.repeat(d, z) + within] = src[np.repeat(s, z) + within]


def _pad8(x: np.ndarray) -> np.ndarray:
    return (x + 7) & ~7


# -- chunk value buffers -----------------------------------------------------------------------
@dataclass
class _Buf:
    """One value buffer of every chunk: concatenated bytes plus per-chunk sizes."""

    data: np.ndarray  # uint8
    sizes: np.ndarray  # int64 per chunk

    @property
    def starts(self) -> np.ndarray:
        return np.cumsum(self.sizes) - self.sizes


def _pack_bits(bits: np.ndarray, counts: np.ndarray) -> _Buf:
    """Each chunk's bits (0/1 bytes, `counts` per chunk) packed LSB first on their own."""
    nbytes = (counts + 7) // 8
    if len(counts) and np.all(counts[:-1] % 8 == 0):
        data = np.packbits(bits[: int(counts[:-1].sum())], bitorder="little")
        tail = np.packbits(bits[int(counts[:-1].sum()) :], bitorder="little")
        return _Buf(np.concatenate([data, tail]), nbytes)
    starts = np.cumsum(counts) - counts
    parts = [
        np.packbits(bits[s : s + c], bitorder="little") for s, c in zip(starts, counts, strict=True)
    ]
    return _Buf(np.concatenate(parts) if parts else np.zeros(0, np.uint8), nbytes)


def _fixed_buffers(vals: FixedValues, counts: np.ndarray) -> list[_Buf]:
    out = []
    per = counts.copy()
    for layer in vals.fsl:
        per = per * layer.size
        if layer.validity is not None:
            out.append(_pack_bits(layer.validity.astype(np.uint8), per))
    if vals.bits == 1:
        out.append(_pack_bits(vals.data, per))
    else:
        out.append(_Buf(vals.data, per * (vals.bits // 8)))
    return out


def _variable_buffers(vals: VariableValues, counts: np.ndarray) -> list[_Buf]:
    """Per chunk: (n + 1) offsets from the chunk buffer's start, the bytes, 0x48 padding to
    the offset width."""
    ow = vals.offset_bits // 8
    nchunks = len(counts)
    first = np.cumsum(counts) - counts  # first value of each chunk
    offs = vals.offsets
    data_start = offs[first]
    data_len = offs[first + counts] - data_start
    head = (counts + 1) * ow
    sizes = head + data_len
    padded = (sizes + ow - 1) & ~(ow - 1)
    starts = np.cumsum(padded) - padded
    out = np.full(int(padded.sum()), VAR_PAD, dtype=np.uint8)
    # Offsets: value i of chunk c -> head_c + offs[i] - data_start_c; plus each chunk's end.
    chunk_of = np.repeat(np.arange(nchunks), counts + 1)
    idx = np.arange(len(chunk_of)) - np.repeat(np.cumsum(counts + 1) - (counts + 1), counts + 1)
    value_idx = first[chunk_of] + idx
    rel = (head[chunk_of] + offs[value_idx] - data_start[chunk_of]).astype(f"<u{ow}")
    scatter(out, starts, rel.view(np.uint8), (np.cumsum(head) - head), head)
    scatter(out, starts + head, vals.data, data_start, data_len)
    return [_Buf(out, padded)]


# -- chunking ------------------------------------------------------------------------------
def _chunk_counts(num_values: int, per_chunk: int) -> np.ndarray:
    full, rest = divmod(num_values, per_chunk)
    counts = np.full(full, per_chunk, dtype=np.int64)
    if rest or not full:
        counts = np.append(counts, rest)
    return counts


def _level_bounds(
    visible_pos: np.ndarray, counts: np.ndarray, num_entries: int, has_levels: bool
) -> np.ndarray:
    """Entry boundaries of the chunks (len chunks + 1): a chunk's levels run up to and
    including its last value's entry; the last chunk takes the rest."""
    if not has_levels:
        return np.concatenate(([0], np.cumsum(counts)))
    ends = np.cumsum(counts)[:-1]
    bounds = visible_pos[ends - 1] + 1 if len(ends) else np.zeros(0, dtype=np.int64)
    return np.concatenate(([0], bounds, [num_entries])).astype(np.int64)


def _value_bytes_per_chunk(vals: Physical, counts: np.ndarray) -> np.ndarray:
    if isinstance(vals, VariableValues):
        first = np.cumsum(counts) - counts
        ow = vals.offset_bits // 8
        return vals.offsets[first + counts] - vals.offsets[first] + (counts + 1) * ow + 8
    assert isinstance(vals, FixedValues)
    fsl_bits = sum(1 for layer in vals.fsl if layer.validity is not None) * vals.items_per_value
    return (counts * (vals.value_bits + fsl_bits) + 7) // 8 + 8 * (1 + len(vals.fsl))


def _choose_chunks(
    vals: Physical, visible_pos: np.ndarray, num_entries: int, levels: int
) -> tuple[np.ndarray, np.ndarray]:
    """Chunk value counts and level bounds that respect the chunk limits."""
    n = vals.count
    if isinstance(vals, VariableValues):
        avg = (len(vals.data) / n if n else 1) + vals.offset_bits // 8
    else:
        avg = max(vals.value_bits / 8, 1 / 8)
    per = 1 << max(0, int(np.floor(np.log2(max(1.0, CHUNK_TARGET / avg)))))
    per = min(per, MAX_CHUNK_VALUES)
    while True:
        counts = _chunk_counts(n, per)
        bounds = _level_bounds(visible_pos, counts, num_entries, levels > 0)
        nlev = np.diff(bounds)
        size = _value_bytes_per_chunk(vals, counts) + levels * _pad8(2 * nlev) + 16
        ok = (size <= MAX_CHUNK_BYTES).all() and (levels == 0 or (nlev <= MAX_CHUNK_LEVELS).all())
        if ok:
            return counts, bounds
        if per == 1:
            raise TooDense("a mini-block chunk cannot hold one value with its levels")
        per //= 2


def _rep_index(rep: np.ndarray, bounds: np.ndarray, top: int) -> np.ndarray:
    """(rows completed, leftover entries) per chunk, as pylance computes them."""
    nchunks = len(bounds) - 1
    starts = rep == top
    cum = np.concatenate(([0], np.cumsum(starts)))
    a, b = bounds[:-1], bounds[1:]
    rows = cum[b] - cum[np.minimum(a + 1, b)]
    # last row start in [a, b): position of the last True
    pos = np.flatnonzero(starts)
    k = np.searchsorted(pos, b, side="left") - 1
    last = np.where(k >= 0, pos[np.maximum(k, 0)], -1)
    has_start = last >= a
    leftover = np.where(has_start, b - last, b - a)
    leftover[-1] = 0
    first_is_start = np.zeros(nchunks, dtype=bool)
    first_is_start[1:] = starts[a[1:]]
    fix = np.zeros(nchunks, dtype=bool)
    fix[:-1] = first_is_start[1:] & (leftover[:-1] != 0)
    rows = rows + fix
    leftover = np.where(fix, 0, leftover)
    rows[-1] += 1
    return np.stack([rows, leftover], axis=1).astype("<u8").reshape(-1)


def _level_buf(levels: np.ndarray, bounds: np.ndarray) -> tuple[pb.CompressiveEncoding, _Buf]:
    """Each chunk's levels as a block: out-of-line bit-packed when that is narrower than 16."""
    nlev = np.diff(bounds)
    width = int(levels.max()).bit_length() if len(levels) else 0
    if 0 < width < 16:
        data, sizes = bp.outofline_encode_chunks(levels, nlev, width, 16)
        enc = pb.CompressiveEncoding()
        enc.out_of_line_bitpacking.uncompressed_bits_per_value = 16
        enc.out_of_line_bitpacking.values.CopyFrom(_flat(width))
        return enc, _Buf(data, sizes)
    raw = np.ascontiguousarray(levels, dtype="<u2").view(np.uint8)
    return _flat(16), _Buf(raw, nlev * 2)


def _serialize_chunks(
    counts: np.ndarray,
    bounds: np.ndarray,
    level_bufs: list[_Buf],
    bufs: list[_Buf],
    large: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """The chunk data buffer and the chunk metadata buffer."""
    nchunks = len(counts)
    nlev = np.diff(bounds)
    size_bytes = 4 if large else 2
    header = 2 + 2 * len(level_bufs) + size_bytes * len(bufs)
    header_padded = (header + 7) & ~7
    all_bufs = level_bufs + bufs
    total = np.full(nchunks, header_padded, dtype=np.int64)
    part_starts = []
    for b in all_bufs:
        part_starts.append(total.copy())
        total += _pad8(b.sizes)
    if (total > MAX_CHUNK_BYTES).any():
        raise TooDense("a mini-block chunk exceeds 32 KiB")
    chunk_starts = np.cumsum(total) - total
    out = np.full(int(total.sum()), FILL, dtype=np.uint8)
    hdr = np.empty((nchunks, header), dtype=np.uint8)
    num_levels = nlev if level_bufs else np.zeros(nchunks, dtype=np.int64)
    if (num_levels > 0xFFFF).any():
        raise TooDense("too many levels in a chunk")
    hdr[:, 0:2] = num_levels.astype("<u2").view(np.uint8).reshape(-1, 2)
    col = 2
    for b in level_bufs:
        if (b.sizes > 0xFFFF).any():
            raise TooDense("a chunk's level buffer exceeds 65535 bytes")
        hdr[:, col : col + 2] = b.sizes.astype("<u2").view(np.uint8).reshape(-1, 2)
        col += 2
    for b in bufs:
        if not large and (b.sizes > 0xFFFF).any():
            raise TooDense("a chunk buffer exceeds 65535 bytes")
        dt = "<u4" if large else "<u2"
        hdr[:, col : col + size_bytes] = b.sizes.astype(dt).view(np.uint8).reshape(-1, size_bytes)
        col += size_bytes
    out[(chunk_starts[:, None] + np.arange(header)).reshape(-1)] = hdr.reshape(-1)
    for b, start in zip(all_bufs, part_starts, strict=True):
        scatter(out, chunk_starts + start, b.data, b.starts, b.sizes)
    logs = np.zeros(nchunks, dtype=np.int64)
    if nchunks > 1:
        logs[:-1] = np.log2(counts[:-1]).astype(np.int64)
    words = ((total // 8 - 1) << 4) | logs
    meta = words.astype("<u4" if large else "<u2").view(np.uint8)
    return out, meta


def _inline_widths(vals: FixedValues) -> np.ndarray | None:
    """Per 1024-value chunk bit widths when InlineBitpacking saves at least 10 %."""
    bits = vals.bits
    if vals.fsl or bits not in (8, 16, 32, 64) or vals.count < bp.BLOCK // 2:
        return None
    words = vals.data.view(bp.dtype_of(bits))
    nchunks = -(-len(words) // bp.BLOCK)
    grid = np.zeros(nchunks * bp.BLOCK, dtype=words.dtype)
    grid[: len(words)] = words
    widths = bp.bit_widths(grid.reshape(nchunks, bp.BLOCK), bits)
    packed = int(((1 + widths * (bp.BLOCK // bits)) * (bits // 8)).sum())
    if packed > 0.9 * len(vals.data):
        return None
    return widths


RLE_MAX_CHUNK = 4096  # values per RLE chunk


def _rle_pays(vals: Physical, than: int) -> bool:
    """Whether `Rle` (run values + u8 run lengths) beats `than` bytes by half."""
    if not isinstance(vals, FixedValues) or vals.fsl or vals.bits not in (8, 16, 32, 64):
        return False
    if vals.count < 64:
        return False
    words = vals.data.view(bp.dtype_of(vals.bits))
    runs = 1 + int(np.count_nonzero(words[1:] != words[:-1])) + vals.count // 255
    return runs * (vals.bits // 8 + 1) < 0.5 * than


def _rle_buffers(vals: FixedValues, counts: np.ndarray) -> list[_Buf]:
    """Per chunk: its run values, then its u8 run lengths (runs cut at chunk starts)."""
    words = vals.data.view(bp.dtype_of(vals.bits))
    starts = np.cumsum(counts) - counts
    values, lengths = rle.encode(words, starts)
    runs = rle.runs_per_chunk(lengths, counts)
    w = vals.bits // 8
    return [
        _Buf(np.ascontiguousarray(values).view(np.uint8), runs * w),
        _Buf(lengths, runs.astype(np.int64)),
    ]


def _rle_encoding(bits: int) -> pb.CompressiveEncoding:
    enc = pb.CompressiveEncoding()
    enc.rle.values.CopyFrom(_flat(bits))
    enc.rle.run_lengths.CopyFrom(_flat(8))
    return enc


def _inline_buffers(vals: FixedValues, counts: np.ndarray, widths: np.ndarray) -> list[_Buf]:
    bits = vals.bits
    words = vals.data.view(bp.dtype_of(bits))
    grid = np.zeros(len(counts) * bp.BLOCK, dtype=words.dtype)
    grid[: len(words)] = words
    data, sizes = bp.inline_encode(grid.reshape(len(counts), bp.BLOCK), bits, widths)
    return [_Buf(data, np.asarray(sizes, dtype=np.int64))]


# -- page encoders -------------------------------------------------------------------------
@dataclass
class PageInput:
    """What a leaf page holds, levels already in the file's numbering."""

    layers: list[Layer]
    rep: np.ndarray | None  # uint16 per entry
    defs: np.ndarray | None  # uint16 per entry (None when no layer has def levels)
    visible: np.ndarray | None  # bool per entry: has a value slot (None: all do)
    values: pa.Array  # visible slots
    num_rows: int
    version: str  # "2.1" | "2.2"
    dictionary: bool = True  # whether automatic dictionary encoding may be used
    dict_index_bits: int = 0  # dictionary-typed fields: the key width (values come decoded)


def _layers_pb(layers: list[Layer]) -> list[int]:
    return [int(x) for x in layers]


def encode_page(page: PageInput, where: str, *, full_zip: bool = False) -> EncodedPage:
    """Pick the layout for one page and encode it (`full_zip` forces that layout, for rows
    whose levels no mini-block chunk can hold)."""
    vals_valid = _any_valid(page)
    if not vals_valid:
        return _all_null(page)
    arr = page.values
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    if page.dict_index_bits:
        return _dictionary_page(page, arr, where, page.dict_index_bits)
    vals = physical(arr, where)
    if not full_zip:
        constant = _constant_page(page, arr, vals)
        if constant is not None:
            return constant
    if full_zip:
        if isinstance(vals, FixedValues) and _fullzip_rows(vals) is not None:
            return _full_zip(page, vals)
        if isinstance(vals, VariableValues):
            return _full_zip(page, vals)
        raise TooDense(f"{where}: no full-zip form for {arr.type}")
    if isinstance(vals, FixedValues):
        wide = vals.value_bits >= FULLZIP_MIN_BYTES * 8 and vals.bits % 8 == 0
        if wide and _fullzip_rows(vals) is not None:
            return _full_zip(page, vals)
    elif isinstance(vals, VariableValues) and vals.max_length >= FULLZIP_MIN_BYTES:
        return _full_zip(page, vals)
    if page.dictionary and _dictionary_pays(arr, vals):
        return _dictionary_page(page, arr, where)
    integers = pa.types.is_integer(arr.type) or pa.types.is_temporal(arr.type)
    return _mini_block(page, vals, _value_enc(vals), integers=integers)


def _constant_page(page: PageInput, arr: pa.Array, vals: Physical) -> EncodedPage | None:
    """A 2.2 page whose values (NULLs aside) are all one scalar, as pylance writes it: a
    fixed-width value inline, a variable-width one in a buffer (its serialized offsets and
    bytes), then, when the page has NULLs, empty repetition and the definition levels."""
    if page.version == "2.1" or page.rep is not None or len(page.layers) != 1:
        return None
    valid = None if arr.null_count == 0 else np.asarray(arr.is_valid(), dtype=bool)
    if valid is not None and page.defs is None:
        return None
    if page.version != "2.2" and (page.defs is not None or not isinstance(vals, FixedValues)):
        return None  # 2.3 pages: only a fixed-width value without NULLs (planar otherwise)
    value = _constant_value(vals, valid)
    if value is None:
        return None
    cl = pb.ConstantLayout()
    cl.layers.extend(_layers_pb(page.layers))
    bufs: list[bytes] = []
    if isinstance(vals, FixedValues):
        cl.inline_value = value
    else:
        assert isinstance(vals, VariableValues)
        width = vals.offset_bits // 8
        offsets = (0).to_bytes(width, "little") + len(value).to_bytes(width, "little")
        head = struct.pack("<III", 2, len(offsets), len(value))
        bufs.append(head + offsets + value)
    if page.defs is not None:
        bufs += [b"", np.ascontiguousarray(page.defs, dtype="<u2").view(np.uint8).tobytes()]
    return EncodedPage(pb.PageLayout(constant_layout=cl), bufs)


def _constant_value(vals: Physical, valid: np.ndarray | None) -> bytes | None:
    """The bytes of the one value of a page's valid slots (fixed-width: LE, whole bytes,
    at most 32; a boolean one byte), or None when they differ."""
    if isinstance(vals, VariableValues):
        starts, stops = vals.offsets[:-1], vals.offsets[1:]
        if valid is not None:
            starts, stops = starts[valid], stops[valid]
        if not len(starts):
            return None
        width = int(stops[0] - starts[0])
        # (a NULL slot is empty, so the valid values' bytes are one run)
        block = vals.data[int(starts[0]) : int(stops[-1])]
        if len(block) != width * len(starts) or np.any(stops - starts != width):
            return None
        if width and not (block.reshape(-1, width) == block[:width]).all():
            return None
        return block[:width].tobytes()
    if not isinstance(vals, FixedValues) or vals.fsl or vals.bits > 256:
        return None
    if vals.bits % 8 and vals.bits != 1:
        return None
    # (booleans are held a byte each: pylance's constant is that byte)
    rows = vals.data.reshape(vals.count, max(1, vals.bits // 8))
    if valid is not None:
        rows = rows[valid]
    if not len(rows) or not (rows == rows[0]).all():
        return None
    return rows[0].tobytes()


def _value_enc(vals: Physical) -> pb.CompressiveEncoding:
    if isinstance(vals, VariableValues):
        return _variable_enc(vals.offset_bits)
    assert isinstance(vals, FixedValues)
    return _value_encoding(vals)


def _any_valid(page: PageInput) -> bool:
    if pa.types.is_null(page.values.type) or len(page.values) == 0:
        return False
    if page.defs is None:
        return True
    return bool(np.any(page.defs == 0))


def _value_buffers(vals: Physical, counts: np.ndarray) -> list[_Buf]:
    if isinstance(vals, VariableValues):
        return _variable_buffers(vals, counts)
    assert isinstance(vals, FixedValues)
    return _fixed_buffers(vals, counts)


def _mini_block(
    page: PageInput,
    vals: Physical,
    value_enc: pb.CompressiveEncoding,
    dictionary: tuple[pb.CompressiveEncoding, int, bytes] | None = None,
    *,
    integers: bool = False,
) -> EncodedPage:
    large = page.version != "2.1"
    num_entries = (
        len(page.rep)
        if page.rep is not None
        else (len(page.defs) if page.defs is not None else vals.count)
    )
    levels = (page.rep is not None) + (page.defs is not None)
    if page.visible is None:
        visible_pos = np.arange(vals.count, dtype=np.int64)
    else:
        visible_pos = np.flatnonzero(page.visible)
    chosen = None
    widths = _inline_widths(vals) if integers and isinstance(vals, FixedValues) else None
    if isinstance(vals, FixedValues):
        size = len(vals.data)
        if widths is not None:
            size = int(((1 + widths * (bp.BLOCK // vals.bits)) * (vals.bits // 8)).sum())
        if _rle_pays(vals, size):
            counts = _chunk_counts(vals.count, RLE_MAX_CHUNK)
            bounds = _level_bounds(visible_pos, counts, num_entries, levels > 0)
            bufs = _rle_buffers(vals, counts)
            chosen = _try_serialize(page, counts, bounds, bufs, large)
            if chosen is not None:
                value_enc, widths = _rle_encoding(vals.bits), None
    if widths is not None:
        counts = _chunk_counts(vals.count, bp.BLOCK)
        bounds = _level_bounds(visible_pos, counts, num_entries, levels > 0)
        bufs = _inline_buffers(vals, counts, widths)
        enc = pb.CompressiveEncoding()
        enc.inline_bitpacking.uncompressed_bits_per_value = vals.bits
        chosen = _try_serialize(page, counts, bounds, bufs, large)
        if chosen is not None:
            value_enc = enc
    if chosen is None:
        counts, bounds = _choose_chunks(vals, visible_pos, num_entries, levels)
        bufs = _value_buffers(vals, counts)
        chosen = _try_serialize(page, counts, bounds, bufs, large)
        if chosen is None:
            raise TooDense("mini-block chunks exceed their limits")
    data, meta, rep_enc, def_enc = chosen
    mb = pb.MiniBlockLayout()
    if rep_enc is not None:
        mb.rep_compression.CopyFrom(rep_enc)
    if def_enc is not None:
        mb.def_compression.CopyFrom(def_enc)
    mb.value_compression.CopyFrom(value_enc)
    mb.layers.extend(_layers_pb(page.layers))
    mb.num_buffers = len(bufs)
    mb.num_items = vals.count
    mb.has_large_chunk = large
    buffers: list = [meta, data]
    if dictionary is not None:
        denc, ditems, dbytes = dictionary
        mb.dictionary.CopyFrom(denc)
        mb.num_dictionary_items = ditems
        buffers.append(dbytes)
    if page.rep is not None:
        mb.repetition_index_depth = 1
        buffers.append(_rep_index(page.rep, bounds, max_rep(page.layers)))
    return EncodedPage(pb.PageLayout(mini_block_layout=mb), buffers)


def _try_serialize(
    page: PageInput, counts: np.ndarray, bounds: np.ndarray, bufs: list[_Buf], large: bool
) -> tuple | None:
    """(chunk data, chunk metadata, rep encoding, def encoding), or None when a chunk
    would break the mini-block limits."""
    level_bufs, rep_enc, def_enc = [], None, None
    if page.rep is not None:
        rep_enc, b = _level_buf(page.rep, bounds)
        level_bufs.append(b)
    if page.defs is not None:
        def_enc, b = _level_buf(page.defs, bounds)
        level_bufs.append(b)
    try:
        data, meta = _serialize_chunks(counts, bounds, level_bufs, bufs, large)
    except TooDense:
        return None
    return data, meta, rep_enc, def_enc


def _all_null(page: PageInput) -> EncodedPage:
    simple = page.rep is None and (page.defs is None or len(page.layers) == 1)
    cl = pb.ConstantLayout()
    cl.layers.extend(_layers_pb(page.layers))
    if simple:
        return EncodedPage(pb.PageLayout(constant_layout=cl), [])
    rep = b"" if page.rep is None else np.ascontiguousarray(page.rep, dtype="<u2").view(np.uint8)
    defs = b"" if page.defs is None else np.ascontiguousarray(page.defs, dtype="<u2").view(np.uint8)
    if page.version != "2.1":
        if page.rep is not None:
            cl.rep_compression.CopyFrom(_flat(16))
            cl.num_rep_values = len(page.rep)
        if page.defs is not None:
            cl.def_compression.CopyFrom(_flat(16))
            cl.num_def_values = len(page.defs)
    return EncodedPage(pb.PageLayout(constant_layout=cl), [rep, defs])


def _bits(x: int) -> int:
    return int(x).bit_length()


def _fullzip_rows(vals: FixedValues) -> tuple[np.ndarray, int] | None:
    """Each fixed-width value's full-zip bytes as rows of a 2-D array, and its bit width:
    the value bytes, preceded by the item validity bitmap for a fixed_size_list with nulls
    (one level only, whole bytes). None when no full-zip form is written."""
    if vals.bits % 8:
        return None
    nulls = [layer for layer in vals.fsl if layer.validity is not None]
    w = vals.value_bits // 8
    rows = vals.data.reshape(vals.count, w)
    if not nulls:
        return rows, vals.value_bits
    if len(vals.fsl) != 1 or vals.fsl[0].size % 8:
        return None
    k = vals.fsl[0].size
    bitmap = np.packbits(
        vals.fsl[0].validity.reshape(vals.count, k).astype(np.uint8), axis=1, bitorder="little"
    )
    return np.concatenate([bitmap, rows], axis=1), vals.value_bits + k


def _full_zip(page: PageInput, vals: FixedValues | VariableValues) -> EncodedPage:
    """Control word per entry, values zipped in; a row-offset index for lists / variable."""
    mrep = max_rep(page.layers) if page.rep is not None else 0
    mdef = max_def(page.layers) if page.defs is not None else 0
    bits_rep, bits_def = _bits(mrep), _bits(mdef)
    cw_bits = bits_rep + bits_def
    cw = 0 if cw_bits == 0 else 1 if cw_bits <= 8 else 2 if cw_bits <= 16 else 4
    n_entries = (
        len(page.rep)
        if page.rep is not None
        else (len(page.defs) if page.defs is not None else vals.count)
    )
    visible = np.ones(n_entries, dtype=bool) if page.visible is None else page.visible
    valid = visible if page.defs is None else (page.defs == 0)
    fz = pb.FullZipLayout(bits_rep=bits_rep, bits_def=bits_def)
    variable = isinstance(vals, VariableValues)
    vis_idx = np.flatnonzero(visible)
    if variable:
        lengths = np.diff(vals.offsets)
        # per visible slot: does it carry a value (valid)?
        slot_valid = valid[vis_idx]
        entry_len = np.zeros(n_entries, dtype=np.int64)
        lw = vals.offset_bits // 8
        entry_len[vis_idx[slot_valid]] = lw + lengths[slot_valid]
        sizes = cw + entry_len
        fz.bits_per_offset = vals.offset_bits
        fz.value_compression.CopyFrom(_variable_enc(vals.offset_bits))
    else:
        zipped = _fullzip_rows(vals)
        assert zipped is not None
        value_rows, value_bits = zipped
        width = value_bits // 8
        sizes = np.full(n_entries, cw, dtype=np.int64)
        sizes[vis_idx] += width
        fz.bits_per_value = value_bits
        fz.value_compression.CopyFrom(_value_encoding(vals))
    starts = np.cumsum(sizes) - sizes
    out = np.zeros(int(sizes.sum()), dtype=np.uint8)
    if cw:
        word = np.zeros(n_entries, dtype=np.uint32)
        if page.rep is not None:
            word |= page.rep.astype(np.uint32) << bits_def
        if page.defs is not None:
            word |= page.defs.astype(np.uint32)
        for k in range(cw):
            out[starts + k] = (word >> (8 * k)) & 0xFF
    if variable:
        carry = vis_idx[slot_valid]
        lens = lengths[slot_valid].astype(f"<u{lw}")
        lb = lens.view(np.uint8).reshape(-1, lw)
        for k in range(lw):
            out[starts[carry] + cw + k] = lb[:, k]
        src_starts = vals.offsets[:-1][slot_valid]
        scatter(out, starts[carry] + cw + lw, vals.data, src_starts, lengths[slot_valid])
    else:
        flat = value_rows.reshape(-1)
        if page.visible is None and cw == 0:
            out = flat
        elif page.visible is None:
            out.reshape(n_entries, cw + width)[:, cw:] = value_rows
        else:
            scatter(
                out,
                starts[vis_idx] + cw,
                flat,
                np.arange(len(vis_idx), dtype=np.int64) * width,
                np.full(len(vis_idx), width, dtype=np.int64),
            )
    fz.num_items = n_entries
    fz.num_visible_items = len(vis_idx)
    fz.layers.extend(_layers_pb(page.layers))
    buffers: list = [out]
    if page.rep is not None or variable:
        if page.rep is not None:
            row_entry = np.flatnonzero(page.rep == mrep)
        else:
            row_entry = np.arange(n_entries)
        offs = np.append(starts[row_entry], len(out)).astype(np.uint64)
        top = int(offs[-1]) if len(offs) else 0
        dt = (
            "<u1" if top < 1 << 8 else "<u2" if top < 1 << 16 else "<u4" if top < 1 << 32 else "<u8"
        )
        buffers.append(offs.astype(dt))
    return EncodedPage(pb.PageLayout(full_zip_layout=fz), buffers)


# -- dictionaries ------------------------------------------------------------------------------
def _dictionary_pays(arr: pa.Array, vals: Physical) -> bool:
    """pylance's rule: enough values and an estimated dictionary at most 80 % of the data."""
    n = vals.count
    if n < DICT_MIN_VALUES or isinstance(vals, NullValues):
        return False
    if isinstance(vals, FixedValues):
        if vals.fsl or vals.bits not in (32, 64, 128):
            return False
        raw = n * vals.bits / 8
        if n > 4096 and pc.count_distinct(arr.slice(0, 4096)).as_py() > 2048:
            return False
        card = pc.count_distinct(arr).as_py()
        return card * 16 + n * 4 < DICT_RATIO * raw
    raw = len(vals.data) + 4 * n
    if n > 4096 and pc.count_distinct(arr.slice(0, 4096)).as_py() > 2048:
        return False
    card = pc.count_distinct(arr).as_py()
    avg = len(vals.data) / max(n, 1)
    return card * (avg + 4) + n * 4 < DICT_RATIO * raw


def _dictionary_block(items: pa.Array, where: str) -> tuple[pb.CompressiveEncoding, bytes]:
    vals = physical(items, where)
    if isinstance(vals, VariableValues):
        n, ow = vals.count, vals.offset_bits // 8
        head = np.array([vals.offset_bits, 2 * ow + ow * (n + 1)], dtype=f"<u{ow}")
        block = head.tobytes() + vals.offsets.astype(f"<u{ow}").tobytes() + vals.data.tobytes()
        return _variable_enc(vals.offset_bits), block
    assert isinstance(vals, FixedValues)
    if vals.bits == 1:
        raise UnsupportedFeatureError(f"{where}: boolean dictionaries are not written")
    return _value_encoding(vals), vals.data.tobytes()


def _dictionary_page(
    page: PageInput, arr: pa.Array, where: str, index_bits: int = 32
) -> EncodedPage:
    """Indices in mini-block chunks plus the distinct values as one block. Dictionary-typed
    columns keep their index width (pylance checks it against the key type)."""
    encoded = pc.dictionary_encode(arr)
    items = encoded.dictionary
    if len(items) > 1 << (index_bits - 1):  # fewer rows per page, then
        raise TooDense(f"{where}: {len(items)} distinct values overflow {index_bits}-bit keys")
    idx = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(f"<u{index_bits // 8}")
    denc, dbytes = _dictionary_block(items, where)
    vals = FixedValues(len(idx), index_bits, idx.view(np.uint8))
    return _mini_block(page, vals, _flat(index_bits), (denc, len(items), dbytes), integers=True)
