"""The JSON shapes of Quiver's requests: read and put descriptors, and action bodies.

A read is a CMD descriptor holding a JSON object with `READ_KEYS` (or a PATH descriptor
naming the dataset); a DoPut's CMD holds `PUT_KEYS`; each DoAction has a JSON body whose
keys `ACTION_SHAPES` lists. The server validates against these (`flight_server.protocol`,
`flight_server.actions`), the clients build them (`read_command`, `put_command`,
`merge_command`).

Row changes: a DoPut whose CMD is `{"dataset", "merge": {MERGE_KEYS...}}` merges its rows
into the dataset (pylance's merge_insert) and commits once; `{"dataset", "mode": "source",
"commit": false, "job"?}` stages rows as the source of a change (a `_rowaddr` column
allowed), which the `apply_staged` action applies, from any number of such puts, as one
merge or backfill (`BACKFILLS`); a DoPut whose CMD is `{"dataset", "backfill":
"add_columns" | "update_columns"}` applies its `_rowaddr`-keyed rows at once; the `update`
action sets columns to SQL expressions.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from quiver.wire.errors import InvalidArgument

READ_KEYS: tuple[str, ...] = (
    "dataset",
    "branch",
    "version",
    "tag",
    "as_of",
    "columns",
    "filter",
    "limit",
    "with_row_id",
    "max_rows_per_endpoint",
    "appended_since",
    "nearest",
    "prefilter",
    "full_text_query",
    "fast_search",
    "hybrid",
    "search_filter",
    "blob_handling",
)
# The bytes one `read_blob` action answers at most (a longer range takes several calls).
BLOB_RANGE_BYTES = 64 << 20
# How a read returns blob columns (pylance's `blob_handling`): their descriptions (where
# the bytes are), or "all_binary", their bytes.
BLOB_HANDLING: tuple[str, ...] = ("blobs_descriptions", "all_descriptions", "all_binary")
# The `nearest` object of a read (pylance's `nearest=` dict): q is one vector (a list of
# numbers) or, for GetFlightInfo, a list of them; DoExchange takes the vectors as a stream.
NEAREST_KEYS: tuple[str, ...] = (
    "column",
    "q",
    "k",
    "metric",
    "nprobes",
    "minimum_nprobes",
    "maximum_nprobes",
    "refine_factor",
    "ef",
    "use_index",
    "distance_range",
    "search_effort",
    "approx_mode",
)
PUT_KEYS: tuple[str, ...] = (
    "dataset",
    "branch",
    "mode",
    "commit",
    "job",
    "merge",
    "backfill",
    "idempotency_key",
)
# A merge DoPut's "merge" object: pylance's merge_insert clauses (see `merge_command`)
MERGE_KEYS: tuple[str, ...] = (
    "on",
    "when_matched",
    "matched_condition",
    "when_not_matched",
    "when_not_matched_by_source",
    "by_source_filter",
    "conflict_retries",
)
WHEN_MATCHED: tuple[str, ...] = ("update_all", "delete", "fail", "nothing")
# DoPut modes, which are also the operations of the commit action
MODES: tuple[str, ...] = ("append", "create", "overwrite")
# ... and a staging-only one: rows staged as the source of a change (`apply_staged`)
PUT_MODES: tuple[str, ...] = (*MODES, "source")
# The backfills `apply_staged` runs on rows naming their `_rowaddr`
BACKFILLS: tuple[str, ...] = ("add_columns", "update_columns")

READ, WRITE = "read", "write"


@dataclass(frozen=True)
class ActionShape:
    """One DoAction as the wire sees it: its name, what ListActions says of it, the body keys
    it accepts and the right it needs on its dataset (None: no dataset involved)."""

    name: str
    summary: str
    keys: tuple[str, ...]
    right: str | None


# create_index's options of vector indices (pylance's create_index parameters)
VECTOR_OPTIONS = (
    "metric",
    "num_partitions",
    "num_sub_vectors",
    "num_bits",
    "sample_rate",
    "max_iters",
    "target_partition_size",
    "ivf_centroids",
    "pq_codebook",
    "m",
    "ef_construction",
    "max_level",
    "rabitq_model",
)
# Actions whose body may ask for progress results before the final one ({"progress": true}).
PROGRESS_ACTIONS = ("create_index", "optimize_indices")

ACTION_SHAPES: tuple[ActionShape, ...] = (
    ActionShape(
        "commit",
        "Make staged fragments visible in one new version: {dataset, operation: "
        "append|overwrite|create, fragments, read_version?, idempotency_key?} -> {version, rows}",
        ("dataset", "operation", "fragments", "read_version", "idempotency_key", "job"),
        WRITE,
    ),
    ActionShape(
        "apply_staged",
        "Apply rows staged with mode 'source' as one change, once: {dataset, fragments, "
        "job?, idempotency_key?, merge: {...} | backfill: add_columns|update_columns} -> "
        "{version, rows, ...counts}",
        ("dataset", "fragments", "job", "idempotency_key", "merge", "backfill"),
        WRITE,
    ),
    ActionShape(
        "abort",
        "Remove the files of staged, uncommitted fragments: {dataset, fragments} -> "
        "{removed_files, kept_files}",
        ("dataset", "fragments", "job"),
        WRITE,
    ),
    ActionShape(
        "describe",
        "Schema, version, rows, fragments, tags and indices of a dataset: "
        "{dataset, version?|tag?|as_of?}",
        ("dataset", "version", "tag", "as_of"),
        READ,
    ),
    ActionShape(
        "list_versions",
        "Every version of a dataset with its time and row count: {dataset}",
        ("dataset",),
        READ,
    ),
    ActionShape(
        "delete",
        "Delete the rows matching a SQL predicate: {dataset, predicate, idempotency_key?} -> "
        "{version, deleted_rows}",
        ("dataset", "predicate", "idempotency_key"),
        WRITE,
    ),
    ActionShape(
        "update",
        "Set columns to SQL expressions on the rows matching a filter: {dataset, updates: "
        "{column: expr}, where?, idempotency_key?} -> {version, updated_rows}",
        ("dataset", "updates", "where", "idempotency_key"),
        WRITE,
    ),
    ActionShape(
        "restore",
        "Make an old version (number or tag) the latest: {dataset, version|tag} -> {version}",
        ("dataset", "version", "tag"),
        WRITE,
    ),
    ActionShape(
        "create_tag",
        "Tag a version (default latest): {dataset, tag, version?} -> {tag, version}",
        ("dataset", "tag", "version"),
        WRITE,
    ),
    ActionShape("delete_tag", "Remove a tag: {dataset, tag}", ("dataset", "tag"), WRITE),
    ActionShape(
        "take_blobs",
        "Locate the blobs of a blob column for some rows: {dataset, column, indices | ids | "
        "addresses, version? | tag? | as_of?} -> {version, blobs: [{row_address, size}]} "
        "(size null for a null blob)",
        ("dataset", "column", "indices", "ids", "addresses", "version", "tag", "as_of"),
        READ,
    ),
    ActionShape(
        "read_blob",
        "Read a byte range of one blob: {dataset, version, column, address, offset?, length?} "
        "-> a JSON header {row_address, size, offset, length}, then the bytes in Results",
        ("dataset", "version", "column", "address", "offset", "length"),
        READ,
    ),
    ActionShape(
        "list_tags",
        "Every tag of a dataset and its version: {dataset} -> {tags}",
        ("dataset",),
        READ,
    ),
    ActionShape(
        "add_columns",
        "Add columns computed by SQL expressions: {dataset, columns: {name: expr}} -> {version}",
        ("dataset", "columns"),
        WRITE,
    ),
    ActionShape(
        "drop_columns",
        "Remove columns: {dataset, columns: [name]} -> {version}",
        ("dataset", "columns"),
        WRITE,
    ),
    ActionShape(
        "alter_columns",
        "Rename columns, change nullability or type: {dataset, alterations: "
        "[{path, name?, nullable?, data_type?}]} -> {version}",
        ("dataset", "alterations"),
        WRITE,
    ),
    ActionShape(
        "create_index",
        "Build an index of a column and commit it: {dataset, column, index_type (BTREE | "
        "BITMAP | LABEL_LIST | ZONEMAP | INVERTED | IVF_FLAT | IVF_PQ | IVF_SQ | IVF_RQ | "
        "IVF_HNSW_FLAT | IVF_HNSW_PQ | IVF_HNSW_SQ), name?, replace?, params? (INVERTED's "
        "tokenizer options), metric?, num_partitions?, num_sub_vectors?, num_bits?, "
        "sample_rate?, max_iters?, target_partition_size?, ivf_centroids?, pq_codebook?, m?, "
        "ef_construction?, max_level? (HNSW graphs), rabitq_model? (IVF_RQ's rotation), train? "
        "(false: an index of no rows that optimize_indices trains), progress?} -> "
        "{version, name}",
        (
            "dataset",
            "column",
            "index_type",
            "name",
            "replace",
            "train",
            "progress",
            "params",
            *VECTOR_OPTIONS,
        ),
        WRITE,
    ),
    ActionShape(
        "optimize_indices",
        "Index the fragments no index covers: {dataset, num_indices_to_merge?, index_names?, "
        "retrain?, progress?} -> {version, optimized}",
        ("dataset", "num_indices_to_merge", "index_names", "retrain", "progress"),
        WRITE,
    ),
    ActionShape(
        "drop_index",
        "Drop an index (every segment of the name): {dataset, name} -> {version}",
        ("dataset", "name"),
        WRITE,
    ),
    ActionShape(
        "compact",
        "Merge small fragments and purge deleted rows: {dataset, target_rows_per_fragment?, "
        "max_rows_per_group?, materialize_deletions?, materialize_deletions_threshold?, "
        "defer_index_remap?}",
        (
            "dataset",
            "target_rows_per_fragment",
            "max_rows_per_group",
            "materialize_deletions",
            "materialize_deletions_threshold",
            "defer_index_remap",
        ),
        WRITE,
    ),
    ActionShape(
        "cleanup",
        "Remove old versions and unreferenced files: {dataset, older_than_seconds?, "
        "retain_versions?, delete_unverified?, error_if_tagged_old_versions?}",
        (
            "dataset",
            "older_than_seconds",
            "retain_versions",
            "delete_unverified",
            "error_if_tagged_old_versions",
        ),
        WRITE,
    ),
    ActionShape(
        "drop_dataset", "Delete a dataset and all its files: {dataset}", ("dataset",), WRITE
    ),
    ActionShape(
        "create_branch",
        "Create a branch from a version: {dataset, name, branch?, version?|tag?} -> "
        "{name, version}",
        ("dataset", "name", "version", "tag"),
        WRITE,
    ),
    ActionShape(
        "list_branches",
        "Every branch: {dataset} -> {branches: [{name, parent_branch, parent_version, "
        "create_at, metadata}]}",
        ("dataset",),
        READ,
    ),
    ActionShape(
        "delete_branch",
        "Delete a branch and the files it wrote: {dataset, name} -> {name, deleted}",
        ("dataset", "name"),
        WRITE,
    ),
    ActionShape("healthcheck", "Whether this server can serve: {} -> {status}", (), None),
)
# Actions that act on one branch of their dataset, named by "branch" (default: the main line)
BRANCHED_ACTIONS = frozenset(
    {
        "commit",
        "apply_staged",
        "abort",
        "describe",
        "list_versions",
        "delete",
        "update",
        "restore",
        "create_tag",
        "add_columns",
        "drop_columns",
        "alter_columns",
        "create_index",
        "optimize_indices",
        "drop_index",
        "compact",
        "cleanup",
        "create_branch",
        "take_blobs",
        "read_blob",
    }
)
ACTION_SHAPES = tuple(
    ActionShape(a.name, a.summary, (*a.keys, "branch"), a.right)
    if a.name in BRANCHED_ACTIONS
    else a
    for a in ACTION_SHAPES
)
ACTIONS: dict[str, ActionShape] = {a.name: a for a in ACTION_SHAPES}


# ------------------------------------------------------------------------------- builders
def _as_of_text(as_of: str | dt.datetime | dt.date) -> str:
    if isinstance(as_of, str):
        return as_of
    if isinstance(as_of, dt.datetime):
        # a naive datetime is local time, as everywhere in Python
        ts = as_of.astimezone(dt.timezone.utc)
        return ts.isoformat().replace("+00:00", "Z")
    if isinstance(as_of, dt.date):  # midnight UTC of that day
        return f"{as_of.isoformat()}T00:00:00Z"
    raise TypeError(f"as_of must be a str, datetime or date, not {type(as_of).__name__}")


def _int_option(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


def read_command(
    dataset: str,
    *,
    columns: Sequence[str] | None = None,
    filter: str | None = None,
    version: int | None = None,
    tag: str | None = None,
    as_of: str | dt.datetime | dt.date | None = None,
    limit: int | None = None,
    with_row_id: bool = False,
    max_rows_per_endpoint: int | None = None,
    appended_since: int | None = None,
    nearest: dict[str, Any] | None = None,
    prefilter: bool = False,
    full_text_query: str | dict[str, Any] | list[Any] | None = None,
    fast_search: bool = False,
    hybrid: dict[str, Any] | None = None,
    branch: str | None = None,
    blob_handling: str | None = None,
    search_filter: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON object of a read CMD descriptor; only the options that are set appear.

    `branch` reads a branch of the dataset (its latest version, or `version` on it).

    `appended_since=v` reads only the rows that appends added after version `v` (up to
    `version`, default the latest), each endpoint pinned to the version that added it.
    `nearest` (see `nearest_object`) asks for the nearest neighbours of a vector instead,
    with the filter applied before the search when `prefilter`. `full_text_query` (a string,
    `{"query", "columns"}` or a structured query) asks for the rows matching it best first,
    with `_score`; a list of them is a batch, each query's best `limit` rows after its
    `query_index`. `fast_search` leaves out rows no index covers. Both `nearest` and
    `full_text_query` make a hybrid search, fused as `hybrid` says (`fusion`: "rrf" |
    "linear", `rrf_k`, `weight`, `normalize`: "score" | "rank"). `search_filter` filters a
    search by another, as pylance's query filters do: `{"full_text_query": query}` a
    vector search, `{"nearest": {...}}` a full-text search (`prefilter`: before it).
    `blob_handling` "all_binary" returns blob columns as their bytes instead of their
    descriptions.
    """
    if not isinstance(dataset, str) or not dataset:
        raise TypeError("dataset must be a non-empty string")
    pins = [
        name for name, v in (("version", version), ("tag", tag), ("as_of", as_of)) if v is not None
    ]
    if len(pins) > 1:
        raise InvalidArgument(f"give at most one of version, tag and as_of (got {', '.join(pins)})")
    cmd: dict[str, Any] = {"dataset": dataset}
    if branch is not None:
        cmd["branch"] = str(branch)
    if version is not None:
        cmd["version"] = _int_option("version", version)
    if tag is not None:
        cmd["tag"] = str(tag)
    if as_of is not None:
        cmd["as_of"] = _as_of_text(as_of)
    if columns is not None:
        if isinstance(columns, str):
            raise TypeError("columns must be a sequence of column names, not a string")
        cmd["columns"] = [str(c) for c in columns]
    if filter is not None:
        cmd["filter"] = str(filter)
    if limit is not None:
        cmd["limit"] = _int_option("limit", limit)
    if with_row_id:
        cmd["with_row_id"] = True
    if max_rows_per_endpoint is not None:
        cmd["max_rows_per_endpoint"] = _int_option("max_rows_per_endpoint", max_rows_per_endpoint)
    if appended_since is not None:
        cmd["appended_since"] = _int_option("appended_since", appended_since)
    if nearest is not None:
        unknown = sorted(set(nearest) - set(NEAREST_KEYS))
        if unknown:
            raise InvalidArgument(f"nearest: unknown key {unknown[0]!r}")
        cmd["nearest"] = dict(nearest)
    if prefilter:
        cmd["prefilter"] = True
    if full_text_query is not None:
        batch = full_text_query if isinstance(full_text_query, list) else [full_text_query]
        if not batch or not all(isinstance(q, (str, dict)) for q in batch):
            raise TypeError(
                "full_text_query must be a string, {'query', 'columns'}, a structured query "
                "or a non-empty list of those"
            )
        cmd["full_text_query"] = full_text_query
    if fast_search:
        cmd["fast_search"] = True
    if hybrid is not None:
        cmd["hybrid"] = dict(hybrid)
    if search_filter is not None:
        cmd["search_filter"] = search_filter_object(search_filter)
    if blob_handling is not None:
        if blob_handling not in BLOB_HANDLING:
            raise InvalidArgument(
                f"blob_handling must be one of {', '.join(BLOB_HANDLING)}, not {blob_handling!r}"
            )
        cmd["blob_handling"] = blob_handling
    return cmd


def search_filter_object(value: dict[str, Any]) -> dict[str, Any]:
    """A read's `search_filter`: `{"full_text_query": query}` or `{"nearest": {...}}` (its
    vector as JSON numbers)."""
    if not isinstance(value, dict) or len(value) != 1:
        raise InvalidArgument(
            "search_filter must be {'full_text_query': query} or {'nearest': {...}}"
        )
    ((key, inner),) = value.items()
    if key == "full_text_query" and isinstance(inner, (str, dict)):
        return {key: inner}
    if key == "nearest" and isinstance(inner, dict):
        return {key: nearest_object(**inner)}
    raise InvalidArgument("search_filter must be {'full_text_query': query} or {'nearest': {...}}")


def nearest_object(column: str, q: Any = None, k: int | None = None, **options: Any) -> dict:
    """The `nearest` object of a read: the vector column, the query vector(s) as JSON lists
    (numpy arrays and Arrow arrays accepted), k and the search options (NEAREST_KEYS)."""
    if not isinstance(column, str) or not column:
        raise TypeError("column must be a non-empty string")
    out: dict[str, Any] = {"column": column}
    if q is not None:
        out["q"] = (
            q.tolist() if hasattr(q, "tolist") else q.to_pylist() if hasattr(q, "to_pylist") else q
        )
    if k is not None:
        out["k"] = _int_option("k", k)
    for key, value in options.items():
        if key not in NEAREST_KEYS or key in ("column", "q", "k"):
            raise InvalidArgument(f"nearest: unknown key {key!r}")
        if value is not None:
            out[key] = list(value) if key == "distance_range" else value
    return out


def put_command(
    dataset: str,
    *,
    mode: str = "append",
    commit: bool = True,
    job: str | None = None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """The JSON object of a DoPut CMD descriptor (`idempotency_key`: a committing put's;
    a put repeated with it answers the version the first one made)."""
    if not isinstance(dataset, str) or not dataset:
        raise TypeError("dataset must be a non-empty string")
    if mode not in PUT_MODES:
        raise InvalidArgument(f"mode must be one of {', '.join(PUT_MODES)}, not {mode!r}")
    if mode == "source" and commit:
        raise InvalidArgument("mode 'source' stages the rows of a change: commit must be False")
    cmd: dict[str, Any] = {"dataset": dataset, "mode": mode}
    if not commit:
        cmd["commit"] = False
    if job is not None:
        cmd["job"] = job
    if idempotency_key is not None:
        if not commit:
            raise InvalidArgument("idempotency_key is for committing puts (commit=True)")
        cmd["idempotency_key"] = idempotency_key
    return cmd


def merge_command(
    dataset: str,
    on: str | list[str] | None = None,
    *,
    when_matched: str = "update_all",
    matched_condition: str | None = None,
    when_not_matched: str | None = "insert_all",
    when_not_matched_by_source: str | None = None,
    by_source_filter: str | None = None,
    conflict_retries: int | None = None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """The JSON object of a merge DoPut's CMD: the uploaded rows merged into `dataset` on
    the `on` columns (default: its primary key) and committed as one version (once per
    `idempotency_key`).

    `when_matched` is "update_all" (only where `matched_condition`, SQL over `source.` and
    `target.` columns, holds), "delete", "fail" or "nothing"; `when_not_matched`
    "insert_all" or None; `when_not_matched_by_source` "delete" (only target rows
    matching `by_source_filter`, when given) or None."""
    if not isinstance(dataset, str) or not dataset:
        raise TypeError("dataset must be a non-empty string")
    if when_matched not in WHEN_MATCHED:
        raise InvalidArgument(f"when_matched must be one of {', '.join(WHEN_MATCHED)}")
    if when_not_matched not in (None, "insert_all"):
        raise InvalidArgument("when_not_matched must be 'insert_all' or None")
    if when_not_matched_by_source not in (None, "delete"):
        raise InvalidArgument("when_not_matched_by_source must be 'delete' or None")
    if matched_condition is not None and when_matched != "update_all":
        raise InvalidArgument("matched_condition is for when_matched 'update_all'")
    if by_source_filter is not None and when_not_matched_by_source != "delete":
        raise InvalidArgument("by_source_filter is for when_not_matched_by_source 'delete'")
    # when_not_matched is always sent: absent, the server inserts (an upsert)
    merge: dict[str, Any] = {"when_matched": when_matched, "when_not_matched": when_not_matched}
    for key, value in (
        ("on", [on] if isinstance(on, str) else on),
        ("matched_condition", matched_condition),
        ("when_not_matched_by_source", when_not_matched_by_source),
        ("by_source_filter", by_source_filter),
        ("conflict_retries", conflict_retries),
    ):
        if value is not None:
            merge[key] = list(value) if key == "on" else value
    cmd: dict[str, Any] = {"dataset": dataset, "merge": merge}
    if idempotency_key is not None:
        cmd["idempotency_key"] = idempotency_key
    return cmd


def backfill_command(
    dataset: str, backfill: str = "add_columns", idempotency_key: str | None = None
) -> dict[str, Any]:
    """The JSON object of a backfill DoPut's CMD: rows naming their `_rowaddr` that add
    columns ("add_columns") or correct existing ones in place ("update_columns"), applied
    and committed at once (once per `idempotency_key`)."""
    if not isinstance(dataset, str) or not dataset:
        raise TypeError("dataset must be a non-empty string")
    if backfill not in BACKFILLS:
        raise InvalidArgument(f"backfill must be one of {', '.join(BACKFILLS)}, not {backfill!r}")
    cmd: dict[str, Any] = {"dataset": dataset, "backfill": backfill}
    if idempotency_key is not None:
        cmd["idempotency_key"] = idempotency_key
    return cmd


def json_bytes(value: Any) -> bytes:
    """The compact UTF-8 JSON the server reads."""
    return json.dumps(value, separators=(",", ":")).encode("utf-8")
