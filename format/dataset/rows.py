"""`RowSource`: a batch stream handed out by row counts, across batch boundaries.

Schema evolution lines new column data up with each fragment's live rows, and compaction
cuts the live rows of several fragments into new fragments of chosen sizes; both take
"the next n rows" from one stream.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from quiver.format.errors import LanceError


class RowSource:
    """The rows of `batches`, taken `n` at a time; empty batches are skipped. `short` and
    `long` are the messages of `error` when the stream has fewer or more rows than taken."""

    def __init__(
        self,
        batches: Iterator[pa.RecordBatch],
        *,
        short: str,
        long: str,
        error: type[Exception] = LanceError,
    ) -> None:
        self._batches = batches
        self._pending: pa.RecordBatch | None = None
        self._short, self._long, self._error = short, long, error

    def _next(self) -> pa.RecordBatch | None:
        if self._pending is not None:
            batch, self._pending = self._pending, None
            return batch
        for batch in self._batches:
            if batch.num_rows:
                return batch
        return None

    def take(self, n: int) -> Iterator[pa.RecordBatch]:
        """The next `n` rows, as slices of the stream's batches (error if fewer are left)."""
        while n > 0:
            batch = self._next()
            if batch is None:
                raise self._error(self._short)
            if batch.num_rows > n:
                self._pending = batch.slice(n)
                batch = batch.slice(0, n)
            n -= batch.num_rows
            yield batch

    def exhausted(self) -> bool:
        """Whether no row is left."""
        batch = self._next()
        self._pending = batch
        return batch is None

    def check_exhausted(self) -> None:
        """Raise `error(long)` if rows are left."""
        if not self.exhausted():
            raise self._error(self._long)
