"""The IVF model of a vector index: centroids, and where each partition's rows are.

`index.idx` keeps the centroids (global buffer named by the `lance:ivf` metadata key);
`auxiliary.idx` keeps the partition layout of its rows (offsets and lengths) the same way.
A query probes the partitions whose centroids are nearest, nearest first (cosine indices
compare normalised vectors by l2).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from google.protobuf.message import DecodeError

from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.index.files import IndexFile
from quiver.format.proto import index_pb2

IVF_KEY = "lance:ivf"
_DTYPES = {
    index_pb2.Tensor.FLOAT16: "<f2",
    index_pb2.Tensor.FLOAT32: "<f4",
    index_pb2.Tensor.FLOAT64: "<f8",
    index_pb2.Tensor.UINT8: "u1",
    index_pb2.Tensor.UINT16: "<u2",
    index_pb2.Tensor.UINT32: "<u4",
    index_pb2.Tensor.UINT64: "<u8",
}


def tensor_array(t: index_pb2.Tensor, where: str) -> np.ndarray:
    """A Tensor message as a numpy array of its shape."""
    dtype = _DTYPES.get(t.data_type)
    if dtype is None:
        raise UnsupportedFeatureError(f"{where}: tensor of type {t.data_type} is not supported")
    shape = [int(s) for s in t.shape]
    values = np.frombuffer(t.data, dtype=dtype)
    if int(np.prod(shape)) != len(values):
        raise CorruptFileError(where, f"tensor of shape {shape} holds {len(values)} values")
    return values.reshape(shape)


def read_message(file: IndexFile, key: str, message: type) -> object:
    """The protobuf message in the global buffer whose position metadata `key` gives."""
    text = file.text(key)
    try:
        position = int(text)
    except ValueError:
        raise CorruptFileError(file.path, f"{key!r} is not a buffer position: {text!r}") from None
    try:
        return message.FromString(file.global_buffer(position))
    except DecodeError as e:
        raise CorruptFileError(file.path, f"bad {message.__name__} message: {e}") from None


@dataclass(frozen=True)
class IvfModel:
    """Centroids (partitions x dim) and the partition layout of the quantized rows."""

    centroids: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    loss: float = 0.0  # the k-means loss recorded with the centroids

    @classmethod
    def read(cls, index: IndexFile, storage: IndexFile) -> IvfModel:
        """The centroids of `index.idx` with the partition layout of `auxiliary.idx`."""
        ivf = read_message(index, IVF_KEY, index_pb2.IVF)
        if ivf.HasField("centroids_tensor") and ivf.centroids_tensor.shape:
            centroids = tensor_array(ivf.centroids_tensor, index.path)
        else:
            raise UnsupportedFeatureError(
                f"{index.path}: an IVF model without a centroid tensor (legacy index format)"
            )
        layout = read_message(storage, IVF_KEY, index_pb2.IVF)
        offsets = np.asarray(layout.offsets, dtype=np.int64)
        lengths = np.asarray(layout.lengths, dtype=np.int64)
        parts = len(centroids)
        if len(offsets) != parts or len(lengths) != parts:
            raise CorruptFileError(
                storage.path,
                f"{len(offsets)} partition offsets and {len(lengths)} lengths "
                f"for {parts} centroids",
            )
        if parts and int((offsets + lengths).max()) > storage.num_rows:
            raise CorruptFileError(storage.path, "a partition lies past the end of the file")
        loss = float(ivf.loss) if ivf.HasField("loss") else 0.0
        return cls(centroids.astype(np.float32, copy=False), offsets, lengths, loss)

    @property
    def num_partitions(self) -> int:
        return len(self.centroids)

    @property
    def dimension(self) -> int:
        return int(self.centroids.shape[1])

    @cached_property
    def centroids64(self) -> np.ndarray:
        """The centroids in float64 (distances to them are computed in float64)."""
        return self.centroids.astype(np.float64)

    @cached_property
    def _norms(self) -> np.ndarray:
        return np.einsum("ij,ij->i", self.centroids64, self.centroids64)

    def distances(self, queries: np.ndarray, metric: str) -> np.ndarray:
        """(queries, partitions) float64 distances to the centroids; cosine indices rank by
        l2 on normalised vectors."""
        q = queries.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            dots = q @ self.centroids64.T
            if metric == "dot":
                return 1.0 - dots
            qq = np.einsum("ij,ij->i", q, q)[:, None]
            return np.maximum(qq + self._norms[None, :] - 2.0 * dots, 0.0)


def nearest_first(dist: np.ndarray, depth: int) -> np.ndarray:
    """Per row of `dist` (queries x partitions), the `depth` nearest partitions, nearest
    first, ties by partition (a stable sort's order, without sorting every partition)."""
    parts = dist.shape[1]
    depth = min(depth, parts)
    if depth * 4 >= parts:
        return np.argsort(dist, axis=1, kind="stable")[:, :depth]
    if depth == 0:
        return np.empty((len(dist), 0), dtype=np.intp)
    chosen = np.argpartition(dist, depth - 1, axis=1)[:, :depth]
    d = np.take_along_axis(dist, chosen, axis=1)
    out = np.take_along_axis(chosen, np.lexsort((chosen, d), axis=1), axis=1)
    # the cut fell inside a run of equal distances: the stable sort may keep other partitions
    kth = d.max(axis=1, keepdims=True)
    tied = (dist == kth).sum(axis=1) != (d == kth).sum(axis=1)
    if tied.any():
        out[tied] = np.argsort(dist[tied], axis=1, kind="stable")[:, :depth]
    return out
