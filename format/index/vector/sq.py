"""Scalar quantization (IVF_SQ): every value of a vector as one byte over the index's bounds.

A value v is stored as trunc((v - start) * 255 / (end - start)), saturated to [0, 255]. For
l2 (and cosine, on normalised vectors) pylance quantizes the query the same way and scales
the squared distance between codes back by (end - start)^2 / 255^2; for dot it compares the
float query with the codes mapped back to values: 1 - q.(start + code * (end - start) / 255).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from quiver.format import _kernels
from quiver.format.errors import CorruptFileError, UnsupportedFeatureError

CODE_COLUMN = "__sq_code"


@dataclass(frozen=True)
class ScalarQuantizer:
    """The bounds of an IVF_SQ index and its metric."""

    start: float
    end: float
    dimension: int
    metric: str

    column = CODE_COLUMN
    residual = False

    @classmethod
    def read(cls, meta: dict, metric: str, where: str) -> ScalarQuantizer:
        """The quantizer `storage_metadata` describes."""
        try:
            bits = int(meta["num_bits"])
            start, end = float(meta["bounds"]["start"]), float(meta["bounds"]["end"])
            dim = int(meta["dim"])
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptFileError(where, f"SQ metadata lacks {e}") from None
        if bits != 8:
            raise UnsupportedFeatureError(f"{where}: SQ with {bits}-bit codes is not supported")
        return cls(start, end, dim, metric)

    def load(self, codes: pa.FixedSizeListArray, where: str) -> np.ndarray:
        """A partition's codes as (rows, dim) uint8."""
        d = self.dimension
        if codes.type.list_size != d:
            raise CorruptFileError(where, f"SQ codes of {codes.type.list_size} bytes, not {d}")
        flat = codes.values.to_numpy(zero_copy_only=False)[codes.offset * d :][: len(codes) * d]
        return flat.reshape(len(codes), d)

    def _quantize(self, queries: np.ndarray) -> np.ndarray:
        span = self.end - self.start
        if span == 0:
            return np.zeros(queries.shape, dtype=np.float64)
        scaled = (queries.astype(np.float64) - self.start) * 255.0 / span
        return np.trunc(np.clip(np.nan_to_num(scaled, nan=0.0), 0.0, 255.0))

    def row_bias(self, codes: np.ndarray, centroid: np.ndarray) -> None:
        """No per-row term: codes are compared with the query as they are."""
        return None

    def prepare(self, queries: np.ndarray) -> np.ndarray:
        """The queries (n, dim) float64 as compared with codes: quantized like them (l2,
        cosine), or as they are (dot)."""
        return queries.astype(np.float64) if self.metric == "dot" else self._quantize(queries)

    def base(self, queries: np.ndarray, centroids: np.ndarray) -> np.ndarray:
        """No per-pair term."""
        return np.zeros(len(queries))

    @property
    def kernel_params(self) -> tuple[int, float, float, float]:
        """The kind and constants of `_kernels.ivf_topk`: the float32 scale of a squared code
        distance (span^2 / 255^2) and, for dot, the value of code c: start + c * span / 255."""
        span = np.float32(self.end - self.start)
        scale = span * span / np.float32(255.0 * 255.0)
        return _kernels.IVF_SQ, float(scale), float(self.start), float(span) / 255.0
