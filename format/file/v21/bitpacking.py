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

from quiver.format import _kernels
from quiver.format.errors import CorruptFileError
from quiver.format.file.v21.gather import as_i64, range_index

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


def _aligned(words: np.ndarray, dt: type) -> np.ndarray:
    """`words` as a contiguous `dt` array the kernels can read as words (copied if misaligned)."""
    return np.require(words, dt, "CA")


def _mask(bits: int, width: int) -> np.generic:
    dt = _DTYPES[bits]
    return dt(np.iinfo(dt).max) if width >= bits else dt((1 << width) - 1)


def unpack(packed: np.ndarray, width: int, bits: int) -> np.ndarray:
    """Unpack FastLanes blocks: `packed` (blocks, width * 1024 / bits) uint`bits` words ->
    (blocks, 1024) values."""
    dt = _DTYPES[bits]
    nblocks = packed.shape[0]
    words = _aligned(packed, dt).reshape(-1)
    if len(words) != nblocks * width * (BLOCK // bits) or not 0 <= width <= bits:
        raise ValueError(f"{len(words)} words are not {nblocks} blocks packed at width {width}")
    out = np.empty((nblocks, BLOCK), dtype=dt)
    _kernels.unpack_blocks(words, width, bits, out)
    return out


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
    (uint`bits` words: width, then packed block) and yields `counts[i]` <= 1024 values."""
    dt = _DTYPES[bits]
    words = _aligned(words, dt)
    starts, sizes, counts = as_i64(word_starts), as_i64(word_sizes), as_i64(counts)
    status, i, total = _kernels.inline_check(words, starts, sizes, counts, bits)
    if status == _kernels.TOO_MANY:
        raise CorruptFileError(where, f"inline bit-packed chunk with more than {BLOCK} values")
    if status == _kernels.OUTSIDE:
        raise CorruptFileError(where, "inline bit-packed chunk outside its buffer")
    if status == _kernels.TOO_WIDE:
        raise CorruptFileError(
            where, f"inline bit-packed chunk {i} has width {int(words[starts[i]])} > {bits}"
        )
    if status == _kernels.TOO_SHORT:
        raise CorruptFileError(
            where,
            f"inline bit-packed chunk {i} ({int(sizes[i]) * bits // 8} bytes) is too short "
            f"for width {int(words[starts[i]])}",
        )
    out = np.empty(total, dtype=dt)
    _kernels.inline_unpack(words, starts, counts, bits, out)
    return out


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
    out = source[range_index(seg_start[order], seg_len[order])]
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
    if width > bits or width < 0:
        raise CorruptFileError(where, f"out-of-line bit-packing width {width} > {bits}")
    words = _aligned(words, dt)
    starts, sizes, counts = as_i64(word_starts), as_i64(word_sizes), as_i64(counts)
    bad = _kernels.outofline_check(len(words), starts, sizes, counts, width * BLOCK // bits)
    if bad >= 0:
        raise CorruptFileError(
            where, f"out-of-line bit-packed buffer of chunk {bad} is too short or out of bounds"
        )
    out = np.empty(int(counts.sum()), dtype=dt)
    _kernels.outofline_unpack(words, starts, sizes, counts, width, bits, out)
    return out
