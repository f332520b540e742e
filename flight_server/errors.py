"""Errors at the Flight boundary: one table from engine and service errors to Flight errors.

Every RPC handler catches every exception and raises what `to_flight_error` returns: a
`pyarrow.flight` error whose message is one line naming what was wrong, with no server
path, traceback or secret, and whose `extra_info` is JSON such as
``{"code": "not_found"}`` or ``{"code": "commit_conflict", "retryable": true,
"version": 7}``. (pyarrow sends the traceback of any non-Flight exception to the client,
so nothing else may escape a handler.)

The codes and their exception classes are the wire contract's (`wire.errors`, shared with
the clients); service code raises those classes, re-exported here.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterable

import pyarrow.flight as flight
import pyarrow.lib as pa_lib

from format.errors import (
    CleanupError,
    CommitConflictError,
    CorruptFileError,
    DatasetAlreadyExistsError,
    DatasetNotFoundError,
    InvalidInputError,
    SchemaMismatchError,
    TagNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from wire.errors import (
    AlreadyExists,
    Cancelled,
    CommitConflict,
    DataCorrupt,
    FailedPrecondition,
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
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "QuiverError",
    "Scrubber",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "classify",
    "make_flight_error",
    "schema_error",
    "stream_error",
    "to_flight_error",
]

log = logging.getLogger("quiver.errors")

MAX_MESSAGE = 400


# code -> pyarrow.flight error class (which picks the gRPC status code)
_FLIGHT_CLASS: dict[str, type[flight.FlightError]] = {
    "unauthenticated": flight.FlightUnauthenticatedError,
    "permission_denied": flight.FlightUnauthorizedError,
    "unavailable": flight.FlightUnavailableError,
    "cancelled": flight.FlightCancelledError,
    "data_corrupt": flight.FlightInternalError,
    "internal": flight.FlightInternalError,
}

# engine error class -> code; the first matching row wins (subclasses before bases)
ENGINE_ERRORS: list[tuple[type[BaseException], str]] = [
    (DatasetNotFoundError, "not_found"),
    (VersionNotFoundError, "not_found"),
    (TagNotFoundError, "not_found"),
    (DatasetAlreadyExistsError, "already_exists"),
    (SchemaMismatchError, "invalid_argument"),
    (InvalidInputError, "invalid_argument"),  # FilterSyntaxError, FilterBindError, columns
    (CommitConflictError, "commit_conflict"),
    (UnsupportedFeatureError, "unimplemented"),
    (CorruptFileError, "data_corrupt"),
]

# absolute paths that survived scrubbing (e.g. from an fsspec message)
_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s/'\"]+/)+[^\s'\",;)]*")
_URI = re.compile(r"\b(?:file|s3|s3a|gs|gcs|az|abfs|memory|https?)://[^\s'\",;)]*")


class Scrubber:
    """Rewrites messages so that no storage location of the server reaches a client.

    Known prefixes (a dataset's URI, the root) become the names clients use; any other
    absolute path or URI left over becomes ``<path>``.
    """

    def __init__(self, replacements: Iterable[tuple[str, str]] = ()) -> None:
        pairs = [(a, b) for a, b in replacements if a]
        self._pairs = sorted(pairs, key=lambda p: -len(p[0]))

    def with_pairs(self, replacements: Iterable[tuple[str, str]]) -> Scrubber:
        """A scrubber that also knows these (secret prefix, public name) pairs."""
        return Scrubber([*self._pairs, *replacements])

    def __call__(self, message: str) -> str:
        for secret, public in self._pairs:
            message = message.replace(secret, public)
        message = _URI.sub("<path>", message)
        message = _PATH.sub("<path>", message)
        return one_line(message)


def one_line(message: str) -> str:
    """Whitespace runs (newlines included) become one space; long messages are cut."""
    message = " ".join(message.split())
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    return message or "error"


def classify(exc: BaseException) -> tuple[str, dict[str, object]]:
    """The code and extra details for an exception (internal for anything unexpected)."""
    if isinstance(exc, QuiverError):
        return exc.code or "internal", dict(exc.details)
    for cls, code in ENGINE_ERRORS:
        if isinstance(exc, cls):
            if isinstance(exc, CommitConflictError):
                return code, {"retryable": bool(exc.retryable), "version": exc.version}
            return code, {}
    if isinstance(exc, CleanupError):
        return "failed_precondition", {}
    if isinstance(exc, flight.FlightCancelledError):
        return "cancelled", {}
    return "internal", {}


def make_flight_error(code: str, message: str, **details: object) -> flight.FlightError:
    """A Flight error with a one-line message and JSON `extra_info` {"code": ..., ...}."""
    if code == "commit_conflict":
        cls = (
            flight.FlightUnavailableError if details.get("retryable") else flight.FlightServerError
        )
    else:
        cls = _FLIGHT_CLASS.get(code, flight.FlightServerError)
    info = json.dumps({"code": code, **details}, separators=(",", ":")).encode()
    return cls(one_line(message), extra_info=info)


def to_flight_error(
    exc: BaseException, scrub: Scrubber | None = None, *, context: str = ""
) -> flight.FlightError:
    """Translate any exception into the Flight error a client may see.

    Unexpected exceptions are logged here with their traceback under an id that the
    client's message quotes; the client learns nothing else about them.
    """
    if isinstance(exc, flight.FlightError) and getattr(exc, "_quiver", False):
        return exc  # already translated
    code, details = classify(exc)
    if code == "internal" and not isinstance(exc, QuiverError):
        ref = uuid.uuid4().hex[:12]
        log.error("internal error %s in %s", ref, context or "call", exc_info=exc)
        message = f"internal error (reference {ref} in the server log)"
    elif code in ("internal", "data_corrupt"):
        log.error("%s in %s: %s", code, context or "call", exc)  # unscrubbed: paths included
        message = (scrub or Scrubber())(str(exc))
    else:
        message = (scrub or Scrubber())(str(exc))
    error = make_flight_error(code, message, **details)
    error._quiver = True  # type: ignore[attr-defined]
    return error


# -- GetSchema ------------------------------------------------------------------------------
# pyarrow's GetSchema server callback has no FlightError path (unlike every other RPC): it
# sends any exception as a generic error with the formatted Python traceback, and pyarrow
# clients read GetSchema errors without `extra_info` (apache/arrow#43556). So GetSchema
# errors use the classes below: the gRPC status follows the code (NOT_FOUND,
# INVALID_ARGUMENT, UNIMPLEMENTED, else UNKNOWN), the message stays one line, the
# traceback is suppressed, and the JSON code travels as the exception's name (pyarrow shows
# it as `Detail: Python exception: {"code":"not_found"}`) and in the
# `grpc-status-details-bin` trailer where other Flight clients read `extra_info`.

_SCHEMA_BASES: dict[str, type[Exception]] = {
    "not_found": pa_lib.ArrowKeyError,
    "invalid_argument": pa_lib.ArrowInvalid,
    "already_exists": pa_lib.ArrowInvalid,
    "failed_precondition": pa_lib.ArrowInvalid,
    "unimplemented": pa_lib.ArrowNotImplementedError,
}
_SCHEMA_CLASSES: dict[str, type[Exception]] = {}


def _traceback_free(base: type[Exception], name: str) -> type[Exception]:
    def cause(self: BaseException) -> None:
        # `traceback.format_exception` reads this; failing makes pyarrow fall back to
        # "Python exception: <class name>" instead of sending the server's stack
        raise RuntimeError("no traceback for clients")

    def text(self: BaseException) -> str:
        return str(self.args[0]) if self.args else ""

    return type(name, (base,), {"__cause__": property(cause), "__str__": text})


def schema_error(error: flight.FlightError, context: flight.ServerCallContext) -> Exception:
    """What get_schema raises for a translated Flight error (see above)."""
    try:
        info = json.loads(error.extra_info or b"{}")
    except ValueError:
        info = {}
    code = str(info.get("code", "internal"))
    if code not in _SCHEMA_CLASSES:
        label = json.dumps({"code": code}, separators=(",", ":"))
        _SCHEMA_CLASSES[code] = _traceback_free(
            _SCHEMA_BASES.get(code, pa_lib.ArrowException), label
        )
    try:
        context.add_trailer("grpc-status-details-bin", bytes(error.extra_info or b""))
    except Exception:  # noqa: BLE001 - the trailer is a courtesy
        pass
    message = str(error.args[0]) if error.args else "error"
    return _SCHEMA_CLASSES[code](message)


# -- DoGet streams --------------------------------------------------------------------------
# DoGet streams through a RecordBatchStream (GeneratorStream cannot send dictionary batches,
# apache/arrow#38480), and pyarrow sends an exception raised while reading its batches the
# way it sends GetSchema's: a generic error with the formatted traceback, without
# `extra_info`. So a stream's errors take the same traceback-free form.


def stream_error(error: flight.FlightError, context: flight.ServerCallContext) -> Exception:
    """What a DoGet batch generator raises for a translated Flight error (see above)."""
    return schema_error(error, context)
