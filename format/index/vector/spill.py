"""The encoded rows of a vector index build, grouped by partition for writing.

Every row's partition and row id are kept in memory (12 bytes a row). Its storage row (a PQ
code, or for IVF_FLAT and IVF_SQ the whole vector or its byte codes) is kept in memory while
the rows are small, and otherwise appended to one of a few temporary files, each holding a
contiguous range of partitions: writing the index then reads one file at a time, so a build
holds about 1/`BUCKETS` of its storage at once instead of all of it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import numpy as np

__all__ = ["EncodedRows"]

# Storage rows kept in memory up to this many bytes; beyond, they go to temporary files.
IN_MEMORY_BYTES = 64 << 20
BUCKETS = 32


class EncodedRows:
    """Rows as a build encodes them, batch by batch; `partitions()` gives them back
    partition by partition, rows by row id within one."""

    def __init__(self, num_partitions: int, width: int, dtype: np.dtype) -> None:
        self.num_partitions = num_partitions
        self.width = width
        self.dtype = np.dtype(dtype)
        self._labels: list[np.ndarray] = []
        self._ids: list[np.ndarray] = []
        self._rows: list[np.ndarray] = []
        self._bytes = 0
        self._files: list[tempfile._TemporaryFileWrapper] | None = None
        # per bucket: the position (among every row added) of each row its file holds
        self._positions: list[list[np.ndarray]] = []
        self._added = 0

    def add(self, labels: np.ndarray, row_ids: np.ndarray, rows: np.ndarray) -> None:
        """One batch: each row's partition, row id and storage row."""
        labels = np.asarray(labels, dtype=np.int32)
        rows = np.ascontiguousarray(rows, dtype=self.dtype).reshape(len(labels), self.width)
        if self._files is None and self._bytes + rows.nbytes > IN_MEMORY_BYTES:
            self._spill_all()
        if self._files is None:
            self._rows.append(rows)
            self._bytes += rows.nbytes
        else:
            self._spill(labels, rows, self._added)
        self._labels.append(labels)
        self._ids.append(np.asarray(row_ids, dtype=np.uint64))
        self._added += len(labels)

    def _bucket(self, labels: np.ndarray) -> np.ndarray:
        return (labels.astype(np.int64) * BUCKETS) // max(self.num_partitions, 1)

    def _spill_all(self) -> None:
        self._files = [tempfile.TemporaryFile(prefix="quiver-index-") for _ in range(BUCKETS)]
        self._positions = [[] for _ in range(BUCKETS)]
        start = 0
        for labels, rows in zip(self._labels, self._rows, strict=True):
            self._spill(labels, rows, start)
            start += len(labels)
        self._rows, self._bytes = [], 0

    def _spill(self, labels: np.ndarray, rows: np.ndarray, start: int) -> None:
        assert self._files is not None
        buckets = self._bucket(labels)
        order = np.argsort(buckets, kind="stable")
        counts = np.bincount(buckets, minlength=BUCKETS)
        ends = np.cumsum(counts)
        for b in np.flatnonzero(counts):
            picked = order[ends[b] - counts[b] : ends[b]]
            self._files[b].write(rows[picked].tobytes())
            self._positions[b].append(picked + start)

    @property
    def labels(self) -> np.ndarray:
        """Every row's partition, in the order added."""
        return np.concatenate(self._labels) if self._labels else np.empty(0, np.int32)

    @property
    def row_ids(self) -> np.ndarray:
        """Every row's row id, in the order added."""
        return np.concatenate(self._ids) if self._ids else np.empty(0, np.uint64)

    def lengths(self) -> np.ndarray:
        """Rows per partition."""
        return np.bincount(self.labels, minlength=self.num_partitions).astype(np.int64)

    def partitions(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(row ids, storage rows) of each non-empty partition, in partition order, rows by
        row id within one."""
        labels, ids = self.labels, self.row_ids
        if self._files is None:
            rows = (
                np.concatenate(self._rows) if self._rows else np.empty((0, self.width), self.dtype)
            )
            yield from _grouped(labels, ids, np.arange(len(labels)), rows)
            return
        for f, positions in zip(self._files, self._positions, strict=True):
            if not positions:
                continue
            where = np.concatenate(positions)
            f.seek(0)
            rows = np.frombuffer(f.read(), dtype=self.dtype).reshape(len(where), self.width)
            yield from _grouped(labels[where], ids[where], np.arange(len(where)), rows)

    def close(self) -> None:
        """Remove the temporary files."""
        for f in self._files or []:
            f.close()
        self._files = None
        self._rows = []


def _grouped(
    labels: np.ndarray, ids: np.ndarray, index: np.ndarray, rows: np.ndarray
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    order = np.lexsort((ids, labels))
    labels, ids, index = labels[order], ids[order], index[order]
    cuts = np.flatnonzero(labels[1:] != labels[:-1]) + 1
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(labels)], strict=True):
        if hi > lo:
            yield ids[lo:hi], rows[index[lo:hi]]
