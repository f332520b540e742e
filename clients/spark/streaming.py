"""Structured Streaming with the `quiver` data source: an exactly-once sink and a source
that follows the rows appended to a dataset.

```python
(df.writeStream.format("quiver").option("uri", "grpc://host:8815").option("dataset", "events")
   .option("checkpointLocation", "/chk/events").start())
(spark.readStream.format("quiver").option("uri", "grpc://host:8815").option("dataset", "events")
   .option("starting_version", "earliest").load())
```

Sink. Every task of a micro-batch stages its rows with `DoPut(commit=false)` (the batch
writer's code) under the staging job `ss-<run id>-<batch id>`; the driver's
`commit(messages, batchId)` commits them in one version with the idempotency key
`spark-stream:<query id>:<batch id>`. The query id is the streaming query's id, which Spark
keeps in the checkpoint and hands to every task (local property `sql.streaming.queryId`,
with `streaming.sql.batchId` and the run id as the job group), so a batch replayed after a
restart from the checkpoint (its sink commit landed, its entry in the checkpoint's commit
log did not) carries the same key: the server answers "duplicate", appends nothing, and
ending the job removes the replay's staged files. Output mode `complete` overwrites the
dataset with each batch (also keyed; an empty result before the dataset exists creates
nothing). An empty append commits nothing. `abort` ends the batch's job, removing what its
tasks staged. Should the tasks not report the query id (not seen with PySpark 4.3), the
driver reads it from `{checkpointLocation}/metadata` (local, file: or an fsspec URL).

Source. Offsets are dataset versions, `{"version": N}`: everything appended up to version N
has been read. A micro-batch (start, end] has one Spark partition per fragment that an
append (or the dataset's creation) added in those versions, each read pinned to the version
that added it (the server's `appended_since` read), so later deletes or compactions do not
change what a batch reads and a retried batch reads the same rows. Options:
- `starting_version`: `latest` (default: only rows appended after the query first starts),
  `earliest` (every row ever appended, from the creation on) or a number N (rows appended
  by version N and later). A restarted query continues from its checkpoint instead.
- `max_fragments_per_trigger`: at most this many appended fragments per micro-batch
  (whole versions: a version that appended more is read in one batch); default no limit.
- `filter`, `columns`: as in batch reads (`version`, `tag`, `as_of` are refused).
Deletes, compactions, index, tag and config changes add no rows: skipped (a delete does not
retract rows already read). An overwrite, update, schema change (add/drop/alter columns) or
restore ends what "the appended rows" means: the stream delivers the appends before it, then
fails with `QuiverStreamError` naming the dataset and the version; start a new query (new
checkpoint) with `starting_version` after that version.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, DataSourceStreamReader
from pyspark.sql.types import StructType

from quiver.clients.spark.batch import (
    QuiverCommitMessage,
    QuiverPartition,
    QuiverWriter,
    partitions_of,
    read_partition,
)
from quiver.clients.spark.options import Conn, QuiverOptionError, positive_option, read_options

__all__ = [
    "QuiverStreamError",
    "QuiverStreamMessage",
    "QuiverStreamReader",
    "QuiverStreamWriter",
    "checkpoint_query_id",
    "idempotency_key",
]

_QUERY_ID = "sql.streaming.queryId"
_BATCH_ID = "streaming.sql.batchId"
_RUN_ID = "spark.jobGroup.id"  # MicroBatchExecution runs each query run in a job group

try:  # PySpark 4.2+; on 4.1 Trigger.AvailableNow and read limits are Spark's business
    from pyspark.sql.streaming.datasource import ReadMaxFiles, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - PySpark 4.1
    ReadMaxFiles = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in for the PySpark 4.2 mixin."""


class QuiverStreamError(RuntimeError):
    """A stream over a dataset cannot go on: `version` did more than append rows."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


def idempotency_key(query_id: str, batch_id: int) -> str:
    """The commit key of one micro-batch of one streaming query (stable across restarts)."""
    return f"spark-stream:{query_id}:{batch_id}"


# ---------------------------------------------------------------------------------------------
# Sink


@dataclass
class QuiverStreamMessage(QuiverCommitMessage):
    """One task's staged fragments, with the ids of the streaming query and batch it ran for."""

    query_id: str | None = None
    batch_id: int | None = None
    job: str | None = None


def _task_ids() -> tuple[str | None, int | None, str | None]:
    """(query id, batch id, run id) of the micro-batch this task runs for, when Spark says."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        return None, None, None
    query, batch, run = (tc.getLocalProperty(k) for k in (_QUERY_ID, _BATCH_ID, _RUN_ID))
    try:
        batch_id = int(batch) if batch is not None else None
    except ValueError:
        batch_id = None
    return query or None, batch_id, run or None


def checkpoint_query_id(checkpoint: str | None) -> str | None:
    """The streaming query id Spark keeps in `{checkpointLocation}/metadata` (the same id
    the tasks see), read on the driver when no task reported it; None when unreadable."""
    if not checkpoint:
        return None
    import json

    path = checkpoint.rstrip("/") + "/metadata"
    try:
        if "://" in path and not path.startswith("file:"):
            import fsspec

            with fsspec.open(path.replace("s3a://", "s3://", 1), "rb") as f:
                raw = f.read()
        else:
            with open(path.removeprefix("file://").removeprefix("file:"), "rb") as f:
                raw = f.read()
        found = json.loads(raw.splitlines()[0]).get("id")
    except Exception:  # noqa: BLE001 - a fallback: no id means no key
        return None
    return found if isinstance(found, str) and found else None


def _job(run_id: str | None, batch_id: int | None) -> str | None:
    """The staging job of one micro-batch in one run (the server's job-name alphabet)."""
    if run_id is None or batch_id is None:
        return None
    job = f"ss-{run_id}-{batch_id}"
    if len(job) > 128 or not all(c.isalnum() or c in "-_." for c in job):
        return None
    return job


class QuiverStreamWriter(DataSourceStreamArrowWriter):
    """Exactly-once micro-batches: staged by the tasks, committed once per (query, batch)."""

    def __init__(self, batch: QuiverWriter, options: Any = None) -> None:
        self.batch = batch
        self.checkpoint: str | None = (options or {}).get("checkpointLocation")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> QuiverStreamMessage:
        query_id, batch_id, run_id = _task_ids()
        job = _job(run_id, batch_id)
        fragments = self.batch.stage(iterator, job=job)
        return QuiverStreamMessage(fragments, query_id, batch_id, job)

    @staticmethod
    def _ids(
        messages: Sequence[QuiverCommitMessage | None], batch_id: int
    ) -> tuple[str | None, str | None]:
        """The query id and staging job the tasks of batch `batch_id` reported."""
        query_id = job = None
        for m in messages:
            if isinstance(m, QuiverStreamMessage) and m.batch_id in (None, batch_id):
                query_id = query_id or m.query_id
                job = job or m.job
        return query_id, job

    def commit(self, messages: Sequence[QuiverCommitMessage | None], batchId: int) -> None:  # noqa: N803
        query_id, job = self._ids(messages, batchId)
        query_id = query_id or checkpoint_query_id(self.checkpoint)
        key = idempotency_key(query_id, batchId) if query_id is not None else None
        if self.batch.overwrite and not any(m is not None and m.fragments for m in messages):
            if not self._exists():  # complete mode, no rows yet: nothing to create
                return
        # an empty append commits nothing (a failed attempt's files, if any, are swept)
        with self.batch.settling():
            answer = self.batch.commit_staged(messages, key, job)
        if answer is not None and answer.get("duplicate") and job is None:
            # a replayed batch: its rows are in already; its own staged files go
            self._abort([f for m in messages if m is not None for f in m.fragments], None)

    def abort(self, messages: Sequence[QuiverCommitMessage | None], batchId: int) -> None:  # noqa: N803
        if self.batch.unsettled:  # the batch's commit may have landed: the sweep decides
            return
        _, job = self._ids(messages, batchId)
        self._abort([f for m in messages if m is not None for f in m.fragments], job)

    def _exists(self) -> bool:
        from quiver.clients.errors import NotFound

        with self.batch.conn.client() as client:
            try:
                client.describe(self.batch.conn.dataset)
            except NotFound:
                return False
        return True

    def _abort(self, fragments: list[str], job: str | None) -> None:
        if not fragments and job is None:
            return
        with self.batch.conn.client() as client:
            client.abort(self.batch.conn.dataset, fragments, job=job)


# ---------------------------------------------------------------------------------------------
# Source


def _capped(info: Any, since: int, end: int, max_fragments: int) -> int:
    """The last version up to `end` whose appended fragments, counted from `since`, stay
    within `max_fragments` (at least one version's worth)."""
    import json
    from collections import Counter

    seen = {
        (meta["version"], meta["fragment_id"])
        for meta in (json.loads(bytes(e.app_metadata)) for e in info.endpoints)
    }
    per_version = Counter(v for v, _ in seen)
    total, cap = 0, since
    for version in sorted(per_version):
        if total and total + per_version[version] > max_fragments:
            return cap
        total += per_version[version]
        cap = version
    return end


def _starting(options: Any) -> str | int:
    """`latest`, `earliest` or a version number ≥ 1, from the `starting_version` option."""
    raw = options.get("starting_version")
    text = "latest" if raw is None else str(raw).strip().lower()
    if text in ("latest", "earliest"):
        return text
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise QuiverOptionError(
            f"the 'starting_version' option must be latest, earliest or a version number "
            f"(1 or more), not {raw!r}"
        )
    return number


class QuiverStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of the rows appended to a dataset, offsets being its versions."""

    def __init__(self, conn: Conn, options: Any, schema: StructType) -> None:
        for pinned in ("version", "tag", "as_of"):
            if options.get(pinned) is not None:
                raise QuiverOptionError(
                    f"the {pinned!r} option pins one version and has no meaning for a stream; "
                    "use 'starting_version' (latest, earliest or a version number)"
                )
        self.conn = conn
        self.schema = schema
        # filter (and any other read option) as in batch reads; columns follow the schema
        self.read_options = {
            k: v for k, v in read_options(options).items() if k not in ("columns", "version")
        }
        self.starting = _starting(options)
        self.max_fragments = positive_option(options, "max_fragments_per_trigger")
        self.target: int | None = None  # Trigger.AvailableNow: the last version to read
        self.last: dict[str, int] | None = None  # the last end offset planned (PySpark 4.1)

    def _latest(self, client: Any) -> int:
        return int(client.describe(self.conn.dataset)["version"])

    def initialOffset(self) -> dict[str, int]:  # noqa: N802
        if self.starting == "earliest":
            return {"version": 0}
        if isinstance(self.starting, int):
            return {"version": self.starting - 1}
        with self.conn.client() as client:
            return {"version": self._latest(client)}

    def getDefaultReadLimit(self) -> Any:  # noqa: N802
        if self.max_fragments is None or ReadMaxFiles is None:
            return super().getDefaultReadLimit()
        return ReadMaxFiles(self.max_fragments)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        with self.conn.client() as client:
            self.target = self._latest(client)

    def _info(self, client: Any, since: int, until: int) -> Any:
        """The FlightInfo of the rows appended in (since, until]."""
        from quiver.clients.errors import QuiverError

        try:
            return client.flight_info(
                self.conn.dataset,
                **self.read_options,
                appended_since=since,
                version=until,
                columns=list(self.schema.names),
            )
        except QuiverError as e:
            refused = e.details.get("version")
            if e.code != "failed_precondition" or not isinstance(refused, int):
                raise
            raise QuiverStreamError(
                f"{e.message}. Start a new streaming query (a new checkpointLocation) with "
                f".option('starting_version', '{refused + 1}') to follow later appends",
                refused,
            ) from None

    def latestOffset(  # noqa: N802
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        """The latest version, or the one before the first version that did more than
        append (so the appends before it are delivered before the stream fails).

        PySpark 4.1 passes no `start`: the last planned end stands in for it, else the
        latest version is returned and `partitions` reports a refused version."""
        start = start if start is not None else self.last
        with self.conn.client() as client:
            latest = self._latest(client)
            if self.target is not None:
                latest = min(latest, self.target)
            if start is None:
                return {"version": latest}
            since = int(start["version"])
            if latest <= since:
                return start
            try:
                info = self._info(client, since, latest)
            except QuiverStreamError as e:
                if e.version - 1 <= since:
                    raise
                latest = e.version - 1  # deliver the appends before it first
                info = self._info(client, since, latest)
        if ReadMaxFiles is not None and isinstance(limit, ReadMaxFiles):
            latest = _capped(info, since, latest, limit.max_files)
        return {"version": latest}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[QuiverPartition]:
        since, until = int(start["version"]), int(end["version"])
        self.last = {"version": until}
        if until <= since:
            return []
        with self.conn.client() as client:
            return partitions_of(client, self._info(client, since, until))

    def read(self, partition: QuiverPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.conn, self.schema, partition)
