"""Scans: projection, SQL filter, limit/offset and row ids over a dataset's fragments."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from format.dataset.readahead import ordered_readahead
from format.errors import InvalidInputError
from format.expr import compile_filter
from format.file.base import DEFAULT_BATCH_SIZE
from format.table.schema import LanceSchema

if TYPE_CHECKING:
    from format.dataset.dataset import LanceDataset
    from format.dataset.fragment import LanceFragment

ROW_ID_FIELD = pa.field("_rowid", pa.uint64())
ROW_ADDRESS_FIELD = pa.field("_rowaddr", pa.uint64())
# Above this fraction of matching rows, a filtered scan reads whole columns instead of taking.
LATE_MATERIALIZATION_MAX = 0.2
LATE_MATERIALIZATION_STEP = 65536
_ROW_COLUMNS = (ROW_ID_FIELD.name, ROW_ADDRESS_FIELD.name)


def _check_count(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{name} must be a non-negative integer, not {value!r}")
    return value


class Scanner:
    """A planned read of one dataset version (pylance's `LanceScanner`)."""

    def __init__(
        self,
        dataset: LanceDataset,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        batch_size: int | None = None,
        with_row_id: bool = False,
        with_row_address: bool = False,
        fragments: Sequence[LanceFragment] | None = None,
        fragment_readahead: int | None = None,
    ) -> None:
        self._dataset = dataset
        self._fragment_readahead = 2 if fragment_readahead is None else fragment_readahead
        schema = dataset.lance_schema
        name = dataset.uri
        if columns is not None and (isinstance(columns, str) or not isinstance(columns, Sequence)):
            raise InvalidInputError(f"columns must be a list of column names, not {columns!r}")
        names = list(columns) if columns is not None else schema.names
        row_columns = [c for c in names if c in _ROW_COLUMNS and c not in schema.names]
        with_row_id = with_row_id or ROW_ID_FIELD.name in row_columns
        with_row_address = with_row_address or ROW_ADDRESS_FIELD.name in row_columns
        self._projection = schema.project([c for c in names if c not in row_columns], dataset=name)
        self._output_order = names if row_columns else None
        self._filter = None
        if filter is not None:
            if not isinstance(filter, str):
                raise InvalidInputError(f"filter must be a SQL string, not {type(filter)}")
            # like pylance, filters may use the row id columns whether or not they are output
            filter_schema = pa.schema(list(schema.to_arrow()) + [ROW_ID_FIELD, ROW_ADDRESS_FIELD])
            self._filter = compile_filter(filter, filter_schema, dataset=name)
        self._limit = _check_count("limit", limit)
        self._offset = _check_count("offset", offset) or 0
        self._batch_size = _check_count("batch_size", batch_size) or DEFAULT_BATCH_SIZE
        self._with_row_id = bool(with_row_id)
        self._with_row_address = bool(with_row_address)
        self._fragments = list(fragments) if fragments is not None else dataset.get_fragments()
        extra = []
        if self._with_row_id:
            extra.append(ROW_ID_FIELD)
        if self._with_row_address:
            extra.append(ROW_ADDRESS_FIELD)
        base = self._projection.to_arrow(blob_descriptions=True)
        self._schema = pa.schema(list(base) + extra, metadata=base.metadata)
        self._out_schema = self._schema
        if self._output_order is not None:  # row id columns placed where the user named them
            self._out_schema = pa.schema(
                [self._schema.field(c) for c in self._output_order], metadata=base.metadata
            )

    @property
    def projected_schema(self) -> pa.Schema:
        """The schema of the batches this scan yields."""
        return self._out_schema

    @property
    def dataset_schema(self) -> pa.Schema:
        """The full schema of the dataset version being scanned."""
        return self._dataset.schema

    # -- execution --------------------------------------------------------------------
    def _filter_columns(self) -> tuple[list[str], bool, bool]:
        """The data columns the filter reads, and whether it uses _rowid / _rowaddr."""
        cols = self._filter.columns if self._filter is not None else []
        data = [c for c in cols if c not in _ROW_COLUMNS]
        return data, ROW_ID_FIELD.name in cols, ROW_ADDRESS_FIELD.name in cols

    def _read_schema(self) -> tuple[LanceSchema, pa.Schema, bool, bool]:
        """What to read: the projection plus whatever the filter needs, row id flags included."""
        data, row_id, row_addr = self._filter_columns()
        row_id |= self._with_row_id
        row_addr |= self._with_row_address
        names = list(self._projection.names)
        names += [c for c in data if c not in names]
        read = self._dataset.lance_schema.project(names)
        base = read.to_arrow(blob_descriptions=True)
        extra = [ROW_ID_FIELD] * row_id + [ROW_ADDRESS_FIELD] * row_addr
        return read, pa.schema(list(base) + extra, metadata=base.metadata), row_id, row_addr

    def _fragment_batches(self) -> Iterator[pa.RecordBatch]:
        read, read_schema, row_id, row_addr = self._read_schema()
        skip = self._offset if self._filter is None else 0
        producers = []
        for frag in self._fragments:
            ranges = None
            if skip:
                live = frag.count_rows()
                if skip >= live:
                    skip -= live
                    continue
                ranges = frag.live_ranges(self._batch_size, _physical_offset(frag, skip))
                skip = 0
            producers.append(
                partial(self._scan_fragment, frag, read, read_schema, ranges, row_id, row_addr)
            )
        yield from ordered_readahead(producers, readahead=self._fragment_readahead)

    def _scan_fragment(
        self,
        frag: LanceFragment,
        read: LanceSchema,
        read_schema: pa.Schema,
        ranges: list[tuple[int, int]] | None,
        row_id: bool,
        row_addr: bool,
    ) -> Iterator[pa.RecordBatch]:
        if self._filter is not None and ranges is None:
            late = self._late_materialize(frag)
            if late is not None:
                yield from late
                return
        for batch in frag.read_batches(
            read,
            read_schema,
            ranges=ranges,
            batch_size=self._batch_size,
            with_row_id=row_id,
            with_row_address=row_addr,
        ):
            if self._filter is not None:
                batch = batch.filter(self._filter.expression)
                batch = batch.select(self._schema.names)
            if batch.num_rows:
                yield batch

    def _late_materialize(self, frag: LanceFragment) -> Iterator[pa.RecordBatch] | None:
        """Selective filters: read only the filter columns, then take the matching rows.

        Returns None (read everything instead) when the projection needs no other column
        or when more than `LATE_MATERIALIZATION_MAX` of the rows match.
        """
        assert self._filter is not None
        data, row_id, _ = self._filter_columns()
        if set(self._projection.names) <= set(data):
            return None
        schema = self._dataset.lance_schema.project(data)
        base = schema.to_arrow(blob_descriptions=True)
        arrow = pa.schema(list(base) + [ROW_ID_FIELD] * row_id + [ROW_ADDRESS_FIELD])
        matches = []
        # only offsets come out of this pass, so big steps amortise the filter's overhead
        step = max(self._batch_size, LATE_MATERIALIZATION_STEP)
        for batch in frag.read_batches(
            schema, arrow, batch_size=step, with_row_id=row_id, with_row_address=True
        ):
            addr = batch.filter(self._filter.expression).column("_rowaddr")
            if len(addr):
                matches.append(addr.to_numpy() & 0xFFFFFFFF)
        found = np.concatenate(matches) if matches else np.empty(0, np.uint64)
        if len(found) > LATE_MATERIALIZATION_MAX * max(1, frag.count_rows()):
            return None
        return self._take_chunks(frag, found)

    def _take_chunks(self, frag: LanceFragment, offsets: np.ndarray) -> Iterator[pa.RecordBatch]:
        for start in range(0, len(offsets), self._batch_size):
            yield frag.take_physical(
                self._projection,
                self._schema,
                offsets[start : start + self._batch_size],
                with_row_id=self._with_row_id,
                with_row_address=self._with_row_address,
            )

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Stream the result in batches; memory stays bounded by a few batches."""
        for batch in self._limited_batches():
            yield batch if self._output_order is None else batch.select(self._output_order)

    def _limited_batches(self) -> Iterator[pa.RecordBatch]:
        skip = self._offset if self._filter is not None else 0
        remaining = self._limit
        if remaining == 0:
            return
        for batch in self._fragment_batches():
            if skip:
                if batch.num_rows <= skip:
                    skip -= batch.num_rows
                    continue
                batch = batch.slice(skip)
                skip = 0
            if remaining is not None:
                if batch.num_rows >= remaining:
                    yield batch.slice(0, remaining)
                    return
                remaining -= batch.num_rows
            yield batch

    def to_reader(self) -> pa.RecordBatchReader:
        """The result as a `pyarrow.RecordBatchReader`.

        Background readahead stops when the reader is exhausted or garbage-collected
        (pyarrow keeps the source generator until then, even after `close()`).
        """
        return pa.RecordBatchReader.from_batches(self._out_schema, self.to_batches())

    def to_table(self) -> pa.Table:
        """The whole result as one table."""
        return pa.Table.from_batches(list(self.to_batches()), schema=self._out_schema)

    def count_rows(self) -> int:
        """Number of rows the scan yields."""
        if self._filter is None:
            total = sum(f.count_rows() for f in self._fragments)
            total = max(0, total - self._offset)
            return total if self._limit is None else min(total, self._limit)
        return sum(b.num_rows for b in self.to_batches())


def _physical_offset(frag: LanceFragment, live_index: int) -> int:
    """The physical row of the `live_index`-th live row of a fragment."""
    mask = frag.live_mask
    if mask is None:
        return live_index
    return int(np.flatnonzero(mask)[live_index])
