"""The grpc.health.v1 side port and draining (flight_server.health) on a tiny Flight server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import grpc
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from flight_helpers import error_info
from grpc_health.v1 import health_pb2, health_pb2_grpc

from quiver.flight_server.errors import to_flight_error
from quiver.flight_server.health import (
    DRAIN_MIDDLEWARE_KEY,
    FLIGHT_SERVICE_NAME,
    Drain,
    HealthServer,
)

ROOT = Path(__file__).resolve().parents[2]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def health_status(port: int, service: str = "") -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


class SlowServer(flight.FlightServerBase):
    """DoGet streams ``n`` one-row batches, ``delay`` seconds apart (ticket ``n:delay``)."""

    def __init__(self, drain: Drain, **kwargs) -> None:
        super().__init__(**kwargs)
        self.drain = drain

    def do_get(self, context, ticket):
        n, delay = ticket.ticket.decode().split(":")

        def batches():
            for i in range(int(n)):
                time.sleep(float(delay))
                yield pa.record_batch([pa.array([i])], names=["i"])

        def translated():
            try:
                yield from self.drain.guard(batches())
            except Exception as e:
                raise to_flight_error(e) from None

        schema = pa.schema([("i", pa.int64())])
        return flight.GeneratorStream(schema, translated())

    def list_actions(self, context):
        return [("ping", "answers pong")]


def test_health_server_states() -> None:
    hs = HealthServer("127.0.0.1", 0).start()
    try:
        assert health_status(hs.port) == NOT_SERVING  # until the Flight server is up
        hs.set_serving()
        assert health_status(hs.port) == SERVING
        assert health_status(hs.port, FLIGHT_SERVICE_NAME) == SERVING
        with pytest.raises(grpc.RpcError) as info:
            health_status(hs.port, "no.such.Service")
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        hs.set_not_serving()
        hs.set_serving()  # ignored once draining
        assert health_status(hs.port) == NOT_SERVING
        assert health_status(hs.port, FLIGHT_SERVICE_NAME) == NOT_SERVING
    finally:
        hs.stop(0)


def test_drain_lets_running_streams_finish_and_refuses_new_calls() -> None:
    drain = Drain()
    server = SlowServer(
        drain, location=("127.0.0.1", 0), middleware={DRAIN_MIDDLEWARE_KEY: drain.middleware()}
    )
    try:
        client = flight.connect(f"grpc://127.0.0.1:{server.port}")
        assert list(client.list_actions())
        result: dict = {}

        def read() -> None:
            result["table"] = client.do_get(flight.Ticket(b"6:0.1")).read_all()

        reader = threading.Thread(target=read)
        reader.start()
        deadline = time.monotonic() + 5
        while drain.active_calls == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert drain.active_calls == 1
        drain.start()
        with pytest.raises(flight.FlightUnavailableError) as info:
            list(client.list_actions())
        assert error_info(info.value) == {"code": "unavailable"}
        assert drain.wait_idle(10)
        reader.join(10)
        assert result["table"].num_rows == 6
    finally:
        server.shutdown()


def test_drain_past_its_deadline_ends_guarded_streams() -> None:
    drain = Drain()
    server = SlowServer(
        drain, location=("127.0.0.1", 0), middleware={DRAIN_MIDDLEWARE_KEY: drain.middleware()}
    )
    try:
        client = flight.connect(f"grpc://127.0.0.1:{server.port}")
        errors: list[BaseException] = []

        def read() -> None:
            try:
                client.do_get(flight.Ticket(b"1000:0.05")).read_all()
            except flight.FlightError as e:
                errors.append(e)

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(0.3)
        drain.start()
        assert not drain.wait_idle(0.2)
        drain.stop_streams()
        assert drain.wait_idle(5)
        reader.join(5)
        assert len(errors) == 1 and isinstance(errors[0], flight.FlightUnavailableError)
    finally:
        server.shutdown()


SERVE_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import pyarrow as pa, pyarrow.flight as flight
    from quiver.flight_server.health import Drain, HealthServer, serve_until_signalled

    class Server(flight.FlightServerBase):
        def do_get(self, context, ticket):
            def batches():
                for i in range(20):
                    time.sleep(0.1)
                    yield pa.record_batch([pa.array([i])], names=["i"])
            return flight.GeneratorStream(pa.schema([("i", pa.int64())]), batches())

    drain = Drain()
    server = Server(("127.0.0.1", 0), middleware={"drain": drain.middleware()})
    health = HealthServer("127.0.0.1", 0).start()
    ready = lambda: print(server.port, health.port, flush=True)
    sys.exit(serve_until_signalled(server, drain, health_server=health,
                                   drain_seconds=float(sys.argv[1]), on_ready=ready))
    """
)


def test_serve_until_signalled_drains_then_exits_0() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE_SCRIPT, "20"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        flight_port, health_port = map(int, proc.stdout.readline().split())
        assert health_status(health_port) == SERVING
        client = flight.connect(f"grpc://127.0.0.1:{flight_port}")
        reader = client.do_get(flight.Ticket(b"x"))
        first = reader.read_chunk()
        os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while health_status(health_port) != NOT_SERVING:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with pytest.raises(flight.FlightUnavailableError):
            flight.connect(f"grpc://127.0.0.1:{flight_port}").do_get(flight.Ticket(b"y")).read_all()
        rest = reader.read_all()
        assert first.data.num_rows + rest.num_rows == 20
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
