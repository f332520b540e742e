"""A dataset's named references: tags (`ds.tags`), branches (`ds.branches`,
`create_branch`), as pylance 14 writes them.

A branch lives in two places: its ref, `_refs/branches/{name}.json` under the dataset's
root (where it was created from), and its versions, a shallow clone (`clone.py`) at
`tree/{name}/`
whose first manifest points every file of the version it was created from at that
version's root through a base path. Writes to a branch are commits under `tree/{name}/`;
the main line never sees them.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from typing import Any

from quiver.format.dataset.clone import shallow_clone
from quiver.format.dataset.core import DatasetCore
from quiver.format.errors import (
    CommitConflictError,
    DatasetAlreadyExistsError,
    InvalidInputError,
)
from quiver.format.table import versions as _versions


def _iso_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Tags:
    """A dataset's tags (pylance's `ds.tags`); a plain version number means a version of
    the branch the dataset is on."""

    def __init__(self, core: DatasetCore) -> None:
        self._core = core
        self._root = core.root_store

    def list(self) -> dict[str, dict[str, Any]]:
        """Every tag: name -> {"branch", "version", "manifest_size", "created_at", ...}."""
        return {
            name: {
                "branch": t.branch,
                "version": t.version,
                "manifest_size": t.manifest_size,
                "created_at": t.created_at,
                "updated_at": t.updated_at,
                "metadata": t.metadata,
            }
            for name, t in sorted(_versions.list_tags(self._root).items())
        }

    def get_version(self, tag: str) -> int:
        """The version a tag points to."""
        return _versions.read_tag(self._root, tag).version

    def create(self, tag: str, reference: _versions.Reference = None) -> None:
        """Tag a version (this dataset's by default); refuses an existing tag name."""
        self._write(tag, reference, create=True)

    def update(self, tag: str, reference: _versions.Reference = None) -> None:
        """Point an existing tag at another version."""
        _versions.read_tag(self._root, tag)  # must exist
        self._write(tag, reference, create=False)

    def delete(self, tag: str) -> None:
        """Remove a tag."""
        _versions.read_tag(self._root, tag)
        self._root.delete(_versions.tag_path(tag))

    def _write(self, tag: str, reference: _versions.Reference, *, create: bool) -> None:
        root, core = self._root, self._core
        _versions.check_tag_name(tag)
        if reference is None:
            store, branch, version = core.store, core.branch, core.version
        else:
            store, branch, version = _versions.resolve_ref(core.store, reference, core.branch)
        entry = (
            _versions.latest_entry(store)
            if version is None
            else _versions.find_entry(store, version)
        )
        now = _iso_now()
        created = now
        if not create:
            old = _versions.read_tag(root, tag).created_at
            created = old.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if old else now
        body = {
            "branch": branch,
            "version": entry.version,
            "createdAt": created,
            "updatedAt": now,
            "manifestSize": entry.size,
            "metadata": {},
        }
        data = json.dumps(body, indent=2).encode()
        path = _versions.tag_path(tag)
        if not create:
            root.put(path, data)
            return
        try:
            root.put_if_absent(path, data)
        except FileExistsError:
            raise DatasetAlreadyExistsError(f"{root.uri}: tag {tag!r} already exists") from None


class Branches:
    """A dataset's branches (pylance's `ds.branches`)."""

    def __init__(self, core: DatasetCore) -> None:
        self._root = core.root_store

    def list(self) -> dict[str, dict[str, Any]]:
        """Every branch: name -> {"parent_branch", "parent_version", "create_at", ...}."""
        return {name: _described(b) for name, b in _versions.list_branches(self._root).items()}

    def list_ordered(self, order: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Every branch by the version it was created from: newest first (`order` "desc",
        the default) or oldest first ("asc")."""
        if order not in (None, "asc", "desc"):
            raise InvalidInputError(f"invalid sort order {order!r}: valid values are asc, desc")
        found = _versions.list_branches(self._root).values()
        ranked = sorted(found, key=lambda b: (b.parent_version, b.name), reverse=order != "asc")
        return [(b.name, _described(b)) for b in ranked]

    def delete(self, branch: str) -> None:
        """Remove a branch and the files it wrote; refused while other branches were
        created from it (they read its files)."""
        root = self._root
        _versions.read_branch(root, branch)
        children = sorted(
            (b.name, b.parent_version)
            for b in _versions.list_branches(root).values()
            if b.parent_branch == branch
        )
        if children:
            raise CommitConflictError(
                f"{root.uri}: branch {branch!r} cannot be deleted: branches {children} "
                "(name, version) were created from it"
            )
        nested = [
            f"{_versions.TREE_DIR}/{name}/"
            for name in _versions.list_branches(root)
            if name.startswith(f"{branch}/")
        ]
        # files first: a delete cut short leaves the ref, so it can be run again
        root.delete_tree(
            f"{_versions.TREE_DIR}/{branch}",
            keep=lambda path: any(path.startswith(n) for n in nested),
        )
        parts = branch.split("/")
        for depth in range(len(parts) - 1, 0, -1):  # the directories "a/b" nested it in
            root.remove_empty_dir(f"{_versions.TREE_DIR}/{'/'.join(parts[:depth])}")
        root.delete(_versions.branch_path(branch))

    def replace_metadata(self, branch: str, metadata: dict[str, str]) -> None:
        """Replace a branch's metadata (a string map)."""
        if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            raise InvalidInputError("branch metadata must map strings to strings")
        found = _versions.read_branch(self._root, branch)
        updated = _versions.Branch(**{**found.__dict__, "metadata": dict(metadata)})
        self._root.put(_versions.branch_path(branch), updated.to_json())


def _described(b: _versions.Branch) -> dict[str, Any]:
    return {
        "parent_branch": b.parent_branch,
        "branch_identifier": [tuple(pair) for pair in b.identifier],
        "parent_version": b.parent_version,
        "create_at": b.create_at,
        "manifest_size": b.manifest_size,
        "metadata": dict(b.metadata),
    }


def create_branch(
    core: DatasetCore, name: str, reference: _versions.Reference = None
) -> DatasetCore:
    """Create branch `name` from a version (this one by default) and return its first
    version. The ref is written first, so two creators of one name cannot both win."""
    root = core.root_store
    _versions.check_branch_name(name)
    source = core if reference is None else core.checkout(reference)
    parent = source.branch
    lineage = _versions.read_branch(root, parent).identifier if parent else ()
    size = _versions.find_entry(source.store, source.version).size
    ref = _versions.Branch(
        name=name,
        parent_branch=parent,
        parent_version=source.version,
        identifier=(*lineage, (source.version, uuid.uuid4().hex)),
        create_at=int(time.time()),
        manifest_size=size,
        metadata={},
    )
    path = _versions.branch_path(name)
    try:
        root.put_if_absent(path, ref.to_json())
    except FileExistsError:
        raise DatasetAlreadyExistsError(f"{root.uri}: branch {name!r} already exists") from None
    try:
        return shallow_clone(source, _versions.branch_store(root, name), branch=name)
    except BaseException:
        root.delete(path)
        raise
