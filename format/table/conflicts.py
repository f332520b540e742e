"""Can my transaction commit after theirs? The conflict table of the Lance commit protocol.

Each check answers, from the point of view of the transaction being committed, what a
transaction that committed since its read version means for it:
- OK: apply mine on top of the newer manifest as it is;
- REBASE: compatible, but mine must be transformed first (deletion vectors merged);
- RETRY: the caller has to redo its operation on the new version;
- INCOMPATIBLE: the operation can never succeed (e.g. the table was overwritten).
A missing or unknown transaction is a RETRY conflict: we cannot prove it harmless.
"""

from __future__ import annotations

import enum

from quiver.format.proto import transaction_pb2
from quiver.format.table.key_filter import may_share_a_key
from quiver.format.table.transaction import operation_of

Transaction = transaction_pb2.Transaction


class Resolution(enum.Enum):
    """What a committed transaction means for the one being committed."""

    OK = "ok"
    REBASE = "rebase"
    RETRY = "retry"
    INCOMPATIBLE = "incompatible"


def touched_fragments(txn: Transaction) -> set[int]:
    """Ids of existing fragments a transaction modifies or removes."""
    op = operation_of(txn)
    if op == "delete":
        return {int(f.id) for f in txn.delete.updated_fragments} | set(
            txn.delete.deleted_fragment_ids
        )
    if op == "update":
        return {int(f.id) for f in txn.update.updated_fragments} | set(
            txn.update.removed_fragment_ids
        )
    if op == "rewrite":
        old = [f for g in txn.rewrite.groups for f in g.old_fragments]
        old += list(txn.rewrite.old_fragments)
        return {int(f.id) for f in old}
    if op == "data_replacement":
        return {int(g.fragment_id) for g in txn.data_replacement.replacements}
    if op == "merge":
        return {int(f.id) for f in txn.merge.fragments}
    return set()


def _config_keys(txn: Transaction) -> set[str]:
    body = txn.update_config
    keys = set(body.upsert_values) | set(body.delete_keys)
    keys |= {e.key for e in body.config_updates.update_entries}
    return keys


def _indexed(txn: Transaction) -> tuple[set[int], set[int], bool]:
    """The fragments and fields a CreateIndex's new indices cover, and whether one has no
    fragment bitmap (covering an unknown set)."""
    from pyroaring import BitMap

    fragments: set[int] = set()
    fields: set[int] = set()
    unknown = False
    for index in txn.create_index.new_indices:
        fields |= set(index.fields)
        if index.fragment_bitmap:
            fragments |= set(BitMap.deserialize(index.fragment_bitmap))
        else:
            unknown = True
    return fragments, fields, unknown


def _create_index_after(index: Transaction, change: Transaction) -> Resolution:
    """A CreateIndex and another change, in either order (pylance 14's rules): only a
    compaction that moved rows the new index holds, or a data replacement of an indexed
    column, makes the later of the two retry; indices are known by uuid, so builds and
    drops of indices never conflict, nor do appends, deletes, updates or schema changes
    (row ids stay valid)."""
    op = operation_of(change)
    if op not in ("rewrite", "data_replacement"):
        return Resolution.OK
    fragments, fields, unknown = _indexed(index)
    if op == "rewrite":
        return (
            Resolution.RETRY if unknown or touched_fragments(change) & fragments else Resolution.OK
        )
    replaced = {f for g in change.data_replacement.replacements for f in g.new_file.fields}
    return Resolution.RETRY if replaced & fields else Resolution.OK


def check(mine: Transaction, theirs: Transaction | None) -> Resolution:
    """How `theirs` (committed after my read version) affects `mine`."""
    me, other = operation_of(mine), operation_of(theirs) if theirs is not None else None
    if other is None:
        return Resolution.RETRY
    if me == "restore":
        return Resolution.OK
    if me == "overwrite":
        if other == "overwrite":
            return Resolution.RETRY
        if other == "update_config" and _config_keys(theirs) & set(
            mine.overwrite.config_upsert_values
        ):
            return Resolution.RETRY
        return Resolution.OK
    if other in ("overwrite", "restore"):
        return Resolution.INCOMPATIBLE
    if me == "create_index":
        return _create_index_after(mine, theirs)
    if other == "create_index" and me in ("rewrite", "data_replacement"):
        return _create_index_after(theirs, mine)
    if other in ("clone", "update_bases"):
        return Resolution.RETRY
    if me == "update_config":
        if other == "update_config" and _config_keys(mine) & _config_keys(theirs):
            return Resolution.RETRY
        return Resolution.OK
    if other in ("update_config", "create_index", "reserve_fragments"):
        return Resolution.OK
    if me == "update" and mine.update.HasField("inserted_rows"):
        # a merge on the primary key: any commit that may have added one of its keys
        # since (an append, an update recording no keys, a merge whose keys may meet
        # ours) makes it retry, so that a key is never inserted twice
        if other == "append":
            return Resolution.RETRY
        if other == "update" and (
            not theirs.update.HasField("inserted_rows")
            or may_share_a_key(mine.update.inserted_rows, theirs.update.inserted_rows)
        ):
            return Resolution.RETRY
    if me in ("append", "reserve_fragments"):
        # new fragments don't touch old ones; a schema change invalidates the data we wrote
        return Resolution.RETRY if other in ("merge", "project") else Resolution.OK
    if me in ("merge", "project"):
        if other == "append" and me == "project":
            return Resolution.OK
        return Resolution.RETRY
    overlap = touched_fragments(mine) & touched_fragments(theirs)
    if me in ("delete", "update"):
        if other == "append":
            return Resolution.OK
        if other in ("merge", "project"):
            return Resolution.RETRY
        if not overlap:
            return Resolution.OK
        rewrites_columns = (
            other == "update" and theirs.update.update_mode == Transaction.REWRITE_COLUMNS
        )
        mine_rewrites_columns = (
            me == "update" and mine.update.update_mode == Transaction.REWRITE_COLUMNS
        )
        if other in ("delete", "update") and not (rewrites_columns or mine_rewrites_columns):
            return Resolution.REBASE  # deletion vectors merged, unless the rows overlap
        return Resolution.RETRY
    if me in ("rewrite", "data_replacement"):
        if other in ("append",):
            return Resolution.OK
        if other in ("merge", "project"):
            return Resolution.RETRY
        if overlap and me == "rewrite" and other in ("delete", "update"):
            if other == "update" and theirs.update.update_mode == Transaction.REWRITE_COLUMNS:
                return Resolution.RETRY
            # their deletions follow the rows to where the compaction moved them (the
            # committer knows; pylance retries the compaction instead)
            return Resolution.REBASE
        return Resolution.RETRY if overlap else Resolution.OK
    return Resolution.RETRY
