"""pylance's scan options (`scan_options`) and its `order_by`: a scan's rows sorted by
columns, each ascending or descending with nulls first or last; the whole scan is sorted,
then its offset and limit apply. Ties keep the scan's order. NaN sorts above every number,
as in pylance (DataFusion)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.dataset.explain import explain
from quiver.format.errors import ColumnNotFoundError, InvalidInputError


@dataclass(frozen=True)
class ColumnOrdering:
    """One sort key (pylance's `ColumnOrdering`)."""

    column_name: str
    ascending: bool = True
    nulls_first: bool = False


def orderings(order_by: Sequence[Any]) -> list[ColumnOrdering]:
    """Sort keys from column names or ColumnOrdering objects (pylance's or this module's)."""
    if isinstance(order_by, (str, bytes)) or not isinstance(order_by, Sequence):
        raise InvalidInputError("order_by must be a list of column names or ColumnOrdering")
    out = []
    for key in order_by:
        if isinstance(key, str):
            out.append(ColumnOrdering(key))
        elif isinstance(getattr(key, "column_name", None), str):
            out.append(ColumnOrdering(key.column_name, bool(key.ascending), bool(key.nulls_first)))
        else:
            raise InvalidInputError(f"order_by: {key!r} is neither a column name nor an ordering")
    return out


def _keys(column: pa.ChunkedArray, o: ColumnOrdering) -> list[np.ndarray]:
    """Sort keys of one column, most significant first: NaN above every number (Arrow's
    ranks would put it beside the nulls whichever the direction)."""
    values = column.combine_chunks()
    if not pa.types.is_floating(values.type):
        return [
            pc.rank(
                values,
                sort_keys="ascending" if o.ascending else "descending",
                null_placement="at_start" if o.nulls_first else "at_end",
                tiebreaker="dense",
            ).to_numpy()
        ]
    nulls = pc.is_null(values).to_numpy(zero_copy_only=False)
    numbers = pc.fill_null(values, 0).to_numpy(zero_copy_only=False).astype(np.float64)
    nans = np.isnan(numbers) & ~nulls
    numbers = np.where(nans, 0.0, numbers)
    null_key = ~nulls if o.nulls_first else nulls
    if o.ascending:
        return [null_key, nans, numbers]
    return [null_key, ~nans, -numbers]


class OrderedScan:
    """A scan whose rows come sorted (`to_table`, `to_batches`, `count_rows`)."""

    def __init__(
        self,
        scan: Any,
        order: list[ColumnOrdering],
        *,
        limit: int | None,
        offset: int | None,
        batch_size: int | None,
        dropped: Sequence[str] = (),
    ) -> None:
        self._scan = scan  # unlimited, projecting every sort key
        self._order = order
        self._limit = limit
        self._offset = offset or 0
        self._batch_size = batch_size
        self._dropped = list(dropped)  # sort keys the projection did not ask for

    def to_table(self) -> pa.Table:
        table = self._scan.to_table()
        missing = [o.column_name for o in self._order if o.column_name not in table.schema.names]
        if missing:
            raise ColumnNotFoundError(
                f"order_by: no column {missing[0]!r}; columns are {', '.join(table.schema.names)}"
            )
        keys = [k for o in self._order for k in _keys(table.column(o.column_name), o)]
        order = np.lexsort(keys[::-1]) if keys else np.arange(table.num_rows)
        stop = None if self._limit is None else self._offset + self._limit
        table = table.take(pa.array(order[self._offset : stop]))
        return table.drop_columns(self._dropped) if self._dropped else table

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        yield from self.to_table().to_batches(max_chunksize=self._batch_size)

    def to_reader(self) -> pa.RecordBatchReader:
        table = self.to_table()
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches())

    def count_rows(self) -> int:
        return self.to_table().num_rows

    def explain_plan(self, verbose: bool = False) -> str:
        """What this scan will do (`format.dataset.explain`)."""
        window = (self._offset, self._limit)
        return explain(self._scan, verbose=verbose, order=self._order, window=window)


def scan_options(uri: str, options: dict[str, Any]) -> tuple[list[ColumnOrdering], bool]:
    """pylance's scan options: (`order_by` keys, `use_scalar_index`); the others checked."""
    known = {"order_by", "use_scalar_index", "late_materialization", "scan_in_order"}
    unknown = sorted(set(options) - known - {"strict_batch_size", "include_deleted_rows"})
    # include_deleted_rows is read by `LanceDataset.scanner` (`format.dataset.deleted_rows`)
    if unknown:
        raise InvalidInputError(f"{uri}: unknown scan option {unknown[0]!r}")
    order_by = options.get("order_by")
    return (orderings(order_by) if order_by else []), options.get("use_scalar_index") is not False
