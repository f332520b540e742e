"""Options of the `quiver` data source and the connection they describe.

Spark hands a data source its options as strings in a case-insensitive mapping (keys come
lower-cased). Every entry point checks them first: an option the use does not know (a typo
such as `colums`, or `starting_version` on a batch read) is refused with the list of those
it knows, and a malformed value names the option and what it must be.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

from quiver.wire.errors import InvalidArgument
from quiver.wire.requests import BLOB_HANDLING, MERGE_KEYS, merge_command

__all__ = [
    "CHANGE_OPTIONS",
    "Conn",
    "change_option",
    "QuiverOptionError",
    "check_options",
    "nearest_option",
    "positive_option",
    "pushdown_enabled",
    "read_options",
    "vector_columns",
]


class QuiverOptionError(ValueError):
    """A missing, unknown or invalid option of the `quiver` data source."""


# ---------------------------------------------------------------------------------------------
# Which options each use knows

_CONNECTION = (
    "uri",
    "dataset",
    "path",  # what Spark makes of .load("sales") / .save("sales"): the dataset
    "token",
    "username",
    "password",
    "tls_root_certs",
    "cert_chain",
    "private_key",
    "timeout",
    "branch",  # a branch of the dataset (default: the main line)
)
_READ = ("version", "tag", "as_of", "filter", "columns", "max_rows_per_endpoint")
# A batch write that changes rows instead of appending them (see `change_option`)
CHANGE_OPTIONS = ("operation", *MERGE_KEYS)  # the merge's keys are the wire contract's
OPERATIONS = (
    "append",
    "upsert",
    "insert_new",
    "delete_matching",
    "merge",
    "add_columns",
    "update_columns",
)
# the clauses each merging operation implies: when_matched, when_not_matched
_SHORTHANDS = {
    "upsert": ("update_all", "insert_all"),
    "insert_new": ("nothing", "insert_all"),
    "delete_matching": ("delete", None),
}
KNOWN: dict[str, tuple[str, ...]] = {
    "read": (
        *_CONNECTION,
        *_READ,
        "max_partitions",
        "pushdown",
        "nearest",
        "prefilter",
        "full_text_query",
        "fast_search",
        "limit",
        "hybrid",
        "blob_handling",
    ),
    "write": (*_CONNECTION, "vector_columns", "blob_columns", *CHANGE_OPTIONS),
    "stream read": (
        *_CONNECTION,
        "filter",
        "columns",
        "max_rows_per_endpoint",
        "starting_version",
        "max_fragments_per_trigger",
    ),
    "stream write": (*_CONNECTION, "vector_columns", "blob_columns", "checkpointlocation"),
}
# what `schema()` may see: it runs for reads and writes, batch and streaming alike
KNOWN["any"] = tuple(dict.fromkeys(k for use in KNOWN.values() for k in use))
# the driver-side helpers (`spark.changes`, `spark.indices`) only connect
KNOWN["connection"] = _CONNECTION


def check_options(options: Any, use: str) -> None:
    """Refuse an option `use` (read, write, stream read, stream write, any) does not know."""
    known = KNOWN[use]
    unknown = sorted(k for k in options if str(k).lower() not in known)
    if unknown:
        what = "options" if len(unknown) > 1 else "option"
        names = ", ".join(repr(k) for k in unknown)
        listed = ", ".join(k if k != "checkpointlocation" else "checkpointLocation" for k in known)
        raise QuiverOptionError(
            f"unknown {what} {names} for a {use} of the quiver data source; it knows: {listed}"
        )


# ---------------------------------------------------------------------------------------------
# Connection


def _required(options: Any, name: str, hint: str) -> str:
    value = options.get(name)
    if value is None or str(value).strip() == "":
        raise QuiverOptionError(f"the quiver data source needs the {name!r} option ({hint})")
    return str(value)


def _timeout(options: Any) -> float | None:
    raw = options.get("timeout")
    if raw is None:
        return None
    try:
        value = float(str(raw).strip())
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise QuiverOptionError(
            f"the 'timeout' option must be a number of seconds above 0, not {raw!r}"
        )
    return value


_SHARED: dict[Conn, Any] = {}
_SHARED_LOCK = threading.Lock()


@dataclass(frozen=True)
class Conn:
    """Everything a driver or a task needs to talk to the server (picklable)."""

    uri: str
    dataset: str
    token: str | None = None
    username: str | None = None
    password: str | None = None
    tls_root_certs: str | None = None
    cert_chain: str | None = None
    private_key: str | None = None
    timeout: float | None = None
    branch: str | None = None  # every read, write and stream acts on this branch

    @classmethod
    def from_options(cls, options: Any) -> Conn:
        dataset = options.get("dataset") or options.get("path")
        username, password = options.get("username"), options.get("password")
        if (username is None) != (password is None):
            raise QuiverOptionError("the 'username' and 'password' options go together")
        if options.get("token") is not None and username is not None:
            raise QuiverOptionError("give the 'token' option or 'username' and 'password'")
        if (options.get("cert_chain") is None) != (options.get("private_key") is None):
            raise QuiverOptionError(
                "the 'cert_chain' and 'private_key' options go together (mutual TLS)"
            )
        return cls(
            uri=_required(options, "uri", "grpc://host:port or grpc+tls://host:port"),
            dataset=_required({"dataset": dataset}, "dataset", "the dataset name, e.g. 'sales'"),
            token=options.get("token"),
            username=username,
            password=password,
            tls_root_certs=options.get("tls_root_certs"),
            cert_chain=options.get("cert_chain"),
            private_key=options.get("private_key"),
            timeout=_timeout(options),
            branch=options.get("branch") or None,
        )

    def shared_client(self) -> Any:
        """A client kept open for the tasks this Python worker runs after this one (Spark
        reuses workers): its connection, and the server's per-connection set-up, are paid
        once per worker rather than per task. gRPC reconnects a dropped connection."""
        with _SHARED_LOCK:
            client = _SHARED.get(self)
            if client is None or client._closed:
                client = _SHARED[self] = self.client()
            return client

    def client(self) -> Any:
        from quiver.clients.flight import Client

        client = Client(
            self.uri,
            token=self.token,
            username=self.username,
            password=self.password,
            tls_root_certs=self.tls_root_certs,
            cert_chain=self.cert_chain,
            private_key=self.private_key,
            timeout=self.timeout,
        )
        return client.branch(self.branch) if self.branch else client


# ---------------------------------------------------------------------------------------------
# Reads


def read_options(options: Any) -> dict[str, Any]:
    """version / tag / as_of / columns / filter / max_rows_per_endpoint, for
    `Client.flight_info` and `Client.schema`."""
    out: dict[str, Any] = {}
    version = options.get("version")
    if version is not None:
        try:
            out["version"] = int(str(version).strip())
        except ValueError:
            raise QuiverOptionError(
                f"the 'version' option must be an integer, not {version!r}"
            ) from None
    if options.get("tag") is not None:
        out["tag"] = str(options.get("tag"))
    if options.get("as_of") is not None:
        out["as_of"] = str(options.get("as_of"))
    pins = [k for k in ("version", "tag", "as_of") if k in out]
    if len(pins) > 1:
        raise QuiverOptionError(f"give at most one of version, tag and as_of (got {pins})")
    columns = options.get("columns")
    if columns is not None:
        names = [c.strip() for c in str(columns).split(",") if c.strip()]
        if not names:
            raise QuiverOptionError("the 'columns' option names no column")
        out["columns"] = names
    if options.get("filter") is not None:
        out["filter"] = str(options.get("filter"))
    step = positive_option(options, "max_rows_per_endpoint")
    if step is not None:
        out["max_rows_per_endpoint"] = step
    handling = options.get("blob_handling")
    if handling is not None:
        if str(handling) not in BLOB_HANDLING:
            raise QuiverOptionError(
                f"the 'blob_handling' option must be one of {', '.join(BLOB_HANDLING)}, "
                f"not {handling!r}"
            )
        out["blob_handling"] = str(handling)
    nearest = nearest_option(options)
    text = full_text_option(options)
    hybrid = hybrid_option(options)
    if hybrid is not None and (nearest is None or text is None):
        raise QuiverOptionError(
            "the 'hybrid' option goes with both 'nearest' and 'full_text_query'"
        )
    if nearest is not None and text is not None:
        if isinstance(text, list):
            raise QuiverOptionError("a hybrid search takes one 'full_text_query', not a list")
        if (
            isinstance(nearest.get("q"), list)
            and nearest["q"]
            and isinstance(nearest["q"][0], list)
        ):
            raise QuiverOptionError("a hybrid search takes one query vector, not a list")
        out["hybrid"] = hybrid or {}
    if nearest is not None:
        out["nearest"] = nearest
    if text is not None:
        out["full_text_query"] = text
        out["fast_search"] = _bool_option(options, "fast_search")
        limit = positive_option(options, "limit")
        if limit is not None:
            out["limit"] = limit
    elif options.get("fast_search") is not None or options.get("limit") is not None:
        raise QuiverOptionError("the 'fast_search' and 'limit' options go with 'full_text_query'")
    if nearest is not None or text is not None:
        out["prefilter"] = _bool_option(options, "prefilter")
    elif options.get("prefilter") is not None:
        raise QuiverOptionError(
            "the 'prefilter' option goes with the 'nearest' or 'full_text_query' option"
        )
    return out


# the structured full-text queries (the engine's `fulltext_query` forms)
_STRUCTURED_QUERIES = {"match", "multi_match", "combined_fields", "boolean", "boost", "phrase"}


def _text_query(value: Any) -> bool:
    """Whether a parsed JSON value is one full-text query: text, {"query", "columns"} or a
    structured query."""
    if isinstance(value, str):
        return True
    return isinstance(value, dict) and (
        isinstance(value.get("query"), str) or bool(set(value) & _STRUCTURED_QUERIES)
    )


def full_text_option(options: Any) -> str | dict[str, Any] | list[Any] | None:
    """The `full_text_query` option: the query text, a JSON object {"query", "columns"}
    naming the columns to search or a structured query, or a JSON list of those (a batch:
    each query's `limit` rows after its `query_index`)."""
    import json

    raw = options.get("full_text_query")
    if raw is None:
        return None
    text = str(raw)
    if text.lstrip().startswith(("{", "[")):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        one = _text_query(value) and not isinstance(value, str)
        batch = isinstance(value, list) and bool(value) and all(map(_text_query, value))
        if not (one or batch):
            raise QuiverOptionError(
                "the 'full_text_query' option is the query text, a JSON object "
                '{"query": "...", "columns": [...]}, a structured query ({"match": ...}, '
                f"multi_match, combined_fields, boolean, boost, phrase) or a JSON list of them, "
                f"not {raw!r}"
            )
        return value
    return text


def hybrid_option(options: Any) -> dict[str, Any] | None:
    """The `hybrid` option: how a hybrid search (`nearest` and `full_text_query` together)
    fuses its two lists, a JSON object {"fusion": "rrf" | "linear", "rrf_k", "weight",
    "normalize": "score" | "rank"}; without it, reciprocal rank fusion."""
    raw, value = _json_option(options, "hybrid")
    if raw is None:
        return None
    known = {"fusion", "rrf_k", "weight", "normalize"}
    if not isinstance(value, dict) or set(value) - known:
        raise QuiverOptionError(
            "the 'hybrid' option must be a JSON object with keys among fusion, rrf_k, weight "
            f'and normalize, e.g. {{"fusion": "linear", "weight": 0.7}}, not {raw!r}'
        )
    return value


def nearest_option(options: Any) -> dict[str, Any] | None:
    """The `nearest` option: a JSON object {"column", "q": [...], "k", "nprobes", ...}
    (the Flight descriptor's `nearest`), for a nearest-neighbour read."""
    raw, value = _json_option(options, "nearest")
    if raw is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("column"), str):
        raise QuiverOptionError(
            "the 'nearest' option must be a JSON object with the vector 'column' and the "
            f'query vector \'q\', e.g. {{"column": "vec", "q": [0.1, 0.2], "k": 10}}, not {raw!r}'
        )
    if "q" not in value:
        raise QuiverOptionError("the 'nearest' option needs 'q', the query vector")
    return value


def _json_option(options: Any, name: str) -> tuple[Any, Any]:
    """An option's raw value and its JSON reading (None when it is absent or not JSON)."""
    import json

    raw = options.get(name)
    if raw is None:
        return None, None
    try:
        return raw, json.loads(str(raw))
    except ValueError:
        return raw, None


def _bool_option(options: Any, name: str) -> bool:
    raw = options.get(name, "false")
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise QuiverOptionError(f"the {name!r} option must be true or false, not {raw!r}")
    return value == "true"


def positive_option(options: Any, name: str) -> int | None:
    """An optional whole-number option >= 1 (Spark passes strings)."""
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise QuiverOptionError(f"the {name!r} option must be a whole number >= 1, not {raw!r}")
    return value


def pushdown_enabled(options: Any) -> bool:
    """The `pushdown` option: whether Spark's filters may be applied by the server."""
    raw = options.get("pushdown", "false")
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise QuiverOptionError(f"the 'pushdown' option must be true or false, not {raw!r}")
    return value == "true"


# ---------------------------------------------------------------------------------------------
# Writes


def blob_columns(options: Any) -> set[str]:
    """The `blob_columns` option, `"video,thumbnail"`: binary columns to store as Lance blob
    columns (their values out of line) when a write creates the dataset or replaces its
    schema; a dataset's own blob columns need no option."""
    raw = options.get("blob_columns")
    if raw is None:
        return set()
    names = {n.strip() for n in str(raw).split(",") if n.strip()}
    if not names:
        raise QuiverOptionError("the 'blob_columns' option names no column")
    return names


def vector_columns(options: Any) -> dict[str, int]:
    """The `vector_columns` option, `"embedding:768,thumb:64"`: columns to store as
    fixed-size lists (Lance's vector type) of that many values when a write creates the
    dataset or replaces its schema."""
    raw = options.get("vector_columns")
    if raw is None:
        return {}
    out: dict[str, int] = {}
    for item in str(raw).split(","):
        if not item.strip():
            continue
        name, sep, size = item.strip().rpartition(":")
        try:
            dimension = int(size) if sep else 0
        except ValueError:
            dimension = 0
        if not name.strip() or dimension < 1:
            raise QuiverOptionError(
                "the 'vector_columns' option lists column:dimension pairs, e.g. "
                f"'embedding:768,thumb:64', not {raw!r}"
            )
        out[name.strip()] = dimension
    if not out:
        raise QuiverOptionError("the 'vector_columns' option names no column")
    return out


def change_option(options: Any) -> dict[str, Any] | None:
    """The row change a batch write makes (None: an append), as `apply_staged` takes it:
    `{"merge": {...}}` or `{"backfill": "add_columns" | "update_columns"}`.

    `operation`: "append" (the default); "upsert", "insert_new" and "delete_matching"
    (merges on the `on` columns, comma-separated, default the dataset's primary key);
    "merge" with the clause options `when_matched` (update_all, delete, fail, nothing),
    `matched_condition`, `when_not_matched` (insert_all, none),
    `when_not_matched_by_source` (delete, none) and `by_source_filter`; "add_columns" and
    "update_columns" (backfills: the DataFrame holds `_rowaddr`, read with the `columns`
    option, and the new or corrected columns)."""
    operation = str(options.get("operation") or "append").strip().lower()
    if operation not in OPERATIONS:
        raise QuiverOptionError(
            f"the 'operation' option must be one of {', '.join(OPERATIONS)}, not {operation!r}"
        )
    clauses = [k for k in CHANGE_OPTIONS[2:] if options.get(k) is not None]
    if operation != "merge" and [k for k in clauses if k != "conflict_retries"]:
        raise QuiverOptionError(
            f"option {clauses[0]!r} is for operation 'merge', not {operation!r}"
        )
    if operation in ("append", "add_columns", "update_columns"):
        if options.get("on") is not None or options.get("conflict_retries") is not None:
            raise QuiverOptionError(f"operation {operation!r} takes no 'on' or 'conflict_retries'")
        return None if operation == "append" else {"backfill": operation}
    on_text = options.get("on")
    on = [k.strip() for k in str(on_text).split(",")] if on_text is not None else None
    if on is not None and not all(on):
        raise QuiverOptionError(f"the 'on' option must name columns, comma-separated: {on_text!r}")
    raw = options.get("conflict_retries")
    retries = None
    if raw is not None:
        if not str(raw).strip().isdigit():
            raise QuiverOptionError(
                f"the 'conflict_retries' option must be a whole number >= 0, not {raw!r}"
            )
        retries = int(str(raw).strip())

    def none_or(name: str) -> str | None:
        value = options.get(name)
        return None if value is None or str(value).lower() == "none" else str(value)

    if operation in _SHORTHANDS:
        when_matched, when_not_matched = _SHORTHANDS[operation]
        by_source, by_source_filter, condition = None, None, None
    else:
        when_matched = none_or("when_matched") or "update_all"
        when_not_matched = (
            none_or("when_not_matched") if options.get("when_not_matched") else "insert_all"
        )
        by_source = none_or("when_not_matched_by_source")
        by_source_filter = none_or("by_source_filter")
        condition = none_or("matched_condition")
    try:
        command = merge_command(
            "-",
            on,
            when_matched=when_matched,
            matched_condition=condition,
            when_not_matched=when_not_matched,
            when_not_matched_by_source=by_source,
            by_source_filter=by_source_filter,
            conflict_retries=retries,
        )
    except InvalidArgument as e:
        raise QuiverOptionError(f"the merge options: {e}") from None
    return {"merge": command["merge"]}
