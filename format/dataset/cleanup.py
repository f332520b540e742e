"""Version cleanup (`cleanup_old_versions`, pylance 14's ``ds.cleanup_old_versions``).

It follows pylance's rules: every version that is not the one read, not tagged and
matches the policy (older than `older_than`, outside the last `retain_versions`) loses its
manifest; files referenced by a kept version stay; files referenced only by removed
versions go; files no manifest references go only once they are 7 days old (or at once
with `delete_unverified`), since they may belong to a commit in progress.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import posixpath
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from quiver.format.dataset.core import DatasetCore
from quiver.format.errors import (
    CleanupError,
    InvalidInputError,
    VersionNotFoundError,
)
from quiver.format.file.v21.reader import forget_files
from quiver.format.io.lru import forget_opened_in
from quiver.format.io.store import ObjectStore
from quiver.format.proto import table_pb2
from quiver.format.table import versions as _versions
from quiver.format.table.commit import KEYS_DIR
from quiver.format.table.deletion import deletion_file_path
from quiver.format.table.indices import indices_of
from quiver.format.table.manifest import Manifest
from quiver.format.table.transaction import check_writable

__all__ = ["CleanupStats", "cleanup_old_versions"]

UNVERIFIED_THRESHOLD = dt.timedelta(days=7)
DEFAULT_OLDER_THAN = dt.timedelta(days=14)
_NS = 1_000_000_000


@dataclass(frozen=True)
class CleanupStats:
    """What a cleanup removed (pylance's `CleanupStats`)."""

    bytes_removed: int = 0
    old_versions: int = 0
    data_files_removed: int = 0
    transaction_files_removed: int = 0
    index_files_removed: int = 0
    deletion_files_removed: int = 0
    failed_deletes: int = 0


@dataclass
class _Refs:
    data: set[str] = field(default_factory=set)
    deletions: set[str] = field(default_factory=set)
    transactions: set[str] = field(default_factory=set)
    index_uuids: set[str] = field(default_factory=set)


@dataclass
class _Inspection:
    old_manifests: list[tuple[str, int]] = field(default_factory=list)  # (path, size)
    referenced: _Refs = field(default_factory=_Refs)  # by kept versions
    verified: _Refs = field(default_factory=_Refs)  # by removed versions
    tagged_old_versions: set[int] = field(default_factory=set)
    earliest_retained_ns: int | None = None
    latest_deleted_ns: int | None = None


@dataclass(frozen=True)
class _Listed:
    path: str  # relative to the dataset root
    size: int
    mtime_ns: int | None


def _list_tree(store: ObjectStore, prefix: str) -> list[_Listed]:
    """Every file under `prefix` (recursively), with size and modification time."""
    root = store.full_path(prefix)
    try:
        found = store.fs.find(root, detail=True, withdirs=False)
    except (FileNotFoundError, NotADirectoryError):
        return []
    base = store.root.rstrip("/") + "/"
    out = []
    for name, info in found.items():
        if info.get("type") == "directory":
            continue
        full = name.rstrip("/")
        if not full.startswith(base):
            continue
        mtime = info.get("mtime") or info.get("LastModified") or info.get("created")
        if hasattr(mtime, "timestamp"):
            mtime = mtime.timestamp()
        mtime_ns = int(round(float(mtime) * _NS)) if mtime is not None else None
        out.append(_Listed(full[len(base) :], int(info.get("size") or 0), mtime_ns))
    return out


def _index_uuids(manifest: Manifest) -> set[str]:
    return {i.uuid for i in indices_of(manifest, system=True) if i.uuid}


def _record(manifest: Manifest, refs: _Refs) -> None:
    for frag in manifest.pb.fragments:
        for df in frag.files:
            refs.data.add(posixpath.join("data", df.path))
        if frag.HasField("deletion_file"):
            d = frag.deletion_file
            refs.deletions.add(
                deletion_file_path(
                    int(frag.id), d.read_version, d.id, d.file_type == table_pb2.DeletionFile.BITMAP
                )
            )
    if manifest.pb.transaction_file:
        refs.transactions.add(f"_transactions/{manifest.pb.transaction_file}")
    refs.index_uuids |= _index_uuids(manifest)


def _should_clean(
    manifest: Manifest, before_ns: int | None, before_version: int | None, versions: set | None
) -> bool:
    ok = True
    if before_ns is not None:
        ok &= manifest.pb.timestamp.ToNanoseconds() < before_ns
    if before_version is not None:
        ok &= manifest.version < before_version
    if versions is not None:
        ok &= manifest.version in versions
    return ok


def _inspect(
    ds: DatasetCore,
    store: ObjectStore,
    tagged: set[int],
    before_ns: int | None,
    before_version: int | None,
    versions: set | None,
    branch_parents: frozenset[int] = frozenset(),
) -> _Inspection:
    """What every version references, kept or removed. A version kept only because a
    branch was created from it keeps its files but not its transaction, as in pylance."""
    insp = _Inspection()
    read_version = ds.version
    for v, entry in sorted(_versions.list_manifests(store).items()):
        try:
            manifest = _versions.load_manifest(store, entry)
        except VersionNotFoundError:
            if v < read_version:  # removed by a concurrent cleanup meanwhile
                continue
            raise
        manifest.check_readable(store.uri)
        check_writable(manifest, store.uri)
        is_latest = read_version <= manifest.version
        is_tagged = manifest.version in tagged
        old = _should_clean(manifest, before_ns, before_version, versions)
        parent_only = old and not is_latest and not is_tagged and v in branch_parents
        keep = is_latest or not old or is_tagged or parent_only
        if is_tagged and not is_latest and old:
            insp.tagged_old_versions.add(manifest.version)
        _record(manifest, insp.referenced if keep else insp.verified)
        if parent_only and manifest.pb.transaction_file:
            txn = f"_transactions/{manifest.pb.transaction_file}"
            insp.referenced.transactions.discard(txn)
            insp.verified.transactions.add(txn)
        ts = manifest.pb.timestamp.ToNanoseconds()
        if keep:
            if insp.earliest_retained_ns is None or ts < insp.earliest_retained_ns:
                insp.earliest_retained_ns = ts
        else:
            insp.old_manifests.append((entry.path, entry.size))
            if insp.latest_deleted_ns is None or ts > insp.latest_deleted_ns:
                insp.latest_deleted_ns = ts
    return insp


_DATA, _TXN, _INDEX, _DELETION, _TMP_MANIFEST = "data", "txn", "index", "deletion", "tmp"
_KEY = "key"  # an idempotency key's record (Quiver's own, `format.table.commit.KEYS_DIR`)
KEY_RECORD_GRACE = dt.timedelta(minutes=5)


def _classify(f: _Listed, in_progress: bool, insp: _Inspection) -> str | None:
    """The kind of file to remove, or None to keep it (pylance's per-file rules)."""
    path = f.path
    ref, ver = insp.referenced, insp.verified

    def three_way(referenced: bool, verified: bool, kind: str) -> str | None:
        if referenced:
            return None
        if not in_progress or verified:
            return kind
        return None

    if path.startswith("_versions/.tmp"):
        return None if in_progress else _TMP_MANIFEST
    name = posixpath.basename(path)
    if path.startswith("data/") and name.startswith(".tmp"):
        return None if in_progress else _DATA  # a killed writer's temporary file
    parts = path.split("/")
    if parts[0] == "_indices":
        if len(parts) < 3:
            return None
        return three_way(parts[1] in ref.index_uuids, parts[1] in ver.index_uuids, _INDEX)
    ext = name.rsplit(".", 1)[1] if "." in name else ""
    if ext == "lance":
        if not path.startswith("data"):
            return None
        return three_way(path in ref.data, path in ver.data, _DATA)
    if ext == "blob":
        # blob v2 sidecars, data/{data file stem}/{blob}.blob, live as long as their data file
        if len(parts) != 3 or parts[0] != "data":
            return None
        parent = f"data/{parts[1]}.lance"
        return three_way(parent in ref.data, parent in ver.data, _DATA)
    if ext in ("arrow", "bin"):
        if not path.startswith("_deletions"):
            return None
        return three_way(path in ref.deletions, path in ver.deletions, _DELETION)
    if ext == "txn":
        if not path.startswith("_transactions"):
            return None
        return three_way(path in ref.transactions, path in ver.transactions, _TXN)
    return None


def _branch_parents(root: ObjectStore, branch: str | None) -> set[int]:
    """Versions of `branch` (None: the main line) that other branches were created from:
    kept by a cleanup, as pylance keeps them (a branch reads its parent version's files
    through a base path)."""
    found = _versions.list_branches(root).values()
    return {b.parent_version for b in found if b.parent_branch == branch}


def cleanup_old_versions(
    ds: DatasetCore,
    older_than: dt.timedelta | None = None,
    retain_versions: int | None = None,
    *,
    delete_unverified: bool = False,
    error_if_tagged_old_versions: bool = True,
    versions: Sequence[int] | None = None,
) -> CleanupStats:
    """Remove old versions and the files only they reference (pylance's rules).

    A version is removed when it is older than `older_than` (default two weeks when neither
    `older_than`, `retain_versions` nor `versions` is given), is not among the last
    `retain_versions` versions, is in `versions` (when given; all given conditions must
    hold), is older than the version `ds` reads, and is not tagged; a tagged version that
    would otherwise go raises CleanupError unless `error_if_tagged_old_versions` is False.
    On a branch, only the branch's versions and the files it wrote are considered.
    Data, deletion, transaction and index files referenced by a kept version are kept;
    files referenced only by removed versions are removed; files no manifest references
    are removed only once 7 days old (any age with `delete_unverified`), as they may belong
    to a commit in progress. Files under ``_blobs/`` and ``_fri/`` are never touched.
    """
    store = ds.store
    if older_than is None and retain_versions is None and versions is None:
        older_than = DEFAULT_OLDER_THAN
    if older_than is not None and not isinstance(older_than, dt.timedelta):
        raise InvalidInputError(f"older_than must be a datetime.timedelta, not {older_than!r}")
    now_ns = time.time_ns()
    before_ns = None
    if older_than is not None:
        before_ns = now_ns - (older_than // dt.timedelta(microseconds=1)) * 1000
    before_version = None
    if retain_versions is not None:
        if isinstance(retain_versions, bool) or not isinstance(retain_versions, int):
            raise InvalidInputError(f"retain_versions must be an integer, not {retain_versions!r}")
        if retain_versions < 1:
            raise InvalidInputError(
                f"retain_versions must be greater than 0, got {retain_versions}"
            )
        existing = sorted(_versions.list_manifests(store))
        if existing:
            before_version = existing[max(0, len(existing) - retain_versions)]
    chosen = None
    if versions is not None:
        chosen = {int(v) for v in versions}
        if not chosen:
            raise InvalidInputError("versions must not be empty when given")

    root = ds.root_store
    tags = {n: t for n, t in _versions.list_tags(root).items() if t.branch == ds.branch}
    tagged = {t.version for t in tags.values()}
    branch_parents = _branch_parents(root, ds.branch)
    insp = _inspect(ds, store, tagged, before_ns, before_version, chosen, frozenset(branch_parents))
    if error_if_tagged_old_versions and insp.tagged_old_versions:
        hit = {
            n: t.version for n, t in sorted(tags.items()) if t.version in insp.tagged_old_versions
        }
        raise CleanupError(
            f"{ds.uri}: {len(hit)} tagged version(s) have been marked for cleanup. Either set "
            "`error_if_tagged_old_versions=False` or delete the following tag(s) to enable "
            f"cleanup: {hit}"
        )
    return _delete_unreferenced(store, insp, now_ns, delete_unverified)


def _delete_unreferenced(
    store: ObjectStore, insp: _Inspection, now_ns: int, delete_unverified: bool
) -> CleanupStats:
    threshold_ns = now_ns - (UNVERIFIED_THRESHOLD // dt.timedelta(microseconds=1)) * 1000
    # Only files at least as old as the oldest kept version are candidates, unless a removed
    # version is newer than a kept one (e.g. a tag on an old version): then list everything.
    cutoff = insp.earliest_retained_ns
    if cutoff is not None and insp.latest_deleted_ns is not None:
        if insp.latest_deleted_ns > cutoff:
            cutoff = None
    data_cutoff = None if delete_unverified or cutoff is None else max(cutoff, threshold_ns)
    listings = [
        ("_versions", cutoff),
        ("_transactions", cutoff),
        ("data", data_cutoff),
        ("_indices", None),  # referenced by uuid from removed manifests: always scanned
        ("_deletions", cutoff),
    ]
    doomed: list[tuple[_Listed, str]] = []
    for prefix, limit in listings:
        for f in _list_tree(store, prefix):
            if limit is not None and f.mtime_ns is not None and f.mtime_ns > limit:
                continue
            in_progress = not delete_unverified and (
                f.mtime_ns is None or f.mtime_ns >= threshold_ns
            )
            kind = _classify(f, in_progress, insp)
            if kind is not None:
                doomed.append((f, kind))
    if cutoff is not None:
        # a key's record has outlived its retries once it is older than every kept version
        # (by a margin: the record is written just before its commit's manifest)
        keys_cutoff = cutoff - (KEY_RECORD_GRACE // dt.timedelta(microseconds=1)) * 1000
        doomed += [
            (f, _KEY)
            for f in _list_tree(store, KEYS_DIR)
            if f.mtime_ns is not None and f.mtime_ns < keys_cutoff
        ]
    counts = dict.fromkeys((_DATA, _TXN, _INDEX, _DELETION, _TMP_MANIFEST, _KEY), 0)
    removed_bytes = 0
    failed = 0
    emptied_dirs: set[str] = set()
    removed: set[str] = set()  # as readers name them, for their caches
    for f, kind in doomed:
        try:
            store.delete(f.path)
        except OSError:
            failed += 1
            continue
        counts[kind] += 1
        removed_bytes += f.size
        removed.add(store.uri_of(f.path))
        parent = posixpath.dirname(f.path)
        if kind in (_INDEX, _DATA) and parent not in ("_indices", "data"):
            emptied_dirs.add(parent)
    # manifests last: an interrupted cleanup leaves old versions whose files the next run
    # still recognises as theirs
    old_versions = 0
    for path, size in sorted(insp.old_manifests):
        try:
            store.delete(path)
        except OSError:
            failed += 1
            continue
        old_versions += 1
        removed_bytes += size
    forget_files(removed)
    forget_opened_in({posixpath.dirname(p) for p in removed})  # index segments held open
    if store.is_local:
        for d in sorted(emptied_dirs, key=len, reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(store.full_path(d))
    return CleanupStats(
        bytes_removed=removed_bytes,
        old_versions=old_versions,
        data_files_removed=counts[_DATA],
        transaction_files_removed=counts[_TXN],
        index_files_removed=counts[_INDEX],
        deletion_files_removed=counts[_DELETION],
        failed_deletes=failed,
    )
