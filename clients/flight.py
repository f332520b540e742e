"""A typed Python client of the Quiver Flight server, a thin layer over `pyarrow.flight`.

```python
from quiver.clients import Client, CommitConflict

with Client("grpc://127.0.0.1:8815") as qc:
    qc.datasets()                                   # ["demo", ...]
    qc.read("demo", columns=["id", "x"], filter="x > 5", version=3)  # pyarrow.Table
    qc.write("demo", table, mode="append")          # {"version": 4, "rows": 1000}
    frags = qc.stage("demo", more)                  # written, not visible
    qc.commit("demo", frags, idempotency_key="job-17")
```

Reads ask the server for one `FlightInfo` (one endpoint per fragment, every ticket pinned to
the same version) and fetch the endpoints in parallel threads, keeping their order in the
result. Each endpoint's locations are tried in order; the client opens a connection to a
location it has not seen before with the same TLS settings and credentials. Every failed
call raises a subclass of `clients.errors.QuiverError` chosen by the server's error code.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any, TypeAlias, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from quiver.clients import nearest as _nearest
from quiver.clients.blobs import Blobs
from quiver.clients.changes import RowChanges
from quiver.clients.data import DataLike, conform, to_batches
from quiver.clients.errors import (
    QuiverError,
    Unauthenticated,
    Unavailable,
    from_flight_error,
    server_message,
)
from quiver.clients.indices import IndexActions
from quiver.clients.progress import Progress
from quiver.clients.writes import Writes
from quiver.wire.requests import BRANCHED_ACTIONS, put_command, read_command
from quiver.wire.requests import json_bytes as _json_bytes

__all__ = ["Client", "DataLike", "put_command", "read_command", "read_descriptor"]

T = TypeVar("T")
PemLike: TypeAlias = "bytes | str | os.PathLike[str]"

REUSE_CONNECTION = "arrow-flight-reuse-connection://?"


# ---------------------------------------------------------------------------------------------
# Descriptors and command bodies (their shapes are the wire contract's: `wire.requests`)


def read_descriptor(dataset: str, **options: Any) -> flight.FlightDescriptor:
    """The CMD descriptor of a read of `dataset` (options as in `read_command`)."""
    return flight.FlightDescriptor.for_command(_json_bytes(read_command(dataset, **options)))


def _parse_json(raw: bytes | pa.Buffer | None, what: str) -> Any:
    if raw is None:
        return None
    data = raw.to_pybytes() if isinstance(raw, pa.Buffer) else bytes(raw)
    if not data:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise QuiverError(f"the server answered {what} with something other than JSON") from e


def _pem(value: PemLike | None) -> bytes | None:
    """PEM bytes from bytes, PEM text, or the path of a PEM file."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, str) and "-----BEGIN" in value:
        return value.encode("ascii")
    with open(os.fspath(value), "rb") as f:
        return f.read()


def _normalize_uri(uri: str | flight.Location) -> str:
    if isinstance(uri, flight.Location):
        raw = uri.uri
        return raw.decode() if isinstance(raw, bytes) else str(raw)
    if "://" not in uri:
        return f"grpc://{uri}"
    return uri


def _dataset_name(descriptor: flight.FlightDescriptor) -> str | None:
    if descriptor.descriptor_type == flight.DescriptorType.PATH:
        parts = [p.decode() if isinstance(p, bytes) else str(p) for p in descriptor.path or []]
        return "/".join(parts) or None
    cmd = _parse_json(descriptor.command, "ListFlights")
    if isinstance(cmd, dict) and isinstance(cmd.get("dataset"), str):
        return cmd["dataset"]
    return None


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """Turn the exceptions of a Flight call into `QuiverError`s."""
    try:
        yield
    except QuiverError:
        raise
    except pa.ArrowException as e:  # FlightError and the Arrow errors a call can raise
        raise from_flight_error(e) from e


# ---------------------------------------------------------------------------------------------
# The client


class Client(Writes, RowChanges, IndexActions, _nearest.Searches, Blobs):
    """A connection to a Quiver Flight server.

    `uri` is `grpc://host:port` or `grpc+tls://host:port` (a bare `host:port` means
    `grpc://`). Give either a bearer `token`, or `username` and `password` (exchanged once
    for a bearer token through the Basic → Bearer handshake); the token goes with every
    call. `tls_root_certs`, `cert_chain` and `private_key` are PEM bytes, PEM text or paths
    of PEM files (the last two for mutual TLS). `timeout` (seconds) bounds every call.
    """

    def __init__(
        self,
        uri: str | flight.Location,
        *,
        token: str | None = None,
        username: str | None = None,
        password: str | None = None,
        tls_root_certs: PemLike | None = None,
        cert_chain: PemLike | None = None,
        private_key: PemLike | None = None,
        timeout: float | None = None,
    ) -> None:
        if token is not None and (username is not None or password is not None):
            raise ValueError("give either token, or username and password, not both")
        if (username is None) != (password is None):
            raise ValueError("username and password go together")
        if (cert_chain is None) != (private_key is None):
            raise ValueError("cert_chain and private_key go together (mutual TLS)")
        self.uri = _normalize_uri(uri)
        self.timeout = timeout
        self._tls_root_certs = _pem(tls_root_certs)
        self._cert_chain = _pem(cert_chain)
        self._private_key = _pem(private_key)
        self._username = username
        self._password = password
        self._token_header: tuple[bytes, bytes] | None = None
        if token is not None:
            value = token if token.lower().startswith("bearer ") else f"Bearer {token}"
            self._token_header = (b"authorization", value.encode("utf-8"))
        self._lock = threading.Lock()
        self._branch: str | None = None  # see `branch`
        self._clients: dict[str, flight.FlightClient] = {}
        self._headers: dict[str, list[tuple[bytes, bytes]]] = {}
        self._closed = False
        self._client = self._connection(self.uri)

    # -- connections ------------------------------------------------------------------------

    def _connect(self, uri: str) -> tuple[flight.FlightClient, list[tuple[bytes, bytes]]]:
        with _translated():
            client = flight.FlightClient(
                uri,
                tls_root_certs=self._tls_root_certs,
                cert_chain=self._cert_chain,
                private_key=self._private_key,
            )
        if self._token_header is not None:
            return client, [self._token_header]
        if self._username is None:
            return client, []
        try:
            return client, self._basic_to_bearer(uri, client)
        except BaseException:
            client.close()
            raise

    def _basic_to_bearer(self, uri: str, client: flight.FlightClient) -> list[tuple[bytes, bytes]]:
        """Exchange username and password for a bearer token header (Handshake)."""
        try:
            key, value = client.authenticate_basic_token(
                self._username or "",
                self._password or "",
                flight.FlightCallOptions(timeout=self.timeout),
            )
        except pa.ArrowException as e:
            if isinstance(e, flight.FlightInternalError) and not e.extra_info:
                # what pyarrow raises when the handshake finds nobody listening
                raise Unavailable(f"cannot reach {uri}: {server_message(str(e))}") from e
            raise from_flight_error(e) from e
        return [(key, value)]

    def _connection(self, uri: str) -> flight.FlightClient:
        """The client for `uri`, connecting (and authenticating) on first use."""
        with self._lock:
            if self._closed:
                raise QuiverError("the client is closed", code="closed")
            client = self._clients.get(uri)
            if client is not None:
                return client
            client, headers = self._connect(uri)
            self._clients[uri] = client
            self._headers[uri] = headers
            return client

    def _options(self, uri: str | None = None) -> flight.FlightCallOptions:
        headers = self._headers.get(uri or self.uri, [])
        return flight.FlightCallOptions(timeout=self.timeout, headers=headers)

    def _rpc(
        self,
        call: Callable[[flight.FlightClient, flight.FlightCallOptions], T],
        uri: str | None = None,
    ) -> T:
        """Run one call at `uri` (default: the client's server), translating its errors.

        With username and password, a call refused as unauthenticated (an expired bearer
        token) is retried once on a fresh token. `call` must consume any stream it opens,
        or at least its first message, so that the refusal shows inside it.
        """
        uri = uri or self.uri
        client = self._connection(uri)
        try:
            with _translated():
                return call(client, self._options(uri))
        except Unauthenticated:
            if self._username is None:
                raise
            self._reauthenticate(uri, client)
        with _translated():
            return call(client, self._options(uri))

    def _reauthenticate(self, uri: str, client: flight.FlightClient) -> None:
        with self._lock:
            self._headers[uri] = self._basic_to_bearer(uri, client)

    def close(self) -> None:
        """Close every connection; the client cannot be used afterwards."""
        with self._lock:
            self._closed = True
            clients = list(self._clients.values())
            self._clients.clear()
        for client in clients:
            with contextlib.suppress(Exception):
                client.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.uri!r})"

    # -- calls ------------------------------------------------------------------------------

    def branch(self, name: str) -> Client:
        """This client on branch `name` of every dataset it names: reads, searches, writes,
        row changes, indices, maintenance, versions and tags act on that branch ("main":
        the main line). It shares this client's connections: close the client it came from."""
        view = copy.copy(self)
        view._branch = None if name == "main" else str(name)
        return view

    def _scoped(self, command: Mapping[str, Any]) -> dict[str, Any]:
        """`command` on this client's branch, unless it names one itself."""
        out = dict(command)
        if self._branch is not None and "branch" not in out:
            out["branch"] = self._branch
        return out

    def action(self, name: str, body: Mapping[str, Any] | None = None) -> Any:
        """Run `DoAction(name)` with a JSON body; the JSON result (a list if several)."""
        body = self._scoped(body or {}) if name in BRANCHED_ACTIONS else dict(body or {})
        action = flight.Action(name, _json_bytes(body))
        answers = self._rpc(lambda c, o: [r.body.to_pybytes() for r in c.do_action(action, o)])
        results = [_parse_json(a, f"action {name!r}") for a in answers]
        if not results:
            return None
        return results[0] if len(results) == 1 else results

    def list_actions(self) -> dict[str, str]:
        """The server's actions, each with its one-line description."""
        actions = self._rpc(lambda c, o: list(c.list_actions(o)))
        return {a.type: a.description for a in actions}

    def healthcheck(self) -> dict[str, Any]:
        """The server's health answer (raises `Unavailable` while it is draining)."""
        return self.action("healthcheck") or {}

    # -- catalog ----------------------------------------------------------------------------

    def datasets(self) -> list[str]:
        """The names of the datasets under the server's root."""
        infos = self._rpc(lambda c, o: list(c.list_flights(b"", o)))
        names = [_dataset_name(info.descriptor) for info in infos]
        return [n for n in names if n is not None]

    def describe(
        self,
        name: str,
        *,
        version: int | None = None,
        tag: str | None = None,
        as_of: str | dt.datetime | dt.date | None = None,
    ) -> dict[str, Any]:
        """Version, schema, fragments, rows, tags and indices (name, type, columns, fragments
        covered, uuid) of a dataset (the `describe` action)."""
        body = read_command(name, version=version, tag=tag, as_of=as_of)
        return self.action("describe", body)

    def flight_info(self, dataset: str, **options: Any) -> flight.FlightInfo:
        """The `FlightInfo` of a read (options as in `read`): schema and endpoints."""
        descriptor = read_descriptor(dataset, **self._scoped(options))
        return self._rpc(lambda c, o: c.get_flight_info(descriptor, o))

    def schema(
        self,
        name: str,
        *,
        columns: Sequence[str] | None = None,
        version: int | None = None,
        tag: str | None = None,
        as_of: str | dt.datetime | dt.date | None = None,
        with_row_id: bool = False,
        blob_handling: str | None = None,
    ) -> pa.Schema:
        """The Arrow schema a read with these options returns."""
        options = {"columns": columns, "version": version, "tag": tag, "as_of": as_of}
        if blob_handling is not None:
            options["blob_handling"] = blob_handling
        descriptor = read_descriptor(name, with_row_id=with_row_id, **self._scoped(options))

        def call(c: flight.FlightClient, o: flight.FlightCallOptions) -> pa.Schema:
            try:
                return c.get_schema(descriptor, o).schema
            except pa.ArrowNotImplementedError:  # a server without GetSchema
                return c.get_flight_info(descriptor, o).schema

        return self._rpc(call)

    # -- nearest-neighbour searches ---------------------------------------------------------

    def nearest(self, dataset: str, column: str, q: Any, k: int = 10, **options: Any) -> pa.Table:
        """The k rows nearest to query vector `q` by `column`, with `_distance`, nearest first
        (a list of vectors: each one's, `query_index` first). Options: metric, nprobes,
        minimum_nprobes, maximum_nprobes, search_effort, refine_factor, use_index, columns,
        filter, prefilter, with_row_id, version | tag | as_of, and `search_filter`
        (`{"full_text_query": query}`: only rows the query matches, before the search with
        `prefilter`, as pylance's full-text filter) (`clients.nearest`)."""
        searching, reading = _nearest.split_options(options)
        return _nearest.search(
            self, dataset, column, q, k, search_options=searching, read_options=reading
        )

    def nearest_batch(
        self,
        dataset: str,
        column: str,
        queries: Any,
        k: int = 10,
        *,
        batch_rows: int = _nearest.BATCH_ROWS,
        **options: Any,
    ) -> pa.Table:
        """The k nearest rows to each of many query vectors ((n, dim)) in one DoExchange,
        `query_index` first; options as in `nearest`."""
        searching, reading = _nearest.split_options(options)
        return _nearest.search_batch(
            self,
            dataset,
            column,
            queries,
            k,
            batch_rows=batch_rows,
            search_options=searching,
            read_options=reading,
        )

    # -- reads ------------------------------------------------------------------------------

    def _locations(self, endpoint: flight.FlightEndpoint) -> list[str]:
        uris: list[str] = []
        for loc in endpoint.locations:
            raw = loc.uri
            uri = raw.decode() if isinstance(raw, bytes) else str(raw)
            uris.append(self.uri if uri in ("", REUSE_CONNECTION) else uri)
        if self.uri not in uris:
            # Tickets are self-contained; when no advertised replica answers (or there is
            # none), the server this client talks to is the last resort.
            uris.append(self.uri)
        return uris

    def _open(
        self, endpoint: flight.FlightEndpoint, exclude: Sequence[str] = ()
    ) -> tuple[flight.FlightStreamReader, str]:
        """A DoGet stream of `endpoint` from the first of its locations (but `exclude`)
        that answers."""
        last: QuiverError | None = None

        def call(c: flight.FlightClient, o: flight.FlightCallOptions) -> flight.FlightStreamReader:
            reader = c.do_get(endpoint.ticket, o)
            reader.schema  # noqa: B018 - the first message shows whether the ticket is accepted
            return reader

        for uri in self._locations(endpoint):
            if uri in exclude:
                continue
            try:
                self._connection(uri)
            except QuiverError as e:  # cannot connect to (or authenticate at) this replica
                last = e
                continue
            try:
                return self._rpc(call, uri), uri
            except Unavailable as e:
                last = e
            except Unauthenticated as e:  # another replica that does not take our token
                if uri == self.uri:
                    raise
                last = e
        assert last is not None
        raise last

    def endpoint_batches(self, endpoint: flight.FlightEndpoint) -> Iterator[pa.RecordBatch]:
        """The record batches of one endpoint of a `FlightInfo`, in order.

        A stream that breaks with `Unavailable` (its replica went away or is shutting down)
        is read again from the endpoint's next location: the ticket pins the rows and their
        order, so the rows already yielded are skipped and every row comes once.
        """
        failed: list[str] = []
        sent = 0  # rows yielded so far
        while True:
            reader, uri = self._open(endpoint, exclude=failed)
            skip = sent
            try:
                with _translated():
                    while True:
                        try:
                            chunk = reader.read_chunk()
                        except StopIteration:
                            return
                        batch = chunk.data
                        if batch is None:
                            continue
                        if skip:
                            if batch.num_rows <= skip:
                                skip -= batch.num_rows
                                continue
                            batch, skip = batch.slice(skip), 0
                        sent += batch.num_rows
                        yield batch
            except Unavailable:
                failed.append(uri)
                if all(u in failed for u in self._locations(endpoint)):
                    raise

    def _fetch(
        self, endpoint: flight.FlightEndpoint, progress: Progress, stop: threading.Event
    ) -> list[pa.RecordBatch]:
        batches: list[pa.RecordBatch] = []
        for batch in self.endpoint_batches(endpoint):
            if stop.is_set():
                break
            batches.append(batch)
            progress.rows(batch.num_rows)
        progress.endpoint_done()
        return batches

    def read(
        self,
        dataset: str,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        version: int | None = None,
        tag: str | None = None,
        as_of: str | dt.datetime | dt.date | None = None,
        limit: int | None = None,
        with_row_id: bool = False,
        appended_since: int | None = None,
        parallel: int = 8,
        progress: bool = False,
        full_text_query: str | dict[str, Any] | list[Any] | None = None,
        prefilter: bool = False,
        fast_search: bool = False,
        branch: str | None = None,
        blob_handling: str | None = None,
        search_filter: dict[str, Any] | None = None,
    ) -> pa.Table:
        """Read a dataset (one version of it, on `branch` if given) into a `pyarrow.Table`.

        The endpoints of the one `FlightInfo` are fetched by up to `parallel` threads and
        concatenated in endpoint (fragment) order. `progress=True` shows rows read on
        stderr (a tqdm bar when tqdm is installed). `appended_since=v` reads only the rows
        appends added after version `v`. `full_text_query` (text, `{"query", "columns"}`, a
        structured query; a list: each one's `limit` rows after its `query_index`) reads
        the matching rows best first with `_score`, as pylance's `to_table` does.
        `blob_handling="all_binary"` reads blob columns as their bytes (by default a scan
        returns their descriptions, as pylance's does; `take_blobs` reads ranges of them).
        `search_filter={"nearest": {"column", "q", "k"...}}` filters a full-text search by a
        vector search (`prefilter=True`: before it), as pylance's `VectorSearchQuery` filter."""
        if parallel < 1:
            raise ValueError("parallel must be at least 1")
        info = self.flight_info(
            dataset,
            columns=columns,
            filter=filter,
            version=version,
            tag=tag,
            as_of=as_of,
            limit=limit,
            with_row_id=with_row_id,
            appended_since=appended_since,
            full_text_query=full_text_query,
            prefilter=prefilter,
            fast_search=fast_search,
            **({"branch": branch} if branch is not None else {}),
            **({"blob_handling": blob_handling} if blob_handling is not None else {}),
            **({"search_filter": search_filter} if search_filter is not None else {}),
        )
        schema = info.schema
        endpoints = list(info.endpoints)
        total = info.total_records if info.total_records >= 0 else None
        if limit is not None and total is not None:
            total = min(total, limit)
        bar = Progress(progress, f"reading {dataset}", total, len(endpoints))
        stop = threading.Event()
        try:
            parts = self._fetch_all(endpoints, bar, stop, parallel)
        finally:
            bar.close()
        batches = [conform(b, schema) for part in parts for b in part]
        table = pa.Table.from_batches(batches, schema=schema)
        if limit is not None and table.num_rows > limit and not isinstance(full_text_query, list):
            table = table.slice(0, limit)
        return table

    def _fetch_all(
        self,
        endpoints: list[flight.FlightEndpoint],
        bar: Progress,
        stop: threading.Event,
        parallel: int,
    ) -> list[list[pa.RecordBatch]]:
        if not endpoints:
            return []
        if parallel == 1 or len(endpoints) == 1:
            return [self._fetch(e, bar, stop) for e in endpoints]
        pool = ThreadPoolExecutor(
            max_workers=min(parallel, len(endpoints)), thread_name_prefix="quiver-read"
        )
        try:
            futures: list[Future[list[pa.RecordBatch]]] = [
                pool.submit(self._fetch, e, bar, stop) for e in endpoints
            ]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in futures:  # the first failure in endpoint order
                if f in done and f.exception() is not None:
                    stop.set()
                    for other in futures:
                        other.cancel()
                    raise f.exception()  # type: ignore[misc]
            return [f.result() for f in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def reader(
        self,
        dataset: str,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        version: int | None = None,
        tag: str | None = None,
        as_of: str | dt.datetime | dt.date | None = None,
        limit: int | None = None,
        with_row_id: bool = False,
        branch: str | None = None,
        blob_handling: str | None = None,
    ) -> pa.RecordBatchReader:
        """Stream a dataset: the endpoints one after another, in order, batch by batch."""
        info = self.flight_info(
            dataset,
            columns=columns,
            filter=filter,
            version=version,
            tag=tag,
            as_of=as_of,
            limit=limit,
            with_row_id=with_row_id,
            **({"branch": branch} if branch is not None else {}),
            **({"blob_handling": blob_handling} if blob_handling is not None else {}),
        )
        schema = info.schema
        endpoints = list(info.endpoints)

        def batches() -> Iterator[pa.RecordBatch]:
            left = limit
            for endpoint in endpoints:
                for batch in self.endpoint_batches(endpoint):
                    if left is not None:
                        if left <= 0:
                            return
                        if batch.num_rows > left:
                            batch = batch.slice(0, left)
                        left -= batch.num_rows
                    yield conform(batch, schema)

        return pa.RecordBatchReader.from_batches(schema, batches())

    # -- writes -----------------------------------------------------------------------------

    def _put(self, command: Mapping[str, Any], data: DataLike) -> Any:
        schema, batches = to_batches(data)
        descriptor = flight.FlightDescriptor.for_command(_json_bytes(self._scoped(command)))
        with _translated():
            # no re-authentication here: a refused upload cannot be replayed
            writer, metadata = self._connection(self.uri).do_put(
                descriptor, schema, self._options()
            )
            try:
                for batch in batches:
                    writer.write_batch(batch)
                writer.done_writing()
                answer = metadata.read()
            except BaseException:
                with contextlib.suppress(Exception):  # the first error is the server's
                    writer.close()
                raise
            writer.close()
        result = _parse_json(answer, "DoPut")
        if not isinstance(result, dict):
            raise QuiverError("the server answered DoPut without a JSON PutResult")
        return result

    # -- table operations -------------------------------------------------------------------

    def versions(self, dataset: str) -> list[dict[str, Any]]:
        """Every version of a dataset, oldest first: `{"version", "timestamp", "rows", ...}`."""
        return _listed(self.action("list_versions", {"dataset": dataset}), "versions")

    def tags(self, dataset: str) -> dict[str, dict[str, Any]]:
        """The tags of a dataset: name → `{"branch", "version", "created_at", "updated_at"}`."""
        answer = self.action("list_tags", {"dataset": dataset})
        if isinstance(answer, dict) and isinstance(answer.get("tags"), dict):
            return answer["tags"]
        return {}

    def create_tag(self, dataset: str, tag: str, version: int | None = None) -> dict[str, Any]:
        """Name `version` (default: the latest) of a dataset `tag`."""
        body: dict[str, Any] = {"dataset": dataset, "tag": tag}
        if version is not None:
            body["version"] = version
        return self.action("create_tag", body)

    def delete_tag(self, dataset: str, tag: str) -> dict[str, Any]:
        """Remove a tag (the version it names stays)."""
        return self.action("delete_tag", {"dataset": dataset, "tag": tag})

    def create_branch(
        self, dataset: str, name: str, version: int | str | None = None
    ) -> dict[str, Any]:
        """Create branch `name` of a dataset from a version of this client's branch (a
        number, a tag name, or None for the latest); `{"name", "version"}`."""
        body: dict[str, Any] = {"dataset": dataset, "name": name}
        if version is not None:
            body["tag" if isinstance(version, str) else "version"] = version
        return self.action("create_branch", body)

    def branches(self, dataset: str) -> list[dict[str, Any]]:
        """The branches of a dataset, oldest parent version first: `{"name",
        "parent_branch", "parent_version", "create_at", "metadata"}`."""
        return _listed(self.action("list_branches", {"dataset": dataset}), "branches")

    def delete_branch(self, dataset: str, name: str) -> dict[str, Any]:
        """Delete a branch and the files it wrote (refused while other branches were
        created from it)."""
        return self.action("delete_branch", {"dataset": dataset, "name": name})

    def restore(self, dataset: str, version: int | str) -> dict[str, Any]:
        """Make an old version (a number, or a tag name) the latest, as a new version."""
        key = "tag" if isinstance(version, str) else "version"
        return self.action("restore", {"dataset": dataset, key: version})

    def add_columns(self, dataset: str, columns: Mapping[str, str]) -> dict[str, Any]:
        """Add columns computed from SQL expressions: `{"y": "x * 2"}`."""
        return self.action("add_columns", {"dataset": dataset, "columns": dict(columns)})

    def drop_columns(self, dataset: str, columns: Sequence[str]) -> dict[str, Any]:
        """Drop columns."""
        if isinstance(columns, str):
            columns = [columns]
        return self.action("drop_columns", {"dataset": dataset, "columns": list(columns)})

    def alter_columns(self, dataset: str, *alterations: Mapping[str, Any]) -> dict[str, Any]:
        """Rename columns or change their nullability or type, as pylance's `alter_columns`:
        `{"path": "x", "name": "x2", "nullable": True, "data_type": "int64"}` (`data_type`
        may also be a `pyarrow.DataType`)."""
        body = []
        for alteration in alterations:
            a = dict(alteration)
            if isinstance(a.get("data_type"), pa.DataType):
                a["data_type"] = str(a["data_type"])
            body.append(a)
        return self.action("alter_columns", {"dataset": dataset, "alterations": body})

    def compact(
        self,
        dataset: str,
        *,
        target_rows_per_fragment: int | None = None,
        max_rows_per_group: int | None = None,
        materialize_deletions: bool | None = None,
        materialize_deletions_threshold: float | None = None,
        defer_index_remap: bool | None = None,
    ) -> dict[str, Any]:
        """Merge small fragments and purge deleted rows (pylance's `compact_files`);
        `defer_index_remap` leaves indices as they are and records the moves in the
        dataset's fragment reuse index instead."""
        return self.action(
            "compact",
            _without_none(
                dataset=dataset,
                target_rows_per_fragment=target_rows_per_fragment,
                max_rows_per_group=max_rows_per_group,
                materialize_deletions=materialize_deletions,
                materialize_deletions_threshold=materialize_deletions_threshold,
                defer_index_remap=defer_index_remap,
            ),
        )

    def cleanup(
        self,
        dataset: str,
        *,
        older_than: dt.timedelta | float | None = None,
        retain_versions: int | None = None,
        delete_unverified: bool | None = None,
        error_if_tagged_old_versions: bool | None = None,
    ) -> dict[str, Any]:
        """Remove old versions and unreferenced files (pylance's `cleanup_old_versions`);
        `older_than` is a timedelta or seconds."""
        if isinstance(older_than, dt.timedelta):
            older_than = older_than.total_seconds()
        return self.action(
            "cleanup",
            _without_none(
                dataset=dataset,
                older_than_seconds=older_than,
                retain_versions=retain_versions,
                delete_unverified=delete_unverified,
                error_if_tagged_old_versions=error_if_tagged_old_versions,
            ),
        )

    def drop_dataset(self, dataset: str) -> dict[str, Any]:
        """Delete a whole dataset, every version and file."""
        return self.action("drop_dataset", {"dataset": dataset})


def _without_none(**body: Any) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


def _listed(answer: Any, key: str) -> list[Any]:
    if isinstance(answer, dict) and isinstance(answer.get(key), list):
        return answer[key]
    if isinstance(answer, list):
        return answer
    return [] if answer is None else [answer]
