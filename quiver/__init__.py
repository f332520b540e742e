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

import importlib
import os
from typing import TYPE_CHECKING, Any

# The process that started this one, read first thing (imports take a second or more on a busy
# machine): `quiver serve --exit-with-parent` must know its parent even if it dies meanwhile.
STARTED_BY = os.getppid()

# The public names and their modules, imported when first asked for: `import quiver` (and so
# every `quiver.*` import and `quiver --help`) does not load the engine and the client.
_LAZY = {
    "Client": "quiver.clients",
    "LanceDataset": "quiver.format.dataset",
    "dataset": "quiver.format.dataset",
    "write_dataset": "quiver.format.dataset",
    "LanceError": "quiver.format.errors",
    **dict.fromkeys(
        (
            "AlreadyExists",
            "CommitConflict",
            "DataCorrupt",
            "FailedPrecondition",
            "InvalidArgument",
            "NotFound",
            "PermissionDenied",
            "QuiverError",
            "Unauthenticated",
            "Unavailable",
        ),
        "quiver.clients.errors",
    ),
}

if TYPE_CHECKING:
    from quiver.clients import Client
    from quiver.clients.errors import (
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
    from quiver.format.dataset import LanceDataset, dataset, write_dataset
    from quiver.format.errors import LanceError


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'quiver' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
    from quiver.clients import Client

    return Client(uri, **options)


def register_spark(spark: Any) -> None:
    """Register the `quiver` data source with a SparkSession (PySpark 4.1 or later)."""
    from quiver.clients.spark import register

    register(spark)
