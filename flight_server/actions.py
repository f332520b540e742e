"""DoAction: every action in one table (`ACTION_TABLE`): the wire contract's shape of each
(`wire.requests.ACTION_SHAPES`: summary for ListActions, body keys, right) with its handler.

A handler gets the service (`ActionContext`: dataset handles, writes, serving state) and
the parsed body (`Fields`, which refuses keys the action does not take) and returns a
JSON-able result.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from fsspec.implementations.local import LocalFileSystem

from quiver.flight_server import blob_reads, changes, metrics
from quiver.flight_server.budget import MemoryBudget
from quiver.flight_server.errors import InvalidArgument, NotFound, Unavailable, Unimplemented
from quiver.flight_server.handles import DatasetHandles, live_rows
from quiver.flight_server.memory import release_free_memory
from quiver.flight_server.names import on_branch
from quiver.flight_server.protocol import (
    Fields,
    idempotency_key,
    job_field,
    merge_request,
    parse_object,
    version_ref,
)
from quiver.flight_server.writes import Writes
from quiver.format.dataset import dataset
from quiver.format.dataset.index_memory import build_memory
from quiver.format.dataset.update import delete as delete_rows
from quiver.format.dataset.update import update as update_rows
from quiver.format.errors import DatasetNotFoundError
from quiver.format.index.vector.build import VECTOR_INDEX_TYPES
from quiver.format.io.store import filesystem
from quiver.format.table import versions as _versions
from quiver.format.table.schema import RESERVED_COLUMNS
from quiver.format.table.transaction import IDEMPOTENCY_KEY
from quiver.wire.requests import ACTION_SHAPES, BACKFILLS, MODES, VECTOR_OPTIONS

MAX_AGE_SECONDS = 3_155_760_000  # 100 years: cleanup's older_than_seconds


class ActionContext(Protocol):
    """What action handlers use of the service."""

    handles: DatasetHandles
    writes: Writes
    serving: bool
    budget: MemoryBudget | None


Handler = Callable[[ActionContext, Fields], dict[str, Any]]


@dataclass(frozen=True)
class Action:
    """One DoAction: its name, what ListActions says of it, the right it needs on its
    dataset (None: no dataset involved), the body keys it accepts and its handler."""

    name: str
    summary: str
    right: str | None
    keys: tuple[str, ...]
    run: Handler


# ------------------------------------------------------------------------------- handlers
def _healthcheck(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    if not ctx.serving:
        raise Unavailable("the server is draining")
    h = ctx.handles
    try:
        fs, path = filesystem(h.root, h.storage_options)
        if isinstance(fs, LocalFileSystem):
            if not fs.isdir(path):
                raise FileNotFoundError
        else:
            with contextlib.suppress(FileNotFoundError):
                fs.ls(path)
    except Exception:  # noqa: BLE001 - any failure means storage is unreachable
        raise Unavailable("the storage root is not reachable") from None
    return {"status": "serving"}


def _describe(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    version, tag, as_of = version_ref(f)
    ds = ctx.handles.open_ref(name, version, tag, as_of)
    frags = ds.manifest.pb.fragments
    segments = ds.list_indices()
    return {
        "dataset": name,
        "branch": ds.core.branch,
        "version": ds.version,
        "latest_version": ds.latest_version,
        "timestamp": _as_of_time(_versions.shown_time(ds.manifest.pb.timestamp.ToNanoseconds())),
        "data_storage_version": ds.data_storage_version,
        "rows": sum(live_rows(fr) for fr in frags),
        "fragments": len(frags),
        "schema": [
            {"name": fld.name, "type": str(fld.type), "nullable": fld.nullable} for fld in ds.schema
        ],
        "tags": {t: info["version"] for t, info in ds.tags.list().items()},
        "indices": [
            {
                "name": i["name"],
                "type": i["type"],
                "columns": i["fields"],
                "fragments": sorted(i["fragment_ids"]),
                "uuid": i["uuid"],
            }
            for i in segments
        ],
        "index_coverage": _coverage(segments, frags),
    }


def _coverage(segments: list[dict[str, Any]], frags: Any) -> dict[str, dict[str, Any]]:
    """Per index name: its segments, and the fragments (and live rows) none of them covers,
    which searches and filters read unindexed until `optimize_indices`."""
    live = {int(fr.id): live_rows(fr) for fr in frags}
    out: dict[str, dict[str, Any]] = {}
    for seg in segments:
        entry = out.setdefault(seg["name"], {"segments": 0, "covered": set()})
        entry["segments"] += 1
        entry["covered"] |= set(seg["fragment_ids"])
    for entry in out.values():
        missing = sorted(set(live) - entry.pop("covered"))
        entry["unindexed_fragments"] = missing
        entry["unindexed_rows"] = sum(live[f] for f in missing)
    return out


def _list_versions(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    ds = ctx.handles.open_latest(f.dataset())
    return {
        "versions": [
            {
                "version": v["version"],
                "timestamp": _as_of_time(v["timestamp"]),
                "rows": int(v["metadata"]["total_rows"]),
                "fragments": int(v["metadata"]["total_fragments"]),
            }
            for v in ds.versions()
        ]
    }


def _list_tags(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    ds = ctx.handles.open_latest(f.dataset())
    return {
        "tags": {
            t: {
                "branch": info["branch"],
                "version": info["version"],
                "created_at": _iso(info["created_at"]),
                "updated_at": _iso(info["updated_at"]),
            }
            for t, info in ds.tags.list().items()
        }
    }


def _create_tag(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    tag = f.str("tag", required=True)
    ds = ctx.handles.open_latest(name)
    version = f.int("version", minimum=1) or ds.version
    ds.tags.create(tag, version)
    return {"tag": tag, "version": version}


def _delete_tag(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    tag = f.str("tag", required=True)
    ctx.handles.open_latest(name).tags.delete(tag)
    return {"tag": tag, "deleted": True}


def _create_branch(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    source = f.dataset()  # on the branch the new one starts from
    new = f.str("name", required=True)
    version, tag = f.int("version", minimum=1), f.str("tag")
    if version is not None and tag is not None:
        raise InvalidArgument("create_branch body: give at most one of 'version' and 'tag'")
    created = ctx.handles.open_latest(source).create_branch(new, tag or version)
    return {"name": new, "version": created.version}


def _list_branches(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    ds = ctx.handles.open_latest(f.dataset())
    return {
        "branches": [
            {
                "name": name,
                "parent_branch": b["parent_branch"],
                "parent_version": b["parent_version"],
                "create_at": b["create_at"],
                "metadata": b["metadata"],
            }
            for name, b in ds.branches.list_ordered("asc")
        ]
    }


def _delete_branch(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    branch = f.str("name", required=True)
    ctx.handles.open_latest(name).branches.delete(branch)
    ctx.handles.forget(on_branch(name, branch))
    return {"name": branch, "deleted": True}


def _delete(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    predicate = f.str("predicate", required=True)
    key = idempotency_key(f)
    done = changes.repeated(ctx.handles, name, key)  # the first call's counts are not kept
    if done is not None:
        return done
    ds = ctx.handles.open_latest(name)
    core, stats = delete_rows(ds.core, predicate, properties=_keyed(key))
    metrics.committed("delete")
    return {"version": core.version, "deleted_rows": stats["num_deleted_rows"]}


def _keyed(key: str | None) -> dict[str, str] | None:
    return {IDEMPOTENCY_KEY: key} if key is not None else None


def _update(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    updates = f.obj("updates", required=True)
    if not updates or not all(
        isinstance(k, str) and k and isinstance(v, str) and v.strip() for k, v in updates.items()
    ):
        raise InvalidArgument("update body: 'updates' must map column names to SQL expressions")
    where = f.str("where")
    key = idempotency_key(f)
    done = changes.repeated(ctx.handles, name, key)  # the first call's counts are not kept
    if done is not None:
        return done
    ds = ctx.handles.open_latest(name)
    core, stats = update_rows(ds.core, dict(updates), where, properties=_keyed(key))
    metrics.committed("update")
    return {"version": core.version, "updated_rows": stats["num_rows_updated"]}


def _restore(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    if isinstance(f.doc.get("version"), str) and "tag" not in f.doc:
        f.doc["tag"] = f.doc.pop("version")  # {"version": "q3"} names a tag
    version, tag, as_of = version_ref(f)
    if as_of is not None or (version is None and tag is None):
        raise InvalidArgument("restore body: give 'version' or 'tag'")
    h = ctx.handles
    try:
        # a fresh handle, never the cached one: restoring changes it
        ds = dataset(
            h.uri(name),
            version=version if version is not None else tag,
            storage_options=h.storage_options,
        )
    except DatasetNotFoundError:
        raise NotFound(f"dataset {name!r} does not exist") from None
    ds.restore()
    metrics.committed("restore")
    return {"version": ds.version, "restored": version if version is not None else tag}


def _add_columns(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    columns = f.obj("columns", required=True)
    if not columns or not all(
        isinstance(k, str) and k and isinstance(v, str) and v.strip() for k, v in columns.items()
    ):
        raise InvalidArgument(
            "add_columns body: 'columns' must map new column names to SQL expressions"
        )
    _refuse_reserved("add_columns body", columns)
    ds = ctx.handles.open_latest(name)
    ds.add_columns(dict(columns))
    metrics.committed("add_columns")
    return {"version": ds.version}


def _drop_columns(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    columns = f.str_list("columns", required=True, nonempty=True)
    ds = ctx.handles.open_latest(name)
    ds.drop_columns(columns)
    metrics.committed("drop_columns")
    return {"version": ds.version}


def _alter_columns(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    alterations = f.list("alterations", required=True)
    if not alterations:
        raise InvalidArgument("alter_columns body: 'alterations' is empty")
    parsed: list[dict[str, Any]] = []
    for i, alt in enumerate(alterations):
        if not isinstance(alt, dict):
            raise InvalidArgument("alter_columns body: each alteration is a JSON object")
        a = Fields(alt, f"alteration {i}", ("path", "name", "nullable", "data_type"))
        out: dict[str, Any] = {"path": a.str("path", required=True)}
        if any(p["path"] == out["path"] for p in parsed):
            raise InvalidArgument(
                f"alteration {i}: column {out['path'][:80]!r} is altered twice; "
                "give one alteration per column"
            )
        if a.has("name"):
            out["name"] = a.str("name")
            _refuse_reserved(f"alteration {i}", [out["name"]])
        if a.has("nullable"):
            out["nullable"] = a.bool("nullable")
        if a.has("data_type"):
            out["data_type"] = _arrow_type(a.str("data_type"))
        if len(out) == 1:
            raise InvalidArgument(
                f"alteration {i}: give at least one of 'name', 'nullable', 'data_type'"
            )
        parsed.append(out)
    ds = ctx.handles.open_latest(name)
    ds.alter_columns(*parsed)
    metrics.committed("alter_columns")
    return {"version": ds.version}


def _compact(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    options = {
        "target_rows_per_fragment": f.int("target_rows_per_fragment", minimum=1),
        "max_rows_per_group": f.int("max_rows_per_group", minimum=1),
        "materialize_deletions": f.bool("materialize_deletions"),
        "materialize_deletions_threshold": f.number("materialize_deletions_threshold", minimum=0),
        "defer_index_remap": f.bool("defer_index_remap"),
    }
    ds = ctx.handles.open_latest(name)
    done = ds.optimize.compact_files(**{k: v for k, v in options.items() if v is not None})
    if done.fragments_removed:
        metrics.committed("compact")
    return {
        "version": ds.version,
        "fragments_removed": done.fragments_removed,
        "fragments_added": done.fragments_added,
        "files_removed": done.files_removed,
        "files_added": done.files_added,
    }


# Told of each stage of an index build when the client asks for progress: set by the server
# around the action (`server.progress_stream`), None otherwise.
PROGRESS: ContextVar[Callable[[dict[str, Any]], None] | None] = ContextVar(
    "quiver_action_progress", default=None
)


def _matrix(f: Fields, key: str, ndim: int) -> np.ndarray | None:
    """A JSON array of arrays of numbers (`ndim` deep) as a float32 array."""
    value = f.list(key)
    if value is None:
        return None
    try:
        out = np.array(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{f.what}: {key!r} must be arrays of numbers") from None
    if out.ndim != ndim:
        raise InvalidArgument(f"{f.what}: {key!r} must be {ndim} arrays deep, not {out.ndim}")
    return out


# list_indices' type names -> create_index's
_KINDS = {
    "BTree": "BTREE",
    "Bitmap": "BITMAP",
    "LabelList": "LABEL_LIST",
    "ZoneMap": "ZONEMAP",
    "BloomFilter": "BLOOMFILTER",
    "RTree": "RTREE",
}


def _held(ctx: ActionContext, estimate: int, label: str) -> Any:
    """A lease of `estimate` bytes of the server's memory budget for a build (waiting its
    turn beside DoGet streams), or nothing where the service has no budget."""
    budget = getattr(ctx, "budget", None)
    return budget.admit(estimate, label=label) if budget is not None else contextlib.nullcontext()


def _create_index(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    column = f.str("column", required=True)
    index_type = f.str("index_type", required=True)
    index_name = f.str("name")
    train = f.bool("train", default=True)
    f.bool("progress")
    ds = ctx.handles.open_latest(name)
    before = {i["uuid"] for i in ds.list_indices()}
    if index_type.upper() in VECTOR_INDEX_TYPES or index_type.upper().startswith("IVF_"):
        options = {
            "metric": f.str("metric") or "L2",
            "replace": f.bool("replace", default=False),
            "num_partitions": f.int("num_partitions", minimum=1),
            "num_sub_vectors": f.int("num_sub_vectors", minimum=1),
            "target_partition_size": f.int("target_partition_size", minimum=1),
            "ivf_centroids": _matrix(f, "ivf_centroids", 2),
            "pq_codebook": _matrix(f, "pq_codebook", 3),
        }
        extra = {
            "num_bits": f.int("num_bits", minimum=1),
            "sample_rate": f.int("sample_rate", minimum=1),
            "max_iters": f.int("max_iters", minimum=1),
            "m": f.int("m", minimum=1),
            "ef_construction": f.int("ef_construction", minimum=1),
            "max_level": f.int("max_level", minimum=1),
            "rabitq_model": f.str("rabitq_model"),
        }
        extra = {k: v for k, v in extra.items() if v is not None}
        estimate = build_memory(ds.core, column, index_type, **options, **extra)
        with _held(ctx, estimate, f"{name}: index build"):
            ds.create_index(
                column,
                index_type,
                index_name,
                **options,
                **extra,
                train=train,
                progress=PROGRESS.get(),
            )
    else:
        for key in VECTOR_OPTIONS:
            if f.has(key):
                raise InvalidArgument(f"{f.what}: {key!r} is an option of vector indices")
        replace = f.bool("replace", default=True)
        params = f.obj("params") or {}
        with _held(ctx, build_memory(ds.core, column, index_type), f"{name}: index build"):
            ds.create_scalar_index(
                column, index_type, name=index_name, replace=replace, train=train, **params
            )
    metrics.committed("create_index")
    [built] = [i["name"] for i in ds.list_indices() if i["uuid"] not in before]
    return {"version": ds.version, "name": built}


def _optimize_indices(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    merge = f.int("num_indices_to_merge", minimum=0)
    names = f.str_list("index_names")
    retrain = f.bool("retrain", default=False)
    f.bool("progress")
    ds = ctx.handles.open_latest(name)
    before = ds.version
    # segments are built one after another: the biggest build is what is held at once
    estimate = max(
        (
            build_memory(ds.core, i["fields"][0], _KINDS.get(i["type"], i["type"]))
            for i in ds.list_indices()
            if i["fields"] and (names is None or i["name"] in names)
        ),
        default=1,
    )
    with _held(ctx, estimate, f"{name}: index update"):
        ds.optimize.optimize_indices(
            num_indices_to_merge=merge, index_names=names, retrain=retrain, progress=PROGRESS.get()
        )
    if ds.version != before:
        metrics.committed("optimize_indices")
    return {"version": ds.version, "optimized": ds.version != before}


def _drop_index(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    index_name = f.str("name", required=True)
    ds = ctx.handles.open_latest(name)
    ds.drop_index(index_name)
    metrics.committed("drop_index")
    return {"version": ds.version}


def _cleanup(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    older = f.number("older_than_seconds", minimum=0, maximum=MAX_AGE_SECONDS)
    retain = f.int("retain_versions", minimum=1)
    ds = ctx.handles.open_latest(name)
    stats = ds.cleanup_old_versions(
        older_than=dt.timedelta(seconds=older) if older is not None else None,
        retain_versions=retain,
        delete_unverified=f.bool("delete_unverified", default=False),
        error_if_tagged_old_versions=f.bool("error_if_tagged_old_versions", default=True),
    )
    ctx.handles.forget(name)
    return {
        "bytes_removed": stats.bytes_removed,
        "old_versions": stats.old_versions,
        "data_files_removed": stats.data_files_removed,
        "deletion_files_removed": stats.deletion_files_removed,
        "transaction_files_removed": stats.transaction_files_removed,
    }


def _drop_dataset(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    store = ctx.handles.store(name)
    if not _versions.list_manifests(store):
        raise NotFound(f"dataset {name!r} does not exist")
    ctx.handles.forget(name)
    store.fs.rm(store.root, recursive=True)
    return {"dataset": name, "dropped": True}


def _commit(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    op = f.str("operation", required=True)
    if op not in MODES:
        raise InvalidArgument("commit body: 'operation' must be append, overwrite or create")
    read_version = f.int("read_version", minimum=0)
    key = f.str("idempotency_key")
    job = job_field(f)
    staged = ctx.writes.staged(name, f.list("fragments", required=True) or [])
    return ctx.writes.commit_staged(
        name, op, staged, read_version=read_version, idempotency_key=key, job=job
    )


def _apply_staged(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    job = job_field(f)
    key = f.str("idempotency_key")
    merge = f.doc.get("merge")
    backfill = f.str("backfill")
    if backfill is not None and backfill not in BACKFILLS:
        raise InvalidArgument(
            f"apply_staged body: 'backfill' must be one of {', '.join(BACKFILLS)}"
        )
    staged = ctx.writes.staged(name, f.list("fragments", required=True) or [])
    return changes.apply_staged(
        ctx.writes,
        name,
        staged,
        merge=merge_request(merge, "apply_staged body: 'merge'") if merge is not None else None,
        backfill=backfill,
        job=job,
        idempotency_key=key,
    )


def _abort(ctx: ActionContext, f: Fields) -> dict[str, Any]:
    name = f.dataset()
    job = job_field(f)
    staged = ctx.writes.staged(name, f.list("fragments", required=job is None) or [])
    return ctx.writes.abort(name, staged, job)


def _released(handler: Handler) -> Handler:
    """`handler`, then the memory it freed given back to the system: compactions, cleanups
    and index builds free hundreds of MB that glibc would keep while streams run beside."""

    def run(ctx: ActionContext, f: Fields) -> dict[str, Any]:
        try:
            return handler(ctx, f)
        finally:
            release_free_memory()

    return run


# ------------------------------------------------------------------------------- the table
# Each action's handler, once; its name, summary, body keys and right are the wire
# contract's (`wire.requests.ACTION_SHAPES`).
_HANDLERS: dict[str, Handler] = {
    "commit": _commit,
    "abort": _abort,
    "apply_staged": _apply_staged,
    "describe": _describe,
    "list_versions": _list_versions,
    "delete": _delete,
    "update": _update,
    "restore": _restore,
    "create_tag": _create_tag,
    "delete_tag": _delete_tag,
    "take_blobs": blob_reads.take_blobs,
    "read_blob": blob_reads.read_blob,  # type: ignore[dict-item]  # answers bytes
    "list_tags": _list_tags,
    "add_columns": _add_columns,
    "drop_columns": _drop_columns,
    "alter_columns": _alter_columns,
    "create_index": _released(_create_index),
    "optimize_indices": _released(_optimize_indices),
    "drop_index": _drop_index,
    "compact": _released(_compact),
    "cleanup": _released(_cleanup),
    "drop_dataset": _drop_dataset,
    "create_branch": _create_branch,
    "list_branches": _list_branches,
    "delete_branch": _delete_branch,
    "healthcheck": _healthcheck,
}
if set(_HANDLERS) != {shape.name for shape in ACTION_SHAPES}:
    raise ImportError("every action of wire.requests.ACTION_SHAPES needs exactly one handler")

ACTION_TABLE: tuple[Action, ...] = tuple(
    Action(shape.name, shape.summary, shape.right, shape.keys, _HANDLERS[shape.name])
    for shape in ACTION_SHAPES
)
ACTIONS_BY_NAME: dict[str, Action] = {a.name: a for a in ACTION_TABLE}
# What ListActions lists: name -> summary.
ACTIONS: dict[str, str] = {a.name: a.summary for a in ACTION_TABLE}


def find_action(name: str) -> Action:
    """The action called `name`; Unimplemented for any other name."""
    action = ACTIONS_BY_NAME.get(name)
    if action is None:
        raise Unimplemented(
            f"unknown action {name[:64]!r}; ListActions names the {len(ACTIONS)} actions"
        )
    return action


def parse_body(action: Action, body: bytes | None) -> Fields:
    """An action's JSON body, checked to be an object holding only the keys it accepts."""
    what = f"{action.name} body"
    doc = parse_object(body, what, empty_ok=not action.keys)
    return Fields(doc, what, action.keys)


# ------------------------------------------------------------------------------- helpers
def _as_of_time(shown: dt.datetime) -> str | None:
    """A version's time as `list_versions` and `describe` give it, from the time pylance's
    `versions()` shows: the earliest `as_of` that reads the version (`as_of` finds the newest
    version shown strictly before it, as in pylance)."""
    return _iso(shown + dt.timedelta(microseconds=1))


def _iso(t: dt.datetime | None) -> str | None:
    if t is None:
        return None
    if t.tzinfo is None:
        t = t.astimezone()  # naive = local time, as the engine reports versions()
    return t.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _refuse_reserved(what: str, names: Iterable[str]) -> None:
    """InvalidArgument for a new column named like a system column (`_rowid`, ...)."""
    for n in names:
        if n in RESERVED_COLUMNS:
            raise InvalidArgument(
                f"{what}: {n} is a reserved column name (row ids and addresses) and cannot be "
                "used in a Lance dataset"
            )


_TYPE_ALIASES = {"utf8": "string", "large_utf8": "large_string", "str": "string"}


def _arrow_type(text: str) -> pa.DataType:
    try:
        return pa.type_for_alias(_TYPE_ALIASES.get(text, text))
    except (ValueError, KeyError):
        raise InvalidArgument(
            f"unknown data_type {text[:40]!r} (use Arrow names: int64, float32, string...)"
        ) from None
