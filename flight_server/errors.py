"""Errors at the Flight boundary: one table from engine and service errors to Flight errors.

Every RPC handler catches every exception and raises what `to_flight_error` returns: a
`pyarrow.flight` error whose message is one line naming what was wrong, with no server
path, traceback or secret, sent with the gRPC status of its code and, in the
`grpc-status-details-bin` trailer (a Flight error's `extra_info`), the code and details
(`wire.status`: ``NOT_FOUND``, or ``COMMIT_CONFLICT`` with ``retryable`` and ``version``).
(pyarrow sends the traceback of any other exception to the client, so nothing else may
escape a handler; `grpc_status` explains how the statuses are sent.)

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

from quiver.flight_server import grpc_status
from quiver.format.errors import (
    BranchNotFoundError,
    CleanupError,
    CommitConflictError,
    CorruptFileError,
    DatasetAlreadyExistsError,
    DatasetNotFoundError,
    IndexNotFoundError,
    InvalidInputError,
    SchemaMismatchError,
    StorageUnavailableError,
    TagNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from quiver.format.io.store import is_transient
from quiver.wire.errors import (
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


# engine error class -> code; the first matching row wins (subclasses before bases)
ENGINE_ERRORS: list[tuple[type[BaseException], str]] = [
    (DatasetNotFoundError, "not_found"),
    (VersionNotFoundError, "not_found"),
    (TagNotFoundError, "not_found"),
    (BranchNotFoundError, "not_found"),
    (IndexNotFoundError, "not_found"),
    (DatasetAlreadyExistsError, "already_exists"),
    (SchemaMismatchError, "invalid_argument"),
    (InvalidInputError, "invalid_argument"),  # FilterSyntaxError, FilterBindError, columns
    (CommitConflictError, "commit_conflict"),
    (UnsupportedFeatureError, "unimplemented"),
    (CorruptFileError, "data_corrupt"),
    (StorageUnavailableError, "unavailable"),
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
    if is_transient(exc):
        return "unavailable", {}
    if isinstance(exc, flight.FlightCancelledError):
        return "cancelled", {}
    return "internal", {}


def make_flight_error(code: str, message: str, **details: object) -> Exception:
    """The exception a handler raises for a failed call: the gRPC status of `code`
    (`wire.status`), the one-line message, the details in `grpc-status-details-bin`."""
    error = grpc_status.error(code, one_line(message), details)
    error.code = code  # type: ignore[attr-defined]
    return error


def to_flight_error(
    exc: BaseException, scrub: Scrubber | None = None, *, context: str = ""
) -> Exception:
    """Translate any exception into the Flight error a client may see.

    Unexpected exceptions are logged here with their traceback under an id that the
    client's message quotes; the client learns nothing else about them.
    """
    if getattr(exc, "_quiver", False):
        return exc  # type: ignore[return-value]  # already translated
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


# -- GetSchema and DoGet streams -------------------------------------------------------------
# pyarrow's GetSchema callback and DoGet's batch generators have no FlightError path (unlike
# the other RPCs): pyarrow sends any exception from them as a generic error with the formatted
# Python traceback, and pyarrow clients read GetSchema errors without `extra_info`
# (apache/arrow#43556). With `grpc_status` installed, GetSchema raises its StatusError like
# every other RPC. DoGet's batches are pulled by pyarrow's record batch reader, whose
# conversion of exceptions the helper cannot reach, so a stream's errors (and GetSchema's
# without the helper) raise the classes below: the gRPC status follows the code (NOT_FOUND,
# INVALID_ARGUMENT, UNIMPLEMENTED, else UNKNOWN), the traceback is suppressed, the code
# travels as the exception's name (pyarrow shows it as `Detail: Python exception:
# {"code":"not_found"}`) and the details in the `grpc-status-details-bin` trailer.

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


def schema_error(error: Exception, context: flight.ServerCallContext) -> Exception:
    """What get_schema raises for a translated error (see above)."""
    if isinstance(error, grpc_status.StatusError):
        grpc_status.add_details(error, context)
        return error
    return stream_error(error, context)


def stream_error(error: Exception, context: flight.ServerCallContext) -> Exception:
    """What a DoGet batch generator raises for a translated error (see above)."""
    code = str(getattr(error, "code", None) or "internal")
    if code not in _SCHEMA_CLASSES:
        label = json.dumps({"code": code}, separators=(",", ":"))
        _SCHEMA_CLASSES[code] = _traceback_free(
            _SCHEMA_BASES.get(code, pa_lib.ArrowException), label
        )
    grpc_status.add_details(error, context, always=True)
    message = str(error.args[0]) if error.args else "error"
    return _SCHEMA_CLASSES[code](message)
