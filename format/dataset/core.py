"""`DatasetCore`: one resolved version of a Lance dataset, what every dataset module works on.

It holds the object store, the version's manifest and the storage options, finds files
through the manifest's base paths, loads other versions and commits a transaction on top of
itself, returning the new version's core. The pylance-shaped `LanceDataset` is a facade
over one; fragments, scans, schema evolution, compaction and cleanup take a core, so none of
them needs the facade.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import pyarrow as pa

from quiver.format.errors import CorruptFileError
from quiver.format.io.store import ObjectStore, open_store
from quiver.format.proto import transaction_pb2
from quiver.format.table import versions as _versions
from quiver.format.table.commit import DeferredRemap, RowMover, commit_transaction
from quiver.format.table.manifest import Manifest
from quiver.format.table.schema import LanceSchema
from quiver.format.table.transaction import ManifestContext


class DatasetCore:
    """A dataset pinned to one version: store, manifest, options; resolve, load, commit."""

    def __init__(
        self,
        store: ObjectStore,
        manifest: Manifest,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        manifest.check_readable(store.uri)
        self.store = store
        self.manifest = manifest
        self.storage_options = storage_options
        self._base_stores: dict[int, tuple[ObjectStore, bool]] = {}
        self._projected_arrow: dict[tuple[str, ...], pa.Schema] = {}

    @classmethod
    def open(
        cls,
        uri: str,
        version: _versions.Reference = None,
        asof: Any = None,
        storage_options: dict[str, Any] | None = None,
    ) -> DatasetCore:
        """The dataset at `uri` at its latest version, a version number, a tag (possibly on
        a branch) or the last version committed at or before `asof`."""
        store, _, number = _versions.resolve_ref(open_store(str(uri), storage_options), version)
        return cls(store, _versions.resolve(store, number, asof), storage_options)

    # -- identity -------------------------------------------------------------------------
    @property
    def uri(self) -> str:
        """The dataset's URI."""
        return self.store.uri

    @property
    def version(self) -> int:
        """The version this core reads."""
        return self.manifest.version

    @property
    def branch(self) -> str | None:
        """The branch this version is on; None for the main line."""
        pb = self.manifest.pb
        return pb.branch if pb.HasField("branch") and pb.branch else None

    @cached_property
    def root_store(self) -> ObjectStore:
        """The store of the dataset's root, where its tags and branches are."""
        return _versions.root_store(self.store, self.branch)

    @property
    def lance_schema(self) -> LanceSchema:
        """The schema with Lance field ids."""
        return self.manifest.schema

    @cached_property
    def schema(self) -> pa.Schema:
        """The Arrow schema of this version."""
        return self.manifest.schema.to_arrow()

    def projected_arrow(self, names: tuple[str, ...]) -> pa.Schema:
        """The Arrow schema of top-level columns `names`, blob columns as their descriptions
        (what a scan yields), cached: every scan of this version builds one."""
        out = self._projected_arrow.get(names)
        if out is None:
            projection = self.manifest.schema.project(list(names), dataset=self.uri)
            out = projection.to_arrow(blob_descriptions=True)
            if len(self._projected_arrow) < 64:
                self._projected_arrow[names] = out
        return out

    @property
    def data_storage_version(self) -> str:
        """Storage version of the data files ("0.1", "2.0", "2.1", "2.2")."""
        return self.manifest.data_storage_version

    def latest_version(self) -> int:
        """The newest committed version (listed now)."""
        return _versions.latest_entry(self.store).version

    # -- files ----------------------------------------------------------------------------
    def resolve(
        self, path: str, base_id: int | None, *, relative_to_root: bool = False
    ) -> tuple[ObjectStore, str]:
        """The store and path of a file, following the manifest's base paths."""
        if base_id is None:
            return self.store, path
        if base_id not in self._base_stores:
            for bp in self.manifest.pb.base_paths:
                if bp.id == base_id:
                    base = open_store(bp.path, self.storage_options)
                    base.io = self.store.io  # counted as this dataset's (`io_stats_*`)
                    self._base_stores[base_id] = (base, bp.is_dataset_root)
                    break
            else:
                raise CorruptFileError(
                    self.store.uri_of(self.manifest.path),
                    f"base path id {base_id} is not in the manifest's base paths",
                )
        store, is_root = self._base_stores[base_id]
        if not is_root and not relative_to_root:
            path = path.split("/", 1)[1]  # files sit directly under a non-root base
        return store, path

    # -- versions -------------------------------------------------------------------------
    def load_version(self, version: int) -> Manifest:
        """The manifest of another version of this dataset (branch)."""
        return _versions.load_manifest(self.store, _versions.find_entry(self.store, version))

    def checkout(self, version: _versions.Reference) -> DatasetCore:
        """The same dataset at another version: a number on this branch, a tag, or
        (branch, number) where None is the main line or the latest version."""
        store, _, number = _versions.resolve_ref(self.store, version, self.branch)
        return DatasetCore(store, _versions.resolve(store, number), self.storage_options)

    def commit(
        self,
        txn: transaction_pb2.Transaction,
        ctx: ManifestContext | None = None,
        *,
        moved: RowMover | None = None,
        deferred: DeferredRemap | None = None,
    ) -> DatasetCore:
        """Commit `txn` (read on this version or an older one) and return the new version;
        `moved` is a compaction's map of the rows it moved, `deferred` the fragment reuse
        index of one that deferred its index remap (see `commit_transaction`)."""
        result = commit_transaction(
            self.store,
            txn,
            ctx=ctx or ManifestContext(load_version=self.load_version),
            moved=moved,
            deferred=deferred,
        )
        return DatasetCore(self.store, result.manifest, self.storage_options)
