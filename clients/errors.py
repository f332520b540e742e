"""The exceptions of the Quiver client, built from the server's machine-readable error codes.

The server sends every failure with the gRPC status of its code and, in the
`grpc-status-details-bin` trailer that pyarrow hands over as a Flight error's `extra_info`,
a `google.rpc.Status` naming the code and its details (`wire.status`); the codes and their
classes are the wire contract's (`wire.errors`), shared with the server. `from_flight_error`
turns a `pyarrow.flight.FlightError` (or another Arrow error raised by a Flight call) into
the matching subclass of `QuiverError`, keeping the server's one-line message and the
details (code included) in `details`. Errors without a known code fall back on the gRPC
status the pyarrow exception class stands for.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from quiver.wire import status as wire_status
from quiver.wire.errors import (
    ERROR_CLASSES,
    AlreadyExists,
    Cancelled,
    CommitConflict,
    DataCorrupt,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuiverError,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)

__all__ = [
    "AlreadyExists",
    "Cancelled",
    "CommitConflict",
    "DataCorrupt",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "QuiverError",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "from_flight_error",
    "server_message",
]

_BY_CODE = ERROR_CLASSES

# When the server sent no (known) code: the gRPC status that each pyarrow class stands for.
_BY_CLASS: tuple[tuple[type[BaseException], type[QuiverError]], ...] = (
    (flight.FlightUnauthenticatedError, Unauthenticated),
    (flight.FlightUnauthorizedError, PermissionDenied),
    (flight.FlightUnavailableError, Unavailable),
    (pa.ArrowKeyError, NotFound),  # gRPC NOT_FOUND
    (pa.ArrowInvalid, InvalidArgument),  # gRPC INVALID_ARGUMENT
    (flight.FlightCancelledError, Cancelled),
    (flight.FlightInternalError, Internal),
    (pa.ArrowNotImplementedError, Unimplemented),
)

# GetSchema's errors of a Flight status: an ArrowIOError whose text ends ". Detail: <code>"
_FLIGHT_DETAIL = re.compile(
    r"\. Detail: (Unauthenticated|Unauthorized|Unavailable|Cancelled|Internal)\b"
)
_BY_FLIGHT_DETAIL: dict[str, type[QuiverError]] = {
    "Unauthenticated": Unauthenticated,
    "Unauthorized": PermissionDenied,
    "Unavailable": Unavailable,
    "Cancelled": Cancelled,
    "Internal": Internal,
}

# Fallback codes for the pyarrow classes that have no Quiver subclass.
_CLASS_CODES: tuple[tuple[type[BaseException], str], ...] = (
    (flight.FlightTimedOutError, "deadline_exceeded"),
)

# What pyarrow and gRPC append to the server's message on the client side.
_SUFFIXES = (". Detail: ", ". gRPC client debug context: ", ". Client context: ")


def server_message(text: str) -> str:
    """The server's one-line message out of the text of a pyarrow Flight exception.

    pyarrow appends `. Detail: <status>` (and, for stream errors, gRPC debug context) to
    what the server raised; for a non-Flight exception it even appends the server's
    traceback. Only the server's own first line is kept.
    """
    text = text.strip()
    cut = len(text)
    for suffix in _SUFFIXES:
        i = text.find(suffix)
        if i != -1:
            cut = min(cut, i)
    text = text[:cut]
    line = text.splitlines()[0] if text else ""
    return line.strip() or "the server reported an error without a message"


# GetSchema errors reach pyarrow clients without `extra_info` (apache/arrow#43556): their
# gRPC status says the code. A server that cannot set statuses itself names the exception
# class after the code, which pyarrow shows as `Detail: Python exception: {"code":...}`.
_CODE_IN_TEXT = re.compile(r"Detail: Python exception: (\{[^{}\n]*\})")


def _details(exc: BaseException) -> dict[str, Any]:
    raw = getattr(exc, "extra_info", None)
    if raw:
        found = wire_status.decode(bytes(raw))
        return dict(found.details) if found else {}
    found = _CODE_IN_TEXT.search(str(exc))
    if found:
        try:
            value = json.loads(found.group(1))
        except ValueError:
            return {}
        if isinstance(value, dict) and isinstance(value.get("code"), str):
            return value
    return {}


def from_flight_error(exc: BaseException) -> QuiverError:
    """The `QuiverError` that a failed Flight call's exception stands for.

    The code in the error's details (`extra_info`, `wire.status`) decides the class; without
    a known one, the pyarrow exception class does (the gRPC status it stands for).
    An exception that is already a `QuiverError` is returned unchanged.
    """
    if isinstance(exc, QuiverError):
        return exc
    details = _details(exc)
    message = server_message(str(exc))
    code = details.get("code")
    cls: type[QuiverError] | None = _BY_CODE.get(code) if isinstance(code, str) else None
    if cls is None:
        for base, candidate in _BY_CLASS:
            if isinstance(exc, base):
                cls = candidate
                break
    if cls is None and isinstance(exc, pa.ArrowIOError):
        # GetSchema raises a Flight status as an IOError naming the Flight code
        found = _FLIGHT_DETAIL.search(str(exc))
        cls = _BY_FLIGHT_DETAIL.get(found.group(1)) if found else None
    if cls is not None:
        return cls(message, details=details)
    if not isinstance(code, str):
        code = next((c for base, c in _CLASS_CODES if isinstance(exc, base)), None)
    return QuiverError(message, code=code, details=details)
