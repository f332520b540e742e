"""Clients of the Quiver Flight server: the typed Python client (`Client`) and its errors.

The Spark data source and the Node.js client arrive with issue 5.
"""

from clients.errors import (
    AlreadyExists,
    CommitConflict,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuiverError,
    Unauthenticated,
    Unavailable,
)
from clients.flight import Client

__all__ = [
    "AlreadyExists",
    "Client",
    "CommitConflict",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "QuiverError",
    "Unauthenticated",
    "Unavailable",
]
