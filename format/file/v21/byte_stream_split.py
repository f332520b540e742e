"""Byte-stream-split of 2.1+ mini-block chunks (`ByteStreamSplit{Flat(32|64)}`).

A chunk of n W-byte values is stored as W streams of n bytes: byte 0 of every value, then
byte 1 of every value, and so on. It only pays off under general compression.
"""

from __future__ import annotations

import numpy as np

from quiver.format import _kernels
from quiver.format.file.v21.gather import as_i64


def split(values: np.ndarray, width: int) -> bytes:
    """One chunk: W-byte values (any numpy array of that item size) -> byte streams."""
    raw = np.ascontiguousarray(values).view(np.uint8).reshape(-1, width)
    return raw.T.tobytes()


def split_chunks(data: np.ndarray, counts: np.ndarray, width: int) -> np.ndarray:
    """`split` for many chunks at once: `data` holds the values' bytes in chunk order (chunk i
    has `counts[i]` values); returns every chunk's byte streams back to back (uint8)."""
    j, base, n = _positions(counts, width)
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8)[base + (j % n) * width + j // n]


def _positions(counts: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per stream byte: its index inside its chunk, its chunk's first byte, the chunk's count."""
    counts = np.asarray(counts, dtype=np.int64)
    sizes = counts * width
    chunk_of = np.repeat(np.arange(len(counts)), sizes)
    base = (np.cumsum(sizes) - sizes)[chunk_of]
    return np.arange(int(sizes.sum()), dtype=np.int64) - base, base, counts[chunk_of]


def join_chunks(data: np.ndarray, starts: np.ndarray, counts: np.ndarray, width: int) -> np.ndarray:
    """Undo `split` for many chunks at once: chunk i's `counts[i] * width` stream bytes start at
    byte `starts[i]` of `data` (uint8, bounds already checked); returns the values' bytes in
    chunk order."""
    starts, counts = as_i64(starts), as_i64(counts)
    out = np.empty(int(counts.sum()) * width, dtype=np.uint8)
    _kernels.bss_join(np.ascontiguousarray(data), starts, counts, width, out)
    return out
