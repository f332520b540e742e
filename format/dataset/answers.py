"""Searches answered as one table (MinHash searches, searches filtered by searches): their
batches, reader and row count, all from `to_table`."""

from __future__ import annotations

import abc
from collections.abc import Iterator

import pyarrow as pa


class TableAnswer(abc.ABC):
    """A search whose rows come as one table: subclasses give `schema` and `to_table`."""

    schema: pa.Schema

    @abc.abstractmethod
    def to_table(self) -> pa.Table:
        """The whole answer."""

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The answer as record batches."""
        yield from self.to_table().to_batches()

    def to_reader(self) -> pa.RecordBatchReader:
        """The answer as a record batch reader."""
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def count_rows(self) -> int:
        """The answer's rows."""
        return self.to_table().num_rows
