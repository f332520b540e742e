"""Bounds-checked range gathers shared by the 2.1+ codecs.

Mini-block pages hold thousands of chunks; every codec needs "these byte ranges of the page,
concatenated" or "this many elements from each chunk". These helpers do that with compiled
loops (the C module `_kernels`: no Python loop per chunk, no index array per element), and
bounds-check first: every kernel that copies trusts ranges a checking kernel has validated.
"""

from __future__ import annotations

import numpy as np

from quiver.format import _kernels
from quiver.format.errors import CorruptFileError

I64 = np.int64


def as_i64(x: object) -> np.ndarray:
    """`x` as a contiguous int64 array (no copy when it already is one): the kernels' input."""
    return np.ascontiguousarray(x, dtype=I64)


def outside(
    size: int, starts: np.ndarray, lengths: np.ndarray, i: int, where: str, what: str
) -> CorruptFileError:
    """The error for range i of (starts, lengths) not lying inside a `size`-byte buffer."""
    s, n = int(starts[i]), int(lengths[i])
    return CorruptFileError(where, f"{what} #{i} spans [{s}, {s + n}) outside a {size}-byte buffer")


def first_bad_range(size: int, starts: np.ndarray, lengths: np.ndarray) -> int:
    """Index of the first range [s, s + n) not inside [0, size), or -1 (no overflow on hostile
    values)."""
    return _kernels.first_bad_range(size, as_i64(starts), as_i64(lengths))


def check_ranges(size: int, starts: np.ndarray, lengths: np.ndarray, where: str, what: str) -> None:
    """Raise CorruptFileError unless every [start, start + length) lies inside [0, size)."""
    starts, lengths = as_i64(starts), as_i64(lengths)
    bad = _kernels.first_bad_range(size, starts, lengths)
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
    bad = _kernels.first_bad_range(len(data), starts, lengths)
    if bad >= 0:
        raise outside(len(data), starts, lengths, bad, where, what)
    if len(starts) == 1:
        s = int(starts[0])
        return data[s : s + int(lengths[0])]
    out = np.empty(int(lengths.sum()), dtype=data.dtype)
    _kernels.copy_ranges(data, starts, lengths, data.dtype.itemsize, out)
    return out


def copy_ranges(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The validated ranges of `data` back to back in a new array. Outputs are allocated by
    numpy, not by the kernels: numpy asks for huge pages, which fault in ~4x faster."""
    out = np.empty(int(lengths.sum()), dtype=data.dtype)
    copy_ranges_into(data, starts, lengths, out)
    return out


def copy_ranges_into(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray
) -> None:
    """memcpy of each validated range of `data` into `out` (same dtype), back to back: an index
    array of every element (numpy's way) costs 8 bytes of index per byte moved."""
    data = np.ascontiguousarray(data)
    if out.dtype.itemsize != data.dtype.itemsize:
        raise ValueError(f"copy of {data.dtype} items into {out.dtype}")
    _kernels.copy_ranges(data, as_i64(starts), as_i64(lengths), data.dtype.itemsize, out)


def read_uint(data: np.ndarray, pos: np.ndarray, nbytes: int, where: str, what: str) -> np.ndarray:
    """Little-endian unsigned integers of `nbytes` bytes at byte positions `pos` (any alignment)."""
    pos = as_i64(pos)
    if not 1 <= nbytes <= 8:
        raise ValueError(f"read_uint of {nbytes}-byte integers")
    bad = _kernels.first_bad_position(len(data), pos, nbytes)
    if bad >= 0:
        raise outside(len(data), pos, np.full(len(pos), nbytes, dtype=I64), bad, where, what)
    out = np.empty(len(pos), dtype=np.uint64)  # small: one integer per chunk or value
    _kernels.read_uint(np.ascontiguousarray(data), pos, nbytes, out)
    return out


def load_uint(data: np.ndarray, p: int, nbytes: int) -> int:
    """The `nbytes`-byte little-endian unsigned integer at byte `p` (validated) of uint8 data."""
    p = int(p)
    return int.from_bytes(data[p : p + nbytes].tobytes(), "little")
