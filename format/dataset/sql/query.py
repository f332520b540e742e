"""pylance's `LanceDataset.sql`: a SQL query over one dataset version, run by DataFusion
over Quiver's scans (`format.dataset.sql.table.QuiverTable`, with projection, filter, limit
and top-k pushdown), its results streamed.

The dataset is the query's one table, named `dataset` unless `table_name` says otherwise;
`with_row_id` / `with_row_addr` add `_rowid` / `_rowaddr` columns to it; blob columns are
their descriptions unless `blob_handling("all_binary")`. Only queries run (no DDL, DML or
`SET`), on as many partitions as the machine has cores (at most 8).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from quiver.format.dataset.blobs import as_bytes
from quiver.format.dataset.sql.pushdown import push_down
from quiver.format.dataset.sql.spatial import spatial_query
from quiver.format.dataset.sql.table import QuiverTable, View
from quiver.format.errors import InvalidInputError
from quiver.format.expr.tokens import contains_tokens_udf

if TYPE_CHECKING:
    from quiver.format.dataset.dataset import LanceDataset

__all__ = ["SqlQuery", "SqlQueryBuilder"]


def _plain(type_: pa.DataType) -> pa.DataType:
    """Views (which DataFusion may make of strings and binaries) as plain arrays."""
    if pa.types.is_string_view(type_):
        return pa.string()
    return pa.binary() if pa.types.is_binary_view(type_) else type_


# the engine's partitions: one per core, at most 8
PARTITIONS = max(1, min(os.cpu_count() or 1, 8))


def engine_context() -> Any:
    """A DataFusion session for queries over Quiver's tables: PARTITIONS partitions, no
    information schema, strings as plain arrays, pylance's `contains_tokens`."""
    from datafusion import SessionConfig, SessionContext

    config = (
        SessionConfig()
        .with_target_partitions(PARTITIONS)
        .with_information_schema(False)
        .set("datafusion.sql_parser.map_string_types_to_utf8view", "false")
    )
    context = SessionContext(config)
    context.register_udf(contains_tokens_udf())
    return context


class SqlQueryBuilder:
    """A SQL query over a dataset version, configured by chained calls (pylance's)."""

    def __init__(self, ds: LanceDataset, sql: str) -> None:
        if not isinstance(sql, str) or not sql.strip():
            raise InvalidInputError(f"{ds.uri}: sql needs a query, not {sql!r}")
        self._ds = ds
        self._sql = sql
        self._table = "dataset"
        self._row_id = False
        self._row_addr = False
        self._blob_handling: str | None = None
        self._batch_rows: int | None = None
        self._batch_bytes: int | None = None

    def table_name(self, table_name: str) -> SqlQueryBuilder:
        """The name the query gives the dataset (default `dataset`)."""
        if not isinstance(table_name, str) or not table_name:
            raise InvalidInputError(f"{self._ds.uri}: a table name must be a non-empty string")
        self._table = table_name
        return self

    def with_row_id(self, with_row_id: bool = True) -> SqlQueryBuilder:
        """Whether the table has a `_rowid` column."""
        self._row_id = bool(with_row_id)
        return self

    def with_row_addr(self, with_row_addr: bool = True) -> SqlQueryBuilder:
        """Whether the table has a `_rowaddr` column."""
        self._row_addr = bool(with_row_addr)
        return self

    def blob_handling(self, blob_handling: str) -> SqlQueryBuilder:
        """Blob columns as their bytes ("all_binary") or their descriptions (the default,
        "blobs_descriptions", and "all_descriptions")."""
        as_bytes(self._ds.uri, blob_handling)  # refuses an unknown mode
        self._blob_handling = blob_handling
        return self

    def batch_size(self, batch_size: int) -> SqlQueryBuilder:
        """The most rows a result batch holds."""
        self._batch_rows = _positive(self._ds.uri, "batch_size", batch_size)
        return self

    def batch_size_bytes(self, batch_size_bytes: int) -> SqlQueryBuilder:
        """About the most bytes a result batch holds (a batch holds one row at least)."""
        self._batch_bytes = _positive(self._ds.uri, "batch_size_bytes", batch_size_bytes)
        return self

    def build(self) -> SqlQuery:
        """The query, planned (a bad query or an unknown table or column is refused here)."""
        from datafusion import SQLOptions

        rows = ("_rowid",) * self._row_id + ("_rowaddr",) * self._row_addr
        view = View(rows, as_bytes(self._ds.uri, self._blob_handling))
        context = engine_context()
        table = QuiverTable(self._ds, self._table, PARTITIONS, view=view)
        context.register_dataset(self._table, table)
        options = SQLOptions().with_allow_ddl(False).with_allow_dml(False)
        try:
            text, functions = spatial_query(self._sql, self._ds.schema)
            for function in functions:
                context.register_udf(function)
            frame = context.sql_with_options(text, options.with_allow_statements(False))
            schema = frame.schema()
            # a LIMIT or ORDER BY ... LIMIT stops the table's scans early (`pushdown`)
            push_down(frame.optimized_logical_plan(), [table])
        except Exception as e:  # DataFusion raises plain Exceptions
            message = f"{self._ds.uri}: sql {self._sql!r}: {first_line(e)}"
            raise InvalidInputError(message) from None
        what = f"sql {self._sql!r}"
        return SqlQuery(
            self._ds.uri, what, frame, schema, self._batch_rows, self._batch_bytes, table
        )


class SqlQuery:
    """A planned query: run it with `to_batch_records` or `to_stream_reader`. `what` names
    it in errors (`sql '...'`)."""

    def __init__(
        self,
        uri: str,
        what: str,
        frame: object,
        schema: pa.Schema,
        batch_rows: int | None,
        batch_bytes: int | None,
        table: QuiverTable | None = None,
    ) -> None:
        self._uri = uri
        self._table = table  # whose scans' errors the engine hands back only as text
        self._what = what
        self._frame = frame
        self._schema = pa.schema(
            [f.with_type(_plain(f.type)) for f in schema],
            metadata=schema.metadata,
        )
        self._batch_rows = batch_rows
        self._batch_bytes = batch_bytes

    @property
    def schema(self) -> pa.Schema:
        """The schema of the query's results."""
        return self._schema

    def to_batch_records(self) -> list[pa.RecordBatch]:
        """Every result batch (the whole result in memory)."""
        return list(self._batches())

    def to_stream_reader(self) -> pa.RecordBatchReader:
        """The results as a stream: each batch is computed when it is read."""
        return pa.RecordBatchReader.from_batches(self._schema, self._batches())

    def _batches(self) -> Iterator[pa.RecordBatch]:
        if self._table is not None:
            self._table.failure = None
        try:
            stream = self._frame.execute_stream()  # type: ignore[attr-defined]
            for item in stream:
                batch = item.to_pyarrow()
                if batch.schema != self._schema:
                    batch = batch.cast(self._schema)
                yield from self._cut(batch)
        except InvalidInputError:
            raise
        except Exception as e:  # an error while running: one line, naming the query
            failure = self._table.failure if self._table is not None else None
            if failure is not None:  # the scan's own error (a damaged file, the storage)
                raise failure from None
            raise InvalidInputError(f"{self._uri}: {self._what}: {first_line(e)}") from None

    def _cut(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """`batch` in pieces of at most the rows (and about the bytes) asked for."""
        rows = self._batch_rows or batch.num_rows
        if self._batch_bytes and batch.num_rows:
            per_row = max(1, batch.nbytes // batch.num_rows)
            rows = min(rows, max(1, self._batch_bytes // per_row))
        if batch.num_rows <= rows:
            if batch.num_rows:
                yield batch
            return
        for start in range(0, batch.num_rows, rows):
            yield batch.slice(start, rows)


def _positive(uri: str, name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{uri}: {name} must be a positive integer, not {value!r}")
    return value


_PY_ERROR = re.compile(r"PyErr \{ type: <class '[\w.]+'>, value: (.*?), traceback: .*", re.S)


def first_line(e: BaseException) -> str:
    """An error's first line; a Python function's failure inside DataFusion as its
    exception alone (DataFusion writes its traceback on the same line)."""
    text = str(e).strip() or type(e).__name__
    return _PY_ERROR.sub(r"\1", text.splitlines()[0])
