"""Batch reads and writes of the `quiver` data source.

Read: `partitions()` asks for ONE FlightInfo on the driver and makes one Spark partition
per endpoint (its ticket, pinned by the server to the resolved version, and its locations),
or packs consecutive endpoints into at most `max_partitions`; `read()` DoGets its endpoints,
trying each one's locations in order, and yields the server's batches cast to the declared
Spark schema (`convert.py`: unsigned integers, float16, times, nanoseconds, decimal256...).

Write: every task narrows its batches to the dataset's types (`convert.to_dataset`), stages
them with `DoPut(commit=false)` and returns the staged fragment strings; the driver commits
them all in ONE `commit` action with an idempotency key made when the writer was created (a
retried job commit never commits twice), or sends `abort`. Tasks stage under one staging
job, so the commit or abort also removes what failed or speculative attempts staged.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceReader,
    Filter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from quiver.clients.spark.convert import QuiverWriteError, arrow_schema, conform, to_dataset
from quiver.clients.spark.options import Conn
from quiver.clients.spark.pushdown import PushFilters, filter_sql

log = logging.getLogger("quiver.spark")

ROW_ADDRESS = "_rowaddr"  # what a backfill's DataFrame names its rows by

__all__ = [
    "QuiverCommitMessage",
    "QuiverPartition",
    "QuiverReader",
    "QuiverWriter",
    "dataset_schema",
    "pack",
]


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


def partitions_of(client: Any, info: Any) -> list[QuiverPartition]:
    """One partition per endpoint of a FlightInfo."""
    return [QuiverPartition(bytes(e.ticket.ticket), client._locations(e)) for e in info.endpoints]


PREFETCH_BATCHES = 2  # batches a task's reader thread receives ahead of Spark


def read_partition(conn: Conn, schema: StructType, partition: Any) -> Iterator[pa.RecordBatch]:
    """The batches of a partition's endpoints, in Spark's Arrow types for `schema`.

    A thread of the task receives and casts up to `PREFETCH_BATCHES` batches ahead while
    Spark consumes the current one, so the server's stream does not wait for Spark (gRPC
    sends only what the client's flow-control window takes)."""
    if partition is None or not isinstance(partition, QuiverPartition):
        return iter(())  # PySpark turns an empty partition list into [None]
    return _prefetched(_endpoint_batches(conn, arrow_schema(schema), partition))


def _endpoint_batches(
    conn: Conn, target: pa.Schema, partition: QuiverPartition
) -> Iterator[pa.RecordBatch]:
    import pyarrow.flight as flight

    endpoints = [(partition.ticket, partition.locations), *partition.more]
    client = conn.shared_client()
    for ticket, locations in endpoints:
        endpoint = flight.FlightEndpoint(
            flight.Ticket(ticket), [flight.Location(u) for u in locations]
        )
        for batch in client.endpoint_batches(endpoint):
            yield conform(batch, target)


_DONE = object()


def _prefetched(batches: Iterator[Any], depth: int = PREFETCH_BATCHES) -> Iterator[Any]:
    """`batches`, produced by a thread of their own up to `depth` ahead of the consumer;
    the producer's error is raised in the consumer. A consumer that stops early stops the
    producer after the batch it is receiving (its generator closes, and so its client)."""
    ahead: queue.Queue[Any] = queue.Queue(depth)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                ahead.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for batch in batches:
                if not put(batch):
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            put(e)
            return
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()
        put(_DONE)

    thread = threading.Thread(target=produce, name="quiver-read", daemon=True)
    thread.start()
    try:
        while True:
            item = ahead.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


class QuiverReader(DataSourceReader):
    def __init__(
        self,
        conn: Conn,
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
    def pushFilters(self) -> PushFilters:  # type: ignore[override]  # noqa: N802
        return PushFilters(self._push)

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
            parts = partitions_of(client, info)
        return pack(parts, self.max_partitions)

    def read(self, partition: QuiverPartition | None) -> Iterator[pa.RecordBatch]:
        return read_partition(self.conn, self.schema, partition)


# ---------------------------------------------------------------------------------------------
# Write


@dataclass
class QuiverCommitMessage(WriterCommitMessage):
    """What one task staged: the opaque fragment strings."""

    fragments: list[str]


def dataset_schema(conn: Conn) -> bytes | None:
    """The dataset's Arrow schema (IPC bytes, picklable), None when it does not exist."""
    from quiver.clients.errors import NotFound

    with conn.client() as client:
        try:
            return client.schema(conn.dataset).serialize().to_pybytes()
        except NotFound:
            return None


class QuiverWriter(DataSourceArrowWriter):
    def __init__(
        self,
        conn: Conn,
        overwrite: bool,
        target: bytes | None,
        vectors: Mapping[str, int] | None = None,
        change: Mapping[str, Any] | None = None,
        blobs: Collection[str] = (),
    ) -> None:
        self.conn = conn
        self.blobs = set(blobs)  # binary columns to store as blob columns (blob_columns)
        self.overwrite = overwrite
        # a row change (options.change_option): tasks stage its source, the driver applies
        # it in one apply_staged; None appends or overwrites
        self.change = dict(change) if change is not None else None
        # made once on the driver: a retried job commit never commits twice, and the job's
        # commit or abort also removes what failed or speculative task attempts staged
        self.idempotency_key = f"spark-{uuid.uuid4()}"
        self.job = self.idempotency_key
        self.target = target  # the existing dataset's schema (IPC), None for a new one
        self.vectors = dict(vectors or {})
        # the commit answered Unavailable past its retries: it may have landed, so the
        # abort Spark calls next must not remove the job's files (the staging sweep removes
        # them once they have expired, if no version references them)
        self.unsettled = False

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
        if self.change is not None:
            return self._stage_source(first, iterator, target, job)

        def batches() -> Iterator[pa.RecordBatch]:
            row = 0
            for batch in _chain(first, iterator):
                # an overwrite may change the schema: only columns read from the dataset
                # (its types widened) go back to their types
                yield to_dataset(
                    batch,
                    target,
                    self.vectors,
                    loose=self.overwrite,
                    first_row=row,
                    blobs=self.blobs,
                )
                row += batch.num_rows

        with self.conn.client() as client:
            return client.stage(self.conn.dataset, batches(), mode=self.mode, job=job)

    def _stage_source(
        self,
        first: pa.RecordBatch,
        rest: Iterator[pa.RecordBatch],
        target: pa.Schema | None,
        job: str | None,
    ) -> list[str]:
        """Stage a task's rows as the source of the job's change: the dataset's columns in
        its types, `_rowaddr` (read as decimal(20, 0)) as row addresses again."""
        if target is None:
            raise QuiverWriteError(
                f"dataset {self.conn.dataset!r} does not exist: nothing to change"
            )
        addressed = target.append(pa.field(ROW_ADDRESS, pa.uint64()))

        def batches() -> Iterator[pa.RecordBatch]:
            row = 0
            for batch in _chain(first, rest):
                yield to_dataset(batch, addressed, self.vectors, first_row=row, blobs=self.blobs)
                row += batch.num_rows

        with self.conn.client() as client:
            return client.stage_source(self.conn.dataset, batches(), job=job)

    def commit(self, messages: Sequence[QuiverCommitMessage | None]) -> None:
        """The job's commit: every task's fragments in one version, once (for a row
        change, every task's source applied as one change)."""
        if self.change is not None:
            fragments = [f for m in messages if m is not None for f in m.fragments]
            with self.conn.client() as client, self.settling():
                client.apply_staged(
                    self.conn.dataset,
                    fragments,
                    job=self.job,
                    idempotency_key=self.idempotency_key,
                    **self.change,
                )
            return
        with self.settling():
            self.commit_staged(messages, self.idempotency_key, self.job)

    @contextlib.contextmanager
    def settling(self) -> Iterator[None]:
        """Marks the writer `unsettled` when the commit inside answers Unavailable."""
        from quiver.clients.errors import Unavailable

        try:
            yield
        except Unavailable:
            self.unsettled = True
            raise

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
        messages never reached the driver; nothing after a commit that may have landed."""
        if self.unsettled:
            log.warning(
                "dataset %r: the job's commit may have landed; its staged files are left "
                "to the server's staging sweep",
                self.conn.dataset,
            )
            return
        fragments = [f for m in messages if m is not None for f in m.fragments]
        with self.conn.client() as client:
            client.abort(self.conn.dataset, fragments, job=self.job)


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest
