"""The `quiver` PySpark (>= 4.1) Python data source: batch reads and writes over Flight.

```python
from clients.spark import register

register(spark)
df = (spark.read.format("quiver").option("uri", "grpc://host:8815")
      .option("dataset", "sales").option("version", 3).load())
df.write.format("quiver").option("uri", "grpc://host:8815").option("dataset", "sales") \\
    .mode("append").save()
```

Read: `schema()` asks the server (GetSchema); `partitions()` asks for ONE FlightInfo on the
driver and makes one Spark partition per endpoint (its ticket, pinned by the server to the
resolved version, and its locations); `read()` DoGets one endpoint, trying its locations in
order, and yields record batches cast exactly to the declared Spark schema.

Options (all strings, as Spark passes them):
- `uri` (required), `dataset` (required)
- `version` | `tag` | `as_of` (at most one): time travel
- `filter`: a server-side SQL predicate; `columns`: comma-separated projection (PySpark has
  no column-pruning hook, so a user `.schema(...)` also projects: its names are requested)
- `token`, or `username` + `password`; `tls_root_certs`, `cert_chain`, `private_key` (paths
  of PEM files); `timeout` (seconds)
- `max_rows_per_endpoint`: cut fragments into endpoints (= Spark partitions) of at most this
  many rows, overriding the server's setting
- `pushdown`: `true` lets the server apply Spark's filters (default `false`, see below)
- `max_partitions`: pack the endpoints, in order, into at most this many Spark partitions
  (default: one partition per endpoint); fewer, bigger tasks cut PySpark's per-task cost

Filter pushdown (option `pushdown=true`; planning works whether or not
`spark.sql.python.filterPushdown.enabled` is on, filters are pushed only when it is):
EqualTo, EqualNullSafe, GreaterThan(OrEqual), LessThan(OrEqual), In, IsNull, IsNotNull, Not
and StringStartsWith / EndsWith / Contains on top-level integer, boolean, string and date
columns are translated to the server's SQL and not evaluated again by Spark; anything else
(floats, with their NaN semantics; nested fields; timestamps; decimals; nulls in `In`) is
left to Spark. It is opt-in because PySpark 4.3 reuses a DataFrame's pushed filters for a
later query on the same DataFrame that pushes none, silently dropping rows; without pushdown
Spark evaluates every filter and reuse is safe. The `filter` option is always applied by the
server.

Write: every task stages its batches with `DoPut(commit=false)` and returns the staged
fragment strings; the driver commits them all in ONE `commit` action with an idempotency
key made when the writer was created (a retried job commit never commits twice), or sends
`abort` with them. Tasks stage under one staging job, so the commit or abort also removes
what failed or speculative attempts staged (see `flight_server/staging.py`). Modes `append`
(also creates a new dataset) and `overwrite`.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DateType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

__all__ = ["QuiverDataSource", "QuiverPartition", "QuiverCommitMessage", "filter_sql"]


class QuiverOptionError(ValueError):
    """A missing or invalid option of the `quiver` data source."""


# ---------------------------------------------------------------------------------------------
# Options


def _required(options: Any, name: str, hint: str) -> str:
    value = options.get(name)
    if value is None or str(value).strip() == "":
        raise QuiverOptionError(f"the quiver data source needs the {name!r} option ({hint})")
    return str(value)


@dataclass(frozen=True)
class _Conn:
    """Everything a driver or a task needs to talk to the server (picklable)."""

    uri: str
    dataset: str
    token: str | None = None
    username: str | None = None
    password: str | None = None
    tls_root_certs: str | None = None
    cert_chain: str | None = None
    private_key: str | None = None
    timeout: float | None = None

    @classmethod
    def from_options(cls, options: Any) -> _Conn:
        timeout = options.get("timeout")
        return cls(
            uri=_required(options, "uri", "grpc://host:port or grpc+tls://host:port"),
            dataset=_required(options, "dataset", "the dataset name, e.g. 'sales'"),
            token=options.get("token"),
            username=options.get("username"),
            password=options.get("password"),
            tls_root_certs=options.get("tls_root_certs"),
            cert_chain=options.get("cert_chain"),
            private_key=options.get("private_key"),
            timeout=float(timeout) if timeout is not None else None,
        )

    def client(self) -> Any:
        from clients.flight import Client

        return Client(
            self.uri,
            token=self.token,
            username=self.username,
            password=self.password,
            tls_root_certs=self.tls_root_certs,
            cert_chain=self.cert_chain,
            private_key=self.private_key,
            timeout=self.timeout,
        )


def _read_options(options: Any) -> dict[str, Any]:
    """version / tag / as_of / columns / filter for `Client.flight_info` and `schema`."""
    out: dict[str, Any] = {}
    version = options.get("version")
    if version is not None:
        try:
            out["version"] = int(version)
        except ValueError:
            raise QuiverOptionError(
                f"the 'version' option must be an integer, not {version!r}"
            ) from None
    if options.get("tag") is not None:
        out["tag"] = str(options.get("tag"))
    if options.get("as_of") is not None:
        out["as_of"] = str(options.get("as_of"))
    pins = [k for k in ("version", "tag", "as_of") if k in out]
    if len(pins) > 1:
        raise QuiverOptionError(f"give at most one of version, tag and as_of (got {pins})")
    columns = options.get("columns")
    if columns is not None:
        names = [c.strip() for c in str(columns).split(",") if c.strip()]
        if not names:
            raise QuiverOptionError("the 'columns' option names no column")
        out["columns"] = names
    if options.get("filter") is not None:
        out["filter"] = str(options.get("filter"))
    step = positive_option(options, "max_rows_per_endpoint")
    if step is not None:
        out["max_rows_per_endpoint"] = step
    return out


def positive_option(options: Any, name: str) -> int | None:
    """An optional whole-number option >= 1 (Spark passes strings)."""
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise QuiverOptionError(f"the {name!r} option must be a whole number >= 1, not {raw!r}")
    return value


def pushdown_enabled(options: Any) -> bool:
    """The `pushdown` option: whether Spark's filters may be applied by the server."""
    value = str(options.get("pushdown", "false")).strip().lower()
    if value not in ("true", "false"):
        raise QuiverOptionError(f"the 'pushdown' option must be true or false, not {value!r}")
    return value == "true"


# ---------------------------------------------------------------------------------------------
# Types


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema (timestamps with a zone → TimestampType)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    try:
        return from_arrow_schema(schema, prefer_timestamp_ntz=True)
    except Exception as e:
        raise TypeError(f"the dataset has a column Spark cannot represent: {e}") from e


def arrow_schema(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark expects `read()` to yield for `schema`."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """`batch` cast column by column (by name) to exactly `target`."""
    if batch.schema.equals(target, check_metadata=True):
        return batch
    columns = []
    for f in target:
        column = batch.column(f.name)
        if not column.type.equals(f.type):
            column = column.cast(f.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=target)


# ---------------------------------------------------------------------------------------------
# Filter pushdown

_PUSHABLE_TYPES = (BooleanType, ByteType, ShortType, IntegerType, LongType, StringType, DateType)


def _ident(name: str) -> str | None:
    return None if "`" in name else f"`{name}`"


def _literal(value: Any, dtype: DataType) -> str | None:
    """The server SQL literal of `value` for a column of `dtype`, when exact."""
    if value is None:
        return None
    if isinstance(dtype, BooleanType):
        return ("true" if value else "false") if isinstance(value, bool) else None
    if isinstance(dtype, (ByteType, ShortType, IntegerType, LongType)):
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return str(value)
    if isinstance(dtype, StringType):
        if not isinstance(value, str):
            return None
        return "'" + value.replace("'", "''") + "'"
    if isinstance(dtype, DateType):
        if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
            return None
        return f"DATE '{value.isoformat()}'"
    return None


def _like(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    escaped = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("'", "''")


def filter_sql(f: Filter, schema: StructType) -> str | None:
    """The server SQL of one Spark filter, or None when it cannot be translated exactly."""
    if isinstance(f, Not):
        inner = filter_sql(f.child, schema)
        return None if inner is None else f"(NOT {inner})"
    attribute = getattr(f, "attribute", None)
    if attribute is None or len(attribute) != 1 or attribute[0] not in schema.names:
        return None
    dtype = schema[attribute[0]].dataType
    col = _ident(attribute[0])
    if col is None or not isinstance(dtype, _PUSHABLE_TYPES):
        return None
    if isinstance(f, IsNull):
        return f"({col} IS NULL)"
    if isinstance(f, IsNotNull):
        return f"({col} IS NOT NULL)"
    if isinstance(f, EqualNullSafe):
        if f.value is None:
            return f"({col} IS NULL)"
        lit = _literal(f.value, dtype)
        return None if lit is None else f"({col} IS NOT NULL AND {col} = {lit})"
    ops = {
        EqualTo: "=",
        GreaterThan: ">",
        GreaterThanOrEqual: ">=",
        LessThan: "<",
        LessThanOrEqual: "<=",
    }
    if type(f) in ops:
        lit = _literal(f.value, dtype)
        return None if lit is None else f"({col} {ops[type(f)]} {lit})"
    if isinstance(f, In):
        lits = [_literal(v, dtype) for v in f.value]
        if not lits or any(lit is None for lit in lits):
            return None
        return f"({col} IN ({', '.join(lits)}))"  # type: ignore[arg-type]
    if isinstance(f, (StringStartsWith, StringEndsWith, StringContains)):
        if not isinstance(dtype, StringType):
            return None
        body = _like(f.value)
        if body is None:
            return None
        pattern = {
            StringStartsWith: f"{body}%",
            StringEndsWith: f"%{body}",
            StringContains: f"%{body}%",
        }[type(f)]
        return f"({col} LIKE '{pattern}')"
    return None


class _PushFilters:
    """`pushFilters` of `QuiverReader`, disguised from PySpark's "pushdown is disabled" guard.

    PySpark refuses to plan a read whose reader overrides `pushFilters` while
    `spark.sql.python.filterPushdown.enabled` is off (it checks `reader.pushFilters.__func__`).
    For this reader ignoring pushdown is always correct (every filter it is not given is
    evaluated by Spark), so it presents the base method's `__func__` and one reader class
    works with the setting on and off.
    """

    def __init__(self, reader: QuiverReader) -> None:
        self._reader = reader
        self.__func__ = DataSourceReader.pushFilters  # an instance attribute: not bound

    def __call__(self, filters: list[Filter]) -> Iterator[Filter]:
        return self._reader._push(filters)


# ---------------------------------------------------------------------------------------------
# Read


@dataclass
class QuiverPartition(InputPartition):
    """One endpoint: its (version-pinned) ticket and its locations, in preference order;
    `more` holds further endpoints (ticket, locations) the same task reads after it."""

    ticket: bytes
    locations: list[str] = field(default_factory=list)
    more: list[tuple[bytes, list[str]]] = field(default_factory=list)


def pack(parts: list[QuiverPartition], limit: int | None) -> list[QuiverPartition]:
    """At most `limit` partitions of consecutive endpoints (sizes differ by at most one)."""
    if limit is None or len(parts) <= limit:
        return parts
    size, extra = divmod(len(parts), limit)
    out, start = [], 0
    for i in range(limit):
        group = parts[start : start + size + (i < extra)]
        start += len(group)
        rest = [(p.ticket, p.locations) for p in group[1:]]
        out.append(QuiverPartition(group[0].ticket, group[0].locations, rest))
    return out


class QuiverReader(DataSourceReader):
    def __init__(
        self,
        conn: _Conn,
        read: dict[str, Any],
        schema: StructType,
        pushdown: bool = False,
        max_partitions: int | None = None,
    ) -> None:
        self.conn = conn
        self.max_partitions = max_partitions
        self.read_options = read
        self.schema = schema
        self.pushdown = pushdown
        self.pushed: list[str] = []

    @property
    def pushFilters(self) -> _PushFilters:  # type: ignore[override]  # noqa: N802
        return _PushFilters(self)

    def _push(self, filters: list[Filter]) -> Iterator[Filter]:
        # Spark may push into the same reader again for another query: start afresh
        self.pushed = []
        if not self.pushdown:
            yield from filters  # all evaluated by Spark (see the `pushdown` option)
            return
        for f in filters:
            sql = filter_sql(f, self.schema)
            if sql is None:
                yield f
            else:
                self.pushed.append(sql)

    def _command(self) -> dict[str, Any]:
        options = dict(self.read_options)
        options["columns"] = list(self.schema.names)
        clauses = [f"({options['filter']})"] if "filter" in options else []
        clauses += self.pushed
        if clauses:
            options["filter"] = " AND ".join(clauses)
        return options

    def partitions(self) -> list[QuiverPartition]:
        with self.conn.client() as client:
            info = client.flight_info(self.conn.dataset, **self._command())
            parts = []
            for endpoint in info.endpoints:
                ticket = endpoint.ticket.ticket
                parts.append(QuiverPartition(bytes(ticket), client._locations(endpoint)))
        return pack(parts, self.max_partitions)

    def read(self, partition: QuiverPartition | None) -> Iterator[pa.RecordBatch]:
        import pyarrow.flight as flight

        if partition is None or not isinstance(partition, QuiverPartition):
            return  # PySpark turns an empty partition list into [None]
        target = arrow_schema(self.schema)
        endpoints = [(partition.ticket, partition.locations), *partition.more]
        with self.conn.client() as client:
            for ticket, locations in endpoints:
                endpoint = flight.FlightEndpoint(
                    flight.Ticket(ticket), [flight.Location(u) for u in locations]
                )
                for batch in client.endpoint_batches(endpoint):
                    yield conform(batch, target)


# ---------------------------------------------------------------------------------------------
# Write


@dataclass
class QuiverCommitMessage(WriterCommitMessage):
    """What one task staged: the opaque fragment strings."""

    fragments: list[str]


class QuiverWriter(DataSourceArrowWriter):
    def __init__(self, conn: _Conn, overwrite: bool, target: bytes | None) -> None:
        self.conn = conn
        self.overwrite = overwrite
        # made once on the driver: a retried job commit never commits twice, and the job's
        # commit or abort also removes what failed or speculative task attempts staged
        self.idempotency_key = f"spark-{uuid.uuid4()}"
        self.job = self.idempotency_key
        self.target = target  # the existing dataset's schema (IPC) when appending to it

    @property
    def mode(self) -> str:
        return "overwrite" if self.overwrite else "append"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> QuiverCommitMessage:
        return QuiverCommitMessage(self.stage(iterator, self.job))

    def stage(self, iterator: Iterator[pa.RecordBatch], job: str | None = None) -> list[str]:
        """Stage one task's batches in the dataset's Arrow types; the fragment strings.

        Shared with the streaming sink, which stages each micro-batch under a `job`.
        """
        target = pa.ipc.read_schema(pa.py_buffer(self.target)) if self.target else None
        first = next(iterator, None)
        if first is None:
            return []

        def batches() -> Iterator[pa.RecordBatch]:
            for batch in _chain(first, iterator):
                yield _to_target(batch, target)

        with self.conn.client() as client:
            return client.stage(self.conn.dataset, batches(), mode=self.mode, job=job)

    def commit(self, messages: Sequence[QuiverCommitMessage | None]) -> None:
        """The job's commit: every task's fragments in one version, once."""
        self.commit_staged(messages, self.idempotency_key, self.job)

    def commit_staged(
        self,
        messages: Sequence[QuiverCommitMessage | None],
        idempotency_key: str | None,
        job: str | None,
    ) -> dict[str, Any] | None:
        """Commit the messages' fragments in one version, ending staging `job`; the server's
        answer (None when there was nothing to append). Shared with the streaming sink."""
        fragments = [f for m in messages if m is not None for f in m.fragments]
        with self.conn.client() as client:
            if not fragments and not self.overwrite:
                if job is not None:
                    client.abort(self.conn.dataset, [], job=job)  # attempts that lost
                return None
            return client.commit(
                self.conn.dataset,
                fragments,
                operation=self.mode,
                idempotency_key=idempotency_key,
                job=job,
            )

    def abort(self, messages: Sequence[QuiverCommitMessage | None]) -> None:
        """Remove every file the job's tasks staged, including those of attempts whose
        messages never reached the driver."""
        fragments = [f for m in messages if m is not None for f in m.fragments]
        with self.conn.client() as client:
            client.abort(self.conn.dataset, fragments, job=self.job)


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def _to_target(batch: pa.RecordBatch, target: pa.Schema | None) -> pa.RecordBatch:
    """Spark's batch in the existing dataset's Arrow types (string vs large_string, ...)."""
    if target is None or sorted(target.names) != sorted(batch.schema.names):
        return batch
    return conform(batch, target)


# ---------------------------------------------------------------------------------------------
# The data source


class QuiverDataSource(DataSource):
    """`spark.read.format("quiver")` / `df.write.format("quiver")`: see the module docs."""

    @classmethod
    def name(cls) -> str:
        return "quiver"

    def schema(self) -> StructType:
        conn = _Conn.from_options(self.options)
        read = _read_options(self.options)
        read.pop("filter", None)
        read.pop("max_rows_per_endpoint", None)
        with conn.client() as client:
            return spark_schema(client.schema(conn.dataset, **read))

    def reader(self, schema: StructType) -> QuiverReader:
        return QuiverReader(
            _Conn.from_options(self.options),
            _read_options(self.options),
            schema,
            pushdown_enabled(self.options),
            positive_option(self.options, "max_partitions"),
        )

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:  # noqa: N802
        """`writeStream.format("quiver")`: exactly-once micro-batches (`streaming.py`)."""
        from clients.spark.streaming import QuiverStreamWriter

        return QuiverStreamWriter(self.writer(schema, overwrite), self.options)

    def streamReader(self, schema: StructType) -> Any:  # noqa: N802
        """`readStream.format("quiver")`: the rows appended version after version."""
        from clients.spark.streaming import QuiverStreamReader

        return QuiverStreamReader(_Conn.from_options(self.options), self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> QuiverWriter:
        conn = _Conn.from_options(self.options)
        target: bytes | None = None
        if not overwrite:
            from clients.errors import NotFound

            with conn.client() as client:
                try:
                    target = client.schema(conn.dataset).serialize().to_pybytes()
                except NotFound:
                    target = None
        return QuiverWriter(conn, overwrite, target)
