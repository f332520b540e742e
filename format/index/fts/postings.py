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

Full blocks are decoded together, vectorised by bit width.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from quiver.format.errors import CorruptFileError

BLOCK = 128
VARINT = "varint_delta_v1"
FIXED32 = "fixed32_v1"
_LANE_VALUES = np.arange(32)


def unpack4x(words: np.ndarray, bits: int) -> np.ndarray:
    """BitPacker4x blocks of `bits`-bit values: `words` (blocks, 4 * bits) uint32 ->
    (blocks, 128) uint32."""
    blocks = words.shape[0]
    if bits == 0:
        return np.zeros((blocks, BLOCK), np.uint32)
    lanes = words.reshape(blocks, bits, 4).astype(np.uint64)
    lanes = np.concatenate([lanes, np.zeros((blocks, 1, 4), np.uint64)], axis=1)
    start = _LANE_VALUES * bits
    word, shift = start // 32, (start % 32).astype(np.uint64)
    pair = lanes[:, word, :] | (lanes[:, word + 1, :] << np.uint64(32))
    values = (pair >> shift[None, :, None]) & np.uint64((1 << bits) - 1)
    return values.reshape(blocks, BLOCK).astype(np.uint32)


def _varints(blob: bytes, at: int, count: int, where: str) -> tuple[list[int], int]:
    out = []
    for _ in range(count):
        value = shift = 0
        while True:
            if at >= len(blob):
                raise CorruptFileError(where, "posting block ends inside a number")
            byte = blob[at]
            at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
        out.append(value)
    return out, at


def decode_postings(
    blobs: Sequence[bytes], length: int, codec: str, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """(document ids uint32, frequencies uint32) of one token's posting blocks."""
    full, rest = divmod(length, BLOCK)
    if len(blobs) != full + (1 if rest else 0):
        raise CorruptFileError(where, f"{len(blobs)} posting blocks for {length} documents")
    ids = np.empty(length, np.uint32)
    freqs = np.empty(length, np.uint32)
    if full:
        _decode_full(blobs[:full], ids, freqs, where)
    if rest:
        blob = blobs[full]
        first = full * BLOCK
        if codec == FIXED32:
            if len(blob) != 4 + 8 * rest:
                raise CorruptFileError(where, "posting tail block of the wrong size")
            ids[first:] = np.frombuffer(blob, "<u4", rest, 4)
            freqs[first:] = np.frombuffer(blob, "<u4", rest, 4 + 4 * rest)
        else:
            deltas, at = _varints(blob, 4, rest, where)
            counts, at = _varints(blob, at, rest, where)
            if at != len(blob):
                raise CorruptFileError(where, "posting tail block longer than its numbers")
            ids[first:] = np.cumsum(np.array(deltas, np.uint64)).astype(np.uint32)
            freqs[first:] = counts
    return ids, freqs


def _decode_full(blobs: Sequence[bytes], ids: np.ndarray, freqs: np.ndarray, where: str) -> None:
    """Full blocks: headers read one by one, the packed values decoded per bit width."""
    n = len(blobs)
    firsts = np.empty(n, np.uint64)
    id_groups: dict[int, list[tuple[int, bytes]]] = {}
    freq_groups: dict[int, list[tuple[int, bytes]]] = {}
    for i, blob in enumerate(blobs):
        if len(blob) < 10:
            raise CorruptFileError(where, "posting block shorter than its header")
        firsts[i] = int.from_bytes(blob[4:8], "little")
        bits = blob[8]
        at = 9 + 16 * bits
        if bits > 32 or at >= len(blob):
            raise CorruptFileError(where, "posting block shorter than its document ids")
        fbits = blob[at]
        if fbits > 32 or at + 1 + 16 * fbits != len(blob):
            raise CorruptFileError(where, "posting block of the wrong size")
        id_groups.setdefault(bits, []).append((i, blob[9:at]))
        freq_groups.setdefault(fbits, []).append((i, blob[at + 1 :]))
    deltas = np.empty((n, BLOCK), np.uint32)
    counts = np.empty((n, BLOCK), np.uint32)
    for target, groups in ((deltas, id_groups), (counts, freq_groups)):
        for bits, members in groups.items():
            rows = np.array([i for i, _ in members])
            if not bits:
                target[rows] = 0
                continue
            words = np.frombuffer(b"".join(b for _, b in members), "<u4").reshape(-1, 4 * bits)
            target[rows] = unpack4x(words, bits)
    values = firsts[:, None] + np.cumsum(deltas, axis=1, dtype=np.uint64)
    ids[: n * BLOCK] = values.reshape(-1).astype(np.uint32)
    freqs[: n * BLOCK] = counts.reshape(-1)
