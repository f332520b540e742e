"""Split-block bloom filters (SBBF) as Lance writes them, and the xxHash64 they hash with.

A filter is a run of 32-byte blocks of eight little-endian 32-bit words. A value's
xxHash64 (seed 0) picks a block with its upper 32 bits and one bit in each of the block's
words with its lower 32 bits times one of eight odd salts (the product's top five bits),
as Parquet's bloom filters do. pylance sizes a filter for an expected number of distinct
values and a false-positive rate with Putze et al.'s formula (the smallest power-of-two
size, 32 bytes to 128 MiB, whose rate is low enough): 8192 values at 0.00057 is 32 KiB.

Two users: the inserted-keys filter of a merge on the primary key
(`format.table.key_filter`) and the BLOOMFILTER scalar index (`format.index.scalar.bloom`).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import xxhash

from quiver.format import _kernels

__all__ = ["check_hashes", "filter_bytes", "log2_bytes", "xxh64_fixed", "xxh64_values"]

SALT = np.array(
    [
        0x47B6137B,
        0x44974D91,
        0x8824AD5B,
        0xA2B7289D,
        0x705495C7,
        0x2DF1424B,
        0x9EFC4947,
        0x5C6BFB31,
    ],
    dtype=np.uint64,
)
_SALT32 = SALT.astype(np.uint32)
_WORD_BITS = np.arange(8, dtype=np.int64) * 32  # where each of a block's words starts
_MIN_LOG2, _MAX_LOG2 = 5, 27  # 32 bytes (one block) to 128 MiB


def xxh64_fixed(values: np.ndarray) -> np.ndarray:
    """xxHash64 (seed 0) of each element's little-endian bytes, for elements of 1, 2, 4
    or 8 bytes (a compiled loop: `format._kernels.xxh64_fixed`)."""
    width = values.dtype.itemsize
    if width not in (1, 2, 4, 8):
        raise ValueError(f"xxh64_fixed hashes 1, 2, 4 or 8 byte values, not {width}")
    raw = np.ascontiguousarray(values).view(f"<u{width}")
    out = np.empty(len(raw), dtype=np.uint64)
    _kernels.xxh64_fixed(raw, width, out)
    return out


def xxh64_values(values: list[bytes]) -> np.ndarray:
    """xxHash64 (seed 0) of byte strings of any length."""
    return np.fromiter((xxhash.xxh64_intdigest(v) for v in values), np.uint64, len(values))


def _false_positive_rate(ndv: int, log2: int) -> float:
    """Putze et al.'s rate (their equation 3) for `ndv` values in 2**log2 bytes."""
    if ndv == 0:
        return 0.0
    bits = float(1 << log2) * 8
    if ndv / bits > 2.0:
        return 1.0
    lam = 8 * 32 / (bits / ndv)
    log_lam = math.log(lam)
    total = 0.0
    for i in range(749, -1, -1):
        log_p = i * log_lam - lam - math.lgamma(i + 1)
        log_inner = 8 * math.log1p(-((1 - 1 / 32) ** i)) if i else -math.inf
        total += math.exp(log_p + log_inner)
    return min(total, 1.0)


@lru_cache(maxsize=64)
def log2_bytes(ndv: int, fpp: float) -> int:
    """log2 of the bytes pylance gives a filter of `ndv` values at rate `fpp`."""
    if not 0.0 <= fpp < 1.0:
        raise ValueError(f"a bloom filter's false positive rate must be in [0, 1), not {fpp}")
    low, high = 0, 64
    while high > low + 1:
        mid = (low + high) // 2
        if _false_positive_rate(ndv, mid) <= fpp:
            high = mid
        else:
            low = mid
    return min(max(high, _MIN_LOG2), _MAX_LOG2)


def _bit_positions(hashes: np.ndarray, num_blocks: int) -> np.ndarray:
    """For each hash, the index (in the filter's bits, words little-endian) of the bit it
    sets in each of its block's eight words: shape (len(hashes), 8)."""
    h = hashes.astype(np.uint64, copy=False)
    with np.errstate(over="ignore"):
        block = ((h >> np.uint64(32)) * np.uint64(num_blocks)) >> np.uint64(32)
        # the low 32 bits times each salt, modulo 2**32: its top five bits pick the bit
        shift = (h.astype(np.uint32)[:, None] * _SALT32[None, :]) >> np.uint32(27)
    # positions fit int32 up to the largest filter (2**30 bits): half the traffic of int64
    kind = np.int32 if num_blocks <= 1 << 22 else np.int64
    rows = block.astype(kind) * kind(256)
    return rows[:, None] + _WORD_BITS.astype(kind)[None, :] + shift.astype(kind)


def filters_bytes(hashes: np.ndarray, bounds: np.ndarray, num_bytes: int) -> list[bytes]:
    """One filter of `num_bytes` per run of `hashes`: filter i holds
    hashes[bounds[i]:bounds[i + 1]] (a compiled loop: `format._kernels.sbbf_fill`)."""
    bounds = np.ascontiguousarray(bounds, dtype=np.int64)
    count = len(bounds) - 1
    out = np.zeros(max(count, 0) * num_bytes, dtype=np.uint8)
    _kernels.sbbf_fill(np.ascontiguousarray(hashes, dtype=np.uint64), bounds, out, num_bytes)
    return [out[i * num_bytes : (i + 1) * num_bytes].tobytes() for i in range(count)]


def filter_bytes(hashes: np.ndarray, num_bytes: int) -> bytes:
    """The filter of `num_bytes` (a multiple of 32) holding every hash."""
    return filters_bytes(hashes, np.array([0, len(hashes)], dtype=np.int64), num_bytes)[0]


def check_hashes(filters: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """Whether each of several filters of one size (the rows of a uint8 matrix) may hold
    each hash (never a false "no"): a (filters, hashes) boolean matrix."""
    if not len(hashes) or not len(filters):
        return np.zeros((len(filters), len(hashes)), dtype=bool)
    positions = _bit_positions(hashes, filters.shape[1] // 32)  # (hashes, 8)
    picked = filters[:, positions >> 3]  # (filters, hashes, 8) bytes
    return ((picked >> (positions & 7).astype(np.uint8)) & 1).all(axis=2).astype(bool)
