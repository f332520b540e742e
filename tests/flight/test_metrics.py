"""The Prometheus endpoint: scraped from a real `quiver serve` after known traffic."""

from __future__ import annotations

import time
import urllib.request

import pyarrow as pa
import pyarrow.flight as fl
import pytest
from server_process import free_port, quiver_serve

from quiver.clients import Client
from quiver.clients.errors import NotFound, QuiverError
from quiver.flight_server import metrics
from quiver.flight_server.config import ConfigError, ServerConfig
from quiver.wire import status as wire_status


def scrape(port: int) -> dict[str, float]:
    """`name{labels}` → value of every sample on the endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def _table(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def test_counters_match_the_traffic_sent(tmp_path):
    port = free_port()
    with quiver_serve(tmp_path, "--metrics-port", str(port)) as (uri, _pid), Client(uri) as q:
        before = scrape(port)
        assert before["quiver_stream_memory_limit_bytes"] == 104 * 1024 * 1024
        assert before["quiver_streamed_rows_total"] == 0
        sizes = [1000, 2000, 500]
        for i, n in enumerate(sizes):
            q.write("m", _table(sum(sizes[:i]), n))
        frags = q.stage("m", _table(3500, 100)) + q.stage("m", _table(3600, 100))
        q.commit("m", frags)
        table = q.read("m", parallel=1)
        assert table.num_rows == 3700
        with pytest.raises(NotFound):
            q.describe("missing")
        with pytest.raises(QuiverError):
            q.action("no_such_action", {})
        endpoints = len(q.flight_info("m").endpoints)

        m = scrape(port)
        ok = 'quiver_requests_total{code="ok",rpc="%s"}'
        assert m[ok % "DoPut"] == 5  # three writes, two staging puts
        assert m[ok % "DoAction:commit"] == 1
        assert m[ok % "GetFlightInfo"] == 2
        assert m[ok % "DoGet"] == endpoints == 5
        assert m['quiver_requests_total{code="not_found",rpc="DoAction:describe"}'] == 1
        assert m['quiver_requests_total{code="unimplemented",rpc="DoAction:other"}'] == 1
        assert not any("no_such_action" in k for k in m)  # unknown names never become labels
        assert m['quiver_request_duration_seconds_count{rpc="DoGet"}'] == endpoints
        assert m['quiver_request_duration_seconds_bucket{le="+Inf",rpc="DoPut"}'] == 5
        assert m['quiver_request_duration_seconds_sum{rpc="DoPut"}'] > 0
        assert m["quiver_streamed_rows_total"] == 3700
        assert m["quiver_streamed_bytes_total"] == 3700 * 8  # one int64 column
        assert m["quiver_written_rows_total"] == 3700
        assert m["quiver_written_bytes_total"] == 3700 * 8
        assert m['quiver_commits_total{operation="append"}'] == 4  # three puts, one commit
        assert m["quiver_staged_fragments_total"] == 2
        assert m["quiver_streams_admitted_total"] == endpoints
        assert m["quiver_streams_in_flight"] == 0 and m["quiver_stream_memory_bytes"] == 0
        assert m["quiver_stream_memory_peak_bytes"] > 0
        assert m['quiver_requests_in_flight{rpc="DoGet"}'] == 0
        assert m["process_resident_memory_bytes"] > 0

        # actions that make versions count as commits of their operation
        q.delete("m", "id < 10")
        q.add_columns("m", {"twice": "id * 2"})
        q.compact("m")  # five small fragments: one compaction commit
        q.compact("m")  # nothing left to do: no commit
        m = scrape(port)
        for operation in ("delete", "add_columns", "compact"):
            assert m[f'quiver_commits_total{{operation="{operation}"}}'] == 1, operation


def test_streams_in_flight_and_their_memory_while_a_stream_runs(tmp_path):
    port = free_port()
    args = ("--metrics-port", str(port), "--batch-size", "1024")
    with quiver_serve(tmp_path, *args) as (uri, _pid), Client(uri) as q:
        q.write("wide", pa.table({"s": pa.array(["x" * 200] * 200_000)}))
        info = q.flight_info("wide")
        with fl.connect(uri) as raw:
            reader = raw.do_get(info.endpoints[0].ticket)
            reader.read_chunk()  # the stream is admitted and running, held back by gRPC
            deadline = time.monotonic() + 10
            while (m := scrape(port))["quiver_streams_in_flight"] != 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert m["quiver_stream_memory_bytes"] > 0
            assert m['quiver_requests_in_flight{rpc="DoGet"}'] == 1
            reader.read_all()
        deadline = time.monotonic() + 10
        while (m := scrape(port))["quiver_streams_in_flight"] != 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert m["quiver_stream_memory_bytes"] == 0
        assert m['quiver_requests_total{code="ok",rpc="DoGet"}'] == 1


class _Refuse(fl.ServerMiddlewareFactory):
    def start_call(self, info, headers):
        if info.method == fl.FlightMethod.LIST_ACTIONS:
            raise fl.FlightUnauthenticatedError("no", extra_info=b'{"code":"unauthenticated"}')
        return None


class _Server(fl.FlightServerBase):
    def list_actions(self, context):
        return []

    def do_action(self, context, action):
        metrics.record_call(context, f"DoAction:{action.type}", "commit_conflict")
        raise fl.FlightUnavailableError("lost", extra_info=b'{"code":"commit_conflict"}')


def test_refusals_of_other_middleware_and_conflicts_are_counted():
    refused = metrics.REQUESTS.labels("ListActions", "unauthenticated")
    conflicts = metrics.CONFLICTS.labels("DoAction:commit")
    calls = metrics.REQUESTS.labels("DoAction:commit", "commit_conflict")
    before = (refused._value.get(), conflicts._value.get(), calls._value.get())
    middleware = metrics.instrument({"auth": _Refuse()}, actions=["commit"])
    assert list(middleware) == ["auth", metrics.METRICS_MIDDLEWARE_KEY]
    server = _Server("grpc://127.0.0.1:0", middleware=middleware)
    try:
        with fl.connect(f"grpc://127.0.0.1:{server.port}") as c:
            with pytest.raises(fl.FlightUnauthenticatedError):
                c.list_actions()
            with pytest.raises(fl.FlightUnavailableError):
                list(c.do_action(fl.Action("commit", b"")))
    finally:
        server.shutdown()
    after = (refused._value.get(), conflicts._value.get(), calls._value.get())
    assert [y - x for x, y in zip(before, after, strict=True)] == [1, 1, 1]


def test_error_codes():
    assert metrics.error_code(None) == "ok"
    err = fl.FlightServerError("x", extra_info=b'{"code":"not_found"}')
    assert metrics.error_code(err) == "not_found"
    err = fl.FlightInternalError("x", extra_info=wire_status.encode("data_corrupt", "x"))
    assert metrics.error_code(err) == "data_corrupt"
    assert metrics.error_code(Exception('bad. Detail: {"code":"data_corrupt"}')) == "data_corrupt"
    assert metrics.error_code(fl.FlightCancelledError("gone")) == "cancelled"
    assert metrics.error_code(fl.FlightServerError("x", extra_info=b"not json")) == "internal"
    assert metrics.error_code(Exception('{"code":"made_up_code"}')) == "internal"


def test_metrics_port_setting():
    assert ServerConfig.from_args([], env={}).metrics_port is None
    assert ServerConfig.from_args(["--metrics-port", "9100"], env={}).metrics_port == 9100
    assert ServerConfig.from_args([], env={"QUIVER_METRICS_PORT": "0"}).metrics_port == 0
    with pytest.raises(ConfigError, match="--metrics-port"):
        ServerConfig.from_args(["--metrics-port", "70000"], env={})
