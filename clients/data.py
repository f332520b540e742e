"""What `Client.write` and `Client.stage` accept, as an Arrow schema and record batches."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeAlias

import pyarrow as pa

DataLike: TypeAlias = Any
"""What `write` and `stage` take: a `pyarrow.Table`, `RecordBatch` or `RecordBatchReader`,
an iterable of record batches, a mapping of column name to values, a list of row dicts, a
pandas DataFrame, or any object exporting the Arrow C stream interface."""

BATCH_ROWS = 64 * 1024  # rows per uploaded record batch


def to_batches(data: DataLike) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The schema and record batches of anything `write` accepts."""
    if isinstance(data, pa.Table):
        return data.schema, iter(data.to_batches(max_chunksize=BATCH_ROWS))
    if isinstance(data, pa.RecordBatch):
        return data.schema, iter([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, iter(data)
    if isinstance(data, Mapping):
        return to_batches(pa.table(dict(data)))
    if type(data).__module__.split(".")[0] == "pandas" and hasattr(data, "columns"):
        return to_batches(pa.Table.from_pandas(data, preserve_index=False))
    if hasattr(data, "__arrow_c_stream__"):
        return to_batches(pa.RecordBatchReader.from_stream(data))
    if isinstance(data, list) and (not data or isinstance(data[0], Mapping)):
        if not data:
            raise TypeError("cannot write an empty list of rows: its schema is unknown")
        return to_batches(pa.Table.from_pylist(data))
    if isinstance(data, Iterable):
        it = iter(data)
        try:
            first = next(it)
        except StopIteration:
            raise TypeError(
                "cannot write an empty iterable of batches: its schema is unknown"
            ) from None
        if not isinstance(first, pa.RecordBatch):
            raise TypeError(f"expected record batches, got {type(first).__name__}")

        def chained() -> Iterator[pa.RecordBatch]:
            yield first
            yield from it

        return first.schema, chained()
    raise TypeError(f"cannot write {type(data).__name__}; give a pyarrow Table or batches")


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` with exactly `schema` (the server may differ only in schema metadata)."""
    if batch.schema.equals(schema, check_metadata=True):
        return batch
    if batch.schema.equals(schema, check_metadata=False):
        return pa.RecordBatch.from_arrays(batch.columns, schema=schema)
    return batch.cast(schema)
