"""`LanceDataset`: one version of a Lance dataset, with pylance's read API."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from format.dataset.fragment import LanceFragment
from format.dataset.scan import Scanner
from format.errors import (
    CorruptFileError,
    DatasetAlreadyExistsError,
    InvalidInputError,
    UnsupportedFeatureError,
)
from format.io.store import ObjectStore, open_store
from format.proto import table_pb2, transaction_pb2
from format.table import versions as _versions
from format.table.commit import commit_clone, commit_transaction
from format.table.deletion import write_deletion_file
from format.table.manifest import Manifest
from format.table.schema import LanceSchema
from format.table.transaction import ManifestContext, new_transaction


def dataset(
    uri: str,
    version: int | str | None = None,
    asof: dt.datetime | str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> LanceDataset:
    """Open a Lance dataset at its latest version, a version number, a tag or a timestamp."""
    uri = str(uri)
    store, version = _versions.resolve_ref(open_store(uri, storage_options), version)
    manifest = _versions.resolve(store, version, asof)
    return LanceDataset(store, manifest, storage_options=storage_options)


def _take_rows(table: pa.Table, positions: pa.Array) -> pa.Table:
    """`table.take(positions)`, but dictionary columns whose chunks have different dictionaries are
    decoded, taken and re-encoded (Arrow can't unify dictionaries holding nulls), as pylance
    returns them."""
    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_dictionary(field.type) and _several_dictionaries(column):
            values = column.cast(field.type.value_type).take(positions)
            column = values.dictionary_encode().cast(field.type)
        else:
            column = column.take(positions)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=table.schema)


def _several_dictionaries(column: pa.ChunkedArray) -> bool:
    """Whether the chunks of a dictionary column have different dictionaries."""
    first = column.chunks[0].dictionary if column.num_chunks else None
    return any(not c.dictionary.equals(first) for c in column.chunks[1:])


def _local_time(ns: int) -> dt.datetime:
    """A commit time as pylance's versions() shows it: naive local time, float-rounded."""
    return dt.datetime.fromtimestamp(ns // 1e9) + dt.timedelta(microseconds=(ns % 1e9) // 1e3)


class Tags:
    """Read access to a dataset's tags (pylance's `ds.tags`)."""

    def __init__(self, ds: LanceDataset) -> None:
        self._ds = ds

    def list(self) -> dict[str, dict[str, Any]]:
        """Every tag: name -> {"version", "manifest_size", "created_at", ...}."""
        return {
            name: {
                "version": t.version,
                "manifest_size": t.manifest_size,
                "created_at": t.created_at,
                "updated_at": t.updated_at,
                "metadata": t.metadata,
            }
            for name, t in sorted(_versions.list_tags(self._ds._store).items())
        }

    def get_version(self, tag: str) -> int:
        """The version a tag points to."""
        return _versions.read_tag(self._ds._store, tag).version

    def create(self, tag: str, version: int) -> None:
        """Create a tag on an existing version; refuses an existing tag name."""
        self._write(tag, version, create=True)

    def update(self, tag: str, version: int) -> None:
        """Point an existing tag at another version."""
        _versions.read_tag(self._ds._store, tag)  # must exist
        self._write(tag, version, create=False)

    def delete(self, tag: str) -> None:
        """Remove a tag."""
        store = self._ds._store
        _versions.read_tag(store, tag)
        store.delete(_versions.tag_path(tag))

    def _write(self, tag: str, version: int, *, create: bool) -> None:
        store = self._ds._store
        _versions.check_tag_name(tag)
        entry = _versions.find_entry(store, version)
        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        created = now
        if not create:
            old = _versions.read_tag(store, tag).created_at
            created = old.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if old else now
        body = json.dumps(
            {
                "branch": None,
                "version": version,
                "createdAt": created,
                "updatedAt": now,
                "manifestSize": entry.size,
                "metadata": {},
            },
            indent=2,
        ).encode()
        path = _versions.tag_path(tag)
        if create:
            try:
                store.put_if_absent(path, body)
            except FileExistsError:
                raise DatasetAlreadyExistsError(
                    f"{store.uri}: tag {tag!r} already exists"
                ) from None
        else:
            store.put(path, body)


class LanceDataset:
    """A dataset pinned to one version."""

    def __init__(
        self,
        store: ObjectStore,
        manifest: Manifest,
        *,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        manifest.check_readable(store.uri)
        self._store = store
        self._manifest = manifest
        self._storage_options = storage_options
        self._base_stores: dict[int, tuple[ObjectStore, bool]] = {}

    # -- identity ---------------------------------------------------------------------
    @property
    def uri(self) -> str:
        """The dataset's URI."""
        return self._store.uri

    @property
    def version(self) -> int:
        """The version this object reads."""
        return self._manifest.version

    @property
    def latest_version(self) -> int:
        """The newest committed version (listed now)."""
        return _versions.latest_entry(self._store).version

    @property
    def manifest(self) -> Manifest:
        """The decoded manifest of this version."""
        return self._manifest

    @property
    def lance_schema(self) -> LanceSchema:
        """The schema with Lance field ids."""
        return self._manifest.schema

    @cached_property
    def schema(self) -> pa.Schema:
        """The Arrow schema of this version."""
        return self._manifest.schema.to_arrow()

    @property
    def data_storage_version(self) -> str:
        """Storage version of the data files ("0.1", "2.0", "2.1", "2.2")."""
        return self._manifest.data_storage_version

    @property
    def tags(self) -> Tags:
        """The dataset's tags."""
        return Tags(self)

    @property
    def config(self) -> dict[str, str]:
        """Table configuration of this version."""
        return dict(self._manifest.pb.config)

    def __repr__(self) -> str:
        return f"LanceDataset(uri={self.uri!r}, version={self.version})"

    # -- versions ---------------------------------------------------------------------
    def versions(self) -> list[dict[str, Any]]:
        """Every version with its commit time and summary statistics, oldest first."""
        out = []
        entries = _versions.list_manifests(self._store)
        for v in sorted(entries):
            m = _versions.load_manifest(self._store, entries[v])
            frags = m.pb.fragments
            deleted = sum(f.deletion_file.num_deleted_rows for f in frags)
            physical = sum(f.physical_rows for f in frags)
            out.append(
                {
                    "version": v,
                    "timestamp": _local_time(m.pb.timestamp.ToNanoseconds()),
                    "metadata": {
                        "total_data_file_rows": str(physical),
                        "total_data_files": str(sum(len(f.files) for f in frags)),
                        "total_deletion_file_rows": str(deleted),
                        "total_deletion_files": str(
                            sum(1 for f in frags if f.HasField("deletion_file"))
                        ),
                        "total_files_size": str(
                            sum(d.file_size_bytes for f in frags for d in f.files)
                        ),
                        "total_fragments": str(len(frags)),
                        "total_rows": str(physical - deleted),
                    },
                }
            )
        return out

    def checkout_version(self, version: int | str) -> LanceDataset:
        """The same dataset at another version (number or tag)."""
        store, number = _versions.resolve_ref(self._store, version)
        return LanceDataset(
            store, _versions.resolve(store, number), storage_options=self._storage_options
        )

    # -- storage ----------------------------------------------------------------------
    def _resolve(
        self, path: str, base_id: int | None, *, relative_to_root: bool = False
    ) -> tuple[ObjectStore, str]:
        """The store and path of a file, following the manifest's base paths."""
        if base_id is None:
            return self._store, path
        if base_id not in self._base_stores:
            for bp in self._manifest.pb.base_paths:
                if bp.id == base_id:
                    self._base_stores[base_id] = (
                        open_store(bp.path, self._storage_options),
                        bp.is_dataset_root,
                    )
                    break
            else:
                raise CorruptFileError(
                    self._store.uri_of(self._manifest.path),
                    f"base path id {base_id} is not in the manifest's base paths",
                )
        store, is_root = self._base_stores[base_id]
        if not is_root and not relative_to_root:
            path = path.split("/", 1)[1]  # files sit directly under a non-root base
        return store, path

    # -- fragments and scans ----------------------------------------------------------
    def get_fragments(self) -> list[LanceFragment]:
        """The fragments of this version."""
        return [LanceFragment(self, pb) for pb in self._manifest.pb.fragments]

    def get_fragment(self, fragment_id: int) -> LanceFragment | None:
        """One fragment by id, or None."""
        for pb in self._manifest.pb.fragments:
            if pb.id == fragment_id:
                return LanceFragment(self, pb)
        return None

    def scanner(
        self,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        batch_size: int | None = None,
        *,
        with_row_id: bool = False,
        with_row_address: bool = False,
        fragments: Sequence[LanceFragment] | None = None,
        fragment_readahead: int | None = None,
        physical_range: tuple[int, int] | None = None,
        readahead_bytes: int | None = None,
        batch_bytes: int | None = None,
    ) -> Scanner:
        """Plan a scan: projection, SQL filter, limit/offset, row id columns; with one
        fragment, `physical_range` (start, stop) limits it to those physical rows. Fragments
        are decoded `fragment_readahead` at a time in background threads, queueing at most
        `readahead_bytes` of batches (at least one per thread); `batch_bytes` caps batches at
        about that many bytes (never under 1024 rows) as well as `batch_size` rows."""
        return Scanner(
            self,
            columns=columns,
            filter=filter,
            limit=limit,
            offset=offset,
            batch_size=batch_size,
            with_row_id=with_row_id,
            with_row_address=with_row_address,
            fragments=fragments,
            fragment_readahead=fragment_readahead,
            physical_range=physical_range,
            readahead_bytes=readahead_bytes,
            batch_bytes=batch_bytes,
        )

    def to_table(
        self,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        batch_size: int | None = None,
        *,
        with_row_id: bool = False,
        with_row_address: bool = False,
    ) -> pa.Table:
        """Read the (projected, filtered, limited) rows as one table."""
        return self.scanner(
            columns,
            filter,
            limit,
            offset,
            batch_size,
            with_row_id=with_row_id,
            with_row_address=with_row_address,
        ).to_table()

    def to_batches(self, **kwargs: Any) -> Any:
        """Stream rows as record batches (same options as `scanner`)."""
        return self.scanner(**kwargs).to_batches()

    def count_rows(self, filter: str | None = None) -> int:
        """Number of live rows, optionally matching a filter."""
        if filter is None:
            return sum(f.count_rows() for f in self.get_fragments())
        return self.scanner(columns=[], filter=filter).count_rows()

    def head(self, num_rows: int, **kwargs: Any) -> pa.Table:
        """The first `num_rows` rows."""
        return self.scanner(limit=num_rows, **kwargs).to_table()

    def take(
        self,
        indices: Sequence[int] | np.ndarray | pa.Array,
        columns: Sequence[str] | None = None,
        *,
        with_row_id: bool = False,
        with_row_address: bool = False,
    ) -> pa.Table:
        """Rows by position among the live rows of this version, in the order given."""
        idx = np.asarray(indices.to_numpy() if isinstance(indices, pa.Array) else indices)
        if idx.size and (idx.dtype.kind not in "iu" or idx.min() < 0):
            raise InvalidInputError("take indices must be non-negative integers")
        idx = idx.astype(np.int64, copy=False)
        # the scanner's plan: projection, row id columns (asked for or named in `columns`)
        scanner = self.scanner(columns, with_row_id=with_row_id, with_row_address=with_row_address)
        schema = scanner.projected_schema
        if scanner._paths:
            raise UnsupportedFeatureError(
                f"{self.uri}: take of nested fields by path ({', '.join(scanner._paths)}) is "
                "not supported; name their top-level column"
            )
        projection, read_schema = scanner._projection, scanner._schema
        with_row_id, with_row_address = scanner._with_row_id, scanner._with_row_address
        frags = self.get_fragments()
        counts = np.array([f.count_rows() for f in frags], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)])
        total = int(starts[-1])
        if idx.size and idx.max() >= total:
            raise InvalidInputError(
                f"{self.uri} version {self.version}: take index {int(idx.max())} out of range "
                f"for {total} rows"
            )
        which = np.searchsorted(starts, idx, side="right") - 1
        pieces: list[pa.RecordBatch] = []
        order: list[np.ndarray] = []
        for fi in np.unique(which):
            sel = np.flatnonzero(which == fi)
            frag = frags[int(fi)]
            live = idx[sel] - starts[fi]
            mask = frag.live_mask
            physical = live if mask is None else np.flatnonzero(mask)[live]
            uniq, inverse = np.unique(physical, return_inverse=True)
            batch = frag.take_physical(
                projection,
                read_schema,
                uniq.astype(np.uint64),
                with_row_id=with_row_id,
                with_row_address=with_row_address,
            )
            pieces.append(batch.take(pa.array(inverse)))
            order.append(sel)
        if not pieces:
            return schema.empty_table()
        table = pa.Table.from_batches(pieces, schema=read_schema).select(schema.names)
        positions = np.empty(len(idx), dtype=np.int64)
        positions[np.concatenate(order)] = np.arange(len(idx))
        return _take_rows(table, pa.array(positions))

    # -- mutations ----------------------------------------------------------------------
    def _commit(self, txn: transaction_pb2.Transaction, ctx: ManifestContext | None = None) -> None:
        """Commit on top of this version and move this object to the new version."""
        result = commit_transaction(
            self._store, txn, ctx=ctx or ManifestContext(load_version=self._load_version)
        )
        self._manifest = result.manifest
        self.__dict__.pop("schema", None)

    def _load_version(self, version: int) -> Manifest:
        return _versions.load_manifest(self._store, _versions.find_entry(self._store, version))

    def delete(self, predicate: str) -> None:
        """Delete the rows matching a SQL predicate, as one new version.

        Each touched fragment gets a deletion file holding its old and new deleted rows;
        fragments left with no live row are dropped.
        """
        if not isinstance(predicate, str) or not predicate.strip():
            raise InvalidInputError("delete needs a SQL predicate string")
        updated, removed = [], []
        scanner = self.scanner(columns=[], filter=predicate, with_row_address=True)
        by_fragment: dict[int, list[np.ndarray]] = {}
        for batch in scanner.to_batches():
            addr = batch.column("_rowaddr").to_numpy()
            for fid in np.unique(addr >> 32):
                sel = addr[(addr >> 32) == fid] & 0xFFFFFFFF
                by_fragment.setdefault(int(fid), []).append(sel)
        for frag in self.get_fragments():
            new = by_fragment.get(frag.fragment_id)
            if not new:
                continue
            deleted = np.union1d(frag.deleted_offsets, np.concatenate(new))
            if len(deleted) >= frag.physical_rows:
                removed.append(frag.fragment_id)
                continue
            info = write_deletion_file(self._store, frag.fragment_id, self.version, deleted)
            pb = table_pb2.DataFragment()
            pb.CopyFrom(frag.metadata)
            pb.deletion_file.CopyFrom(
                table_pb2.DeletionFile(
                    file_type=info.file_type,
                    read_version=self.version,
                    id=info.file_id,
                    num_deleted_rows=info.num_deleted_rows,
                )
            )
            updated.append(pb)
        body = transaction_pb2.Transaction.Delete(
            updated_fragments=updated, deleted_fragment_ids=removed, predicate=predicate
        )
        self._commit(new_transaction(self.version, "delete", body))

    def add_columns(
        self,
        transforms: Any,
        read_columns: Sequence[str] | None = None,
        reader_schema: pa.Schema | None = None,
        batch_size: int | None = None,
    ) -> None:
        """Add columns from SQL expressions, all-null fields or row-aligned Arrow data."""
        from format.dataset import evolution

        if read_columns is not None:
            raise UnsupportedFeatureError("read_columns is only for UDFs, which are not supported")
        evolution.add_columns(self, transforms, reader_schema=reader_schema, batch_size=batch_size)

    def drop_columns(self, columns: Sequence[str]) -> None:
        """Remove columns from the schema (data files are left as they are)."""
        from format.dataset import evolution

        evolution.drop_columns(self, columns)

    def alter_columns(self, *alterations: dict[str, Any]) -> None:
        """Rename, change nullability or change the type of columns (pylance's dict form)."""
        from format.dataset import evolution

        evolution.alter_columns(self, *alterations)

    def shallow_clone(
        self,
        target_path: str,
        reference: int | str | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> LanceDataset:
        """A new dataset at `target_path` sharing this one's files through a base path.

        The clone starts at the referenced version (number, tag, or this version) and
        copies no data: its manifest points every existing file at the source's root.
        """
        source = self if reference is None else self.checkout_version(reference)
        target = open_store(str(target_path), storage_options)
        if _versions.list_manifests(target):
            raise DatasetAlreadyExistsError(f"a dataset already exists at {target_path}")
        pb = table_pb2.Manifest()
        pb.CopyFrom(source.manifest.pb)
        base_id = max((b.id for b in pb.base_paths), default=-1) + 1
        root = source.uri if "://" in source.uri else source._store.full_path("")
        pb.base_paths.append(table_pb2.BasePath(id=base_id, is_dataset_root=True, path=root))
        for frag in pb.fragments:
            for df in frag.files:
                if not df.HasField("base_id"):
                    df.base_id = base_id
            if frag.HasField("deletion_file") and not frag.deletion_file.HasField("base_id"):
                frag.deletion_file.base_id = base_id
        body = transaction_pb2.Transaction.Clone(
            is_shallow=True, ref_version=source.version, ref_path=root
        )
        if isinstance(reference, str):
            body.ref_name = reference
        txn = new_transaction(source.version, "clone", body)
        return LanceDataset(
            target,
            commit_clone(target, txn, pb, source.manifest),
            storage_options=storage_options,
        )

    @property
    def optimize(self) -> Any:
        """Table maintenance (pylance's `ds.optimize`): `compact_files(...)`."""
        from format.dataset.maintenance import DatasetOptimizer

        return DatasetOptimizer(self)

    def cleanup_old_versions(
        self,
        older_than: dt.timedelta | None = None,
        retain_versions: int | None = None,
        *,
        delete_unverified: bool = False,
        error_if_tagged_old_versions: bool = True,
        versions: Sequence[int] | None = None,
    ) -> Any:
        """Remove old versions and the files only they used; returns CleanupStats."""
        from format.dataset import maintenance

        return maintenance.cleanup_old_versions(
            self,
            older_than,
            retain_versions,
            delete_unverified=delete_unverified,
            error_if_tagged_old_versions=error_if_tagged_old_versions,
            versions=versions,
        )

    def restore(self) -> None:
        """Make this (old) version the latest again, as a new version."""
        body = transaction_pb2.Transaction.Restore(version=self.version)
        self._commit(new_transaction(self.latest_version, "restore", body))
