"""Versions, tags, indices, statistics and restore of one table.

**Managed versioning** (``--managed-versioning``): DescribeTable and DeclareTable
answer ``managed_versioning: true``, and pylance then commits through Quiver: it writes
each new manifest to a staging name (``_versions/{N'}.manifest-{uuid}``) and calls
CreateTableVersion, which publishes it under its final name (``_versions/{N'}.manifest``)
with the same atomic create-if-absent Quiver's own commits use (on storage without one,
this server's lock orders the commits that come through it), then removes the staging
file. Two writers of one version: the second gets ConcurrentModification (409, code 14) and
pylance retries on the newer version. Manifest paths on the wire are relative to the object
store's root (the bucket on S3, ``/`` locally), as pylance sends and reads them.
"""

from __future__ import annotations

import json
import re
import statistics
import threading
from typing import Any

from quiver.flight_server.errors import QuiverError
from quiver.flight_server.names import on_branch
from quiver.flight_server.namespace import errors as ne
from quiver.flight_server.namespace.calls import Call
from quiver.flight_server.namespace.catalog_routes import (
    branch_field,
    data_stats,
    existing_table,
    table_of,
)
from quiver.flight_server.namespace.context import Context
from quiver.format.errors import TagNotFoundError, UnsupportedFeatureError
from quiver.format.table.versions import TREE_DIR, VERSIONS_DIR, list_manifests, list_tags
from quiver.wire.requests import WRITE

U64_MAX = 2**64 - 1
_STAGED = re.compile(r"(\d{20})\.manifest-[A-Za-z0-9-]{1,64}")
SMALL_FRAGMENT_ROWS = 1024 * 1024
_PUBLISH_LOCK = threading.Lock()


def _store_prefix(ctx: Context, name: str) -> str:
    """The dataset directory's path from the object store's root (a branch's: its tree)."""
    path = ctx.tree.table_dir(name)
    branch = getattr(name, "branch", None)
    if branch:
        path = f"{path}/{TREE_DIR}/{branch}"
    return path.lstrip("/") if ctx.tree.local else path.split("/", 1)[1]


def _entry_json(ctx: Context, name: str, entry: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "version": entry.version,
        "manifest_path": f"{_store_prefix(ctx, name)}/{entry.path}",
        "manifest_size": entry.size,
    }
    if entry.mtime is not None:
        out["timestamp_millis"] = int(entry.mtime * 1000)
    return out


# -- versions -----------------------------------------------------------------------------
def list_versions(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call, branched=True)
    entries = sorted(
        list_manifests(ctx.handles.store(name)).values(),
        key=lambda e: e.version,
        reverse=call.bool("descending"),
    )
    token, limit = call.page()
    if token:
        try:
            after = int(token)
        except ValueError:
            raise ne.invalid(f"{call.op}: 'page_token' is not one this server gave") from None
        entries = [
            e
            for e in entries
            if (e.version < after if call.bool("descending") else e.version > after)
        ]
    out: dict[str, Any] = {}
    if limit and len(entries) > limit:
        entries = entries[:limit]
        out["page_token"] = str(entries[-1].version)
    out["versions"] = [_entry_json(ctx, name, e) for e in entries]
    return out


def describe_version(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call, branched=True)
    entries = list_manifests(ctx.handles.store(name))
    version = call.int("version")
    if version is None:
        if not entries:
            raise ne.NamespaceError(ne.TABLE_NOT_FOUND, f"table {call.id_text!r} has no versions")
        version = max(entries)
    if version not in entries:
        raise ne.NamespaceError(
            ne.VERSION_NOT_FOUND, f"version {version} of table {call.id_text!r}"
        )
    return {"version": _entry_json(ctx, name, entries[version])}


def create_version(ctx: Context, call: Call) -> dict[str, Any]:
    name, _ = table_of(ctx, call, WRITE)
    branch = call.str("branch")
    if branch and branch != "main":
        # a branch's versions, its first (pylance's create_branch publishes it here) too
        try:
            name = on_branch(name, branch)
        except QuiverError as e:
            raise ne.invalid(f"{call.op}: {e}") from None
    version = call.int("version", required=True, minimum=1)
    staged = call.str("manifest_path", required=True)
    assert version is not None and staged is not None
    scheme = (call.str("naming_scheme") or "V2").upper()
    if scheme != "V2":
        raise ne.invalid(f"{call.op}: only the V2 manifest naming scheme is accepted")
    prefix = f"{_store_prefix(ctx, name)}/{VERSIONS_DIR}/"
    relative = staged.lstrip("/")
    if not relative.startswith(prefix):
        raise ne.invalid(f"{call.op}: 'manifest_path' is not in table {call.id_text!r}'s versions")
    file = relative[len(prefix) :]
    match = _STAGED.fullmatch(file)
    if match is None or int(match.group(1)) != U64_MAX - version:
        raise ne.invalid(
            f"{call.op}: 'manifest_path' must be the staged manifest of version {version} "
            "(_versions/{2^64-1-version}.manifest-{id})"
        )
    store = ctx.handles.store(name)
    final = f"{VERSIONS_DIR}/{match.group(1)}.manifest"
    try:
        data = store.read_all(f"{VERSIONS_DIR}/{file}")
    except FileNotFoundError:
        raise ne.invalid(
            f"{call.op}: the staged manifest of version {version} is not there"
        ) from None
    expected = call.int("manifest_size")
    if expected is not None and expected != len(data):
        raise ne.invalid(f"{call.op}: the staged manifest holds {len(data)} bytes, not {expected}")
    taken = ne.NamespaceError(
        ne.CONCURRENT_MODIFICATION,
        f"version {version} of table {call.id_text!r} was committed by another writer",
    )
    with _PUBLISH_LOCK:
        try:
            store.put_if_absent(final, data)
        except FileExistsError:
            raise taken from None
        except UnsupportedFeatureError:
            # storage without an atomic create: this server's lock orders the commits that
            # come through it (the reason a client asks for managed versioning)
            if store.exists(final):
                raise taken from None
            store.put(final, data)
    store.delete(f"{VERSIONS_DIR}/{file}")
    ctx.handles.forget(name)
    return {
        "version": {
            "version": version,
            "manifest_path": f"{prefix}{match.group(1)}.manifest",
            "manifest_size": len(data),
        }
    }


# -- tags ---------------------------------------------------------------------------------
def list_table_tags(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call)
    tags = list_tags(ctx.handles.store(name))
    names = sorted(tags)
    token, limit = call.page()
    if token:
        names = [n for n in names if n > token]
    out: dict[str, Any] = {}
    if limit and len(names) > limit:
        names = names[:limit]
        out["page_token"] = names[-1]
    out["tags"] = {
        n: {
            "version": tags[n].version,
            **({"manifestSize": tags[n].manifest_size} if tags[n].manifest_size else {}),
            **({"branch": tags[n].branch} if tags[n].branch else {}),
        }
        for n in names
    }
    return out


def _tag(call: Call) -> str:
    tag = call.str("tag", required=True)
    assert tag is not None
    return tag


def tag_version(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call)
    tag = _tag(call)
    try:
        found = list_tags(ctx.handles.store(name))[tag]
    except KeyError:
        found = None
    if found is not None:
        return {"version": found.version, **({"branch": found.branch} if found.branch else {})}
    try:
        return {"version": ctx.handles.open_latest(name).tags.get_version(tag)}
    except TagNotFoundError:
        raise ne.NamespaceError(
            ne.TAG_NOT_FOUND, f"tag {tag!r} of table {call.id_text!r}"
        ) from None


def _action(ctx: Context, call: Call, action: str, body: dict[str, Any], **codes: int) -> dict:
    try:
        return ctx.service.action(action, json.dumps(body).encode(), call.identity)
    except Exception as e:  # noqa: BLE001 - the route's object decides the code
        raise ne.translate(e, ctx.service.scrubber_for(body["dataset"]), **codes) from None


def create_tag(ctx: Context, call: Call) -> dict[str, Any]:
    """A tag of a version of the main line or of the request's `branch`."""
    name = existing_table(ctx, call, WRITE, branched=True)
    body = {
        "dataset": name,
        "tag": _tag(call),
        "version": call.int("version", required=True),
        **branch_field(name),
    }
    _action(
        ctx, call, "create_tag", body, exists=ne.TAG_ALREADY_EXISTS, not_found=ne.VERSION_NOT_FOUND
    )
    return {}


def delete_tag(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call, WRITE)
    _action(
        ctx, call, "delete_tag", {"dataset": name, "tag": _tag(call)}, not_found=ne.TAG_NOT_FOUND
    )
    return {}


def update_tag(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call, WRITE)
    tag, version = _tag(call), call.int("version", required=True)
    assert version is not None
    ds = ctx.handles.open_latest(name)
    try:
        ds.tags.update(tag, version)
    except TagNotFoundError:
        raise ne.NamespaceError(
            ne.TAG_NOT_FOUND, f"tag {tag!r} of table {call.id_text!r}"
        ) from None
    return {}


# -- indices ------------------------------------------------------------------------------
_FTS_OPTIONS = (
    "with_position",
    "base_tokenizer",
    "language",
    "max_token_length",
    "lower_case",
    "stem",
    "remove_stop_words",
    "ascii_folding",
)
_INDEX_OPTIONS = {
    "distance_type": "metric",
    "num_partitions": "num_partitions",
    "num_sub_vectors": "num_sub_vectors",
    "num_bits": "num_bits",
    "sample_rate": "sample_rate",
    "max_iterations": "max_iters",
    "max_iters": "max_iters",
    "target_partition_size": "target_partition_size",
    "m": "m",
    "ef_construction": "ef_construction",
}


def create_index(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call, WRITE, branched=True)
    column = call.str("column", required=True)
    index_type = (call.str("index_type", required=True) or "").upper()
    body: dict[str, Any] = {
        "dataset": name,
        "column": column,
        "index_type": index_type,
        **branch_field(name),
    }
    if index_type in ("FTS", "INVERTED"):
        body["params"] = {k: call.body[k] for k in _FTS_OPTIONS if call.body.get(k) is not None}
    if call.str("name"):
        body["name"] = call.str("name")
    for key, option in _INDEX_OPTIONS.items():
        if call.has(key):
            body[option] = call.str(key).lower() if key == "distance_type" else call.body.get(key)
    if call.bool("replace", True):
        body["replace"] = True
    _action(ctx, call, "create_index", body, exists=ne.INDEX_ALREADY_EXISTS)
    return {}


def list_indices(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call, branched=True)
    ds = ctx.handles.open_ref(name, call.int("version"), None, None)
    out = []
    for d in ds.describe_indices():
        stats = ds.index_statistics(d.name)
        out.append(
            {
                "index_name": d.name,
                "columns": d.field_names,
                "status": "SUCCEEDED",
                "index_type": d.index_type,
                "type_url": d.type_url,
                "num_indexed_rows": int(stats.get("num_indexed_rows", d.num_rows_indexed)),
                "num_unindexed_rows": int(stats.get("num_unindexed_rows", 0)),
                "size_bytes": d.total_size_bytes,
                "num_segments": d.num_segments,
            }
        )
    return {"indexes": out}


def index_stats(ctx: Context, call: Call) -> dict[str, Any]:
    index_name = call.path["index_name"]
    name = existing_table(ctx, call, branched=True)
    ds = ctx.handles.open_ref(name, call.int("version"), None, None)
    try:
        stats = ds.index_statistics(index_name)
    except KeyError:
        raise ne.NamespaceError(
            ne.INDEX_NOT_FOUND, f"index {index_name!r} of {call.id_text!r}"
        ) from None
    out = {
        "index_type": stats.get("index_type"),
        "num_indexed_rows": stats.get("num_indexed_rows"),
        "num_unindexed_rows": stats.get("num_unindexed_rows"),
        "num_indices": stats.get("num_indices"),
    }
    if stats.get("distance_type"):
        out["distance_type"] = stats["distance_type"]
    return {k: v for k, v in out.items() if v is not None}


def drop_index(ctx: Context, call: Call) -> dict[str, Any]:
    index_name = call.path["index_name"]
    name = existing_table(ctx, call, WRITE, branched=True)
    body = {"dataset": name, "name": index_name, **branch_field(name)}
    _action(ctx, call, "drop_index", body, not_found=ne.INDEX_NOT_FOUND)
    return {}


# -- statistics and restore ---------------------------------------------------------------
def table_stats(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call, branched=True)
    ds = ctx.handles.open_current(name)
    frags = ds.manifest.pb.fragments
    # as pylance counts them: rows stored in each fragment, deleted ones included
    lengths = sorted(int(f.physical_rows) for f in frags)
    out: dict[str, Any] = {
        "total_bytes": data_stats(ds)["total_files_size"],
        "num_rows": sum(lengths),
        "num_indices": len(ds.describe_indices()),
        "fragment_stats": {
            "num_fragments": len(frags),
            "num_small_fragments": sum(1 for n in lengths if n < SMALL_FRAGMENT_ROWS),
        },
    }
    if lengths:
        out["fragment_stats"]["lengths"] = {
            "min": lengths[0],
            "max": lengths[-1],
            "mean": int(statistics.fmean(lengths)),
            **{f"p{q}": _percentile(lengths, q) for q in (25, 50, 75, 99)},
        }
    return out


def _percentile(values: list[int], q: int) -> int:
    return values[min(len(values) - 1, (len(values) - 1) * q // 100)]


def restore_table(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call, WRITE, branched=True)
    version = call.int("version", required=True)
    body = {"dataset": name, "version": version, **branch_field(name)}
    _action(ctx, call, "restore", body, not_found=ne.VERSION_NOT_FOUND)
    return {}
