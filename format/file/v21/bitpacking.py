"""FastLanes bit-packing of 2.1+ pages: inline (mini-block values) and out-of-line (levels).

A FastLanes block packs 1024 values of T bits (T = 8/16/32/64) at width w into w * 1024 / T
words of T bits. The values are transposed over LANES = 1024 / T lanes: row r of lane l is the
value at index `FL_ORDER[r // 8] * 16 + (r % 8) * 128 + l`; each lane's T rows are concatenated
LSB-first into a w*T-bit stream whose word k is stored at `packed[LANES * k + l]`.
Everything here works on many blocks at once: arrays shaped (blocks, ...).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from format.errors import CorruptFileError

BLOCK = 1024
FL_ORDER = np.array([0, 4, 2, 6, 1, 5, 3, 7])
_DTYPES = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def dtype_of(bits: int) -> type:
    """The numpy unsigned type of a FastLanes word size (8, 16, 32 or 64)."""
    return _DTYPES[bits]


@cache
def _order(bits: int) -> np.ndarray:
    """Value index of (row, lane), flattened row-major: shape (bits * lanes,) = (1024,)."""
    lanes = BLOCK // bits
    r = np.arange(bits)[:, None]
    lane = np.arange(lanes)[None, :]
    return (FL_ORDER[r // 8] * 16 + (r % 8) * 128 + lane).reshape(-1)


@cache
def _rows(bits: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: the word holding its first bit, the bit offset there, whether it spills over."""
    start = np.arange(bits) * width
    return start // bits, start % bits, (start % bits) + width > bits


def _mask(bits: int, width: int) -> np.generic:
    dt = _DTYPES[bits]
    return dt(np.iinfo(dt).max) if width >= bits else dt((1 << width) - 1)


@cache
def _unpack_plan(bits: int, width: int) -> tuple[np.ndarray, ...]:
    """Per output value j (in value order): the word holding its low bits and the shift
    there, the word holding its spilled high bits and the shift there, and a mask that is
    all-ones where the value spills into a second word."""
    dt = _DTYPES[bits]
    lanes = BLOCK // bits
    k0, off, spill = _rows(bits, width)
    inv = np.empty(BLOCK, dtype=np.int64)
    inv[_order(bits)] = np.arange(BLOCK)  # value index -> row * lanes + lane
    r, lane = inv // lanes, inv % lanes
    lo_word = k0[r] * lanes + lane
    hi_word = np.minimum(k0[r] + 1, width - 1) * lanes + lane
    hi_mask = np.where(spill[r], _mask(bits, bits), dt(0)).astype(dt)
    return lo_word, off[r].astype(dt), hi_word, ((bits - off[r]) % bits).astype(dt), hi_mask


def unpack(packed: np.ndarray, width: int, bits: int) -> np.ndarray:
    """Unpack FastLanes blocks: `packed` (blocks, width * 1024 / bits) uint`bits` words ->
    (blocks, 1024) values."""
    dt = _DTYPES[bits]
    nblocks = packed.shape[0]
    if width == 0:
        return np.zeros((nblocks, BLOCK), dtype=dt)
    words = packed.reshape(nblocks, width * (BLOCK // bits))
    lo_word, lo_shift, hi_word, hi_shift, hi_mask = _unpack_plan(bits, width)
    vals = words[:, lo_word]
    vals >>= lo_shift
    if hi_mask.any():
        hi = words[:, hi_word]
        hi <<= hi_shift
        hi &= hi_mask
        vals |= hi
    if width < bits:
        vals &= _mask(bits, width)
    return vals


def pack(values: np.ndarray, width: int, bits: int) -> np.ndarray:
    """Pack (blocks, 1024) uint`bits` values at `width` bits each into (blocks, width * 1024 /
    bits) words in the FastLanes layout. Bits above `width` are dropped."""
    dt = _DTYPES[bits]
    values = np.asarray(values, dtype=dt)
    nblocks = values.shape[0]
    lanes = BLOCK // bits
    out = np.zeros((nblocks, width, lanes), dtype=dt)
    if width == 0:
        return out.reshape(nblocks, 0)
    rows = values[:, _order(bits)].reshape(nblocks, bits, lanes) & _mask(bits, width)
    k0, off, spill = _rows(bits, width)
    for r in range(bits):  # one vectorised step per row (<= 64), over all blocks and lanes
        out[:, k0[r], :] |= rows[:, r, :] << dt(off[r])
        if spill[r]:
            out[:, k0[r] + 1, :] |= rows[:, r, :] >> dt(bits - off[r])
    return out.reshape(nblocks, width * lanes)


def bit_widths(values: np.ndarray, bits: int) -> np.ndarray:
    """Per block of 1024 values (rows of `values`, shape (blocks, 1024)): the smallest width
    that holds every value (0 for all-zero blocks)."""
    dt = _DTYPES[bits]
    top = np.bitwise_or.reduce(np.asarray(values, dtype=dt), axis=1)
    # bit_length via float log2 is exact for powers of two only; use a byte-wise search.
    widths = np.zeros(len(top), dtype=np.int64)
    for b in range(bits):  # <= 64 vectorised comparisons
        widths[(top >> dt(b)) != 0] = b + 1
    return widths


# -- inline bit-packing (mini-block values) ---------------------------------------------------
def inline_encode(
    values: np.ndarray, bits: int, widths: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Mini-block InlineBitpacking chunks of (n_chunks, 1024) values (the caller zero-pads the
    last chunk). Chunk i is `[T-bit LE width w_i][w_i * 1024 / T FastLanes words]`; returns
    (all chunks' bytes back to back as uint8, each chunk's byte size). `widths` defaults to
    `bit_widths` (the narrowest width per chunk); wider widths are allowed."""
    dt = _DTYPES[bits]
    values = np.asarray(values, dtype=dt)
    if widths is None:
        widths = bit_widths(values, bits)
    widths = np.asarray(widths, dtype=np.int64)
    lanes = BLOCK // bits
    nwords = 1 + widths * lanes
    first = np.cumsum(nwords) - nwords
    out = np.empty(int(nwords.sum()), dtype=dt)
    for w in np.unique(widths):  # one vectorised pack per distinct width
        rows = np.flatnonzero(widths == w)
        body = np.concatenate(
            [np.full((len(rows), 1), w, dtype=dt), pack(values[rows], int(w), bits)], axis=1
        )
        out[first[rows][:, None] + np.arange(1 + int(w) * lanes)[None, :]] = body
    return out.view(np.uint8), nwords * (bits // 8)


def inline_chunk_size(width: int, bits: int) -> int:
    """Byte size of one InlineBitpacking chunk packed at `width`."""
    return (1 + width * BLOCK // bits) * bits // 8


def inline_decode(
    words: np.ndarray,
    word_starts: np.ndarray,
    word_sizes: np.ndarray,
    counts: np.ndarray,
    bits: int,
    where: str,
) -> np.ndarray:
    """Decode InlineBitpacking chunks: chunk i occupies `words[word_starts[i]:][:word_sizes[i]]`
    (uint`bits` words: width, then packed block) and yields `counts[i]` <= 1024 values.
    Chunks are grouped by width; each group is unpacked with one vectorised call."""
    dt = _DTYPES[bits]
    n = len(counts)
    if n == 0:
        return np.zeros(0, dtype=dt)
    if (counts > BLOCK).any() or (counts < 0).any():
        raise CorruptFileError(where, f"inline bit-packed chunk with more than {BLOCK} values")
    if (
        (word_sizes < 1).any()
        or (word_starts < 0).any()
        or (word_starts + word_sizes > len(words)).any()
    ):
        raise CorruptFileError(where, "inline bit-packed chunk outside its buffer")
    raw_widths = words[word_starts]  # unsigned: a huge width must not wrap negative
    if (raw_widths > bits).any():
        i = int(np.argmax(raw_widths > bits))
        raise CorruptFileError(
            where, f"inline bit-packed chunk {i} has width {int(raw_widths[i])} > {bits}"
        )
    widths = raw_widths.astype(np.int64)
    need = 1 + widths * (BLOCK // bits)
    if (word_sizes < need).any():
        i = int(np.argmax(word_sizes < need))
        raise CorruptFileError(
            where,
            f"inline bit-packed chunk {i} ({int(word_sizes[i]) * bits // 8} bytes) is too short "
            f"for width {int(widths[i])}",
        )
    out = np.empty((n, BLOCK), dtype=dt)
    lanes = BLOCK // bits
    for w in np.unique(widths):
        rows = np.flatnonzero(widths == w)
        nwords = int(w) * lanes
        idx = (word_starts[rows] + 1)[:, None] + np.arange(nwords)[None, :]
        out[rows] = unpack(words[idx], int(w), bits)
    if (counts == BLOCK).all():
        return out.reshape(-1)
    keep = np.arange(BLOCK)[None, :] < counts[:, None]
    return out[keep]


# -- out-of-line bit-packing (levels, one block buffer per chunk) -----------------------------
def outofline_encode(values: np.ndarray, width: int, bits: int) -> bytes:
    """OutOfLineBitpacking block of `values` (uint`bits`): full 1024-value blocks packed at
    `width` (w * 1024 / T words each), then the tail (< 1024 values) either zero-padded and
    packed, or appended raw as T-bit words when packing would not save space."""
    dt = _DTYPES[bits]
    values = np.asarray(values, dtype=dt)
    full = len(values) // BLOCK
    tail = len(values) - full * BLOCK
    parts = [pack(values[: full * BLOCK].reshape(full, BLOCK), width, bits).reshape(-1)]
    if tail:
        # Same choice as pylance: pack the tail iff the padding costs less than packing saves.
        if width * (BLOCK - tail) < max(bits - width, 0) * tail:
            padded = np.zeros((1, BLOCK), dtype=dt)
            padded[0, :tail] = values[full * BLOCK :]
            parts.append(pack(padded, width, bits).reshape(-1))
        else:
            parts.append(values[full * BLOCK :])
    return np.concatenate(parts).tobytes()


def outofline_encode_chunks(
    values: np.ndarray, counts: np.ndarray, width: int, bits: int
) -> tuple[np.ndarray, np.ndarray]:
    """`outofline_encode` for many chunks at once (chunk i = the next `counts[i]` values):
    returns (all blocks back to back as uint8, each chunk's byte size)."""
    dt = _DTYPES[bits]
    values = np.asarray(values, dtype=dt)
    counts = np.asarray(counts, dtype=np.int64)
    wpb = width * BLOCK // bits
    full, tail = counts // BLOCK, counts % BLOCK
    packed_tail = (tail > 0) & (width * (BLOCK - tail) < max(bits - width, 0) * tail)
    blocks = full + packed_tail
    chunk_start = np.cumsum(counts) - counts
    nblocks = int(blocks.sum())
    block_chunk = np.repeat(np.arange(len(counts)), blocks)
    block_in_chunk = np.arange(nblocks) - (np.cumsum(blocks) - blocks)[block_chunk]
    first = chunk_start[block_chunk] + block_in_chunk * BLOCK
    block_len = np.minimum(counts[block_chunk] - block_in_chunk * BLOCK, BLOCK)
    lane = np.arange(BLOCK)[None, :]
    idx = np.minimum(first[:, None] + lane, max(len(values) - 1, 0))
    grid = np.where(lane < block_len[:, None], values[idx] if len(values) else dt(0), dt(0))
    packed = pack(grid.astype(dt), width, bits).reshape(-1)
    raw = (tail > 0) & ~packed_tail
    # Output per chunk: its packed blocks, then (if not packed) its raw tail.
    source = np.concatenate([packed, values])
    seg_chunk = np.concatenate([np.arange(len(counts)), np.arange(len(counts))])
    seg_start = np.concatenate(
        [(np.cumsum(blocks) - blocks) * wpb, len(packed) + chunk_start + full * BLOCK]
    )
    seg_len = np.concatenate([blocks * wpb, np.where(raw, tail, 0)])
    order = np.argsort(seg_chunk, kind="stable")
    out = source[_ranges(seg_start[order], seg_len[order])]
    return out.view(np.uint8), (blocks * wpb + np.where(raw, tail, 0)) * (bits // 8)


def outofline_decode(
    words: np.ndarray,
    word_starts: np.ndarray,
    word_sizes: np.ndarray,
    counts: np.ndarray,
    width: int,
    bits: int,
    where: str,
) -> np.ndarray:
    """Decode OutOfLineBitpacking buffers, one per chunk: `counts[i]` values from
    `words[word_starts[i]:][:word_sizes[i]]`. The tail of each buffer is raw iff the buffer has
    exactly `full_blocks * w * 1024 / T + tail` words, else a padded packed block."""
    dt = _DTYPES[bits]
    if width > bits:
        raise CorruptFileError(where, f"out-of-line bit-packing width {width} > {bits}")
    counts = np.asarray(counts, dtype=np.int64)
    wpb = width * BLOCK // bits
    full = counts // BLOCK
    tail = counts % BLOCK
    raw = (tail > 0) & (word_sizes == full * wpb + tail)
    packed_tail = (tail > 0) & ~raw
    blocks = full + packed_tail
    need = np.where(raw, full * wpb + tail, blocks * wpb)
    if (
        (word_sizes < need).any()
        or (word_starts < 0).any()
        or (word_starts + word_sizes > len(words)).any()
    ):
        i = int(np.argmax((word_sizes < need) | (word_starts + word_sizes > len(words))))
        raise CorruptFileError(
            where, f"out-of-line bit-packed buffer of chunk {i} is too short or out of bounds"
        )
    nblocks = int(blocks.sum())
    block_chunk = np.repeat(np.arange(len(counts)), blocks)
    first_block = np.cumsum(blocks) - blocks
    block_in_chunk = np.arange(nblocks) - first_block[block_chunk]
    block_word = word_starts[block_chunk] + block_in_chunk * wpb
    if nblocks:
        unpacked = unpack(words[block_word[:, None] + np.arange(wpb)[None, :]], width, bits)
    else:
        unpacked = np.zeros((0, BLOCK), dtype=dt)
    raw_starts = word_starts + full * wpb
    raw_vals = words[_ranges(raw_starts[raw], tail[raw])]
    # Each chunk = its packed blocks (the last one cut to the tail), then its raw tail.
    block_len = np.minimum(counts[block_chunk] - block_in_chunk * BLOCK, BLOCK)
    source = np.concatenate([unpacked.reshape(-1), raw_vals])
    seg_chunk = np.concatenate([block_chunk, np.flatnonzero(raw)])
    seg_start = np.concatenate([np.arange(nblocks) * BLOCK, nblocks * BLOCK + _starts(tail[raw])])
    seg_len = np.concatenate([block_len, tail[raw]])
    order = np.argsort(seg_chunk, kind="stable")
    return source[_ranges(seg_start[order], seg_len[order])]


def _starts(lengths: np.ndarray) -> np.ndarray:
    return np.cumsum(lengths) - lengths


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    from format.file.v21.gather import range_index

    return range_index(starts, lengths)
