"""Namespace and table-metadata routes: namespaces, listing, declare, describe, exists,
register, deregister, rename and drop.

Each handler takes the front door's `Context` and the `Call` and returns what the
specification answers (a JSON object, `EMPTY` for the exists routes). Rights: listing shows
only what the caller may read; describing or checking a table needs the read right on it;
declaring, dropping or renaming tables needs the write right on each name touched; creating
or dropping a namespace needs the write right on everything in it.
"""

from __future__ import annotations

from typing import Any

from quiver.flight_server.errors import QuiverError
from quiver.flight_server.names import SUFFIX, on_branch
from quiver.flight_server.namespace import errors as ne
from quiver.flight_server.namespace.calls import EMPTY, Call, Empty, paged
from quiver.flight_server.namespace.context import Context
from quiver.flight_server.namespace.ids import joined, namespace_path, table_name
from quiver.flight_server.namespace.schema_json import schema_json
from quiver.flight_server.namespace.tree import DECLARED, PARKED, TABLE, check_properties
from quiver.wire.requests import READ, WRITE

_CREATE_MODES = ("create", "exist_ok", "existok", "overwrite")


def _mode(call: Call, allowed: tuple[str, ...], default: str) -> str:
    mode = (call.str("mode") or default).lower()
    if mode not in allowed:
        raise ne.invalid(f"{call.op}: unknown mode {call.str('mode')!r}")
    return mode.replace("existok", "exist_ok")


# -- namespaces ---------------------------------------------------------------------------
def list_namespaces(ctx: Context, call: Call) -> dict[str, Any]:
    ctx.tree.require_namespace(call.parts)
    base = namespace_path(call.parts)
    names = [
        c.name
        for c in ctx.tree.children(call.parts)
        if c.kind == "namespace"
        and ctx.sees_namespace(call.identity, f"{base}/{c.name}" if base else c.name)
    ]
    return paged("namespaces", names, call)


def create_namespace(ctx: Context, call: Call) -> dict[str, Any]:
    if not call.parts:
        raise ne.NamespaceError(ne.NAMESPACE_ALREADY_EXISTS, "the root namespace always exists")
    path = namespace_path(call.parts)
    mode = _mode(call, _CREATE_MODES, "create")
    properties = check_properties(call.object("properties"), call.op)
    ctx.authorize_namespace(call.identity, path)
    ctx.tree.require_namespace(call.parts[:-1], "parent namespace")
    if ctx.tree.table_kind(call.parts) is not None:
        raise ne.NamespaceError(
            ne.NAMESPACE_ALREADY_EXISTS, f"{call.id_text!r} is a table, not a namespace"
        )
    if ctx.tree.namespace_exists(call.parts):
        if mode == "create":
            raise ne.NamespaceError(ne.NAMESPACE_ALREADY_EXISTS, call.id_text)
        if mode == "exist_ok":
            return {"properties": ctx.tree.properties(call.parts)} if properties else {}
    ctx.tree.create_namespace(call.parts, properties)
    return {"properties": properties} if properties else {}


def describe_namespace(ctx: Context, call: Call) -> dict[str, Any]:
    path = namespace_path(call.parts)
    if not ctx.sees_namespace(call.identity, path):
        raise ne.NamespaceError(ne.NAMESPACE_NOT_FOUND, call.id_text)
    ctx.tree.require_namespace(call.parts)
    properties = ctx.tree.properties(call.parts) if call.parts else {}
    return {"properties": properties} if properties else {}


def namespace_exists(ctx: Context, call: Call) -> Empty:
    describe_namespace(ctx, call)
    return EMPTY


def drop_namespace(ctx: Context, call: Call) -> dict[str, Any]:
    if not call.parts:
        raise ne.invalid("the root namespace cannot be dropped")
    path = namespace_path(call.parts)
    mode = _mode(call, ("fail", "skip"), "fail")
    behavior = (call.str("behavior") or "restrict").lower()
    if behavior not in ("restrict", "cascade"):
        raise ne.invalid(f"{call.op}: 'behavior' must be Restrict or Cascade")
    ctx.authorize_namespace(call.identity, path)
    if not ctx.tree.namespace_exists(call.parts):
        if mode == "skip":
            return {}
        raise ne.NamespaceError(ne.NAMESPACE_NOT_FOUND, call.id_text)
    children = ctx.tree.children(call.parts)
    if children and behavior == "restrict":
        raise ne.NamespaceError(
            ne.NAMESPACE_NOT_EMPTY, f"{call.id_text!r} (contains {len(children)} child objects)"
        )
    datasets = ctx.tree.datasets_under(call.parts)
    for name in datasets:
        ctx.authorize(call.identity, name, WRITE)
    properties = ctx.tree.properties(call.parts)
    for name in datasets:
        ctx.handles.forget(name)
    ctx.tree.remove_namespace(call.parts)
    return {"properties": properties} if properties else {}


# -- listing tables -----------------------------------------------------------------------
def list_tables(ctx: Context, call: Call) -> dict[str, Any]:
    ctx.tree.require_namespace(call.parts)
    declared = call.bool("include_declared", True)
    base = namespace_path(call.parts)
    names = [
        c.name
        for c in ctx.tree.children(call.parts)
        if (c.kind == TABLE or (declared and c.kind == DECLARED))
        and ctx.may(call.identity, f"{base}/{c.name}" if base else c.name)
    ]
    return paged("tables", names, call)


def list_all_tables(ctx: Context, call: Call) -> dict[str, Any]:
    names = sorted(
        joined(name.split("/"), call.delimiter)
        for name in ctx.tree.datasets_under([])
        if ctx.may(call.identity, name)
    )
    return paged("tables", names, call)


# -- one table ----------------------------------------------------------------------------
def table_of(ctx: Context, call: Call, right: str = READ) -> tuple[str, str]:
    """(dataset name, TABLE or DECLARED) of the route's table; TableNotFound if neither.
    A caller without `right` on it learns nothing more than that it is not found."""
    name = table_name(call.parts)
    if not ctx.may(call.identity, name, right):
        if right == WRITE and ctx.may(call.identity, name, READ):
            ctx.authorize(call.identity, name, right)
        raise ne.NamespaceError(ne.TABLE_NOT_FOUND, f"table id {call.id_text!r}")
    kind = ctx.tree.table_kind(call.parts)
    if kind is None:
        raise ne.NamespaceError(ne.TABLE_NOT_FOUND, f"table id {call.id_text!r}")
    return name, kind


def existing_table(ctx: Context, call: Call, right: str = READ, *, branched: bool = False) -> str:
    """The dataset name of the route's table, which must have a version (not only be
    declared); on the request's `branch` (which must exist) where the route is `branched`,
    while the other routes refuse a branch."""
    name, kind = table_of(ctx, call, right)
    if kind != TABLE:
        raise ne.NamespaceError(ne.TABLE_NOT_FOUND, f"table {call.id_text!r} has no data yet")
    branch = call.str("branch")
    if branch and branch != "main":
        if not branched:
            raise ne.unsupported(f"{call.op}: this route does not act on a branch")
        return on_existing_branch(ctx, call, name, branch)
    return name


def branch_field(name: str) -> dict[str, str]:
    """An action body's `branch` for `name` (on a branch or not)."""
    branch = getattr(name, "branch", None)
    return {"branch": branch} if branch else {}


def on_existing_branch(ctx: Context, call: Call, name: str, branch: str) -> str:
    """`name` on `branch`; TableBranchNotFound when the table has no such branch."""
    try:
        branched = on_branch(name, branch)
    except QuiverError as e:
        raise ne.invalid(f"{call.op}: {e}") from None
    try:
        ctx.handles.open_latest(branched)
    except QuiverError as e:
        raise ne.translate(
            e, ctx.service.scrubber_for(name), not_found=ne.TABLE_BRANCH_NOT_FOUND
        ) from None
    return branched


def where_of(ctx: Context, name: str) -> dict[str, Any]:
    out: dict[str, Any] = {"location": ctx.locations.location(name)}
    options = ctx.locations.storage_options()
    if options:
        out["storage_options"] = options
    if ctx.managed:
        out["managed_versioning"] = True
    return out


def declare_table(ctx: Context, call: Call) -> dict[str, Any]:
    name = table_name(call.parts)
    properties = check_properties(call.object("properties"), call.op)
    ctx.authorize(call.identity, name, WRITE)
    _own_location(ctx, call, name)
    ctx.tree.require_namespace(call.parts[:-1])
    if ctx.tree.table_kind(call.parts) is not None:
        raise ne.NamespaceError(ne.TABLE_ALREADY_EXISTS, call.id_text)
    ctx.handles.uri(name)  # a directory leading out of the root is refused before writing
    ctx.tree.declare(name, properties)
    out = where_of(ctx, name)
    if properties:
        out["properties"] = properties
    return out


def _own_location(ctx: Context, call: Call, name: str) -> None:
    """Refuse a location other than the one Quiver keeps table `name` at."""
    given = call.str("location")
    if given is None:
        return
    own = ctx.locations.location(name)
    relative = f"{name}{SUFFIX}"
    if given.rstrip("/") not in (own, f"file://{own}", relative):
        raise ne.unsupported(
            f"{call.op}: Quiver keeps table {call.id_text!r} at {relative!r} under its root; "
            "give that location or none"
        )


def describe_table(ctx: Context, call: Call) -> dict[str, Any]:
    name, kind = table_of(ctx, call)
    out: dict[str, Any] = {"table": call.parts[-1], "namespace": call.parts[:-1]}
    out.update(where_of(ctx, name))
    out["table_uri"] = out["location"]
    properties = ctx.tree.table_properties(name)
    if properties:
        out["properties"] = properties
    if kind == DECLARED:
        if call.bool("check_declared"):
            out["is_only_declared"] = True
        return out
    version = call.int("version")
    detailed = call.bool("load_detailed_metadata")
    # on a branch: its version and schema (the location stays the dataset's root, where
    # pylance finds the branch itself)
    target = existing_table(ctx, call, branched=True) if call.str("branch") else name
    if detailed or version is not None or call.has("tag"):
        ds = ctx.handles.open_ref(target, version, call.str("tag"), None)
        if detailed:
            out["version"] = ds.version
            out["schema"] = schema_json(ds.schema)
            out["metadata"] = {k: str(v) for k, v in data_stats(ds).items()}
    if call.bool("check_declared"):
        out["is_only_declared"] = False
    return out


def data_stats(ds: Any) -> dict[str, int]:
    """Counts over a version's fragments: rows (live, stored, deleted), fragments, data and
    deletion files, and the data files' bytes."""
    frags = ds.manifest.pb.fragments
    deleted = sum(
        int(f.deletion_file.num_deleted_rows) for f in frags if f.HasField("deletion_file")
    )
    physical = sum(int(f.physical_rows) for f in frags)
    return {
        "total_rows": physical - deleted,
        "total_data_file_rows": physical,
        "total_deletion_file_rows": deleted,
        "total_fragments": len(frags),
        "total_data_files": sum(len(f.files) for f in frags),
        "total_deletion_files": sum(1 for f in frags if f.HasField("deletion_file")),
        "total_files_size": sum(int(df.file_size_bytes) for f in frags for df in f.files),
    }


def table_exists(ctx: Context, call: Call) -> Empty:
    name, kind = table_of(ctx, call)
    version = call.int("version")
    if version is not None:
        if kind != TABLE:
            raise ne.NamespaceError(ne.TABLE_NOT_FOUND, f"table id {call.id_text!r}")
        ctx.handles.open_version(name, version)
    return EMPTY


def drop_table(ctx: Context, call: Call) -> dict[str, Any]:
    name, kind = table_of(ctx, call, WRITE)
    location = ctx.locations.location(name)
    ctx.handles.forget(name)  # no cached handle outlives the files
    ctx.tree.remove_table_dir(name)
    return {"id": call.parts, "location": location}


def register_table(ctx: Context, call: Call) -> dict[str, Any]:
    """Register a deregistered table's location (moved back under the name). A table at
    its own location is registered already: TableAlreadyExists, unless mode Overwrite,
    which records the properties."""
    name = table_name(call.parts)
    location = call.str("location", required=True)
    assert location is not None
    properties = check_properties(call.object("properties"), call.op)
    ctx.authorize(call.identity, name, WRITE)
    mode = _mode(call, ("create", "overwrite"), "create")
    ctx.tree.require_namespace(call.parts[:-1])
    kind = ctx.tree.table_kind(call.parts)
    if ctx.tree.parked(location):
        if kind is not None:
            raise ne.NamespaceError(ne.TABLE_ALREADY_EXISTS, call.id_text)
        ctx.handles.uri(name)  # a directory leading out of the root is refused before moving
        ctx.handles.forget(name)
        ctx.tree.unpark(location, name)
    elif location.strip("/").startswith(f"{PARKED}/"):
        raise ne.invalid(f"{call.op}: no deregistered table at {location!r}")
    else:
        if location.startswith("/") or "://" in location:
            raise ne.invalid(
                f"{call.op}: the location must be a path relative to the root: the table's "
                f"own ({name}{SUFFIX}) or one DeregisterTable answered"
            )
        _own_location(ctx, call, name)
        if kind != TABLE:
            raise ne.invalid(f"{call.op}: no Lance dataset at {name}{SUFFIX} to register")
        if mode == "create":
            raise ne.NamespaceError(ne.TABLE_ALREADY_EXISTS, call.id_text)
    if properties:
        ctx.tree.declare(name, properties)
    out: dict[str, Any] = {"location": ctx.locations.location(name)}
    if properties:
        out["properties"] = properties
    return out


def deregister_table(ctx: Context, call: Call) -> dict[str, Any]:
    """Take a table out of the catalog, keeping its data: its directory moves where no
    name reaches (`tree.PARKED`); the answer's location is where it went, relative to the
    root, for RegisterTable. A declared-only table's reservation is removed."""
    name, kind = table_of(ctx, call, WRITE)
    ctx.handles.forget(name)
    if kind != TABLE:
        location = ctx.locations.location(name)
        ctx.tree.remove_table_dir(name)
        return {"id": call.parts, "location": location}
    relative = ctx.tree.park(name)
    return {"id": call.parts, "location": relative}


def rename_table(ctx: Context, call: Call) -> dict[str, Any]:
    name, _ = table_of(ctx, call, WRITE)
    new_table = call.str("new_table_name", required=True)
    new_ns = call.strings("new_namespace_id")
    target = [*(call.parts[:-1] if new_ns is None else [p for p in new_ns if p]), new_table]
    new_name = table_name(target)
    ctx.authorize(call.identity, new_name, WRITE)
    ctx.handles.uri(new_name)
    ctx.tree.require_namespace(target[:-1])
    if ctx.tree.table_kind(target) is not None or ctx.tree.namespace_exists(target):
        raise ne.NamespaceError(ne.TABLE_ALREADY_EXISTS, joined(target, call.delimiter))
    ctx.handles.forget(name)  # no cached handle outlives the files at either name
    ctx.handles.forget(new_name)
    ctx.tree.move_table(name, new_name)
    return {}
