"""Table maintenance: compaction (`compact_files`) and version cleanup (`cleanup_old_versions`).

Both mirror pylance 14 (``ds.optimize.compact_files`` and ``ds.cleanup_old_versions``).

Compaction plans like pylance's default planner: walking the fragments in manifest order,
a fragment is a candidate when more than `materialize_deletions_threshold` of its rows are
deleted ("compact itself") or when it has fewer than `target_rows_per_fragment` physical rows
("compact with neighbours"). Runs of adjacent candidates covered by the same indices form
bins; a bin of one fragment that only wanted neighbours is dropped, and bins are split
greedily so that each part has at least `target_rows_per_fragment` live rows. Each part is
rewritten into ``max(1, rows // target)`` new fragments of balanced sizes (pylance 14 sizes its
output this way), and all parts are committed as one Rewrite transaction. The new fragments
get fresh (largest) ids and, as pylance keeps fragments in id order, their rows move to the
end of the table's scan order, exactly as with pylance. With stable row ids the new
fragments carry the live rows' ids and their created-at / last-updated versions, so `_rowid`
values don't change. Unlike pylance (which first commits a ReserveFragments version to
remap indices) this takes one version; indices simply stop covering the rewritten rows.

Cleanup follows pylance's rules: every version that is not the one read, not tagged and
matches the policy (older than `older_than`, outside the last `retain_versions`) loses its
manifest; files referenced by a kept version stay; files referenced only by removed
versions go; files no manifest references go only once they are 7 days old (or at once
with `delete_unverified`), since they may belong to a commit in progress.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import os
import posixpath
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from format.errors import (
    CommitConflictError,
    InvalidInputError,
    LanceError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from format.io.store import ObjectStore
from format.proto import table_pb2, transaction_pb2
from format.table import versions as _versions
from format.table.deletion import deletion_file_path
from format.table.manifest import Manifest, read_section
from format.table.rowids import decode_row_versions, encode_row_ids, encode_row_versions
from format.table.transaction import check_writable, new_transaction

if TYPE_CHECKING:
    from format.dataset.dataset import LanceDataset
    from format.dataset.fragment import LanceFragment

__all__ = [
    "CleanupError",
    "CleanupStats",
    "CompactionMetrics",
    "DatasetOptimizer",
    "cleanup_old_versions",
    "compact_files",
]

DEFAULT_TARGET_ROWS_PER_FRAGMENT = 1024 * 1024
DEFAULT_MAX_ROWS_PER_GROUP = 1024
DEFAULT_MATERIALIZE_DELETIONS_THRESHOLD = 0.1
COMPACTION_CONFIG_PREFIX = "lance.compaction."
# Indices that describe the table rather than index data; they never constrain compaction.
_SYSTEM_INDICES = frozenset({"__lance_frag_reuse", "__lance_mem_wal"})

UNVERIFIED_THRESHOLD = dt.timedelta(days=7)
DEFAULT_OLDER_THAN = dt.timedelta(days=14)
_NS = 1_000_000_000


class CleanupError(LanceError, OSError):
    """Cleanup refused to run (tagged versions would be removed); pylance raises OSError."""


# ==========================================================================================
# compaction
# ==========================================================================================
@dataclass(frozen=True)
class CompactionMetrics:
    """What a compaction did (pylance's `CompactionMetrics`)."""

    fragments_removed: int = 0
    fragments_added: int = 0
    files_removed: int = 0  # data files and deletion files of the removed fragments
    files_added: int = 0


@dataclass(frozen=True)
class _Options:
    target_rows_per_fragment: int
    max_rows_per_group: int
    materialize_deletions: bool
    materialize_deletions_threshold: float


@dataclass
class _Bin:
    fragments: list[LanceFragment] = field(default_factory=list)
    compact_itself: list[bool] = field(default_factory=list)
    row_counts: list[int] = field(default_factory=list)
    indices: tuple[int, ...] = ()

    def is_noop(self) -> bool:
        return not self.fragments or (len(self.fragments) == 1 and not self.compact_itself[0])

    def split_for_size(self, min_rows: int) -> list[_Bin]:
        """Greedy split into parts of at least `min_rows` live rows (pylance's rule)."""
        parts: list[_Bin] = []
        rest = self
        while True:
            n, rows = 0, 0
            while rows < min_rows and n < len(rest.row_counts):
                rows += rest.row_counts[n]
                n += 1
            if sum(rest.row_counts[n:]) >= min_rows:
                parts.append(_Bin(rest.fragments[:n], rest.compact_itself[:n], rest.row_counts[:n]))
                rest = _Bin(rest.fragments[n:], rest.compact_itself[n:], rest.row_counts[n:])
            else:
                parts.append(rest)
                return parts


def _parse_config(config: dict[str, str]) -> dict[str, Any]:
    """The `lance.compaction.*` defaults a dataset's config sets (the ones we implement)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if not key.startswith(COMPACTION_CONFIG_PREFIX):
            continue
        name = key[len(COMPACTION_CONFIG_PREFIX) :]
        try:
            if name in ("target_rows_per_fragment", "max_rows_per_group"):
                out[name] = int(value)
            elif name == "materialize_deletions":
                if value.lower() not in ("true", "false"):
                    raise ValueError(value)
                out[name] = value.lower() == "true"
            elif name == "materialize_deletions_threshold":
                out[name] = float(value)
        except ValueError:
            raise InvalidInputError(f"invalid dataset config value {key}={value!r}") from None
    return out


def _resolve_options(ds: LanceDataset, given: dict[str, Any]) -> _Options:
    """Explicit arguments, then the dataset's `lance.compaction.*` config, then defaults."""
    config = _parse_config(ds.config)
    defaults = {
        "target_rows_per_fragment": DEFAULT_TARGET_ROWS_PER_FRAGMENT,
        "max_rows_per_group": DEFAULT_MAX_ROWS_PER_GROUP,
        "materialize_deletions": True,
        "materialize_deletions_threshold": DEFAULT_MATERIALIZE_DELETIONS_THRESHOLD,
    }
    values = {
        k: given[k] if given[k] is not None else config.get(k, v) for k, v in defaults.items()
    }
    for name in ("target_rows_per_fragment", "max_rows_per_group"):
        v = values[name]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InvalidInputError(f"{name} must be a positive integer, not {v!r}")
    threshold = float(values["materialize_deletions_threshold"])
    materialize = bool(values["materialize_deletions"])
    if materialize and threshold >= 1.0:  # pylance: a 100% threshold turns it off
        materialize = False
    return _Options(
        int(values["target_rows_per_fragment"]),
        int(values["max_rows_per_group"]),
        materialize,
        threshold,
    )


def _index_fragment_sets(ds: LanceDataset) -> list[frozenset[int]]:
    """The fragment ids each (non-system) index of this version covers."""
    from pyroaring import BitMap

    manifest = ds.manifest
    if not manifest.pb.HasField("index_section"):
        return []
    section = read_section(
        manifest, manifest.pb.index_section, table_pb2.IndexSection, "index section"
    )
    out = []
    for index in section.indices:
        if index.name in _SYSTEM_INDICES:
            continue
        if index.fragment_bitmap:
            out.append(frozenset(BitMap.deserialize(index.fragment_bitmap)))
        else:  # old indices: the fragments of the version they were built on
            old = ds.checkout_version(int(index.dataset_version))
            out.append(frozenset(int(f.id) for f in old.manifest.pb.fragments))
    return out


def _num_deletions(frag: LanceFragment) -> int:
    """Deleted rows as pylance counts them: the recorded count, else the file's length."""
    d = frag.deletion_file()
    if d is None:
        return 0
    if d.num_deleted_rows:
        return int(d.num_deleted_rows)
    return frag.num_deletions


def _plan(ds: LanceDataset, opts: _Options) -> list[_Bin]:
    """The compaction tasks: runs of adjacent candidate fragments, split by size."""
    index_sets = _index_fragment_sets(ds)
    threshold = np.float32(opts.materialize_deletions_threshold)
    bins: list[_Bin] = []
    current: _Bin | None = None
    for frag in ds.get_fragments():
        physical = frag.physical_rows
        deleted = _num_deletions(frag)
        # pylance compares in f32: exactly-at-threshold fractions are not candidates
        fraction = np.float32(deleted) / np.float32(physical) if physical else np.float32(0)
        if opts.materialize_deletions and fraction > threshold:
            itself: bool | None = True
        elif physical < opts.target_rows_per_fragment:
            itself = False
        else:
            itself = None
        indices = tuple(i for i, s in enumerate(index_sets) if frag.fragment_id in s)
        if itself is None:
            if current is not None:
                bins.append(current)
                current = None
            continue
        if current is not None and current.indices != indices:
            bins.append(current)
            current = None
        if current is None:
            current = _Bin(indices=indices)
        current.fragments.append(frag)
        current.compact_itself.append(itself)
        current.row_counts.append(physical - deleted)
    if current is not None:
        bins.append(current)
    tasks: list[_Bin] = []
    for b in bins:
        if not b.is_noop():
            tasks.extend(b.split_for_size(opts.target_rows_per_fragment))
    return tasks


def _output_sizes(rows: int, target: int) -> list[int]:
    """Rows of each new fragment: max(1, rows // target) parts, balanced, larger ones first."""
    if rows == 0:
        return []
    parts = max(1, rows // target)
    base, extra = divmod(rows, parts)
    return [base + 1] * extra + [base] * (parts - extra)


def _external_bytes(ds: LanceDataset, ext: table_pb2.ExternalFile) -> bytes:
    store, path = ds._resolve(ext.path, None, relative_to_root=True)
    with store.open(path) as f:
        return f.read(ext.offset, ext.size)


def _version_sequence(ds: LanceDataset, pb: table_pb2.DataFragment, name: str) -> np.ndarray | None:
    """A fragment's created_at / last_updated_at version per physical row, if it has them."""
    which = pb.WhichOneof(f"{name}_version_sequence")
    if which is None:
        return None
    data = getattr(pb, which)
    if which.startswith("external_"):
        data = _external_bytes(ds, data)
    return decode_row_versions(
        data, source=f"fragment {pb.id} {which}", expected_len=int(pb.physical_rows)
    )


@dataclass
class _LiveIdentity:
    """Stable row ids and row versions of the live rows of a task, in row order."""

    ids: np.ndarray
    created: np.ndarray
    updated: np.ndarray


def _live_identity(ds: LanceDataset, frags: Sequence[LanceFragment]) -> _LiveIdentity:
    ids, created, updated = [], [], []
    for frag in frags:
        n = frag.physical_rows
        row_ids = frag.row_ids
        if row_ids is None:
            raise UnsupportedFeatureError(
                f"{ds.uri}: fragment {frag.fragment_id} has no stable row ids although the "
                "dataset uses them"
            )
        c = _version_sequence(ds, frag.metadata, "created_at")
        if c is None:  # pylance's default: created at version 1
            c = np.ones(n, dtype=np.uint64)
        u = _version_sequence(ds, frag.metadata, "last_updated_at")
        if u is None:
            u = c
        mask = frag.live_mask
        if mask is not None:
            row_ids, c, u = row_ids[mask], c[mask], u[mask]
        ids.append(row_ids)
        created.append(c)
        updated.append(u)
    cat = lambda xs: np.concatenate(xs) if xs else np.empty(0, np.uint64)  # noqa: E731
    return _LiveIdentity(cat(ids), cat(created), cat(updated))


class _RowSource:
    """Hands out the next `n` rows of a batch stream, slicing batches where needed."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self._batches = batches
        self._pending: pa.RecordBatch | None = None

    def exhausted(self) -> bool:
        """Whether no row is left."""
        while self._pending is None or self._pending.num_rows == 0:
            self._pending = next(self._batches, None)
            if self._pending is None:
                return True
        return False

    def take(self, n: int) -> Iterator[pa.RecordBatch]:
        while n > 0:
            if self._pending is None:
                try:
                    self._pending = next(self._batches)
                except StopIteration:
                    raise LanceError("compaction read fewer rows than the fragments hold") from None
            batch = self._pending
            if batch.num_rows <= n:
                self._pending = None
                n -= batch.num_rows
                if batch.num_rows:
                    yield batch
            else:
                self._pending = batch.slice(n)
                yield batch.slice(0, n)
                n = 0


def _rewrite(
    ds: LanceDataset, task: _Bin, opts: _Options, storage_version: str, written: list[str]
) -> list[table_pb2.DataFragment]:
    """Write the live rows of one task's fragments into new fragments (no ids yet)."""
    from format.dataset.write import write_fragments

    rows = sum(task.row_counts)
    sizes = _output_sizes(rows, opts.target_rows_per_fragment)
    identity = _live_identity(ds, task.fragments) if ds.manifest.uses_stable_row_ids else None
    if identity is not None and len(identity.ids) != rows:
        raise LanceError(
            f"{ds.uri}: the fragments {[f.fragment_id for f in task.fragments]} hold "
            f"{len(identity.ids)} live row ids but {rows} live rows"
        )
    schema = ds.lance_schema
    arrow = ds.schema
    source = _RowSource(
        itertools.chain.from_iterable(f.read_batches(schema, arrow) for f in task.fragments)
    )
    new: list[table_pb2.DataFragment] = []
    offset = 0
    for size in sizes:
        reader = pa.RecordBatchReader.from_batches(arrow, source.take(size))
        frags = write_fragments(
            ds._store,
            reader,
            schema,
            storage_version,
            max_rows_per_file=size,
            max_rows_per_group=min(opts.max_rows_per_group, opts.target_rows_per_fragment),
        )
        written.extend(df.path for f in frags for df in f.files)
        if len(frags) != 1 or frags[0].physical_rows != size:
            raise LanceError(
                f"{ds.uri}: compaction wrote {[f.physical_rows for f in frags]} rows "
                f"where {size} were expected"
            )
        frag = frags[0]
        if identity is not None:
            sl = slice(offset, offset + size)
            frag.inline_row_ids = encode_row_ids(identity.ids[sl])
            frag.inline_created_at_versions = encode_row_versions(identity.created[sl])
            frag.inline_last_updated_at_versions = encode_row_versions(identity.updated[sl])
        new.append(frag)
        offset += size
    if not source.exhausted():
        raise LanceError(f"{ds.uri}: compaction read more rows than the fragments hold")
    return new


def compact_files(
    ds: LanceDataset,
    *,
    target_rows_per_fragment: int | None = None,
    max_rows_per_group: int | None = None,
    materialize_deletions: bool | None = None,
    materialize_deletions_threshold: float | None = None,
    num_threads: int | None = None,
) -> CompactionMetrics:
    """Rewrite small fragments (and ones with many deletions) into fewer, larger ones.

    Mirrors pylance's ``ds.optimize.compact_files``: only adjacent fragments are merged
    (the merged rows then sort last, like pylance's); unset options come from the dataset's
    ``lance.compaction.*`` config, else pylance's defaults (1024*1024 rows per fragment,
    1024 rows per group, materialize deletions above 10%). Commits one Rewrite version (none
    when there is nothing to do) and moves `ds` to it. Stable row ids and row versions are
    carried over; indices lose the rewritten fragments (they are searched unindexed).
    """
    from format.dataset.write import normalize_storage_version

    opts = _resolve_options(
        ds,
        {
            "target_rows_per_fragment": target_rows_per_fragment,
            "max_rows_per_group": max_rows_per_group,
            "materialize_deletions": materialize_deletions,
            "materialize_deletions_threshold": materialize_deletions_threshold,
        },
    )
    if num_threads is not None and (isinstance(num_threads, bool) or num_threads < 1):
        raise InvalidInputError(f"num_threads must be a positive integer, not {num_threads!r}")
    check_writable(ds.manifest, ds.uri)
    tasks = _plan(ds, opts)
    if not tasks:
        return CompactionMetrics()
    storage_version = normalize_storage_version(ds.data_storage_version)
    written: list[str] = []
    committing = False
    try:
        workers = min(len(tasks), num_threads or min(4, os.cpu_count() or 1))
        if workers > 1:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                outputs = list(
                    pool.map(lambda t: _rewrite(ds, t, opts, storage_version, written), tasks)
                )
        else:
            outputs = [_rewrite(ds, t, opts, storage_version, written) for t in tasks]
        groups = [
            transaction_pb2.Transaction.Rewrite.RewriteGroup(
                old_fragments=[f.metadata for f in task.fragments], new_fragments=new
            )
            for task, new in zip(tasks, outputs, strict=True)
        ]
        txn = new_transaction(
            ds.version, "rewrite", transaction_pb2.Transaction.Rewrite(groups=groups)
        )
        committing = True
        ds._commit(txn)
    except BaseException as e:
        # Files of a commit that surely did not land are removed at once; after an ambiguous
        # commit failure they stay unless no newer version references them (cleanup
        # removes any leftovers once they are old enough).
        certain = not committing or isinstance(e, CommitConflictError)
        if certain or not _committed(ds, written):
            for name in written:
                with contextlib.suppress(Exception):
                    ds._store.delete(f"data/{name}")
        raise
    old = [f.metadata for task in tasks for f in task.fragments]
    new = [f for frags in outputs for f in frags]
    return CompactionMetrics(
        fragments_removed=len(old),
        fragments_added=len(new),
        files_removed=sum(len(f.files) + f.HasField("deletion_file") for f in old),
        files_added=sum(len(f.files) + f.HasField("deletion_file") for f in new),
    )


def _committed(ds: LanceDataset, written: list[str]) -> bool:
    """Whether some version after `ds`'s references the files we wrote (best effort: True
    when that cannot be determined, so nothing possibly committed is deleted)."""
    if not written:
        return False
    try:
        entries = _versions.list_manifests(ds._store)
        wanted = set(written)
        for v in sorted(entries, reverse=True):
            if v <= ds.version:
                break
            m = _versions.load_manifest(ds._store, entries[v])
            if any(df.path in wanted for f in m.pb.fragments for df in f.files):
                return True
        return False
    except Exception:  # noqa: BLE001 - unsure: keep the files
        return True


class DatasetOptimizer:
    """pylance's ``ds.optimize`` namespace (compaction)."""

    def __init__(self, ds: LanceDataset) -> None:
        self._ds = ds

    def compact_files(
        self,
        *,
        target_rows_per_fragment: int | None = None,
        max_rows_per_group: int | None = None,
        materialize_deletions: bool | None = None,
        materialize_deletions_threshold: float | None = None,
        num_threads: int | None = None,
    ) -> CompactionMetrics:
        """Compact small fragments; see `compact_files`."""
        return compact_files(
            self._ds,
            target_rows_per_fragment=target_rows_per_fragment,
            max_rows_per_group=max_rows_per_group,
            materialize_deletions=materialize_deletions,
            materialize_deletions_threshold=materialize_deletions_threshold,
            num_threads=num_threads,
        )


# ==========================================================================================
# cleanup
# ==========================================================================================
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
    if not manifest.pb.HasField("index_section"):
        return set()
    section = read_section(
        manifest, manifest.pb.index_section, table_pb2.IndexSection, "index section"
    )
    return {str(uuid.UUID(bytes=bytes(i.uuid.uuid))) for i in section.indices if i.uuid.uuid}


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
    ds: LanceDataset,
    store: ObjectStore,
    tagged: set[int],
    before_ns: int | None,
    before_version: int | None,
    versions: set | None,
) -> _Inspection:
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
        keep = is_latest or not old or is_tagged
        if is_tagged and not is_latest and old:
            insp.tagged_old_versions.add(manifest.version)
        _record(manifest, insp.referenced if keep else insp.verified)
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


def _has_branches(store: ObjectStore) -> bool:
    return any(name.endswith(".json") for name, _, _ in store.list_dir("_refs/branches"))


def cleanup_old_versions(
    ds: LanceDataset,
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
    Data, deletion, transaction and index files referenced by a kept version are kept;
    files referenced only by removed versions are removed; files no manifest references
    are removed only once 7 days old (any age with `delete_unverified`), as they may belong
    to a commit in progress. Files under ``_blobs/`` and ``_fri/`` are never touched.
    """
    store = ds._store
    if older_than is None and retain_versions is None and versions is None:
        older_than = DEFAULT_OLDER_THAN
    if older_than is not None and not isinstance(older_than, dt.timedelta):
        raise InvalidInputError(f"older_than must be a datetime.timedelta, not {older_than!r}")
    if ds.manifest.pb.HasField("branch") or _has_branches(store):
        raise UnsupportedFeatureError(
            f"{ds.uri}: cleaning up datasets with branches is not supported by this engine"
        )
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

    tags = {name: t for name, t in _versions.list_tags(store).items() if not t.branch}
    tagged = {t.version for t in tags.values()}
    insp = _inspect(ds, store, tagged, before_ns, before_version, chosen)
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
    counts = dict.fromkeys((_DATA, _TXN, _INDEX, _DELETION, _TMP_MANIFEST), 0)
    removed_bytes = 0
    failed = 0
    emptied_dirs: set[str] = set()
    for f, kind in doomed:
        try:
            store.delete(f.path)
        except OSError:
            failed += 1
            continue
        counts[kind] += 1
        removed_bytes += f.size
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
