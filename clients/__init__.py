"""Clients of the Quiver Flight server: the typed Python client (`Client`) and its errors.

The PySpark data source is `clients.spark`; the Node.js client lives in `clients/node/`.
The errors are the wire contract's classes (`wire.errors`), one per server error code.
"""

from quiver.clients.errors import (
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
from quiver.clients.flight import Client

__all__ = [
    "AlreadyExists",
    "Cancelled",
    "Client",
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
]
