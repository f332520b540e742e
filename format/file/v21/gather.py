"""Vectorised range gathers shared by the 2.1+ codecs.

Mini-block pages hold thousands of chunks; every codec needs "these byte ranges of the page,
concatenated" or "this many elements from each chunk". These helpers do that without a
Python loop per chunk (a compiled copy, or one numpy fancy-index), and bounds-check first.
"""

from __future__ import annotations

import numba
import numpy as np

from format.errors import CorruptFileError

I64 = np.int64


def check_ranges(size: int, starts: np.ndarray, lengths: np.ndarray, where: str, what: str) -> None:
    """Raise CorruptFileError unless every [start, start + length) lies inside [0, size)."""
    if len(starts) == 0:
        return
    if (lengths < 0).any() or (starts < 0).any() or (starts + lengths > size).any():
        bad = int(np.argmax((lengths < 0) | (starts < 0) | (starts + lengths > size)))
        raise CorruptFileError(
            where,
            f"{what} #{bad} spans [{int(starts[bad])}, {int(starts[bad] + lengths[bad])}) "
            f"outside a {size}-byte buffer",
        )


def range_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + n) for every (s, n): the index of a multi-range gather."""
    starts = np.asarray(starts, dtype=I64)
    lengths = np.asarray(lengths, dtype=I64)
    keep = lengths > 0
    if not keep.all():
        starts, lengths = starts[keep], lengths[keep]
    total = int(lengths.sum()) if len(lengths) else 0
    if total == 0:
        return np.zeros(0, dtype=I64)
    small = total < 2**31 and int((starts + lengths).max()) < 2**31 and int(starts.min()) >= 0
    dtype = np.int32 if small else I64
    # Steps of +1 inside a range, a jump to the next range's start at its first element.
    idx = np.ones(total, dtype=dtype)
    idx[0] = starts[0]
    jumps = starts[1:] - (starts[:-1] + lengths[:-1] - 1)
    idx[(np.cumsum(lengths) - lengths)[1:]] = jumps
    return np.cumsum(idx, out=idx)


def gather(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, where: str, what: str
) -> np.ndarray:
    """The elements data[s : s + n] of every range, concatenated (bounds-checked)."""
    starts = np.asarray(starts, dtype=I64)
    lengths = np.asarray(lengths, dtype=I64)
    check_ranges(len(data), starts, lengths, where, what)
    if len(starts) == 1:
        s, n = int(starts[0]), int(lengths[0])
        return data[s : s + n]
    out = np.empty(int(lengths.sum()), dtype=data.dtype)
    _copy_ranges(np.ascontiguousarray(data), starts, lengths, out)
    return out


@numba.njit(cache=True, nogil=True)
def _copy_ranges(data, starts, lengths, out):  # noqa: ANN001, ANN202
    """memcpy of each (validated) range into `out`, back to back: an index array of every
    element (numpy's way) costs 8 bytes of index per byte moved."""
    o = 0
    for i in range(len(starts)):
        n = lengths[i]
        out[o : o + n] = data[starts[i] : starts[i] + n]
        o += n


def read_uint(data: np.ndarray, pos: np.ndarray, nbytes: int, where: str, what: str) -> np.ndarray:
    """Little-endian unsigned integers of `nbytes` bytes at byte positions `pos` (any alignment)."""
    pos = np.asarray(pos, dtype=I64)
    check_ranges(len(data), pos, np.full(len(pos), nbytes, dtype=I64), where, what)
    out = np.zeros(len(pos), dtype=np.uint64)
    for b in range(nbytes):  # at most 8 byte planes, each vectorised over all positions
        out |= data[pos + b].astype(np.uint64) << np.uint64(8 * b)
    return out
