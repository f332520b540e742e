"""`QuiverFlightServer`: the Arrow Flight RPCs on top of `DatasetService`.

Every handler runs inside `_Call`, which times the call, writes one structured log line
(logger ``quiver.access``: method, dataset, version, rows, bytes, duration, status) and
turns every exception into the error a client sees through `flight_server.errors` (the
gRPC status of its code, a one-line message, the code and details in
`grpc-status-details-bin`; never a traceback or a server path).

`build_server(config)` is the one place a server is put together: TLS material
(`flight_server.tls`), the Basic → Bearer authentication middleware (`flight_server.auth`)
and the drain middleware (`flight_server.health`) plug in there; the health side port and
SIGTERM handling live in `quiver serve` (`flight_server.cli`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from quiver.flight_server import grpc_status
from quiver.flight_server.actions import ACTIONS
from quiver.flight_server.auth import (
    AUTH_MIDDLEWARE_KEY,
    Authenticator,
    AuthFileError,
    AuthMiddlewareFactory,
    HandshakeAuthHandler,
    NoAuthHandler,
)
from quiver.flight_server.blob_reads import BlobBytes
from quiver.flight_server.budget import Lease, MemoryBudget
from quiver.flight_server.config import ConfigError, ServerConfig
from quiver.flight_server.errors import (
    InvalidArgument,
    Unavailable,
    schema_error,
    stream_error,
    to_flight_error,
)
from quiver.flight_server.grpc_status import add_details
from quiver.flight_server.health import Drain
from quiver.flight_server.maintenance import Maintenance
from quiver.flight_server.memory import (
    IdleTrim,
    release_free_memory,
    streams_running,
    tune_allocator,
)
from quiver.flight_server.metrics import counting_sweep, instrument, record_call, watch_budget
from quiver.flight_server.nearest import exchange as exchange_nearest
from quiver.flight_server.progress import stream_with_progress, wants_progress
from quiver.flight_server.protocol import (
    put_request_from_command,
    put_request_from_path,
    read_request_from_command,
    read_request_from_path,
)
from quiver.flight_server.service import DatasetService
from quiver.flight_server.sql.engine import SqlEngine
from quiver.flight_server.sql.front import REFUSED_ACTIONS, SQL_ACTIONS, FlightSql
from quiver.flight_server.sql.messages import is_flight_sql
from quiver.flight_server.staging import Sweeper
from quiver.flight_server.tls import TlsConfigError
from quiver.flight_server.tls import load_tls as _read_tls_files
from quiver.flight_server.uploads import uploaded_batches

access_log = logging.getLogger("quiver.access")
_NANOSECONDS = pa.timestamp("ns")
# one encoder for every call (json.dumps builds a new one per call when given options)
_compact_json = json.JSONEncoder(separators=(",", ":")).encode


class _Call:
    """One RPC: timing, the access log line and error translation."""

    def __init__(
        self, server: QuiverFlightServer, method: str, context: flight.ServerCallContext
    ) -> None:
        self.server = server
        self.method = method
        self.context = context
        self.dataset: str | None = None
        self.version: int | None = None
        self.fragment: int | None = None  # DoGet: the ticket's fragment, for error messages
        self.rows: int | None = None
        self.bytes: int | None = None
        self.status = "ok"
        self.deferred = False  # DoGet logs when its stream ends, not when the handler returns
        self.started = time.perf_counter()
        self.identity = server.identity(context)

    def __enter__(self) -> _Call:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None:
            if not self.deferred:
                self.log()
            return False
        raise self.fail(exc) from None

    def fail(self, exc: BaseException) -> Exception:
        """Log the failed call; the error to raise instead of `exc` (its details added to
        the call's trailers where Arrow will not send them)."""
        service = self.server.service
        exc = service.explain(exc, self.dataset, self.version, self.fragment)
        error = to_flight_error(exc, service.scrubber_for(self.dataset), context=self.method)
        self.status = str(getattr(error, "code", None) or "internal")
        add_details(error, self.context)
        self.log()
        return error

    def log(self) -> None:
        """Write the access log line."""
        record = {
            "method": self.method,
            "dataset": self.dataset,
            "version": self.version,
            "rows": self.rows,
            "bytes": self.bytes,
            "duration_ms": round((time.perf_counter() - self.started) * 1000, 3),
            "status": self.status,
            "peer": _peer(self.context),
        }
        if getattr(self.dataset, "branch", None):
            record["branch"] = self.dataset.branch
        if self.identity is not None:
            record["identity"] = str(getattr(self.identity, "user", self.identity))
        access_log.info(_compact_json(record))
        record_call(self.context, self.method, self.status, self.rows, self.bytes)


def _has_dictionary(schema: pa.Schema) -> bool:
    """Whether any field, nested ones included, is dictionary-encoded."""

    def nested(t: pa.DataType) -> bool:
        if pa.types.is_dictionary(t):
            return True
        return any(nested(t.field(i).type) for i in range(t.num_fields))

    return any(nested(f.type) for f in schema)


def _peer(context: flight.ServerCallContext) -> str | None:
    try:
        peer = context.peer()
    except Exception:  # noqa: BLE001 - informational only
        return None
    return peer.decode("utf-8", "replace") if isinstance(peer, bytes) else peer


def _json(doc: Any) -> bytes:
    return _compact_json(doc).encode("utf-8")


class QuiverFlightServer(flight.FlightServerBase):
    """Lance datasets under one root, served over Arrow Flight (DESIGN.md §3)."""

    def __init__(
        self,
        config: ServerConfig,
        service: DatasetService,
        *,
        auth_handler: flight.ServerAuthHandler | None = None,
        middleware: dict[str, flight.ServerMiddlewareFactory] | None = None,
        tls_certificates: list[Any] | None = None,
        verify_client: bool = False,
        root_certificates: bytes | None = None,
        drain: Drain | None = None,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.drain = drain or Drain()  # draining state; its middleware counts running calls
        # what all DoGet streams together may hold (--memory-budget; 0: unlimited)
        self.budget = budget or MemoryBudget(config.memory_budget, streams_running)
        self._idle_trim = IdleTrim(lambda: self.budget.active == 0 and self.budget.waiting == 0)
        super().__init__(
            config.bind_location(),
            auth_handler=auth_handler,
            tls_certificates=tls_certificates,
            verify_client=verify_client,
            root_certificates=root_certificates,
            middleware=middleware,
        )
        self.config = config
        self.service = service
        service.budget = self.budget  # index builds hold their memory in it too
        self.locations: list[str] = config.advertised(self.port)
        # Flight SQL on the same port: its commands, tickets and actions go to `self.sql`
        engine = SqlEngine(service, memory_limit=config.sql_memory, spill_dir=config.spill_dir)
        self.sql = FlightSql(service, engine)
        self.sweeper: Sweeper | None = None
        if config.sweep_interval > 0:
            sweep = counting_sweep(service.sweep_staging)
            self.sweeper = Sweeper(sweep, config.sweep_interval).start()
        self.maintainer: Sweeper | None = None
        if config.maintenance_interval > 0:
            rounds = Maintenance(service.handles, config.maintenance_fragments)
            self.maintainer = Sweeper(
                rounds.run, config.maintenance_interval, "maintenance"
            ).start()

    def shutdown(self) -> None:
        """Stop the staging sweep and maintenance, then the server (running calls finish
        first)."""
        for runner in (self.sweeper, self.maintainer):
            if runner is not None:
                runner.stop()
        super().shutdown()

    # -- plumbing -----------------------------------------------------------------------
    def identity(self, context: flight.ServerCallContext) -> Any:
        """Who is calling: the auth middleware's `identity` object (passed as is to
        `service.authorize`), else the TLS/handshake peer identity string, else None."""
        try:
            middleware = context.get_middleware(AUTH_MIDDLEWARE_KEY)
        except Exception:  # noqa: BLE001 - no middleware registered
            middleware = None
        identity = getattr(middleware, "identity", None)
        if identity is not None:
            return identity
        try:
            peer = context.peer_identity()
        except Exception:  # noqa: BLE001
            return None
        return peer.decode("utf-8", "replace") if peer else None

    def _call(self, method: str, context: flight.ServerCallContext) -> _Call:
        return _Call(self, method, context)

    @staticmethod
    def _sql_command(descriptor: flight.FlightDescriptor) -> bytes | None:
        """The Flight SQL command a descriptor holds, if it holds one."""
        if descriptor.descriptor_type != flight.DescriptorType.CMD:
            return None
        command = descriptor.command
        return command if is_flight_sql(command) else None

    @staticmethod
    def _read_request(descriptor: flight.FlightDescriptor) -> Any:
        if descriptor.descriptor_type == flight.DescriptorType.PATH:
            return read_request_from_path(descriptor.path)
        if descriptor.descriptor_type == flight.DescriptorType.CMD:
            return read_request_from_command(descriptor.command)
        raise InvalidArgument("descriptor must be PATH or CMD")

    @staticmethod
    def _expiration(expires: int | None) -> pa.TimestampScalar | None:
        """Unix seconds as the scalar FlightEndpoint takes: already nanoseconds without a
        time zone, which FlightEndpoint converts to without a compute call (any other
        timestamp type costs a cast, ~40 µs per endpoint)."""
        if expires is None:
            return None
        return pa.scalar(expires * 1_000_000_000, type=_NANOSECONDS)

    # -- RPCs ---------------------------------------------------------------------------
    def list_flights(
        self, context: flight.ServerCallContext, criteria: bytes
    ) -> Iterator[flight.FlightInfo]:
        """One FlightInfo per dataset (no endpoints); criteria = a UTF-8 name prefix."""
        with self._call("ListFlights", context) as call:
            try:
                prefix = (criteria or b"").decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidArgument("ListFlights criteria must be a UTF-8 name prefix") from None
            found = self.service.list_datasets(prefix, call.identity)
            infos = [
                flight.FlightInfo(
                    d.schema,
                    flight.FlightDescriptor.for_path(d.name),
                    [],
                    total_records=d.rows,
                    total_bytes=-1,
                    app_metadata=_json({"version": d.version, "fragments": d.fragments}),
                )
                for d in found
            ]
            call.rows = len(infos)
        return iter(infos)

    def get_flight_info(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor
    ) -> flight.FlightInfo:
        """Plan a read: projected schema and one endpoint per fragment (or row range); a
        Flight SQL command is planned by `self.sql`."""
        with self._call("GetFlightInfo", context) as call:
            command = self._sql_command(descriptor)
            if command is not None:
                call.method = "GetFlightInfo:sql"
                return self.sql.flight_info(command, descriptor, call.identity)
            request = self._read_request(descriptor)
            call.dataset, call.version = request.dataset, request.version
            plan = self.service.plan_scan(request, call.identity)
            call.version = plan.version
            call.rows = plan.total_records
            expiration = self._expiration(plan.expires)
            endpoints = [
                flight.FlightEndpoint(
                    e.ticket,
                    self.locations,
                    expiration_time=expiration,
                    app_metadata=_json(e.metadata(plan.version)),
                )
                for e in plan.endpoints
            ]
            return flight.FlightInfo(
                plan.schema,
                descriptor,
                endpoints,
                total_records=plan.total_records,
                total_bytes=-1,
                ordered=True,
                app_metadata=_json({"dataset": plan.dataset, "version": plan.version}),
            )

    def get_schema(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor
    ) -> flight.SchemaResult:
        """The schema DoGet would stream for this descriptor."""
        try:
            with self._call("GetSchema", context) as call:
                command = self._sql_command(descriptor)
                if command is not None:
                    call.method = "GetSchema:sql"
                    return flight.SchemaResult(self.sql.schema(command, call.identity))
                request = self._read_request(descriptor)
                call.dataset = request.dataset
                return flight.SchemaResult(self.service.schema(request, call.identity))
        except Exception as e:  # noqa: BLE001 - translated by the call (`_Call.fail`)
            raise schema_error(e, context) from None

    def do_get(
        self, context: flight.ServerCallContext, ticket: flight.Ticket
    ) -> flight.FlightDataStream:
        """Stream one endpoint's rows, batch by batch, stopping if the client cancels;
        the stream first waits its turn in the server's memory budget."""
        call = self._call("DoGet", context)
        call.deferred = True
        with call:
            stream: Any
            if is_flight_sql(ticket.ticket):
                call.method = "DoGet:sql"
                stream = self.sql.read(ticket.ticket, call.identity)
                call.dataset = ",".join(stream.datasets) or None
                label = stream.label
            else:
                t = self.service.ticket(ticket.ticket)
                call.dataset, call.version, call.fragment = t.dataset, t.version, t.fragment_id
                stream = self.service.read(t, call.identity)
                label = f"{t.dataset}@{t.version}/{t.fragment_id}"
            call.rows = call.bytes = 0

        # A GeneratorStream's errors leave with their own status (`grpc_status`)
        direct = grpc_status.install() and not _has_dictionary(stream.schema)

        def gone() -> bool:
            if self.drain.streams_stopped:
                raise Unavailable("the server shut down before the stream began; retry the ticket")
            return context.is_cancelled()

        def batches() -> Iterator[pa.RecordBatch]:
            finished = False
            lease: Lease | None = None
            try:
                # Wait for memory when the first batch is asked for, not in the handler: the
                # wait then polls the call's cancellation and the drain, and no read has begun.
                lease = self.budget.admit(stream.memory_estimate, gone, label=label)
                biggest = 0
                # No cancellation check per batch: gRPC's holds the GIL while it polls (a
                # third of a millisecond, a fifth of a 2.2 full scan's time under the GIL),
                # and a cancelled call fails its next write, which stops the stream anyway.
                for batch in self.drain.guard(stream.batches):
                    nbytes = batch.nbytes
                    if nbytes > biggest:  # batches bigger than estimated: account for them
                        biggest = nbytes
                        lease.grow_to(3 * biggest)
                    call.rows += batch.num_rows  # type: ignore[operator]
                    call.bytes += nbytes  # type: ignore[operator]
                    yield batch
                else:
                    finished = True
            except GeneratorExit:
                call.status = "cancelled"
                raise
            except Exception as e:  # noqa: BLE001 - translated, never sent raw
                error = call.fail(e)
                raise (error if direct else stream_error(error, context)) from None
            finally:
                stream.close()  # stop any readahead before its bytes leave the budget
                if lease is not None:
                    lease.release()
                if call.status == "ok" and not finished:
                    call.status = "cancelled"
                if call.status in ("ok", "cancelled"):
                    call.log()
                self._give_back_memory()

        if direct:
            return flight.GeneratorStream(stream.schema, batches())
        # A RecordBatchStream writes dictionary batches, which a GeneratorStream cannot
        # (apache/arrow#38480); its reader sends errors without their status (see
        # `errors.stream_error`). Both stream at the same speed.
        return flight.RecordBatchStream(pa.RecordBatchReader.from_batches(stream.schema, batches()))

    def _give_back_memory(self) -> None:
        """After a stream ends: return what the allocator holds free to the system now while
        other streams run, else once the server stays idle a moment. The memory a stream
        freed otherwise stays resident in heaps the others fragment (20 M rows to 4 clients:
        peak 330-337 MB without, 303-329 with; filtered 307-315 against 221-257 MB; an idle
        server ~290 MB against ~150-180). A stream running alone does not trim at once:
        after each of a one-row read's four DoGets, the next one faulted its buffers in
        again (+5 ms of server CPU per read, 10 %)."""
        if self.budget.active > 0:
            release_free_memory()
        else:
            self._idle_trim.stream_ended()

    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        """Write the uploaded stream; answer one PutResult with JSON app_metadata (a Flight
        SQL command's answer is its own message)."""
        with self._call("DoPut", context) as call:
            command = self._sql_command(descriptor)
            if command is not None:
                call.method = "DoPut:sql"
                answer, info = self.sql.put(command, reader, call.identity, context.is_cancelled)
                call.dataset, call.version = info.get("dataset"), info.get("version")
                call.rows = info.get("rows")
                writer.write(pa.py_buffer(answer))
                return
            if descriptor.descriptor_type == flight.DescriptorType.PATH:
                request = put_request_from_path(descriptor.path)
            else:
                request = put_request_from_command(descriptor.command)
            call.dataset = request.dataset
            call.bytes = 0

            def counted(nbytes: int) -> None:
                call.bytes += nbytes  # type: ignore[operator]

            batches = uploaded_batches(reader, counted)
            result = self.service.put(
                request, reader.schema, batches, context.is_cancelled, call.identity
            )
            call.rows = result.get("rows")
            call.version = result.get("version")
            writer.write(pa.py_buffer(_json(result)))

    def do_action(
        self, context: flight.ServerCallContext, action: flight.Action
    ) -> Iterator[flight.Result]:
        """Run an action of DESIGN.md §3 with its JSON body; one JSON Result, after one
        `{"progress": ...}` Result per stage of an index build that asks for them."""
        call = self._call(f"DoAction:{action.type[:64]}", context)
        body = action.body.to_pybytes() if action.body is not None else b""
        if action.type in SQL_ACTIONS or action.type in REFUSED_ACTIONS:
            with call:
                results = self.sql.action(action.type, body, call.identity)
                return iter([flight.Result(r) for r in results])
        call.dataset = _peek_dataset(body)
        if wants_progress(action.type, body):
            call.deferred = True
            return self._with_progress(call, action.type, body)
        with call:
            result = self.service.action(action.type, body, call.identity)
            if isinstance(result, BlobBytes):  # a ranged blob read: a header, then bytes
                call.rows = 1
                chunks = [flight.Result(pa.py_buffer(c)) for c in result.chunks()]
                return iter([flight.Result(_json(result.header)), *chunks])
            self._account(call, result)
            return iter([flight.Result(_json(result))])

    @staticmethod
    def _account(call: _Call, result: dict[str, Any]) -> None:
        call.version = _int_or_none(result.get("version"))
        call.rows = _int_or_none(result.get("rows", result.get("deleted_rows")))

    def _with_progress(self, call: _Call, name: str, body: bytes) -> Iterator[flight.Result]:
        """An action's results with its progress, its errors with their status."""
        try:
            stream = stream_with_progress(
                lambda: self.service.action(name, body, call.identity),
                call.context.is_cancelled,
                _json,
            )
            for item in stream:
                if isinstance(item, dict):  # the result
                    self._account(call, item)
                    call.log()
                    yield flight.Result(_json(item))
                else:
                    yield item
        except GeneratorExit:  # the client stopped reading: the build stops
            call.status = "cancelled"
            call.log()
            raise
        except BaseException as e:  # noqa: BLE001 - every error leaves with its status
            raise call.fail(e) from None

    def list_actions(self, context: flight.ServerCallContext) -> list[flight.ActionType]:
        """Every action with a one-line description."""
        with self._call("ListActions", context) as call:
            actions = {**ACTIONS, **SQL_ACTIONS}
            call.rows = len(actions)
            return [flight.ActionType(name, text) for name, text in actions.items()]

    def do_exchange(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.MetadataRecordBatchWriter,
    ) -> None:
        """Batched nearest-neighbour searches (`flight_server.nearest`); nothing else."""
        with self._call("DoExchange", context) as call:
            exchange_nearest(self.service, call, descriptor, reader, writer)


def _peek_dataset(body: bytes) -> str | None:
    """The "dataset" of an action body, for the log line only (validated later)."""
    try:
        doc = json.loads(body) if body else None
    except ValueError:
        return None
    name = doc.get("dataset") if isinstance(doc, dict) else None
    return name if isinstance(name, str) and len(name) <= 256 else None


# ------------------------------------------------------------------------------- building
def load_tls(config: ServerConfig) -> dict[str, Any]:
    """TLS keyword arguments for the server: tls_certificates, verify_client, root_certificates."""
    try:
        files = _read_tls_files(config.tls_cert, config.tls_key, config.tls_client_ca)
    except TlsConfigError as e:
        raise ConfigError(str(e)) from None
    return files.server_kwargs() if files is not None else {}


def load_auth(config: ServerConfig, service: DatasetService) -> dict[str, Any]:
    """Authentication keyword arguments for the server: auth_handler and middleware.

    With an auth file, every call goes through `AuthMiddlewareFactory` (Basic → Bearer,
    registered under `AUTH_MIDDLEWARE_KEY`, exposing `.identity`), and the service checks
    rights per dataset in `service.authorize`. Without one, only `NoAuthHandler` (which
    refuses Handshake with a coded error).
    """
    if not config.auth_file:
        return {"auth_handler": NoAuthHandler()}
    try:
        authenticator = Authenticator(config.auth_file, token_ttl=config.token_ttl)
    except AuthFileError as e:
        raise ConfigError(str(e)) from None
    return {
        "auth_handler": HandshakeAuthHandler(),
        "middleware": {AUTH_MIDDLEWARE_KEY: AuthMiddlewareFactory(authenticator)},
    }


def build_server(
    config: ServerConfig, *, service: DatasetService | None = None
) -> QuiverFlightServer:
    """Construct (and start listening) the server a config describes."""
    tune_allocator()  # a streaming server's RSS otherwise creeps far above its live memory
    service = service or DatasetService.from_config(config)
    tls = load_tls(config)
    auth = load_auth(config, service)
    factory = auth.get("middleware", {}).get(AUTH_MIDDLEWARE_KEY)
    drain = Drain()
    # Metrics: every factory's refusals counted; the metrics middleware goes last and also
    # counts running calls for the drain (one Python middleware per call, not two), so a
    # call a factory before it refuses (auth) is never left counted as running.
    middleware = instrument(auth.pop("middleware", {}), {**ACTIONS, **SQL_ACTIONS}, hooks=drain)
    server = QuiverFlightServer(config, service, **tls, **auth, middleware=middleware, drain=drain)
    watch_budget(server.budget)
    # the other front doors (the REST namespace) check credentials the same way
    server.authenticator = factory.authenticator if factory is not None else None
    logging.getLogger("quiver").info(
        "serving %s on %s:%d (advertised: %s; tls: %s; auth: %s; memory budget: %s)",
        service.root,
        config.bind_location().rsplit(":", 1)[0],
        server.port,
        ", ".join(server.locations),
        "mutual" if config.tls_client_ca else ("on" if config.tls else "off"),
        "on" if config.auth_file else "off",
        f"{config.memory_budget} bytes" if config.memory_budget else "unlimited",
    )
    return server


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
