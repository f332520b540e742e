"""Building IVF_RQ (RaBitQ) indices as pylance 14 writes them (`rq` searches them).

There is nothing to train beyond the IVF centroids: a build draws the rotation's random
signs, and each row's code is the rotated residual to its centroid, one sign bit a
dimension plus, with `num_bits` > 1, `num_bits - 1` more bits a dimension (the extended
RaBitQ code: the rescale of the row's unit residual whose rounded grid points line up best
with it, found by sweeping the rescale through the points where a dimension's code steps
up). Beside its codes a row stores the factors the search's estimates and lower bounds
take (float32, each sum left to right in dimension order, as pylance computes them).

A row's encoding is one record of bytes (`record_width`: sign bytes, factors, extended
codes one byte a dimension, their factors) while the build spills rows by partition; a
partition's records become `auxiliary.idx` columns in `partition_table`, the sign codes
packed in blocks of 32 rows and the extended codes in blocks of 64 dimensions, as
pylance's search reads them.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from quiver.format import _kernels
from quiver.format.errors import InvalidInputError
from quiver.format.index.vector.f32 import l2_lanes, seq_sum
from quiver.format.index.vector.kmeans import in_parallel
from quiver.format.index.vector.rq import (
    _BLOCK,
    _PERM,
    _TOP,
    CODES,
    EX_CODES,
    EX_FACTORS,
    FACTORS,
    F,
    RaBitQ,
    stored_codes,
)

_CHUNK_ROWS = 8192  # rows a thread encodes at a time
STORAGE_VERSION = 2  # the manifest's index_version of an IVF_RQ segment (pylance 14's)


def new_quantizer(dimension: int, num_bits: int, metric: str, rng: np.random.Generator) -> RaBitQ:
    """A quantizer with fresh random rotation signs (pylance draws new ones every build)."""
    signs = rng.integers(0, 256, size=4 * (dimension // 8), dtype=np.uint8)
    return RaBitQ(dimension, num_bits, signs, metric, packed=True)


def given_model(text: object, dimension: int, num_bits: int, metric: str, where: str) -> RaBitQ:
    """The quantizer of a build's `rabitq_model` (pylance's `build_rq_model` JSON: the
    storage metadata, unpacked): its rotation signs kept, checked as pylance checks it."""
    if not isinstance(text, str):
        raise InvalidInputError(f"{where}: rabitq_model must be a JSON string, not {text!r}")
    try:
        model = json.loads(text)
        bits, dim = int(model["num_bits"]), int(model["code_dim"])
        rotation = model.get("rotation_type", "fast")
        estimator = model.get("query_estimator", "raw_query")
        signs = np.array(model.get("fast_rotation_signs") or [], np.int64)
    except (ValueError, TypeError, KeyError, OverflowError) as e:
        raise InvalidInputError(f"{where}: invalid rabitq_model JSON: {e}") from None
    if bits != num_bits:
        raise InvalidInputError(
            f"{where}: rabitq_model num_bits={bits} does not match requested num_bits={num_bits}"
        )
    if dim != dimension:
        raise InvalidInputError(
            f"{where}: rabitq_model dimension={dim} does not match vector dimension={dimension}"
        )
    if rotation != "fast" or estimator != "raw_query":
        raise InvalidInputError(
            f"{where}: rabitq_model of {rotation} rotation and {estimator} estimator: pylance 14 "
            "and Quiver build fast rotations with raw-query estimates"
        )
    if len(signs) != 4 * (dimension // 8) or signs.min(initial=0) < 0 or signs.max(initial=0) > 255:
        raise InvalidInputError(
            f"{where}: rabitq_model fast_rotation_signs must be {4 * (dimension // 8)} bytes"
        )
    return RaBitQ(dimension, num_bits, signs.astype(np.uint8), metric, packed=True)


def storage_metadata(q: RaBitQ) -> dict:
    """The `storage_metadata` entry of `auxiliary.idx`, as pylance writes it."""
    return {
        "rotate_mat_position": None,
        "fast_rotation_signs": q.signs.tolist(),
        "rotation_type": "fast",
        "code_dim": q.dimension,
        "num_bits": q.num_bits,
        "packed": True,
        "query_estimator": "raw_query",
    }


def schema(q: RaBitQ) -> pa.Schema:
    """The columns of `auxiliary.idx` (no metadata), every one nullable as pylance's."""
    fields = [
        pa.field("_rowid", pa.uint64()),
        pa.field(CODES, pa.list_(pa.uint8(), q.dimension // 8)),
        *(pa.field(name, pa.float32()) for name in FACTORS),
    ]
    if q.num_bits > 1:
        fields.append(pa.field(EX_CODES, pa.list_(pa.uint8(), _ex_bytes(q))))
        fields += [pa.field(name, pa.float32()) for name in EX_FACTORS]
    return pa.schema(fields)


def record_width(dimension: int, num_bits: int) -> int:
    """Bytes of one row's record: sign bytes, 3 factors, then (more than one bit) a byte a
    dimension of extended code and 2 factors."""
    width = dimension // 8 + 4 * len(FACTORS)
    if num_bits > 1:
        width += dimension + 4 * len(EX_FACTORS)
    return width


def encode(q: RaBitQ, centroids: np.ndarray, x: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The records (rows x `record_width`, uint8) of prepared rows `x` (float32, normalised
    for cosine) assigned to partitions `labels`: chunks of rows over the build's threads
    (the kernels and large numpy steps release the GIL)."""
    crot = q.rotate(centroids)
    starts = range(0, len(x), _CHUNK_ROWS)
    chunks = in_parallel(
        lambda lo: _encode(
            q, centroids, crot, x[lo : lo + _CHUNK_ROWS], labels[lo : lo + _CHUNK_ROWS]
        ),
        starts,
    )
    if not chunks:
        return np.empty((0, record_width(q.dimension, q.num_bits)), np.uint8)
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def _encode(
    q: RaBitQ, centroids: np.ndarray, rotated: np.ndarray, x: np.ndarray, labels: np.ndarray
) -> np.ndarray:
    """`encode` of one chunk of rows (`rotated`: the rotated centroids)."""
    n, dim = x.shape
    c = centroids[labels]
    residual = (x - c).astype(F)
    rot = q.rotate(residual)
    crot = rotated[labels]
    if q.metric == "dot":
        norm = seq_sum(residual * residual)
    else:  # the IVF's float32 distance to the centroid
        norm = l2_lanes(residual)
    positive = ~np.signbit(rot)
    g = np.where(positive, F(0.5), F(-0.5)).astype(F)
    b_res = seq_sum(rot * g)
    b_cent = seq_sum(crot * g)
    rc = seq_sum(rot * crot)
    two = F(2) if q.metric != "dot" else F(1)
    base = norm if q.metric != "dot" else (F(1) - rc).astype(F)
    add = (base + (two * _ratio((norm * b_cent).astype(F), b_res)).astype(F)).astype(F)
    scale = _ratio((-two * norm).astype(F), b_res)
    error = (two * _error(norm, b_res, dim)).astype(F)
    parts = [np.packbits(positive, axis=1, bitorder="little"), _bytes(add, scale, error)]
    if q.num_bits > 1:
        eb = q.num_bits - 1
        ex, ex_res = _ex_codes(rot, eb)
        full = (positive.astype(np.int64) << eb) + ex.astype(np.int64)
        grid = (full.astype(F) + F(-((1 << eb) - 0.5))).astype(F)
        ex_cent = seq_sum(crot * grid)
        add_ex = (base + (two * _ratio((norm * ex_cent).astype(F), ex_res)).astype(F)).astype(F)
        scale_ex = _ratio((-two * norm).astype(F), ex_res)
        parts += [ex, _bytes(add_ex, scale_ex)]
    out = np.concatenate(parts, axis=1)
    assert out.shape == (n, record_width(q.dimension, q.num_bits))
    return out


def partition_table(q: RaBitQ, ids: np.ndarray, records: np.ndarray, schema: pa.Schema) -> pa.Table:
    """One partition's rows of `auxiliary.idx` from their records (row id order)."""
    width = q.dimension // 8
    at = width + 4 * len(FACTORS)
    signs = _pack_signs(records[:, :width])
    factors = records[:, width:at].copy().view("<f4")
    columns = [
        pa.array(ids, pa.uint64()),
        pa.FixedSizeListArray.from_arrays(pa.array(signs.reshape(-1)), width),
        *(pa.array(factors[:, i]) for i in range(len(FACTORS))),
    ]
    if q.num_bits > 1:
        ex = _pack_ex(records[:, at : at + q.dimension], q.num_bits - 1)
        ex_factors = records[:, at + q.dimension :].copy().view("<f4")
        columns.append(pa.FixedSizeListArray.from_arrays(pa.array(ex.reshape(-1)), _ex_bytes(q)))
        columns += [pa.array(ex_factors[:, i]) for i in range(len(EX_FACTORS))]
    return pa.table(columns, schema=schema)


def records_of(q: RaBitQ, table: pa.Table, where: str) -> tuple[np.ndarray, np.ndarray]:
    """A partition's row ids and records from its `auxiliary.idx` columns (codes unpacked):
    to pack them again after its rows are remapped."""
    stored = stored_codes(q, table, where)
    parts = [stored.signs, _bytes(*stored.factors.T)]
    if stored.ex is not None and stored.ex_factors is not None:
        parts += [stored.ex.astype(np.uint8), _bytes(*stored.ex_factors.T)]
    return stored.row_ids, np.concatenate(parts, axis=1)


def storage_json(q: RaBitQ) -> str:
    """The `storage_metadata` schema metadata value: a JSON list of one JSON string."""
    return json.dumps([json.dumps(storage_metadata(q), separators=(",", ":"))])


# -- codes ------------------------------------------------------------------------------------
def _ex_codes(rot: np.ndarray, eb: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's extended codes (rows x dim, 0 .. 2^eb - 1, the complement for negative
    dimensions) and `sum(rot * grid)` over its full code's grid points
    (`_kernels.rq_ex_codes`: the rescale of the row's unit magnitudes whose codes
    floor(t * a + 1e-5) have the largest <code + 1/2, a> / |code + 1/2|, found by sweeping t
    through the points where a dimension's code steps up, points at the same t in the order
    pylance's unstable sort leaves them: that order moves the float32 sums at a near-tie)."""
    rot = np.ascontiguousarray(rot, dtype=F)
    codes = np.empty(rot.shape, np.uint8)
    dots = np.empty(len(rot), F)
    _kernels.rq_ex_codes(rot, rot.shape[1], eb, codes, dots)
    return codes, dots


# -- factors ----------------------------------------------------------------------------------
def _ratio(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x / y, 0 where y is 0 (float32)."""
    safe = np.where(y == 0, F(1), y).astype(F)
    return np.where(y == 0, F(0), (x / safe).astype(F)).astype(F)


def _error(norm: np.ndarray, b_res: np.ndarray, dim: int) -> np.ndarray:
    """The lower bound's error term: sqrt(N) * 1.9 * sqrt(max(N * D/4 / B^2 - 1, 0) / (D - 1)),
    0 where D <= 1, N <= 0 or B = 0."""
    if dim <= 1:
        return np.zeros(len(norm), F)
    ok = (norm > 0) & (b_res != 0)
    b_sq = np.where(ok, (b_res * b_res).astype(F), F(1)).astype(F)
    align = ((norm * F(dim * 0.25)).astype(F) / b_sq).astype(F)
    angle = np.sqrt((np.maximum((align - F(1)).astype(F), F(0)) / F(dim - 1)).astype(F))
    err = ((np.sqrt(np.maximum(norm, F(0))) * F(1.9)).astype(F) * angle.astype(F)).astype(F)
    return np.where(ok, err, F(0)).astype(F)


def _bytes(*columns: np.ndarray) -> np.ndarray:
    """Float32 columns side by side as rows of little-endian bytes."""
    return np.ascontiguousarray(np.stack(columns, axis=1).astype("<f4")).view(np.uint8)


# -- packing ----------------------------------------------------------------------------------
def _pack_signs(codes: np.ndarray) -> np.ndarray:
    """A partition's sign codes (rows x dim/8) as pylance packs them: rows in whole blocks
    of 32 as nibble groups (rows paired 16 apart, in `_PERM` order), the rest transposed;
    the inverse of `rq._unpack_signs`."""
    n, width = codes.shape
    out = np.empty(n * width, np.uint8)
    full = n // _BLOCK
    if full:
        block = codes[: full * _BLOCK].reshape(full, _BLOCK, width).transpose(0, 2, 1)
        low, high = block & 0xF, block >> 4
        packed = np.empty((full, width, _BLOCK), np.uint8)
        packed[..., :16] = low[..., _PERM] | (low[..., _PERM + 16] << 4)
        packed[..., 16:] = high[..., _PERM] | (high[..., _PERM + 16] << 4)
        out[: full * _BLOCK * width] = packed.reshape(-1)
    if n > full * _BLOCK:
        out[full * _BLOCK * width :] = codes[full * _BLOCK :].T.reshape(-1)
    return out.reshape(n, width)


def _ex_bytes(q: RaBitQ) -> int:
    """Bytes a row's extended codes take: `8 * eb` per block of 64 dimensions."""
    return -(-q.dimension // 64) * 8 * (q.num_bits - 1)


def _pack_ex(ex: np.ndarray, eb: int) -> np.ndarray:
    """Extended codes (rows x dim) in pylance's blocks of 64 dimensions (`8 * eb` bytes
    each, the last block padded with zero codes); the inverse of `rq._unpack_ex`."""
    n, dim = ex.shape
    blocks = -(-dim // 64)
    v = np.zeros((n, blocks, 64), np.uint64)
    v.reshape(n, blocks * 64)[:, :dim] = ex
    out = np.zeros((n, blocks, 8 * eb), np.uint64)

    def top(bit: int) -> np.ndarray:  # one bit of every code, as a little-endian u64
        plane = (((v >> np.uint64(bit)) & np.uint64(1)) << _TOP).sum(axis=-1, dtype=np.uint64)
        return plane[..., None] >> (np.arange(8, dtype=np.uint64) * np.uint64(8)) & np.uint64(255)

    if eb == 1:
        out[:] = np.packbits(v.astype(np.uint8), axis=-1, bitorder="little")
    elif eb in (2, 3):
        for k in range(4):
            out[..., :16] |= (v[..., 16 * k : 16 * k + 16] & np.uint64(3)) << np.uint64(2 * k)
        if eb == 3:
            out[..., 16:24] = top(2)
    elif eb == 4:
        for u in range(4):
            lo, hi = v[..., 16 * u : 16 * u + 8], v[..., 16 * u + 8 : 16 * u + 16]
            out[..., 8 * u : 8 * u + 8] = (lo & np.uint64(15)) | (
                (hi & np.uint64(15)) << np.uint64(4)
            )
    elif eb == 5:
        for k in range(2):
            lo, hi = v[..., 32 * k : 32 * k + 16], v[..., 32 * k + 16 : 32 * k + 32]
            out[..., 16 * k : 16 * k + 16] = (lo & np.uint64(15)) | (
                (hi & np.uint64(15)) << np.uint64(4)
            )
        out[..., 32:40] = top(4)
    elif eb in (6, 7):
        for k in range(3):
            rest = (v[..., 48:64] >> np.uint64(2 * k)) & np.uint64(3)
            out[..., 16 * k : 16 * k + 16] = (v[..., 16 * k : 16 * k + 16] & np.uint64(63)) | (
                rest << np.uint64(6)
            )
        if eb == 7:
            out[..., 48:56] = top(6)
    else:
        out[:] = v
    return out.astype(np.uint8).reshape(n, blocks * 8 * eb)
