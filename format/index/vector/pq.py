"""Product quantization (IVF_PQ): each vector is m codes, one per sub-vector, each naming one
of 256 (8-bit codes) or 16 (4-bit codes, two a byte) centroids of its sub-space (the
codebook, a tensor in a global buffer of `auxiliary.idx`). A 4-bit codebook is kept padded to
256 entries per sub-vector, its codes unpacked to a byte each: searches run the same kernel.

pylance stores each partition's codes transposed (all rows' first code, then all rows'
second...; they are kept row by row here: the search kernel streams one run of codes) and,
for l2 and cosine, quantizes the residual of a vector from its partition's centroid c
(cosine on normalised vectors, by l2). A query's distance to a row x = c + b (b
the codebook entries its codes name) is then, split so that no table depends on the pair of
query and partition:

    |q - c - b|^2 = |q - c|^2  +  sum_j (|b_j|^2 + 2 c_j.b_j)  -  2 sum_j q_j.b_j
                    per pair      per row ("bias", kept with      per query: one table
                                  the partition's codes)          (m, 256) summed over codes

For dot the table holds -q_j.b_j and the pair's base is 1: 1 - q.x. Tables and biases are
float64, so the distance is exact to float32, the type of `_distance`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa

from quiver.format import _kernels
from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.index.files import IndexFile
from quiver.format.index.vector.ivf import tensor_array
from quiver.format.proto import index_pb2

CODE_COLUMN = "__pq_code"


@dataclass(frozen=True)
class ProductQuantizer:
    """The codebook (m, 256, dim / m: 4-bit ones padded) of an IVF_PQ index, its metric, its
    code width in bits and whether the file holds each partition's codes transposed (as
    pylance's builds do; the segments of its distributed builds hold them row by row)."""

    codebook: np.ndarray
    metric: str
    bits: int = 8
    transposed: bool = True

    column = CODE_COLUMN

    @classmethod
    def read(cls, storage: IndexFile, meta: dict, metric: str) -> ProductQuantizer:
        """The quantizer `storage_metadata` describes, with its codebook buffer."""
        where = storage.path
        try:
            bits, m, dim = int(meta["nbits"]), int(meta["num_sub_vectors"]), int(meta["dimension"])
            position = int(meta["codebook_position"])
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptFileError(where, f"PQ metadata lacks {e}: {json.dumps(meta)}") from None
        if bits not in (4, 8):
            raise UnsupportedFeatureError(f"{where}: PQ with {bits}-bit codes is not supported")
        if m <= 0 or dim % m or (bits == 4 and m % 2):
            raise CorruptFileError(where, f"{m} sub-vectors do not divide dimension {dim}")
        try:
            tensor = index_pb2.Tensor.FromString(storage.global_buffer(position))
        except Exception as e:  # noqa: BLE001 - a protobuf decode error of any kind
            raise CorruptFileError(where, f"bad PQ codebook: {e}") from None
        values = tensor_array(tensor, where).astype(np.float32, copy=False)
        k = 1 << bits
        if values.size != m * k * (dim // m):
            raise CorruptFileError(
                where, f"codebook of {values.size} values for {m} x {k} x {dim // m}"
            )
        book = np.zeros((m, 256, dim // m), dtype=np.float32)
        book[:, :k] = values.reshape(m, k, dim // m)
        return cls(book, metric, bits, bool(meta.get("transposed", False)))

    @cached_property
    def _codebook64(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The codebook (m, 256, sub), transposed for products (m, sub, 256), and its
        centroids' squared norms (m, 256), in float64."""
        cb = self.codebook.astype(np.float64)
        cb_t = np.ascontiguousarray(cb.transpose(0, 2, 1))
        return cb, cb_t, np.einsum("mcs,mcs->mc", cb, cb)

    @property
    def kernel_params(self) -> tuple[int, float, float, float]:
        """The storage kind and constants `_kernels.ivf_topk` takes."""
        return _kernels.IVF_PQ, 0.0, 0.0, 0.0

    @property
    def num_sub_vectors(self) -> int:
        return int(self.codebook.shape[0])

    @property
    def residual(self) -> bool:
        """Whether codes quantize the residual from the partition centroid."""
        return self.metric in ("l2", "cosine")

    def load(self, codes: pa.FixedSizeListArray, where: str) -> np.ndarray:
        """A partition's codes as (rows, m) uint8, from the file's layout."""
        m = self.num_sub_vectors
        width = m if self.bits == 8 else m // 2
        if codes.type.list_size != width:
            raise CorruptFileError(where, f"PQ codes of {codes.type.list_size} bytes, not {width}")
        flat = codes.values.to_numpy(zero_copy_only=False)[codes.offset * width :]
        flat = flat[: len(codes) * width]
        rows = flat.reshape(width, len(codes)).T if self.transposed else flat.reshape(-1, width)
        if self.bits == 4:  # two codes a byte, the even sub-vector's in the low nibble
            out = np.empty((len(codes), m), dtype=np.uint8)
            out[:, 0::2] = rows & 0x0F
            out[:, 1::2] = rows >> 4
            return out
        return np.ascontiguousarray(rows)

    def row_bias(self, codes: np.ndarray, centroid: np.ndarray) -> np.ndarray | None:
        """Per row of a partition ((rows, m) codes), sum_j |b_j|^2 + 2 c_j.b_j (residual
        metrics; None for dot)."""
        if not self.residual:
            return None
        cb, _, cc = self._codebook64
        m, sub = cb.shape[0], cb.shape[2]
        centre = centroid.astype(np.float64).reshape(m, sub)
        terms = cc + 2.0 * np.einsum("mcs,ms->mc", cb, centre)  # (m, 256)
        return terms[np.arange(m), codes].sum(axis=1)

    def prepare(self, queries: np.ndarray) -> np.ndarray:
        """Each query's table (n, m * 256) float64: -2 q_j.b (residual metrics) or -q_j.b."""
        m, sub = self.codebook.shape[0], self.codebook.shape[2]
        parts = queries.astype(np.float64).reshape(len(queries), m, sub).transpose(1, 0, 2)
        dots = np.matmul(parts, self._codebook64[1])  # (m, n, 256)
        dots *= -2.0 if self.residual else -1.0
        return np.ascontiguousarray(dots.transpose(1, 0, 2)).reshape(len(queries), -1)

    def base(self, queries: np.ndarray, centroids: np.ndarray) -> np.ndarray:
        """Per (query, partition centroid) pair, the term the codes do not give: |q - c|^2
        (residual metrics) or 1 (dot)."""
        if not self.residual:
            return np.ones(len(queries))
        diff = queries.astype(np.float64) - centroids
        return np.einsum("ij,ij->i", diff, diff)
