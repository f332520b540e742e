"""The datasets under the root as SQL tables: catalog `quiver`, one schema per folder.

A dataset `team/sales` is table `sales` of schema `team` (`a/b/c` is table `c` of schema
`a/b`, written `"a/b".c`); a dataset at the top of the root is a table of schema `public`,
the default, so `SELECT * FROM sales` reads dataset `sales` (a dataset `public/sales` is
found there too when no top-level `sales` exists). A table name may carry a version or a
tag: `"sales@v3"` reads version 3, `"sales@gold"` the version tagged `gold`.

The engine resolves names while it plans, calling back into this module on the planning
thread. Who is asking, and which versions an earlier plan of the same statement saw, are
held for that thread in a `Planning` scope: every table a query touches is checked against
the caller's read right, and a statement planned again for its stream reads the versions
its first plan reported.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from datafusion.catalog import CatalogProvider, SchemaProvider, Table

from quiver.flight_server.errors import InvalidArgument, NotFound, QuiverError
from quiver.flight_server.names import on_branch, validate_name
from quiver.format.dataset.sql.table import QuiverTable
from quiver.format.errors import TagNotFoundError, VersionNotFoundError
from quiver.wire.requests import READ

if TYPE_CHECKING:
    from quiver.flight_server.service import DatasetService

CATALOG = "quiver"
DEFAULT_SCHEMA = "public"
_VERSION_REF = re.compile(r"v(\d{1,18})")


def split_name(dataset: str) -> tuple[str, str]:
    """(schema, table) of a dataset name."""
    schema, _, table = dataset.rpartition("/")
    return (schema or DEFAULT_SCHEMA), table


def check_catalog(name: str | None) -> None:
    """NotFound unless `name` is this server's catalog (or not given)."""
    if name and name != CATALOG:
        raise NotFound(f"catalog {name!r} does not exist (the catalog is {CATALOG!r})")


def schemas_of(datasets: Iterable[str]) -> set[str]:
    """The schemas holding these datasets, and the default one."""
    return {DEFAULT_SCHEMA} | {split_name(name)[0] for name in datasets}


def table_ref(table: str) -> tuple[str, str | None, str | None]:
    """(table, branch, version reference) of a SQL table name `table[#branch][@ref]`:
    `"sales#dev"` is branch `dev` of `sales`, `"sales#dev@v3"` its version 3."""
    head, at, ref = table.partition("@")
    base, hashed, branch = head.partition("#")
    return base, branch if hashed else None, ref if at else None


def ref_key(name: str, branch: str | None, ref: str | None) -> str:
    """The key a table reference's version is pinned under: `name[#branch][@ref]`."""
    return name + (f"#{branch}" if branch else "") + (f"@{ref}" if ref is not None else "")


def on_sql_branch(name: str, branch: str | None) -> str:
    """`name` on `branch` (None: the main line), the branch name checked."""
    if branch is None:
        return name
    if not branch:
        raise InvalidArgument(f"table {name!r}: '#' must be followed by a branch name")
    return on_branch(name, branch)


def dataset_names(schema: str, table: str) -> list[str]:
    """The dataset names a (schema, table) may stand for, in the order they are tried."""
    if schema == DEFAULT_SCHEMA:
        return [table, f"{DEFAULT_SCHEMA}/{table}"]
    return [f"{schema}/{table}"]


@dataclass
class Planning:
    """One statement's planning: its caller, the versions to read, what it resolved."""

    identity: Any
    pins: dict[str, int] = field(default_factory=dict)  # "name@ref" -> version to read
    resolved: dict[str, int] = field(default_factory=dict)  # "name@ref" -> version read
    tables: dict[str, QuiverTable] = field(default_factory=dict)  # dataset name -> latest table
    opened: list[QuiverTable] = field(default_factory=list)  # every table resolved
    parameters: dict[str, Any] = field(default_factory=dict)  # "$1" -> its value
    # why resolving a table or running a search failed (the engine may hand the error back
    # only as text): a QuiverError, or the engine's own error for a search
    failure: Exception | None = None


_current = threading.local()


@contextmanager
def planning(scope: Planning) -> Iterator[Planning]:
    """Resolve names for `scope` on this thread while the block runs."""
    previous = getattr(_current, "scope", None)
    _current.scope = scope
    try:
        yield scope
    finally:
        _current.scope = previous


def current_planning() -> Planning | None:
    """The statement being planned on this thread, if any."""
    return getattr(_current, "scope", None)


class QuiverCatalog(CatalogProvider):
    """Catalog `quiver`: schemas resolved lazily, tables opened as the engine names them."""

    def __init__(self, service: DatasetService, partitions: int, step_bytes: int) -> None:
        self.service = service
        self.partitions = partitions
        self.step_bytes = step_bytes

    def schema_names(self) -> set[str]:
        scope = current_planning()
        if scope is None:
            return set()
        return schemas_of(d.name for d in self.service.list_datasets("", scope.identity))

    def schema(self, name: str) -> QuiverSchema:
        return QuiverSchema(self, name)

    def resolve(self, schema: str, table: str) -> Table | None:
        """The table `schema.table` names for the planning caller, or None if there is none
        (the engine then reports it unknown); a table the caller may not read raises
        PermissionDenied, and an unknown version or tag NotFound."""
        scope = current_planning()
        if scope is None:  # names are resolved only while a statement is planned
            return None
        found = self.open_dataset(scope, schema, table)
        if found is None:
            return None
        ds, target, ref = found
        quiver_table = QuiverTable(ds, target, self.partitions, step_bytes=self.step_bytes)
        if ref is None:
            scope.tables[target] = quiver_table
        scope.opened.append(quiver_table)
        return Table(quiver_table)

    def open_dataset(
        self, scope: Planning, schema: str, table: str
    ) -> tuple[Any, str, str | None] | None:
        """(the dataset version, its name, the version reference) that `schema.table` names
        for `scope`'s caller, the version recorded in `scope.resolved` (and read at the pinned
        one when the statement is planned again); None if there is no such dataset. A
        dataset the caller may not read raises PermissionDenied."""
        base, branch, ref = table_ref(table)
        refused = None
        for name in dataset_names(schema, base):
            try:
                validate_name(name)
            except InvalidArgument:
                return None
            if not self.service.may_read(scope.identity, name):
                refused = refused or name
                continue
            key = ref_key(name, branch, ref)
            target = on_sql_branch(name, branch)
            ds = self._open(target, key, ref, scope)
            if ds is None:
                continue
            scope.resolved[key] = ds.version
            return ds, target, ref
        if refused is not None:
            self.service.authorize(scope.identity, refused, READ)  # raises PermissionDenied
        return None

    def _open(self, name: str, key: str, ref: str | None, scope: Planning) -> Any:
        """The version of `name` to read (None if there is no such dataset)."""
        handles = self.service.handles
        pinned = scope.pins.get(key)
        try:
            if pinned is not None:
                return handles.open_version(name, pinned)
            if ref is None:
                return handles.open_current(name)
        except NotFound:
            branch = getattr(name, "branch", None)
            if branch and handles.try_latest(str(name)) is not None:
                raise NotFound(
                    f"dataset {str(name)!r} has no branch {branch!r} (create it with create_branch)"
                ) from None
            return None
        if handles.try_latest(name) is None:
            return None
        return _open_ref(handles, name, ref)


def _open_ref(handles: Any, name: str, ref: str) -> Any:
    """The version of dataset `name` that `@ref` names: `v<number>` or a tag."""
    if not ref:
        raise InvalidArgument(f"table {name!r}: '@' must be followed by v<version> or a tag")
    match = _VERSION_REF.fullmatch(ref)
    try:
        if match is not None:
            return handles.open_version(name, int(match.group(1)))
        return handles.open_ref(name, None, ref, None)
    except (NotFound, VersionNotFoundError, TagNotFoundError) as e:
        raise NotFound(f"dataset {name!r} has no version or tag {ref!r}") from e


class QuiverSchema(SchemaProvider):
    """One schema: the datasets of one folder (or the top of the root, for `public`)."""

    def __init__(self, catalog: QuiverCatalog, name: str) -> None:
        self._catalog = catalog
        self._name = name

    @property
    def table_names(self) -> list[str]:  # type: ignore[override]
        # DataFusion 55 reads this as an attribute, though the base class declares a method
        scope = current_planning()
        if scope is None:
            return []
        found = self._catalog.service.list_datasets("", scope.identity)
        return sorted(t for s, t in (split_name(d.name) for d in found) if s == self._name)

    def table(self, name: str) -> Table | None:
        try:
            return self._catalog.resolve(self._name, name)
        except QuiverError as e:
            scope = current_planning()
            if scope is not None:
                scope.failure = e
            raise

    def table_exist(self, name: str) -> bool:
        return self.table(name) is not None
