"""pylance's `include_deleted_rows`: a scan of every physical row, the deleted ones
included with a null `_rowid` and `_rowaddr` (so they can be told apart), as pylance
answers it; only without a filter (pylance refuses one) and with `with_row_id`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.dataset.scan import Scanner
from quiver.format.errors import InvalidInputError

ROW_COLUMNS = ("_rowid", "_rowaddr")  # null on a deleted row


class DeletedRowsScan:
    """Every physical row of a scan's fragments, in order; deleted rows' `_rowid` null."""

    def __init__(self, scan: Scanner, uri: str, *, filtered: bool) -> None:
        if filtered:
            raise InvalidInputError(f"{uri}: include_deleted_rows does not take a filter")
        if not scan._with_row_id:
            raise InvalidInputError(f"{uri}: include_deleted_rows is set but with_row_id is false")
        if scan._transforms is not None or scan._paths or scan._limit or scan._offset:
            raise InvalidInputError(
                f"{uri}: include_deleted_rows takes plain columns, no limit or offset"
            )
        self._scan = scan

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        scan = self._scan
        for frag in scan._fragments:
            rows = frag.physical_rows
            if not rows:
                continue
            live = frag.live_mask
            start = 0
            for batch in frag.read_batches(
                scan._projection,
                scan._schema,
                ranges=[(0, rows)],
                batch_size=scan._batch_size,
                with_row_id=True,
                with_row_address=scan._with_row_address,
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

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.to_batches()), schema=self._scan._schema)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self._scan._schema, self.to_batches())

    def count_rows(self) -> int:
        return int(sum(f.physical_rows for f in self._scan._fragments))


def wanted(options: dict[str, Any]) -> bool:
    """Whether a scan asks for deleted rows."""
    return bool(options.get("include_deleted_rows"))
