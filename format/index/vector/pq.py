"""Product quantization (IVF_PQ): each vector is m codes, one per sub-vector, each naming one
of 256 centroids of its sub-space (the codebook, a tensor in a global buffer of
`auxiliary.idx`).

pylance stores each partition's codes transposed (all rows' first code, then all rows'
second...) and, for l2 and cosine, quantizes the residual of a vector from its partition's
centroid (cosine on normalised vectors, by l2). A query's distance to a row is the sum over
sub-vectors of a table of distances from the query's sub-vector to every centroid; for dot
the table holds 1 - q.c per sub-vector, so m - 1 is taken off the sum to make it 1 - q.x.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa

from format.errors import CorruptFileError, UnsupportedFeatureError
from format.index.files import IndexFile
from format.index.vector.ivf import tensor_array
from format.proto import index_pb2

CODE_COLUMN = "__pq_code"


@dataclass(frozen=True)
class ProductQuantizer:
    """The codebook (m, 256, dim / m) of an IVF_PQ index and its metric."""

    codebook: np.ndarray
    metric: str

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
        if bits != 8:
            raise UnsupportedFeatureError(f"{where}: PQ with {bits}-bit codes is not supported")
        if not meta.get("transposed", False):
            raise UnsupportedFeatureError(f"{where}: PQ codes stored row by row (legacy layout)")
        if m <= 0 or dim % m:
            raise CorruptFileError(where, f"{m} sub-vectors do not divide dimension {dim}")
        try:
            tensor = index_pb2.Tensor.FromString(storage.global_buffer(position))
        except Exception as e:  # noqa: BLE001 - a protobuf decode error of any kind
            raise CorruptFileError(where, f"bad PQ codebook: {e}") from None
        values = tensor_array(tensor, where).astype(np.float32, copy=False)
        if values.size != m * 256 * (dim // m):
            raise CorruptFileError(
                where, f"codebook of {values.size} values for {m} x 256 x {dim // m}"
            )
        return cls(values.reshape(m, 256, dim // m), metric)

    @cached_property
    def _codebook64(self) -> tuple[np.ndarray, np.ndarray]:
        """The codebook transposed for products, (m, sub, 256), and its centroids' squared
        norms (m, 256), in float64."""
        cb = self.codebook.astype(np.float64)
        return np.ascontiguousarray(cb.transpose(0, 2, 1)), np.einsum("mcs,mcs->mc", cb, cb)

    @property
    def num_sub_vectors(self) -> int:
        return int(self.codebook.shape[0])

    @property
    def residual(self) -> bool:
        """Whether codes quantize the residual from the partition centroid."""
        return self.metric in ("l2", "cosine")

    def load(self, codes: pa.FixedSizeListArray, where: str) -> np.ndarray:
        """A partition's codes as (m, rows) uint8."""
        m = self.num_sub_vectors
        if codes.type.list_size != m:
            raise CorruptFileError(where, f"PQ codes of {codes.type.list_size} bytes, not {m}")
        flat = codes.values.to_numpy(zero_copy_only=False)[codes.offset * m :][: len(codes) * m]
        return np.ascontiguousarray(flat.reshape(m, len(codes)))

    def prepare(self, queries: np.ndarray, centroids: np.ndarray) -> np.ndarray:
        """Distance tables (n, m * 256) of n (query, partition centroid) pairs at once."""
        m, sub = self.codebook.shape[0], self.codebook.shape[2]
        q = queries - centroids if self.residual else queries
        parts = q.reshape(len(q), m, sub).astype(np.float64).transpose(1, 0, 2)  # (m, n, sub)
        cb_t, cc = self._codebook64
        dots = np.matmul(parts, cb_t)  # (m, n, 256)
        if self.metric == "dot":
            table = 1.0 - dots
        else:
            qq = np.einsum("mqs,mqs->mq", parts, parts)[:, :, None]
            table = np.maximum(qq + cc[:, None, :] - 2.0 * dots, 0.0)
        return np.ascontiguousarray(table.astype(np.float32).transpose(1, 0, 2)).reshape(len(q), -1)

    def score(self, tables: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """(pairs, rows) distances: each pair's table summed over the rows' codes."""
        m = self.codebook.shape[0]
        # one gather of every (sub-vector, code) entry, summed over sub-vectors
        index = codes.astype(np.intp) + (np.arange(m, dtype=np.intp) * 256)[:, None]
        dist = tables[:, index].sum(axis=1, dtype=np.float32)
        if self.metric == "dot":
            dist -= np.float32(m - 1)
        return dist
