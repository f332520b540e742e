"""The commit protocol: write the transaction, check what committed meanwhile, then create
the next manifest with put-if-absent, retrying compatible conflicts with backoff.

No manifest is ever overwritten: a lost race shows up as FileExistsError on the
conditional create, and the loop re-reads the newer versions' transactions.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import random
import struct
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from quiver.format.errors import (
    CommitConflictError,
    CommitUnconfirmedError,
    CorruptFileError,
    StorageUnavailableError,
    VersionNotFoundError,
)
from quiver.format.io.store import ObjectStore, is_transient
from quiver.format.proto import table_pb2, transaction_pb2
from quiver.format.table import versions as _versions
from quiver.format.table.conflicts import Resolution, check
from quiver.format.table.deletion import read_deletion_file, with_deletion_file
from quiver.format.table.index_carry import carry_indices, index_section_of, index_source
from quiver.format.table.indices import frag_reuse_of
from quiver.format.table.manifest import (
    FLAG_STABLE_ROW_IDS,
    Manifest,
    decode_manifest,
    encode_manifest,
    inline_transaction,
    manifest_name,
)
from quiver.format.table.transaction import (
    IDEMPOTENCY_KEY,
    ManifestContext,
    apply_feature_flags,
    build_manifest,
    check_writable,
    operation_of,
    transaction_file_name,
)

TRANSACTIONS_DIR = "_transactions"
HINT_FILE = "_versions/latest_version_hint.json"
DEFAULT_MAX_RETRIES = 20


# Where a keyed commit records, before it commits, the version its first attempt read: a
# retry then searches the versions since, not the whole history (one small object per key).
KEYS_DIR = "_quiver_keys"
# A commit whose manifest write keeps failing this many times in a row gives up with
# CommitUnconfirmedError (its outcome unknown: a retry with its idempotency key settles it).
STORAGE_FAILURES = 6


@dataclass(frozen=True)
class CommitResult:
    """The manifest a commit produced, or the one an idempotent retry found."""

    manifest: Manifest
    duplicate: bool = False  # the idempotency key had already committed


def read_transaction(store: ObjectStore, manifest: Manifest) -> transaction_pb2.Transaction | None:
    """A version's transaction: inline in its manifest, else its `_transactions/` file."""
    txn = inline_transaction(manifest)
    if txn is not None:
        return txn
    name = manifest.pb.transaction_file
    if not name:
        return None
    path = f"{TRANSACTIONS_DIR}/{name}"
    try:
        data = store.read_all(path)
    except FileNotFoundError:
        return None
    txn = transaction_pb2.Transaction()
    try:
        txn.ParseFromString(data)
    except Exception as e:  # noqa: BLE001 - protobuf raises several types
        raise CorruptFileError(store.uri_of(path), f"transaction does not decode: {e}") from None
    return txn


def _key_path(key: str) -> str:
    return f"{KEYS_DIR}/{hashlib.sha256(key.encode()).hexdigest()}.json"


def claim_key(store: ObjectStore, key: str, read_version: int) -> int:
    """Record that a commit carrying idempotency `key` is planned on `read_version`, unless
    an earlier attempt did; returns the version the key's first attempt read (any commit
    the key made is newer)."""
    path = _key_path(key)
    try:
        store.put_if_absent(path, json.dumps({"read_version": read_version}).encode())
        return read_version
    except FileExistsError:
        pass
    first = _key_floor(store, key)
    return read_version if first is None else min(first, read_version)


def _key_floor(store: ObjectStore, key: str) -> int | None:
    """The version the first attempt with `key` read, None if no attempt recorded it."""
    try:
        doc = json.loads(store.read_all(_key_path(key)))
        return int(doc["read_version"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        raise CorruptFileError(store.uri_of(_key_path(key)), "not an idempotency record") from None


def find_idempotent_commit(
    store: ObjectStore, key: str, after: int | None, upto: int | None = None
) -> int | None:
    """The version a commit carrying idempotency `key` made after version `after` (None:
    after the version its first attempt read, which the key's record gives) and up to
    `upto` (None: the latest), or None if no such commit landed. A key never used costs
    one read; a used one, the versions since its first attempt."""
    if after is None:
        after = _key_floor(store, key)
        if after is None:
            return None
    entries = _versions.list_manifests(store)
    for v in sorted(entries, reverse=True):
        if v <= after:
            break
        if upto is not None and v > upto:
            continue
        try:
            txn = read_transaction(store, _versions.load_manifest(store, entries[v]))
        except (VersionNotFoundError, CorruptFileError):
            continue  # cleaned up meanwhile, or not ours to judge here
        if txn is not None and txn.transaction_properties.get(IDEMPOTENCY_KEY) == key:
            return v
    return None


def _rebase(
    store: ObjectStore,
    mine: transaction_pb2.Transaction,
    theirs: transaction_pb2.Transaction,
    latest: Manifest,
    affected: dict[int, np.ndarray] | None,
) -> transaction_pb2.Transaction:
    """My delete or update on top of a concurrent delete or update of the same fragments
    that only changed their deletion files: my deletion vectors merged with theirs.

    With my `affected` rows (the rows my transaction deletes, kept in memory by the
    committer), a row both deleted is a retryable conflict for an update (its new copy
    would revive a deleted row, or an updated row twice), as for pylance; a plain delete
    merges them. Without them an update cannot be rebased."""
    rebased = copy.deepcopy(mine)
    mine_op = operation_of(mine)
    body = rebased.delete if mine_op == "delete" else rebased.update
    mine_removed = body.deleted_fragment_ids if mine_op == "delete" else body.removed_fragment_ids
    op = operation_of(theirs)
    other = theirs.delete if op == "delete" else theirs.update
    gone = set(other.deleted_fragment_ids if op == "delete" else other.removed_fragment_ids)
    their_frags = {int(f.id): f for f in other.updated_fragments}
    current = {int(f.id): f for f in latest.pb.fragments}
    strict = mine_op == "update"

    def lost(fid: int) -> CommitConflictError:
        return CommitConflictError(
            f"{store.uri}: {mine_op} on version {mine.read_version} changes rows of fragment "
            f"{fid} that the {op} committed as version {latest.version} also deleted; "
            "retry on the new version",
            version=latest.version,
            retryable=True,
        )

    def overlaps(fid: int) -> bool:
        if not strict:
            return False
        if affected is None or fid not in affected:
            return True
        if fid in gone or fid not in current:
            return True
        theirs_deleted = _deleted(store, their_frags[fid])
        return bool(np.intersect1d(affected[fid], theirs_deleted, assume_unique=True).size)

    keep = []
    for frag in body.updated_fragments:
        fid = int(frag.id)
        if fid in gone or fid not in current:
            if strict:
                raise lost(fid)
            continue  # their commit removed the fragment; our deletions are moot
        if fid not in their_frags or not their_frags[fid].HasField("deletion_file"):
            keep.append(frag)
            continue
        if overlaps(fid):
            raise lost(fid)
        ours = _deleted(store, frag)
        union = np.union1d(ours, _deleted(store, their_frags[fid]))
        if len(union) >= frag.physical_rows:
            mine_removed.append(fid)
            continue
        merged, _ = with_deletion_file(store, frag, latest.version, union)
        keep.append(merged)
    for fid in list(mine_removed):
        if strict and (fid in gone or fid in their_frags) and overlaps(fid):
            raise lost(fid)
    del body.updated_fragments[:]
    body.updated_fragments.extend(keep)
    ids = sorted(set(mine_removed) - gone)
    del mine_removed[:]
    mine_removed.extend(ids)
    return rebased


@dataclass(frozen=True)
class DeferredRemap:
    """What a compaction that deferred its index remap commits beside its Rewrite: the
    fragment reuse index it leaves (`format.table.frag_reuse`), which extends the version's
    one of uuid `built_on` (None: there was none)."""

    index: table_pb2.IndexMetadata
    built_on: str | None


class RowMover(Protocol):
    """Where a compaction moved rows (`format.table.addresses.AddressMap`)."""

    def apply(self, addresses: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]: ...


def _rebase_rewrite(
    store: ObjectStore,
    mine: transaction_pb2.Transaction,
    theirs: transaction_pb2.Transaction,
    latest: Manifest,
    moved: RowMover,
) -> transaction_pb2.Transaction:
    """My compaction on top of a concurrent delete or update that deleted rows of the
    fragments it rewrote (their data files unchanged): the rows deleted since my read are
    deleted in the new fragments too, at the places `moved` says the compaction put them.

    So a compaction is not lost to every upsert that lands while it writes (pylance makes
    the caller compact again). A new fragment whose rows are all deleted is dropped; a
    source fragment whose data files changed is a retryable conflict."""
    rebased = copy.deepcopy(mine)
    op = operation_of(theirs)
    other = theirs.delete if op == "delete" else theirs.update
    gone = set(other.deleted_fragment_ids if op == "delete" else other.removed_fragment_ids)
    their_frags = {int(f.id): f for f in other.updated_fragments}
    body = rebased.rewrite
    groups = list(body.groups)
    if body.old_fragments or body.new_fragments:  # the pre-groups form
        groups.append(body)
    empty = np.empty(0, np.uint64)
    for group in groups:
        lost = []
        for old in group.old_fragments:
            fid = int(old.id)
            before = _deleted(store, old) if old.HasField("deletion_file") else empty
            if fid in gone:
                now = np.arange(int(old.physical_rows), dtype=np.uint64)
            elif fid in their_frags:
                frag = their_frags[fid]
                if [f.path for f in frag.files] != [f.path for f in old.files]:
                    raise CommitConflictError(
                        f"{store.uri}: rewrite on version {mine.read_version} compacted "
                        f"fragment {fid}, whose data the {op} committed as version "
                        f"{latest.version} rewrote; retry on the new version",
                        version=latest.version,
                        retryable=True,
                    )
                now = _deleted(store, frag) if frag.HasField("deletion_file") else empty
            else:
                continue
            extra = np.setdiff1d(now.astype(np.uint64), before.astype(np.uint64))
            if len(extra):
                lost.append((np.uint64(fid) << np.uint64(32)) | extra)
        if not lost:
            continue
        targets, alive = moved.apply(np.concatenate(lost), store.uri)
        targets = targets[alive]  # rows my compaction had already seen deleted stay so
        keep = []
        for new in group.new_fragments:
            nid = int(new.id)
            mine_now = (targets[(targets >> np.uint64(32)) == np.uint64(nid)]) & np.uint64(
                0xFFFFFFFF
            )
            if not len(mine_now):
                keep.append(new)
                continue
            old_deleted = _deleted(store, new) if new.HasField("deletion_file") else empty
            union = np.union1d(old_deleted.astype(np.uint64), mine_now)
            if len(union) >= int(new.physical_rows):
                continue  # every row of the new fragment was deleted meanwhile
            merged, _ = with_deletion_file(store, new, latest.version, union)
            keep.append(merged)
        del group.new_fragments[:]
        group.new_fragments.extend(keep)
        # a source fragment their commit removed is no longer there to replace
        olds = [f for f in group.old_fragments if int(f.id) not in gone]
        del group.old_fragments[:]
        group.old_fragments.extend(olds)
    return rebased


def _deleted(store: ObjectStore, frag: table_pb2.DataFragment) -> np.ndarray:
    from quiver.format.table.deletion import deletion_file_path

    d = frag.deletion_file
    path = deletion_file_path(
        int(frag.id), d.read_version, d.id, d.file_type == table_pb2.DeletionFile.BITMAP
    )
    return read_deletion_file(store, path, d.file_type)


def _dictionary_prefix(
    pb: table_pb2.Manifest, base: Manifest | None, ctx: ManifestContext
) -> bytes:
    """Legacy dictionary values for the head of the manifest file (where pylance reads them).

    New values come from the writer; otherwise the previous manifest's head is copied
    verbatim, so the offsets (and the absolute positions inside the values) stay valid.
    """
    if ctx.legacy_dictionaries is not None:
        data, where = ctx.legacy_dictionaries
        for field in pb.fields:
            if field.id in where:
                field.dictionary.offset, field.dictionary.length = where[field.id]
        return data
    if base is None or base.raw is None or not any(f.dictionary.length for f in pb.fields):
        return b""
    # the head ends where the first section (index, transaction or manifest) begins
    (manifest_pos,) = struct.unpack_from("<q", base.raw, len(base.raw) - 16)
    starts = [manifest_pos]
    for name in ("index_section", "transaction_section", "transaction_section_deprecated"):
        if base.pb.HasField(name):
            starts.append(getattr(base.pb, name))
    return base.raw[: min(starts)]


def _write_hint(store: ObjectStore, version: int) -> None:
    """Best effort: keep pylance's version hint file from going stale."""
    try:
        store.put(HINT_FILE, json.dumps({"version": version}, separators=(",", ":")).encode())
    except OSError:
        pass


def commit_transaction(
    store: ObjectStore,
    txn: transaction_pb2.Transaction,
    *,
    ctx: ManifestContext | None = None,
    max_retries: int = DEFAULT_MAX_RETRIES,
    affected: dict[int, np.ndarray] | None = None,
    moved: RowMover | None = None,
    deferred: DeferredRemap | None = None,
) -> CommitResult:
    """Commit `txn` (built on `txn.read_version`; 0 creates the dataset) as the next version.

    `affected` (fragment id -> physical offsets) names the rows a delete or update
    deletes, so that it can be rebased over concurrent deletes and updates of other rows
    of the same fragments (see `_rebase`); `moved` maps the rows a compaction (Rewrite)
    moved to their new addresses, so that it can be rebased over concurrent deletes and
    updates of the fragments it rewrote (see `_rebase_rewrite`); `deferred` is the fragment
    reuse index of a Rewrite that deferred its index remap (refused, retryable, when another
    commit changed that index meanwhile)."""
    ctx = ctx or ManifestContext()
    txn_name = transaction_file_name(txn)
    store.put(f"{TRANSACTIONS_DIR}/{txn_name}", txn.SerializeToString())
    landed = False
    tried: list[int] = []  # versions whose manifest this commit tried to create
    try:
        result = _commit_attempts(
            store, txn, txn_name, ctx, max_retries, affected, tried, moved, deferred
        )
        landed = not result.duplicate
        return result
    except Exception as e:
        if not (isinstance(e, StorageUnavailableError) or is_transient(e)) or not tried:
            raise  # (when no manifest write was tried, the commit certainly did not land)
        landed = True  # perhaps it did: its manifest would name the transaction file
        if isinstance(e, CommitUnconfirmedError):
            raise
        raise CommitUnconfirmedError(
            f"{store.uri}: the commit of version {tried[-1]} could not be confirmed, a "
            f"storage request failed ({e}); retry with the same idempotency key"
        ) from None
    finally:
        if not landed:  # a refused commit leaves nothing behind (its manifest never came)
            with contextlib.suppress(Exception):
                store.delete(f"{TRANSACTIONS_DIR}/{txn_name}")


def _commit_attempts(
    store: ObjectStore,
    txn: transaction_pb2.Transaction,
    txn_name: str,
    ctx: ManifestContext,
    max_retries: int,
    affected: dict[int, np.ndarray] | None = None,
    tried: list[int] | None = None,
    moved: RowMover | None = None,
    deferred: DeferredRemap | None = None,
) -> CommitResult:
    """Write the next manifest, checking and rebasing over concurrent commits (the versions
    it tries to create are appended to `tried`)."""
    tried = [] if tried is None else tried
    key = txn.transaction_properties.get(IDEMPOTENCY_KEY)
    checked = int(txn.read_version)
    if key:
        # an earlier attempt with this key may have landed before this one's read version
        first = claim_key(store, key, checked)
        found = find_idempotent_commit(store, key, first, checked) if first < checked else None
        if found is not None:
            entry = _versions.find_entry(store, found)
            return CommitResult(_versions.load_manifest(store, entry), duplicate=True)
    delay = 0.01
    failures = 0
    taken = 0  # the highest version a conditional create found taken
    for _attempt in range(max_retries + 1):
        entries = _versions.list_manifests_through(store, taken)
        latest_version = max(entries) if entries else 0
        for v in range(checked + 1, latest_version + 1):
            if v not in entries:
                continue  # cleaned up; its effects are in the latest manifest
            theirs_manifest = _versions.load_manifest(store, entries[v])
            if theirs_manifest.pb.transaction_file == txn_name:
                # this commit's own manifest, written by an attempt whose answer was lost
                return CommitResult(theirs_manifest)
            theirs = read_transaction(store, theirs_manifest)
            if (
                key
                and theirs is not None
                and theirs.transaction_properties.get(IDEMPOTENCY_KEY) == key
            ):
                return CommitResult(theirs_manifest, duplicate=True)
            resolution = check(txn, theirs)
            if resolution is Resolution.REBASE and operation_of(txn) == "rewrite":
                if moved is None:  # the rows' new places are not known: start again
                    resolution = Resolution.RETRY
                else:
                    txn = _rebase_rewrite(store, txn, theirs, theirs_manifest, moved)
                    store.put(f"{TRANSACTIONS_DIR}/{txn_name}", txn.SerializeToString())
            elif resolution is Resolution.REBASE:
                txn = _rebase(store, txn, theirs, theirs_manifest, affected)
                store.put(f"{TRANSACTIONS_DIR}/{txn_name}", txn.SerializeToString())
            if resolution not in (Resolution.OK, Resolution.REBASE):
                raise CommitConflictError(
                    f"{store.uri}: {operation_of(txn)} on version {txn.read_version} conflicts "
                    f"with the {operation_of(theirs) if theirs else 'unknown'} committed as "
                    f"version {v}"
                    + (
                        "; retry on the new version"
                        if resolution is Resolution.RETRY
                        else "; it cannot succeed"
                    ),
                    version=v,
                    retryable=resolution is Resolution.RETRY,
                )
        checked = latest_version
        base = _versions.load_manifest(store, entries[latest_version]) if latest_version else None
        if base is not None:
            check_writable(base, store.uri)
        if deferred is not None:
            now = frag_reuse_of(base) if base is not None else None
            if (now.uuid if now is not None else None) != deferred.built_on:
                raise CommitConflictError(
                    f"{store.uri}: another commit changed the fragment reuse index since "
                    f"version {txn.read_version}; retry the compaction on the new version",
                    version=latest_version,
                    retryable=True,
                )
        version = latest_version + 1
        v2_names = all(e.v2 for e in entries.values()) if entries else True
        pb = build_manifest(base, txn, version, ctx)
        pb.transaction_file = txn_name
        data = encode_manifest(
            pb,
            transaction=txn,
            index_section=carry_indices(
                index_section_of(index_source(base, txn, ctx)),
                txn,
                {f.id for f in pb.fields},
                stable=bool(pb.reader_feature_flags & FLAG_STABLE_ROW_IDS),
                fragments=pb.fragments,
                reuse=deferred.index if deferred is not None else None,
            ),
            prefix=_dictionary_prefix(pb, base, ctx),
        )
        path = f"{_versions.VERSIONS_DIR}/{manifest_name(version, v2=v2_names)}"
        tried.append(version)
        try:
            store.put_if_absent(path, data)
        except FileExistsError:
            # another commit's, or this one's from an attempt whose answer was lost: the
            # next round's check tells them apart by the manifest's transaction file (and
            # finds it by name if the listing lags behind it)
            failures = 0
            taken = version
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)
            continue
        except Exception as e:
            if not is_transient(e):
                raise
            # the store failed past its own retries: the manifest may or may not be there
            failures += 1
            if failures >= STORAGE_FAILURES:
                raise CommitUnconfirmedError(
                    f"{store.uri}: the commit of version {version} could not be confirmed, "
                    f"the store kept failing ({type(e).__name__}: {e}); retry with the "
                    "same idempotency key"
                ) from None
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)
            continue
        _write_hint(store, version)
        manifest = decode_manifest(data, store.uri_of(path))
        manifest.path = path
        manifest.read_file = store.read_all
        return CommitResult(manifest)
    raise CommitConflictError(
        f"{store.uri}: gave up after {max_retries} retries: too many concurrent commits",
        version=None,
        retryable=True,
    )


def commit_clone(
    store: ObjectStore,
    txn: transaction_pb2.Transaction,
    pb: table_pb2.Manifest,
    source: Manifest,
    indices: table_pb2.IndexSection | None = None,
) -> Manifest:
    """Create a shallow clone's first manifest (same version number as its source), with
    the source's `indices` (their files reached through base paths)."""
    pb.ClearField("transaction_section")
    pb.ClearField("transaction_section_deprecated")
    pb.ClearField("index_section")
    pb.transaction_file = transaction_file_name(txn)
    pb.timestamp.FromNanoseconds(time.time_ns())
    flags = pb.reader_feature_flags | pb.writer_feature_flags
    apply_feature_flags(pb, flags)
    store.put(f"{TRANSACTIONS_DIR}/{pb.transaction_file}", txn.SerializeToString())
    data = encode_manifest(
        pb,
        transaction=txn,
        index_section=indices.SerializeToString() if indices is not None else None,
        prefix=_dictionary_prefix(pb, source, ManifestContext()),
    )
    path = f"{_versions.VERSIONS_DIR}/{manifest_name(pb.version)}"
    try:
        store.put_if_absent(path, data)
    except FileExistsError:
        raise CommitConflictError(f"{store.uri}: a dataset was created here concurrently") from None
    _write_hint(store, pb.version)
    manifest = decode_manifest(data, store.uri_of(path))
    manifest.path = path
    manifest.read_file = store.read_all
    return manifest
