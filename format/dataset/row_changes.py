"""Row-level changes: rows rewritten into new fragments and their old copies deleted,
committed as one `Update` transaction, the way pylance 14 commits `update` and
`merge_insert` (update mode REWRITE_ROWS).

A change is planned on one version (`RowChange`): the physical rows it deletes per
fragment (its *affected rows*, kept in memory for rebasing over concurrent deletes and
updates, as pylance keeps them; they are not persisted), and the new fragments holding
the rewritten and inserted rows, rewritten rows first (with stable row ids they carry
their old row ids, inserted rows get fresh ones at commit). `commit_change` writes the
deletion files and commits; `run_with_retries` re-plans a change on the latest version
when a concurrent commit makes it retryable, up to `conflict_retries` times within
`retry_timeout`, removing what the failed attempt wrote.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fragment import fragments_of
from quiver.format.dataset.write import DEFAULT_MAX_ROWS_PER_FILE, write_fragment_files
from quiver.format.errors import CommitConflictError, InvalidInputError
from quiver.format.file.blob_values import ExternalBlobs
from quiver.format.numeric import unique_sorted
from quiver.format.proto import table_pb2, transaction_pb2
from quiver.format.table.commit import commit_transaction
from quiver.format.table.deletion import with_deletion_file
from quiver.format.table.rowids import encode_row_ids
from quiver.format.table.transaction import ManifestContext, new_transaction

Fragment = table_pb2.DataFragment
DEFAULT_CONFLICT_RETRIES = 10
DEFAULT_RETRY_TIMEOUT = dt.timedelta(seconds=30)
_LOW32 = np.uint64(0xFFFFFFFF)


@dataclass
class RowChange:
    """What one change does to one version, before its commit."""

    core: DatasetCore
    # fragment id -> sorted physical offsets this change deletes (live rows at `core`)
    affected: dict[int, np.ndarray] = field(default_factory=dict)
    new_fragments: list[Fragment] = field(default_factory=list)
    # field ids whose values changed (pylance's fields_for_preserving_frag_bitmap)
    preserving: list[int] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)
    # a delete commits a `Delete` transaction with this predicate instead of an `Update`
    delete_predicate: str | None = None
    # a merge on the primary key: the keys it inserted (see format.table.key_filter)
    inserted_rows: transaction_pb2.Transaction.KeyExistenceFilter | None = None

    def delete_addresses(self, addresses: np.ndarray) -> None:
        """Add row addresses (fragment << 32 | offset) to the rows this change deletes."""
        addr = np.asarray(addresses, dtype=np.uint64)
        if not len(addr):
            return
        frag = addr >> np.uint64(32)
        order = np.argsort(frag, kind="stable")
        frag, addr = frag[order], addr[order]
        bounds = np.flatnonzero(np.diff(frag)) + 1
        for piece in np.split(addr, bounds):
            fid = int(piece[0] >> np.uint64(32))
            offsets = (piece & _LOW32).astype(np.uint64)
            old = self.affected.get(fid)
            self.affected[fid] = (
                np.union1d(old, offsets) if old is not None else unique_sorted(offsets)
            )

    @property
    def written_files(self) -> list[str]:
        """Data files this change wrote (relative to the dataset root)."""
        return [f"data/{df.path}" for f in self.new_fragments for df in f.files]

    def discard(self) -> None:
        """Remove the data files written for a change that will not commit."""
        for path in self.written_files:
            with contextlib.suppress(Exception):
                self.core.store.delete(path)

    def commit(self) -> DatasetCore:
        """Commit this change as the next version (see `commit_change`)."""
        return commit_change(self)


class PlannedChange(Protocol):
    """A change planned on one version and written, not yet committed."""

    stats: dict[str, int]

    def commit(self) -> DatasetCore: ...

    def discard(self) -> None: ...


def write_rows(
    change: RowChange,
    batches: Iterable[pa.RecordBatch],
    *,
    carried_row_ids: list[np.ndarray] | None = None,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    external: ExternalBlobs | None = None,
) -> None:
    """Write `batches` (the dataset's full schema) into new fragments of `change`
    (`external`: how blob values given as URIs are written, refused by default).

    With stable row ids, `carried_row_ids` (filled while `batches` is consumed) are the
    old row ids of the first rows written (rewritten rows come before inserted ones); each
    new fragment records those of its rows, and the commit gives the rest fresh ids, as
    pylance's merge_insert does.
    """
    core = change.core
    schema = core.schema
    reader = pa.RecordBatchReader.from_batches(schema, batches)
    frags = write_fragment_files(
        core.store,
        reader,
        core.lance_schema,
        core.data_storage_version,
        max_rows_per_file=max_rows_per_file,
        external=external,
    )
    change.new_fragments.extend(frags)
    if carried_row_ids is None or not core.manifest.uses_stable_row_ids:
        return
    carried = np.concatenate(carried_row_ids) if carried_row_ids else np.empty(0, np.uint64)
    start = 0
    for frag in frags:
        n = int(frag.physical_rows)
        ids = carried[start : start + n]
        start += n
        if len(ids):
            frag.inline_row_ids = encode_row_ids(np.asarray(ids, dtype=np.uint64))


def _deletion_updates(
    change: RowChange,
) -> tuple[list[Fragment], list[int], list[str]]:
    """New deletion files for the fragments `change` deletes rows of: the updated
    fragments, the ids of fragments left with no live row, and the files written."""
    core = change.core
    updated: list[Fragment] = []
    removed: list[int] = []
    paths: list[str] = []
    by_id = {f.fragment_id: f for f in fragments_of(core)}
    for fid in sorted(change.affected):
        frag = by_id.get(fid)
        if frag is None:
            raise InvalidInputError(f"{core.uri}: fragment {fid} is not in version {core.version}")
        deleted = np.union1d(frag.deleted_offsets, change.affected[fid])
        if len(deleted) >= frag.physical_rows:
            removed.append(fid)
            continue
        pb, path = with_deletion_file(core.store, frag.metadata, core.version, deleted)
        paths.append(path)
        updated.append(pb)
    return updated, removed, paths


def change_transaction(
    change: RowChange,
) -> tuple[transaction_pb2.Transaction, list[str]]:
    """The transaction of a change and the deletion files it wrote (its data files are in
    `change.new_fragments`): a `Delete` for a delete, else an `Update` (REWRITE_ROWS)."""
    updated, removed, paths = _deletion_updates(change)
    T = transaction_pb2.Transaction
    if change.delete_predicate is not None:
        body = T.Delete(
            updated_fragments=updated,
            deleted_fragment_ids=removed,
            predicate=change.delete_predicate,
        )
        txn = new_transaction(change.core.version, "delete", body, properties=change.properties)
        return txn, paths
    body = T.Update(
        removed_fragment_ids=removed,
        updated_fragments=updated,
        new_fragments=change.new_fragments,
        fields_for_preserving_frag_bitmap=change.preserving,
        update_mode=T.REWRITE_ROWS,
    )
    if change.inserted_rows is not None:
        body.inserted_rows.CopyFrom(change.inserted_rows)
    txn = new_transaction(change.core.version, "update", body, properties=change.properties)
    return txn, paths


def commit_change(change: RowChange) -> DatasetCore:
    """Commit a planned change as the next version; its files are removed if it fails."""
    core = change.core
    paths: list[str] = []
    try:
        txn, paths = change_transaction(change)
        result = commit_transaction(
            core.store,
            txn,
            ctx=ManifestContext(load_version=core.load_version),
            affected=change.affected,
        )
    except BaseException:
        change.discard()
        for path in paths:
            with contextlib.suppress(Exception):
                core.store.delete(path)
        raise
    return DatasetCore(core.store, result.manifest, core.storage_options)


def check_retry_options(conflict_retries: Any, retry_timeout: Any) -> tuple[int, float]:
    """`conflict_retries` (an int >= 0) and `retry_timeout` (a timedelta) as numbers."""
    if isinstance(conflict_retries, bool) or not isinstance(conflict_retries, int):
        raise InvalidInputError(f"conflict_retries must be an integer, not {conflict_retries!r}")
    if conflict_retries < 0:
        raise InvalidInputError(f"conflict_retries must be >= 0, not {conflict_retries}")
    if isinstance(retry_timeout, dt.timedelta):
        seconds = retry_timeout.total_seconds()
    elif isinstance(retry_timeout, (int, float)) and not isinstance(retry_timeout, bool):
        seconds = float(retry_timeout)
    else:
        raise InvalidInputError(f"retry_timeout must be a timedelta, not {retry_timeout!r}")
    if seconds < 0:
        raise InvalidInputError("retry_timeout must not be negative")
    return conflict_retries, seconds


def run_with_retries(
    core: DatasetCore,
    plan: Callable[[DatasetCore], PlannedChange | None],
    conflict_retries: int,
    retry_timeout: float,
) -> tuple[DatasetCore, dict[str, int]]:
    """Plan a change on `core` and commit it; a retryable conflict plans it again on the
    latest version (at most `conflict_retries` times, while `retry_timeout` seconds have
    not passed). `plan` returns None when there is nothing to commit."""
    deadline = time.monotonic() + retry_timeout
    attempt = 0
    while True:
        change = plan(core)
        if change is None:
            return core, {}
        try:
            return change.commit(), change.stats
        except CommitConflictError as e:
            attempt += 1
            if not e.retryable or attempt > conflict_retries or time.monotonic() > deadline:
                if e.retryable:
                    raise CommitConflictError(
                        f"{e} (gave up after {attempt} attempt(s))",
                        version=e.version,
                        retryable=True,
                    ) from None
                raise
            core = DatasetCore.open(core.uri, storage_options=core.storage_options)
