"""pylance's `include_deleted_rows`: a scan of every physical row, the deleted ones
included with a null `_rowid` and `_rowaddr` (so they can be told apart), filtered, limited
and offset as a scan is; it needs `with_row_id`, as pylance's does.

With a filter, pylance answers only some plans (its late-materialising ones refuse the
option) and a scalar index built after a delete never saw the deleted rows; Quiver
evaluates the filter on every physical row, so it answers every filter, and where pylance
answers, the same rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.dataset.scan import Scanner
from quiver.format.errors import InvalidInputError
from quiver.format.expr import apply_filter

ROW_COLUMNS = ("_rowid", "_rowaddr")  # null on a deleted row


class DeletedRowsScan:
    """Every physical row of a scan's fragments that its filter matches, in order; deleted
    rows' `_rowid` and `_rowaddr` null."""

    def __init__(self, scan: Scanner, uri: str) -> None:
        if not scan._with_row_id:
            raise InvalidInputError(f"{uri}: include_deleted_rows is set but with_row_id is false")
        if scan._transforms is not None or scan._paths:
            raise InvalidInputError(
                f"{uri}: include_deleted_rows takes plain columns (no SQL projections or "
                "nested paths)"
            )
        self._scan = scan

    def _physical(self) -> Iterator[pa.RecordBatch]:
        """Every physical row with the columns the projection and filter read."""
        scan = self._scan
        read, read_schema, _, row_addr = scan._read_schema()
        for frag in scan._fragments:
            rows = frag.physical_rows
            if not rows:
                continue
            live = frag.live_mask
            start = 0
            for batch in frag.read_batches(
                read,
                read_schema,
                ranges=[(0, rows)],
                batch_size=scan._batch_size,
                with_row_id=True,
                with_row_address=row_addr,
                keep_deleted=True,
            ):
                stop = start + batch.num_rows
                if live is not None and not live[start:stop].all():
                    kept = pa.array(live[start:stop])
                    for name in ROW_COLUMNS:
                        at = batch.schema.get_field_index(name)
                        if at >= 0:
                            ids = pc.if_else(kept, batch.column(at), None)
                            batch = batch.set_column(at, batch.schema.field(at), ids)
                start = stop
                yield batch

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        scan = self._scan
        names = scan._schema.names
        skip, left = scan._offset, scan._limit
        for batch in self._physical():
            if scan._filter is not None:
                batch = apply_filter(scan._filterable(batch), scan._filter, names)
            else:
                batch = batch.select(names)
            if skip:
                cut = min(skip, batch.num_rows)
                batch, skip = batch.slice(cut), skip - cut
            if left is not None:
                if left <= 0:
                    return
                batch = batch.slice(0, left)
                left -= batch.num_rows
            if batch.num_rows:
                yield batch

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.to_batches()), schema=self._scan._schema)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self._scan._schema, self.to_batches())

    def count_rows(self) -> int:
        if self._scan._filter is None and self._scan._limit is None and not self._scan._offset:
            return int(sum(f.physical_rows for f in self._scan._fragments))
        return sum(b.num_rows for b in self.to_batches())


def wanted(options: dict[str, Any]) -> bool:
    """Whether a scan asks for deleted rows."""
    return bool(options.get("include_deleted_rows"))
