"""Every refusal reaches a plain gRPC client (grpcio, no Arrow) with the status of its code,
the server's one-line message as the gRPC message and a google.rpc.Status naming the code in
`grpc-status-details-bin`; never a traceback or "Python exception" text."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import flight_helpers
import grpc
import pytest
from flight_helpers import table
from server_process import quiver_serve

from quiver.flight_server import grpc_status
from quiver.wire import status as wire_status

ROOT = Path(__file__).resolve().parents[2]

served = flight_helpers.served  # fixtures shared by the server test modules
name = flight_helpers.name


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Flight's gRPC stubs compiled from the repository's Flight.proto."""
    out = tmp_path_factory.mktemp("stubs")
    from grpc_tools import protoc

    proto_dir = ROOT / "protos" / "flight"
    assert (
        protoc.main(
            [
                "protoc",
                f"-I{proto_dir}",
                f"-I{Path(protoc.__file__).parent / '_proto'}",  # google/protobuf/*.proto
                f"--python_out={out}",
                f"--grpc_python_out={out}",
                str(proto_dir / "Flight.proto"),
            ]
        )
        == 0
    )
    sys.path.insert(0, str(out))
    try:
        pb = importlib.import_module("Flight_pb2")
        pb_grpc = importlib.import_module("Flight_pb2_grpc")
    finally:
        sys.path.remove(str(out))
    return pb, pb_grpc


def _stub(uri: str, stubs: Any) -> tuple[Any, Any, grpc.Channel]:
    pb, pb_grpc = stubs
    channel = grpc.insecure_channel(uri.split("://", 1)[1])
    return pb, pb_grpc.FlightServiceStub(channel), channel


def _refusal(call: Callable[[], Any]) -> tuple[grpc.StatusCode, str, wire_status.ErrorDetails]:
    with pytest.raises(grpc.RpcError) as info:
        result = call()
        if hasattr(result, "__iter__"):
            list(result)
    error = info.value
    trailers = dict(error.trailing_metadata() or ())
    found = wire_status.decode(trailers.get("grpc-status-details-bin", b""))
    assert found is not None, trailers
    message = error.details()
    for leak in ("Traceback", "Python exception", ".py", "\n", "StatusError"):
        assert leak not in message, message
    return error.code(), message, found


def _cmd(pb: Any, doc: Any) -> Any:
    return pb.FlightDescriptor(type=pb.FlightDescriptor.CMD, cmd=json.dumps(doc).encode())


def test_each_code_reaches_a_raw_grpc_client(served: Any, name: str, stubs: Any) -> None:
    assert grpc_status.install()
    served.put(name, table(10), mode="create")
    served.action("create_tag", {"dataset": name, "tag": "gold", "version": 1})
    pb, stub, channel = _stub(served.uri, stubs)
    S = grpc.StatusCode
    with channel:
        missing = _cmd(pb, {"dataset": f"{name}_missing"})
        code, message, found = _refusal(lambda: stub.GetFlightInfo(missing))
        assert (code, found.code, found.grpc_code) == (S.NOT_FOUND, "not_found", 5)
        assert message == found.message and f"{name}_missing" in message
        code, _, found = _refusal(lambda: stub.GetSchema(missing))
        assert (code, found.code) == (S.NOT_FOUND, "not_found")

        bad = _cmd(pb, {"dataset": name, "filter": "id >"})
        code, message, found = _refusal(lambda: stub.GetFlightInfo(bad))
        assert (code, found.code) == (S.INVALID_ARGUMENT, "invalid_argument")
        code, _, found = _refusal(lambda: stub.GetSchema(bad))
        assert (code, found.code) == (S.INVALID_ARGUMENT, "invalid_argument")
        code, _, found = _refusal(lambda: stub.DoGet(pb.Ticket(ticket=b"forged")))
        assert (code, found.code) == (S.INVALID_ARGUMENT, "invalid_argument")

        again = json.dumps({"dataset": name, "tag": "gold", "version": 1}).encode()
        code, message, found = _refusal(
            lambda: stub.DoAction(pb.Action(type="create_tag", body=again))
        )
        assert (code, found.code) == (S.ALREADY_EXISTS, "already_exists") and "gold" in message

        code, _, found = _refusal(
            lambda: stub.DoAction(pb.Action(type="no_such_action", body=b"{}"))
        )
        assert code in (S.NOT_FOUND, S.UNIMPLEMENTED) and found.code in (
            "not_found",
            "unimplemented",
        )

        # an append read at a version that an overwrite then replaced: a conflict a retry on
        # a fresh read version cannot win (INVALID_ARGUMENT; UNAVAILABLE when it can)
        staged = served.put(name, table(5, start=10), commit=False)["fragments"]
        served.put(name, table(5, start=20), mode="overwrite")
        body = {"dataset": name, "operation": "append", "fragments": staged, "read_version": 1}
        commit = json.dumps(body).encode()
        code, _, found = _refusal(lambda: stub.DoAction(pb.Action(type="commit", body=commit)))
        assert found.code == "commit_conflict"
        if found.details.get("retryable"):
            assert code == S.UNAVAILABLE
        else:
            assert code == S.INVALID_ARGUMENT and isinstance(found.details["version"], int)

        # a filter that fails on the data ends the stream once it has begun
        info = served.info({"dataset": name, "filter": "id / 0 > 1"})
        ticket = pb.Ticket(ticket=info.endpoints[0].ticket.ticket)
        code, message, found = _refusal(lambda: stub.DoGet(ticket))
        assert (code, found.code) == (S.INVALID_ARGUMENT, "invalid_argument")
        assert "id / 0" in message

        # the handshake of a server without authentication
        code, _, found = _refusal(lambda: list(stub.Handshake(iter([pb.HandshakeRequest()]))))
        assert code == S.UNIMPLEMENTED


def test_damaged_data_is_internal_with_its_reason(served: Any, name: str, stubs: Any) -> None:
    served.put(name, table(10), mode="create")
    for manifest in (served.root / f"{name}.lance" / "_versions").iterdir():
        manifest.write_bytes(b"not a manifest")
    pb, stub, channel = _stub(served.uri, stubs)
    with channel:
        code, message, found = _refusal(lambda: stub.GetFlightInfo(_cmd(pb, {"dataset": name})))
    assert (code, found.code) == (grpc.StatusCode.INTERNAL, "data_corrupt")
    assert str(served.root) not in message


@pytest.fixture
def plain_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A `quiver serve` told to leave statuses to pyarrow (QUIVER_GRPC_STATUS=pyarrow)."""
    monkeypatch.setenv("QUIVER_GRPC_STATUS", "pyarrow")
    with quiver_serve(tmp_path) as (uri, _):
        yield uri


def test_without_the_helper_codes_still_arrive_in_the_details(
    plain_server: str, stubs: Any
) -> None:
    """pyarrow's own classes then pick the status (UNKNOWN for not found); the message stays
    one line and the details still name the code."""
    pb, stub, channel = _stub(plain_server, stubs)
    with channel:
        missing = _cmd(pb, {"dataset": "missing"})
        code, _, found = _refusal(lambda: stub.GetFlightInfo(missing))
        assert (code, found.code) == (grpc.StatusCode.UNKNOWN, "not_found")
