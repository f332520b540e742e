"""A dataset version as a table the SQL engine scans: `QuiverTable`.

DataFusion reads Python tables through one door: an object that is a
`pyarrow.dataset.Dataset` and answers `scanner(columns=, filter=)` and
`get_fragments(filter=)`. `QuiverTable` is such an object over Quiver's own scans (the
base class's constructor is never called, so every method the engine uses is defined
here). The engine pushes the columns a query reads and the filters it can translate
(comparisons, AND / OR / NOT, IS NULL, IN, BETWEEN) into each scan, and treats pushed
filters as exact, which Quiver's scans are.

Each table is cut into `partitions` fragment groups, one engine partition each, so a
query reads two groups at once on two cores. A group streams its fragments in the scan's
own large steps (`Scanner.to_step_batches`): a filtered scan in large steps costs a fraction
of one in batch-sized steps. The engine then gets each step as zero-copy slices of at most
`ENGINE_BATCH_ROWS` rows: its operators work batch by batch while the scan decodes the next
step, and a top-k's running threshold prunes each later slice before the rows are compared
(4 M rows, `ORDER BY value DESC LIMIT 10`: 24-27 ms in whole steps, 18 ms in slices).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from quiver.format.dataset.blobs import BlobBytesScan
from quiver.format.dataset.fragment import LanceFragment
from quiver.format.dataset.scan import ROW_ADDRESS_FIELD, ROW_ID_FIELD, Scanner
from quiver.format.dataset.sql.topk import TopK, TopKScan
from quiver.format.expr import CompiledFilter, apply_filter, compile_filter, expression_to_sql

if TYPE_CHECKING:
    from quiver.format.dataset.dataset import LanceDataset

# decoded bytes a step of one group's scan holds at most (rows of every column read); a
# table may be given smaller steps (`step_bytes`), so that one batch fits in what a spilling
# sort or aggregation of the engine may hold
STEP_BYTES = 16 << 20
# what one group's scan holds at most, roughly: the step being decoded (raw and decoded)
# and the batch the engine works on
GROUP_MEMORY = 3 * STEP_BYTES
# most rows per batch handed to the engine; 2^17 measured best among 2^14..2^20 (smaller
# slices cost the group-by more than they save the top-k, larger ones lose the top-k's gain)
ENGINE_BATCH_ROWS = 1 << 17


def blob_columns(ds: LanceDataset) -> set[str]:
    """The dataset's blob columns, which SQL reads as their bytes."""
    return {f.name for f in ds.lance_schema.fields if f.is_blob}


_ROW_FIELDS = {ROW_ID_FIELD.name: ROW_ID_FIELD, ROW_ADDRESS_FIELD.name: ROW_ADDRESS_FIELD}


@dataclass(frozen=True)
class View:
    """How SQL sees a dataset: its columns (or only `columns`), then the row columns asked
    for (`_rowid`, `_rowaddr`), blob columns as their bytes (large binary) or their
    descriptions; only the rows a filter `where` (pylance's SQL) keeps, when there is one."""

    row_columns: tuple[str, ...] = ()
    blob_bytes: bool = True
    where: str | None = None
    columns: tuple[str, ...] | None = None

    def blobs(self, ds: LanceDataset) -> set[str]:
        """The blob columns read as bytes."""
        return blob_columns(ds) if self.blob_bytes else set()

    def names(self, ds: LanceDataset) -> list[str]:
        return self._columns(ds) + list(self.row_columns)

    def _columns(self, ds: LanceDataset) -> list[str]:
        return ds.schema.names if self.columns is None else list(self.columns)

    def schema(self, ds: LanceDataset) -> pa.Schema:
        """The table's schema (what its scans yield)."""
        base = ds.core.projected_arrow(tuple(self._columns(ds)))  # blobs as descriptions
        blobs = self.blobs(ds)
        if not blobs and not self.row_columns:
            return base
        fields = [
            pa.field(f.name, pa.large_binary(), f.nullable) if f.name in blobs else f for f in base
        ]
        fields += [_ROW_FIELDS[c] for c in self.row_columns]
        return pa.schema(fields, metadata=base.metadata)

    def blob_filter(self, ds: LanceDataset, filter: pc.Expression | None) -> CompiledFilter | None:
        """`filter` compiled against the blobs' bytes when it reads a blob column, else None.

        The scan's own filter sees a blob column's descriptions (position and size), whose
        nulls are not the bytes' in legacy (2.0) files; such a filter runs on the bytes
        instead."""
        blobs = self.blobs(ds)
        if filter is None or not blobs:
            return None
        compiled = compile_filter(expression_to_sql(filter), self.schema(ds))
        return compiled if blobs & set(compiled.columns) else None


BYTES = View()  # Flight SQL's: blob bytes, no row columns


class _Scan:
    """One planned scan of some fragments; nothing is read until it is iterated."""

    def __init__(
        self,
        ds: LanceDataset,
        fragments: Sequence[LanceFragment],
        columns: Sequence[str] | None,
        filter: pc.Expression | None,
        step_bytes: int = STEP_BYTES,
        limit: int | None = None,
        view: View = BYTES,
    ) -> None:
        self._step_bytes = step_bytes
        # a filter on blobs runs on their bytes, after the scan (and before any limit)
        self._post = view.blob_filter(ds, filter)
        self._limit = limit if self._post is not None else None
        self._keep = list(columns) if columns is not None else None
        if self._keep is None and (view.row_columns or view.columns is not None):
            self._keep = view.names(ds)
        read = self._keep
        if self._post is not None:
            filter, limit = None, None
            if read is not None:
                read = read + [c for c in self._post.columns if c not in read]
        if view.where is not None:  # the view's rows first, then what the engine pushed
            pushed = None if filter is None else expression_to_sql(filter, dataset=ds.uri)
            filter = view.where if pushed is None else f"({view.where}) AND ({pushed})"
        blobs = view.blobs(ds) & set(ds.schema.names if read is None else read)
        names = ds.schema.names if self._keep is None else self._keep
        schema = view.schema(ds)
        self._schema = pa.schema([schema.field(c) for c in names])
        scanner = Scanner(
            ds.core,
            fragments,
            columns=read,
            filter=filter,
            limit=limit,
            # the engine runs a scan per partition already: readahead threads would only
            # hand batches between threads (4 M rows of two columns: 6 ms alone, 13 ms with)
            fragment_readahead=1,
            with_row_address=bool(blobs),
        )
        # blob columns are their bytes in SQL (a scan holds at most BLOB_BATCH_BYTES of them)
        keep_address = ROW_ADDRESS_FIELD.name in (read or ())
        self._scanner: Scanner | BlobBytesScan = (
            BlobBytesScan(scanner, ds.core, keep_address=keep_address) if blobs else scanner
        )

    @property
    def projected_schema(self) -> pa.Schema:
        return self._schema

    @property
    def dataset_schema(self) -> pa.Schema:
        return self._scanner.dataset_schema

    def _steps(self) -> Iterator[pa.RecordBatch]:
        steps = self._scanner.to_step_batches(self._step_bytes)
        if self._post is None:
            yield from steps
            return
        left = self._limit
        for step in steps:
            if left is not None and left <= 0:
                return
            step = apply_filter(step, self._post, keep=self._keep)
            if left is not None:
                step = step.slice(0, left)
                left -= step.num_rows
            yield step

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        for step in self._steps():
            if step.num_rows <= ENGINE_BATCH_ROWS:
                yield step
                continue
            for offset in range(0, step.num_rows, ENGINE_BATCH_ROWS):
                yield step.slice(offset, ENGINE_BATCH_ROWS)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.projected_schema, self.to_batches())

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.to_batches()), schema=self.projected_schema)

    def count_rows(self) -> int:
        if self._post is None:
            return self._scanner.count_rows()
        return sum(step.num_rows for step in self._steps())


class _Reported:
    """A scan that keeps the first error it raises on its table (`QuiverTable.failure`):
    the engine hands a Python scan's error back as text only, and the table's caller
    raises the error itself (a damaged file stays a `CorruptFileError`)."""

    def __init__(self, scan: _Scan | TopKScan, table: QuiverTable) -> None:
        self._scan = scan
        self._table = table

    @property
    def projected_schema(self) -> pa.Schema:
        return self._scan.projected_schema

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        try:
            yield from self._scan.to_batches()
        except Exception as e:
            if self._table.failure is None:
                self._table.failure = e
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._scan, name)


class _FragmentGroup:
    """Several fragments scanned one after another: one partition of the engine's scan
    (of only the rows that can be among its first k, when the query is a `TopK`)."""

    def __init__(
        self,
        table: QuiverTable,
        fragments: list[LanceFragment],
        step_bytes: int,
        top_k: TopK | None = None,
        limit: int | None = None,
        view: View = BYTES,
    ) -> None:
        self._table = table
        self._ds = table.dataset
        self._fragments = fragments
        self._step_bytes = step_bytes
        self._top_k = top_k
        self._limit = limit
        self._view = view

    def scanner(
        self,
        schema: pa.Schema | None = None,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        batch_size: int | None = None,
        **_: Any,
    ) -> _Reported:
        return _Reported(self._scanner(columns, filter), self._table)

    def _scanner(
        self, columns: Sequence[str] | None, filter: pc.Expression | None
    ) -> _Scan | TopKScan:
        view = self._view

        def scan() -> _Scan:
            args = (self._ds, self._fragments, columns, filter, self._step_bytes, self._limit)
            return _Scan(*args, view=view)

        wanted = set(self._ds.schema.names if columns is None else columns)
        # a top-k reads descriptions, not bytes: it skips tables whose blobs a query reads
        bytes_read = view.blobs(self._ds) & wanted or view.blob_filter(self._ds, filter)
        if self._top_k is None or bytes_read or view.row_columns or view.where:
            return scan()
        fallback = lambda: scan().to_batches()  # noqa: E731
        return TopKScan(
            self._ds, self._fragments, columns, filter, self._step_bytes, self._top_k, fallback
        )


class QuiverTable(pads.Dataset):
    """One version of a dataset, scanned by the SQL engine through Quiver's scans."""

    def __init__(
        self,
        ds: LanceDataset,
        name: str,
        partitions: int = 2,
        *,
        step_bytes: int = STEP_BYTES,
        view: View = BYTES,
        fragments: Sequence[LanceFragment] | None = None,
    ) -> None:
        # the base class is a C++ dataset: its constructor is deliberately not called
        self._ds = ds
        self._view = view
        self._fragments = list(fragments) if fragments is not None else None
        self.name = name
        self._partitions = max(1, partitions)
        self._step_bytes = step_bytes
        # set once the query is planned (`format.dataset.sql.pushdown`): the rows a scan of
        # each fragment group may stop after, and the first k rows by a column it keeps
        self.limit: int | None = None
        self.top_k: TopK | None = None
        # the first error a scan of the table raised while the engine ran it
        self.failure: Exception | None = None

    @property
    def dataset(self) -> LanceDataset:
        """The dataset version the table reads."""
        return self._ds

    @property
    def schema(self) -> pa.Schema:  # type: ignore[override]
        """The dataset's schema as the table's `View` shows it."""
        return self._view.schema(self._ds)

    def scanner(  # type: ignore[override]
        self,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        **_: Any,
    ) -> _Reported:
        """A scan of every fragment (the engine asks one at planning for its schema)."""
        fragments = self._all_fragments()
        scan = _Scan(self._ds, fragments, columns, filter, self._step_bytes, view=self._view)
        return _Reported(scan, self)

    def get_fragments(self, filter: pc.Expression | None = None) -> list[_FragmentGroup]:  # type: ignore[override]
        """The engine's partitions: fragments dealt round-robin into at most `partitions`
        groups (neighbouring fragments in different groups, so both stay busy)."""
        fragments = self._all_fragments()
        # a few rows asked for: one group, read in order until they are found (a second
        # group's scan would only decode rows the engine drops, on the other core)
        n = 1 if self.limit is not None else max(1, min(self._partitions, len(fragments)))
        return [self._group(fragments[i::n]) for i in range(n)]

    def _all_fragments(self) -> list[LanceFragment]:
        """The fragments the table reads: the version's, or those it was given."""
        return self._fragments if self._fragments is not None else self._ds.get_fragments()

    def _group(self, fragments: list[LanceFragment]) -> _FragmentGroup:
        return _FragmentGroup(self, fragments, self._step_bytes, self.top_k, self.limit, self._view)

    def to_batches(self, **kwargs: Any) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return self.scanner(**kwargs).to_batches()

    def to_table(self, **kwargs: Any) -> pa.Table:  # type: ignore[override]
        return self.scanner(**kwargs).to_table()

    def count_rows(self, filter: pc.Expression | None = None, **_: Any) -> int:  # type: ignore[override]
        plain = self._view.where is None and self._fragments is None
        if plain and self._view.blob_filter(self._ds, filter) is None:
            return self._ds.count_rows(filter)
        return self.scanner(columns=[], filter=filter).count_rows()

    def __repr__(self) -> str:
        return f"QuiverTable({self.name!r}, version={self._ds.version})"
