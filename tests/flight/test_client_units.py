"""The Python client without the Quiver server: error mapping, command building, plumbing.

The plumbing tests run the client against a tiny in-process `FlightServerBase` that plays
the parts of the contract the client relies on (JSON CMD descriptors, endpoints with
locations, bearer tokens, errors with a JSON `extra_info`).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from quiver.clients import (
    AlreadyExists,
    Cancelled,
    Client,
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
from quiver.clients.data import to_batches as _batches
from quiver.clients.errors import from_flight_error, server_message
from quiver.clients.flight import put_command, read_command, read_descriptor


def _info(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode()


# ------------------------------------------------------------------------------ error mapping


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("not_found", NotFound),
        ("invalid_argument", InvalidArgument),
        ("already_exists", AlreadyExists),
        ("commit_conflict", CommitConflict),
        ("unauthenticated", Unauthenticated),
        ("permission_denied", PermissionDenied),
        ("unavailable", Unavailable),
        ("failed_precondition", FailedPrecondition),
        ("unimplemented", Unimplemented),
        ("cancelled", Cancelled),
        ("data_corrupt", DataCorrupt),
        ("internal", Internal),
    ],
)
def test_code_picks_the_exception(code: str, cls: type[QuiverError]) -> None:
    exc = flight.FlightServerError("something is wrong", _info({"code": code, "dataset": "s"}))
    err = from_flight_error(exc)
    assert type(err) is cls
    assert isinstance(err, QuiverError)
    assert err.code == code
    assert err.message == "something is wrong" == str(err)
    assert err.details == {"code": code, "dataset": "s"}


def test_code_wins_over_the_pyarrow_class() -> None:
    exc = flight.FlightUnavailableError("no such dataset 'x'", _info({"code": "not_found"}))
    assert type(from_flight_error(exc)) is NotFound


def test_builtin_bases() -> None:
    assert isinstance(
        from_flight_error(flight.FlightServerError("m", _info({"code": "not_found"}))), LookupError
    )
    bad = from_flight_error(flight.FlightServerError("m", _info({"code": "invalid_argument"})))
    assert isinstance(bad, ValueError)


def test_commit_conflict_fields() -> None:
    exc = flight.FlightServerError(
        "commit of 'sales' conflicts with version 7 (overwrite)",
        _info({"code": "commit_conflict", "retryable": False, "version": 7}),
    )
    err = from_flight_error(exc)
    assert isinstance(err, CommitConflict)
    assert err.retryable is False and err.version == 7
    err = from_flight_error(
        flight.FlightServerError("lost", _info({"code": "commit_conflict", "retryable": True}))
    )
    assert isinstance(err, CommitConflict) and err.retryable is True and err.version is None
    # the server sends retryable conflicts with gRPC UNAVAILABLE; the JSON code decides
    err = from_flight_error(
        flight.FlightUnavailableError(
            "lost to 5", _info({"code": "commit_conflict", "retryable": True, "version": 5})
        )
    )
    assert isinstance(err, CommitConflict) and not isinstance(err, Unavailable)
    assert err.retryable is True and err.version == 5
    direct = CommitConflict("lost to 3", retryable=True, version=3)
    assert direct.retryable and direct.version == 3 and direct.code == "commit_conflict"


def test_message_keeps_only_the_servers_line() -> None:
    # what pyarrow shows on the client side of a DoGet that failed before the first batch
    text = (
        "bad filter: x >. Detail: Failed. gRPC client debug context: UNKNOWN:bad filter: x >. "
        "Detail: Failed. Client context: IOError: Server never sent a data message. "
        "Detail: Internal"
    )
    err = from_flight_error(flight.FlightServerError(text, _info({"code": "invalid_argument"})))
    assert err.message == "bad filter: x >"
    leaked = "oops. Detail: Python exception: Traceback (most recent call last):\n  File x\n"
    assert server_message(leaked) == "oops"
    assert server_message("first line\nsecond") == "first line"
    assert server_message("") != ""


@pytest.mark.parametrize(
    ("exc", "cls", "code"),
    [
        (flight.FlightUnauthenticatedError("no token"), Unauthenticated, "unauthenticated"),
        (flight.FlightUnauthorizedError("no right"), PermissionDenied, "permission_denied"),
        (flight.FlightUnavailableError("connection refused"), Unavailable, "unavailable"),
        (pa.ArrowKeyError("k"), NotFound, "not_found"),
        (pa.ArrowInvalid("bad"), InvalidArgument, "invalid_argument"),
        (flight.FlightTimedOutError("deadline"), QuiverError, "deadline_exceeded"),
        (flight.FlightCancelledError("cancelled"), Cancelled, "cancelled"),
        (flight.FlightInternalError("boom"), Internal, "internal"),
        (pa.ArrowNotImplementedError("no"), Unimplemented, "unimplemented"),
        (flight.FlightServerError("boom"), QuiverError, None),
    ],
)
def test_fallback_on_the_pyarrow_class(
    exc: BaseException, cls: type[QuiverError], code: str | None
) -> None:
    err = from_flight_error(exc)
    assert type(err) is cls and err.code == code and err.details == {}


def test_unreadable_or_unknown_extra_info() -> None:
    err = from_flight_error(flight.FlightServerError("m", b"\xff not json"))
    assert type(err) is QuiverError and err.details == {}
    err = from_flight_error(flight.FlightServerError("m", _info(["not", "an", "object"])))
    assert type(err) is QuiverError
    err = from_flight_error(flight.FlightServerError("m", _info({"code": "resource_exhausted"})))
    assert type(err) is QuiverError and err.code == "resource_exhausted"
    same = NotFound("x")
    assert from_flight_error(same) is same


# ------------------------------------------------------------------------------ commands


def test_read_command_only_has_what_is_set() -> None:
    assert read_command("sales") == {"dataset": "sales"}
    cmd = read_command(
        "team/sales", columns=("id", "x"), filter="x > 5", version=7, limit=10, with_row_id=True
    )
    assert cmd == {
        "dataset": "team/sales",
        "version": 7,
        "columns": ["id", "x"],
        "filter": "x > 5",
        "limit": 10,
        "with_row_id": True,
    }
    assert read_command("s", tag="q3") == {"dataset": "s", "tag": "q3"}
    assert read_command("s", columns=[]) == {"dataset": "s", "columns": []}


def test_read_command_as_of() -> None:
    assert read_command("s", as_of="2026-01-31T00:00:00Z")["as_of"] == "2026-01-31T00:00:00Z"
    aware = dt.datetime(2026, 1, 31, 1, 30, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert read_command("s", as_of=aware)["as_of"] == "2026-01-31T00:30:00Z"
    assert read_command("s", as_of=dt.date(2026, 1, 31))["as_of"] == "2026-01-31T00:00:00Z"


def test_read_command_rejects() -> None:
    with pytest.raises(InvalidArgument, match="at most one"):
        read_command("s", version=1, tag="q3")
    with pytest.raises(TypeError):
        read_command("s", columns="id")
    with pytest.raises(TypeError):
        read_command("s", version="7")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        read_command("s", limit=True)
    with pytest.raises(TypeError):
        read_command("")


def test_read_descriptor_is_json_cmd() -> None:
    d = read_descriptor("sales", filter="x > 5")
    assert d.descriptor_type == flight.DescriptorType.CMD
    assert json.loads(d.command) == {"dataset": "sales", "filter": "x > 5"}


def test_put_command() -> None:
    assert put_command("s") == {"dataset": "s", "mode": "append"}
    assert put_command("s", mode="create", commit=False) == {
        "dataset": "s",
        "mode": "create",
        "commit": False,
    }
    with pytest.raises(InvalidArgument):
        put_command("s", mode="upsert")


def test_data_conversions() -> None:
    t = pa.table({"id": [1, 2, 3], "s": ["a", "b", "c"]})
    for data in (
        t,
        t.to_batches()[0],
        pa.RecordBatchReader.from_batches(t.schema, t.to_batches()),
        iter(t.to_batches()),
        {"id": [1, 2, 3], "s": ["a", "b", "c"]},
        t.to_pylist(),
    ):
        schema, batches = _batches(data)
        assert schema.equals(t.schema)
        assert pa.Table.from_batches(list(batches), schema=schema).equals(t)
    with pytest.raises(TypeError):
        _batches(iter([]))
    with pytest.raises(TypeError):
        _batches(42)


def test_client_argument_checks() -> None:
    with pytest.raises(ValueError):
        Client("grpc://127.0.0.1:1", token="t", username="u", password="p")
    with pytest.raises(ValueError):
        Client("grpc://127.0.0.1:1", username="u")
    with pytest.raises(ValueError):
        Client("grpc://127.0.0.1:1", cert_chain=b"x")
    assert Client("127.0.0.1:1").uri == "grpc://127.0.0.1:1"


# ------------------------------------------------------------------------------ plumbing

TOKEN = "tok-123"
SCHEMA = pa.schema([("id", pa.int64()), ("frag", pa.int32())])


class _FakeServer(flight.FlightServerBase):
    """Plays the contract: N fragments of 1000 rows each, bearer auth, coded errors."""

    def __init__(self, fragments: int, dead_location: str, **kw: Any) -> None:
        super().__init__("grpc://127.0.0.1:0", **kw)
        self.fragments = fragments
        self.dead = dead_location
        self.headers_seen: list[str | None] = []
        self.tokens = [TOKEN]  # only the last one issued is valid
        self.lock = threading.Lock()

    def _check(self, context: flight.ServerCallContext) -> None:
        seen = context.get_middleware("hdr")
        auth = seen.headers.get("authorization") if seen is not None else None
        value = auth[0] if auth else None
        with self.lock:
            self.headers_seen.append(value)
        if value != f"Bearer {self.tokens[-1]}":
            raise flight.FlightUnauthenticatedError(
                "missing or bad bearer token", _info({"code": "unauthenticated"})
            )

    def list_flights(self, context: Any, criteria: bytes) -> Iterator[flight.FlightInfo]:
        self._check(context)
        for name in (["a"], ["team", "b"]):
            d = flight.FlightDescriptor.for_path(*name)
            yield flight.FlightInfo(SCHEMA, d, [], -1, -1)

    def get_flight_info(
        self, context: Any, descriptor: flight.FlightDescriptor
    ) -> flight.FlightInfo:
        self._check(context)
        cmd = json.loads(descriptor.command)
        if cmd["dataset"] != "sales":
            raise flight.FlightServerError(
                f"dataset {cmd['dataset']!r} not found", _info({"code": "not_found"})
            )
        here = flight.Location(f"grpc://127.0.0.1:{self.port}")
        endpoints = []
        for i in range(self.fragments):
            locations = [flight.Location(self.dead), here] if i % 2 else [here]
            endpoints.append(flight.FlightEndpoint(json.dumps({"f": i}).encode(), locations))
        return flight.FlightInfo(SCHEMA, descriptor, endpoints, 1000 * self.fragments, -1)

    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.RecordBatchStream:
        self._check(context)
        f = json.loads(ticket.ticket)["f"]
        time.sleep(0.02 * ((self.fragments - f) % 3))  # later endpoints often finish first
        t = pa.table(
            {"id": pa.array(range(f * 1000, (f + 1) * 1000), pa.int64()), "frag": [f] * 1000},
            schema=SCHEMA,
        )
        return flight.RecordBatchStream(
            pa.RecordBatchReader.from_batches(SCHEMA, t.to_batches(250))
        )

    def do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
        self._check(context)
        body = json.loads(action.body.to_pybytes())
        if action.type == "commit":
            raise flight.FlightServerError(
                "commit of 'sales' lost to version 9 (overwrite)",
                _info({"code": "commit_conflict", "retryable": False, "version": 9}),
            )
        yield json.dumps({"echo": action.type, "body": body}).encode()


class _Seen(flight.ServerMiddleware):
    def __init__(self, headers: dict[str, list[str]]) -> None:
        self.headers = headers


class _Headers(flight.ServerMiddlewareFactory):
    def start_call(self, info: Any, headers: dict[str, list[str]]) -> flight.ServerMiddleware:
        return _Seen(headers)


@pytest.fixture
def fake() -> Iterator[_FakeServer]:
    server = _FakeServer(9, "grpc://127.0.0.1:1", middleware={"hdr": _Headers()})
    try:
        yield server
    finally:
        server.shutdown()


def test_parallel_read_keeps_endpoint_order_and_fails_over(fake: _FakeServer) -> None:
    with Client(f"grpc://127.0.0.1:{fake.port}", token=TOKEN) as qc:
        table = qc.read("sales", parallel=4)
        assert table.num_rows == 9000
        assert table.column("id").to_pylist() == list(range(9000))
        assert table.schema.equals(SCHEMA)
        assert qc.read("sales", parallel=1).equals(table)
        assert qc.read("sales", limit=1500).column("id").to_pylist() == list(range(1500))
        streamed = qc.reader("sales", limit=2600).read_all()
        assert streamed.column("id").to_pylist() == list(range(2600))
    # every call carried the bearer token
    assert fake.headers_seen and set(fake.headers_seen) == {f"Bearer {TOKEN}"}


def test_progress_without_tqdm(
    fake: _FakeServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # as if tqdm were not installed
    with Client(f"grpc://127.0.0.1:{fake.port}", token=TOKEN) as qc:
        qc.read("sales", progress=True)
    err = capsys.readouterr().err
    assert "9,000 rows" in err and "9/9 endpoints" in err and err.endswith("\n")


def test_errors_cross_the_wire(fake: _FakeServer) -> None:
    uri = f"grpc://127.0.0.1:{fake.port}"
    with Client(uri, token=TOKEN) as qc:
        with pytest.raises(NotFound, match="^dataset 'nope' not found$"):
            qc.read("nope")
        with pytest.raises(CommitConflict) as info:
            qc.commit("sales", ["f1"], read_version=3, idempotency_key="k")
        assert info.value.retryable is False and info.value.version == 9
        assert qc.datasets() == ["a", "team/b"]
        echo = qc.delete("sales", "id < 5", idempotency_key="k")
        body = {"dataset": "sales", "predicate": "id < 5", "idempotency_key": "k"}
        assert echo == {"echo": "delete", "body": body}
    with Client(uri, token="wrong") as qc, pytest.raises(Unauthenticated):
        qc.datasets()
    with Client("grpc://127.0.0.1:1", timeout=5) as qc, pytest.raises(Unavailable):
        qc.datasets()


def test_basic_to_bearer() -> None:
    tokens: list[str] = []

    class Basic(flight.ServerMiddlewareFactory):
        def start_call(self, info: Any, headers: dict[str, list[str]]) -> Any:
            auth = (headers.get("authorization") or [""])[0]
            if auth.startswith("Basic "):
                user, _, pw = base64.b64decode(auth[6:]).decode().partition(":")
                if (user, pw) != ("alice", "secret"):
                    raise flight.FlightUnauthenticatedError(
                        "bad credentials", _info({"code": "unauthenticated"})
                    )
                return _Answer()
            return None

    class _Answer(flight.ServerMiddleware):
        def sending_headers(self) -> dict[str, str]:
            tokens.append(f"tok-{len(tokens)}")  # a new token revokes the previous ones
            return {"authorization": f"Bearer {tokens[-1]}"}

    class Handshake(flight.ServerAuthHandler):  # the headers do the work; let it through
        def authenticate(self, outgoing: Any, incoming: Any) -> None:
            pass

        def is_valid(self, token: bytes) -> str:
            return ""

    server = _FakeServer(
        2,
        "grpc://127.0.0.1:1",
        auth_handler=Handshake(),
        middleware={"basic": Basic(), "hdr": _Headers()},
    )
    server.tokens = tokens
    try:
        uri = f"grpc://127.0.0.1:{server.port}"
        with Client(uri, username="alice", password="secret") as qc:
            assert qc.read("sales").num_rows == 2000
            # the token expires (another login revokes it): the client logs in again, once
            flight.FlightClient(uri).authenticate_basic_token("alice", "secret")
            assert qc.read("sales").num_rows == 2000
            assert qc.action("x", {"a": 1}) == {"echo": "x", "body": {"a": 1}}
        with Client(uri, token=tokens[-1]) as qc:
            flight.FlightClient(uri).authenticate_basic_token("alice", "secret")
            with pytest.raises(Unauthenticated):  # a bare token cannot be renewed
                qc.datasets()
        with pytest.raises(Unauthenticated):
            Client(uri, username="alice", password="wrong")
        with pytest.raises(Unavailable, match="cannot reach"):
            Client("grpc://127.0.0.1:1", username="alice", password="secret")
    finally:
        server.shutdown()


def test_code_in_the_text_of_a_get_schema_error() -> None:
    # pyarrow drops extra_info on GetSchema; the Quiver server puts the code in the class name
    exc = pa.ArrowInvalid(
        'dataset \'x\' exists. Detail: Python exception: {"code":"already_exists"}'
    )
    err = from_flight_error(exc)
    assert type(err) is AlreadyExists and err.message == "dataset 'x' exists"
    assert err.details == {"code": "already_exists"}
