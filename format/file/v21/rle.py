"""Run-length encoding of 2.1+ mini-block chunks (`Rle{Flat values, Flat(8) run lengths}`).

Per chunk two buffers: the run values (Flat, LE) and the run lengths (u8, 1..255) that add
up to the chunk's value count. Runs longer than 255 are split into several runs.
"""

from __future__ import annotations

import numpy as np

from format.errors import CorruptFileError

MAX_RUN = 255


def decode(
    values: np.ndarray,
    lengths: np.ndarray,
    runs_per_chunk: np.ndarray,
    counts: np.ndarray,
    where: str,
) -> np.ndarray:
    """Expand all chunks' runs (`values`/`lengths` concatenated in chunk order, chunk i holding
    `runs_per_chunk[i]` runs) and check each chunk yields exactly `counts[i]` values."""
    if len(values) != len(lengths):
        raise CorruptFileError(
            where, f"RLE has {len(values)} run values but {len(lengths)} run lengths"
        )
    chunk_of = np.repeat(np.arange(len(counts)), runs_per_chunk)
    per_chunk = np.bincount(chunk_of, weights=lengths, minlength=len(counts)).astype(np.int64)
    if (per_chunk != counts).any():
        i = int(np.argmax(per_chunk != counts))
        raise CorruptFileError(
            where, f"RLE runs of chunk {i} cover {int(per_chunk[i])} values, not {int(counts[i])}"
        )
    return np.repeat(values, lengths)


def encode(values: np.ndarray, breaks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Runs of `values` as (run values, u8 run lengths <= 255). A run also ends before every
    index in `breaks` (e.g. chunk starts), so each chunk's runs can be cut out on its own."""
    values = np.asarray(values)
    n = len(values)
    if n == 0:
        return values[:0], np.zeros(0, dtype=np.uint8)
    starts = np.flatnonzero(np.concatenate([[True], values[1:] != values[:-1]]))
    if breaks is not None and len(breaks):
        starts = np.union1d(starts, np.asarray(breaks, dtype=np.int64)[(breaks > 0) & (breaks < n)])
    lengths = np.diff(np.append(starts, n))
    pieces = (lengths + MAX_RUN - 1) // MAX_RUN
    run_values = np.repeat(values[starts], pieces)
    out = np.full(int(pieces.sum()), MAX_RUN, dtype=np.int64)
    last = np.cumsum(pieces) - 1
    out[last] = lengths - (pieces - 1) * MAX_RUN
    return run_values, out.astype(np.uint8)


def runs_per_chunk(lengths: np.ndarray, chunk_counts: np.ndarray) -> np.ndarray:
    """How many of the runs (from `encode` with breaks at the chunk starts) fall in each chunk
    of `chunk_counts` values."""
    ends = np.cumsum(np.asarray(lengths, dtype=np.int64))
    bounds = np.cumsum(np.asarray(chunk_counts, dtype=np.int64))
    return np.diff(np.searchsorted(ends, bounds, side="right"), prepend=0)
