"""End to end: Basic → Bearer auth and per-dataset rights, TLS and mutual TLS, the health
side port, and draining a real `quiver serve` process on SIGTERM."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_helpers import TICKET_KEY, error_info, table
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tls_certs import TlsMaterial, make_tls_material

from quiver.flight_server.auth import hash_password
from quiver.flight_server.cli import main as cli_main
from quiver.flight_server.config import ConfigError, ServerConfig
from quiver.flight_server.server import QuiverFlightServer, build_server
from quiver.format.dataset import write_dataset

ROOT = Path(__file__).resolve().parents[2]
PASSWORDS = {
    "admin": "admin-Pa55word!",
    "reader": "reader-Pa55word!",  # reads everything, writes nothing
    "salesonly": "sales-Pa55word!",  # reads "sales" only
    "teamwriter": "team-Pa55word!",  # reads and writes team/*
}
RIGHTS = {
    "admin": {"read": ["*"], "write": ["*"]},
    "reader": {"read": ["*"]},
    "salesonly": {"read": ["sales"]},
    "teamwriter": {"read": ["team/*"], "write": ["team/*"]},
}
DATASETS = ("sales", "secret", "team/a")
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def health_status(port: int) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        request = health_pb2.HealthCheckRequest(service="")
        return health_pb2_grpc.HealthStub(channel).Check(request, timeout=5).status


@dataclass
class AuthServed:
    server: QuiverFlightServer
    root: Path
    uri: str
    auth_file: Path
    logs: list[str]

    def client(self) -> fl.FlightClient:
        return fl.connect(self.uri)

    def login(self, user: str) -> tuple[fl.FlightClient, fl.FlightCallOptions, str]:
        client = self.client()
        header = client.authenticate_basic_token(user, PASSWORDS[user])
        token = header[1].decode().split(" ", 1)[1]
        return client, fl.FlightCallOptions(headers=[header]), token


class _Collect(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(self.format(record))


def write_auth_file(path: Path, token_secret: str | None = None) -> Path:
    users = {u: {"password": hash_password(pw), **RIGHTS[u]} for u, pw in PASSWORDS.items()}
    doc: dict = {"users": users}
    if token_secret:
        doc["token_secret"] = token_secret
    path.write_text(json.dumps(doc, indent=2))
    return path


@pytest.fixture(scope="module")
def auth_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_auth_file(tmp_path_factory.mktemp("auth") / "auth.json")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


def _start(root: Path, auth_file: Path, **config) -> tuple[QuiverFlightServer, list[str]]:
    logs: list[str] = []
    handler = _Collect(logs)
    logger = logging.getLogger("quiver")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    server = build_server(
        ServerConfig(
            root=str(root), port=0, ticket_key=TICKET_KEY, auth_file=str(auth_file), **config
        )
    )
    server._test_log_handler = handler  # type: ignore[attr-defined]
    return server, logs


def _stop(server: QuiverFlightServer) -> None:
    server.shutdown()
    logging.getLogger("quiver").removeHandler(server._test_log_handler)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, auth_file: Path) -> Iterator[AuthServed]:
    root = tmp_path_factory.mktemp("root")
    for name in DATASETS:
        write_dataset(table(40), str(root / f"{name}.lance"), max_rows_per_file=20)
    server, logs = _start(root, auth_file)
    yield AuthServed(server, root, server.locations[0], auth_file, logs)
    _stop(server)
    text = "\n".join(logs)
    for secret in PASSWORDS.values():
        assert secret not in text  # no password in any log line
    assert "scrypt$" not in text


# What pyarrow's GetSchema client reports for errors raised before the handler (by the
# middleware): a plain error whose message ends with the gRPC status (apache/arrow#43556).
_STATUS_CODES = {
    "Unauthenticated": "unauthenticated",
    "Unauthorized": "permission_denied",
    "Unavailable": "unavailable",
}


def code_of(exc: BaseException) -> str:
    if isinstance(exc, fl.FlightError) or "Python exception: {" in str(exc):
        return error_info(exc)["code"]
    found = re.search(r"Detail: (\w+)$", str(exc))
    assert found and found.group(1) in _STATUS_CODES, repr(exc)
    return _STATUS_CODES[found.group(1)]


def cmd(doc: object) -> fl.FlightDescriptor:
    return fl.FlightDescriptor.for_command(json.dumps(doc))


def action(client: fl.FlightClient, name: str, body: object, options=None) -> dict:
    [result] = client.do_action(fl.Action(name, json.dumps(body).encode()), options=options)
    return json.loads(result.body.to_pybytes())


def every_rpc(client: fl.FlightClient, options: fl.FlightCallOptions | None, ticket: fl.Ticket):
    """One call of each Flight RPC (and every action); each yields (label, thunk)."""
    o = options
    yield "ListFlights", lambda: list(client.list_flights(options=o))
    yield "GetFlightInfo", lambda: client.get_flight_info(fl.FlightDescriptor.for_path("sales"), o)
    yield "GetSchema", lambda: client.get_schema(fl.FlightDescriptor.for_path("sales"), o)
    yield "DoGet", lambda: client.do_get(ticket, options=o).read_all()
    yield "ListActions", lambda: list(client.list_actions(options=o))

    def put() -> None:
        writer, reader = client.do_put(fl.FlightDescriptor.for_path("sales"), table(1).schema, o)
        try:
            writer.write_table(table(1))
            writer.done_writing()
            reader.read()
        finally:
            writer.close()

    yield "DoPut", put

    def exchange() -> None:
        writer, reader = client.do_exchange(fl.FlightDescriptor.for_path("sales"), options=o)
        writer.close()

    yield "DoExchange", exchange
    for name in ("healthcheck", "describe", "list_versions", "commit", "delete", "drop_dataset"):
        body = {} if name == "healthcheck" else {"dataset": "sales"}
        yield f"DoAction:{name}", lambda n=name, b=body: action(client, n, b, o)


# ------------------------------------------------------------------------------ authentication


@pytest.fixture(scope="module")
def sales_ticket(served: AuthServed) -> fl.Ticket:
    client, opts, _ = served.login("admin")
    return client.get_flight_info(fl.FlightDescriptor.for_path("sales"), opts).endpoints[0].ticket


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"authorization", b"Bearer not-a-token")],
        [(b"authorization", b"Bearer q1.eyJ1IjoiYWRtaW4iLCJlIjo5OTk5OTk5OTk5fQ==.AAAA")],
        [(b"authorization", b"Basic " + base64.b64encode(b"admin:wrong-password"))],
        [(b"authorization", b"Basic " + base64.b64encode(b"nobody:whatever"))],
    ],
    ids=["missing", "garbage", "forged", "wrong-password", "unknown-user"],
)
def test_every_rpc_needs_a_valid_credential(served, sales_ticket, headers) -> None:
    client = served.client()
    options = fl.FlightCallOptions(headers=headers)
    for label, call in every_rpc(client, options, sales_ticket):
        with pytest.raises((fl.FlightError, pa.ArrowException, OSError)) as info:
            call()
        if label == "DoExchange" and not isinstance(info.value, fl.FlightError):
            continue  # the refusal surfaces on the stream
        assert code_of(info.value) == "unauthenticated", (label, str(info.value))
        message = str(info.value)
        assert "wrong-password" not in message and "whatever" not in message, label
    with pytest.raises(fl.FlightUnauthenticatedError):
        client.authenticate_basic_token("admin", "wrong-password")
    assert served.server.drain.active_calls == 0


def test_basic_then_bearer_on_every_rpc(served, sales_ticket) -> None:
    client, opts, token = served.login("admin")
    assert token and PASSWORDS["admin"] not in token
    names = sorted(i.descriptor.path[0].decode() for i in client.list_flights(options=opts))
    assert names == sorted(DATASETS)
    info = client.get_flight_info(fl.FlightDescriptor.for_path("sales"), opts)
    got = pa.concat_tables(client.do_get(e.ticket, options=opts).read_all() for e in info.endpoints)
    assert got.num_rows == 40
    assert client.get_schema(fl.FlightDescriptor.for_path("sales"), opts).schema == info.schema
    assert {a.type for a in client.list_actions(options=opts)} >= {"commit", "describe"}
    assert action(client, "healthcheck", {}, opts) == {"status": "serving"}
    assert action(client, "describe", {"dataset": "secret"}, opts)["rows"] == 40
    # A client sending Basic on every call (no handshake) works too, and gets a token back.
    basic = b"Basic " + base64.b64encode(b"reader:" + PASSWORDS["reader"].encode())
    plain = served.client()
    got = action(
        plain,
        "describe",
        {"dataset": "sales"},
        fl.FlightCallOptions(headers=[(b"authorization", basic)]),
    )
    assert got["rows"] == 40
    # The handler's identity reaches the access log (the user name, never the secret).
    assert any('"identity":"admin"' in line for line in served.logs)
    assert not any(token in line for line in served.logs)


def test_list_flights_lists_only_readable_datasets(served) -> None:
    for user, expected in [
        ("salesonly", ["sales"]),
        ("teamwriter", ["team/a"]),
        ("reader", sorted(DATASETS)),
    ]:
        client, opts, _ = served.login(user)
        names = sorted(i.descriptor.path[0].decode() for i in client.list_flights(options=opts))
        assert names == expected, user
        by_prefix = [i.descriptor.path[0].decode() for i in client.list_flights(b"se", opts)]
        assert sorted(by_prefix) == [n for n in expected if n.startswith("se")], user


def test_reads_need_the_read_right(served, sales_ticket) -> None:
    client, opts, _ = served.login("salesonly")
    assert client.get_flight_info(fl.FlightDescriptor.for_path("sales"), opts).total_records == 40
    assert client.do_get(sales_ticket, options=opts).read_all().num_rows > 0
    admin, admin_opts, _ = served.login("admin")
    secret_ticket = (
        admin.get_flight_info(fl.FlightDescriptor.for_path("secret"), admin_opts)
        .endpoints[0]
        .ticket
    )
    denied = [
        lambda: client.get_flight_info(fl.FlightDescriptor.for_path("secret"), opts),
        lambda: client.get_flight_info(cmd({"dataset": "secret", "columns": ["id"]}), opts),
        lambda: client.get_schema(fl.FlightDescriptor.for_path("secret"), opts),
        lambda: client.do_get(secret_ticket, options=opts).read_all(),  # a ticket is no right
        lambda: action(client, "describe", {"dataset": "secret"}, opts),
        lambda: action(client, "list_versions", {"dataset": "secret"}, opts),
        lambda: action(client, "list_tags", {"dataset": "secret"}, opts),
        # Not even whether a dataset exists leaks: a missing one is denied the same way.
        lambda: action(client, "describe", {"dataset": "nope"}, opts),
    ]
    for call in denied:
        with pytest.raises((fl.FlightError, pa.ArrowException, OSError)) as info:
            call()
        assert code_of(info.value) == "permission_denied", str(info.value)
        assert "salesonly" in str(info.value)


def test_read_only_user_cannot_write_anything(served) -> None:
    admin, admin_opts, _ = served.login("admin")
    before = action(admin, "describe", {"dataset": "team/a"}, admin_opts)
    staged = put(
        admin, cmd({"dataset": "team/a", "mode": "append", "commit": False}), table(3), admin_opts
    )
    # Make the writes valid, so only the right is missing.
    frags = staged["fragments"]
    client, opts, _ = served.login("reader")
    ds = "team/a"
    writes = {
        "DoPut path": lambda: put(client, fl.FlightDescriptor.for_path(ds), table(2), opts),
        "DoPut append": lambda: put(client, cmd({"dataset": ds, "mode": "append"}), table(2), opts),
        "DoPut overwrite": lambda: put(
            client, cmd({"dataset": ds, "mode": "overwrite"}), table(2), opts
        ),
        "DoPut create": lambda: put(
            client, cmd({"dataset": "team/new", "mode": "create"}), table(2), opts
        ),
        "DoPut stage": lambda: put(
            client, cmd({"dataset": ds, "mode": "append", "commit": False}), table(2), opts
        ),
        "commit": lambda: action(
            client, "commit", {"dataset": ds, "operation": "append", "fragments": frags}, opts
        ),
        "abort": lambda: action(client, "abort", {"dataset": ds, "fragments": frags}, opts),
        "delete": lambda: action(client, "delete", {"dataset": ds, "predicate": "id < 5"}, opts),
        "restore": lambda: action(client, "restore", {"dataset": ds, "version": 1}, opts),
        "create_tag": lambda: action(client, "create_tag", {"dataset": ds, "tag": "t"}, opts),
        "delete_tag": lambda: action(client, "delete_tag", {"dataset": ds, "tag": "t"}, opts),
        "add_columns": lambda: action(
            client, "add_columns", {"dataset": ds, "columns": {"y": "id * 2"}}, opts
        ),
        "drop_columns": lambda: action(
            client, "drop_columns", {"dataset": ds, "columns": ["x"]}, opts
        ),
        "alter_columns": lambda: action(
            client,
            "alter_columns",
            {"dataset": ds, "alterations": [{"path": "x", "name": "z"}]},
            opts,
        ),
        "compact": lambda: action(client, "compact", {"dataset": ds}, opts),
        "cleanup": lambda: action(client, "cleanup", {"dataset": ds}, opts),
        "drop_dataset": lambda: action(client, "drop_dataset", {"dataset": ds}, opts),
    }
    for label, call in writes.items():
        with pytest.raises((fl.FlightError, pa.ArrowException, OSError)) as info:
            call()
        assert code_of(info.value) == "permission_denied", (label, str(info.value))
    after = action(admin, "describe", {"dataset": "team/a"}, admin_opts)
    assert after["version"] == before["version"] and after["rows"] == before["rows"]
    assert not (served.root / "team" / "new.lance").exists()
    # The user with the write right can: the staged fragments commit.
    writer, wopts, _ = served.login("teamwriter")
    done = action(
        writer, "commit", {"dataset": ds, "operation": "append", "fragments": frags}, wopts
    )
    assert done["version"] == before["version"] + 1
    with pytest.raises(fl.FlightUnauthorizedError):
        action(writer, "delete", {"dataset": "sales", "predicate": "id < 5"}, wopts)


def put(client: fl.FlightClient, descriptor, data: pa.Table, opts) -> dict:
    """flight_helpers.do_put with call options (the bearer token)."""
    writer, reader = client.do_put(descriptor, data.schema, options=opts)
    try:
        writer.write_table(data)
        writer.done_writing()
        buf = reader.read()
    finally:
        writer.close()
    return json.loads(buf.to_pybytes())


def test_tokens_expire(tmp_path: Path, auth_file: Path) -> None:
    write_dataset(table(5), str(tmp_path / "sales.lance"))
    server, _ = _start(tmp_path, auth_file, token_ttl=0.8)
    try:
        client = fl.connect(server.locations[0])
        header = client.authenticate_basic_token("reader", PASSWORDS["reader"])
        opts = fl.FlightCallOptions(headers=[header])
        assert action(client, "describe", {"dataset": "sales"}, opts)["rows"] == 5
        time.sleep(1.0)
        with pytest.raises(fl.FlightUnauthenticatedError) as info:
            action(client, "describe", {"dataset": "sales"}, opts)
        assert code_of(info.value) == "unauthenticated" and "expired" in str(info.value)
        header = client.authenticate_basic_token("reader", PASSWORDS["reader"])
        opts = fl.FlightCallOptions(headers=[header])
        assert action(client, "describe", {"dataset": "sales"}, opts)["rows"] == 5
    finally:
        _stop(server)


def test_replicas_sharing_token_secret_accept_each_others_tokens(tmp_path: Path) -> None:
    shared = write_auth_file(tmp_path / "auth.json", token_secret="s" * 32)
    write_dataset(table(5), str(tmp_path / "sales.lance"))
    one, _ = _start(tmp_path, shared)
    two, _ = _start(tmp_path, shared)
    try:
        header = fl.connect(one.locations[0]).authenticate_basic_token(
            "reader", PASSWORDS["reader"]
        )
        client = fl.connect(two.locations[0])
        assert action(
            client, "describe", {"dataset": "sales"}, fl.FlightCallOptions(headers=[header])
        )
    finally:
        _stop(one)
        _stop(two)


def test_bad_auth_file_is_refused_at_startup(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "auth.json"
    bad.write_text(json.dumps({"users": {"alice": {"password": "TopSecretPlain"}}}))
    with pytest.raises(ConfigError) as info:
        build_server(ServerConfig(root=str(tmp_path), port=0, auth_file=str(bad)))
    assert "alice" in str(info.value) and "TopSecretPlain" not in str(info.value)
    assert cli_main(["serve", "--root", str(tmp_path), "--port", "0", "--auth-file", str(bad)]) == 2
    assert "TopSecretPlain" not in capsys.readouterr().err


def test_config_flags_and_environment() -> None:
    cfg = ServerConfig.from_args(
        ["--token-ttl", "60", "--health-port", "0"],
        env={"QUIVER_DRAIN_SECONDS": "2.5", "QUIVER_TOKEN_TTL": "5", "QUIVER_AUTH_FILE": "a.json"},
    )
    assert (cfg.token_ttl, cfg.health_port, cfg.drain_seconds, cfg.auth_file) == (
        60.0,
        0,
        2.5,
        "a.json",
    )
    env = {"QUIVER_HEALTH_PORT": "9000", "QUIVER_TLS_CERT": "c.pem", "QUIVER_TLS_KEY": "k.pem"}
    cfg = ServerConfig.from_args([], env=env)
    assert cfg.health_port == 9000 and cfg.tls and cfg.scheme == "grpc+tls"
    assert cfg.drain_seconds == 30 and cfg.token_ttl == 3600
    for argv in (["--token-ttl", "0"], ["--health-port", "70000"], ["--drain-seconds", "-1"]):
        with pytest.raises(ConfigError):
            ServerConfig.from_args(argv, env={})
    with pytest.raises(ConfigError, match="needs --tls-cert"):
        ServerConfig.from_args(["--tls-client-ca", "ca.pem"], env={})


def test_hash_password_command(monkeypatch, capsys) -> None:
    import io

    from quiver.flight_server.auth import verify_password

    monkeypatch.setattr("sys.stdin", io.StringIO("pw-from-stdin\n"))
    assert cli_main(["hash-password"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("scrypt$") and verify_password(out, "pw-from-stdin")


# ------------------------------------------------------------------------------ TLS


def test_tls_with_auth(tmp_path: Path, certs: TlsMaterial, auth_file: Path) -> None:
    write_dataset(table(7), str(tmp_path / "sales.lance"))
    server, _ = _start(
        tmp_path, auth_file, tls_cert=str(certs.server_cert), tls_key=str(certs.server_key)
    )
    try:
        uri = server.locations[0]
        assert uri.startswith("grpc+tls://")
        client = fl.connect(uri, tls_root_certs=certs.read("ca_cert"))
        opts = fl.FlightCallOptions(
            headers=[client.authenticate_basic_token("reader", PASSWORDS["reader"])]
        )
        info = client.get_flight_info(fl.FlightDescriptor.for_path("sales"), opts)
        assert all(
            loc.uri.decode().startswith("grpc+tls://")
            for e in info.endpoints
            for loc in e.locations
        )
        assert client.do_get(info.endpoints[0].ticket, options=opts).read_all().num_rows == 7
        with pytest.raises(fl.FlightUnavailableError):  # the server's CA is not trusted
            untrusted = fl.connect(uri, tls_root_certs=certs.read("other_ca_cert"))
            list(untrusted.list_flights(options=opts))
        with pytest.raises(fl.FlightUnavailableError):  # plaintext to a TLS port
            fl.connect(f"grpc://127.0.0.1:{server.port}").wait_for_available(timeout=1)
    finally:
        _stop(server)


def test_mutual_tls(tmp_path: Path, certs: TlsMaterial) -> None:
    write_dataset(table(7), str(tmp_path / "sales.lance"))
    server = build_server(
        ServerConfig(
            root=str(tmp_path),
            port=0,
            tls_cert=str(certs.server_cert),
            tls_key=str(certs.server_key),
            tls_client_ca=str(certs.ca_cert),
        )
    )
    try:
        uri = server.locations[0]
        ca = certs.read("ca_cert")
        client = fl.connect(
            uri,
            tls_root_certs=ca,
            cert_chain=certs.read("client_cert"),
            private_key=certs.read("client_key"),
        )
        assert [i.total_records for i in client.list_flights()] == [7]
        with pytest.raises(fl.FlightUnavailableError):
            list(fl.connect(uri, tls_root_certs=ca).list_flights())  # no client certificate
        stranger = fl.connect(
            uri,
            tls_root_certs=ca,
            cert_chain=certs.read("other_client_cert"),
            private_key=certs.read("other_client_key"),
        )
        with pytest.raises(fl.FlightUnavailableError):
            list(stranger.list_flights())  # a certificate from another CA
    finally:
        server.shutdown()


def test_bad_tls_files_are_config_errors(tmp_path: Path, certs: TlsMaterial) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        build_server(
            ServerConfig(
                root=str(tmp_path),
                port=0,
                tls_cert=str(tmp_path / "missing.pem"),
                tls_key=str(certs.server_key),
            )
        )


# ------------------------------------------------------------------------------ health, SIGTERM


def _wait_for_line(path: Path, pattern: str, proc: subprocess.Popen, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, path.read_text())
        if found:
            return found
        if proc.poll() is not None:
            raise AssertionError(f"quiver serve exited {proc.returncode}: {path.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"no {pattern!r} in: {path.read_text()}")


def test_sigterm_drains_a_real_server(tmp_path: Path) -> None:
    root = tmp_path / "root"
    n = 200_000
    big = pa.table(
        {"id": pa.array(range(n), pa.int64()), "s": pa.array([f"{i:0>120}" for i in range(n)])}
    )
    write_dataset(big, str(root / "big.lance"))
    write_dataset(table(3), str(root / "small.lance"))
    err = tmp_path / "stderr.txt"
    env = {
        **os.environ,
        "QUIVER_HEALTH_PORT": "0",
        "QUIVER_DRAIN_SECONDS": "25",
        "QUIVER_LOG_LEVEL": "INFO",
    }
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "quiver.flight_server",
                "serve",
                "--root",
                str(root),
                "--port",
                "0",
                "--batch-size",
                "1000",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        found = _wait_for_line(err, r"at (grpc://\S+); health on [\d.]+:(\d+)", proc)
        uri, health_port = found.group(1), int(found.group(2))
        assert health_status(health_port) == SERVING
        client = fl.connect(uri)
        info = client.get_flight_info(fl.FlightDescriptor.for_path("big"))
        assert len(info.endpoints) == 1
        reader = client.do_get(info.endpoints[0].ticket)
        rows = reader.read_chunk().data.num_rows  # the stream is running
        cut = fl.connect(uri).do_get(info.endpoints[0].ticket)  # one the shutdown will end
        cut_rows = cut.read_chunk().data.num_rows

        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while health_status(health_port) != NOT_SERVING:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        fresh = fl.connect(uri)
        for call in (
            lambda: list(fresh.list_flights()),
            lambda: fresh.get_flight_info(fl.FlightDescriptor.for_path("small")),
            lambda: action(fresh, "healthcheck", {}),
        ):
            with pytest.raises(fl.FlightUnavailableError) as exc:
                call()
            assert code_of(exc.value) == "unavailable"
        time.sleep(1.0)
        assert proc.poll() is None  # still draining: it waits for our unfinished stream
        for chunk in reader:
            rows += chunk.data.num_rows
        assert rows == n
        assert proc.poll() is None  # the other stream still holds the drain
        proc.send_signal(signal.SIGTERM)  # a second signal: streams still running are cut
        _wait_for_line(err, r"call\(s\) still running after the drain; ending them", proc)
        with pytest.raises(fl.FlightError) as exc:
            for chunk in cut:
                cut_rows += chunk.data.num_rows
        assert cut_rows < n
        message = str(exc.value)
        assert code_of(exc.value) == "unavailable", message
        assert "the server shut down during the stream; retry the ticket" in message
        assert "\n" not in message and "Traceback" not in message and ".py" not in message
        assert str(tmp_path) not in message and str(ROOT) not in message
        assert proc.wait(20) == 0
        log = err.read_text()
        # Both DoGets were still running server-side when the drain began: one finished ok,
        # the second signal ended the other.
        drain_at = log.index("shutdown requested")
        doget = [json.loads(m.group(0)) for m in re.finditer(r'\{"method":"DoGet".*\}', log)]
        assert log.index('"method":"DoGet"') > drain_at, log
        assert sorted((d["status"], d["rows"] == n) for d in doget) == [
            ("ok", True),
            ("unavailable", False),
        ]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
