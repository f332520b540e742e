"""Errors sent with the gRPC status of their code, a one-line message and their details.

pyarrow's Flight server sends an exception raised by a handler either as a pyarrow
`FlightError` (statuses INTERNAL, UNAVAILABLE, UNAUTHENTICATED, PERMISSION_DENIED,
CANCELLED, UNKNOWN only) or, for any other exception, with the Python traceback in the
message. `install` routes pyarrow's conversion of `StatusError`s to the status their
`_arrow_status` names (the C helper `flight_server._grpcstatus` explains how), so NOT_FOUND,
INVALID_ARGUMENT, ALREADY_EXISTS and UNIMPLEMENTED reach clients too, with the message as
written, from every RPC (GetSchema and DoGet streams included).

Where the helper cannot be installed (a platform without ELF, a pyarrow whose libraries
differ), `error` returns pyarrow's Flight error classes instead: the codes above become
UNKNOWN, and `flight_server.errors` keeps GetSchema's and streams' tracebacks out.
`QUIVER_GRPC_STATUS=pyarrow` asks for that behaviour.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
from typing import Any

import pyarrow
import pyarrow._flight
import pyarrow.flight as flight

from quiver.wire import status as wire_status

log = logging.getLogger("quiver.errors")

# Arrow StatusCode values (arrow/status.h) whose gRPC status needs no Flight detail
_ARROW_CODES = {
    wire_status.NOT_FOUND: 2,  # KeyError
    wire_status.INVALID_ARGUMENT: 4,  # Invalid
    wire_status.UNIMPLEMENTED: 10,  # NotImplemented
    wire_status.ALREADY_EXISTS: 45,  # AlreadyExists
}
# arrow::flight::FlightStatusCode values, for the statuses only a Flight detail gives
_FLIGHT_CODES = {
    wire_status.INTERNAL: 0,
    wire_status.DEADLINE_EXCEEDED: 1,
    wire_status.CANCELLED: 2,
    wire_status.UNAUTHENTICATED: 3,
    wire_status.PERMISSION_DENIED: 4,
    wire_status.UNAVAILABLE: 5,
    wire_status.UNKNOWN: 6,
}
# the pyarrow classes that say the same statuses, where the helper is not installed
_FALLBACK: dict[int, type[flight.FlightError]] = {
    wire_status.INTERNAL: flight.FlightInternalError,
    wire_status.DEADLINE_EXCEEDED: flight.FlightTimedOutError,
    wire_status.CANCELLED: flight.FlightCancelledError,
    wire_status.UNAUTHENTICATED: flight.FlightUnauthenticatedError,
    wire_status.PERMISSION_DENIED: flight.FlightUnauthorizedError,
    wire_status.UNAVAILABLE: flight.FlightUnavailableError,
}

# the status each of them sends
_FALLBACK_STATUS = {cls: status for status, cls in _FALLBACK.items()}


class StatusError(Exception):
    """A handler's error: raised, it ends the call with `grpc_code` and `message` exactly,
    `details` (serialized google.rpc.Status) in the `grpc-status-details-bin` trailer."""

    def __init__(self, code: str, message: str, grpc_code: int, details: bytes) -> None:
        super().__init__(message)
        self.code = code
        self.grpc_code = grpc_code
        self.extra_info = details
        if grpc_code in _ARROW_CODES:
            # Arrow sends no trailer for these (see `add_details`)
            self._arrow_status = (_ARROW_CODES[grpc_code], -1, message, b"")
        else:
            self._arrow_status = (0, _FLIGHT_CODES.get(grpc_code, 6), message, details)

    @property
    def needs_trailer(self) -> bool:
        """True when the details travel only if the handler adds them to the call's
        trailers (statuses without a Flight detail carry no `extra_info`)."""
        return self.grpc_code in _ARROW_CODES

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


_lock = threading.Lock()
_installed: bool | None = None


def _library(pattern: str) -> str | None:
    found = sorted(glob.glob(os.path.join(os.path.dirname(pyarrow.__file__), pattern)))
    return found[0] if found else None


def install() -> bool:
    """Route pyarrow's conversion of `StatusError`s to their own statuses (once per process);
    False when that is not possible here or `QUIVER_GRPC_STATUS=pyarrow` says not to."""
    global _installed
    with _lock:
        if _installed is not None:
            return _installed
        _installed = False
        if os.environ.get("QUIVER_GRPC_STATUS", "").strip().lower() == "pyarrow":
            return False
        try:
            from quiver.flight_server import _grpcstatus
        except ImportError:
            log.warning("gRPC statuses: the C helper is not built; using pyarrow's")
            return False
        libs = {
            "python": _library("libarrow_python.so.*"),
            "arrow": _library("libarrow.so.*"),
            "flight": _library("libarrow_flight.so.*"),
        }
        callers = [
            os.path.realpath(p)
            for p in (_library("libarrow_python_flight.so.*"), pyarrow._flight.__file__)
            if p
        ]
        if None in libs.values() or not callers:
            return False
        _installed = bool(
            _grpcstatus.install(callers, libs["python"], libs["arrow"], libs["flight"], StatusError)
        )
        if not _installed:
            log.warning(
                "gRPC statuses: pyarrow's libraries do not allow the helper; using pyarrow's"
            )
        return _installed


def error(code: str, message: str, details: dict[str, Any] | None = None) -> Exception:
    """The exception a handler raises for a failed call with this Quiver code."""
    grpc_code = wire_status.grpc_status(code, details)
    info = wire_status.encode(code, message, {"code": code, **(details or {})})
    if install():
        return StatusError(code, message, grpc_code, info)
    fallback = _FALLBACK.get(grpc_code, flight.FlightServerError)
    exc = fallback(message, extra_info=info)
    exc.code = code  # type: ignore[attr-defined]
    exc.grpc_code = _FALLBACK_STATUS.get(fallback, wire_status.UNKNOWN)  # type: ignore[attr-defined]
    return exc


def add_details(
    exc: BaseException, context: flight.ServerCallContext | None, *, always: bool = False
) -> None:
    """Put an error's details in the call's trailers where Arrow will not: for a StatusError
    whose status has no Flight detail, or (`always`) for an error raised where pyarrow sends
    none (a DoGet stream's). Once per error."""
    if context is None or getattr(exc, "_details_sent", False):
        return
    if not always and not (isinstance(exc, StatusError) and exc.needs_trailer):
        return
    try:
        context.add_trailer("grpc-status-details-bin", bytes(getattr(exc, "extra_info", b"")))
    except Exception:  # noqa: BLE001 - the details are a courtesy; the status is sent anyway
        return
    exc._details_sent = True  # type: ignore[attr-defined]
