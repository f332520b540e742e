"""The JSON side of the Flight contract: strict objects, descriptors and DoPut commands.

Every JSON document a client sends (CMD descriptors, action bodies) must be one UTF-8
object; duplicate keys, unknown keys, wrong types, NaN/Infinity (and numbers too large for
a double, such as 1e999), integers outside int64 and strings with lone UTF-16 surrogates
are `InvalidArgument`.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from quiver.flight_server.errors import InvalidArgument
from quiver.flight_server.names import name_from_path, on_branch
from quiver.flight_server.staging import valid_job
from quiver.wire.requests import (
    BACKFILLS,
    BLOB_HANDLING,
    MERGE_KEYS,
    PUT_KEYS,
    PUT_MODES,
    READ_KEYS,
    WHEN_MATCHED,
)

MAX_JSON_BYTES = 256 << 20
MAX_INT = (1 << 63) - 1
MAX_NUMBER = sys.float_info.max
# Every ticket carries its read's filter, and tickets are at most tickets.MAX_TOKEN_BYTES.
MAX_FILTER_BYTES = 256 << 10


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise InvalidArgument(f"duplicate key {k!r}")
        out[k] = v
    return out


def _no_constants(token: str) -> Any:
    raise InvalidArgument(f"{token} is not valid JSON")


def _finite(text: str) -> float:
    value = float(text)
    if value in (math.inf, -math.inf):
        raise InvalidArgument(f"number {text[:40]} is too large")
    return value


# One decoder and encoder for every request (json.loads and json.dumps build new ones per
# call when given options).
_decode = json.JSONDecoder(
    object_pairs_hook=_no_duplicates, parse_constant=_no_constants, parse_float=_finite
).decode
_encode_unicode = json.JSONEncoder(ensure_ascii=False).encode


def parse_object(data: bytes | str | None, what: str, *, empty_ok: bool = False) -> dict[str, Any]:
    """Decode one JSON object; an empty body is `{}` only when `empty_ok`."""
    if data is None or (isinstance(data, (bytes, str)) and not data.strip()):
        if empty_ok:
            return {}
        raise InvalidArgument(f"{what}: expected a JSON object, got an empty body")
    if len(data) > MAX_JSON_BYTES:
        raise InvalidArgument(f"{what}: body larger than {MAX_JSON_BYTES} bytes")
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument(f"{what}: body is not UTF-8") from None
    try:
        doc = _decode(data)
    except InvalidArgument as e:
        raise InvalidArgument(f"{what}: {e}") from None
    except (ValueError, RecursionError) as e:
        msg = e.msg if isinstance(e, json.JSONDecodeError) else "cannot parse"
        raise InvalidArgument(f"{what}: malformed JSON ({msg})") from None
    if not isinstance(doc, dict):
        raise InvalidArgument(f"{what}: expected a JSON object, got {type(doc).__name__}")
    try:
        _encode_unicode(doc).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"{what}: a string holds a lone UTF-16 surrogate (\\ud800...)"
        ) from None
    return doc


class Fields:
    """Typed access to a JSON object whose keys must all be among `allowed`."""

    def __init__(self, doc: dict[str, Any], what: str, allowed: Collection[str]) -> None:
        unknown = sorted(set(doc) - set(allowed))
        if unknown:
            raise InvalidArgument(
                f"{what}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})"
            )
        self.doc = doc
        self.what = what

    def has(self, key: str) -> bool:
        """Whether the key is present and not null."""
        return self.doc.get(key) is not None

    def _get(self, key: str, required: bool) -> Any:
        value = self.doc.get(key)
        if value is None and required:
            raise InvalidArgument(f"{self.what}: missing {key!r}")
        return value

    def _bad(self, key: str, expected: str) -> InvalidArgument:
        return InvalidArgument(f"{self.what}: {key!r} must be {expected}")

    def str(self, key: str, *, required: bool = False, nonempty: bool = True) -> Any:
        """A string (or None when absent)."""
        value = self._get(key, required)
        if value is not None and (not isinstance(value, str) or (nonempty and not value)):
            raise self._bad(key, "a non-empty string" if nonempty else "a string")
        return value

    def int(
        self,
        key: str,
        *,
        required: bool = False,
        minimum: int | None = None,
        maximum: int = MAX_INT,
    ) -> Any:
        """An integer (booleans refused), optionally bounded below; at most `maximum`."""
        value = self._get(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(key, "an integer")
        if minimum is not None and value < minimum:
            raise self._bad(key, f"an integer >= {minimum}")
        if value > maximum:
            raise self._bad(key, f"an integer <= {maximum}")
        return value

    def number(self, key: str, *, minimum: float | None = None, maximum: float = MAX_NUMBER) -> Any:
        """A JSON number, optionally bounded below; at most `maximum` (and a double)."""
        value = self._get(key, False)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._bad(key, "a number")
        if minimum is not None and value < minimum:
            raise self._bad(key, f"a number >= {minimum}")
        if value > maximum or value < -MAX_NUMBER:  # big JSON integers do not fit a double
            raise self._bad(key, f"a number <= {maximum:g}")
        return value

    def bool(self, key: str, *, default: bool | None = None) -> Any:
        """A boolean, or `default` when absent."""
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._bad(key, "true or false")
        return value

    def str_list(self, key: str, *, required: bool = False, nonempty: bool = False) -> Any:
        """A list of non-empty strings."""
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self._bad(key, "a list of non-empty strings")
        if nonempty and not value:
            raise self._bad(key, "a non-empty list")
        return value

    def obj(self, key: str, *, required: bool = False) -> Any:
        """A JSON object."""
        value = self._get(key, required)
        if value is not None and not isinstance(value, dict):
            raise self._bad(key, "a JSON object")
        return value

    def list(self, key: str, *, required: bool = False) -> Any:
        """A JSON array."""
        value = self._get(key, required)
        if value is not None and not isinstance(value, list):
            raise self._bad(key, "a JSON array")
        return value

    def dataset(self) -> str:
        """The required, validated "dataset" name, on the "branch" the body names (where
        a branch is allowed)."""
        return on_branch(self.str("dataset", required=True), self.doc.get("branch"))


# -- reads ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReadRequest:
    """What a descriptor asks to read: a dataset at a version, projected and filtered."""

    dataset: str
    version: int | None = None
    tag: str | None = None
    as_of: str | None = None
    columns: tuple[str, ...] | None = None
    filter: str | None = None
    limit: int | None = None
    with_row_id: bool = False
    max_rows_per_endpoint: int | None = None  # None: the server's setting
    # only the rows appended after this version, each endpoint pinned to the appending one
    appended_since: int | None = None
    # a nearest-neighbour search (checked by flight_server.nearest), the filter first if prefilter
    nearest: dict[str, Any] | None = None
    prefilter: bool = False
    # a full-text search (string or {"query", "columns"}, checked by the engine)
    full_text_query: str | dict[str, Any] | list[Any] | None = None
    fast_search: bool = False
    hybrid: dict[str, Any] | None = None  # fusion options when both searches are asked
    # a search filtering the search: {"full_text_query": q} or {"nearest": {...}}
    search_filter: dict[str, Any] | None = None
    blob_handling: str | None = None  # "all_binary": blob columns as bytes

    @property
    def search(self) -> bool:
        """Whether this is a search (one endpoint: `flight_server.nearest`), not a scan."""
        return self.nearest is not None or self.full_text_query is not None

    def ref(self) -> dict[str, Any]:
        """The version reference as given (for messages and logs)."""
        return {
            k: v
            for k, v in (("version", self.version), ("tag", self.tag), ("as_of", self.as_of))
            if v is not None
        }


def version_ref(f: Fields) -> tuple[int | None, str | None, str | None]:
    """The optional, mutually exclusive "version" / "tag" / "as_of" of a body."""
    version = f.int("version", minimum=1)
    tag = f.str("tag")
    as_of = f.str("as_of")
    if sum(x is not None for x in (version, tag, as_of)) > 1:
        raise InvalidArgument(f"{f.what}: give at most one of 'version', 'tag' and 'as_of'")
    return version, tag, as_of


def read_request_from_command(cmd: bytes) -> ReadRequest:
    """Parse a CMD descriptor: the JSON object of DESIGN.md §3.

    `"appended_since": v` (with the usual version/tag/as_of as the upper end `w`, default
    the latest) asks for the rows that append commits added in versions (v, w] instead of
    the whole version: one endpoint per appended fragment, each pinned to the version that
    appended it (see `format.dataset.changes`); it cannot be combined with `limit`.
    """
    f = Fields(parse_object(cmd, "CMD descriptor"), "CMD descriptor", READ_KEYS)
    name = f.dataset()
    version, tag, as_of = version_ref(f)
    columns = f.str_list("columns")
    if columns is not None and len(set(columns)) != len(columns):
        raise InvalidArgument("CMD descriptor: 'columns' names a column twice")
    filt = f.str("filter")
    size = len(filt.encode()) if filt is not None else 0  # no lone surrogates: parse_object
    if size > MAX_FILTER_BYTES:
        raise InvalidArgument(
            f"CMD descriptor: 'filter' is {size} bytes; filters are limited to "
            f"{MAX_FILTER_BYTES} bytes (every ticket carries its filter)"
        )
    since = f.int("appended_since", minimum=0)
    if since is not None and f.has("limit"):
        raise InvalidArgument("CMD descriptor: 'appended_since' cannot be combined with 'limit'")
    return ReadRequest(
        dataset=name,
        version=version,
        tag=tag,
        as_of=as_of,
        columns=tuple(columns) if columns is not None else None,
        filter=filt if filt is None or filt.strip() else None,
        limit=f.int("limit", minimum=0),
        with_row_id=f.bool("with_row_id", default=False),
        max_rows_per_endpoint=f.int("max_rows_per_endpoint", minimum=1),
        appended_since=since,
        nearest=f.obj("nearest"),
        prefilter=f.bool("prefilter", default=False),
        full_text_query=_full_text(f),
        fast_search=f.bool("fast_search", default=False),
        hybrid=f.obj("hybrid"),
        search_filter=_search_filter(f),
        blob_handling=_blob_handling(f),
    )


def _search_filter(f: Fields) -> dict[str, Any] | None:
    """A CMD descriptor's `search_filter`: `{"full_text_query": q}` (a string or a structured
    query) filtering a vector search, or `{"nearest": {...}}` a full-text search."""
    value = f.obj("search_filter")
    if value is None:
        return None
    keys = sorted(value)
    text = keys == ["full_text_query"] and isinstance(value["full_text_query"], (str, dict))
    vector = keys == ["nearest"] and isinstance(value["nearest"], dict)
    if not (text or vector):
        raise InvalidArgument(
            'CMD descriptor: \'search_filter\' is {"full_text_query": query} or {"nearest": {...}}'
        )
    if not f.has("nearest") and not f.has("full_text_query"):
        raise InvalidArgument(
            "CMD descriptor: 'search_filter' filters a search: give 'nearest' or "
            "'full_text_query' too"
        )
    return value


def _blob_handling(f: Fields) -> str | None:
    value = f.str("blob_handling")
    if value is not None and value not in BLOB_HANDLING:
        raise InvalidArgument(
            f"CMD descriptor: 'blob_handling' must be one of {', '.join(BLOB_HANDLING)}"
        )
    if value == "all_binary" and (f.has("nearest") or f.has("full_text_query")):
        raise InvalidArgument(
            "CMD descriptor: 'blob_handling' all_binary applies to scans, not to searches"
        )
    return None if value == "blobs_descriptions" else value


# Text queries one batch (a `full_text_query` list) may hold.
MAX_TEXT_QUERIES = 10_000


def _full_text(f: Fields) -> str | dict[str, Any] | list[Any] | None:
    """A CMD descriptor's `full_text_query`: a string, {"query", "columns"} or a structured
    query; or a batch of those, as a list."""
    if not f.has("full_text_query"):
        return None
    value = f.doc["full_text_query"]
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        if not value or len(value) > MAX_TEXT_QUERIES:
            raise InvalidArgument(
                "CMD descriptor: a batch of 'full_text_query' holds 1 to "
                f"{MAX_TEXT_QUERIES} queries, not {len(value)}"
            )
        for i, q in enumerate(value):
            if not isinstance(q, (str, dict)):
                raise InvalidArgument(
                    f"CMD descriptor: 'full_text_query' item {i} must be a string or a JSON object"
                )
        return value
    return f.obj("full_text_query")


def read_request_from_path(path: Sequence[bytes | str]) -> ReadRequest:
    """Parse a PATH descriptor: the dataset name (elements joined by '/'), latest version."""
    return ReadRequest(dataset=name_from_path(path))


# -- writes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PutRequest:
    """A DoPut: where the rows go and whether to commit them now."""

    dataset: str
    mode: str = "append"
    commit: bool = True
    job: str | None = None  # staging only: groups the puts one commit or abort settles
    merge: MergeRequest | None = None  # a merge of the rows into the dataset
    backfill: str | None = None  # add_columns / update_columns by the rows' _rowaddr
    idempotency_key: str | None = None  # a committing put repeated with it commits once


@dataclass(frozen=True)
class MergeRequest:
    """A merge DoPut's clauses (`wire.requests.merge_command`), checked."""

    on: tuple[str, ...] | None
    when_matched: str = "update_all"
    matched_condition: str | None = None
    insert: bool = True
    delete_by_source: bool = False
    by_source_filter: str | None = None
    conflict_retries: int = 10


def merge_request(doc: Any, what: str = "DoPut command: 'merge'") -> MergeRequest:
    """A merge's clauses (a merge DoPut's or an apply_staged body's 'merge'), checked."""
    if not isinstance(doc, dict):
        raise InvalidArgument(f"{what} must be an object")
    f = Fields(doc, what, MERGE_KEYS)
    on = doc.get("on")
    if on is not None and (
        not isinstance(on, list) or not on or not all(isinstance(k, str) and k for k in on)
    ):
        raise InvalidArgument(f"{what}: 'on' must be a non-empty list of column names")
    when_matched = f.str("when_matched") or "update_all"
    if when_matched not in WHEN_MATCHED:
        raise InvalidArgument(f"{what}: 'when_matched' must be one of {', '.join(WHEN_MATCHED)}")
    insert = doc.get("when_not_matched", "insert_all")  # upsert unless told otherwise
    if insert not in (None, "insert_all"):
        raise InvalidArgument(f"{what}: 'when_not_matched' must be 'insert_all' or null")
    by_source = doc.get("when_not_matched_by_source")
    if by_source not in (None, "delete"):
        raise InvalidArgument(f"{what}: 'when_not_matched_by_source' must be 'delete' or absent")
    retries = f.int("conflict_retries", minimum=0)
    if doc.get("matched_condition") is not None and when_matched != "update_all":
        raise InvalidArgument(f"{what}: 'matched_condition' is for when_matched 'update_all'")
    if doc.get("by_source_filter") is not None and by_source != "delete":
        raise InvalidArgument(
            f"{what}: 'by_source_filter' is for when_not_matched_by_source 'delete'"
        )
    return MergeRequest(
        on=tuple(on) if on else None,
        when_matched=when_matched,
        matched_condition=f.str("matched_condition"),
        insert=insert == "insert_all",
        delete_by_source=by_source == "delete",
        by_source_filter=f.str("by_source_filter"),
        conflict_retries=10 if retries is None else retries,
    )


def job_field(f: Fields) -> str | None:
    """The optional staging `job` key: a name of letters, digits, '_', '.', '-'."""
    job = f.str("job")
    if job is not None and not valid_job(job):
        raise InvalidArgument(
            f"{f.what}: 'job' must be 1-128 letters, digits, '_', '.' or '-' "
            "starting with a letter or digit"
        )
    return job


MAX_IDEMPOTENCY_KEY = 256


def put_request_from_command(cmd: bytes) -> PutRequest:
    """Parse a DoPut CMD: {"dataset", "mode": append|create|overwrite, "commit"?: bool,
    "job"?: str}, or {"dataset", "merge": {...}} (see `wire.requests.merge_command`)."""
    f = Fields(parse_object(cmd, "DoPut command"), "DoPut command", PUT_KEYS)
    name = f.dataset()
    if "backfill" in f.doc:
        backfill = f.str("backfill", required=True)
        if backfill not in BACKFILLS:
            raise InvalidArgument(
                f"DoPut command: 'backfill' must be one of {', '.join(BACKFILLS)}"
            )
        if not set(f.doc) <= {"dataset", "branch", "backfill", "idempotency_key"}:
            raise InvalidArgument(
                "DoPut command: a backfill commits at once; it takes only 'dataset', "
                "'backfill' and 'idempotency_key'"
            )
        return PutRequest(name, "backfill", True, None, None, backfill, idempotency_key(f))
    if "merge" in f.doc:
        if "mode" in f.doc or "job" in f.doc or not f.bool("commit", default=True):
            raise InvalidArgument(
                "DoPut command: a merge commits at once; it takes no 'mode', 'commit' or 'job'"
            )
        return PutRequest(
            name,
            "merge",
            True,
            None,
            merge_request(f.doc["merge"]),
            idempotency_key=idempotency_key(f),
        )
    mode = f.str("mode") or "append"
    if mode not in PUT_MODES:
        raise InvalidArgument(f"DoPut command: 'mode' must be one of {', '.join(PUT_MODES)}")
    commit = f.bool("commit", default=True)
    if mode == "source" and commit:
        raise InvalidArgument(
            "DoPut command: mode 'source' stages the rows of a change ('commit': false)"
        )
    job = job_field(f)
    if job is not None and commit:
        raise InvalidArgument("DoPut command: 'job' is for staging puts ('commit': false)")
    key = idempotency_key(f)
    if key is not None and not commit:
        raise InvalidArgument(
            "DoPut command: 'idempotency_key' is for committing puts; a staged put's "
            "key goes with its commit action"
        )
    return PutRequest(name, mode, commit, job, idempotency_key=key)


def idempotency_key(f: Fields) -> str | None:
    """A DoPut's or an action's idempotency key, checked."""
    key = f.str("idempotency_key")
    if key is not None and not 0 < len(key) <= MAX_IDEMPOTENCY_KEY:
        raise InvalidArgument(
            f"{f.what}: 'idempotency_key' must be 1 to {MAX_IDEMPOTENCY_KEY} characters"
        )
    return key


def put_request_from_path(path: Sequence[bytes | str]) -> PutRequest:
    """A PATH DoPut appends (creating the dataset if needed) and commits."""
    return PutRequest(name_from_path(path))
