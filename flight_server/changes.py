"""Row changes over Flight: merges put at once, and changes applied from staged rows.

- `merge_put`: a DoPut whose descriptor holds a merge (`wire.requests.merge_command`);
  the uploaded rows are merged into the dataset (pylance's merge_insert) in one version.
- `backfill_put`: a DoPut whose descriptor holds a backfill; its rows, naming their
  `_rowaddr`, add columns or rewrite existing ones in place, in one version.
- `stage_source`: a staging DoPut with mode "source": the rows of a change to come (a
  Spark task's share of an upsert or a backfill, a `_rowaddr` column included), written
  as an Arrow IPC file under the dataset's `data/` (Lance ignores it), recorded in the
  staging ledger under the put's job, and answered as fragment strings marked as a source
  (the commit action refuses them).
- `apply_staged`: the `apply_staged` action: the staged sources of many writers read back
  and applied as one change (a merge, or a backfill by row address), committed once:
  with an idempotency key, a retried call answers the version the first one made. The
  source files and the job's other attempts' files are removed afterwards, whether the
  change committed or failed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from quiver.flight_server import metrics
from quiver.flight_server.errors import Cancelled, InvalidArgument
from quiver.flight_server.protocol import MergeRequest, PutRequest
from quiver.flight_server.uploads import StreamBroken, checked_stream
from quiver.format.dataset import LanceDataset
from quiver.format.dataset.backfill import add_columns_by_address, update_columns_by_address
from quiver.format.dataset.write import data_file_name
from quiver.format.io.store import ObjectStore
from quiver.format.proto import table_pb2
from quiver.format.table.commit import find_idempotent_commit
from quiver.format.table.schema import LanceSchema
from quiver.format.table.transaction import IDEMPOTENCY_KEY

if TYPE_CHECKING:
    from quiver.flight_server.handles import DatasetHandles
    from quiver.flight_server.writes import StagedFragment, Writes

# the extension of a staged source's file (Arrow IPC) under the dataset's `data/`
SOURCE_SUFFIX = ".source.arrow"


def _merge(ds: LanceDataset, spec: MergeRequest, source: pa.Table, key: str | None) -> dict:
    builder = ds.merge_insert(list(spec.on) if spec.on else None)
    if spec.when_matched == "update_all":
        builder.when_matched_update_all(spec.matched_condition)
    elif spec.when_matched == "delete":
        builder.when_matched_delete()
    elif spec.when_matched == "fail":
        builder.when_matched_fail()
    if spec.insert:
        builder.when_not_matched_insert_all()
    if spec.delete_by_source:
        builder.when_not_matched_by_source_delete(spec.by_source_filter)
    builder.conflict_retries(spec.conflict_retries)
    if key is not None:
        builder.transaction_properties({IDEMPOTENCY_KEY: key})
    stats = builder.execute(source)
    metrics.committed("merge")
    return {
        "version": ds.version,
        "rows": source.num_rows,
        "inserted_rows": stats["num_inserted_rows"],
        "updated_rows": stats["num_updated_rows"],
        "deleted_rows": stats["num_deleted_rows"],
    }


def merge_put(
    writes: Writes,
    name: str,
    spec: MergeRequest,
    schema: pa.Schema,
    batches: Iterable[pa.RecordBatch],
    cancelled: Callable[[], bool],
    key: str | None = None,
) -> dict[str, Any]:
    """Merge the uploaded rows into the dataset and commit one version: the stream is
    read whole first (a retry merges it again on the newest version), and a cancelled or
    broken upload commits nothing. A merge repeated with its idempotency key answers the
    first one's version."""
    source = _uploaded(schema, batches, cancelled)
    done = repeated(writes.handles, name, key, rows=source.num_rows)
    if done is not None:
        return done
    return _merge(writes.handles.open_latest(name), spec, source, key)


def repeated(
    handles: DatasetHandles, name: str, key: str | None, **answer: Any
) -> dict[str, Any] | None:
    """The answer to a write whose idempotency `key` committed already: that version,
    `answer`'s fields and `duplicate` (None if the key has not committed)."""
    if key is None:
        return None
    found = find_idempotent_commit(handles.store(name), key, None)
    return None if found is None else {"version": found, **answer, "duplicate": True}


def _uploaded(
    schema: pa.Schema, batches: Iterable[pa.RecordBatch], cancelled: Callable[[], bool]
) -> pa.Table:
    """A whole upload (the source of a change), or Cancelled when it was cut off."""
    try:
        rows = list(checked_stream(schema, batches, cancelled))
    except StreamBroken:
        raise Cancelled("the upload was cut off before its end; nothing was changed") from None
    if cancelled():
        raise Cancelled("the upload was cancelled; nothing was changed")
    return pa.Table.from_batches(rows, schema=schema)


def _backfill(ds: LanceDataset, backfill: str, source: pa.Table, key: str | None) -> dict:
    props = {IDEMPOTENCY_KEY: key} if key else None
    if backfill == "add_columns":
        core = add_columns_by_address(ds.core, source, properties=props)
        metrics.committed("add_columns")
        return {"version": core.version, "rows": source.num_rows}
    core, stats = update_columns_by_address(ds.core, source, properties=props)
    metrics.committed("update_columns")
    return {
        "version": core.version,
        "rows": source.num_rows,
        "updated_rows": stats["num_rows_updated"],
    }


def backfill_put(
    writes: Writes,
    name: str,
    backfill: str,
    schema: pa.Schema,
    batches: Iterable[pa.RecordBatch],
    cancelled: Callable[[], bool],
    key: str | None = None,
) -> dict[str, Any]:
    """Apply uploaded `_rowaddr`-keyed rows as a backfill and commit one version (once per
    idempotency key)."""
    source = _uploaded(schema, batches, cancelled)
    done = repeated(writes.handles, name, key, rows=source.num_rows)
    if done is not None:
        return done
    return _backfill(writes.handles.open_latest(name), backfill, source, key)


def stage_source(
    writes: Writes,
    request: PutRequest,
    schema: pa.Schema,
    batches: Iterable[pa.RecordBatch],
    cancelled: Callable[[], bool],
) -> dict[str, Any]:
    """Stage uploaded rows as the source of a change (see the module's description): one
    Arrow IPC file under the dataset's `data/`, written as the rows arrive (a source is
    read back once, whole, by `apply_staged`: encoding it as a Lance file would only cost
    an encode and a decode)."""
    name = request.dataset
    writes.handles.open_latest(name)  # a change needs its dataset
    if len(set(schema.names)) != len(schema.names):
        raise InvalidArgument("a staged source names a column twice")
    LanceSchema.from_arrow(schema)  # a type Lance cannot store fails here, not when applied
    store = writes.handles.store(name)
    file = data_file_name().removesuffix(".lance") + SOURCE_SUFFIX
    sink = store.open_write(f"data/{file}")
    rows = 0
    try:
        with pa.ipc.new_file(sink, schema) as out:
            for batch in checked_stream(schema, batches, cancelled):
                out.write_batch(batch)
                rows += batch.num_rows
        sink.close()
    except BaseException as e:
        abort = getattr(sink, "abort", None)
        with contextlib.suppress(Exception):
            abort() if abort else sink.close()
        with contextlib.suppress(Exception):
            store.delete(f"data/{file}")
        if isinstance(e, StreamBroken):
            raise Cancelled("the upload was cut off before its end; nothing was staged") from None
        raise
    staged = table_pb2.DataFragment(files=[table_pb2.DataFile(path=file)], physical_rows=rows)
    if cancelled() or not rows:
        writes.discard_written(name, [staged])
        if cancelled():
            raise Cancelled("the upload was cancelled; nothing was staged")
        return {"fragments": [], "rows": 0}
    return writes.stage_written(name, [staged], schema, None, request.job, source=True)


def _read_source(store: ObjectStore, staged: list[StagedFragment]) -> pa.Table:
    """The rows of staged sources, as one table."""
    tables = []
    for s in staged:
        for df in s.fragment.files:
            if not df.path.endswith(SOURCE_SUFFIX):
                raise InvalidArgument("a staged fragment that is not a source's file")
            path = f"data/{df.path}"
            data = (
                pa.memory_map(store.full_path(path))
                if store.is_local
                else pa.py_buffer(store.read_all(path))
            )
            try:
                tables.append(pa.ipc.open_file(data).read_all())
            except pa.ArrowInvalid:
                raise InvalidArgument("a staged source's file is damaged; stage it again") from None
    try:
        return pa.concat_tables(tables)
    except pa.ArrowInvalid:
        raise InvalidArgument("the staged sources of one change must share one schema") from None


def apply_staged(
    writes: Writes,
    name: str,
    staged: list[StagedFragment],
    *,
    merge: MergeRequest | None,
    backfill: str | None,
    job: str | None,
    idempotency_key: str | None,
) -> dict[str, Any]:
    """Apply staged sources as one change (see the module's description)."""
    if (merge is None) == (backfill is None):
        raise InvalidArgument("apply_staged body: give exactly one of 'merge' and 'backfill'")
    if any(not s.source for s in staged):
        raise InvalidArgument("apply_staged takes fragments staged with mode 'source' only")
    store = writes.handles.store(name)
    ds = writes.handles.open_latest(name)
    rows = sum(int(s.fragment.physical_rows) for s in staged)
    if not staged:  # every task of the job staged nothing: no change, no version
        writes.abort(name, staged, job)
        return {"version": ds.version, "rows": 0}
    try:
        done = repeated(writes.handles, name, idempotency_key, rows=rows)
        if done is not None:
            return done
        for s in staged:
            for df in s.fragment.files:
                if not store.exists(f"data/{df.path}"):
                    raise InvalidArgument(
                        "a staged source's data file is gone (applied, aborted or cleaned "
                        "up); stage the rows again"
                    )
        source = _read_source(store, staged)
        if merge is not None:
            return _merge(ds, merge, source, idempotency_key)
        assert backfill is not None
        return _backfill(ds, backfill, source, idempotency_key)
    finally:
        writes.abort(name, staged, job)  # the sources' files go, committed or not
