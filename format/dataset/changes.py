"""The fragments appended between two versions: what a stream that follows a dataset reads.

`appended_between(store, since, until)` walks the transactions of versions `since + 1`
… `until` (inline in each manifest, else under `_transactions/`) and lists, oldest first,
every fragment an Append commit added, each with the version that added it. A reader
pinned to that version sees exactly the appended rows, whatever later commits do.

How each operation counts:
- `append`, and the `overwrite` that creates a dataset (version 1): rows added, listed;
- `delete`, `rewrite` (compaction), `create_index`, `update_config`, `reserve_fragments`,
  `update_bases`: no rows added, skipped (a delete does not retract rows already appended);
- `overwrite` of an existing dataset, `update`, `merge` (add columns), `project` (drop
  columns), `data_replacement`, `restore`, `clone` and operations this engine does not
  know: the rows are no longer "the old rows plus appended ones", so
  `NotAppendOnlyError` names the first such version and its operation.
A version without a transaction record is judged from its manifest against the previous
one: only new fragments (old ones untouched) is an append; untouched fragment files with
other deletions is a delete; anything else is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from quiver.format.errors import InvalidInputError, NotAppendOnlyError, VersionNotFoundError
from quiver.format.io.store import ObjectStore
from quiver.format.proto import table_pb2, transaction_pb2
from quiver.format.table import versions as _versions
from quiver.format.table.commit import read_transaction
from quiver.format.table.manifest import Manifest
from quiver.format.table.transaction import operation_of

__all__ = ["ADDS_NO_ROWS", "AppendedFragment", "appended_between"]

ADDS_NO_ROWS = frozenset(
    {
        "delete",
        "rewrite",
        "create_index",
        "update_config",
        "reserve_fragments",
        "update_bases",
    }
)
_WHY = {
    "overwrite": "replaced every row",
    "update": "rewrote rows in place",
    "merge": "changed the schema (columns added or rewritten)",
    "project": "changed the schema (columns dropped or renamed)",
    "data_replacement": "replaced column data",
    "restore": "restored an older version",
    "clone": "cloned another dataset",
}


@dataclass(frozen=True)
class AppendedFragment:
    """One fragment an append added: the version that added it, its id and its rows."""

    version: int
    fragment_id: int
    rows: int


def _files(frag: table_pb2.DataFragment) -> tuple[str, ...]:
    return tuple(f.path for f in frag.files)


def _from_transaction(
    manifest: Manifest, txn: transaction_pb2.Transaction, uri: str
) -> list[table_pb2.DataFragment]:
    """The fragments of `manifest` its transaction appended (raises for row-changing ones)."""
    version = manifest.version
    op = operation_of(txn)
    if op == "append":
        added = {_files(f) for f in txn.append.fragments}
        found = [f for f in manifest.pb.fragments if _files(f) in added]
        if len(found) != len(added):
            # a later commit cannot change this manifest: the transaction and it disagree
            raise NotAppendOnlyError(
                f"{uri}: version {version} is an append whose fragments are not all in its "
                "manifest; cannot tell which rows it added",
                version=version,
                operation="append",
            )
        return found
    if op == "overwrite" and version == 1:
        return list(manifest.pb.fragments)  # the dataset's creation: its first rows
    if op in ADDS_NO_ROWS:
        return []
    why = _WHY.get(op or "", "is an operation this engine does not know")
    raise NotAppendOnlyError(
        f"{uri}: version {version} ({op or 'unknown operation'}) {why}; only appends (and "
        "deletes, compactions, index or config changes, which add no rows) can be followed",
        version=version,
        operation=op or "unknown",
    )


def _from_manifests(
    previous: Manifest | None, manifest: Manifest, uri: str
) -> list[table_pb2.DataFragment]:
    """Without a transaction record: an append only if every old fragment is untouched."""
    version = manifest.version
    if previous is None:
        if version == 1:
            return list(manifest.pb.fragments)
        raise NotAppendOnlyError(
            f"{uri}: version {version} has no transaction record and version {version - 1} "
            "is gone; cannot tell which rows it added",
            version=version,
            operation="unknown",
        )
    old = {int(f.id): f for f in previous.pb.fragments}
    new = {int(f.id): f for f in manifest.pb.fragments}
    if any(fid not in new or _files(new[fid]) != _files(f) for fid, f in old.items()):
        raise NotAppendOnlyError(
            f"{uri}: version {version} has no transaction record and removed or rewrote "
            "fragments; cannot tell whether it only appended",
            version=version,
            operation="unknown",
        )
    if previous.pb.fields != manifest.pb.fields:
        raise NotAppendOnlyError(
            f"{uri}: version {version} has no transaction record and changed the schema",
            version=version,
            operation="unknown",
        )
    added = [f for fid, f in new.items() if fid not in old]
    changed = any(new[fid].deletion_file != f.deletion_file for fid, f in old.items())
    if added and changed:
        raise NotAppendOnlyError(
            f"{uri}: version {version} has no transaction record and both added rows and "
            "deleted others (an update?); cannot follow it",
            version=version,
            operation="unknown",
        )
    return sorted(added, key=lambda f: f.id)


def appended_between(store: ObjectStore, since: int, until: int) -> list[AppendedFragment]:
    """Every fragment appended by the versions in (`since`, `until`], oldest first.

    `since` 0 starts before the dataset's creation. Raises `NotAppendOnlyError` at the
    first version in the range that changed rows other than by appending, and
    `VersionNotFoundError` when a version in the range was cleaned up (its rows, pinned to
    it, can no longer be read).
    """
    if since < 0 or until < since:
        raise InvalidInputError(
            f"{store.uri}: the range of versions ({since}, {until}] is empty or negative"
        )
    if since == until:
        return []
    entries = _versions.list_manifests(store)
    missing = [v for v in range(since + 1, until + 1) if v not in entries]
    if missing:
        if not entries or until > max(entries):
            raise VersionNotFoundError(f"{store.uri}: version {until} does not exist")
        raise VersionNotFoundError(
            f"{store.uri}: versions {missing[0]}..{missing[-1]} were cleaned up; the rows "
            "they appended cannot be read any more"
        )
    out: list[AppendedFragment] = []
    previous: Manifest | None = None
    for v in range(since + 1, until + 1):
        manifest = _versions.load_manifest(store, entries[v])
        txn = read_transaction(store, manifest)
        if txn is not None:
            frags = _from_transaction(manifest, txn, store.uri)
        else:
            if previous is None and v - 1 in entries:
                previous = _versions.load_manifest(store, entries[v - 1])
            frags = _from_manifests(previous, manifest, store.uri)
        out.extend(AppendedFragment(v, int(f.id), int(f.physical_rows)) for f in frags)
        previous = manifest
    return out
