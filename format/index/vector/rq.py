"""IVF_RQ indices (RaBitQ quantization) as pylance 14 writes and searches them.

`auxiliary.idx` holds, per row, the signs of its residual to its centroid after a random
rotation (one bit a dimension, `_rabit_codes`), two or three float factors, and with
`num_bits` > 1 the rest of each dimension's code (`__blocked_ex_codes`) and two more
factors. The rotation ("fast": four rounds of sign flips from `fast_rotation_signs` and a
Walsh-Hadamard transform) is in the storage metadata.

A query is rotated once; per probed partition (nearest first), each row's binary estimate
comes from a lookup table of the rotated query (quantized to bytes for rows in whole blocks
of 32, exact for the rest), and with more bits the estimate's lower bound decides whether
the row is measured on its full code: rows whose bound cannot beat the k-th best so far
are skipped. One heap of the best rows serves every partition a query probes, so the
answers depend on that order, as pylance's do. Every step is float32 in pylance's order of
operations (its kernels' lane layouts included), so distances agree to the bit on x86-64
machines with AVX-512 (elsewhere pylance's kernels sum in other orders: last bits may
differ). Cosine indices measure normalised vectors by squared l2, as pylance does (about
twice the cosine distance) unless a refine measures again.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from quiver.format import _kernels
from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.index.vector.f32 import dot, fma, l2, reduce16, seq_sum

F = np.float32
CODES = "_rabit_codes"
FACTORS = ("__add_factors", "__scale_factors", "__error_factors")
EX_CODES = "__blocked_ex_codes"
EX_FACTORS = ("__add_factors_ex", "__scale_factors_ex")
_BLOCK = 32  # rows packed together (FastScan blocks)
_PERM = np.array([0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15])


@dataclass(frozen=True)
class RaBitQ:
    """An IVF_RQ index's quantizer: dimension, bits per dimension, rotation signs."""

    dimension: int
    num_bits: int
    signs: np.ndarray  # uint8, 4 rounds of ceil(dim / 8) bytes
    metric: str
    packed: bool

    column = CODES

    @classmethod
    def read(cls, meta: dict, metric: str, dimension: int, where: str) -> RaBitQ:
        """The quantizer a `storage_metadata` entry describes."""
        rotation = meta.get("rotation_type", "fast")
        estimator = meta.get("query_estimator", "raw_query")
        if rotation != "fast" or estimator != "raw_query":
            raise UnsupportedFeatureError(
                f"{where}: an IVF_RQ index of {rotation} rotation and {estimator} estimator "
                "(pylance 14 writes fast rotations and raw-query estimates, which are read)"
            )
        try:
            dim, bits = int(meta["code_dim"]), int(meta["num_bits"])
            signs = np.array(meta["fast_rotation_signs"], np.uint8)
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise CorruptFileError(where, f"bad IVF_RQ storage metadata: {e}") from None
        if dim != dimension or dim % 8 or not 1 <= bits <= 9 or len(signs) != 4 * (dim // 8):
            raise CorruptFileError(where, f"IVF_RQ of {dim} dimensions, {bits} bits")
        return cls(dim, bits, signs, metric, bool(meta.get("packed", False)))

    def rotate(self, x: np.ndarray) -> np.ndarray:
        """pylance's fast rotation of the rows of `x` (float32; `_kernels.rq_rotate`)."""
        out = np.array(x, dtype=F, order="C", copy=True)
        _kernels.rq_rotate(out, self.dimension, np.ascontiguousarray(self.signs, np.uint8))
        return out


@dataclass(frozen=True)
class RqPartition:
    """One partition's rows decoded: row ids, sign codes as nibbles (rows x dim/4), factors
    and, with more than one bit, the rest of the codes (rows x dim) and their factors."""

    row_ids: np.ndarray
    nibbles: np.ndarray
    add: np.ndarray
    scale: np.ndarray
    error: np.ndarray
    ex: np.ndarray | None = None
    add_ex: np.ndarray | None = None
    scale_ex: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        parts = (self.row_ids, self.nibbles, self.add, self.scale, self.error, self.ex)
        return int(sum(p.nbytes for p in parts if p is not None))


def columns(q: RaBitQ) -> list[str]:
    """The `auxiliary.idx` columns a partition is read from."""
    extra = [EX_CODES, *EX_FACTORS] if q.num_bits > 1 else []
    return ["_rowid", CODES, *FACTORS, *extra]


def column_values(table: pa.Table, name: str, where: str) -> np.ndarray:
    """An `auxiliary.idx` column's values (a fixed-size list's flattened); nulls refused."""
    column = table.column(name).combine_chunks()
    if column.null_count:
        raise CorruptFileError(where, f"null values in {name}")
    if pa.types.is_fixed_size_list(column.type):
        column = column.flatten()
    return column.to_numpy(zero_copy_only=False)


@dataclass(frozen=True)
class StoredCodes:
    """A partition's `auxiliary.idx` rows, unpacked: row ids, sign codes (rows x dim/8
    bytes), the three factors (rows x 3) and, with more than one bit, the extended codes
    (rows x dim) and their two factors (rows x 2)."""

    row_ids: np.ndarray
    signs: np.ndarray
    factors: np.ndarray
    ex: np.ndarray | None = None
    ex_factors: np.ndarray | None = None


def stored_codes(q: RaBitQ, table: pa.Table, where: str) -> StoredCodes:
    """A partition's rows from its `auxiliary.idx` columns, unpacked and checked."""
    n, width = table.num_rows, q.dimension // 8

    def values(name: str) -> np.ndarray:
        return column_values(table, name, where)

    raw = values(CODES).astype(np.uint8)
    if len(raw) != n * width:
        raise CorruptFileError(where, f"{len(raw)} code bytes for {n} rows of {width}")
    signs = _unpack_signs(raw, n, width) if q.packed else raw.reshape(n, width)
    factors = np.stack([values(c).astype(F) for c in FACTORS], axis=1)
    ids = values("_rowid").astype(np.uint64)
    if q.num_bits == 1:
        return StoredCodes(ids, signs, factors)
    eb = q.num_bits - 1
    blocked = values(EX_CODES).astype(np.uint8)
    per_row = -(-q.dimension // 64) * 8 * eb
    if len(blocked) != n * per_row:
        raise CorruptFileError(where, f"{len(blocked)} extended code bytes for {n} rows")
    ex = _unpack_ex(blocked.reshape(n, per_row), eb, q.dimension)
    ex_factors = np.stack([values(c).astype(F) for c in EX_FACTORS], axis=1)
    return StoredCodes(ids, signs, factors, ex, ex_factors)


def decode_partition(q: RaBitQ, table: pa.Table, where: str) -> RqPartition:
    """A partition's rows from its `auxiliary.idx` columns, as searches read them."""
    stored = stored_codes(q, table, where)
    n = len(stored.row_ids)
    bits = np.unpackbits(stored.signs, axis=1, bitorder="little")
    nibbles = (bits.reshape(n, q.dimension // 4, 4).astype(np.int64) << np.arange(4)).sum(-1)
    add, scale, error = (np.ascontiguousarray(stored.factors[:, i]) for i in range(3))
    ex = add_ex = scale_ex = None
    if stored.ex is not None and stored.ex_factors is not None:
        ex = stored.ex.astype(F)
        add_ex, scale_ex = (np.ascontiguousarray(stored.ex_factors[:, i]) for i in range(2))
    return RqPartition(stored.row_ids, nibbles, add, scale, error, ex, add_ex, scale_ex)


def _unpack_signs(packed: np.ndarray, n: int, width: int) -> np.ndarray:
    """Sign codes packed per partition (rows in whole blocks of 32 as nibble groups, the
    rest transposed) back to (rows, dim/8) bytes."""
    out = np.zeros((n, width), np.uint8)
    full = n // _BLOCK
    if full:
        block = packed[: full * _BLOCK * width].reshape(full, width, _BLOCK)
        low, high = block[..., :16], block[..., 16:]
        rows = np.arange(full)[:, None] * _BLOCK + _PERM[None, :]
        for i in range(width):
            out[rows, i] = (low[:, i] & 0xF) | ((high[:, i] & 0xF) << 4)
            out[rows + 16, i] = (low[:, i] >> 4) | (high[:, i] & 0xF0)
    rest = n - full * _BLOCK
    if rest:
        out[full * _BLOCK :] = packed[full * _BLOCK * width :].reshape(width, rest).T
    return out


def _top_plane() -> np.ndarray:
    pos = np.zeros(64, np.uint64)
    for k in range(4):
        for b in range(16):
            pos[16 * k + b] = 8 * (b % 8) + 2 * k + b // 8
    return pos


_TOP = _top_plane()


def _unpack_ex(rows: np.ndarray, eb: int, dim: int) -> np.ndarray:
    """Extended codes in blocks of 64 dimensions (`8 * eb` bytes each) -> (rows, dim)."""
    n = rows.shape[0]
    blocks = rows.shape[1] // (8 * eb)
    g = rows.reshape(n, blocks, 8 * eb).astype(np.int64)
    out = np.zeros((n, blocks, 64), np.int64)

    def top(at: int) -> np.ndarray:
        plane = np.zeros((n, blocks), np.uint64)
        for j in range(8):
            plane |= g[..., at + j].astype(np.uint64) << np.uint64(8 * j)
        return ((plane[..., None] >> _TOP) & np.uint64(1)).astype(np.int64)

    if eb == 1:
        out[:] = np.unpackbits(rows.reshape(n, blocks, 8), axis=-1, bitorder="little")
    elif eb in (2, 3):
        for k in range(4):
            out[..., 16 * k : 16 * k + 16] = (g[..., :16] >> (2 * k)) & 3
        if eb == 3:
            out |= top(16) << 2
    elif eb == 4:
        for u in range(4):
            out[..., 16 * u : 16 * u + 8] = g[..., 8 * u : 8 * u + 8] & 0xF
            out[..., 16 * u + 8 : 16 * u + 16] = g[..., 8 * u : 8 * u + 8] >> 4
    elif eb == 5:
        for k in range(4):
            src = g[..., 16 * (k // 2) : 16 * (k // 2) + 16]
            out[..., 16 * k : 16 * k + 16] = (src >> (4 * (k % 2))) & 0xF
        out |= top(32) << 4
    elif eb in (6, 7):
        for k in range(3):
            out[..., 16 * k : 16 * k + 16] = g[..., 16 * k : 16 * k + 16] & 0x3F
        out[..., 48:64] = (
            (g[..., 0:16] >> 6) | ((g[..., 16:32] >> 6) << 2) | ((g[..., 32:48] >> 6) << 4)
        )
        if eb == 7:
            out |= top(48) << 6
    else:
        out[:] = g
    return out.reshape(n, blocks * 64)[:, :dim]


def normalized(q: np.ndarray) -> np.ndarray:
    """A vector, or rows, scaled to unit length as pylance's IVF_RQ does (the square root of
    a float32 sum of squares taken left to right): queries, and cosine rows in builds."""
    q = np.asarray(q, F)
    return (q / np.sqrt(seq_sum((q * q).astype(F)), dtype=F)[..., None]).astype(F)


def centroid_distances(q: np.ndarray, centroids: np.ndarray, metric: str) -> np.ndarray:
    """A (normalised, for cosine) query's distances to the centroids, as pylance ranks and
    weighs partitions with them."""
    if metric == "dot":
        return (F(1) - dot(centroids, q)).astype(F)
    return l2(centroids, q)


# -- a query ---------------------------------------------------------------------------------
def _table(qr: np.ndarray) -> np.ndarray:
    """(dim/4, 16) float32: entry [s, j] the sum of qr[4s + t] over the bits t of j."""
    d = len(qr)
    out = np.zeros((d // 4, 16), F)
    lanes = np.arange(d // 4) * 4
    for j in range(1, 16):
        low = j & -j
        out[:, j] = (out[:, j - low] + qr[lanes + (low.bit_length() - 1)]).astype(F)
    return out


def _binary(nibbles: np.ndarray, table: np.ndarray, bits: int = 8) -> np.ndarray:
    """Per row, the rotated query summed over its set sign bits: rows in whole blocks of
    32 through the table quantized to `bits` bits (FastScan: 8; pylance's "accurate"
    mode: 16), the rest exactly."""
    n, groups = nibbles.shape
    out = np.zeros(n, F)
    simd = n // _BLOCK * _BLOCK
    top = F(2**bits - 1)
    if simd:
        low, high = table.min(), table.max()
        span = F(high - low)
        factor = F(top / span)
        if np.isfinite(span) and np.isfinite(factor):
            levels = np.rint(((table - low).astype(F) * factor).astype(F))
            levels = np.clip(levels, 0, int(top)).astype(np.int64)
            sums = levels[np.arange(groups)[None, :], nibbles[:simd]].sum(1)
            out[:simd] = (sums.astype(F) * F(span / top)).astype(F) + F(F(groups) * low)
        else:  # a flat table (a zero query): every row exactly
            simd = 0
    rest = nibbles[simd:]
    if len(rest):
        s = np.zeros(len(rest), F)
        for b in range(groups // 2):
            pair = (table[2 * b, rest[:, 2 * b]] + table[2 * b + 1, rest[:, 2 * b + 1]]).astype(F)
            s = (s + pair).astype(F)
        out[simd:] = s
    return out


def _ex_dot(qr: np.ndarray, ex: np.ndarray, eb: int) -> np.ndarray:
    """Per row, the rotated query dotted with its extended codes, in the order of pylance's
    AVX-512 kernels: 16-dimension runs fused into accumulators (two, chosen by group and run,
    or four by run for 2 and 6 bits), added and reduced by halves."""
    d = len(qr)
    pad = -(-d // 64) * 64
    q = np.zeros(pad, F)
    q[:d] = qr
    c = np.zeros((ex.shape[0], pad), F)
    c[:, :d] = ex
    runs = 1 if eb in (1, 4, 8) else 4
    chains = 4 if eb in (2, 6) else 2
    acc = np.zeros((chains, ex.shape[0], 16), F)
    for g in range(pad // (16 * runs)):
        for r in range(runs):
            s = (g * runs + r) * 16
            k = r if chains == 4 else (g + r) % 2
            acc[k] = fma(c[:, s : s + 16], q[s : s + 16], acc[k])
    total = (acc[0] + acc[1]).astype(F)
    if chains == 4:
        total = (total + (acc[2] + acc[3]).astype(F)).astype(F)
    return reduce16(total)


class RqQuery:
    """One query against one IVF_RQ index: its rotation, table and best rows so far (one
    heap for every partition it probes, pylance's order)."""

    def __init__(self, quantizer: RaBitQ, centroids: np.ndarray, rotated: np.ndarray,
                 query: np.ndarray, fetch: int,
                 bounds: tuple[float, float] = (-np.inf, np.inf),
                 approx_mode: str = "normal") -> None:  # fmt: skip
        self.q, self.fetch = quantizer, fetch
        self.mode = approx_mode
        self.low, self.high = bounds  # a distance_range: rows outside never enter the heap
        self.metric = quantizer.metric
        self.query = normalized(query) if self.metric == "cosine" else np.asarray(query, F)
        self.centroid_dist = centroid_distances(self.query, centroids, self.metric)
        self.rotated_centroids = rotated
        self.qr = quantizer.rotate(self.query[None])[0]
        self.table = _table(self.qr)
        self.total = seq_sum(self.qr)
        self.heap: list[tuple[float, int, int]] = []  # (-distance, -visit, row id)
        self.visits = 0
        self.seen = 0  # rows offered (those the filter allows)

    def probe(self, p: int, part: RqPartition, allowed: np.ndarray | None) -> None:
        """Offer partition `p`'s rows (those `allowed`, a mask) to the heap."""
        n = len(part.row_ids)
        if not n:
            return
        b = _binary(part.nibbles, self.table, 16 if self.mode == "accurate" else 8)
        if self.metric == "dot":
            c = self.rotated_centroids[p]
            ip = dot(self.qr, c)
            alpha = F(ip / dot(c, c))
            if not np.isfinite(alpha):
                alpha = F(0)
            a_s, a_o, qf = alpha, F(1), F(F(1) - ip)
            resid = self.qr.astype(np.float64) - np.float64(alpha) * c.astype(np.float64)
            exact = np.sqrt((resid * resid).sum())
            q_err = F(exact)
            if np.float64(q_err) < exact:
                q_err = np.nextafter(q_err, F(np.inf))
        else:
            a_s, a_o, qf = F(1), F(0), self.centroid_dist[p]
            q_err = np.sqrt(max(qf, F(0)), dtype=F)
        half = F(F(0.5) * self.total)
        estimate = (((b - half).astype(F) * part.scale).astype(F)
                    + (a_s * (part.add - a_o).astype(F)).astype(F)).astype(F)  # fmt: skip
        estimate = (estimate + qf).astype(F)
        eb = self.q.num_bits - 1
        order = np.arange(n) if allowed is None else np.flatnonzero(allowed)
        self.seen += len(order)
        if eb == 0 or self.mode == "fast":  # ("fast": the sign bits' estimate alone)
            self._offer(order, estimate, None, part.row_ids)
            return
        assert part.ex is not None and part.add_ex is not None and part.scale_ex is not None
        lower = (estimate - (part.error * q_err).astype(F)).astype(F)
        full = ((F(2**eb) * b).astype(F) + _ex_dot(self.qr, part.ex, eb)).astype(F)
        full = (full + F(F(-(2**eb - 0.5)) * self.total)).astype(F)
        refined = ((full * part.scale_ex).astype(F)
                   + (a_s * (part.add_ex - a_o).astype(F)).astype(F)).astype(F)  # fmt: skip
        self._offer(order, (refined + qf).astype(F), lower, part.row_ids)

    def _offer(
        self, order: np.ndarray, dist: np.ndarray, lower: np.ndarray | None, ids: np.ndarray
    ) -> None:
        """Rows `order` offered in turn: while the heap is full, a row enters only nearer
        than its farthest, and (with bounds) only if its bound is below that; with a
        distance range, only rows inside it (a bound at or past its end skips the row)."""
        heap, k = self.heap, self.fetch
        low, high = self.low, self.high
        ranged = low != -np.inf or high != np.inf
        for i in order.tolist():
            self.visits += 1
            if ranged:
                if lower is not None and lower[i] >= high:
                    continue
                if not low <= dist[i] < high:
                    continue
            if len(heap) >= k:
                worst = -heap[0][0]
                if lower is not None and lower[i] >= worst:
                    continue
                if not dist[i] < worst:
                    continue
                heapq.heapreplace(heap, (-float(dist[i]), -self.visits, int(ids[i])))
            else:
                heapq.heappush(heap, (-float(dist[i]), -self.visits, int(ids[i])))

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, distances float32), nearest first (ties by row id)."""
        found = sorted((-d, rid) for d, _, rid in self.heap)
        ids = np.array([r for _, r in found], np.uint64)
        return ids, np.array([d for d, _ in found], F)


def rq_search(
    index: object,
    queries: np.ndarray,
    k: int,
    fetch: int,
    minimum: int,
    maximum: int | None,
    allowed: Callable[[np.ndarray], np.ndarray] | None,
    pruned: Callable[[np.ndarray, int, str], np.ndarray],
    bounds: tuple[float, float] = (-np.inf, np.inf),
    approx_mode: str = "normal",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query index, row id, distance) of each query's best `fetch` rows in one IVF_RQ
    index (within `bounds`, a distance_range, as pylance offers rows to its heap; with
    pylance's `approx_mode`: "fast" ranks by the sign bits' estimate alone, "accurate"
    quantizes the FastScan table to 16 bits instead of 8):
    `minimum` partitions probed (raised by `pruned`, pylance's early pruning, below
    `maximum`), then more one at a time while fewer than k allowed rows were offered."""
    q: RaBitQ = index.storage  # type: ignore[attr-defined]
    centroids = index.ivf.centroids.astype(F)  # type: ignore[attr-defined]
    rotated = index.rotated_centroids  # type: ignore[attr-defined]
    parts = len(centroids)
    high = parts if maximum is None else min(maximum, parts)
    out_q, out_ids, out_d = [], [], []
    for qi, vector in enumerate(np.asarray(queries, F)):
        search = RqQuery(q, centroids, rotated, vector, fetch, bounds, approx_mode)
        low = min(minimum, high)
        if high > low:
            low = int(min(max(low, int(pruned(search.centroid_dist[None], k, q.metric)[0])), high))
        order = np.argsort(search.centroid_dist, kind="stable")
        for rank in range(high):
            if rank >= low and search.seen >= k:
                break
            p = int(order[rank])
            part = index.rq_partition(p)  # type: ignore[attr-defined]
            mask = None if allowed is None else np.asarray(allowed(part.row_ids), bool)
            search.probe(p, part, mask)
        ids, dist = search.result()
        out_q.append(np.full(len(ids), qi, np.int64))
        out_ids.append(ids)
        out_d.append(dist)
    return np.concatenate(out_q), np.concatenate(out_ids), np.concatenate(out_d)
