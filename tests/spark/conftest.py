"""Fixtures shared by the Spark tests: a local[2] session with `quiver` registered and an
in-process Quiver server on a loopback port (one of each per test module). A module may
define its own fixture of the same name (local-cluster mode, other settings) instead."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quiver.flight_server.config import ServerConfig
from quiver.flight_server.server import build_server

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from quiver.clients.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("quiver-tests")
        .config(PUSHDOWN, "true")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.faulthandler.enabled", "true")
        .getOrCreate()
    )
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    root = tmp_path_factory.mktemp("quiver-root")
    srv = build_server(ServerConfig(root=str(root), port=0))
    yield srv, root
    srv.shutdown()


@pytest.fixture(scope="module")
def uri(server: tuple[Any, Path]) -> str:
    return server[0].locations[0]


@pytest.fixture(scope="module")
def root(server: tuple[Any, Path]) -> Path:
    return server[1]
