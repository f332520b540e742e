"""Fixtures for the Flight server tests: a real server on a loopback port and helpers."""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from quiver.clients.errors import from_flight_error
from quiver.flight_server.config import ServerConfig
from quiver.flight_server.server import QuiverFlightServer, build_server
from quiver.wire import status as wire_status

TICKET_KEY = b"quiver-tests-shared-ticket-key-0123456789"


class AccessLog(logging.Handler):
    """Collects the server's access log lines (JSON) in memory."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(json.loads(record.getMessage()))

    def find(self, method: str, dataset: str | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in list(self.records)
            if r["method"] == method and (dataset is None or r["dataset"] == dataset)
        ]


@dataclass
class Served:
    """A running server, a client connected to it, and its storage root."""

    server: QuiverFlightServer
    client: fl.FlightClient
    root: Path
    log: AccessLog

    @property
    def uri(self) -> str:
        return self.server.locations[0]

    def path(self, name: str) -> str:
        return str(self.root / f"{name}.lance")

    # -- helpers --------------------------------------------------------------------------
    def action(self, name: str, body: Any = None) -> Any:
        raw = body if isinstance(body, bytes) else json.dumps(body or {}).encode()
        results = list(self.client.do_action(fl.Action(name, raw)))
        assert len(results) == 1
        return json.loads(results[0].body.to_pybytes())

    def info(self, cmd: Any) -> fl.FlightInfo:
        if isinstance(cmd, str):
            return self.client.get_flight_info(fl.FlightDescriptor.for_path(cmd))
        return self.client.get_flight_info(fl.FlightDescriptor.for_command(json.dumps(cmd)))

    def read_info(self, info: fl.FlightInfo) -> pa.Table:
        return concat([self.client.do_get(e.ticket).read_all() for e in info.endpoints], info)

    def read(self, cmd: Any) -> pa.Table:
        return self.read_info(self.info(cmd))

    def put(self, target: Any, data: pa.Table, **cmd: Any) -> dict[str, Any]:
        if isinstance(target, str) and not cmd:
            descriptor = fl.FlightDescriptor.for_path(target)
        else:
            doc = {"dataset": target, **cmd} if isinstance(target, str) else target
            descriptor = fl.FlightDescriptor.for_command(json.dumps(doc))
        return do_put(self.client, descriptor, data)


def concat(tables: list[pa.Table], info: fl.FlightInfo) -> pa.Table:
    """Endpoint tables end to end (row counts kept even without columns)."""
    batches = [b for t in tables for b in t.to_batches()]
    return pa.Table.from_batches(batches, schema=info.schema)


def do_put(client: fl.FlightClient, descriptor: fl.FlightDescriptor, data: pa.Table) -> Any:
    """Upload a table; the server's error if it refused (it may surface at close)."""
    writer, reader = client.do_put(descriptor, data.schema)
    try:
        writer.write_table(data)
        writer.done_writing()
        buf = reader.read()
    except fl.FlightError:
        try:
            writer.close()
        except fl.FlightError:
            pass
        raise
    except Exception:
        writer.close()  # raises the server's error, if that is what broke the stream
        raise
    writer.close()
    return json.loads(buf.to_pybytes())


def start(root: Path, **config: Any) -> tuple[QuiverFlightServer, AccessLog]:
    log = AccessLog()
    logging.getLogger("quiver.access").addHandler(log)
    logging.getLogger("quiver.access").setLevel(logging.INFO)
    config.setdefault("ticket_key", TICKET_KEY)
    server = build_server(ServerConfig(root=str(root), port=0, **config))
    return server, log


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server per test module over a fresh root."""
    root = tmp_path_factory.mktemp("root")
    server, log = start(root)
    client = fl.connect(server.locations[0])
    yield Served(server, client, root, log)
    client.close()
    server.shutdown()
    logging.getLogger("quiver.access").removeHandler(log)


_names = itertools.count()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A dataset name unique to the test."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:40]
    return f"{base}_{next(_names)}_{os.getpid()}"


def files_under(path: str | Path) -> list[str]:
    """Every file below a directory, relative to it."""
    out = []
    for dirpath, _, files in os.walk(path):
        for f in files:
            out.append(os.path.relpath(os.path.join(dirpath, f), path))
    return sorted(out)


def error_info(exc: BaseException) -> dict[str, Any]:
    """The code and details of a failed call's pyarrow exception, as the Python client reads
    them: the `extra_info` (`wire.status`), else (GetSchema's errors, which pyarrow reads
    without details: apache/arrow#43556) what the gRPC status says, or the code the server
    names in the message when it cannot set statuses itself."""
    assert isinstance(exc, pa.ArrowException), repr(exc)
    if isinstance(exc, fl.FlightError) and exc.extra_info:
        found = wire_status.decode(exc.extra_info)
        assert found is not None and found.code, exc.extra_info
    error = from_flight_error(exc)
    assert error.code, repr(exc)
    return error.details or {"code": error.code}


def error_code(exc: BaseException) -> str:
    """The code of a failed call's pyarrow exception (`error_info`)."""
    return str(error_info(exc)["code"])


def assert_clean_error(exc: BaseException, code: str, root: Path | None = None) -> str:
    """A one-line message with the JSON code, no traceback and no server path."""
    info = error_info(exc)
    assert info["code"] == code, (info, str(exc))
    message = str(exc)
    assert "\n" not in message, message
    assert "Traceback" not in message and 'File "' not in message, message
    assert '", line ' not in message, message
    assert ".py" not in message, message
    if root is not None:
        assert str(root) not in message, message
    assert "/tmp" not in message and os.getcwd() not in message, message
    return message


def table(n: int, start: int = 0) -> pa.Table:
    """A small table of varied types."""
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array([i * 0.5 for i in ids], pa.float64()),
            "s": pa.array([None if i % 7 == 0 else f"s{i % 13}" for i in ids], pa.string()),
            "flag": pa.array([i % 2 == 0 for i in ids], pa.bool_()),
            "tags": pa.array([[f"t{i % 3}"] * (i % 3) for i in ids], pa.list_(pa.string())),
        }
    )
