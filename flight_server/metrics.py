"""Prometheus metrics of one `quiver serve` process (``--metrics-port`` / ``QUIVER_METRICS_PORT``).

What is measured, and where:

- **Requests** (`MetricsMiddlewareFactory`, the last Flight middleware, installed by
  `instrument`): ``quiver_requests_total{rpc, code}`` and the latency histogram
  ``quiver_request_duration_seconds{rpc}`` (a DoGet lasts until its stream ends),
  ``quiver_requests_in_flight{rpc}``. ``rpc`` is the Flight method (``DoGet``, ``DoPut``...)
  or ``DoAction:<action>`` for a known action (``DoAction:other`` for any other name, so a
  client cannot grow the label set); ``code`` is ``ok`` or the error code the client got
  (``not_found``, ``commit_conflict``...). Calls refused by an earlier middleware (a bad
  credential, a draining server) are counted too, wrapped by `instrument`.
- **Rows and bytes**, from the server's per-call record (`record_call`, called where the
  access log line is written): ``quiver_streamed_rows_total`` / ``_bytes_total`` (DoGet),
  ``quiver_written_rows_total`` / ``_bytes_total`` (DoPut, committed or staged; bytes are the
  uploaded Arrow data) and ``quiver_commit_conflicts_total{rpc}`` (conflicts clients saw).
- **Streams and memory** (`watch_budget`, read when scraped): ``quiver_streams_in_flight``,
  ``quiver_streams_waiting``, ``quiver_stream_memory_bytes`` (what running DoGet streams
  hold, as the memory budget accounts it), ``quiver_stream_memory_peak_bytes`` and
  ``quiver_stream_memory_limit_bytes`` (0: unlimited), ``quiver_streams_admitted_total``.
- **Writes and staging**, called by the write paths: `committed` →
  ``quiver_commits_total{operation}``, `staged` → ``quiver_staged_fragments_total``; the
  staging sweep (`counting_sweep`) → ``quiver_sweeps_total``,
  ``quiver_sweep_removed_files_total``, ``quiver_sweep_removed_records_total``.
- The usual ``process_*``, ``python_gc_*`` and ``python_info`` collectors.

All metrics live in `REGISTRY` (not prometheus-client's global one), served by `serve`.
"""

from __future__ import annotations

import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import pyarrow.flight as flight
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from quiver.flight_server._threadstate import pin as pin_thread_state
from quiver.wire import status as wire_status

__all__ = [
    "METRICS_MIDDLEWARE_KEY",
    "REGISTRY",
    "MetricsMiddlewareFactory",
    "MetricsServer",
    "committed",
    "counting_sweep",
    "instrument",
    "record_call",
    "serve",
    "staged",
    "watch_budget",
]

METRICS_MIDDLEWARE_KEY = "metrics"
REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

# Seconds: quick metadata calls (ms) up to long streams and compactions (minutes).
_LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, float("inf"),
)  # fmt: skip

REQUESTS = Counter(
    "quiver_requests",
    "Flight calls finished, by RPC (DoAction:<action>) and the code the client got",
    ["rpc", "code"],
    registry=REGISTRY,
)
DURATION = Histogram(
    "quiver_request_duration_seconds",
    "Flight call latency, by RPC; a DoGet lasts until its stream ends",
    ["rpc"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
IN_FLIGHT = Gauge(
    "quiver_requests_in_flight",
    "Flight calls running now, by Flight method",
    ["rpc"],
    registry=REGISTRY,
)
STREAMED_ROWS = Counter(
    "quiver_streamed_rows", "Rows sent by DoGet streams", registry=REGISTRY
)  # fmt: skip
STREAMED_BYTES = Counter(
    "quiver_streamed_bytes", "Arrow bytes of the batches DoGet streams sent", registry=REGISTRY
)
WRITTEN_ROWS = Counter(
    "quiver_written_rows", "Rows written by DoPut (committed or staged)", registry=REGISTRY
)
WRITTEN_BYTES = Counter(
    "quiver_written_bytes", "Arrow bytes uploaded by successful DoPut calls", registry=REGISTRY
)
CONFLICTS = Counter(
    "quiver_commit_conflicts",
    "Commits refused because a concurrent commit won, by RPC",
    ["rpc"],
    registry=REGISTRY,
)
COMMITS = Counter(
    "quiver_commits",
    "New dataset versions committed, by operation",
    ["operation"],
    registry=REGISTRY,
)
STAGED = Counter(
    "quiver_staged_fragments",
    "Fragments staged by DoPut(commit=false), not yet visible",
    registry=REGISTRY,
)
SWEEPS = Counter("quiver_sweeps", "Runs of the expired-staging sweep", registry=REGISTRY)
SWEPT_FILES = Counter(
    "quiver_sweep_removed_files",
    "Data files of expired, uncommitted stagings removed by the sweep",
    registry=REGISTRY,
)
SWEPT_RECORDS = Counter(
    "quiver_sweep_removed_records",
    "Staging records settled (removed) by the sweep",
    registry=REGISTRY,
)

_METHODS = {
    "HANDSHAKE": "Handshake",
    "LIST_FLIGHTS": "ListFlights",
    "GET_FLIGHT_INFO": "GetFlightInfo",
    "POLL_FLIGHT_INFO": "PollFlightInfo",
    "GET_SCHEMA": "GetSchema",
    "DO_GET": "DoGet",
    "DO_PUT": "DoPut",
    "DO_ACTION": "DoAction",
    "LIST_ACTIONS": "ListActions",
    "DO_EXCHANGE": "DoExchange",
}
_CODE_IN_MESSAGE = re.compile(r'\{"code":\s*"([a-z_]{1,40})"')
_CLASS_CODES: tuple[tuple[type, str], ...] = (
    (flight.FlightUnauthenticatedError, "unauthenticated"),
    (flight.FlightUnauthorizedError, "permission_denied"),
    (flight.FlightUnavailableError, "unavailable"),
    (flight.FlightCancelledError, "cancelled"),
    (flight.FlightTimedOutError, "deadline_exceeded"),
)
_KNOWN_CODES = frozenset(
    "ok invalid_argument not_found already_exists commit_conflict failed_precondition "
    "unauthenticated permission_denied unavailable unimplemented cancelled data_corrupt "
    "internal deadline_exceeded".split()
)


def method_name(info: flight.CallInfo | Any) -> str:
    """``DoGet``... for a call's `flight.CallInfo` (its `FlightMethod`)."""
    method = getattr(info, "method", info)
    name = getattr(method, "name", None) or str(method).rsplit(".", 1)[-1]
    return _METHODS.get(name, "other")


def error_code(exc: BaseException | None) -> str:
    """The code a client got for `exc` (None: ``ok``): the error's own ``code``, else the
    one in its ``extra_info`` (`wire.status`) or message, else what its Flight error class
    stands for."""
    if exc is None:
        return "ok"
    code = getattr(exc, "code", None)
    raw = getattr(exc, "extra_info", None)
    if not isinstance(code, str) and raw:
        found = wire_status.decode(bytes(raw))
        code = found.code if found else None
    if not isinstance(code, str):
        match = _CODE_IN_MESSAGE.search(str(exc))
        code = match.group(1) if match else None
    if not isinstance(code, str):
        code = next((c for cls, c in _CLASS_CODES if isinstance(exc, cls)), "internal")
    return code if code in _KNOWN_CODES else "internal"


class CallHooks(Protocol):
    """What a call's start and end also tell (the server's drain state, `health.Drain`)."""

    def call_started(self) -> None: ...

    def call_done(self) -> None: ...


class _MetricsMiddleware(flight.ServerMiddleware):
    """One call: its start time; the handler may name its action and final code."""

    def __init__(self, factory: MetricsMiddlewareFactory, method: str) -> None:
        self.factory = factory
        self.method = method
        self.rpc = method
        self.code: str | None = None
        self.started = time.perf_counter()
        IN_FLIGHT.labels(method).inc()

    def call_completed(self, exception: BaseException | None) -> None:
        try:
            IN_FLIGHT.labels(self.method).dec()
            code = self.code if self.code is not None else error_code(exception)
            if exception is not None and code == "ok":
                code = error_code(exception)
            REQUESTS.labels(self.rpc, code).inc()
            DURATION.labels(self.rpc).observe(time.perf_counter() - self.started)
        finally:
            if self.factory.hooks is not None:
                self.factory.hooks.call_done()


class MetricsMiddlewareFactory(flight.ServerMiddlewareFactory):
    """Times and counts every call that reaches the handlers (register it last); with
    `hooks`, also tells them each call's start (which may refuse it) and end."""

    def __init__(self, actions: Iterable[str] = (), hooks: CallHooks | None = None) -> None:
        self.actions = frozenset(actions)
        self.hooks = hooks

    def start_call(self, info: flight.CallInfo, headers: Any) -> _MetricsMiddleware:
        # Every call passes here on one of gRPC's threads: from now on that thread keeps its
        # Python thread state instead of making one per callback (flight_server/_threadstate.c)
        pin_thread_state()
        method = method_name(info)
        if self.hooks is not None:
            try:
                self.hooks.call_started()
            except BaseException as e:
                REQUESTS.labels(method, error_code(e)).inc()
                raise
        return _MetricsMiddleware(self, method)

    def rpc_label(self, method: str) -> str:
        """The ``rpc`` label for the server's method name (``DoAction:commit``...)."""
        if method.startswith("DoAction:"):
            action = method.split(":", 1)[1]
            return f"DoAction:{action}" if action in self.actions else "DoAction:other"
        base, _, variant = method.partition(":")
        if variant == "sql" and base in _METHODS.values():  # Flight SQL's calls, apart
            return method
        return method if method in _METHODS.values() else "other"


class _CountRefusals(flight.ServerMiddlewareFactory):
    """Another middleware factory, unchanged, whose refusals of a call are counted."""

    def __init__(self, inner: flight.ServerMiddlewareFactory) -> None:
        self.inner = inner

    def start_call(self, info: flight.CallInfo, headers: Any) -> flight.ServerMiddleware | None:
        try:
            return self.inner.start_call(info, headers)
        except BaseException as e:
            REQUESTS.labels(method_name(info), error_code(e)).inc()
            raise

    def __getattr__(self, name: str) -> Any:  # the inner factory's own attributes
        return getattr(self.inner, name)


def instrument(
    middleware: Mapping[str, flight.ServerMiddlewareFactory],
    actions: Iterable[str] = (),
    hooks: CallHooks | None = None,
) -> dict[str, flight.ServerMiddlewareFactory]:
    """The server's middleware with metrics: each factory's refusals counted, and
    `MetricsMiddlewareFactory` last (a call refused earlier never starts it, so nothing
    is left counted as running), telling `hooks` of each call it starts and ends.
    `actions` are the action names used as labels."""
    wrapped: dict[str, flight.ServerMiddlewareFactory] = {
        key: _CountRefusals(factory) for key, factory in middleware.items()
    }
    wrapped[METRICS_MIDDLEWARE_KEY] = MetricsMiddlewareFactory(actions, hooks)
    return wrapped


def _middleware(context: flight.ServerCallContext) -> _MetricsMiddleware | None:
    try:
        found = context.get_middleware(METRICS_MIDDLEWARE_KEY)
    except Exception:  # noqa: BLE001 - no metrics middleware on this server
        return None
    return found if isinstance(found, _MetricsMiddleware) else None


def record_call(
    context: flight.ServerCallContext | None,
    method: str,
    status: str,
    rows: int | None = None,
    nbytes: int | None = None,
) -> None:
    """What the server knows of a finished call (its access log line): the action name and
    code for the request counters, rows and bytes streamed or written, commit conflicts."""
    mw = _middleware(context) if context is not None else None
    rpc = mw.factory.rpc_label(method) if mw is not None else method.split(":", 1)[0]
    if mw is not None:
        mw.rpc = rpc
        mw.code = status if status in _KNOWN_CODES else "internal"
    kind = method.partition(":")[0]
    if kind == "DoGet":
        if rows:
            STREAMED_ROWS.inc(rows)
        if nbytes:
            STREAMED_BYTES.inc(nbytes)
    elif kind == "DoPut" and status == "ok":
        if rows:
            WRITTEN_ROWS.inc(rows)
        if nbytes:
            WRITTEN_BYTES.inc(nbytes)
    if status == "commit_conflict":
        CONFLICTS.labels(rpc).inc()


def committed(operation: str) -> None:
    """A new version was committed (``append``, ``overwrite``, ``create``, ``delete``...)."""
    COMMITS.labels(operation).inc()


def staged(fragments: int) -> None:
    """A DoPut(commit=false) staged `fragments` fragments."""
    if fragments:
        STAGED.inc(fragments)


def counting_sweep(sweep: Callable[[], Any]) -> Callable[[], Any]:
    """`sweep` (the service's staging sweep) counting its runs and what it removed."""

    def run() -> Any:
        stats = sweep()
        SWEEPS.inc()
        if isinstance(stats, Mapping):
            SWEPT_FILES.inc(max(0, int(stats.get("removed_files", 0) or 0)))
            SWEPT_RECORDS.inc(max(0, int(stats.get("records", 0) or 0)))
        return stats

    return run


# ---------------------------------------------------------------------------- the budget
class _BudgetCollector:
    """Gauges read off the memory budgets of the servers alive in this process (one in
    `quiver serve`; tests may run several, which are then added up)."""

    def __init__(self) -> None:
        self._budgets: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, budget: Any) -> None:
        with self._lock:
            self._budgets.add(budget)

    def collect(self) -> Iterable[Any]:
        with self._lock:
            budgets = list(self._budgets)

        def total(attr: str) -> float:
            return float(sum(getattr(b, attr, 0) or 0 for b in budgets))

        def gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, value=value)

        yield gauge("quiver_streams_in_flight", "DoGet streams running now", total("active"))
        yield gauge(
            "quiver_streams_waiting", "DoGet streams waiting for memory now", total("waiting")
        )
        yield gauge(
            "quiver_stream_memory_bytes",
            "Bytes running DoGet streams hold, as the memory budget accounts them",
            total("in_use"),
        )
        yield gauge(
            "quiver_stream_memory_peak_bytes",
            "The most bytes DoGet streams held at once since the start",
            total("peak"),
        )
        yield gauge(
            "quiver_stream_memory_limit_bytes",
            "The memory budget of DoGet streams (--memory-budget; 0: unlimited)",
            total("limit"),
        )
        admitted = CounterMetricFamily(
            "quiver_streams_admitted", "DoGet streams admitted by the memory budget"
        )
        admitted.add_metric([], total("admitted_total"))
        yield admitted

    def describe(self) -> Iterable[Any]:
        return list(self.collect())


_BUDGETS = _BudgetCollector()
REGISTRY.register(_BUDGETS)


def watch_budget(budget: Any) -> None:
    """Report `budget` (a `flight_server.budget.MemoryBudget`) in the stream gauges."""
    _BUDGETS.add(budget)


# ---------------------------------------------------------------------------- endpoint
class MetricsServer:
    """The HTTP endpoint serving `REGISTRY` (``/metrics``, any path works) on a daemon thread."""

    def __init__(self, host: str, port: int) -> None:
        from prometheus_client import start_http_server

        self._httpd, self._thread = start_http_server(port, addr=host, registry=REGISTRY)
        self.host = host
        self.port: int = self._httpd.server_port

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def serve(host: str, port: int) -> MetricsServer:
    """Start serving the metrics on `host:port` (0: any free port, see ``.port``)."""
    return MetricsServer(host, port)
