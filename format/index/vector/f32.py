"""Float32 kernels summed in pylance's orders: the distances and sums whose rounding its
indices and searches depend on (its SIMD lanes, fused multiply-adds and reductions), so that
Quiver's codes, factors and partition choices are pylance's bit for bit."""

from __future__ import annotations

import numpy as np

F = np.float32


def fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """A fused multiply-add rounded once (float64 holds the exact product of two floats)."""
    return (
        np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)
    ).astype(F)


def seq_sum(v: np.ndarray) -> np.ndarray:
    """Float32 sums along the last axis, left to right (cumsum adds in order; sum pairs):
    a scalar for a vector, one a row for rows."""
    v = np.asarray(v, F)
    if v.shape[-1] == 0:
        return np.zeros(v.shape[:-1], F)[()]
    return np.cumsum(v, axis=-1, dtype=F)[..., -1]


def reduce16(acc: np.ndarray) -> np.ndarray:
    """Sixteen lanes added by halves (8, 4, 2, 1), as `_mm512_reduce_add_ps`."""
    a = np.asarray(acc, F)
    for h in (8, 4, 2, 1):
        a = (a[..., :h] + a[..., h : 2 * h]).astype(F)
    return a[..., 0]


def l2(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Squared l2 of the rows of `a` to `b` as a search ranks centroids: sixteen lanes
    summed in order, the tail apart; dimensions 8 and 16 by an eight-lane kernel of fused
    steps (pylance's)."""
    d = (np.asarray(a, F) - np.asarray(b, F)).astype(F)
    if d.shape[-1] in (8, 16):
        acc = np.zeros(d.shape[:-1] + (8,), F)
        for i in range(0, d.shape[-1], 8):
            acc = fma(d[..., i : i + 8], d[..., i : i + 8], acc)
        for h in (4, 2, 1):
            acc = (acc[..., :h] + acc[..., h : 2 * h]).astype(F)
        return acc[..., 0]
    return l2_lanes(d)


def l2_lanes(d: np.ndarray) -> np.ndarray:
    """Squared length of the rows of differences `d` as a build measures a row's distance
    to a centroid: squares summed in sixteen lanes, the lanes in order, then the tail."""
    sq = (d * d).astype(F)
    n = sq.shape[-1] // 16 * 16
    acc = np.zeros(sq.shape[:-1] + (16,), F)
    for i in range(0, n, 16):
        acc = (acc + sq[..., i : i + 16]).astype(F)
    s = np.zeros(sq.shape[:-1], F)
    for j in range(16):
        s = (s + acc[..., j]).astype(F)
    t = np.zeros(sq.shape[:-1], F)
    for j in range(n, sq.shape[-1]):
        t = (t + sq[..., j]).astype(F)
    return (s + t).astype(F)


def dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Dot products of the rows of `a` and `b`: sixteen lanes of fused steps, reduced by
    halves, then the tail."""
    a, b = np.asarray(a, F), np.asarray(b, F)
    n = a.shape[-1] // 16 * 16
    acc = np.zeros(np.broadcast(a, b).shape[:-1] + (16,), F)
    for i in range(0, n, 16):
        acc = fma(a[..., i : i + 16], b[..., i : i + 16], acc)
    s = reduce16(acc)
    t = np.zeros(np.shape(s), F)
    for j in range(n, a.shape[-1]):
        t = (t + (a[..., j] * b[..., j]).astype(F)).astype(F)
    return (s + t).astype(F)
