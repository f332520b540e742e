"""The exceptions of the Quiver client, built from the server's machine-readable error codes.

The server puts a JSON object in the `extra_info` of every Flight error it raises, such as
`{"code": "not_found"}`; the codes and their classes are the wire contract's
(`wire.errors`), shared with the server. `from_flight_error` turns a
`pyarrow.flight.FlightError` (or another Arrow error raised by a Flight call) into the
matching subclass of `QuiverError`, keeping the server's one-line message and the whole
JSON object in `details`. Errors without a known code fall back on the gRPC status the
pyarrow exception class stands for.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from wire.errors import (
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


# GetSchema errors reach pyarrow clients without `extra_info` (apache/arrow#43556); the
# Quiver server then names the exception class after the JSON code, which pyarrow shows as
# `Detail: Python exception: {"code":"not_found"}`.
_CODE_IN_TEXT = re.compile(r"Detail: Python exception: (\{[^{}\n]*\})")


def _details(exc: BaseException) -> dict[str, Any]:
    raw = getattr(exc, "extra_info", None)
    if raw:
        try:
            value = json.loads(bytes(raw).decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return {}
        return value if isinstance(value, dict) else {}
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

    The JSON `code` in `extra_info` decides the class; without a known one, the pyarrow
    exception class does (unauthenticated, unauthorized, unavailable, not found, invalid).
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
    if cls is not None:
        return cls(message, details=details)
    if not isinstance(code, str):
        code = next((c for base, c in _CLASS_CODES if isinstance(exc, base)), None)
    return QuiverError(message, code=code, details=details)
