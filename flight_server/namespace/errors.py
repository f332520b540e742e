"""Errors of the Lance REST Namespace front door.

Every failure is the specification's ``ErrorResponse``, ``{"error": message, "code": N}``,
sent with the HTTP status pylance's reference adapter uses for that code. Clients (pylance,
lancedb, the generated REST client) choose their exception class from ``code`` alone, so a
body always carries one. Messages are one line and never hold a server path or a traceback:
engine and service errors go through the Flight server's classification and scrubber.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from quiver.flight_server.errors import Scrubber, classify, one_line
from quiver.format.errors import (
    IndexNotFoundError,
    TagNotFoundError,
    VersionNotFoundError,
)

log = logging.getLogger("quiver.namespace")

UNSUPPORTED = 0
NAMESPACE_NOT_FOUND = 1
NAMESPACE_ALREADY_EXISTS = 2
NAMESPACE_NOT_EMPTY = 3
TABLE_NOT_FOUND = 4
TABLE_ALREADY_EXISTS = 5
INDEX_NOT_FOUND = 6
INDEX_ALREADY_EXISTS = 7
TAG_NOT_FOUND = 8
TAG_ALREADY_EXISTS = 9
TRANSACTION_NOT_FOUND = 10
VERSION_NOT_FOUND = 11
COLUMN_NOT_FOUND = 12
INVALID_INPUT = 13
CONCURRENT_MODIFICATION = 14
PERMISSION_DENIED = 15
UNAUTHENTICATED = 16
SERVICE_UNAVAILABLE = 17
INTERNAL = 18
INVALID_TABLE_STATE = 19
SCHEMA_VALIDATION = 20
THROTTLING = 21
TABLE_BRANCH_NOT_FOUND = 22
TABLE_BRANCH_ALREADY_EXISTS = 23

# code -> HTTP status, as the reference adapter (`error_code_to_status`) answers
STATUS = {
    UNSUPPORTED: 406,
    NAMESPACE_NOT_FOUND: 404,
    NAMESPACE_ALREADY_EXISTS: 409,
    NAMESPACE_NOT_EMPTY: 409,
    TABLE_NOT_FOUND: 404,
    TABLE_ALREADY_EXISTS: 409,
    INDEX_NOT_FOUND: 404,
    INDEX_ALREADY_EXISTS: 409,
    TAG_NOT_FOUND: 404,
    TAG_ALREADY_EXISTS: 409,
    TRANSACTION_NOT_FOUND: 404,
    VERSION_NOT_FOUND: 404,
    COLUMN_NOT_FOUND: 404,
    INVALID_INPUT: 400,
    CONCURRENT_MODIFICATION: 409,
    PERMISSION_DENIED: 403,
    UNAUTHENTICATED: 401,
    SERVICE_UNAVAILABLE: 503,
    INTERNAL: 500,
    INVALID_TABLE_STATE: 409,
    SCHEMA_VALIDATION: 400,
    THROTTLING: 429,
    TABLE_BRANCH_NOT_FOUND: 404,
    TABLE_BRANCH_ALREADY_EXISTS: 409,
}

# Quiver's error codes (`wire.errors`) -> namespace codes; not_found and already_exists
# depend on what the route is about and come from the caller
_FROM_QUIVER = {
    "invalid_argument": INVALID_INPUT,
    "commit_conflict": CONCURRENT_MODIFICATION,
    "failed_precondition": INVALID_TABLE_STATE,
    "unauthenticated": UNAUTHENTICATED,
    "permission_denied": PERMISSION_DENIED,
    "unavailable": SERVICE_UNAVAILABLE,
    "unimplemented": UNSUPPORTED,
    "cancelled": INTERNAL,
    "data_corrupt": INVALID_TABLE_STATE,
    "deadline_exceeded": SERVICE_UNAVAILABLE,
}
# engine errors that say what was missing, whatever the route (a dataset missing or present
# is the route's object: the engine also reports an existing tag as an existing dataset)
_ENGINE_CODES: list[tuple[type[BaseException], int]] = [
    (VersionNotFoundError, VERSION_NOT_FOUND),
    (TagNotFoundError, TAG_NOT_FOUND),
    (IndexNotFoundError, INDEX_NOT_FOUND),
]


class NamespaceError(Exception):
    """A failed namespace call: the spec's error code and a one-line message."""

    def __init__(self, code: int, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = one_line(message)
        self._status = status

    @property
    def status(self) -> int:
        """The HTTP status this error is sent with (the code's, unless given)."""
        return self._status or STATUS.get(self.code, 500)

    def body(self) -> dict[str, Any]:
        """The ErrorResponse JSON."""
        return {"error": self.message, "code": self.code}


def invalid(message: str) -> NamespaceError:
    """A request the spec or Quiver refuses (400, code 13)."""
    return NamespaceError(INVALID_INPUT, message)


def unsupported(message: str) -> NamespaceError:
    """An operation Quiver does not offer (406, code 0)."""
    return NamespaceError(UNSUPPORTED, message)


def translate(
    exc: BaseException,
    scrub: Scrubber | None = None,
    *,
    not_found: int = TABLE_NOT_FOUND,
    exists: int = TABLE_ALREADY_EXISTS,
    context: str = "",
) -> NamespaceError:
    """`exc` as the namespace error a client may see. `not_found` / `exists` are the codes
    of the route's object (a table, a tag, an index...) for Quiver's generic ones.
    Unexpected exceptions are logged with their traceback under a reference the message
    quotes."""
    if isinstance(exc, NamespaceError):
        return exc
    for cls, code in _ENGINE_CODES:
        if isinstance(exc, cls):
            return NamespaceError(code, (scrub or Scrubber())(str(exc)))
    kind, _ = classify(exc)
    if kind == "internal" and type(exc).__module__.split(".")[0] != "quiver":
        ref = uuid.uuid4().hex[:12]
        log.error("internal error %s in %s", ref, context or "namespace call", exc_info=exc)
        return NamespaceError(INTERNAL, f"internal error (reference {ref} in the server log)")
    if kind in ("internal", "data_corrupt"):
        log.error("%s in %s: %s", kind, context or "namespace call", exc)
    code = {"not_found": not_found, "already_exists": exists}.get(kind)
    if code is None:
        code = _FROM_QUIVER.get(kind, INTERNAL)
    return NamespaceError(code, (scrub or Scrubber())(str(exc)))
