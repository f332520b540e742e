"""The Lance REST Namespace on its own HTTP port (``--namespace-port``), served by aiohttp.

`NamespaceServer` runs an aiohttp application on a thread of its own with one event loop;
handlers (`catalog_routes`, `data_routes`, `version_routes`) do storage work and run on a
thread pool, so a slow table never holds up the loop. Every request goes through one path
(`_serve`): the id and body are parsed and checked, the caller authenticated (the auth
file's users: ``Authorization: Basic`` answered with a Bearer token, ``Authorization:
Bearer`` or ``x-api-key`` with a token), the handler run, and the answer or error sent; the
request is counted in the server's metrics as ``namespace:<Operation>``.

Answers follow pylance 14's reference adapter: 200 on success (JSON, an empty body for the
exists routes, a bare integer for CountTableRows, an Arrow IPC file for QueryTable) and the
specification's ``{"error", "code"}`` body on failure, unknown routes and wrong methods
included.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from quiver.flight_server import metrics
from quiver.flight_server.namespace import branch_routes as br
from quiver.flight_server.namespace import catalog_routes as cr
from quiver.flight_server.namespace import data_routes as dr
from quiver.flight_server.namespace import errors as ne
from quiver.flight_server.namespace import version_routes as vr
from quiver.flight_server.namespace.calls import ArrowFile, Call, Empty
from quiver.flight_server.namespace.context import Context
from quiver.flight_server.namespace.ids import DEFAULT_DELIMITER, check_body_id, split_id

log = logging.getLogger("quiver.namespace")

JSON, ARROW, NONE = "json", "arrow", "none"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
ARROW_FILE = "application/vnd.apache.arrow.file"
DEFAULT_MAX_BODY = 256 * 1024 * 1024
WRITE_BYTES = 1 << 20  # QueryTable's answer is written in pieces of about this much
_ARROW_TYPES = (ARROW_STREAM, "application/octet-stream")
# namespace code -> the code label Flight calls use in the metrics
_METRIC_CODES = {
    **dict.fromkeys((1, 4, 6, 8, 10, 11, 12, 22), "not_found"),
    **dict.fromkeys((2, 3, 5, 7, 9, 23), "already_exists"),
    **dict.fromkeys((13, 20), "invalid_argument"),
    0: "unimplemented",
    14: "commit_conflict",
    15: "permission_denied",
    16: "unauthenticated",
    17: "unavailable",
    18: "internal",
    19: "failed_precondition",
    21: "unavailable",
}


@dataclass(frozen=True)
class Route:
    """One operation: its methods and path, handler, body kind and what 'not found' means."""

    methods: tuple[str, ...]
    path: str
    op: str
    handler: Callable[..., Any]
    body: str = JSON
    not_found: int = ne.TABLE_NOT_FOUND


_NS, _T = "/v1/namespace/{id}", "/v1/table/{id}"
ROUTES = (
    Route(("GET",), f"{_NS}/list", "ListNamespaces", cr.list_namespaces, NONE, 1),
    Route(("POST",), f"{_NS}/create", "CreateNamespace", cr.create_namespace, JSON, 1),
    Route(("POST",), f"{_NS}/describe", "DescribeNamespace", cr.describe_namespace, JSON, 1),
    Route(("POST",), f"{_NS}/drop", "DropNamespace", cr.drop_namespace, JSON, 1),
    Route(("POST",), f"{_NS}/exists", "NamespaceExists", cr.namespace_exists, JSON, 1),
    Route(("GET",), f"{_NS}/table/list", "ListTables", cr.list_tables, NONE, 1),
    Route(("GET",), "/v1/table", "ListAllTables", cr.list_all_tables, NONE),
    Route(("POST",), f"{_T}/declare", "DeclareTable", cr.declare_table),
    Route(("POST",), f"{_T}/describe", "DescribeTable", cr.describe_table),
    Route(("POST",), f"{_T}/exists", "TableExists", cr.table_exists),
    Route(("POST",), f"{_T}/register", "RegisterTable", cr.register_table),
    Route(("POST",), f"{_T}/deregister", "DeregisterTable", cr.deregister_table),
    Route(("POST",), f"{_T}/drop", "DropTable", cr.drop_table),
    Route(("POST",), f"{_T}/rename", "RenameTable", cr.rename_table),
    Route(("POST",), f"{_T}/restore", "RestoreTable", vr.restore_table),
    Route(("GET", "POST"), f"{_T}/stats", "GetTableStats", vr.table_stats),
    Route(("GET", "POST"), f"{_T}/count_rows", "CountTableRows", dr.count_rows),
    Route(("POST",), f"{_T}/query", "QueryTable", dr.query_table),
    Route(("POST",), f"{_T}/create", "CreateTable", dr.create_table, ARROW),
    Route(("POST",), f"{_T}/insert", "InsertIntoTable", dr.insert_into_table, ARROW),
    Route(
        ("POST",), f"{_T}/merge_insert", "MergeInsertIntoTable", dr.merge_insert_into_table, ARROW
    ),
    Route(("POST",), f"{_T}/update", "UpdateTable", dr.update_table),
    Route(("POST",), f"{_T}/delete", "DeleteFromTable", dr.delete_from_table),
    Route(("POST",), f"{_T}/version/list", "ListTableVersions", vr.list_versions),
    Route(("POST",), f"{_T}/version/create", "CreateTableVersion", vr.create_version),
    Route(("POST",), f"{_T}/version/describe", "DescribeTableVersion", vr.describe_version),
    Route(("GET", "POST"), f"{_T}/tags/list", "ListTableTags", vr.list_table_tags),
    Route(("POST",), f"{_T}/tags/version", "GetTableTagVersion", vr.tag_version),
    Route(("POST",), f"{_T}/tags/create", "CreateTableTag", vr.create_tag),
    Route(("POST",), f"{_T}/tags/delete", "DeleteTableTag", vr.delete_tag),
    Route(("POST",), f"{_T}/tags/update", "UpdateTableTag", vr.update_tag),
    Route(("POST",), f"{_T}/branches/list", "ListTableBranches", br.list_branches),
    Route(("POST",), f"{_T}/branches/create", "CreateTableBranch", br.create_branch),
    Route(("POST",), f"{_T}/branches/delete", "DeleteTableBranch", br.delete_branch),
    Route(("POST",), f"{_T}/create_index", "CreateTableIndex", vr.create_index),
    Route(("POST",), f"{_T}/create_scalar_index", "CreateTableScalarIndex", vr.create_index),
    Route(("POST",), f"{_T}/index/list", "ListTableIndices", vr.list_indices),
    Route(
        ("GET", "POST"),
        f"{_T}/index/{{index_name}}/stats",
        "DescribeTableIndexStats",
        vr.index_stats,
    ),
    Route(("POST",), f"{_T}/index/{{index_name}}/drop", "DropTableIndex", vr.drop_index),
)


def _error(e: ne.NamespaceError, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(e.body(), status=e.status, headers=headers)


async def _server_header(request: web.Request, response: web.StreamResponse) -> None:
    """Name the server without its Python and aiohttp versions."""
    response.headers["Server"] = "quiver"


class NamespaceApp:
    """The routes over one `Context`, with authentication and metrics."""

    def __init__(
        self,
        ctx: Context,
        *,
        authenticator: Any = None,
        max_body: int = DEFAULT_MAX_BODY,
        workers: int = 8,
    ) -> None:
        self.ctx = ctx
        self.authenticator = authenticator
        self.max_body = max_body
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="quiver-namespace")
        self.serving = True

    def build(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(client_max_size=self.max_body, middlewares=[self._unrouted])
        for route in ROUTES:
            for method in route.methods:
                app.router.add_route(method, route.path, self._handler(route))
        app.router.add_get("/healthz", self._health)
        app.on_response_prepare.append(_server_header)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        if not self.serving:
            return _error(ne.NamespaceError(ne.SERVICE_UNAVAILABLE, "the server is draining"))
        return web.json_response({"status": "SERVING"})

    @web.middleware
    async def _unrouted(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Unknown routes and wrong methods: the spec's error body (code 0) with 404 / 405."""
        try:
            return await handler(request)
        except web.HTTPMethodNotAllowed:
            e = ne.unsupported(f"{request.method} is not allowed on {request.path}")
            return web.json_response(e.body(), status=405)
        except web.HTTPNotFound:
            e = ne.unsupported(f"no namespace route {request.method} {request.path}")
            return web.json_response(e.body(), status=404)

    def _handler(self, route: Route) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._serve(route, request)

        return handle

    async def _serve(self, route: Route, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        code = "ok"
        headers: dict[str, str] = {}
        try:
            if not self.serving:
                raise ne.NamespaceError(ne.SERVICE_UNAVAILABLE, "the server is draining")
            call, token = await self._call(route, request)
            if token:
                headers["authorization"] = f"Bearer {token}"
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self.pool, self._run, route, call)
            return await self._answer(request, result, headers)
        except ne.NamespaceError as e:
            code = _METRIC_CODES.get(e.code, "internal")
            return _error(e, headers)
        except BaseException:  # a stream cut short (the client left, or an error mid-way)
            code = "cancelled"
            raise
        finally:
            log.debug("%s %s -> %s", request.method, request.path_qs, code)
            rpc = f"namespace:{route.op}"
            metrics.REQUESTS.labels(rpc, code).inc()
            metrics.DURATION.labels(rpc).observe(time.perf_counter() - started)

    def _run(self, route: Route, call: Call) -> Any:
        scrub = self.ctx.handles.scrub
        if route.path.startswith(_T) and call.parts:
            try:
                scrub = self.ctx.service.scrubber_for("/".join(call.parts))
            except Exception:  # noqa: BLE001 - an invalid name is reported by the handler
                pass
        try:
            return route.handler(self.ctx, call)
        except Exception as e:  # noqa: BLE001 - every failure becomes a coded error body
            raise ne.translate(e, scrub, not_found=route.not_found, context=route.op) from None

    async def _call(self, route: Route, request: web.Request) -> tuple[Call, str | None]:
        query: dict[str, list[str]] = {}
        for key, value in request.query.items():
            query.setdefault(key, []).append(value)
        delimiter = request.query.get("delimiter") or None
        parts = split_id(request.match_info.get("id", ""), delimiter)
        identity, token = None, None
        if self.authenticator is not None:
            # a password check is deliberately slow (scrypt): not on the event loop
            loop = asyncio.get_running_loop()
            identity, token = await loop.run_in_executor(self.pool, self._identity, request.headers)
        call = Call(route.op, parts, delimiter or "$", identity, query=query)
        call.path = {k: v for k, v in request.match_info.items() if k != "id"}
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise ne.NamespaceError(
                ne.INVALID_INPUT, f"{route.op}: the body is larger than {self.max_body} bytes", 413
            ) from None
        if route.body == ARROW:
            if raw and request.content_type not in _ARROW_TYPES:
                raise ne.invalid(f"Expected request with `Content-Type: {ARROW_STREAM}`")
            call.data = raw
        elif raw.strip():
            if request.content_type != "application/json":
                raise ne.invalid("Expected request with `Content-Type: application/json`")
            try:
                body = json.loads(raw)
            except ValueError as e:
                raise ne.invalid(f"Failed to parse the request body as JSON: {e}") from None
            if not isinstance(body, dict):
                raise ne.invalid(f"{route.op}: the request body must be a JSON object")
            call.body = body
            check_body_id(body, parts, delimiter or DEFAULT_DELIMITER)
        return call, token

    def _identity(self, headers: Any) -> tuple[Any, str | None]:
        """(identity, a new token for Basic credentials) of a request's headers."""
        if self.authenticator is None:
            return None, None
        values = headers.getall("Authorization", [])
        if not values and headers.get("x-api-key"):
            values = [f"Bearer {headers['x-api-key']}"]
        try:
            return self.authenticator.authenticate_headers({"authorization": values})
        except Exception as e:  # noqa: BLE001 - the authenticator's errors are Flight errors
            if getattr(e, "code", None) != "unauthenticated":
                raise ne.translate(e, context="authentication") from None
            message = str(e).split(". Detail:")[0]
            raise ne.NamespaceError(ne.UNAUTHENTICATED, message) from None

    async def _answer(
        self, request: web.Request, result: Any, headers: dict[str, str]
    ) -> web.StreamResponse:
        if isinstance(result, Empty):
            return web.Response(status=200, headers=headers)
        if isinstance(result, int) and not isinstance(result, bool):
            return web.Response(text=str(result), content_type="application/json", headers=headers)
        if isinstance(result, ArrowFile):
            return await self._stream(request, result, headers)
        return web.json_response(result, headers=headers)

    async def _stream(
        self, request: web.Request, result: ArrowFile, headers: dict[str, str]
    ) -> web.StreamResponse:
        """Send the Arrow file's chunks as they are made, at least `WRITE_BYTES` at a time
        (a small answer in one write); the first is made before the status is sent, so an
        error in planning is still an error body."""
        loop = asyncio.get_running_loop()
        chunks = result.chunks

        def pull() -> tuple[bytes, bool]:
            """(bytes made, whether the file is complete)."""
            parts: list[bytes] = []
            size = 0
            try:
                while size < WRITE_BYTES:
                    chunk = next(chunks)
                    parts.append(chunk)
                    size += len(chunk)
            except StopIteration:
                return b"".join(parts), True
            except Exception as e:  # noqa: BLE001
                raise ne.translate(e, self.ctx.handles.scrub, context="QueryTable") from None
            return b"".join(parts), False

        data, done = await loop.run_in_executor(self.pool, pull)
        response = web.StreamResponse(status=200, headers=headers)
        response.content_type = ARROW_FILE
        await response.prepare(request)
        try:
            while True:
                if data:
                    await response.write(data)
                if done:
                    break
                data, done = await loop.run_in_executor(self.pool, pull)
        except ne.NamespaceError as e:
            log.warning("QueryTable stream ended early: %s", e.message)
            raise ConnectionResetError("the answer could not be completed") from None
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                await loop.run_in_executor(self.pool, close)
        await response.write_eof()
        return response


class NamespaceServer:
    """The namespace app listening on host:port (0: any free port, see `.port`), with TLS
    when given an SSL context, on a daemon thread."""

    def __init__(
        self, app: NamespaceApp, host: str, port: int, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.scheme = "https" if ssl_context is not None else "http"
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL clients connect to."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def start(self) -> NamespaceServer:
        """Listen; raises what binding raised (e.g. the port is taken)."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            runner = web.AppRunner(self.app.build(), access_log=None)
            try:
                self._loop.run_until_complete(runner.setup())
                site = web.TCPSite(runner, self.host, self.port, ssl_context=self.ssl_context)
                self._loop.run_until_complete(site.start())
                server = site._server  # noqa: SLF001 - aiohttp exposes the bound port only here
                self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            except BaseException as e:  # noqa: BLE001 - reported to start()
                failure.append(e)
                ready.set()
                return
            ready.set()
            try:
                self._loop.run_forever()
            finally:
                self._loop.run_until_complete(runner.cleanup())
                self._loop.close()

        self._thread = threading.Thread(target=run, name="quiver-namespace-http", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop listening and end the loop."""
        self.app.serving = False
        if self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self.app.pool.shutdown(wait=False, cancel_futures=True)


def ssl_context(cert: str, key: str, client_ca: str | None = None) -> ssl.SSLContext:
    """A server TLS context from PEM files; with `client_ca`, clients must present a
    certificate it signed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    if client_ca:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(client_ca)
    return context
