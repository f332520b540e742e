"""Clones of a dataset version, as pylance 14 makes them: a shallow clone (a new dataset,
or a branch, whose first manifest reaches every file and index of the source through a
base path at the source's root) and a deep clone (every file the version uses copied, so
the copy stands alone).
"""

from __future__ import annotations

from typing import Any

from quiver.format.dataset.core import DatasetCore
from quiver.format.errors import DatasetAlreadyExistsError
from quiver.format.io.store import ObjectStore
from quiver.format.proto import table_pb2, transaction_pb2
from quiver.format.table import versions as _versions
from quiver.format.table.commit import commit_clone
from quiver.format.table.deletion import deletion_file_path
from quiver.format.table.indices import index_section, indices_of
from quiver.format.table.transaction import new_transaction

COPY_CHUNK = 8 << 20


def _root_of(source: DatasetCore) -> str:
    return source.uri if "://" in source.uri else source.store.full_path("")


def _refuse_existing(target: ObjectStore, branch: str | None = None) -> None:
    if _versions.list_manifests(target):
        where = f"branch {branch!r}" if branch else "a dataset"
        raise DatasetAlreadyExistsError(f"{where} already exists at {target.uri}")


def shallow_clone(
    source: DatasetCore,
    target: ObjectStore,
    *,
    branch: str | None = None,
    tag: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> DatasetCore:
    """A new dataset (or `branch`) at `target` sharing `source`'s files and indices
    through a base path at `source`'s root: its first manifest has `source`'s version
    number and copies no data."""
    _refuse_existing(target, branch)
    pb = table_pb2.Manifest()
    pb.CopyFrom(source.manifest.pb)
    base_id = max((b.id for b in pb.base_paths), default=-1) + 1
    root = _root_of(source)
    pb.base_paths.append(
        table_pb2.BasePath(id=base_id, is_dataset_root=True, path=root, name=source.branch or "")
    )
    for frag in pb.fragments:
        for df in frag.files:
            if not df.HasField("base_id"):
                df.base_id = base_id
        if frag.HasField("deletion_file") and not frag.deletion_file.HasField("base_id"):
            frag.deletion_file.base_id = base_id
    indices = index_section(source.manifest)
    if indices is not None:
        indices = _with_base(indices, base_id)
    if branch:
        pb.branch = branch
    else:
        pb.ClearField("branch")
    body = transaction_pb2.Transaction.Clone(
        is_shallow=True, ref_version=source.version, ref_path=root
    )
    if branch:
        body.branch_name = branch
    if tag or source.branch:
        body.ref_name = tag or source.branch or ""
    txn = new_transaction(source.version, "clone", body)
    manifest = commit_clone(target, txn, pb, source.manifest, indices)
    return DatasetCore(target, manifest, storage_options or source.storage_options)


def deep_clone(
    source: DatasetCore, target: ObjectStore, *, storage_options: dict[str, Any] | None = None
) -> DatasetCore:
    """A new dataset at `target` holding a copy of every data, deletion and index file
    `source` uses (wherever its base paths put them), its first manifest numbered as the
    source's version and needing nothing of the source."""
    _refuse_existing(target)
    pb = table_pb2.Manifest()
    pb.CopyFrom(source.manifest.pb)

    def based(message: Any) -> int | None:
        return message.base_id if message.HasField("base_id") else None

    sidecars = any(f.is_blob_v2 for f in source.manifest.schema.fields)
    for frag in pb.fragments:
        for df in frag.files:
            _copy(source, based(df), f"data/{df.path}", target)
            if sidecars:  # blob v2 values too large for the data file: data/<stem>/*.blob
                stem = f"data/{df.path.rsplit('.', 1)[0]}"
                store, found = source.resolve(stem, based(df))
                for name, _, _ in store.list_dir(found):
                    _copy_between(store, f"{found}/{name}", target, f"{stem}/{name}")
            df.ClearField("base_id")
        if frag.HasField("deletion_file"):
            d = frag.deletion_file
            bitmap = d.file_type == table_pb2.DeletionFile.BITMAP
            _copy(
                source,
                based(d),
                deletion_file_path(int(frag.id), d.read_version, d.id, bitmap),
                target,
            )
            d.ClearField("base_id")
    indices = index_section(source.manifest)
    if indices is not None:
        for entry in indices_of(source.manifest, system=True):
            store, directory = source.resolve(
                entry.directory,
                entry.pb.base_id if entry.pb.HasField("base_id") else None,
                relative_to_root=True,
            )
            for name, _, _ in store.list_dir(directory):
                _copy_between(store, f"{directory}/{name}", target, f"{entry.directory}/{name}")
        copied = table_pb2.IndexSection()
        copied.CopyFrom(indices)
        for entry in copied.indices:
            entry.ClearField("base_id")
        indices = copied
    pb.ClearField("base_paths")
    pb.ClearField("branch")
    body = transaction_pb2.Transaction.Clone(
        is_shallow=False, ref_version=source.version, ref_path=_root_of(source)
    )
    txn = new_transaction(source.version, "clone", body)
    manifest = commit_clone(target, txn, pb, source.manifest, indices)
    return DatasetCore(target, manifest, storage_options or source.storage_options)


def _copy(source: DatasetCore, base_id: int | None, path: str, target: ObjectStore) -> None:
    store, found = source.resolve(path, base_id)
    _copy_between(store, found, target, path)


def _copy_between(store: ObjectStore, path: str, target: ObjectStore, to: str) -> None:
    """Copy one file in chunks (the copy appears whole once written)."""
    size = store.size(path)
    with store.open(path, size) as reader, target.open_write(to) as out:
        for start in range(0, size, COPY_CHUNK):
            out.write(bytes(reader.read(start, min(COPY_CHUNK, size - start))))


def _with_base(section: table_pb2.IndexSection, base_id: int) -> table_pb2.IndexSection:
    """A copy of an index section with every index of the source's own root read
    through base path `base_id`."""
    out = table_pb2.IndexSection()
    out.CopyFrom(section)
    for entry in out.indices:
        if not entry.HasField("base_id"):
            entry.base_id = base_id
    return out
