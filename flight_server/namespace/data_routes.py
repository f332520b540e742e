"""The namespace's data plane: count, query, create, insert, merge insert, update, delete.

Clients that cannot open a table's files (no access to the root's storage) read and write
through these, and Quiver's engine runs them with the same code and commits as Flight:
writes go through `DatasetService.put` and its actions (one commit each, the caller's write
right checked), reads through a dataset version's scanner or nearest-neighbour search.

Request bodies with rows are Arrow IPC streams; QueryTable answers an Arrow IPC *file*
(lancedb reads it with ``pa.ipc.open_file``), written batch by batch as the scan produces
them, so a large answer streams in bounded memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from quiver.flight_server.namespace import errors as ne
from quiver.flight_server.namespace.calls import ArrowFile, Call
from quiver.flight_server.namespace.catalog_routes import (
    branch_field,
    existing_table,
    table_of,
    where_of,
)
from quiver.flight_server.namespace.context import Context
from quiver.flight_server.namespace.ids import table_name
from quiver.flight_server.namespace.tree import TABLE, check_properties
from quiver.flight_server.protocol import MergeRequest, PutRequest
from quiver.flight_server.reads import BATCH_BYTES
from quiver.format.dataset.nearest import NEAREST_KEYS
from quiver.wire.requests import WRITE

_VECTOR = "vector"
SMALL_STEP_ROWS = 8192


def _rows(call: Call) -> pa.Table:
    """The request's Arrow IPC stream, read whole (the body is in memory already; batches
    refer to its bytes) so a damaged or cut stream is refused before anything is written."""
    if not call.data:
        raise ne.invalid(f"{call.op}: the body must be an Arrow IPC stream (none was sent)")
    try:
        return pa.ipc.open_stream(pa.BufferReader(call.data)).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise ne.invalid(f"{call.op}: the body is not a whole Arrow IPC stream ({e})") from None


# -- reads --------------------------------------------------------------------------------
def count_rows(ctx: Context, call: Call) -> int:
    name, kind = table_of(ctx, call)
    if kind != TABLE:
        return 0
    name = existing_table(ctx, call, branched=True)
    ds = ctx.handles.open_ref(name, call.int("version"), None, None)
    return int(ds.count_rows(call.str("predicate")))


def query_table(ctx: Context, call: Call) -> ArrowFile:
    name = existing_table(ctx, call, branched=True)
    k = call.int("k", required=True)
    offset = call.int("offset") or 0
    ds = ctx.handles.open_ref(name, call.int("version"), None, None)
    columns = _columns(call)
    vector = _query_vector(call)
    common: dict[str, Any] = {
        "columns": columns,
        "filter": call.str("filter"),
        "with_row_id": call.bool("with_row_id"),
    }
    text = _full_text(call)
    if text is not None:
        if vector is not None:
            raise ne.unsupported(f"{call.op}: a vector with a full-text query (hybrid search)")
        found = ds.scanner(
            full_text_query=text,
            limit=k or None,
            offset=offset or None,
            prefilter=call.bool("prefilter"),
            fast_search=call.bool("fast_search"),
            **common,
        ).to_table()
        return ArrowFile(_ipc_file(found.schema, found.to_batches()))
    if vector is None and k and k + offset <= SMALL_STEP_ROWS:
        # a few rows: small steps, no readahead (a step is decoded whole before a row goes)
        scan = ds.scanner(limit=k, offset=offset or None, **common)
        return ArrowFile(_ipc_file(scan.projected_schema, scan.to_batches()))
    if vector is None:
        # as a DoGet streams: large batches, the next one decoded while this one is sent
        scan = ds.scanner(
            limit=k or None,
            offset=offset or None,
            batch_size=ctx.service.reads.batch_size,
            batch_bytes=BATCH_BYTES,
            fragment_readahead=2,
            readahead_bytes=1,
            **common,
        )
        return ArrowFile(_ipc_file(scan.projected_schema, _leased(ctx, scan, call)))
    # a nearest-neighbour search: k + offset rows at most, the first `offset` dropped
    nearest = _nearest(call, ds, vector, k + offset)
    found = ds.scanner(nearest=nearest, prefilter=call.bool("prefilter"), **common).to_table()
    return ArrowFile(_ipc_file(found.schema, found.slice(offset).to_batches()))


def _full_text(call: Call) -> dict[str, Any] | None:
    """QueryTable's ``full_text_query`` as the engine takes it: ``{"string_query": {"query",
    "columns"?}}``, or ``{"structured_query": {"query": FtsQuery}}`` (match, phrase, multi_match,
    combined_fields, boolean, boost), which is the engine's structured form."""
    value = call.body.get("full_text_query")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ne.invalid(f"{call.op}: 'full_text_query' must be an object")
    structured = value.get("structured_query")
    if structured is not None:
        if not isinstance(structured, dict) or not isinstance(structured.get("query"), dict):
            raise ne.invalid(f"{call.op}: 'structured_query' needs a 'query' object")
        return structured["query"]
    string = value.get("string_query")
    if not isinstance(string, dict) or not isinstance(string.get("query"), str):
        raise ne.invalid(f"{call.op}: 'full_text_query' needs 'string_query': {{'query': text}}")
    out: dict[str, Any] = {"query": string["query"]}
    if string.get("columns") is not None:
        out["columns"] = string["columns"]
    return out


def _columns(call: Call) -> list[str] | dict[str, str] | None:
    value = call.body.get("columns")
    if value is None:
        return None
    if isinstance(value, list):
        if not all(isinstance(c, str) for c in value):
            raise ne.invalid(f"{call.op}: 'columns' must list column names")
        return value
    if not isinstance(value, dict):
        raise ne.invalid(f"{call.op}: 'columns' must be an object")
    names, aliases = value.get("column_names"), value.get("column_aliases")
    if aliases:
        if not isinstance(aliases, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in aliases.items()
        ):
            raise ne.invalid(f"{call.op}: 'column_aliases' must map output names to columns")
        return {alias: f"`{column}`" for alias, column in aliases.items()}
    if names is None:
        return None
    if not isinstance(names, list) or not all(isinstance(c, str) for c in names):
        raise ne.invalid(f"{call.op}: 'column_names' must list column names")
    return names


def _query_vector(call: Call) -> list[Any] | None:
    value = call.body.get(_VECTOR)
    if value is None:
        return None
    if isinstance(value, list):
        return value or None
    if not isinstance(value, dict):
        raise ne.invalid(f"{call.op}: 'vector' must be an object")
    single, multi = value.get("single_vector"), value.get("multi_vector")
    query = single if single else multi
    if not query:
        return None
    if not isinstance(query, list):
        raise ne.invalid(f"{call.op}: the query vector must be a list of numbers")
    return query


def _nearest(call: Call, ds: Any, vector: list[Any], k: int) -> dict[str, Any]:
    column = call.str("vector_column")
    if column is None:
        if _VECTOR not in ds.schema.names:
            raise ne.invalid(
                f"{call.op}: the table has no column named 'vector'; give 'vector_column'"
            )
        column = _VECTOR
    nearest: dict[str, Any] = {"column": column, "q": vector, "k": k}
    distance = call.str("distance_type")
    if distance:
        nearest["metric"] = distance.lower()
    for key in ("nprobes", "refine_factor", "ef"):
        value = call.int(key, minimum=1)
        if value is not None:
            nearest[key] = value
    if call.bool("bypass_vector_index"):
        nearest["use_index"] = False
    lower, upper = call.number("lower_bound"), call.number("upper_bound")
    if lower is not None or upper is not None:
        nearest["distance_range"] = (lower, upper)
    assert set(nearest) <= set(NEAREST_KEYS)
    return nearest


def _leased(ctx: Context, scan: Any, call: Call) -> Iterator[pa.RecordBatch]:
    """A scan's batches, read while holding its share of the server's memory budget (the
    one DoGet streams and index builds share), waiting its turn when the budget is full."""
    budget = ctx.service.budget
    if budget is None:
        yield from scan.to_batches()
        return
    label = f"namespace {call.id_text}"
    with budget.admit(scan.memory_estimate(), label=label) as lease:
        biggest = 0
        for batch in scan.to_batches():
            if batch.nbytes > biggest:  # bigger than estimated: account for it
                biggest = batch.nbytes
                lease.grow_to(3 * biggest)
            yield batch


class _Chunks:
    """A write-only file collecting what the IPC writer writes, handed out in chunks."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.position = 0
        self.closed = False

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.parts.append(chunk)
        self.position += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        data = b"".join(self.parts)
        self.parts.clear()
        return data


def _ipc_file(schema: pa.Schema, batches: Any) -> Iterator[bytes]:
    """An Arrow IPC file of `batches`, as chunks of bytes (one per batch, then the footer)."""
    sink = _Chunks()
    writer = pa.ipc.new_file(pa.PythonFile(sink, mode="w"), schema)
    try:
        for batch in batches:
            writer.write_batch(batch)
            yield sink.take()
    finally:
        writer.close()
    yield sink.take()


# -- writes -------------------------------------------------------------------------------
def create_table(ctx: Context, call: Call) -> dict[str, Any]:
    name = table_name(call.parts)
    mode = (call.str("mode") or "create").lower()
    if mode not in ("create", "exist_ok", "existok", "overwrite"):
        raise ne.invalid(f"{call.op}: unknown mode {call.str('mode')!r}")
    properties = check_properties(_json_param(call, "properties"), call.op)
    ctx.authorize(call.identity, name, WRITE)
    ctx.tree.require_namespace(call.parts[:-1])
    rows = _rows(call)
    kind = ctx.tree.table_kind(call.parts)
    if kind == TABLE and mode != "overwrite":
        if mode == "create":
            raise ne.NamespaceError(ne.TABLE_ALREADY_EXISTS, call.id_text)
        out = where_of(ctx, name)
        out["version"] = ctx.handles.open_latest(name).version
        return out
    put_mode = "overwrite" if kind == TABLE else "create"
    result = ctx.service.put(
        PutRequest(name, mode=put_mode),
        rows.schema,
        rows.to_batches(),
        identity=call.identity,
    )
    if properties:
        ctx.tree.declare(name, properties)
    out = where_of(ctx, name)
    out["version"] = result["version"]
    if properties:
        out["properties"] = properties
    return out


def _json_param(call: Call, key: str) -> Any:
    """A parameter that the query string carries as JSON text (CreateTable's properties)."""
    value = call.body.get(key)
    if value is None and call.query.get(key):
        try:
            value = json.loads(call.query[key][-1])
        except ValueError:
            raise ne.invalid(f"{call.op}: '{key}' must be JSON") from None
    return value


def insert_into_table(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call, WRITE, branched=True)
    mode = (call.str("mode") or "append").lower()
    if mode not in ("append", "overwrite"):
        raise ne.invalid(f"{call.op}: 'mode' must be append or overwrite")
    rows = _rows(call)
    result = ctx.service.put(
        PutRequest(name, mode=mode),
        rows.schema,
        rows.to_batches(),
        identity=call.identity,
    )
    return {"num_inserted_rows": int(result.get("rows", 0)), "version": result["version"]}


def merge_insert_into_table(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call, WRITE, branched=True)
    on = call.strings("on", required=True)
    assert on is not None
    matched_filter = call.str("when_matched_update_all_filt")
    by_source_filter = call.str("when_not_matched_by_source_delete_filt")
    spec = MergeRequest(
        on=tuple(on),
        when_matched=(
            "update_all" if call.bool("when_matched_update_all") or matched_filter else "nothing"
        ),
        matched_condition=matched_filter,
        insert=call.bool("when_not_matched_insert_all"),
        delete_by_source=call.bool("when_not_matched_by_source_delete") or bool(by_source_filter),
        by_source_filter=by_source_filter,
    )
    rows = _rows(call)
    result = ctx.service.put(
        PutRequest(name, merge=spec),
        rows.schema,
        rows.to_batches(),
        identity=call.identity,
    )
    return {
        "num_updated_rows": int(result.get("updated_rows", 0)),
        "num_inserted_rows": int(result.get("inserted_rows", 0)),
        "num_deleted_rows": int(result.get("deleted_rows", 0)),
        "version": result["version"],
    }


def update_table(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call, WRITE, branched=True)
    pairs = call.body.get("updates")
    if not isinstance(pairs, list) or not pairs:
        raise ne.invalid(f"{call.op}: 'updates' must be a non-empty list of [column, expression]")
    updates: dict[str, str] = {}
    for pair in pairs:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(p, str) and p for p in pair)
        ):
            raise ne.invalid(f"{call.op}: each update is a [column, SQL expression] pair")
        updates[pair[0]] = pair[1]
    body: dict[str, Any] = {"dataset": name, "updates": updates, **branch_field(name)}
    if call.str("predicate"):
        body["where"] = call.str("predicate")
    result = ctx.service.action("update", json.dumps(body).encode(), call.identity)
    return {"updated_rows": int(result.get("updated_rows", 0)), "version": result["version"]}


def delete_from_table(ctx: Context, call: Call) -> dict[str, Any]:
    name = existing_table(ctx, call, WRITE, branched=True)
    predicate = call.str("predicate", required=True)
    body = {"dataset": name, "predicate": predicate, **branch_field(name)}
    result = ctx.service.action("delete", json.dumps(body).encode(), call.identity)
    return {"version": result["version"]}
