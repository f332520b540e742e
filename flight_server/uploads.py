"""An uploaded stream (DoPut) as a reader that checks each batch and notices a cut or
cancelled upload, so that whatever consumes it fails and removes what it wrote."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from quiver.flight_server.errors import InvalidArgument, QuiverError


class StreamBroken(Exception):
    """The client's stream ended in an error."""


def checked_stream(
    schema: pa.Schema, batches: Iterable[pa.RecordBatch], cancelled: Callable[[], bool]
) -> pa.RecordBatchReader:
    """The batches as a reader that fails (so written files are removed) on a cut stream
    or on a batch that is not valid Arrow data (before any native code walks it)."""

    def checked() -> Iterator[pa.RecordBatch]:
        it = iter(batches)
        for number in itertools.count(1):
            if cancelled():
                raise StreamBroken
            try:
                batch = next(it)
            except StopIteration:
                break
            except QuiverError:  # a source of rows (a SQL query) refusing with its reason
                raise
            except Exception:  # noqa: BLE001 - any failure to read means a broken upload
                raise StreamBroken from None
            try:
                batch.validate(full=True)
            except pa.ArrowException as e:
                raise InvalidArgument(
                    f"uploaded batch {number} is not valid Arrow data: {e}"
                ) from None
            yield batch
        if cancelled():
            raise StreamBroken

    return pa.RecordBatchReader.from_batches(schema, checked())


def uploaded_batches(
    reader: Any, counted: Callable[[int], None] | None = None
) -> Iterator[pa.RecordBatch]:
    """The record batches of a DoPut's reader (a `MetadataRecordBatchReader`), metadata-only
    messages skipped; `counted(nbytes)` is told each batch's size."""
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            return
        if chunk.data is not None:
            if counted is not None:
                counted(chunk.data.nbytes)
            yield chunk.data
