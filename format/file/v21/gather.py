"""Bounds-checked range gathers shared by the 2.1+ codecs.

Mini-block pages hold thousands of chunks; every codec needs "these byte ranges of the page,
concatenated" or "this many elements from each chunk". These helpers do that with compiled
loops (no Python loop per chunk, no index array per element), and bounds-check first.

Kernels index with unsigned integers: numba then drops negative-index wraparound, which lets
LLVM turn the copy loops into memcpy / vector code. Every kernel that copies trusts ranges a
checking kernel has validated first.
"""

from __future__ import annotations

import numba
import numpy as np

from format.errors import CorruptFileError

I64 = np.int64
U64 = np.uint64


def as_i64(x: object) -> np.ndarray:
    """`x` as a contiguous int64 array (no copy when it already is one): the kernels' input."""
    return np.ascontiguousarray(x, dtype=I64)


def outside(
    size: int, starts: np.ndarray, lengths: np.ndarray, i: int, where: str, what: str
) -> CorruptFileError:
    """The error for range i of (starts, lengths) not lying inside a `size`-byte buffer."""
    s, n = int(starts[i]), int(lengths[i])
    return CorruptFileError(where, f"{what} #{i} spans [{s}, {s + n}) outside a {size}-byte buffer")


def check_ranges(size: int, starts: np.ndarray, lengths: np.ndarray, where: str, what: str) -> None:
    """Raise CorruptFileError unless every [start, start + length) lies inside [0, size)."""
    starts, lengths = as_i64(starts), as_i64(lengths)
    bad = first_bad_range(size, starts, lengths)
    if bad >= 0:
        raise outside(size, starts, lengths, bad, where, what)


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
    """The elements data[s : s + n] of every range, concatenated (bounds-checked); a single
    range is returned as a view."""
    starts, lengths = as_i64(starts), as_i64(lengths)
    data = np.ascontiguousarray(data)
    bad = first_bad_range(len(data), starts, lengths)
    if bad >= 0:
        raise outside(len(data), starts, lengths, bad, where, what)
    if len(starts) == 1:
        s = int(starts[0])
        return data[s : s + int(lengths[0])]
    return copy_ranges(data, starts, lengths)


def copy_ranges(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The validated ranges of `data` back to back in a new array. Outputs are allocated by
    numpy, not inside kernels: numpy asks for huge pages, numba's allocator is ~4x slower to
    fault in a large array."""
    out = np.empty(int(lengths.sum()), dtype=data.dtype)
    copy_ranges_into(data, starts, lengths, out)
    return out


def read_uint(data: np.ndarray, pos: np.ndarray, nbytes: int, where: str, what: str) -> np.ndarray:
    """Little-endian unsigned integers of `nbytes` bytes at byte positions `pos` (any alignment)."""
    pos = as_i64(pos)
    if not 1 <= nbytes <= 8:
        raise ValueError(f"read_uint of {nbytes}-byte integers")
    bad = _first_bad_position(len(data), pos, nbytes)
    if bad >= 0:
        raise outside(len(data), pos, np.full(len(pos), nbytes, dtype=I64), bad, where, what)
    return _read_uint(np.ascontiguousarray(data), pos, nbytes)


# -- kernels -----------------------------------------------------------------------------------
@numba.njit(cache=True, nogil=True)
def first_bad_range(size, starts, lengths):  # noqa: ANN001, ANN201
    """Index of the first range [s, s + n) not inside [0, size), or -1 (no overflow on
    hostile values: `s > size - n` instead of `s + n > size`)."""
    for i in range(len(starts)):
        s, n = starts[i], lengths[i]
        if n < 0 or s < 0 or s > size - n:
            return i
    return -1


@numba.njit(cache=True, nogil=True)
def _first_bad_position(size, pos, nbytes):  # noqa: ANN001, ANN202
    for i in range(len(pos)):
        if pos[i] < 0 or pos[i] > size - nbytes:
            return i
    return -1


@numba.njit(cache=True, nogil=True)
def copy_ranges_into(data, starts, lengths, out):  # noqa: ANN001, ANN201
    """memcpy of each validated range into `out`, back to back: an index array of every
    element (numpy's way) costs 8 bytes of index per byte moved."""
    o = U64(0)
    for i in range(len(starts)):
        s, n = U64(starts[i]), U64(lengths[i])
        for k in range(n):
            out[o + k] = data[s + k]
        o += n


@numba.njit(cache=True, nogil=True)
def load_uint(data, p, nbytes):  # noqa: ANN001, ANN201
    """The `nbytes`-byte little-endian unsigned integer at byte `p` (validated) of uint8 data."""
    p = U64(p)
    if nbytes == 4:  # offsets: spelled out so that LLVM makes it one load
        return (
            U64(data[p])
            | U64(data[p + U64(1)]) << U64(8)
            | U64(data[p + U64(2)]) << U64(16)
            | U64(data[p + U64(3)]) << U64(24)
        )
    if nbytes == 8:
        v = U64(0)
        for b in range(8):  # a constant trip count: unrolled into one load
            v |= U64(data[p + U64(b)]) << U64(8 * b)
        return v
    v = U64(0)
    for b in range(nbytes):
        v |= U64(data[p + U64(b)]) << U64(8 * b)
    return v


@numba.njit(cache=True, nogil=True)
def _read_uint(data, pos, nbytes):  # noqa: ANN001, ANN202
    out = np.empty(len(pos), dtype=np.uint64)  # small: one integer per chunk or value
    for i in range(len(pos)):
        out[i] = load_uint(data, pos[i], nbytes)
    return out
