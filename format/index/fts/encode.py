"""Writing posting lists: every token's blocks of one partition encoded at once.

The layout is the one `postings` reads (pylance's format version 2): per token, full blocks
of 128 documents (best score f32, first document id u32, a width byte and the BitPacker4x
document-id deltas, a width byte and the BitPacker4x frequencies), then the partial last
block (best score f32, LEB128 document ids, the first absolute, then LEB128 frequencies).

The whole partition is one numpy pass per part of a block, not a loop over tokens: blocks
are laid out in one byte buffer, which becomes the `_posting` column without a copy.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from quiver.format import _kernels
from quiver.format.index.fts.postings import BLOCK

_HEAD = np.dtype([("score", "<f4"), ("first", "<u4"), ("bits", "u1")])


def pack4x(values: np.ndarray, bits: int) -> np.ndarray:
    """BitPacker4x blocks: (blocks, 128) uint32 values of at most `bits` bits -> (blocks,
    4 * bits) uint32 words (four interleaved lanes, low bits first)."""
    values = np.require(values, dtype="<u4", requirements=["C_CONTIGUOUS", "ALIGNED"])
    words = np.empty((values.shape[0], 4 * bits), np.uint32)
    _kernels.pack4x(values, bits, words)
    return words


def _widths(values: np.ndarray) -> np.ndarray:
    """Bits the largest value of each row of `values` needs (0 for a row of zeros)."""
    top = values.max(axis=1).astype(np.uint64)
    out = np.zeros(len(top), np.int64)
    while True:
        more = top >> out.astype(np.uint64) > 0
        if not more.any():
            return out
        out += more


def varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LEB128 bytes of every value (uint32) one after another, and each value's byte count."""
    v = values.astype(np.uint64)
    sizes = np.ones(len(v), np.int64)
    for k in range(1, 5):
        sizes += v >= np.uint64(1 << (7 * k))
    starts = np.cumsum(sizes) - sizes
    out = np.empty(int(sizes.sum()), np.uint8)
    for k in range(5):
        at = np.flatnonzero(sizes > k)
        if not len(at):
            break
        byte = (v[at] >> np.uint64(7 * k)) & np.uint64(0x7F)
        byte |= np.where(sizes[at] > k + 1, np.uint64(0x80), np.uint64(0))
        out[starts[at] + k] = byte
    return out, sizes


def encode_postings(
    bounds: np.ndarray, docs: np.ndarray, freqs: np.ndarray, scores: np.ndarray
) -> tuple[pa.ListArray, np.ndarray]:
    """The `_posting` column (list<large_binary>, a token's blocks per row) and each
    token's best score, for postings grouped by token: token t owns positions
    ``bounds[t]:bounds[t + 1]`` of `docs` (ascending), `freqs` and `scores` (upper bounds)."""
    tokens = len(bounds) - 1
    df = np.diff(bounds).astype(np.int64)
    full = df // BLOCK
    tail = df - full * BLOCK
    per_token = full + (tail > 0)
    first_block = np.concatenate([[0], np.cumsum(per_token)]).astype(np.int64)
    n_blocks = int(first_block[-1])
    sizes = np.zeros(n_blocks, np.int64)
    best = np.zeros(n_blocks, np.float32)

    # full blocks: a (blocks, 128) view of their postings
    owner = np.repeat(np.arange(tokens), full)
    nth = np.arange(len(owner)) - np.repeat(np.cumsum(full) - full, full)
    full_ids = first_block[owner] + nth
    index = np.int32 if len(docs) < 1 << 31 else np.int64
    rows = (bounds[:-1][owner] + nth * BLOCK).astype(index)[:, None] + np.arange(BLOCK, dtype=index)
    d = docs[rows].astype(np.uint32)
    f = freqs[rows].astype(np.uint32)
    best[full_ids] = scores[rows].max(axis=1)
    deltas = np.diff(d, axis=1, prepend=d[:, :1])
    dbits, fbits = _widths(deltas), _widths(f)
    sizes[full_ids] = 10 + 16 * (dbits + fbits)

    # tail blocks: LEB128 ids (first absolute) then frequencies
    tail_tokens = np.flatnonzero(tail > 0)
    m = tail[tail_tokens]
    tail_ids = first_block[tail_tokens] + full[tail_tokens]
    starts = bounds[:-1][tail_tokens] + full[tail_tokens] * BLOCK
    local = np.arange(int(m.sum())) - np.repeat(np.cumsum(m) - m, m)
    at = np.repeat(starts, m) + local
    td = docs[at].astype(np.int64)
    gaps = td - np.where(local > 0, np.concatenate([[0], td[:-1]]), 0)
    stream_start = 2 * (np.cumsum(m) - m)
    values = np.empty(2 * len(at), np.uint64)
    values[np.repeat(stream_start, m) + local] = gaps
    values[np.repeat(stream_start + m, m) + local] = freqs[at]
    encoded, value_sizes = varints(values)
    if len(m):
        tail_bytes = np.add.reduceat(value_sizes, stream_start)
        best[tail_ids] = np.maximum.reduceat(scores[at], np.cumsum(m) - m)
    else:
        tail_bytes = np.zeros(0, np.int64)
    sizes[tail_ids] = 4 + tail_bytes

    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    out = np.zeros(int(offsets[-1]), np.uint8)
    if len(full_ids):
        head = np.zeros(len(full_ids), _HEAD)
        head["score"], head["first"], head["bits"] = best[full_ids], d[:, 0], dbits
        base = offsets[full_ids]
        out[base[:, None] + np.arange(9)] = head.view(np.uint8).reshape(-1, 9)
        out[base + 9 + 16 * dbits] = fbits
        for packed, widths, skip in ((deltas, dbits, 9), (f, fbits, 10 + 16 * dbits)):
            for bits in np.unique(widths):
                if not bits:
                    continue
                sel = np.flatnonzero(widths == bits)
                words = pack4x(packed[sel], int(bits)).view(np.uint8)
                dest = (base[sel] + (skip if np.isscalar(skip) else skip[sel]))[:, None]
                out[dest + np.arange(16 * int(bits))] = words
    if len(tail_ids):
        base = offsets[tail_ids]
        out[base[:, None] + np.arange(4)] = best[tail_ids].view(np.uint8).reshape(-1, 4)
        shift = np.repeat(base + 4 - (np.cumsum(tail_bytes) - tail_bytes), tail_bytes)
        out[np.arange(len(encoded)) + shift] = encoded
    blobs = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n_blocks, [None, pa.py_buffer(offsets), pa.py_buffer(out)]
    )
    column = pa.ListArray.from_arrays(pa.array(first_block, pa.int32()), blobs)
    top = np.maximum.reduceat(best, first_block[:-1]) if tokens else np.zeros(0, np.float32)
    return column, top.astype(np.float32)


def encode_positions(
    bounds: np.ndarray, freqs: np.ndarray, positions: np.ndarray, docs_per_block: int = BLOCK
) -> tuple[pa.Array, pa.ListArray]:
    """Format 2's positions (``packed_delta_v1`` in a ``shared_stream_v2``): per token a
    `_compressed_position` blob and the `_position_block_offset` of each posting block's
    segment in it. A segment holds its block's documents' positions as deltas (each
    document's first absolute), in groups of 128 BitPacker4x values behind a width byte,
    the rest as LEB128 (a posting block: `docs_per_block` documents). `positions` are every
    posting's positions in posting order (`freqs` of them each), ascending within a
    posting."""
    tokens = len(bounds) - 1
    f = freqs.astype(np.int64)
    at = np.cumsum(f) - f  # each posting's first position
    deltas = np.diff(positions.astype(np.int64), prepend=0)
    deltas[at[f > 0]] = positions[at[f > 0]]
    # posting blocks: their postings, then their positions' range
    df = np.diff(bounds).astype(np.int64)
    per_token = (df + docs_per_block - 1) // docs_per_block
    token_of = np.repeat(np.arange(tokens), per_token)
    nth = np.arange(len(token_of)) - np.repeat(np.cumsum(per_token) - per_token, per_token)
    first = bounds[:-1][token_of] + nth * docs_per_block
    last = np.minimum(first + docs_per_block, bounds[1:][token_of])
    ends = np.concatenate([at, [len(positions)]])
    lo, hi = ends[first], ends[last]
    count = hi - lo
    groups = count // BLOCK
    # full groups of 128 deltas, packed by width
    owner = np.repeat(np.arange(len(lo)), groups)
    kth = np.arange(len(owner)) - np.repeat(np.cumsum(groups) - groups, groups)
    rows = (lo[owner] + kth * BLOCK)[:, None] + np.arange(BLOCK)
    packed = deltas[rows].astype(np.uint32)
    widths = _widths(packed)
    # the rest as LEB128
    rest = count - groups * BLOCK
    rest_at = np.repeat(lo + groups * BLOCK, rest) + (
        np.arange(int(rest.sum())) - np.repeat(np.cumsum(rest) - rest, rest)
    )
    encoded, sizes = varints(deltas[rest_at].astype(np.uint64))
    rest_bytes = np.zeros(len(lo), np.int64)
    np.add.at(rest_bytes, np.repeat(np.arange(len(lo)), rest), sizes)
    group_bytes = np.zeros(len(lo), np.int64)
    np.add.at(group_bytes, owner, 1 + 16 * widths)
    segment = group_bytes + rest_bytes
    seg_start = np.cumsum(segment) - segment
    out = np.zeros(int(segment.sum()), np.uint8)
    group_start = (
        seg_start[owner]
        + (np.cumsum(1 + 16 * widths) - (1 + 16 * widths))
        - np.repeat((np.cumsum(group_bytes) - group_bytes), groups)
    )
    out[group_start] = widths
    for bits in np.unique(widths):
        if not bits:
            continue
        sel = np.flatnonzero(widths == bits)
        words = pack4x(packed[sel], int(bits)).view(np.uint8)
        out[(group_start[sel] + 1)[:, None] + np.arange(16 * int(bits))] = words
    shift = np.repeat(seg_start + group_bytes - (np.cumsum(rest_bytes) - rest_bytes), rest_bytes)
    out[np.arange(len(encoded)) + shift] = encoded
    # per token: its segments' bytes as one blob, and where each segment starts in it
    block_start = np.cumsum(per_token) - per_token
    token_bytes = np.zeros(tokens, np.int64)
    np.add.at(token_bytes, token_of, segment)
    offsets = np.concatenate([[0], np.cumsum(token_bytes)]).astype(np.int64)
    blobs = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), tokens, [None, pa.py_buffer(offsets), pa.py_buffer(out)]
    )
    inside = (seg_start - offsets[:-1][token_of]).astype(np.uint32)
    list_offsets = np.concatenate([block_start, [len(token_of)]]).astype(np.int32)
    return blobs, pa.ListArray.from_arrays(pa.array(list_offsets), pa.array(inside, pa.uint32()))
