"""Posting lists of 256-document blocks: pylance 14's `format_version=3, block_size=256`.

A token's postings are blocks of 256 documents, ascending, the last one partial:

- a full block has no best-score prefix: its first document id (u32), the document ids
  as deltas (the first 0) in a BitPacker8x block (a width byte, then 256 values of that
  many bits: eight interleaved lanes of u32 words, lane j holding values j, j + 8, ...,
  low bits first), then the frequencies patched: a body width byte, an exception count
  byte (up to 31), a BitPacker8x block of each frequency's low bits, and per exception
  its index (u8) and its high bits (LEB128), which go above the body's bits;
- the last, partial block is LEB128 numbers only: the document ids (the first absolute,
  then deltas), then the frequencies.

Searches score documents of such a partition with their lengths quantized to a byte
(`quantized_lengths`): lengths under 16 exactly, longer ones keeping their four highest
bits (the bucket's floor), as pylance does. Blocks store no best score, so block-max
pruning does not apply to them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from quiver.format.errors import CorruptFileError
from quiver.format.index.fts.postings import chosen_blocks, decode_blocks, read_varints, unpack4x
from quiver.format.index.wire import varint

WIDE = 256  # documents per full block


def unpack8x(words: np.ndarray, bits: int) -> np.ndarray:
    """BitPacker8x blocks of `bits`-bit values: `words` (blocks, 8 * bits) uint32 ->
    (blocks, 256) uint32. Each half of the lanes is a BitPacker4x block of the values at
    positions 8m + j (j < 4) and 8m + 4 + j."""
    n = words.shape[0]
    if bits == 0:
        return np.zeros((n, WIDE), np.uint32)
    lanes = words.reshape(n, bits, 8)
    out = np.empty((n, 32, 8), np.uint32)
    for half in (0, 1):
        part = np.ascontiguousarray(lanes[:, :, 4 * half : 4 * half + 4]).reshape(n, 4 * bits)
        out[:, :, 4 * half : 4 * half + 4] = unpack4x(part, bits).reshape(n, 32, 4)
    return out.reshape(n, WIDE)


def quantized_lengths(lengths: np.ndarray) -> np.ndarray:
    """Document lengths as pylance scores them in 256-document partitions: under 16 as they
    are, longer ones cut to their four highest bits (float32)."""
    n = np.asarray(lengths).astype(np.uint64)
    bits = np.zeros(len(n), np.int64)
    nonzero = n > 0
    bits[nonzero] = np.floor(np.log2(n[nonzero].astype(np.float64))).astype(np.int64) + 1
    shift = np.maximum(bits - 4, 0).astype(np.uint64)
    return ((n >> shift) << shift).astype(np.float32)


def decode(
    data: np.ndarray,
    offsets: np.ndarray,
    blocks: np.ndarray | None,
    length: int,
    codec: str,
    block: int,
    where: str,
) -> tuple[np.ndarray, np.ndarray]:
    """(document ids, frequencies) of a token's posting blocks of either size (`block`
    documents a full one): `decode_wide` or `postings.decode_blocks`."""
    if block == WIDE:
        return decode_wide(data, offsets, blocks, length, where)
    return decode_blocks(data, offsets, blocks, length, codec, where)


def decode_wide(
    data: np.ndarray, offsets: np.ndarray, blocks: np.ndarray | None, length: int, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """(document ids, frequencies) of the ascending blocks `blocks` (None: all) of a token's
    256-document posting blocks (`offsets` into `data`, one more than blocks)."""
    full, rest = divmod(length, WIDE)
    chosen, tail = chosen_blocks(blocks, length, WIDE)
    ids = [np.empty(0, np.uint32)]
    freqs = [np.empty(0, np.uint32)]
    if len(chosen):
        a, b = _full_blocks(data, offsets, np.asarray(chosen, np.int64), where)
        ids.append(a)
        freqs.append(b)
    if tail:
        segment = data[int(offsets[full]) : int(offsets[full + 1])]
        deltas, used = read_varints(segment, rest, where)
        counts, more = read_varints(segment[used:], rest, where)
        if used + more != len(segment):
            raise CorruptFileError(where, "posting tail block longer than its numbers")
        last = np.cumsum(deltas)
        if len(last) and int(last[-1]) >= 1 << 32:
            raise CorruptFileError(where, "posting tail block ids beyond 32 bits")
        ids.append(last.astype(np.uint32))
        freqs.append(counts.astype(np.uint32))
    return np.concatenate(ids), np.concatenate(freqs)


def _full_blocks(
    data: np.ndarray, offsets: np.ndarray, chosen: np.ndarray, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """The documents and frequencies of full 256-document blocks: headers walked block by
    block, the bit-packed values unpacked by width, many blocks at a time."""
    n = len(chosen)
    firsts = np.empty(n, np.uint32)
    id_width = np.empty(n, np.int64)
    id_at = np.empty(n, np.int64)
    body_width = np.empty(n, np.int64)
    body_at = np.empty(n, np.int64)
    patches: list[tuple[int, int, int, int]] = []  # (block, index, high bits, body width)
    raw = data
    for k, b in enumerate(chosen.tolist()):
        start, end = int(offsets[b]), int(offsets[b + 1])
        if end - start < 7:
            raise CorruptFileError(where, f"posting block {b} shorter than its header")
        firsts[k] = int.from_bytes(raw[start : start + 4].tobytes(), "little")
        wd = int(raw[start + 4])
        at = start + 5 + 32 * wd
        if wd > 32 or at + 2 > end:
            raise CorruptFileError(where, f"posting block {b}: document ids run past it")
        wf, exceptions = int(raw[at]), int(raw[at + 1])
        body = at + 2
        at = body + 32 * wf
        if wf > 32 or exceptions > WIDE or at > end:
            raise CorruptFileError(where, f"posting block {b}: frequencies run past it")
        for _ in range(exceptions):
            if at >= end:
                raise CorruptFileError(where, f"posting block {b}: an exception runs past it")
            index = int(raw[at])
            high, used = read_varints(raw[at + 1 : end], 1, where)
            patches.append((k, index, int(high[0]), wf))
            at += 1 + used
        if at != end:
            raise CorruptFileError(where, f"posting block {b} has bytes left over")
        id_width[k], id_at[k] = wd, start + 5
        body_width[k], body_at[k] = wf, body
    deltas = _unpack_at(raw, id_at, id_width)
    freqs = _unpack_at(raw, body_at, body_width)
    for k, index, high, wf in patches:
        value = int(freqs[k, index]) | (high << wf)
        if value >= 1 << 32:
            raise CorruptFileError(where, "a posting frequency beyond 32 bits")
        freqs[k, index] = value
    ids = firsts[:, None].astype(np.uint64) + np.cumsum(deltas, axis=1, dtype=np.uint64)
    if len(ids) and int(ids.max()) >= 1 << 32:
        raise CorruptFileError(where, "posting block ids beyond 32 bits")
    return ids.astype(np.uint32).reshape(-1), freqs.reshape(-1)


def _unpack_at(data: np.ndarray, starts: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """(blocks, 256) values of BitPacker8x blocks at byte `starts` of `data`, of `widths`."""
    out = np.empty((len(starts), WIDE), np.uint32)
    for width in np.unique(widths).tolist():
        mine = np.flatnonzero(widths == width)
        spans = starts[mine][:, None] + np.arange(32 * width)
        words = np.ascontiguousarray(data[spans]).view("<u4").reshape(len(mine), 8 * width)
        out[mine] = unpack8x(words, width)
    return out


def pack8x(values: np.ndarray, bits: int) -> np.ndarray:
    """BitPacker8x blocks: (blocks, 256) uint32 values of at most `bits` bits -> (blocks,
    8 * bits) uint32 words; each half of the lanes packed as a BitPacker4x block."""
    from quiver.format.index.fts.encode import pack4x

    n = values.shape[0]
    if bits == 0:
        return np.zeros((n, 0), np.uint32)
    lanes = values.reshape(n, 32, 8)
    words = np.empty((n, bits, 8), np.uint32)
    for half in (0, 1):
        part = np.ascontiguousarray(lanes[:, :, 4 * half : 4 * half + 4]).reshape(n, 128)
        words[:, :, 4 * half : 4 * half + 4] = pack4x(part, bits).reshape(n, bits, 4)
    return words.reshape(n, 8 * bits)


def _bit_lengths(values: np.ndarray) -> np.ndarray:
    out = np.zeros(values.shape, np.int64)
    v = values.astype(np.uint64)
    while True:
        more = (v >> out.astype(np.uint64)) > 0
        if not more.any():
            return out
        out += more


def _leb128_sizes(values: np.ndarray) -> np.ndarray:
    sizes = np.ones(values.shape, np.int64)
    for k in range(1, 5):
        sizes += values >= np.uint64(1 << (7 * k))
    return sizes


def pfor_widths(freqs: np.ndarray) -> np.ndarray:
    """Per block of 256 frequencies, the body width pylance's writer picks: the cheapest of
    the full width and every narrower one leaving at most 31 values (exceptions) above it,
    an exception costing its index byte and its high bits' LEB128 bytes; ties keep the
    wider."""
    lengths = _bit_lengths(freqs)
    top = lengths.max(axis=1)
    best_width = top.copy()
    best_cost = 32 * top
    v = freqs.astype(np.uint64)
    for w in range(int(top.max(initial=0)) - 1, -1, -1):
        above = lengths > w
        count = above.sum(axis=1)
        extra = np.where(above, 1 + _leb128_sizes(v >> np.uint64(w)), 0).sum(axis=1)
        cost = 32 * w + extra
        # counts only grow as the width shrinks: stopping at the first width leaving more
        # than 31 exceptions leaves exactly the widths that leave at most 31
        better = (w < top) & (count <= 31) & (cost < best_cost)
        best_width[better], best_cost[better] = w, cost[better]
    return best_width


def encode_wide(bounds: np.ndarray, docs: np.ndarray, freqs: np.ndarray) -> pa.ListArray:
    """The `_posting` column of 256-document blocks (list<large_binary>, a token's blocks
    per row) for postings grouped by token: token t owns positions ``bounds[t]:bounds[t + 1]``
    of `docs` (ascending) and `freqs`; pylance's bytes."""
    tokens = len(bounds) - 1
    df = np.diff(bounds).astype(np.int64)
    full, tail = df // WIDE, df % WIDE
    per_token = full + (tail > 0)
    first_block = np.concatenate([[0], np.cumsum(per_token)]).astype(np.int64)
    blobs: list[bytes] = [b""] * int(first_block[-1])
    owner = np.repeat(np.arange(tokens), full)
    nth = np.arange(len(owner)) - np.repeat(np.cumsum(full) - full, full)
    if len(owner):
        rows = (bounds[:-1][owner] + nth * WIDE)[:, None] + np.arange(WIDE)
        d = docs[rows].astype(np.uint32)
        f = freqs[rows].astype(np.uint32)
        deltas = np.diff(d, axis=1, prepend=d[:, :1])
        id_width = _bit_lengths(deltas.max(axis=1))
        body_width = pfor_widths(f)
        id_words = _packed(deltas, id_width)
        body = f & ((np.uint64(1) << body_width.astype(np.uint64)[:, None]) - np.uint64(1)).astype(
            np.uint32
        )
        body_words = _packed(body, body_width)
        for k in range(len(owner)):
            wf = int(body_width[k])
            above = np.flatnonzero(f[k] >> np.uint32(wf)) if wf < 32 else np.empty(0, np.int64)
            patch = b"".join(bytes([int(i)]) + varint(int(f[k, i]) >> wf) for i in above.tolist())
            blobs[int(first_block[owner[k]] + nth[k])] = (
                int(d[k, 0]).to_bytes(4, "little")
                + bytes([int(id_width[k])])
                + id_words[k]
                + bytes([wf, len(above)])
                + body_words[k]
                + patch
            )
    for t in np.flatnonzero(tail).tolist():
        start = int(bounds[t] + full[t] * WIDE)
        ids = docs[start : int(bounds[t + 1])].astype(np.int64)
        gaps = np.diff(ids, prepend=0)
        numbers = np.concatenate([gaps, freqs[start : int(bounds[t + 1])].astype(np.int64)])
        blobs[int(first_block[t] + full[t])] = b"".join(varint(int(x)) for x in numbers)
    values = pa.array(blobs, pa.large_binary())
    return pa.ListArray.from_arrays(pa.array(first_block, pa.int32()), values)


def _packed(values: np.ndarray, widths: np.ndarray) -> list[bytes]:
    """Each block's BitPacker8x bytes at its own width."""
    out: list[bytes] = [b""] * len(values)
    for width in np.unique(widths).tolist():
        if not width:
            continue
        mine = np.flatnonzero(widths == width)
        words = pack8x(values[mine], width)
        for k, row in zip(mine.tolist(), words, strict=True):
            out[k] = row.astype("<u4").tobytes()
    return out
