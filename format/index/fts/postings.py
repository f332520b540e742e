"""Posting lists of INVERTED indices: which documents hold a token, and how often.

A token's postings (one row of ``part_{P}_invert.lance``) are blocks of 128 documents,
ascending, the last one partial:

- a full block: the block's best score (f32), its first document id (u32), then the
  document ids as deltas and the frequencies, each a BitPacker4x block (a width byte, then
  128 values of that many bits: four interleaved lanes of u32 words, lane j holding values
  j, j + 4, ... low bits first);
- the last, partial block: its best score, then LEB128 document ids (the first absolute,
  then deltas) and LEB128 frequencies (``varint_delta_v1``), or raw u32 ids and frequencies
  (``fixed32_v1``, index format 1).

Full blocks are decoded by one kernel (`_kernels.postings_full`), all of a token's or the
few a search needs (`decode_blocks`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from quiver.format import _kernels
from quiver.format.errors import CorruptFileError

BLOCK = 128
VARINT = "varint_delta_v1"
FIXED32 = "fixed32_v1"


def unpack4x(words: np.ndarray, bits: int) -> np.ndarray:
    """BitPacker4x blocks of `bits`-bit values: `words` (blocks, 4 * bits) uint32 ->
    (blocks, 128) uint32."""
    if not bits:  # all zeros (an empty buffer's address need not be aligned)
        return np.zeros((words.shape[0], BLOCK), np.uint32)
    words = np.require(words, dtype="<u4", requirements=["C_CONTIGUOUS", "ALIGNED"])
    out = np.empty((words.shape[0], BLOCK), np.uint32)
    _kernels.unpack4x(words, bits, out)
    return out


def read_varints(data: np.ndarray, count: int, where: str) -> tuple[np.ndarray, int]:
    """The first `count` LEB128 numbers of `data` (uint8; each at most 35 bits) as uint64,
    and the bytes they take (`_kernels.leb128`: a tail block holds up to 254 of them)."""
    out = np.empty(count, np.uint64)
    used = _kernels.leb128(np.ascontiguousarray(data, np.uint8), count, out)
    if used == -1:
        raise CorruptFileError(where, "posting block ends inside a number")
    if used == -2:
        raise CorruptFileError(where, "posting block holds a number of more than 35 bits")
    return out, used


def decode_postings(
    blobs: Sequence[bytes] | pa.BinaryArray | pa.LargeBinaryArray,
    length: int,
    codec: str,
    where: str,
) -> tuple[np.ndarray, np.ndarray]:
    """(document ids uint32, frequencies uint32) of one token's posting blocks (a list of
    bytes, or the Arrow binary array they are read as)."""
    data, offsets = posting_blocks(blobs, length, where)
    return decode_blocks(data, offsets, None, length, codec, where)


def posting_blocks(
    blobs: Sequence[bytes] | pa.BinaryArray | pa.LargeBinaryArray,
    length: int,
    where: str,
    block: int = BLOCK,
) -> tuple[np.ndarray, np.ndarray]:
    """A token's blocks back to back (uint8, a view of what was read) and their offsets
    (int64, one more, from 0), checked to be as many as its `length` documents fill."""
    data, offsets = _blocks(blobs)
    if int(offsets[0]):
        data, offsets = data[offsets[0] : offsets[-1]], offsets - offsets[0]
    return checked_blocks(data, offsets, length, where, block)


def checked_blocks(
    data: np.ndarray, offsets: np.ndarray, length: int, where: str, block: int = BLOCK
) -> tuple[np.ndarray, np.ndarray]:
    """A token's blocks back to back and their offsets from 0, checked to be as many as its
    `length` documents fill (`block` documents a full block)."""
    full, rest = divmod(length, block)
    if len(offsets) - 1 != full + (1 if rest else 0):
        raise CorruptFileError(where, f"{len(offsets) - 1} posting blocks for {length} documents")
    return data, offsets


def block_scores(data: np.ndarray, offsets: np.ndarray, where: str) -> np.ndarray:
    """Each block's stored best score (float32, its first four bytes)."""
    starts = offsets[:-1]
    if len(starts) and int(np.diff(offsets).min()) < 4:
        raise CorruptFileError(where, "posting block shorter than its best score")
    heads = data[starts[:, None] + np.arange(4)]
    return heads.view("<f4").reshape(len(starts)).astype(np.float32)


def chosen_blocks(blocks: np.ndarray | None, length: int, block: int) -> tuple[np.ndarray, bool]:
    """Of the ascending block numbers `blocks` (None: all) of a token of `length` documents
    in blocks of `block`: the full blocks, and whether the partial last one is among them."""
    full, rest = divmod(length, block)
    if blocks is None:
        return np.arange(full), bool(rest)
    tail = bool(rest) and len(blocks) > 0 and int(blocks[-1]) == full
    return (blocks[:-1] if tail else blocks), tail


def decode_blocks(
    data: np.ndarray,
    offsets: np.ndarray,
    blocks: np.ndarray | None,
    length: int,
    codec: str,
    where: str,
) -> tuple[np.ndarray, np.ndarray]:
    """(document ids, frequencies) of some of a token's blocks (`posting_blocks`): the
    ascending block numbers `blocks` (None: all of them), in their order."""
    full, rest = divmod(length, BLOCK)
    chosen, tail = chosen_blocks(blocks, length, BLOCK)
    n = len(chosen) * BLOCK
    count = n + (rest if tail else 0)
    ids = np.empty(count, np.uint32)
    freqs = np.empty(count, np.uint32)
    if len(chosen):
        status, block = _kernels.postings_full(
            data,
            np.ascontiguousarray(offsets[chosen], np.int64),
            np.ascontiguousarray(offsets[chosen + 1], np.int64),
            ids[:n],
            freqs[:n],
        )
        if status != _kernels.OK:
            raise CorruptFileError(where, f"{_PROBLEMS[status]} (block {int(chosen[block])})")
    if tail:
        blob = data[offsets[full] : offsets[full + 1]].tobytes()
        ids[n:], freqs[n:] = _tail(blob, rest, codec, where)
    return ids, freqs


def _tail(blob: bytes, rest: int, codec: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """The last, partial block's `rest` document ids and frequencies."""
    if codec == FIXED32:
        if len(blob) != 4 + 8 * rest:
            raise CorruptFileError(where, "posting tail block of the wrong size")
        return np.frombuffer(blob, "<u4", rest, 4), np.frombuffer(blob, "<u4", rest, 4 + 4 * rest)
    data = np.frombuffer(blob, np.uint8)
    deltas, used = read_varints(data[4:], rest, where)
    counts, more = read_varints(data[4 + used :], rest, where)
    if 4 + used + more != len(blob):
        raise CorruptFileError(where, "posting tail block longer than its numbers")
    return np.cumsum(deltas).astype(np.uint32), counts.astype(np.uint32)


def _blocks(
    blobs: Sequence[bytes] | pa.BinaryArray | pa.LargeBinaryArray,
) -> tuple[np.ndarray, np.ndarray]:
    """The blocks' bytes back to back (uint8) and their offsets (int64, one more)."""
    if isinstance(blobs, pa.BinaryArray | pa.LargeBinaryArray):
        if blobs.null_count:
            blobs = blobs.fill_null(b"")
        kind = "<i8" if isinstance(blobs, pa.LargeBinaryArray) else "<i4"
        _, offset_buffer, data_buffer = blobs.buffers()
        n = len(blobs)
        offsets = np.frombuffer(offset_buffer, kind, n + 1, blobs.offset * np.dtype(kind).itemsize)
        data = (
            np.frombuffer(data_buffer, np.uint8)
            if data_buffer is not None
            else np.empty(0, np.uint8)
        )
        return data, offsets.astype(np.int64)
    sizes = np.fromiter((len(b) for b in blobs), np.int64, len(blobs))
    offsets = np.zeros(len(blobs) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return np.frombuffer(b"".join(blobs), np.uint8), offsets


_PROBLEMS = {
    _kernels.PB_HEADER: "posting block shorter than its header",
    _kernels.PB_IDS: "posting block shorter than its document ids",
    _kernels.PB_SIZE: "posting block of the wrong size",
}


def _doc_positions(deltas: np.ndarray, freqs: np.ndarray) -> np.ndarray:
    """Positions from per-document deltas (each document's first absolute, then gaps)."""
    c = np.cumsum(deltas.astype(np.int64))
    starts = np.cumsum(freqs.astype(np.int64)) - freqs
    before = np.where(starts > 0, c[np.maximum(starts - 1, 0)], 0)
    return (c - np.repeat(before, freqs.astype(np.int64))).astype(np.uint32)


def decode_positions(
    stream: bytes,
    block_offsets: Sequence[int],
    freqs: np.ndarray,
    where: str,
    block: int = BLOCK,
) -> np.ndarray:
    """Every position of one token's documents, document after document (`freqs` says how
    many each has), from format 2's shared stream (``packed_delta_v1``): per posting block
    (of `block` documents) a segment at `block_offsets[i]` of its documents' position
    deltas, in groups of 128 BitPacker4x values (a width byte first), the last group as
    LEB128."""
    total = int(freqs.sum())
    if len(block_offsets) != (len(freqs) + block - 1) // block:
        raise CorruptFileError(where, "position segments do not match the posting blocks")
    out = []
    for b, start in enumerate(block_offsets):
        end = block_offsets[b + 1] if b + 1 < len(block_offsets) else len(stream)
        if not 0 <= start <= end <= len(stream):
            raise CorruptFileError(where, "a position segment lies outside its stream")
        count = int(freqs[b * block : (b + 1) * block].sum())
        at, groups = start, []
        for _ in range(count // BLOCK):
            bits = stream[at] if at < end else 255
            if bits > 32 or at + 1 + 16 * bits > end:
                raise CorruptFileError(where, "a packed position group runs past its segment")
            words = np.frombuffer(stream, "<u4", 4 * bits, at + 1).reshape(1, -1)
            groups.append(unpack4x(words, bits)[0])
            at += 1 + 16 * bits
        segment = np.frombuffer(stream, np.uint8, end - at, at)
        rest, used = read_varints(segment, count % BLOCK, where)
        if at + used != end:
            raise CorruptFileError(where, "a position segment has bytes left over")
        out.extend(groups)
        out.append(rest.astype(np.uint32))
    deltas = np.concatenate(out) if out else np.zeros(0, np.uint32)
    if len(deltas) != total:
        raise CorruptFileError(where, f"{len(deltas)} positions for {total} occurrences")
    return _doc_positions(deltas, freqs)


def decode_positions_v1(docs: Sequence[Sequence[bytes]], where: str) -> np.ndarray:
    """Every position of one token's documents from format 1's per-document blobs: a u32
    count, then per 128 positions a u32 first value, a width byte and BitPacker4x deltas
    from it, then the rest as raw u32."""
    out = []
    for blobs in docs:
        if not blobs or len(blobs[0]) < 4:
            raise CorruptFileError(where, "a document's positions lack their count")
        n = int.from_bytes(blobs[0][:4], "little")
        if len(blobs) != 1 + (n + BLOCK - 1) // BLOCK:
            raise CorruptFileError(where, f"{len(blobs) - 1} position blobs for {n} positions")
        for blob in blobs[1 : 1 + n // BLOCK]:
            bits = blob[4] if len(blob) > 4 else 255
            if bits > 32 or len(blob) != 5 + 16 * bits:
                raise CorruptFileError(where, "a packed position block of the wrong size")
            words = np.frombuffer(blob, "<u4", 4 * bits, 5).reshape(1, -1)
            first = int.from_bytes(blob[:4], "little")
            out.append(first + np.cumsum(unpack4x(words, bits)[0], dtype=np.uint64))
        if n % BLOCK:
            tail = blobs[-1]
            if len(tail) != 4 * (n % BLOCK):
                raise CorruptFileError(where, "a position tail of the wrong size")
            out.append(np.frombuffer(tail, "<u4").astype(np.uint64))
    return np.concatenate(out).astype(np.uint32) if out else np.zeros(0, np.uint32)
