"""A table's branches through the namespace: ListTableBranches, CreateTableBranch and
DeleteTableBranch, run by the Flight actions of the same names (so rights, errors and the
layout are the same as over Flight). The data routes (query, count, insert, merge insert,
update, delete) act on a branch named by the request's `branch`."""

from __future__ import annotations

import json
from typing import Any

from quiver.flight_server.names import on_branch
from quiver.flight_server.namespace import errors as ne
from quiver.flight_server.namespace.calls import Call, paged
from quiver.flight_server.namespace.catalog_routes import existing_table
from quiver.flight_server.namespace.context import Context
from quiver.format.table.versions import list_manifests
from quiver.wire.requests import WRITE


def _action(ctx: Context, call: Call, name: str, action: str, body: dict[str, Any]) -> dict:
    try:
        return ctx.service.action(action, json.dumps(body).encode(), call.identity)
    except Exception as e:  # noqa: BLE001 - the route's object decides the code
        raise ne.translate(
            e,
            ctx.service.scrubber_for(name),
            not_found=ne.TABLE_BRANCH_NOT_FOUND,
            exists=ne.TABLE_BRANCH_ALREADY_EXISTS,
        ) from None


def list_branches(ctx: Context, call: Call) -> dict[str, Any]:
    """{branches: {name: {parentBranch?, parentVersion, createAt, manifestSize,
    metadata}}}, by name, paged."""
    name = existing_table(ctx, call)
    listed = {
        b["name"]: b
        for b in _action(ctx, call, name, "list_branches", {"dataset": name})["branches"]
    }
    page = paged("branches", sorted(listed), call)
    out: dict[str, Any] = {}
    for branch in page["branches"]:
        b = listed[branch]
        entries = list_manifests(ctx.handles.store(on_branch(name, branch)))
        contents: dict[str, Any] = {
            "parentVersion": b["parent_version"],
            "createAt": b["create_at"],
            "manifestSize": entries[max(entries)].size if entries else 0,
            "metadata": b["metadata"] or {},
        }
        if b["parent_branch"]:
            contents["parentBranch"] = b["parent_branch"]
        out[branch] = contents
    page["branches"] = out
    return page


def create_branch(ctx: Context, call: Call) -> dict[str, Any]:
    """A branch `name` from `from_branch` (default the main line) at `from_version`
    (default its latest)."""
    name = existing_table(ctx, call, WRITE)
    body: dict[str, Any] = {"dataset": name, "name": call.str("name", required=True)}
    source = call.str("from_branch")
    if source and source != "main":
        body["branch"] = source
    version = call.int("from_version", minimum=1)
    if version is not None:
        body["version"] = version
    _action(ctx, call, name, "create_branch", body)
    return {}


def delete_branch(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call, WRITE)
    body = {"dataset": name, "name": call.str("name", required=True)}
    _action(ctx, call, name, "delete_branch", body)
    return {}
