"""Byte-stream-split of 2.1+ mini-block chunks (`ByteStreamSplit{Flat(32|64)}`).

A chunk of n W-byte values is stored as W streams of n bytes: byte 0 of every value, then
byte 1 of every value, and so on. It only pays off under general compression.
"""

from __future__ import annotations

import numpy as np


def split(values: np.ndarray, width: int) -> bytes:
    """One chunk: W-byte values (any numpy array of that item size) -> byte streams."""
    raw = np.ascontiguousarray(values).view(np.uint8).reshape(-1, width)
    return raw.T.tobytes()


def join_chunks(data: np.ndarray, counts: np.ndarray, width: int) -> np.ndarray:
    """Undo `split` for many chunks at once: `data` is the chunks' stream bytes concatenated
    (chunk i has `counts[i] * width` bytes); returns the values' bytes in chunk order."""
    counts = np.asarray(counts, dtype=np.int64)
    sizes = counts * width
    total = int(sizes.sum())
    chunk_of = np.repeat(np.arange(len(counts)), sizes)
    base = (np.cumsum(sizes) - sizes)[chunk_of]
    j = np.arange(total, dtype=np.int64) - base
    n = counts[chunk_of]
    out = np.empty(total, dtype=np.uint8)
    out[base + (j % n) * width + j // n] = data[:total]
    return out
