"""Health checks on a side port, and graceful shutdown (drain) on SIGTERM.

pyarrow's ``FlightServerBase`` cannot host extra gRPC services (apache/arrow#33129), so the
standard ``grpc.health.v1.Health`` service runs on its own port (``--health-port``) in a small
grpcio server: Kubernetes gRPC probes and ``grpc_health_probe`` work against it. It answers
SERVING for the whole server (service ``""``) and for ``arrow.flight.protocol.FlightService``
while the Flight server is up, and NOT_SERVING from the moment it starts draining.

Draining (:class:`Drain`, installed as the last Flight middleware): on SIGTERM (or SIGINT)
the server is marked NOT_SERVING, every *new* Flight call fails with ``FlightUnavailableError``
(``{"code": "unavailable"}``; clients retry another replica), running calls (a DoGet stream,
a DoPut) are let finish for up to ``--drain-seconds``; streams still running (or still
waiting for memory) then are ended with ``{"code": "unavailable"}`` (if the service wraps
them in :meth:`Drain.guard`; pyarrow sends errors raised mid-stream with gRPC status
UNKNOWN, see ``errors.stream_error``), the server shuts down and the process exits 0. A
second signal skips the wait.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from typing import Any, TypeVar

import pyarrow.flight as flight

from quiver.flight_server.errors import Unavailable, make_flight_error

__all__ = [
    "DRAIN_MIDDLEWARE_KEY",
    "FLIGHT_SERVICE_NAME",
    "Drain",
    "DrainMiddlewareFactory",
    "HealthServer",
    "serve_until_signalled",
]

log = logging.getLogger("quiver.health")

DRAIN_MIDDLEWARE_KEY = "drain"
FLIGHT_SERVICE_NAME = "arrow.flight.protocol.FlightService"
DEFAULT_DRAIN_SECONDS = 30.0

T = TypeVar("T")


def _unavailable(message: str) -> flight.FlightUnavailableError:
    return make_flight_error("unavailable", message)  # type: ignore[return-value]


class HealthServer:
    """``grpc.health.v1.Health`` on ``host:port`` (port 0: any free port, see ``.port``)."""

    SERVICES = ("", FLIGHT_SERVICE_NAME)

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        # grpcio (~8 MB resident) is loaded only by servers that have a health port
        import grpc
        from grpc_health.v1 import health, health_pb2, health_pb2_grpc

        self._statuses = health_pb2.HealthCheckResponse
        self._servicer = health.HealthServicer()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        health_pb2_grpc.add_HealthServicer_to_server(self._servicer, self._server)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.port = self._server.add_insecure_port(address)
        if not self.port:
            raise OSError(f"cannot bind the health port {address}")
        self.host = host
        self._stopped = False
        self._set(self._statuses.NOT_SERVING)

    def _set(self, status: int) -> None:
        for name in self.SERVICES:
            self._servicer.set(name, status)

    def start(self) -> HealthServer:
        self._server.start()
        return self

    def set_serving(self) -> None:
        self._set(self._statuses.SERVING)

    def set_not_serving(self) -> None:
        """NOT_SERVING for good: later ``set_serving`` calls are ignored."""
        self._servicer.enter_graceful_shutdown()

    def stop(self, grace: float | None = 1.0) -> None:
        if not self._stopped:
            self._stopped = True
            self._server.stop(grace).wait()


class _DrainMiddleware(flight.ServerMiddleware):
    def __init__(self, drain: Drain) -> None:
        self._drain = drain

    def call_completed(self, exception: BaseException | None) -> None:
        self._drain.call_done()


class DrainMiddlewareFactory(flight.ServerMiddlewareFactory):
    """Counts running calls; refuses new ones with UNAVAILABLE once draining."""

    def __init__(self, drain: Drain) -> None:
        self._drain = drain

    def start_call(self, info: flight.CallInfo, headers: Any) -> _DrainMiddleware:
        self._drain.call_started()
        return _DrainMiddleware(self._drain)


class Drain:
    """The running/draining state of one server process, shared by middleware and handlers.

    Install ``drain.middleware()`` under :data:`DRAIN_MIDDLEWARE_KEY` as the *last* entry of
    the server's middleware dict (an earlier factory that raises would otherwise leave a
    call counted that never completes), or hand it to ``metrics.instrument``, whose one
    middleware per call then counts it too (each middleware costs the call a few crossings
    from gRPC's threads into Python).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._draining = False
        self._stop_streams = False

    # -- middleware hooks
    def middleware(self) -> DrainMiddlewareFactory:
        return DrainMiddlewareFactory(self)

    def call_started(self) -> None:
        """Count a call as running; raises UNAVAILABLE once draining (for a middleware)."""
        with self._cond:
            if self._draining:
                raise _unavailable("the server is shutting down; retry on another replica")
            self._active += 1

    def call_done(self) -> None:
        """A call counted by `call_started` ended."""
        with self._cond:
            self._active -= 1
            if self._active <= 0:
                self._cond.notify_all()

    # -- state
    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def active_calls(self) -> int:
        return self._active

    def start(self) -> None:
        """Refuse new calls from now on."""
        with self._cond:
            self._draining = True

    def wait_idle(self, timeout: float | None) -> bool:
        """Wait until no call runs (True) or ``timeout`` seconds pass (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._active > 0:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is None else min(left, 0.5))
            return True

    @property
    def streams_stopped(self) -> bool:
        """Whether running streams are being ended (a drain past its deadline)."""
        return self._stop_streams

    def stop_streams(self) -> None:
        """Make streams wrapped by :meth:`guard` end with ``unavailable`` at their next batch."""
        self._stop_streams = True

    def guard(self, items: Iterable[T]) -> Iterator[T]:
        """Wrap a DoGet batch iterator so a drain past its deadline can end it: raises
        ``errors.Unavailable`` (translate it with ``errors.to_flight_error``)."""
        for item in items:
            if self._stop_streams:
                raise Unavailable("the server shut down during the stream; retry the ticket")
            yield item


def serve_until_signalled(
    server: Any,
    drain: Drain,
    *,
    health_server: HealthServer | None = None,
    drain_seconds: float = DEFAULT_DRAIN_SECONDS,
    signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT),
    on_ready: Callable[[], None] | None = None,
    on_drain: Callable[[], None] | None = None,
    still_wanted: Callable[[], bool] | None = None,
) -> int:
    """Serve until SIGTERM/SIGINT (or until ``still_wanted()``, asked twice a second,
    turns false), drain, shut ``server`` down; the process exit code (0).

    Must run on the main thread (signal handlers). ``server`` is a started
    ``FlightServerBase``; pyarrow servers listen from construction, ``serve()`` is not used.
    """
    stop = threading.Event()
    hurry = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        if stop.is_set():
            hurry.set()
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in signals}
    try:
        if health_server is not None:
            health_server.set_serving()
        if on_ready is not None:
            on_ready()
        while not stop.wait(0.5):
            if still_wanted is not None and not still_wanted():
                log.info("the process that started the server is gone")
                break
        log.info("shutdown requested: draining (up to %.1f s)", drain_seconds)
        if health_server is not None:
            health_server.set_not_serving()
        drain.start()
        if on_drain is not None:
            on_drain()
        deadline = time.monotonic() + drain_seconds
        while not hurry.is_set() and not drain.wait_idle(0.2):
            if time.monotonic() >= deadline:
                break
        if drain.active_calls:
            log.warning("%d call(s) still running after the drain; ending them", drain.active_calls)
            drain.stop_streams()
        # FlightServerBase.shutdown waits for every running call: bound it.
        done = threading.Event()

        def shut() -> None:
            try:
                server.shutdown()
            finally:
                done.set()

        threading.Thread(target=shut, name="quiver-shutdown", daemon=True).start()
        if not done.wait(10.0):
            log.error("the Flight server did not shut down in time; exiting anyway")
            if health_server is not None:
                health_server.stop(0)
            logging.shutdown()
            os._exit(0)
        if health_server is not None:
            health_server.stop()
        log.info("server stopped")
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
