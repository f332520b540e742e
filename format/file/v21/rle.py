"""Run-length encoding of 2.1+ mini-block chunks (`Rle{Flat values, Flat(8) run lengths}`).

As mini-block values, two buffers per chunk: the run values (Flat, LE) and the run lengths
(u8, 1..255) that add up to the chunk's value count. Runs longer than 255 are split into
several runs. As a block (a chunk's rep/def levels, constant-page levels) one buffer:
`[u64 LE byte size of the run values][run values][run lengths]`.
"""

from __future__ import annotations

import numpy as np

from quiver.format import _kernels
from quiver.format.errors import CorruptFileError
from quiver.format.file.v21.gather import as_i64, range_index

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
    runs, counts = as_i64(runs_per_chunk), as_i64(counts)
    lengths = np.ascontiguousarray(lengths, dtype=np.uint8)
    bad, covered = _kernels.check_runs(lengths, runs, counts)
    if bad == len(counts):
        raise CorruptFileError(where, f"RLE chunks hold {int(runs.sum())} runs, not {len(values)}")
    if bad >= 0:
        raise CorruptFileError(
            where, f"RLE runs of chunk {bad} cover {covered} values, not {int(counts[bad])}"
        )
    values = np.ascontiguousarray(values)
    out = np.empty(int(counts.sum()), dtype=values.dtype)
    _kernels.rle_expand(values, lengths, values.dtype.itemsize, out)
    return out


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


def encode_blocks(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Block-form RLE of consecutive chunks (chunk i = the next `counts[i]` values): per chunk
    `[u64 LE run-values byte size][run values][u8 run lengths]`. Returns (chunks back to back
    as uint8, each chunk's byte size)."""
    values = np.asarray(values)
    counts = np.asarray(counts, dtype=np.int64)
    width = values.dtype.itemsize
    run_values, run_lengths = encode(values, np.cumsum(counts)[:-1])
    runs = runs_per_chunk(run_lengths, counts)
    heads = (runs * width).astype("<u8").view(np.uint8)
    vbytes = run_values.view(np.uint8)
    source = np.concatenate([heads, vbytes, run_lengths])
    first_run = np.cumsum(runs) - runs
    k = len(counts)
    seg_start = np.concatenate(
        [8 * np.arange(k), len(heads) + first_run * width, len(heads) + len(vbytes) + first_run]
    )
    seg_len = np.concatenate([np.full(k, 8), runs * width, runs])
    order = np.argsort(np.tile(np.arange(k), 3), kind="stable")
    return source[range_index(seg_start[order], seg_len[order])], 8 + runs * (width + 1)
