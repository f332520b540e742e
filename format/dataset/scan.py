"""Scans: projection, SQL filter, limit/offset and row ids over a dataset's fragments."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence
from functools import cached_property, partial
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.explain import explain
from quiver.format.dataset.readahead import ordered_readahead
from quiver.format.dataset.system_columns import FILTERABLE, SYSTEM_FIELDS, SystemColumns
from quiver.format.errors import ColumnNotFoundError, InvalidInputError
from quiver.format.expr import (
    CompiledExpression,
    apply_filter,
    compile_expression,
    compile_filter,
    evaluate_expressions,
    expression_to_sql,
    matching_rows,
)
from quiver.format.file.base import DEFAULT_BATCH_SIZE, split_ranges
from quiver.format.file.types import fixed_bits
from quiver.format.index.pruning import IndexPruning, prune
from quiver.format.table.schema import LanceSchema, path_parts

if TYPE_CHECKING:  # annotations only: fragments import this module to scan themselves
    from quiver.format.dataset.fragment import LanceFragment

ROW_ID_FIELD = pa.field("_rowid", pa.uint64())
ROW_ADDRESS_FIELD = pa.field("_rowaddr", pa.uint64())
# Above this fraction of a step's rows matching a filter, the other columns of the step are
# decoded whole and filtered rather than taken row by row.
DENSE_STEP = 0.25
# Batches sized by bytes (`batch_bytes`) still hold at least this many rows.
MIN_BATCH_ROWS = 1024
# Steps of `to_table` when no batch size was asked for: up to this many rows, as long as a
# step decodes to at most TABLE_STEP_BYTES. Its batches are never seen, and large steps
# cost less: fewer plans, and outputs big enough to be backed by huge pages.
TABLE_STEP = 1 << 20
TABLE_STEP_BYTES = 128 << 20
# A plain scan decodes up to this many batches at once, as long as they decode to at most
# READ_STEP_BYTES, and slices them: a step's plans cost about the same at any size (4 M rows
# of `id`: 0.12 s in 8,192-row steps, 0.03 s in 65,536-row ones).
READ_STEP_BATCHES = 64
READ_STEP_BYTES = 8 << 20
# A late-materialising step of the filter's columns spans at most this many batches.
FILTER_STEP_BATCHES = 2
# Readahead of a local scan holds at most this many bytes of batches (beyond one per fragment).
READAHEAD_BYTES = 64 << 20
# A scan decoding less than this in all is read in the caller's thread: handing small batches
# between threads that contend for the GIL costs more than the overlap saves (a corpus
# dataset of 1,081 rows in 7 fragments: 46 ms with readahead threads, 39 ms without).
SMALL_SCAN_BYTES = 4 << 20
ROW_COLUMNS = (ROW_ID_FIELD.name, ROW_ADDRESS_FIELD.name)
# An index leaving a fragment at most one candidate row in this many of the blocks around
# them: the candidates are taken row by row rather than the blocks scanned.
SPARSE_CANDIDATES = 16
# system columns pylance refuses in filters ("Column _rowoffset does not exist")
NOT_FILTERABLE = tuple(c for c in SYSTEM_FIELDS if c not in FILTERABLE)


def _check_count(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{name} must be a non-negative integer, not {value!r}")
    return value


class Scanner:
    """A planned read of some fragments of one dataset version (pylance's `LanceScanner`)."""

    def __init__(
        self,
        dataset: DatasetCore,
        fragments: Sequence[LanceFragment],
        *,
        columns: Sequence[str] | dict[str, str] | None = None,
        filter: str | pc.Expression | None = None,
        limit: int | None = None,
        offset: int | None = None,
        batch_size: int | None = None,
        with_row_id: bool = False,
        with_row_address: bool = False,
        fragment_readahead: int | None = None,
        physical_range: tuple[int, int] | None = None,
        readahead_bytes: int | None = None,
        batch_bytes: int | None = None,
        use_scalar_index: bool = True,
    ) -> None:
        self._dataset = dataset
        self._use_scalar_index = use_scalar_index
        self._fragment_readahead = 2 if fragment_readahead is None else fragment_readahead
        self._readahead_bytes = READAHEAD_BYTES if readahead_bytes is None else readahead_bytes
        schema = dataset.lance_schema
        name = dataset.uri
        # row ids, addresses and system columns may be named, used in filters and in SQL
        # projections whether or not the dataset has them as data
        row_fields = [
            f
            for f in (ROW_ID_FIELD, ROW_ADDRESS_FIELD, *SYSTEM_FIELDS.values())
            if f.name not in schema.names
        ]
        self._transforms: list[tuple[str, CompiledExpression]] | None = None
        if isinstance(columns, dict):  # SQL projections: {"x2": "x * 2"}
            self._transforms = _compile_projections(columns, schema, row_fields, name)
            used = {c for _, e in self._transforms for c in e.columns}
            columns = [f.name for f in (*dataset.schema, *row_fields) if f.name in used]
        if columns is not None and (isinstance(columns, str) or not isinstance(columns, Sequence)):
            raise InvalidInputError(f"columns must be a list of column names, not {columns!r}")
        names = list(columns) if columns is not None else schema.names
        row_columns = [
            c for c in names if (c in ROW_COLUMNS or c in SYSTEM_FIELDS) and c not in schema.names
        ]
        # system columns are computed from row addresses after the scan
        self._system = [c for c in row_columns if c in SYSTEM_FIELDS]
        # row id columns asked for by flag come after those named, as in pylance
        flagged = [
            f.name
            for f, wanted in ((ROW_ID_FIELD, with_row_id), (ROW_ADDRESS_FIELD, with_row_address))
            if wanted and f.name not in names
        ]
        with_row_id = with_row_id or ROW_ID_FIELD.name in row_columns
        with_row_address = (
            with_row_address or ROW_ADDRESS_FIELD.name in row_columns or bool(self._system)
        )
        # a nested field named by path ("st.a") is read with its top-level column and comes
        # out as a column of its own, as in pylance
        self._paths = _nested_paths(dataset.schema, names, row_columns, name)
        top = [c for c in names if c not in row_columns and c not in self._paths]
        top += [h for h in dict.fromkeys(p[0] for p in self._paths.values()) if h not in top]
        self._projection = schema.project(top, dataset=name)
        self._output_order = names + flagged if row_columns or self._paths else None
        self._filter = None
        if filter is not None:
            if isinstance(filter, pc.Expression):  # pylance's other filter type
                filter = expression_to_sql(filter, dataset=name)
            if not isinstance(filter, str):
                raise InvalidInputError(
                    f"filter must be a SQL string or a pyarrow.compute.Expression, not "
                    f"{type(filter).__name__}"
                )
            # like pylance, filters may use the row id columns whether or not they are output
            filter_schema = pa.schema(
                list(dataset.schema) + [f for f in row_fields if f.name not in NOT_FILTERABLE]
            )
            self._filter = compile_filter(filter, filter_schema, dataset=name)
        self._limit = _check_count("limit", limit)
        self._offset = _check_count("offset", offset) or 0
        self._batch_size = _check_count("batch_size", batch_size) or DEFAULT_BATCH_SIZE
        self._batch_size_given = batch_size is not None
        self._with_row_id = bool(with_row_id)
        self._with_row_address = bool(with_row_address)
        self._fragments = list(fragments)
        self._physical_range = None
        if physical_range is not None:
            self._physical_range = _check_physical_range(physical_range, self._fragments, name)
        extra = []
        if self._with_row_id:
            extra.append(ROW_ID_FIELD)
        if self._with_row_address:
            extra.append(ROW_ADDRESS_FIELD)
        base = dataset.projected_arrow(tuple(top))
        self._schema = pa.schema(list(base) + extra, metadata=base.metadata)
        self._out_schema = self._schema
        if self._output_order is not None:  # row id columns placed where the user named them
            self._out_schema = pa.schema(
                [
                    _path_field(self._schema, c, self._paths[c])
                    if c in self._paths
                    else SYSTEM_FIELDS[c]
                    if c in self._system
                    else self._schema.field(c)
                    for c in self._output_order
                ],
                metadata=base.metadata,
            )
        if self._transforms is not None:
            self._out_schema = pa.schema([e.to_field(n) for n, e in self._transforms])
        self._system_columns = SystemColumns(dataset, self._fragments)
        self._rebatch_filtered = True
        self._batch_bytes = _check_count("batch_bytes", batch_bytes)
        if self._batch_bytes is not None:  # fewer rows per batch where rows are wide
            rows = int(self._batch_bytes // self._row_bytes())
            self._batch_size = max(MIN_BATCH_ROWS, min(self._batch_size, rows))

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
        data = [c for c in cols if c not in ROW_COLUMNS and c not in SYSTEM_FIELDS]
        # system columns are computed from row addresses
        addr = ROW_ADDRESS_FIELD.name in cols or any(c in SYSTEM_FIELDS for c in cols)
        return data, ROW_ID_FIELD.name in cols, addr

    def _filterable(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """`batch` with the system columns the filter uses (computed from its addresses)."""
        assert self._filter is not None
        used = [c for c in self._filter.columns if c in SYSTEM_FIELDS]
        return self._system_columns.add(batch, used) if used else batch

    def _read_schema(self) -> tuple[LanceSchema, pa.Schema, bool, bool]:
        """What to read: the projection plus whatever the filter needs, row id flags included."""
        return self._reading

    @cached_property
    def _reading(self) -> tuple[LanceSchema, pa.Schema, bool, bool]:
        data, row_id, row_addr = self._filter_columns()
        row_id |= self._with_row_id
        row_addr |= self._with_row_address
        names = list(self._projection.names)
        names += [c for c in data if c not in names]
        read = self._dataset.lance_schema.project(names)
        base = self._dataset.projected_arrow(tuple(names))  # read's, built once per version
        extra = [ROW_ID_FIELD] * row_id + [ROW_ADDRESS_FIELD] * row_addr
        return read, pa.schema(list(base) + extra, metadata=base.metadata), row_id, row_addr

    def explain_plan(self, verbose: bool = False) -> str:
        """What this scan will do: fragments, columns, filter and index pruning, limits."""
        return explain(self, verbose=verbose)

    @cached_property
    def index_pruning(self) -> IndexPruning | None:
        """The fragments and rows the dataset's scalar indices leave this scan's filter
        (`format.index.pruning`); None when there is no filter or no index narrows it."""
        if self._filter is None or not self._use_scalar_index:
            return None
        schema = pa.schema(list(self._dataset.schema) + [ROW_ID_FIELD, ROW_ADDRESS_FIELD])
        return prune(self._dataset, self._filter.sql, schema)

    def _fragment_batches(self) -> Iterator[pa.RecordBatch]:
        read, read_schema, row_id, row_addr = self._read_schema()
        skip = self._offset if self._filter is None else 0
        pruning = self.index_pruning
        producers = []
        rows = 0  # physical rows the producers read, at most
        for frag in self._fragments:
            if pruning is not None and not pruning.may_match(
                frag.fragment_id, self._physical_range
            ):
                continue
            ranges = None
            if self._physical_range is not None:
                ranges = frag.live_ranges(self._batch_size, *self._physical_range)
            if skip:
                live = _live_in(frag, ranges)
                if skip >= live:
                    skip -= live
                    continue
                first = ranges[0][0] if ranges else 0
                stop = ranges[-1][1] if ranges else None
                start = _physical_offset(frag, skip, first)
                ranges = frag.live_ranges(self._batch_size, start, stop)
                skip = 0
            if pruning is not None:  # only the blocks of rows the indices leave
                live = ranges if ranges is not None else frag.live_ranges(self._batch_size)
                narrowed = pruning.narrow(frag.fragment_id, live)
                if narrowed is not None:
                    if not narrowed:
                        continue
                    ranges = narrowed
                    blocks = sum(b - a for a, b in narrowed)
                    candidates = pruning.candidates(frag.fragment_id, live)
                    if candidates is not None and len(candidates) * SPARSE_CANDIDATES <= blocks:
                        if frag.live_mask is not None:
                            candidates = candidates[frag.live_mask[candidates]]
                        producers.append(
                            partial(
                                self._take_candidates,
                                frag, read, read_schema, candidates, row_id, row_addr,
                            )
                        )  # fmt: skip
                        rows += len(candidates)
                        continue
            producers.append(
                partial(self._scan_fragment, frag, read, read_schema, ranges, row_id, row_addr)
            )
            rows += frag.physical_rows if ranges is None else sum(b - a for a, b in ranges)
        readahead = self._fragment_readahead
        if readahead > 1 and rows * self._row_bytes() < SMALL_SCAN_BYTES:
            readahead = 1
        yield from ordered_readahead(
            producers, readahead=readahead, max_bytes=self._readahead_bytes
        )

    def _scan_fragment(
        self,
        frag: LanceFragment,
        read: LanceSchema,
        read_schema: pa.Schema,
        ranges: list[tuple[int, int]] | None,
        row_id: bool,
        row_addr: bool,
    ) -> Iterator[pa.RecordBatch]:
        if ranges is None:
            ranges = frag.live_ranges(self._batch_size)
        if not ranges:
            return
        if self._filter is not None and self._late_columns():
            yield from self._late_materialize(frag, ranges)
            return
        step = self._read_step()
        with frag.reader(read) as reader:
            if frag.live_mask is None:  # (with deletions, batches are cut again below)
                ranges = reader.page_aligned(ranges, step)
            batches = reader.read(
                read_schema, ranges, step, with_row_id=row_id, with_row_address=row_addr
            )
            if frag.live_mask is not None:  # as pylance: batch_size live rows, not physical
                batches = _rebatch(batches, step)
            for batch in batches:
                if self._filter is not None:
                    batch = apply_filter(self._filterable(batch), self._filter, self._schema.names)
                if batch.num_rows:
                    yield batch  # (`to_batches` cuts it to `batch_size`)
                del batch  # not held while the next step decodes (see `to_batches`)

    def _read_step(self) -> int:
        """Rows a fragment scan decodes at once: a whole number of batches (READ_STEP_*),
        no more than a limit needs; one batch where `batch_bytes` bounds what a batch holds."""
        if self._batch_bytes is not None:
            return self._batch_size
        n = int(READ_STEP_BYTES // (self._row_bytes() * self._batch_size))
        step = self._batch_size * max(1, min(READ_STEP_BATCHES, n))
        if self._limit is not None:
            step = min(step, max(self._batch_size, self._offset + self._limit))
        return step

    def _take_candidates(
        self,
        frag: LanceFragment,
        read: LanceSchema,
        read_schema: pa.Schema,
        offsets: np.ndarray,
        row_id: bool,
        row_addr: bool,
    ) -> Iterator[pa.RecordBatch]:
        """The few live rows at `offsets` an index left of a fragment, read row by row (only
        the chunks or bytes holding them) and filtered."""
        assert self._filter is not None
        with frag.reader(read) as reader:
            for s in range(0, len(offsets), self._batch_size):
                batch = reader.take(
                    read_schema,
                    offsets[s : s + self._batch_size],
                    with_row_id=row_id,
                    with_row_address=row_addr,
                )
                batch = apply_filter(self._filterable(batch), self._filter, self._schema.names)
                if batch.num_rows:
                    yield batch
                del batch

    def _late_columns(self) -> list[str]:
        """Projected columns the filter does not read: decoded only for matching rows."""
        data, _, _ = self._filter_columns()
        return [c for c in self._projection.names if c not in data]

    def _filter_step(self, first: LanceSchema) -> int:
        """Rows per step of a late-materialising scan's filter columns. Only the matches of
        the other columns are decoded, in takes spanning at most FILTER_STEP_BATCHES batches,
        so when batches are sized by bytes the filter columns step by their own width: a
        narrow filter column is evaluated in a few large steps, not one per batch."""
        if self._batch_bytes is None:
            return self._batch_size
        rows = int(self._batch_bytes // self._row_bytes(first))
        return max(self._batch_size, min(TABLE_STEP, rows))

    def _late_materialize(
        self, frag: LanceFragment, ranges: list[tuple[int, int]]
    ) -> Iterator[pa.RecordBatch]:
        """Filters: decode the filter's columns a step at a time, evaluate, then decode only
        the matching rows of the other columns (the chunks, rows or bytes that hold them, as
        each encoding allows), in batches of at most `batch_size` rows."""
        assert self._filter is not None
        data, row_id, addr = self._filter_columns()
        late = self._late_columns()
        schema = self._dataset.lance_schema
        first = schema.project(data)
        rest = schema.project(late)
        row_id = row_id or self._with_row_id
        extra = [ROW_ID_FIELD] * row_id + [ROW_ADDRESS_FIELD] * addr
        first_base = first.to_arrow(blob_descriptions=True)
        first_schema = pa.schema(list(first_base) + extra, metadata=first_base.metadata)
        rest_schema = rest.to_arrow(blob_descriptions=True)
        names = self._schema.names
        step = _even_step(sum(e - s for s, e in ranges), self._filter_step(first))
        deleted = frag.live_mask
        # with a limit, no fragment contributes more than offset + limit rows: the others'
        # columns are decoded for those at most (a `LIMIT 10` decodes 10 rows, not a step)
        wanted = None if self._limit is None else self._offset + self._limit
        with frag.reader(first) as head, frag.reader(rest) as tail:
            batches = head.read(
                first_schema, ranges, step, with_row_id=row_id, with_row_address=addr
            )
            for batch, (s, e) in zip(batches, split_ranges(ranges, step), strict=True):
                if not batch.num_rows:
                    continue
                matched, positions = matching_rows(self._filterable(batch), self._filter)
                if wanted is not None and len(positions) > wanted:
                    positions = positions[:wanted]
                    matched = matched.slice(0, wanted)
                if not len(positions):
                    continue
                if wanted is not None:
                    wanted -= len(positions)
                live = _StepRows(s, e, None if deleted is None else deleted[s:e])
                cuts = _output_batches(positions, live.count, self._batch_size, FILTER_STEP_BATCHES)
                for lo, hi, dense in cuts:
                    rows = live.at(positions[lo:hi])
                    if dense:
                        # most rows of this stretch match: decoding it whole beats finding
                        # each row
                        a, b = int(rows[0]), int(rows[-1]) + 1
                        (whole,) = tail.read(rest_schema, [(a, b)], b - a)
                        others = whole.take(pa.array(positions[lo:hi] - positions[lo]))
                    else:
                        others = tail.take(rest_schema, rows)
                    part = matched.slice(lo, hi - lo)
                    columns = {f.name: part.column(f.name) for f in first_schema}
                    columns.update({f.name: others.column(f.name) for f in rest_schema})
                    if self._with_row_address and not addr:  # the matches' addresses only
                        (columns[ROW_ADDRESS_FIELD.name],) = frag._extra_columns(rows, False, True)
                    yield pa.RecordBatch.from_arrays(
                        [columns[n] for n in names], schema=self._schema
                    )
                if wanted == 0:
                    return

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Stream the result in batches; memory stays bounded by a few batches. A filtered
        scan's batches hold exactly `batch_size` rows (the last fewer), as pylance's do."""
        batches = self._limited_batches()
        if self._filter is not None and self._rebatch_filtered:
            batches = _rebatch(batches, self._batch_size)
        size = self._batch_size
        for batch in batches:
            batch = self._shaped(batch)
            if batch.num_rows <= size:
                yield batch
            else:  # a plain scan's step of several batches (`_read_step`)
                for at in range(0, batch.num_rows, size):
                    yield batch.slice(at, size)
            del batch  # a generator's locals outlive its `yield`: the consumer's drop frees it

    def _shaped(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """A batch as read, with the system columns, projections and nested paths asked for."""
        if self._system:
            batch = self._system_columns.add(batch, self._system)
        if self._transforms is not None:
            return evaluate_expressions(batch, self._transforms)
        if self._output_order is None:
            return batch
        if not self._paths:
            return batch.select(self._output_order)
        arrays = [
            pc.struct_field(batch.column(self._paths[c][0]), self._paths[c][1:])
            if c in self._paths
            else batch.column(c)
            for c in self._output_order
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self._out_schema)

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
            del batch  # (see `to_batches`)

    def to_reader(self) -> pa.RecordBatchReader:
        """The result as a `pyarrow.RecordBatchReader`.

        Background readahead stops when the reader is exhausted or garbage-collected
        (pyarrow keeps the source generator until then, even after `close()`).
        """
        return pa.RecordBatchReader.from_batches(self._out_schema, self.to_batches())

    def to_table(self) -> pa.Table:
        """The whole result as one table (read in steps of up to `TABLE_STEP` rows and
        `TABLE_STEP_BYTES` unless a batch size was asked for)."""
        return pa.Table.from_batches(list(self.to_step_batches()), schema=self._out_schema)

    def to_step_batches(self, step_bytes: int = TABLE_STEP_BYTES) -> Iterator[pa.RecordBatch]:
        """The result streamed in the scan's own steps: up to `TABLE_STEP` rows and
        `TABLE_STEP_BYTES` each (unless a batch size was asked for), filtered batches
        left as the steps give them rather than joined to a fixed size. For consumers that
        take batches of any size (a table, a data file writer): a filtered scan in large
        steps costs a fraction of one in batch-sized steps. `step_bytes` bounds the
        decoded bytes of a step's rows (of every column read)."""
        scan = copy.copy(self)
        scan._rebatch_filtered = False
        if not self._batch_size_given:
            step = min(TABLE_STEP, int(step_bytes // self._row_bytes()))
            if self._limit is not None:  # a few rows are found in batch-sized steps
                step = min(step, max(self._batch_size, self._offset + self._limit))
            if step > self._batch_size:
                scan._batch_size = step
        return scan.to_batches()

    def _row_bytes(self, read: LanceSchema | None = None) -> float:
        """Bytes a decoded row of what the scan reads (or of `read`) takes, roughly:
        fixed-width columns exactly, variable-width ones by the data files' bytes per row
        left to them."""
        if read is None:
            return self._read_row_bytes
        return self._bytes_per_row(read.to_arrow(blob_descriptions=True))

    @cached_property
    def _read_row_bytes(self) -> float:
        _, schema, row_id, row_addr = self._read_schema()
        return self._bytes_per_row(list(schema)[: len(schema) - row_id - row_addr])

    def _bytes_per_row(self, fields: Iterable[pa.Field]) -> float:
        var_each = self._variable_value_bytes
        per_row = 1.0  # validity bits
        for f in fields:
            w = _row_width(f.type)
            per_row += var_each + 8 if w is None else w  # (with its offset)
        return per_row

    @cached_property
    def _variable_value_bytes(self) -> float:
        """Bytes per row of each variable-width column, guessed from the data files' size."""
        full = self._dataset.projected_arrow(tuple(self._dataset.lance_schema.names))
        widths = [_row_width(f.type) for f in full]
        all_fixed = sum(w for w in widths if w is not None)
        n_var = sum(w is None for w in widths)
        stored = 0.0
        for frag in self._fragments:
            rows = frag.physical_rows
            if rows:
                size = sum(int(f.file_size_bytes) for f in frag.metadata.files)
                stored = max(stored, size / rows)
        return max(16.0, (stored - all_fixed) / max(n_var, 1))

    def memory_estimate(self) -> int:
        """Bytes one stream of this scan holds at most, roughly: the raw and decoded step
        of every read column plus the batch being handed on, for each fragment read at
        once. A server admits streams against its memory budget by it (and corrects it by
        the batches it then sees)."""
        per_row = self._row_bytes()
        # a step never spans fragments, nor a physical range
        most = max([f.physical_rows for f in self._fragments], default=0)
        if self._physical_range is not None:
            most = min(most, self._physical_range[1] - self._physical_range[0])
        batch = min(self._read_step(), most)  # (a plain scan hands on whole steps)
        step = batch * per_row
        if self._filter is not None and self._late_columns():
            # the filter's columns step further (by their own bytes); a take of the others
            # fetches the chunks of the FILTER_STEP_BATCHES batches it spans (all of them
            # for a filter of a few %), compressed, about a batch's decoded worth
            first = self._dataset.lance_schema.project(self._filter_columns()[0])
            rows = min(max(batch, self._filter_step(first) * 9 // 8), most)  # `_even_step`
            step += rows * self._row_bytes(first)
        producers = max(1, min(self._fragment_readahead, len(self._fragments)))
        # per producer: the step it decodes (raw and decoded) and the batch it hands on;
        # beyond that, the batches the readahead may queue: up to its byte ceiling, and
        # one per producer past it (`ordered_readahead` always lets a producer queue one)
        queued = 0
        if self._fragment_readahead > 1:
            queued = min(self._readahead_bytes, producers * batch * per_row)
            queued += producers * batch * per_row
        return int(2 * step * producers + queued) + (1 << 20)

    def count_rows(self) -> int:
        """Number of rows the scan yields."""
        if self._filter is None:
            total = sum(f.count_rows() for f in self._fragments)
            total = max(0, total - self._offset)
            return total if self._limit is None else min(total, self._limit)
        # the scan's own large steps, not batch-sized ones: counting needs no fixed batch
        return sum(b.num_rows for b in self.to_step_batches())


def _even_step(total: int, step: int) -> int:
    """Rows per step over `total` rows: steps of about `step` rows (up to an eighth more)
    and of equal size, not a full step or two and a sliver."""
    if total <= 0:
        return step
    count = -(-total // (step + step // 8))
    return -(-total // count)


def _compile_projections(
    columns: dict[str, str], schema: LanceSchema, row_fields: list[pa.Field], dataset: str
) -> list[tuple[str, CompiledExpression]]:
    """pylance's SQL projections (`{"x2": "x * 2"}`), compiled against the dataset's columns
    and the row id and system columns."""
    if not columns:
        raise InvalidInputError(f"{dataset}: a projection dict needs at least one column")
    arrow = pa.schema(list(schema.to_arrow()) + row_fields)
    out = []
    for out_name, sql in columns.items():
        if not isinstance(out_name, str) or not isinstance(sql, str):
            raise InvalidInputError(
                f"{dataset}: a projection dict maps output names to SQL expressions, got "
                f"{out_name!r}: {sql!r}"
            )
        out.append((out_name, compile_expression(sql, arrow, dataset=dataset)))
    return out


def _physical_offset(frag: LanceFragment, live_index: int, first: int = 0) -> int:
    """The physical row of the `live_index`-th live row at or after physical row `first`."""
    mask = frag.live_mask
    if mask is None:
        return first + live_index
    return first + int(np.flatnonzero(mask[first:])[live_index])


def _rebatch(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """The same rows in batches of exactly `rows` (the last one may hold fewer)."""
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        while batch.num_rows:
            take = min(rows - count, batch.num_rows)
            pending.append(batch.slice(0, take))
            count += take
            batch = batch.slice(take)
            if count == rows:
                yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
                pending, count = [], 0
    if count:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)


def _nested_paths(
    schema: pa.Schema, names: Sequence[str], row_columns: Sequence[str], dataset: str
) -> dict[str, list[str]]:
    """The requested names that are paths to nested struct fields, split into parts."""
    paths = {}
    for c in names:
        if c in schema.names or c in row_columns or "." not in c:
            continue
        parts = path_parts(c)
        dtype = schema.field(parts[0]).type if parts and parts[0] in schema.names else None
        for part in parts[1:] or [""]:
            if dtype is None or not pa.types.is_struct(dtype) or dtype.get_field_index(part) < 0:
                raise ColumnNotFoundError(
                    f"{dataset}: no column {c!r}; columns are {', '.join(schema.names)}"
                )
            dtype = dtype.field(part).type
        paths[c] = parts
    return paths


def _path_field(schema: pa.Schema, name: str, parts: list[str]) -> pa.Field:
    """The output field of the nested field at `parts`, named by its path: its type and
    metadata, nullable when it or a struct on the way is."""
    field = schema.field(parts[0])
    nullable = field.nullable
    for part in parts[1:]:
        field = field.type.field(part)
        nullable |= field.nullable
    return pa.field(name, field.type, nullable, field.metadata)


class _StepRows:
    """The live physical rows of one step [start, stop): all of them, or those a deletion
    mask `keep` leaves (held as an array only then)."""

    __slots__ = ("_rows", "count", "start")

    def __init__(self, start: int, stop: int, keep: np.ndarray | None) -> None:
        self.start = start
        self._rows = None
        if keep is not None and not keep.all():
            self._rows = np.flatnonzero(keep).astype(np.uint64) + np.uint64(start)
        self.count = stop - start if self._rows is None else len(self._rows)

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The physical offsets (uint64) of the live rows at `positions` in the step."""
        if self._rows is None:
            return positions.astype(np.uint64) + np.uint64(self.start)
        return self._rows[positions]


def _output_batches(
    matched: np.ndarray, n_live: int, batch_rows: int, span: int
) -> Iterator[tuple[int, int, bool]]:
    """Cut a step's matching rows (`matched`, sorted positions among its `n_live` live
    rows) into output batches of at most `batch_rows`: yields (lo, hi, dense) slices of
    `matched`. A stretch of `batch_rows` live rows where more than DENSE_STEP of them match
    is its own dense batch (read whole, then taken); the sparse matches between dense
    stretches are gathered into batches of up to `batch_rows` (one take each) that span at
    most `span` stretches, since a take fetches and decodes the chunks of all it spans."""
    bounds = np.unique(np.minimum(np.arange(0, n_live + batch_rows, batch_rows), n_live))
    # matches per stretch of `batch_rows` live rows
    cut = np.searchsorted(matched, bounds[1:-1])
    edges = np.concatenate(([0], cut, [len(matched)])).astype(np.int64).tolist()
    dense = (np.diff(edges) > DENSE_STEP * np.diff(bounds)).tolist()
    pending = None  # start of the sparse matches not yet yielded
    since = 0  # the stretch they start in
    for k, is_dense in enumerate(dense):
        lo, hi = edges[k], edges[k + 1]
        if pending is not None and (is_dense or k - since >= span):
            if pending < lo:
                yield pending, lo, False
            pending = None
        if is_dense:
            yield lo, hi, True
            continue
        if pending is None:
            pending, since = lo, k
        while hi - pending >= batch_rows:
            yield pending, pending + batch_rows, False
            pending, since = pending + batch_rows, k
    if pending is not None and pending < len(matched):
        yield pending, len(matched), False


def _row_width(t: pa.DataType) -> int | None:
    """Bytes per row of a fixed-width type (fixed-size lists and structs of them included);
    None for anything of variable width."""
    if pa.types.is_fixed_size_list(t):
        inner = _row_width(t.value_type)
        return None if inner is None else inner * t.list_size
    if pa.types.is_struct(t):
        kids = [_row_width(t.field(i).type) for i in range(t.num_fields)]
        return None if any(k is None for k in kids) else sum(kids)
    bits = fixed_bits(t)
    return None if bits is None else max(1, bits // 8)


def _live_in(frag: LanceFragment, ranges: list[tuple[int, int]] | None) -> int:
    """Live rows of a fragment, or of its physical `ranges`."""
    if ranges is None:
        return frag.count_rows()
    mask = frag.live_mask
    if mask is None:
        return sum(e - s for s, e in ranges)
    return sum(int(mask[s:e].sum()) for s, e in ranges)


def _check_physical_range(
    rng: tuple[int, int], fragments: Sequence[LanceFragment], dataset: str
) -> tuple[int, int]:
    """A physical row range [start, stop) valid in the one fragment being scanned."""
    if len(fragments) != 1:
        raise InvalidInputError(f"{dataset}: a physical row range needs exactly one fragment")
    start, stop = rng
    n = fragments[0].physical_rows
    if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start <= stop <= n):
        raise InvalidInputError(
            f"{dataset}: physical row range {rng!r} is outside fragment "
            f"{fragments[0].fragment_id} of {n} rows"
        )
    return start, stop
