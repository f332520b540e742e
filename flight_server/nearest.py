"""Searches over Flight: a CMD descriptor's `nearest` object or `full_text_query`, and
DoExchange for batches of query vectors.

- GetFlightInfo / GetSchema with `{"dataset", "nearest": {"column", "q", "k", ...},
  "filter"?, "prefilter"?, "columns"?, "with_row_id"?, "limit"?, version...}` plan one
  endpoint whose signed ticket (kind `qn1`) carries the whole search, pinned to the resolved
  version; DoGet runs it (`format.dataset.nearest`): the rows ordered by `_distance`, then
  row id. A `q` that is a list of vectors answers each, with `query_index` first.
- GetFlightInfo / GetSchema with `{"dataset", "full_text_query": "text" | {"query",
  "columns"}, "fast_search"?, "filter"?, "prefilter"?, "columns"?, "limit"?, ...}` plan a
  full-text search the same way (`format.dataset.fulltext`): one endpoint, its ticket
  carrying the search, the rows best first with `_score`.
- DoExchange with such a descriptor but no `q` reads record batches of query vectors (one
  column: fixed-size list or list of numbers) and answers each batch as it arrives with the
  rows of its queries, `query_index` counting the vectors from the start of the stream.
- DoExchange with a descriptor that carries `q` answers that search at once, as DoGet would
  answer its ticket (one round trip instead of GetFlightInfo + DoGet; the latest version
  unless the descriptor names one); the client sends no batches and none are read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

from quiver.flight_server.errors import InvalidArgument, Unimplemented
from quiver.flight_server.handles import stamp
from quiver.flight_server.names import DatasetName, branch_of
from quiver.flight_server.protocol import (
    Fields,
    ReadRequest,
    parse_object,
    read_request_from_command,
)
from quiver.flight_server.tickets import Signer
from quiver.format.dataset import LanceDataset
from quiver.format.dataset.fulltext import FullTextSearch
from quiver.format.dataset.hybrid import HybridSearch
from quiver.format.dataset.nearest import NearestSearch
from quiver.format.dataset.search_filter import SearchFilter, filtered_search
from quiver.format.errors import LanceError
from quiver.wire.requests import NEAREST_KEYS, READ

NEAREST_KIND = "qn1"
# Query vectors one DoExchange batch may hold (each is answered with up to k rows).
MAX_EXCHANGE_QUERIES = 65_536
_EXCHANGE_HINT = (
    "DoExchange serves searches: send a CMD descriptor "
    '{"dataset", "nearest": {"column", "k", ...}} and record batches of query vectors, or '
    'a descriptor that holds the whole search ("nearest" with "q", or "full_text_query")'
)


def nearest_options(value: dict[str, Any], *, need_q: bool) -> dict[str, Any]:
    """The `nearest` object checked for shape (keys, types); the engine checks it against
    the dataset. `q` is required unless the vectors come by DoExchange (then refused)."""
    f = Fields(value, "CMD descriptor: 'nearest'", NEAREST_KEYS)
    out: dict[str, Any] = {"column": f.str("column", required=True)}
    q = value.get("q")
    if need_q:
        if q is None:
            raise InvalidArgument("CMD descriptor: 'nearest' needs 'q', the query vector")
        if not _numbers(q) and not (isinstance(q, list) and q and all(_numbers(v) for v in q)):
            raise InvalidArgument(
                "CMD descriptor: 'nearest.q' must be a list of numbers or a list of such lists"
            )
        out["q"] = np.asarray(q, dtype=np.float32)
    elif q is not None:
        raise InvalidArgument("DoExchange: the query vectors come as record batches, not 'q'")
    for key in ("k", "nprobes", "minimum_nprobes", "maximum_nprobes", "refine_factor", "ef"):
        value_ = f.int(key, minimum=0)
        if value_ is not None:
            out[key] = value_
    metric = f.str("metric")
    if metric is not None:
        out["metric"] = metric
    use_index = f.bool("use_index")
    if use_index is not None:
        out["use_index"] = use_index
    effort = f.number("search_effort", minimum=0)
    if effort is not None:
        out["search_effort"] = effort
    mode = f.str("approx_mode")
    if mode is not None:
        out["approx_mode"] = mode  # (the engine names the modes it takes)
    bounds = f.list("distance_range")
    if bounds is not None:
        if len(bounds) != 2 or not all(
            b is None or (isinstance(b, (int, float)) and not isinstance(b, bool)) for b in bounds
        ):
            raise InvalidArgument(
                "CMD descriptor: 'nearest.distance_range' must be [lower, upper], numbers or null"
            )
        out["distance_range"] = tuple(bounds)
    return out


def _numbers(v: Any) -> bool:
    """Whether `v` is a non-empty JSON list of numbers (bools are not numbers here)."""
    return isinstance(v, list) and bool(v) and set(map(type, v)) <= {int, float}


def _check_request(request: ReadRequest) -> None:
    what = "'nearest'" if request.nearest is not None else "'full_text_query'"
    if request.hybrid is not None and (request.nearest is None or request.full_text_query is None):
        raise InvalidArgument(
            "CMD descriptor: 'hybrid' goes with both 'nearest' and 'full_text_query'"
        )
    if request.search_filter is not None and request.hybrid is not None:
        raise InvalidArgument("CMD descriptor: 'search_filter' does not go with 'hybrid'")
    if request.search_filter is not None and isinstance(request.full_text_query, list):
        raise InvalidArgument("CMD descriptor: 'search_filter' does not go with a batch")
    if request.appended_since is not None:
        raise InvalidArgument(f"CMD descriptor: {what} cannot be combined with 'appended_since'")
    if request.max_rows_per_endpoint is not None:
        raise InvalidArgument(
            "CMD descriptor: a search is one endpoint; 'max_rows_per_endpoint' does not apply"
        )


def search_of(
    ds: LanceDataset, request: ReadRequest, nearest: dict[str, Any] | None
) -> NearestSearch | FullTextSearch | HybridSearch:
    """The engine's search for a request (raises on a bad column, vector, filter...)."""
    if request.search_filter is not None:
        return _filtered(ds, request, nearest)
    if request.full_text_query is not None and nearest is not None:
        return HybridSearch(
            ds.core,
            nearest,
            request.full_text_query,
            limit=request.limit,
            columns=list(request.columns) if request.columns is not None else None,
            filter=request.filter,
            prefilter=request.prefilter,
            with_row_id=request.with_row_id,
            **(request.hybrid or {}),
        )
    if request.full_text_query is not None:
        return FullTextSearch(
            ds.core,
            request.full_text_query,
            columns=list(request.columns) if request.columns is not None else None,
            filter=request.filter,
            prefilter=request.prefilter,
            with_row_id=request.with_row_id,
            limit=request.limit,
            fast_search=request.fast_search,
        )
    return NearestSearch(
        ds.core,
        nearest,
        columns=list(request.columns) if request.columns is not None else None,
        filter=request.filter,
        prefilter=request.prefilter,
        with_row_id=request.with_row_id,
    )


def _filtered(ds: LanceDataset, request: ReadRequest, nearest: dict[str, Any] | None) -> Any:
    """A search filtered by another (`format.dataset.search_filter`)."""
    assert request.search_filter is not None
    inner = request.search_filter
    vector = None
    if "nearest" in inner:
        vector = nearest_options(inner["nearest"], need_q=True)
    search = SearchFilter(request.filter, inner.get("full_text_query"), vector)
    return filtered_search(
        ds.core, search, columns=list(request.columns) if request.columns is not None else None,
        nearest=nearest, full_text_query=request.full_text_query, prefilter=request.prefilter,
        limit=request.limit, offset=None, fast_search=request.fast_search,
        with_row_id=request.with_row_id, with_row_address=False, autoproject=True, mask=None,
    )  # fmt: skip


@dataclass(frozen=True)
class NearestTicket:
    """One nearest-neighbour search, pinned to a version (DoGet's ticket of kind qn1)."""

    dataset: str
    version: int
    stamp: int | None
    nearest: dict[str, Any]  # q as nested lists
    columns: tuple[str, ...] | None
    filter: str | None
    prefilter: bool
    with_row_id: bool
    limit: int | None
    expires: int | None
    full_text: str | dict[str, Any] | list[Any] | None = None  # a full-text search instead
    fast_search: bool = False
    hybrid: dict[str, Any] | None = None
    search_filter: dict[str, Any] | None = None  # a search filtering this one (as asked)
    token: bytes = b""  # the signed bytes it was decoded from (not signed itself)
    fragment_id = None  # for the access log: a search reads every fragment

    def encode(self, signer: Signer) -> bytes:
        """The signed ticket bytes."""
        payload = {
            "d": self.dataset,
            "v": self.version,
            "t": self.stamp,
            "n": self.nearest,
            "c": list(self.columns) if self.columns is not None else None,
            "q": self.filter,
            "p": self.prefilter,
            "i": self.with_row_id,
            "l": self.limit,
            "e": self.expires,
            **branch_of(self.dataset),
        }
        if self.full_text is not None:
            payload["f"] = self.full_text
            payload["s"] = self.fast_search
        if self.hybrid is not None:
            payload["h"] = self.hybrid
        if self.search_filter is not None:
            payload["g"] = self.search_filter
        return signer.sign(NEAREST_KIND, payload).encode("ascii")

    @classmethod
    def decode(cls, signer: Signer, token: bytes) -> NearestTicket:
        """Verify and parse; InvalidArgument if forged, altered, malformed or expired."""
        p = signer.verify(NEAREST_KIND, token)
        try:
            t = cls(
                dataset=DatasetName(str(p["d"]), p.get("b")),
                version=int(p["v"]),
                stamp=None if p["t"] is None else int(p["t"]),
                nearest=dict(p["n"]),
                columns=None if p["c"] is None else tuple(str(c) for c in p["c"]),
                filter=None if p["q"] is None else str(p["q"]),
                prefilter=bool(p["p"]),
                with_row_id=bool(p["i"]),
                limit=None if p["l"] is None else int(p["l"]),
                expires=None if p["e"] is None else int(p["e"]),
                full_text=p.get("f"),
                fast_search=bool(p.get("s", False)),
                hybrid=p.get("h"),
                search_filter=p.get("g"),
                token=bytes(token),
            )
            if t.full_text is not None and not isinstance(t.full_text, (str, dict, list)):
                raise ValueError
        except (KeyError, TypeError, ValueError):
            raise InvalidArgument("invalid ticket: malformed payload") from None
        if t.expires is not None and time.time() > t.expires:
            raise InvalidArgument("ticket expired: call GetFlightInfo again for fresh tickets")
        return t

    def request(self) -> ReadRequest:
        """The read request this ticket replays."""
        return ReadRequest(
            dataset=self.dataset,
            columns=self.columns,
            filter=self.filter,
            limit=self.limit,
            with_row_id=self.with_row_id,
            prefilter=self.prefilter,
            full_text_query=self.full_text,
            fast_search=self.fast_search,
            hybrid=self.hybrid,
            search_filter=self.search_filter,
        )


def is_nearest_ticket(token: bytes) -> bool:
    """Whether a ticket is a nearest-neighbour search's (by its kind)."""
    return bytes(token[: len(NEAREST_KIND) + 1]) == f"{NEAREST_KIND}.".encode()


def nearest_schema(reads: Any, request: ReadRequest) -> pa.Schema:
    """The schema DoGet will stream for a nearest request (`reads`: flight_server.reads)."""
    _check_request(request)
    ds = reads.open(request)
    return search_of(ds, request, _options(request)).schema


def _options(request: ReadRequest) -> dict[str, Any] | None:
    """A nearest search's checked options (None for a full-text search)."""
    if request.nearest is None:
        return None
    return nearest_options(request.nearest, need_q=True)


@dataclass(frozen=True)
class NearestPlan:
    """GetFlightInfo's answer to a nearest request: one endpoint, its ticket and schema."""

    version: int
    schema: pa.Schema
    ticket: bytes
    expires: int | None


def plan_nearest(reads: Any, request: ReadRequest) -> NearestPlan:
    """The checked search, in a ticket pinned to the resolved version; the search built to
    check it is kept for the ticket's DoGet (`flight_server.planned`)."""
    _check_request(request)
    ds = reads.open(request)
    options = _options(request)
    search = search_of(ds, request, options)  # raises on anything the engine refuses
    expires = int(time.time()) + reads.ticket_ttl if reads.ticket_ttl else None
    if options is not None:  # the search keeps its own options
        options = {**options, "q": options["q"].tolist()}
    ticket = NearestTicket(
        dataset=request.dataset,
        version=ds.version,
        stamp=stamp(ds),
        nearest=options or {},
        columns=request.columns,
        filter=request.filter,
        prefilter=request.prefilter,
        with_row_id=request.with_row_id,
        limit=request.limit,
        expires=expires,
        full_text=request.full_text_query,
        fast_search=request.fast_search,
        hybrid=request.hybrid,
        search_filter=request.search_filter,
    ).encode(reads.signer)
    reads.planned.put(ticket, search)
    return NearestPlan(ds.version, search.schema, ticket, expires)


def read_nearest(reads: Any, t: NearestTicket) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The schema and batches of a nearest ticket (its search as GetFlightInfo built it when
    that is at hand, `flight_server.planned`); the search runs when they are pulled."""
    ds = reads.open_pinned(t.dataset, t.version, t.stamp)  # still there
    search = reads.planned.take(t.token)  # the search its GetFlightInfo built, if kept
    if search is None:
        nearest = None
        if t.nearest:
            nearest = dict(t.nearest)
            nearest["q"] = np.asarray(nearest.get("q"), dtype=np.float32)
        search = search_of(ds, t.request(), nearest)

    def batches() -> Iterator[pa.RecordBatch]:
        yield from _answer(search, t.limit).to_batches()

    return search.schema, batches()


# -- DoExchange ---------------------------------------------------------------------------
def exchange_request(descriptor: flight.FlightDescriptor) -> ReadRequest:
    """The read request of a DoExchange; Unimplemented for anything but a nearest search."""
    if descriptor.descriptor_type != flight.DescriptorType.CMD:
        raise Unimplemented(_EXCHANGE_HINT)
    try:
        request = read_request_from_command(descriptor.command)
    except InvalidArgument:
        # parsed a second time only to tell a bad search from a command that is none
        try:
            doc = parse_object(descriptor.command, "DoExchange command")
        except InvalidArgument:
            raise Unimplemented(_EXCHANGE_HINT) from None
        if "nearest" not in doc and "full_text_query" not in doc:
            raise Unimplemented(_EXCHANGE_HINT) from None
        raise
    if request.nearest is None and request.full_text_query is None:
        raise Unimplemented(_EXCHANGE_HINT)
    _check_request(request)
    if request.limit is not None and request.nearest is not None and "q" not in request.nearest:
        raise InvalidArgument("DoExchange: 'limit' does not apply to batched searches (use k)")
    if (
        request.search_filter is not None
        and request.nearest is not None
        and ("q" not in request.nearest)
    ):
        raise InvalidArgument("DoExchange: 'search_filter' does not go with batched searches")
    return request


def query_vectors(batch: pa.RecordBatch, dim: int, seen: int) -> np.ndarray:
    """The query vectors of one uploaded batch as an (n, dim) float32 matrix."""
    if batch.num_columns != 1:
        raise InvalidArgument(
            f"DoExchange: each batch must have one column of query vectors, not {batch.num_columns}"
        )
    col = batch.column(0)
    kind = col.type
    if not (pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind)) or not (
        pa.types.is_floating(kind.value_type) or pa.types.is_integer(kind.value_type)
    ):
        raise InvalidArgument(f"DoExchange: query vectors must be lists of numbers, not {kind}")
    if col.null_count:
        first = int(np.flatnonzero(~np.asarray(col.is_valid()))[0])
        raise InvalidArgument(f"DoExchange: query vector {seen + first} is null")
    if batch.num_rows > MAX_EXCHANGE_QUERIES:
        raise InvalidArgument(
            f"DoExchange: a batch of {batch.num_rows} query vectors is over the limit of "
            f"{MAX_EXCHANGE_QUERIES}; send them in smaller batches"
        )
    if pa.types.is_list(kind):
        lengths = np.asarray(col.value_lengths())
        bad = np.flatnonzero(lengths != dim)
        if len(bad):
            raise InvalidArgument(
                f"DoExchange: query vector {seen + int(bad[0])} has {int(lengths[bad[0]])} "
                f"values, the column {dim}"
            )
        values = col.flatten()
    else:
        if kind.list_size != dim:
            raise InvalidArgument(
                f"DoExchange: query vectors have {kind.list_size} values, the column {dim}"
            )
        values = col.flatten()
    if values.null_count:
        raise InvalidArgument("DoExchange: a query vector holds a null value")
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(-1, dim)


def exchange(
    service: Any,
    call: Any,
    descriptor: flight.FlightDescriptor,
    reader: flight.MetadataRecordBatchReader,
    writer: flight.MetadataRecordBatchWriter,
) -> None:
    """Answer a stream of query-vector batches with their nearest rows, batch by batch
    (`service`: the DatasetService, `call`: the server's call record)."""
    request = exchange_request(descriptor)
    call.dataset = request.dataset
    service.handles.uri(request.dataset)
    service.authorize(call.identity, request.dataset, READ)
    ds = service.reads.open(request)
    call.version = ds.version
    if request.nearest is None or "q" in request.nearest:  # the whole search in the descriptor
        search = search_of(ds, request, _options(request))
        table = _answer(search, request.limit)
        writer.begin(search.schema)
        writer.write_table(table)
        call.rows = table.num_rows
        return
    options = nearest_options(request.nearest, need_q=False)
    vector = _vector(ds, options)
    dim = vector.list_size if vector is not None else 0
    search = search_of(ds, request, {**options, "q": np.zeros((1, dim), np.float32)})
    writer.begin(search.schema)
    seen = rows = 0
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        if chunk.data is None or not chunk.data.num_rows:
            continue
        queries = query_vectors(chunk.data, dim, seen)
        table = search.run(queries)
        if seen:
            index = pc.add(table.column(0), np.int32(seen))
            table = table.set_column(0, table.schema.field(0), index)
        writer.write_table(table)
        seen += len(queries)
        rows += table.num_rows
    call.rows = rows


def _answer(search: NearestSearch | FullTextSearch | HybridSearch, limit: int | None) -> pa.Table:
    """A search's rows, at most `limit` (a batch of text queries: `limit` each, as planned)."""
    table = search.to_table()
    if limit is not None and not getattr(search, "batch", False):
        table = table.slice(0, limit)
    return table


def _vector(ds: LanceDataset, options: dict[str, Any]) -> pa.FixedSizeListType | None:
    """The type of the named column (a field nested in structs by its path) when it is a
    fixed-size list; None otherwise (the engine says what else is wrong)."""
    try:
        field = ds.core.lance_schema.field_at(options["column"])
    except LanceError:
        return None
    kind = field.to_arrow().type
    return kind if pa.types.is_fixed_size_list(kind) else None
