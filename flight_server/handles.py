"""`DatasetHandles`: the datasets under one storage root, by name.

Every name is validated (and, on a local root, its directory checked to stay inside the root)
before storage is touched. Read-only handles are cached per version: a read of the latest
version lists `_versions` and reuses the handle while the newest manifest file is the one it
was read from. Fresh handles on the latest version (`open_latest`) are not cached: callers
mutate those.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from typing import Any

from quiver.flight_server.confine import check_dataset_dir
from quiver.flight_server.corruption import data_corrupt
from quiver.flight_server.errors import (
    InvalidArgument,
    NotFound,
    Scrubber,
    Unavailable,
)
from quiver.flight_server.names import dataset_uri, normalize_root
from quiver.format.dataset import DatasetCore, LanceDataset, dataset
from quiver.format.errors import CorruptFileError, DatasetNotFoundError, StorageUnavailableError
from quiver.format.io.store import ObjectStore, is_transient, open_store
from quiver.format.proto import table_pb2
from quiver.format.table.versions import TREE_DIR, ManifestEntry, latest_entry, load_manifest

_CACHE_SIZE = 64


class DatasetHandles:
    """Open datasets of one root by name: latest, a pinned version, a tag or a timestamp."""

    def __init__(self, root: str, storage_options: dict[str, Any] | None = None) -> None:
        self.root = normalize_root(root)
        self.storage_options = dict(storage_options or {})
        self.scrub = Scrubber(
            [(self.root, "<root>"), (f"file://{self.root}", "<root>"), (_bare(self.root), "<root>")]
        )
        # (uri, version) -> (read-only handle, the listed manifest it was read from or None)
        self._cache: OrderedDict[tuple[str, int], tuple[LanceDataset, ManifestEntry | None]] = (
            OrderedDict()
        )
        self._stores: dict[str, ObjectStore] = {}
        self._lock = threading.Lock()
        if "://" not in self.root:
            with contextlib.suppress(OSError):
                os.makedirs(self.root, exist_ok=True)

    # -- names ----------------------------------------------------------------------------
    def uri(self, name: str) -> str:
        """The URI of dataset `name`: the name validated and, on a local root, its directory
        checked to resolve inside the root (PermissionDenied for links leading out)."""
        uri = dataset_uri(self.root, name)
        if "://" not in self.root:
            check_dataset_dir(self.root, uri, name)
        branch = getattr(name, "branch", None)
        return f"{uri}/{TREE_DIR}/{branch}" if branch else uri

    def store(self, name: str) -> ObjectStore:
        """The object store of dataset `name` (which need not exist yet)."""
        return self._store_at(self.uri(name))

    def _store_at(self, uri: str) -> ObjectStore:
        """The (stateless, so shared) object store at a dataset URI."""
        store = self._stores.get(uri)
        if store is None:
            store = open_store(uri, self.storage_options)
            with self._lock:
                if len(self._stores) >= _CACHE_SIZE * 4:
                    self._stores.clear()
                self._stores[uri] = store
        return store

    def scrubber_for(self, name: str | None) -> Scrubber:
        """A scrubber that also turns this dataset's URI into its name."""
        if not name:
            return self.scrub
        try:
            uri = dataset_uri(self.root, name)
        except InvalidArgument:
            return self.scrub
        return self.scrub.with_pairs([(uri, name), (_bare(uri), name)])

    def explain(
        self,
        exc: BaseException,
        name: str | None,
        version: int | None = None,
        fragment_id: int | None = None,
    ) -> BaseException:
        """`exc` as a client should see it: a damaged file of dataset `name` becomes
        DataCorrupt naming the version, fragment and file (`flight_server.corruption`); a
        storage failure past the store's retries becomes Unavailable naming the dataset."""
        what = f"dataset {name!r}" + (f" version {version}" if version is not None else "")
        if name and isinstance(exc, StorageUnavailableError):
            return Unavailable(f"{what}: {exc}")  # the object and operation that failed
        if name and is_transient(exc):
            return Unavailable(
                f"{what}: the storage kept failing ({type(exc).__name__}: {exc}); retry later"
            )
        if not isinstance(exc, CorruptFileError) or not name:
            return exc
        try:
            uri = dataset_uri(self.root, name)
        except InvalidArgument:
            return exc

        def manifest_of(v: int | None) -> table_pb2.Manifest:
            ds = self.open_version(name, v) if v is not None else self.open_latest(name)
            return ds.manifest.pb

        return data_corrupt(
            exc, name, uri, version=version, fragment_id=fragment_id, manifest_of=manifest_of
        )

    # -- opening --------------------------------------------------------------------------
    def open_latest(self, name: str) -> LanceDataset:
        """A fresh handle on the latest version (safe to mutate)."""
        uri = self.uri(name)
        try:
            return dataset(uri, storage_options=self.storage_options)
        except DatasetNotFoundError:
            raise NotFound(f"dataset {name!r} does not exist") from None

    def try_latest(self, name: str) -> LanceDataset | None:
        """The latest version, or None when the dataset does not exist (NotFound for a
        branch: a write never creates one, `create_branch` does)."""
        try:
            return self.open_latest(name)
        except NotFound:
            if getattr(name, "branch", None):
                raise NotFound(
                    f"dataset {name!r} does not exist: create the branch with create_branch"
                ) from None
            return None

    def open_version(self, name: str, version: int) -> LanceDataset:
        """A cached, read-only handle on one version (never mutate it)."""
        uri = self.uri(name)
        key = (uri, version)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit[0]
        try:
            ds = dataset(uri, version=version, storage_options=self.storage_options)
        except DatasetNotFoundError:
            raise NotFound(f"dataset {name!r} does not exist") from None
        self._remember(key, ds, None)
        return ds

    def open_current(self, name: str) -> LanceDataset:
        """A cached, read-only handle on the latest version (never mutate it): `_versions`
        is listed every call, the manifest read again only when the newest one changed
        (a new commit, or a dataset dropped and created again)."""
        uri = self.uri(name)
        store = self._store_at(uri)
        try:
            entry = latest_entry(store)
        except DatasetNotFoundError:
            raise NotFound(f"dataset {name!r} does not exist") from None
        key = (uri, entry.version)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[1] == entry:
                self._cache.move_to_end(key)
                return hit[0]
        ds = LanceDataset(DatasetCore(store, load_manifest(store, entry), self.storage_options))
        self._remember(key, ds, entry)
        return ds

    def _remember(
        self, key: tuple[str, int], ds: LanceDataset, entry: ManifestEntry | None
    ) -> None:
        with self._lock:
            self._cache[key] = (ds, entry)
            self._cache.move_to_end(key)
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)

    def forget(self, name: str) -> None:
        """Drop the cached handles of dataset `name` (it was dropped, replaced or cleaned)."""
        uri = self.uri(name)
        branches = f"{uri}/{TREE_DIR}/"  # a dataset's branches go with it
        with self._lock:
            for key in [k for k in self._cache if k[0] == uri or k[0].startswith(branches)]:
                del self._cache[key]

    def open_ref(
        self, name: str, version: int | None, tag: str | None, as_of: str | None
    ) -> LanceDataset:
        """The dataset at a version number, tag, timestamp, or the latest (read-only); a
        tag must be on the branch `name` is on."""
        if version is not None:
            return self.open_version(name, version)
        if tag is None and as_of is None:
            return self.open_current(name)
        branch = getattr(name, "branch", None)
        # tags live at the dataset's root, whichever branch they point into
        uri = self.uri(str(name) if tag is not None else name)
        try:
            ds = dataset(uri, version=tag, asof=as_of, storage_options=self.storage_options)
        except DatasetNotFoundError:
            raise NotFound(f"dataset {name!r} does not exist") from None
        if ds.core.branch != branch:
            where = f"branch {ds.core.branch!r}" if ds.core.branch else "the main line"
            raise InvalidArgument(
                f"tag {tag!r} of dataset {str(name)!r} is on {where}: read it there"
            )
        return ds


def stamp(ds: LanceDataset) -> int:
    """The commit time of a version in nanoseconds: tells apart equal numbers of two lives."""
    return int(ds.manifest.pb.timestamp.ToNanoseconds())


def live_rows(pb: table_pb2.DataFragment) -> int:
    """Rows of a fragment not deleted, as its manifest entry counts them."""
    return int(pb.physical_rows) - int(pb.deletion_file.num_deleted_rows)


def known_live_rows(frag: Any) -> int:
    """Live rows of a fragment: from the manifest when it says, else from its deletion file."""
    pb = frag.metadata
    if not pb.HasField("deletion_file"):
        return int(pb.physical_rows)
    if pb.deletion_file.num_deleted_rows:
        return live_rows(pb)
    return int(frag.count_rows())  # older writers leave the count out


def _bare(uri: str) -> str:
    """A remote URI as its store's client names objects in errors (``bucket/key``, without
    the scheme); "" for a local path."""
    scheme, sep, rest = uri.partition("://")
    return rest if sep and scheme.lower() != "file" else ""
