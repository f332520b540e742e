"""The SQL engine: DataFusion planning and running queries over Quiver's datasets.

One `SessionContext` serves every query of the server. Its catalog is
`flight_server.sql.catalog` (datasets resolved while a statement is planned, with the
caller's rights); its runtime spills sorts, aggregations and joins to disk once the
queries running together hold `memory_limit` bytes, so a group-by or join over more rows
than fit in memory streams instead of growing the server. Queries run on
`partitions` threads (the server's cores) with Quiver's scans feeding them.

A query is SQL text or a serialized Substrait plan (bytes, as ADBC's `execute` takes it),
whose named tables resolve as SQL table names do. Only queries run here: the engine's own
DDL, DML and `SET` statements, and Substrait write relations, are refused (the statements
that change datasets are `flight_server.sql.dml`'s).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from datafusion import DataFrame, RuntimeEnvBuilder, SessionConfig, SessionContext, SQLOptions
from datafusion.substrait import Consumer, Serde

from quiver.flight_server.errors import InvalidArgument, NotFound, QuiverError, classify
from quiver.flight_server.sql.catalog import (
    CATALOG,
    DEFAULT_SCHEMA,
    Planning,
    QuiverCatalog,
    planning,
)
from quiver.flight_server.sql.recent import RecentPlans, plan_key
from quiver.flight_server.sql.search import register_searches
from quiver.format.dataset.sql.pushdown import push_down
from quiver.format.dataset.sql.table import STEP_BYTES
from quiver.format.expr.tokens import contains_tokens_udf

if TYPE_CHECKING:
    from quiver.flight_server.service import DatasetService

DEFAULT_MEMORY_LIMIT = 256 << 20
# a batch sent to a client holds at most this many bytes: ADBC's Flight SQL driver refuses
# gRPC messages over 16 MiB by default, and pyarrow does not split batches
MAX_BATCH_BYTES = 4 << 20
# logical plans that are not queries (a Substrait plan must be a query)
_NOT_QUERIES = {"Dml", "Ddl", "CopyTo", "Statement", "SetVariable", "Transaction", "Prepare"}
_VIEW_TYPES = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}


@dataclass
class PlannedQuery:
    """A planned query: its result schema, and the dataset versions it reads."""

    frame: DataFrame
    schema: pa.Schema
    versions: dict[str, int]  # "name" or "name@ref" -> version
    planning: Planning


class SqlEngine:
    """Plans and runs SQL queries over the datasets a `DatasetService` serves."""

    def __init__(
        self,
        service: DatasetService,
        *,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
        partitions: int | None = None,
        spill_dir: str | None = None,
    ) -> None:
        self.service = service
        self.memory_limit = memory_limit
        self.partitions = partitions or max(1, min(os.cpu_count() or 1, 8))
        # a spilling sort's share of the pool (the pool over the partitions) must hold its
        # merge reservation and a scan's batch twice (it sorts a copy), or it fails instead of
        # spilling; string columns can make a step twice the bytes it was planned at
        share = memory_limit // (8 * self.partitions)
        step_bytes = max(1 << 20, min(STEP_BYTES, share))
        config = (
            SessionConfig()
            .with_default_catalog_and_schema(CATALOG, DEFAULT_SCHEMA)
            .with_create_default_catalog_and_schema(False)
            .with_target_partitions(self.partitions)
            .with_information_schema(False)
            # plain strings, which every client reads (JDBC does not read string views)
            .set("datafusion.sql_parser.map_string_types_to_utf8view", "false")
            .set("datafusion.execution.sort_spill_reservation_bytes", str(min(10 << 20, share)))
        )
        runtime = RuntimeEnvBuilder().with_fair_spill_pool(memory_limit)
        runtime = (
            runtime.with_temp_file_path(spill_dir) if spill_dir else runtime.with_disk_manager_os()
        )
        self.context = SessionContext(config, runtime)
        catalog = QuiverCatalog(service, self.partitions, step_bytes)
        self.context.register_catalog_provider(CATALOG, catalog)
        register_searches(self.context, catalog)
        self.context.register_udf(contains_tokens_udf())
        self._options = (
            SQLOptions().with_allow_ddl(False).with_allow_dml(False).with_allow_statements(False)
        )
        self._recent = RecentPlans(service)

    def plan(
        self,
        query: str | bytes,
        identity: Any,
        *,
        parameters: list[pa.Scalar] | None = None,
        pins: dict[str, int] | None = None,
    ) -> PlannedQuery:
        """Plan `query` (SQL text, or a Substrait plan's bytes) for `identity` (nothing is
        read yet): `$1`, `$2`... take `parameters`; tables named in `pins` are read at those
        versions."""
        if not (query.strip() if isinstance(query, str) else query):
            kind = "SQL statement" if isinstance(query, str) else "Substrait plan"
            raise InvalidArgument(f"the {kind} is empty")
        key = plan_key(query, identity, parameters, pins)
        recent = self._recent.get(key, identity, pinned=pins is not None)
        if recent is not None:
            return recent
        values = {str(i + 1): v for i, v in enumerate(parameters or [])}
        scope = Planning(
            identity, dict(pins or {}), parameters={f"${k}": v for k, v in values.items()}
        )
        with planning(scope):
            try:
                if isinstance(query, bytes):
                    frame = self._substrait_frame(query, values)
                else:
                    frame = self.context.sql(query, options=self._options, param_values=values)
                schema = frame.schema()
                push_down(frame.optimized_logical_plan(), scope.opened)
            except BaseException as e:  # noqa: BLE001 - the engine's errors are the SQL's
                if scope.failure is not None and not isinstance(e, QuiverError):
                    raise scope.failure from None  # came back wrapped in the engine's error
                if isinstance(e, QuiverError) or classify(e)[0] != "internal":
                    raise  # resolving a table failed: a rights, name or storage error
                translate = sql_error if isinstance(query, str) else substrait_error
                raise _engine_failure(e, translate) from None
        planned = PlannedQuery(frame, plain_schema(schema), dict(scope.resolved), scope)
        self._recent.put(key, planned)
        if pins is None:  # the stream of this plan's ticket asks with its versions pinned
            self._recent.put(plan_key(query, identity, parameters, planned.versions), planned)
        return planned

    def _substrait_frame(self, plan: bytes, values: dict[str, Any]) -> DataFrame:
        """The query a serialized Substrait plan holds, its tables resolved in this
        server's catalog."""
        if values:
            raise InvalidArgument("a Substrait plan takes no parameters")
        try:
            decoded = Serde.deserialize_bytes(plan)
        except BaseException as e:  # noqa: BLE001 - any bytes that are not a plan
            if isinstance(e, KeyboardInterrupt | SystemExit):
                raise
            raise InvalidArgument(
                f"Substrait: the plan could not be read ({_message(e)[:200]})"
            ) from None
        logical = Consumer.from_substrait_plan(self.context, decoded)
        kind = logical.display().split(":", 1)[0].split("(", 1)[0].strip()
        if kind in _NOT_QUERIES or kind.startswith(("Create", "Drop")):
            raise InvalidArgument(
                f"Substrait: the plan is a {kind}, not a query (changes are SQL statements "
                "sent with DoPut)"
            )
        return self.context.create_dataframe_from_logical_plan(logical)

    def stream(self, planned: PlannedQuery) -> Iterator[pa.RecordBatch]:
        """Run a planned query: its batches, none over `MAX_BATCH_BYTES`, in plain types.

        The engine's own stream is iterated (not its Arrow C stream export: a panic in the
        engine, such as a string column over 2 GiB in one batch, aborts the process from
        inside the export, and arrives here as an exception from the stream)."""
        for table in planned.planning.opened:
            table.failure = None  # (a plan is reused: each run's scans report anew)
        try:
            stream = planned.frame.execute_stream()
        except QuiverError:
            raise
        except BaseException as e:  # noqa: BLE001 - the engine's errors, its panics included
            raise _engine_failure(e, sql_error) from None
        while True:
            try:
                batch = next(stream).to_pyarrow()
            except StopIteration:
                return
            except QuiverError:
                raise
            except BaseException as e:  # noqa: BLE001 - a scan's or the engine's failure
                raise self._run_failure(planned, e) from None
            if batch.schema != planned.schema:
                batch = batch.cast(planned.schema)
            yield from split_batch(batch)

    def _run_failure(self, planned: PlannedQuery, e: BaseException) -> BaseException:
        """What a failed run raises: the error a table's scan raised, which the engine hands
        back as text only (a damaged file then names its dataset, version, fragment and
        file; a storage outage is Unavailable), else the engine's own error translated."""
        if isinstance(e, Exception):
            for table in planned.planning.opened:
                if table.failure is not None:
                    return self.service.explain(table.failure, table.name, table.dataset.version)
        return _engine_failure(e, run_error)


def _engine_failure(e: BaseException, translate: Any) -> BaseException:
    """What a failure of the engine becomes: its panics (pyo3's PanicException, a
    BaseException) are the query's failure; interrupts and exits pass through."""
    if isinstance(e, KeyboardInterrupt | SystemExit | GeneratorExit):
        return e
    if type(e).__name__ == "PanicException":
        return InvalidArgument(f"SQL: the query failed in the SQL engine: {_message(e)}")
    return translate(e)


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with string and binary views as plain strings and binaries."""
    if not any(f.type in _VIEW_TYPES for f in schema):
        return schema
    return pa.schema(
        [f.with_type(_VIEW_TYPES.get(f.type, f.type)) for f in schema], metadata=schema.metadata
    )


def split_batch(
    batch: pa.RecordBatch, max_bytes: int = MAX_BATCH_BYTES
) -> Iterator[pa.RecordBatch]:
    """`batch` cut into slices of at most about `max_bytes`."""
    nbytes = batch.nbytes
    if nbytes <= max_bytes or batch.num_rows <= 1:
        yield batch
        return
    rows = max(1, batch.num_rows * max_bytes // nbytes)
    for start in range(0, batch.num_rows, rows):
        yield batch.slice(start, rows)


def _message(e: BaseException) -> str:
    text = str(e).strip()
    for prefix in ("DataFusion error: ", "Error during planning: ", "SQL error: "):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return " ".join(text.split())


def sql_error(e: BaseException) -> QuiverError:
    """A planning failure as the client sees it: unknown tables NotFound, the rest
    (syntax, unknown columns, types, refused statements) InvalidArgument."""
    text = _message(e)
    if text.startswith("table '") and text.endswith("not found"):
        return NotFound(f"SQL: {text}")
    if "DML not supported" in text or "DDL not supported" in text:
        return InvalidArgument(f"SQL: {text} (queries run here; changes go through DoPut)")
    return InvalidArgument(f"SQL: {text}")


def substrait_error(e: BaseException) -> QuiverError:
    """A Substrait plan's planning failure as the client sees it: unknown tables NotFound,
    relations or functions the engine does not consume and plans that do not fit the
    tables InvalidArgument (the engine's dump of the offending relation left out)."""
    text = _message(e)
    if text.startswith("This feature is not implemented: Write("):
        return InvalidArgument(
            "Substrait: write relations are not supported (changes are SQL statements sent "
            "with DoPut)"
        )
    if text.startswith("No table named '"):
        return NotFound(f"Substrait: {text}")
    if len(text) > 300:
        text = text[:300].rsplit(" ", 1)[0] + " ..."
    return InvalidArgument(f"Substrait: {text}")


def run_error(e: BaseException) -> BaseException:
    """A failure while a query runs: the engine's resource and argument errors as
    InvalidArgument with their message; anything else is the server's own."""
    text = _message(e)
    if "Resources exhausted" in text:
        return InvalidArgument(f"SQL: the query needs more memory than the server allows: {text}")
    if isinstance(e, ValueError) or "Arrow error" in text or "Execution error" in text:
        return InvalidArgument(f"SQL: {text}")
    return e
