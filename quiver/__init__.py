"""Quiver: Lance datasets over Apache Arrow Flight. The names users import.

    import quiver

    with quiver.connect("grpc://127.0.0.1:8815") as qc:   # the Flight client
        table = qc.read("sales", filter="x > 5")
    ds = quiver.dataset("data/sales.lance")              # the engine, pylance's API
    quiver.register_spark(spark)                          # the Spark data source `quiver`

Errors of the client are `quiver.QuiverError` subclasses (`NotFound`, `InvalidArgument`,
`CommitConflict`, ...); the engine's are `quiver.LanceError` subclasses.
"""

from __future__ import annotations

import os
from typing import Any

# The process that started this one, read before the imports below (a second or more on a busy
# machine): `quiver serve --exit-with-parent` must know its parent even if it dies meanwhile.
STARTED_BY = os.getppid()

from quiver.clients import Client  # noqa: E402
from quiver.clients.errors import (  # noqa: E402
    AlreadyExists,
    CommitConflict,
    DataCorrupt,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuiverError,
    Unauthenticated,
    Unavailable,
)
from quiver.format.dataset import LanceDataset, dataset, write_dataset  # noqa: E402
from quiver.format.errors import LanceError  # noqa: E402

__all__ = [
    "AlreadyExists",
    "Client",
    "CommitConflict",
    "DataCorrupt",
    "FailedPrecondition",
    "InvalidArgument",
    "LanceDataset",
    "LanceError",
    "NotFound",
    "PermissionDenied",
    "QuiverError",
    "Unauthenticated",
    "Unavailable",
    "connect",
    "dataset",
    "register_spark",
    "write_dataset",
]


def connect(uri: str, **options: Any) -> Client:
    """A client of the Quiver server at `uri` (`grpc://host:port` or `grpc+tls://...`);
    `options` are `Client`'s: `token`, `username` / `password`, TLS files, `timeout`."""
    return Client(uri, **options)


def register_spark(spark: Any) -> None:
    """Register the `quiver` data source with a SparkSession (PySpark 4.1 or later)."""
    from quiver.clients.spark import register

    register(spark)
