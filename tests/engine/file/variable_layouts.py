"""Mini-block Variable chunks and Variable blocks built from strings, as pylance lays them
out: inputs for the 2.1 decoder tests (the writer builds its own in `page_encoders`)."""

from __future__ import annotations

import numpy as np

from quiver.format.file.v21.gather import I64, range_index

_NP_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
VARIABLE_PAD = 0x48


def encode_variable_chunks(
    offsets: np.ndarray, data: np.ndarray, counts: np.ndarray, bits: int = 32
) -> tuple[np.ndarray, np.ndarray]:
    """Mini-block Variable{Flat bits} chunks of the strings `data[offsets[i]:offsets[i+1]]`,
    chunk k holding the next `counts[k]` strings: per chunk `counts[k] + 1` offsets relative
    to the chunk buffer start (u32/u64), the bytes, then 0x48 up to a multiple of 4 (u32) or
    8 (u64). Returns (chunks back to back as uint8, each chunk's byte size incl. that pad) —
    pylance records the padded size in the chunk header."""
    width = bits // 8
    offsets = np.asarray(offsets, dtype=I64)
    data = np.asarray(data, dtype=np.uint8)
    counts = np.asarray(counts, dtype=I64)
    first = np.cumsum(counts) - counts
    idx = range_index(first, counts + 1)
    chunk_of = np.repeat(np.arange(len(counts)), counts + 1)
    head = (counts + 1) * width
    new_off = offsets[idx] - offsets[first][chunk_of] + head[chunk_of]
    nbytes = offsets[first + counts] - offsets[first]
    pad = -(head + nbytes) % width
    off_bytes = new_off.astype(_NP_UINT[bits]).view(np.uint8)
    source = np.concatenate([off_bytes, data, np.full(8, VARIABLE_PAD, np.uint8)])
    k = len(counts)
    seg_start = np.concatenate(
        [(np.cumsum(head) - head), len(off_bytes) + offsets[first], np.full(k, len(source) - 8)]
    )
    seg_len = np.concatenate([head, nbytes, pad])
    order = np.argsort(np.tile(np.arange(k), 3), kind="stable")
    out = source[range_index(seg_start[order], seg_len[order])]
    return out, head + nbytes + pad


def encode_variable_block(offsets: np.ndarray, data: np.ndarray, bits: int = 32) -> bytes:
    """Variable block (dictionary items): `[u32 32][u32 bytes_start]` (u64 fields for 64-bit
    offsets), the `n + 1` offsets rebased to 0, then the bytes."""
    width = bits // 8
    offsets = np.asarray(offsets, dtype=I64)
    dt = _NP_UINT[bits]
    start = 2 * width + len(offsets) * width
    head = np.array([bits, start], dtype=dt).tobytes()
    body = np.asarray(data, dtype=np.uint8)[offsets[0] : offsets[-1]]
    return head + (offsets - offsets[0]).astype(dt).tobytes() + body.tobytes()
