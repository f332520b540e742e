"""Error codes and their exception classes, shared by the server and the clients.

Every error the server sends names its code and details (``not_found``, or
``commit_conflict`` with ``retryable`` and ``version``), with the gRPC status of the code
(`wire.status`); the class of each code is defined once here. The server raises them; a
client rebuilds them from the error's details (`clients.errors.from_flight_error`).
"""

from __future__ import annotations

from typing import Any


class QuiverError(Exception):
    """A failed request, as the client sees it.

    `message` is the one-line message, `code` the machine-readable code (`None` on the client
    when the server sent none and the transport status had no match) and `details` the
    other fields the server sent with the code (a client keeps them all, code included).
    """

    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: dict[str, Any] | None = None,
        **fields: Any,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details: dict[str, Any] = {**(details or {}), **fields}

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code!r})"


class InvalidArgument(QuiverError, ValueError):
    """The request is malformed: bad JSON, an unknown key, a bad name, filter or ticket."""

    code = "invalid_argument"


class NotFound(QuiverError, LookupError):
    """The dataset, version, tag, column, fragment or action does not exist."""

    code = "not_found"


class AlreadyExists(QuiverError):
    """A dataset or tag to be created exists, or fragments were committed already."""

    code = "already_exists"


class FailedPrecondition(QuiverError):
    """The request is well-formed but the dataset's state refuses it."""

    code = "failed_precondition"


class CommitConflict(QuiverError):
    """A concurrent commit won. `retryable` says whether committing again (on a fresh
    `read_version`) can succeed; `version` is the version it lost to, when known."""

    code = "commit_conflict"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: dict[str, Any] | None = None,
        retryable: bool | None = None,
        version: int | None = None,
    ) -> None:
        d = dict(details or {})
        explicit = {
            k: v for k, v in (("retryable", retryable), ("version", version)) if v is not None
        }
        if retryable is None:
            retryable = bool(d.get("retryable", False))
        if version is None:
            for key in ("version", "conflicting_version", "lost_to"):
                if isinstance(d.get(key), int) and not isinstance(d.get(key), bool):
                    version = d[key]
                    break
        super().__init__(message, code=code, details={**d, **explicit})
        self.retryable: bool = retryable
        self.version: int | None = version


class Unauthenticated(QuiverError):
    """No credentials, or the credentials or token were rejected."""

    code = "unauthenticated"


class PermissionDenied(QuiverError):
    """The caller is authenticated but may not do this to this dataset."""

    code = "permission_denied"


class Unavailable(QuiverError):
    """The server cannot serve now (draining, storage unreachable, not reachable);
    retry later or elsewhere."""

    code = "unavailable"


class Unimplemented(QuiverError):
    """An action, RPC or feature this server does not have."""

    code = "unimplemented"


class Cancelled(QuiverError):
    """The call was cancelled or its stream cut off."""

    code = "cancelled"


class DataCorrupt(QuiverError):
    """A file of a dataset is missing, truncated or malformed: the message names the
    dataset, version, fragment and file an operator has to restore."""

    code = "data_corrupt"


class Internal(QuiverError):
    """An unexpected server failure; the message quotes a reference to the server log."""

    code = "internal"


# code -> class, for every code the server sends
ERROR_CLASSES: dict[str, type[QuiverError]] = {
    cls.code: cls  # type: ignore[misc]
    for cls in (
        InvalidArgument,
        NotFound,
        AlreadyExists,
        FailedPrecondition,
        CommitConflict,
        Unauthenticated,
        PermissionDenied,
        Unavailable,
        Unimplemented,
        Cancelled,
        DataCorrupt,
        Internal,
    )
}
CODES: tuple[str, ...] = tuple(ERROR_CLASSES)
