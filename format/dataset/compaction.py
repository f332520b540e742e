"""Compaction (`compact_files`, pylance 14's ``ds.optimize.compact_files``).

It plans like pylance's default planner: walking the fragments in manifest order,
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
values don't change.

Versions are committed as pylance 14 commits them in every case (with or without indices,
stable row ids or not): once the new files are written, a ReserveFragments version fixes
the new fragments' ids (one reservation for all of them, handed out in task order), then one
Rewrite version (on the version compaction read) replaces the old fragments; nothing is
committed when there is nothing to compact. Indices keep covering the rewritten rows, as
with pylance 14 (which remaps at once unless told to defer, below):
every BTREE, BITMAP, LABEL_LIST, NGRAM, INVERTED and IVF index over rewritten fragments
that holds row addresses (all of them without stable row ids) is written again with the new
addresses (`format.index.scalar.remap`, `format.index.fts.remap`,
`format.index.vector.remap`) and the Rewrite transaction names the new index files
(`rewritten_indices`); one holding stable row ids (BITMAP, INVERTED, NGRAM, LABEL_LIST,
vector) just covers the new fragments (`format.table.commit`). Full-text indices of format
1 (or with per-document positions) stop covering the rewritten rows (those are then
searched unindexed); ZONEMAP and
BLOOMFILTER ones keep their bitmaps, as pylance leaves them. The old index files stay for
`cleanup_old_versions`.

pylance 14's newer options: `excluded_fragment_ids` (never candidates, so no task spans
them), `max_source_fragments` / `_rows` / `_bytes` (tasks taken in fragment order while
all stay within), `data_storage_version` of the new files (another 2.x version sets the
mixed-file-versions flag, as pylance does), `max_bytes_per_file` (a file closes once its
flushed pages reach it), `batch_size`, and `compaction_mode` "reencode" or
"try_binary_copy" / "force_binary_copy" (pages copied without decoding them where pylance
would: `format.dataset.compaction_copy`); each also from the `lance.compaction.*` config.

`defer_index_remap` leaves indices as they are and records the moves instead, in the
fragment reuse index (`format.table.frag_reuse`: one more version, a group per task), when
some index covers a rewritten fragment, as pylance 14 does (refused with stable row ids, as
pylance refuses it); readers replay the moves over every index's row addresses. A later
compaction that remaps indices applies the recorded moves first.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import uuid as _uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from quiver.format.dataset.blobs import REWRITE_EXTERNAL, blob_value_steps
from quiver.format.dataset.compaction_copy import NotCopyable, copy_fragments, why_not_copyable
from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fragment import ROW_ADDRESS, LanceFragment, fragments_of
from quiver.format.dataset.rows import RowSource
from quiver.format.dataset.write import normalize_storage_version, write_fragment_files
from quiver.format.errors import (
    CommitConflictError,
    InvalidInputError,
    LanceError,
    UnsupportedFeatureError,
)
from quiver.format.file.base import DEFAULT_BATCH_SIZE
from quiver.format.index.pruning import scalar_kind
from quiver.format.index.scalar.remap import RemappedIndex, discard, remap_index
from quiver.format.proto import table_pb2, transaction_pb2
from quiver.format.table import versions as _versions
from quiver.format.table.addresses import AddressMap, Moved
from quiver.format.table.commit import DeferredRemap
from quiver.format.table.frag_reuse import DETAILS_FILE as FRAG_REUSE_DETAILS
from quiver.format.table.frag_reuse import FRAG_REUSE_INDEX, Rewritten, next_frag_reuse
from quiver.format.table.index_carry import stores_row_ids
from quiver.format.table.indices import IndexEntry, frag_reuse_of, indices_of
from quiver.format.table.rowids import decode_row_versions, encode_row_ids, encode_row_versions
from quiver.format.table.transaction import check_writable, new_transaction

__all__ = ["CompactionMetrics", "compact_files"]

DEFAULT_TARGET_ROWS_PER_FRAGMENT = 1024 * 1024
DEFAULT_MAX_ROWS_PER_GROUP = 1024
DEFAULT_MATERIALIZE_DELETIONS_THRESHOLD = 0.1
COMPACTION_CONFIG_PREFIX = "lance.compaction."
# Indices that describe the table rather than index data; they never constrain compaction.


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
    max_bytes_per_file: int | None = None
    # how much one run compacts: tasks are taken in fragment order while within all three
    max_source_fragments: int | None = None
    max_source_rows: int | None = None
    max_source_bytes: int | None = None
    data_storage_version: str | None = None  # of the new files (default: the dataset's)
    batch_size: int | None = None  # rows per batch read from the old fragments
    compaction_mode: str = "reencode"  # or try_binary_copy / force_binary_copy
    read_batch_bytes: int | None = None  # a binary copy's reads (binary_copy_read_batch_bytes)
    defer_index_remap: bool = False  # a fragment reuse index instead of remapped indices


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
            if name in _COUNTS:
                out[name] = int(value)
            elif name in ("data_storage_version", "compaction_mode"):
                out[name] = value
            elif name == "defer_index_remap":
                if value.lower() not in ("true", "false"):
                    raise ValueError(value)
                out[name] = value.lower() == "true"
            elif name == "materialize_deletions":
                if value.lower() not in ("true", "false"):
                    raise ValueError(value)
                out[name] = value.lower() == "true"
            elif name == "materialize_deletions_threshold":
                out[name] = float(value)
        except ValueError:
            raise InvalidInputError(f"invalid dataset config value {key}={value!r}") from None
    return out


# the integer options (positive when set), config keys included
_COUNTS = (
    "target_rows_per_fragment",
    "max_rows_per_group",
    "max_bytes_per_file",
    "batch_size",
    "binary_copy_read_batch_bytes",
    "max_source_fragments",
    "max_source_rows",
    "max_source_bytes",
)
_DEFAULTS: dict[str, Any] = {
    "target_rows_per_fragment": DEFAULT_TARGET_ROWS_PER_FRAGMENT,
    "max_rows_per_group": DEFAULT_MAX_ROWS_PER_GROUP,
    "materialize_deletions": True,
    "materialize_deletions_threshold": DEFAULT_MATERIALIZE_DELETIONS_THRESHOLD,
    "max_bytes_per_file": None,
    "batch_size": None,
    "binary_copy_read_batch_bytes": None,
    "max_source_fragments": None,
    "max_source_rows": None,
    "max_source_bytes": None,
    "data_storage_version": None,
    "compaction_mode": "reencode",
    "defer_index_remap": False,
}
COMPACTION_MODES = ("reencode", "try_binary_copy", "force_binary_copy")


def _resolve_options(ds: DatasetCore, given: dict[str, Any]) -> _Options:
    """Explicit arguments, then the dataset's `lance.compaction.*` config, then defaults."""
    config = _parse_config(dict(ds.manifest.pb.config))
    values = {
        k: given.get(k) if given.get(k) is not None else config.get(k, v)
        for k, v in _DEFAULTS.items()
    }
    for name in _COUNTS:
        v = values[name]
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InvalidInputError(f"{name} must be a positive integer, not {v!r}")
    mode = values["compaction_mode"]
    if mode not in COMPACTION_MODES:
        raise InvalidInputError(
            f"compaction_mode must be one of {', '.join(COMPACTION_MODES)}, not {mode!r}"
        )
    defer = values["defer_index_remap"]
    if not isinstance(defer, (bool, np.bool_)):
        raise InvalidInputError(f"defer_index_remap must be a boolean, not {defer!r}")
    if defer and ds.manifest.uses_stable_row_ids:
        raise UnsupportedFeatureError(
            f"{ds.uri}: cannot compact with defer_index_remap: the dataset uses stable row "
            "ids (their indices need no remap), as pylance 14 refuses it"
        )
    threshold = float(values["materialize_deletions_threshold"])
    materialize = bool(values["materialize_deletions"])
    if materialize and threshold >= 1.0:  # pylance: a 100% threshold turns it off
        materialize = False
    version = values["data_storage_version"]
    if version is not None:
        version = normalize_storage_version(version)
        current = normalize_storage_version(ds.data_storage_version)
        if (version == "0.1") != (current == "0.1"):
            raise InvalidInputError(
                f"{ds.uri}: compaction cannot write {version} files into a dataset of "
                f"{current} files (legacy and 2.x files do not mix)"
            )
    return _Options(
        int(values["target_rows_per_fragment"]),
        int(values["max_rows_per_group"]),
        materialize,
        threshold,
        values["max_bytes_per_file"],
        values["max_source_fragments"],
        values["max_source_rows"],
        values["max_source_bytes"],
        version,
        values["batch_size"],
        mode,
        values["binary_copy_read_batch_bytes"],
        bool(defer),
    )


def target_rows(ds: DatasetCore) -> int:
    """The rows per fragment `compact_files` aims at by default for this dataset (its
    `lance.compaction.target_rows_per_fragment` config, else pylance's default)."""
    return _resolve_options(ds, {}).target_rows_per_fragment


def _index_fragment_sets(ds: DatasetCore) -> list[frozenset[int]]:
    """The fragment ids each (non-system) index of this version covers."""
    out = []
    for index in indices_of(ds.manifest):
        if index.fragment_ids is not None:
            out.append(index.fragment_ids)
        else:  # old indices: the fragments of the version they were built on
            old = ds.checkout(index.dataset_version)
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


def _plan(ds: DatasetCore, opts: _Options, excluded: frozenset[int] = frozenset()) -> list[_Bin]:
    """The compaction tasks: runs of adjacent candidate fragments, split by size (an
    excluded fragment is no candidate, so no task spans it), as many as the limits on
    one run's sources allow."""
    index_sets = _index_fragment_sets(ds)
    threshold = np.float32(opts.materialize_deletions_threshold)
    bins: list[_Bin] = []
    current: _Bin | None = None
    for frag in fragments_of(ds):
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
        if frag.fragment_id in excluded:
            itself = None
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
    return _within_limits(tasks, opts)


def _within_limits(tasks: list[_Bin], opts: _Options) -> list[_Bin]:
    """The first tasks whose sources stay within `max_source_fragments`, `_rows` (live rows)
    and `_bytes` (their data and deletion files' sizes) together."""
    limits = (opts.max_source_fragments, opts.max_source_rows, opts.max_source_bytes)
    if all(limit is None for limit in limits):
        return tasks
    kept: list[_Bin] = []
    totals = np.zeros(3, dtype=np.int64)
    for task in tasks:
        size = sum(int(df.file_size_bytes) for f in task.fragments for df in f.metadata.files)
        totals += (len(task.fragments), sum(task.row_counts), size)
        if any(limit is not None and t > limit for t, limit in zip(totals, limits, strict=True)):
            break
        kept.append(task)
    return kept


def _output_sizes(rows: int, target: int) -> list[int]:
    """Rows of each new fragment: max(1, rows // target) parts, balanced, larger ones first."""
    if rows == 0:
        return []
    parts = max(1, rows // target)
    base, extra = divmod(rows, parts)
    return [base + 1] * extra + [base] * (parts - extra)


def _external_bytes(ds: DatasetCore, ext: table_pb2.ExternalFile) -> bytes:
    store, path = ds.resolve(ext.path, None, relative_to_root=True)
    with store.open(path) as f:
        return f.read(ext.offset, ext.size)


def _version_sequence(ds: DatasetCore, pb: table_pb2.DataFragment, name: str) -> np.ndarray | None:
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


def _live_identity(ds: DatasetCore, frags: Sequence[LanceFragment]) -> _LiveIdentity:
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


def _live_rows(ds: DatasetCore, frag: LanceFragment, batch_size: int) -> Iterator[pa.RecordBatch]:
    """A fragment's live rows as the dataset's schema types them: blob columns are read as
    descriptions with the rows' addresses, then their values (`blobs.with_blob_values`)."""
    schema = ds.lance_schema
    if not any(f.is_blob for f in schema.fields):
        yield from frag.read_batches(schema, ds.schema, batch_size=batch_size)
        return
    described = ds.projected_arrow(tuple(schema.names)).append(pa.field(ROW_ADDRESS, pa.uint64()))
    for batch in frag.read_batches(schema, described, batch_size=batch_size, with_row_address=True):
        addresses = batch.column(ROW_ADDRESS).to_numpy()
        yield from blob_value_steps(ds, batch.drop_columns([ROW_ADDRESS]), addresses)


def _rewrite(
    ds: DatasetCore, task: _Bin, opts: _Options, storage_version: str, written: list[str]
) -> list[table_pb2.DataFragment]:
    """Write the live rows of one task's fragments into new fragments (no ids yet)."""
    rows = sum(task.row_counts)
    sizes = _output_sizes(rows, opts.target_rows_per_fragment)
    identity = _live_identity(ds, task.fragments) if ds.manifest.uses_stable_row_ids else None
    if identity is not None and len(identity.ids) != rows:
        raise LanceError(
            f"{ds.uri}: the fragments {[f.fragment_id for f in task.fragments]} hold "
            f"{len(identity.ids)} live row ids but {rows} live rows"
        )
    if opts.compaction_mode != "reencode":
        copied = _copied(ds, task, opts, written, sizes[0] if sizes else 1)
        if copied is not None:
            return _carry_identity(copied, identity)
    schema = ds.lance_schema
    arrow = ds.schema
    source = RowSource(
        itertools.chain.from_iterable(
            _live_rows(ds, f, opts.batch_size or DEFAULT_BATCH_SIZE) for f in task.fragments
        ),
        short="compaction read fewer rows than the fragments hold",
        long=f"{ds.uri}: compaction read more rows than the fragments hold",
    )
    new: list[table_pb2.DataFragment] = []
    for size in sizes:
        reader = pa.RecordBatchReader.from_batches(arrow, source.take(size))
        frags = write_fragment_files(
            ds.store,
            reader,
            schema,
            storage_version,
            max_rows_per_file=size,
            max_rows_per_group=min(opts.max_rows_per_group, opts.target_rows_per_fragment),
            max_bytes_per_file=opts.max_bytes_per_file,
            external=REWRITE_EXTERNAL,
        )
        written.extend(df.path for f in frags for df in f.files)
        if sum(f.physical_rows for f in frags) != size:
            raise LanceError(
                f"{ds.uri}: compaction wrote {[f.physical_rows for f in frags]} rows "
                f"where {size} were expected"
            )
        new.extend(frags)  # several when max_bytes_per_file cut the rows short
    source.check_exhausted()
    return _carry_identity(new, identity)


def _copied(
    ds: DatasetCore, task: _Bin, opts: _Options, written: list[str], file_rows: int
) -> list[table_pb2.DataFragment] | None:
    """The task's fragments merged by binary copy (a file closing once it holds
    `file_rows`, the largest part a re-encoding would write), or None where they cannot be
    (then "try_binary_copy" re-encodes them, and "force_binary_copy" refuses, as pylance
    does)."""
    why = why_not_copyable(ds, task.fragments, opts.data_storage_version)
    if why is None:
        try:
            return copy_fragments(ds, task.fragments, file_rows, written, opts.read_batch_bytes)
        except NotCopyable as e:
            why = str(e)
    if opts.compaction_mode == "force_binary_copy":
        raise UnsupportedFeatureError(
            f"{ds.uri}: compaction_mode force_binary_copy: binary copy is not supported for "
            f"fragments {[f.fragment_id for f in task.fragments]}: {why}"
        )
    return None


def _carry_identity(
    frags: list[table_pb2.DataFragment], identity: _LiveIdentity | None
) -> list[table_pb2.DataFragment]:
    """`frags` (the task's rows in order) with the stable row ids and row versions of the
    rows they hold."""
    offset = 0
    for frag in frags:
        if identity is not None:
            sl = slice(offset, offset + frag.physical_rows)
            frag.inline_row_ids = encode_row_ids(identity.ids[sl])
            frag.inline_created_at_versions = encode_row_versions(identity.created[sl])
            frag.inline_last_updated_at_versions = encode_row_versions(identity.updated[sl])
        offset += frag.physical_rows
    return frags


def compact_files(
    ds: DatasetCore,
    *,
    target_rows_per_fragment: int | None = None,
    max_rows_per_group: int | None = None,
    materialize_deletions: bool | None = None,
    materialize_deletions_threshold: float | None = None,
    num_threads: int | None = None,
    excluded_fragment_ids: Sequence[int] | None = None,
    **options: Any,
) -> tuple[DatasetCore, CompactionMetrics]:
    """Rewrite small fragments (and ones with many deletions) into fewer, larger ones.

    Mirrors pylance's ``ds.optimize.compact_files``: only adjacent fragments are merged
    (the merged rows then sort last, like pylance's); unset options come from the dataset's
    ``lance.compaction.*`` config, else pylance's defaults (1024*1024 rows per fragment,
    1024 rows per group, materialize deletions above 10%). Commits a ReserveFragments version
    and then a Rewrite version, as pylance 14 does (none when there is nothing to do), and
    returns the latter (or `ds`) with the metrics. Stable row ids and row versions
    are carried over; BTREE and BITMAP indices are remapped to the new rows, indices holding
    stable row ids cover them as they are, others lose the rewritten fragments (see above).
    """
    unknown = sorted(set(options) - set(_DEFAULTS))
    if unknown:
        raise InvalidInputError(f"compact_files got an unknown option {unknown[0]!r}")
    opts = _resolve_options(
        ds,
        {
            "target_rows_per_fragment": target_rows_per_fragment,
            "max_rows_per_group": max_rows_per_group,
            "materialize_deletions": materialize_deletions,
            "materialize_deletions_threshold": materialize_deletions_threshold,
            **options,
        },
    )
    if num_threads is not None and (isinstance(num_threads, bool) or num_threads < 1):
        raise InvalidInputError(f"num_threads must be a positive integer, not {num_threads!r}")
    check_writable(ds.manifest, ds.uri)
    tasks = _plan(ds, opts, frozenset(int(i) for i in excluded_fragment_ids or ()))
    if not tasks:
        return ds, CompactionMetrics()
    storage_version = opts.data_storage_version or normalize_storage_version(
        ds.data_storage_version
    )
    written: list[str] = []
    written_indices: list[str] = []  # a fragment reuse index's details file
    remapped_out: list[tuple[Any, RemappedIndex]] = []
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
        reserved = _reserve_ids(ds, [f for frags in outputs for f in frags])
        amap = _address_map(tasks, outputs)
        deferred = None
        if opts.defer_index_remap and _indexed(ds, tasks):
            deferred = _deferred_remap(ds, reserved, tasks, outputs, written_indices)
            remapped = []
        else:
            remapped = _remap_indices(ds, tasks, amap, remapped_out)
        groups = [
            transaction_pb2.Transaction.Rewrite.RewriteGroup(
                old_fragments=[f.metadata for f in task.fragments], new_fragments=new
            )
            for task, new in zip(tasks, outputs, strict=True)
        ]
        body = transaction_pb2.Transaction.Rewrite(
            groups=groups, rewritten_indices=[r.rewritten for r in remapped]
        )
        txn = new_transaction(ds.version, "rewrite", body)
        committing = True
        committed = ds.commit(txn, moved=amap, deferred=deferred)
    except BaseException as e:
        # Files of a commit that surely did not land are removed at once; after an ambiguous
        # commit failure they stay unless no newer version references them (cleanup
        # removes any leftovers once they are old enough).
        certain = not committing or isinstance(e, CommitConflictError)
        if certain or not _committed(ds, written):
            for name in written:
                with contextlib.suppress(Exception):
                    ds.store.delete(f"data/{name}")
            for store, r in remapped_out:
                discard(store, r.directory, [f.path for f in r.rewritten.new_index_files])
            for path in written_indices:
                with contextlib.suppress(Exception):
                    ds.store.delete(path)
        raise
    old = [f.metadata for task in tasks for f in task.fragments]
    new = [f for frags in outputs for f in frags]
    return committed, CompactionMetrics(
        fragments_removed=len(old),
        fragments_added=len(new),
        files_removed=sum(len(f.files) + f.HasField("deletion_file") for f in old),
        files_added=sum(len(f.files) + f.HasField("deletion_file") for f in new),
    )


def _reserve_ids(ds: DatasetCore, new: Sequence[table_pb2.DataFragment]) -> int:
    """Give the new fragments their ids from one ReserveFragments commit, in task order;
    returns the version it committed.

    pylance 14 commits this version before every compaction's Rewrite (indexed or not, with
    stable row ids or not), so that the rewrite and remapped indices name the new ids."""
    reserved = ds.commit(
        new_transaction(
            ds.version,
            "reserve_fragments",
            transaction_pb2.Transaction.ReserveFragments(num_fragments=len(new)),
        )
    )
    top = int(reserved.manifest.pb.max_fragment_id)
    for i, frag in enumerate(new):
        frag.id = top - len(new) + 1 + i
    return reserved.version


def _address_map(
    tasks: Sequence[_Bin], outputs: Sequence[list[table_pb2.DataFragment]]
) -> AddressMap | None:
    """Where the compaction put each live row of the fragments it rewrote (for remapping
    indices and rebasing over concurrent deletions); None when its new fragments do not
    hold exactly the live rows in order."""
    try:
        return AddressMap.build(
            [
                Moved(
                    [(f.fragment_id, f.physical_rows, f.live_mask) for f in task.fragments],
                    [(int(f.id), int(f.physical_rows)) for f in frags],
                )
                for task, frags in zip(tasks, outputs, strict=True)
            ]
        )
    except LanceError:
        return None


def _remap_indices(
    ds: DatasetCore,
    tasks: Sequence[_Bin],
    amap: AddressMap | None,
    remapped_out: list[tuple[Any, RemappedIndex]],
) -> list[RemappedIndex]:
    """Write again, with the new row addresses (`amap`), each BTREE, BITMAP and IVF index
    over rewritten fragments that holds row addresses (every one without stable row ids),
    as pylance does.

    The new fragments must have their (reserved) ids. One holding stable row ids stays as it
    is. Returns the remapped indices (also appended to `remapped_out` as written, for
    removal on failure)."""
    old_ids = {f.fragment_id for task in tasks for f in task.fragments}
    entries = indices_of(ds.manifest, system=True)
    stable = ds.manifest.uses_stable_row_ids
    to_remap = [
        e
        for e in entries
        if e.fragment_ids
        and e.fragment_ids & old_ids
        and not e.is_system
        and not (stable and stores_row_ids(e.pb))
        and _remap_kind(e) is not None
    ]
    if not to_remap:
        return []
    if amap is None:
        raise LanceError(f"{ds.uri}: compaction could not map the rows it moved")
    reuse = frag_reuse_of(ds.manifest)
    if reuse is not None:  # indices may still hold addresses of earlier deferred moves
        amap = reuse.address_map.then(amap, ds.uri)
    out = []
    for e in to_remap:
        base = e.pb.base_id if e.pb.HasField("base_id") else None
        store, directory = ds.resolve(e.directory, base, relative_to_root=True)
        try:
            r = remap_index(store, directory, str(_remap_kind(e)), e.pb, amap)
        except UnsupportedFeatureError:
            if _remap_kind(e) not in ("INVERTED", "VECTOR"):
                raise
            # an older full-text index: it stops covering the rewritten rows (searched
            # exactly from then on)
            continue
        remapped_out.append((store, r))
        out.append(r)
    return out


def _indexed(ds: DatasetCore, tasks: Sequence[_Bin]) -> bool:
    """Whether some index covers a fragment the compaction rewrites (pylance 14 records a
    deferred remap only then)."""
    old_ids = {f.fragment_id for task in tasks for f in task.fragments}
    return any(e.fragment_ids and e.fragment_ids & old_ids for e in indices_of(ds.manifest))


def _deferred_remap(
    ds: DatasetCore,
    reserved: int,
    tasks: Sequence[_Bin],
    outputs: Sequence[list[table_pb2.DataFragment]],
    written: list[str],
) -> DeferredRemap:
    """The fragment reuse index this compaction leaves instead of remapping indices: the
    version's one (if any) with one more version, a group per task (its details written to
    the index's folder when too large to keep inline; the path is appended to `written`),
    recorded at version `reserved` (the fragment ids' reservation), as pylance records it."""
    previous = frag_reuse_of(ds.manifest)
    if previous is None and any(
        e.name == FRAG_REUSE_INDEX for e in indices_of(ds.manifest, system=True)
    ):
        raise UnsupportedFeatureError(
            f"{ds.uri}: its fragment reuse index cannot be read, so a deferred compaction "
            "would lose the moves it records; compact without defer_index_remap"
        )
    groups = [
        Rewritten(
            [
                (f.fragment_id, f.physical_rows, _num_deletions(f), f.live_mask)
                for f in task.fragments
            ],
            [(int(f.id), int(f.physical_rows)) for f in frags],
        )
        for task, frags in zip(tasks, outputs, strict=True)
    ]
    pb, external = next_frag_reuse(previous, reserved, groups)
    if external is not None:
        path = f"_indices/{_uuid.UUID(bytes=bytes(pb.uuid.uuid))}/{FRAG_REUSE_DETAILS}"
        written.append(path)
        ds.store.put(path, external)
    return DeferredRemap(pb, previous.uuid if previous is not None else None)


def _remap_kind(entry: IndexEntry) -> str | None:
    """How an index is remapped: "BTREE", "BITMAP", "LABEL_LIST", "NGRAM", "INVERTED",
    "VECTOR" (IVF), or None (not)."""
    if entry.details_type.endswith("VectorIndexDetails"):
        return "VECTOR"
    if entry.details_type.endswith("LabelListIndexDetails"):
        return "LABEL_LIST"
    if entry.details_type.endswith("InvertedIndexDetails"):
        return "INVERTED"
    if entry.details_type.endswith("MinHashLshIndexDetails"):
        return "MINHASHLSH"
    kind = scalar_kind(entry)
    # zones of addresses, boxes of a Hilbert order: never remapped (as pylance 14)
    return None if kind in ("BLOOMFILTER", "RTREE") else kind


def _committed(ds: DatasetCore, written: list[str]) -> bool:
    """Whether some version after `ds`'s references the files we wrote (best effort: True
    when that cannot be determined, so nothing possibly committed is deleted)."""
    if not written:
        return False
    try:
        entries = _versions.list_manifests(ds.store)
        wanted = set(written)
        for v in sorted(entries, reverse=True):
            if v <= ds.version:
                break
            m = _versions.load_manifest(ds.store, entries[v])
            if any(df.path in wanted for f in m.pb.fragments for df in f.files):
                return True
        return False
    except Exception:  # noqa: BLE001 - unsure: keep the files
        return True
