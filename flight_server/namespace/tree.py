"""The namespace tree over Quiver's root: namespaces are directories, tables are datasets.

Namespace ``["team"]`` is the directory ``{root}/team`` (the root namespace is the root);
table ``["team", "sales"]`` is dataset ``team/sales`` at ``{root}/team/sales.lance``, the
place Flight, Flight SQL and every namespace client find it. A namespace exists once its
directory holds anything: a dataset written over Flight makes its namespaces exist.
CreateNamespace writes ``.quiver-namespace.json`` (its properties) into the directory, which
also makes an empty namespace exist on object storage, where directories are only prefixes.

A deregistered table (DeregisterTable: out of the catalog, data kept) is moved to
``{root}/_deregistered~/{name}-{id}.lance``: no name can reach that folder (``~`` is not a name
character), so neither Flight nor the namespace serves it, and RegisterTable of that location
moves it back under a name.

A declared table (DeclareTable: a name reserved before a client writes its first version) is
a dataset directory holding ``.quiver-table.json`` and no ``_versions`` yet; the same file
keeps the properties of tables registered or declared with some. Lance and Quiver ignore
files they do not know at the top of a dataset directory.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import uuid
from dataclasses import dataclass
from typing import Any

from fsspec.implementations.local import LocalFileSystem

from quiver.flight_server.confine import inside_root
from quiver.flight_server.errors import PermissionDenied
from quiver.flight_server.names import SUFFIX, discover
from quiver.flight_server.namespace import errors as ne
from quiver.flight_server.namespace.ids import joined, namespace_path, table_name
from quiver.format.io.store import filesystem

NAMESPACE_FILE = ".quiver-namespace.json"
PARKED = "_deregistered~"
TABLE_FILE = ".quiver-table.json"
MAX_PROPERTIES_BYTES = 64 * 1024

TABLE = "table"
_PART = re.compile(r"[A-Za-z0-9_.\-]+")
DECLARED = "declared"


@dataclass(frozen=True)
class Child:
    """An entry of a namespace: a child namespace or a table (declared or not)."""

    name: str
    kind: str  # "namespace", TABLE or DECLARED


class NamespaceTree:
    """Namespaces and table directories under one root (local, memory:// or s3://)."""

    def __init__(self, root: str, storage_options: dict[str, Any] | None = None) -> None:
        self.root = root
        self.storage_options = dict(storage_options or {})
        self.fs, base = filesystem(root, storage_options)
        self.local = isinstance(self.fs, LocalFileSystem)
        self.base = base.rstrip("/") or "/"

    # -- paths ----------------------------------------------------------------------------
    def _path(self, relative: str) -> str:
        return f"{self.base}/{relative}" if relative else self.base

    def table_dir(self, name: str) -> str:
        """The backend path of dataset `name`'s directory."""
        return self._path(f"{name}{SUFFIX}")

    def _entries(self, path: str) -> list[dict[str, Any]]:
        try:
            self.fs.invalidate_cache(path)
            return list(self.fs.ls(path, detail=True))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def _isdir(self, path: str) -> bool:
        try:
            self.fs.invalidate_cache(path)
            return bool(self.fs.isdir(path))
        except OSError:
            return False

    def _exists(self, path: str) -> bool:
        try:
            return bool(self.fs.exists(path))
        except OSError:
            return False

    def _read_json(self, path: str) -> dict[str, Any] | None:
        try:
            with self.fs.open(path, "rb") as f:
                data = f.read(MAX_PROPERTIES_BYTES + 1)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        try:
            doc = json.loads(data)
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) else {}

    def _write_json(self, path: str, doc: dict[str, Any]) -> None:
        data = json.dumps(doc, sort_keys=True).encode("utf-8")
        if self.local:
            self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
        with self.fs.open(path, "wb") as f:
            f.write(data)

    # -- namespaces -----------------------------------------------------------------------
    def _confined(self, path: str) -> bool:
        """Whether a local path stays inside the root (symbolic links leading out do not:
        a namespace behind one does not exist and cannot be made)."""
        return not self.local or inside_root(self.base, path)

    def namespace_exists(self, parts: list[str]) -> bool:
        """Whether namespace `parts` exists (the root always does)."""
        if not parts:
            return True
        path = self._path(namespace_path(parts))
        return self._confined(path) and self._isdir(path)

    def require_namespace(self, parts: list[str], what: str = "namespace") -> None:
        """NamespaceNotFound unless namespace `parts` exists."""
        if not self.namespace_exists(parts):
            raise ne.NamespaceError(ne.NAMESPACE_NOT_FOUND, f"{what} {joined(parts)!r}")

    def children(self, parts: list[str]) -> list[Child]:
        """The direct children of namespace `parts`, by name."""
        out = []
        for e in self._entries(self._path(namespace_path(parts))):
            if e.get("type") != "directory" or not self._confined(str(e["name"])):
                continue
            seg = posixpath.basename(str(e["name"]).rstrip("/"))
            if seg.endswith(SUFFIX) and len(seg) > len(SUFFIX):
                name = seg[: -len(SUFFIX)]
                kind = self._table_kind(self._path("/".join([*parts, seg])))
                if kind is not None:
                    out.append(Child(name, kind))
            else:
                try:
                    namespace_path([*parts, seg])
                except ne.NamespaceError:
                    continue
                out.append(Child(seg, "namespace"))
        return sorted(out, key=lambda c: c.name)

    def properties(self, parts: list[str]) -> dict[str, str]:
        """The properties namespace `parts` was created with."""
        doc = self._read_json(self._path(f"{namespace_path(parts)}/{NAMESPACE_FILE}"))
        props = (doc or {}).get("properties")
        return dict(props) if isinstance(props, dict) else {}

    def create_namespace(self, parts: list[str], properties: dict[str, str]) -> None:
        """Make namespace `parts` (its parent must exist) with these properties."""
        path = self._path(namespace_path(parts))
        if not self._confined(path):
            raise PermissionDenied(
                f"namespace {joined(parts)!r} is a symbolic link leading outside the root"
            )
        self._write_json(f"{path}/{NAMESPACE_FILE}", {"properties": properties})

    def remove_namespace(self, parts: list[str]) -> None:
        """Delete namespace `parts` and everything under it."""
        path = self._path(namespace_path(parts))
        if self._isdir(path):
            self.fs.rm(path, recursive=True)
        self.fs.invalidate_cache(path)

    def datasets_under(self, parts: list[str]) -> list[str]:
        """Every dataset (by name) under namespace `parts`, at any depth."""
        prefix = f"{namespace_path(parts)}/" if parts else ""
        return [f.name for f in discover(self.root, self.storage_options, prefix)]

    # -- tables ---------------------------------------------------------------------------
    def _table_kind(self, path: str) -> str | None:
        if self._isdir(f"{path}/_versions"):
            return TABLE
        if self._exists(f"{path}/{TABLE_FILE}"):
            return DECLARED
        return None

    def table_kind(self, parts: list[str]) -> str | None:
        """TABLE, DECLARED, or None when table `parts` does not exist."""
        return self._table_kind(self.table_dir(table_name(parts)))

    def table_properties(self, name: str) -> dict[str, str]:
        """The properties a table was declared or registered with."""
        doc = self._read_json(f"{self.table_dir(name)}/{TABLE_FILE}")
        props = (doc or {}).get("properties")
        return dict(props) if isinstance(props, dict) else {}

    def declare(self, name: str, properties: dict[str, str]) -> None:
        """Reserve dataset `name`'s directory (its marker holds the properties)."""
        self._write_json(f"{self.table_dir(name)}/{TABLE_FILE}", {"properties": properties})

    def remove_table_dir(self, name: str) -> None:
        """Delete dataset `name`'s directory, whatever it holds."""
        path = self.table_dir(name)
        if self._isdir(path):
            self.fs.rm(path, recursive=True)

    def park(self, name: str) -> str:
        """Move dataset `name`'s directory out of every name's reach; its new path from the
        root."""
        relative = f"{PARKED}/{name}-{uuid.uuid4().hex[:8]}{SUFFIX}"
        self._move(self.table_dir(name), self._path(relative))
        return relative

    def parked(self, relative: str) -> bool:
        """Whether `relative` is a deregistered table's directory, with a version."""
        parts = relative.strip("/").split("/")
        if len(parts) < 2 or parts[0] != PARKED or not parts[-1].endswith(SUFFIX):
            return False
        if any(p in ("", ".", "..") or not _PART.fullmatch(p) for p in parts[1:]):
            return False
        path = self._path("/".join(parts))
        return self._confined(path) and self._isdir(f"{path}/_versions")

    def unpark(self, relative: str, name: str) -> None:
        """Move a deregistered table's directory to dataset `name`'s."""
        self._move(self._path(relative.strip("/")), self.table_dir(name))

    def move_table(self, name: str, new_name: str) -> None:
        """Move dataset `name`'s directory to `new_name`'s (which must not exist)."""
        self._move(self.table_dir(name), self.table_dir(new_name))

    def _move(self, src: str, dst: str) -> None:
        if self.local:
            self.fs.makedirs(posixpath.dirname(dst), exist_ok=True)
            os.rename(src, dst)  # one step: the dataset is never half in both places
        else:
            self.fs.copy(src, dst, recursive=True)
            self.fs.rm(src, recursive=True)
        self.fs.invalidate_cache(src)
        self.fs.invalidate_cache(dst)


def check_properties(value: Any, what: str) -> dict[str, str]:
    """Properties as the spec has them: a JSON object of strings (None: none)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ne.invalid(f"{what}: 'properties' must be an object of strings")
    if len(json.dumps(value)) > MAX_PROPERTIES_BYTES:
        raise ne.invalid(f"{what}: 'properties' hold more than {MAX_PROPERTIES_BYTES} bytes")
    return dict(value)
