"""Who may do what through the REST namespace: the auth file's users (Basic → Bearer, API
keys in `Authorization` or `x-api-key`), per-dataset rights on every table a call touches,
TLS, and the metrics and health endpoints covering it."""

from __future__ import annotations

import base64
import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import lance
import lance.namespace as lns
import lancedb
import pyarrow as pa
import pytest
from lance_namespace import ListTablesRequest
from lance_namespace.errors import UnauthenticatedError
from namespace_helpers import ARROW, Served, call, ipc_stream, namespace_server
from tls_certs import make_tls_material

from quiver.flight_server.auth import hash_password, new_api_key
from quiver.format.dataset import write_dataset

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
KEY, KEY_HASH = new_api_key()
USERS = {
    "admin": ("admin-Pa55word!", {"read": ["*"], "write": ["*"]}),
    "teamwriter": ("team-Pa55word!", {"read": ["team/*"], "write": ["team/*"]}),
    "salesonly": ("sales-Pa55word!", {"read": ["sales"]}),
}


def basic(user: str) -> dict[str, str]:
    raw = f"{user}:{USERS[user][0]}".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("access")
    users = {u: {"password": hash_password(pw), **rights} for u, (pw, rights) in USERS.items()}
    users["teamwriter"]["api_keys"] = [KEY_HASH]
    auth = base / "auth.json"
    auth.write_text(json.dumps({"users": users}))
    root = base / "root"
    for name in ("sales", "secret", "team/a"):
        write_dataset(ROWS, str(root / f"{name}.lance"))
    with namespace_server(root, "--auth-file", str(auth), "--metrics-port", "0") as s:
        yield s


def test_every_call_needs_a_credential(served: Served) -> None:
    for path in ("/v1/namespace/%24/list", "/v1/table/sales/describe"):
        method = "GET" if path.endswith("list") else "POST"
        a = call(served.url, method, path, None if method == "GET" else {})
        assert (a.status, a.code) == (401, 16), a.data
    bad = call(served.url, "POST", "/v1/table/sales/describe", {}, headers={"x-api-key": "qk_x"})
    assert (bad.status, bad.code) == (401, 16)
    wrong = {"Authorization": "Basic " + base64.b64encode(b"admin:nope").decode()}
    a = call(served.url, "POST", "/v1/table/sales/describe", {}, headers=wrong)
    assert (a.status, a.code) == (401, 16) and "nope" not in a.data.decode()


def test_basic_answers_a_bearer_token_that_works(served: Served) -> None:
    a = call(served.url, "POST", "/v1/table/sales/describe", {}, headers=basic("admin"))
    assert a.status == 200
    token = a.headers["authorization"].removeprefix("Bearer ")
    b = call(served.url, "GET", "/v1/table", headers={"Authorization": f"Bearer {token}"})
    assert b.json == {"tables": ["sales", "secret", "team$a"]}
    # the token a Flight handshake hands out works the same: it is one authenticator
    c = call(served.url, "GET", "/v1/table", headers={"x-api-key": token})
    assert c.json == b.json


def test_listing_shows_only_what_the_caller_may_read(served: Served) -> None:
    a = call(served.url, "GET", "/v1/namespace/%24/table/list", headers=basic("salesonly"))
    assert a.json == {"tables": ["sales"]}
    a = call(served.url, "GET", "/v1/namespace/%24/list", headers=basic("salesonly"))
    assert a.json == {"namespaces": []}
    a = call(served.url, "GET", "/v1/namespace/%24/list", headers=basic("teamwriter"))
    assert a.json == {"namespaces": ["team"]}
    hidden = call(served.url, "POST", "/v1/table/secret/describe", {}, headers=basic("salesonly"))
    assert (hidden.status, hidden.code) == (404, 4)


def test_writes_need_the_write_right(served: Served) -> None:
    a = call(served.url, "POST", "/v1/table/sales/drop", {}, headers=basic("salesonly"))
    assert (a.status, a.code) == (403, 15)
    a = call(
        served.url,
        "POST",
        "/v1/table/sales/insert",
        ipc_stream(ROWS),
        content_type=ARROW,
        headers=basic("salesonly"),
    )
    assert (a.status, a.code) == (403, 15)
    a = call(served.url, "POST", "/v1/namespace/other/create", {}, headers=basic("teamwriter"))
    assert (a.status, a.code) == (403, 15)
    assert not (served.root / "other").exists()
    assert lance.dataset(str(served.root / "sales.lance")).count_rows() == 3


def test_api_key_for_pylance_and_lancedb(served: Served) -> None:
    ns = lns.RestNamespace(uri=served.url, **{"header.x-api-key": KEY})
    lance.write_dataset(ROWS, namespace_client=ns, table_id=["team", "b"], mode="create")
    assert ns.list_tables(ListTablesRequest(id=["team"])).tables == ["a", "b"]
    db = lancedb.connect_namespace(
        "rest", {"uri": served.url, "header.Authorization": f"Bearer {KEY}"}
    )
    assert db.open_table("b", namespace_path=["team"]).count_rows() == 3
    with pytest.raises(UnauthenticatedError):
        lns.RestNamespace(uri=served.url).list_tables(ListTablesRequest(id=["team"]))


def test_metrics_count_namespace_calls(served: Served) -> None:
    call(served.url, "POST", "/v1/table/sales/describe", {}, headers=basic("admin"))
    call(served.url, "POST", "/v1/table/nope/describe", {}, headers=basic("admin"))
    port = re.search(
        rb"metrics on http://127.0.0.1:(\d+)", (served.root / "server.log").read_bytes()
    )
    assert port
    text = urllib.request.urlopen(f"http://127.0.0.1:{int(port.group(1))}/metrics").read().decode()
    ok = re.search(r'quiver_requests_total\{code="ok",rpc="namespace:DescribeTable"\} (\d+)', text)
    missing = re.search(
        r'quiver_requests_total\{code="not_found",rpc="namespace:DescribeTable"\} (\d+)', text
    )
    assert ok and int(ok.group(1)) >= 1
    assert missing and int(missing.group(1)) >= 1
    health = call(served.url, "GET", "/healthz")
    assert health.json == {"status": "SERVING"}
    assert health.headers["server"] == "quiver"  # no Python or aiohttp version


def test_namespace_over_tls(tmp_path: Path) -> None:
    tls = make_tls_material(tmp_path / "tls")
    root = tmp_path / "root"
    write_dataset(ROWS, str(root / "sales.lance"))
    args = ("--tls-cert", str(tls.server_cert), "--tls-key", str(tls.server_key))
    with namespace_server(root, *args) as s:
        assert s.url.startswith("https://")
        url = s.url.replace("127.0.0.1", "localhost")
        a = call(url, "GET", "/v1/table", tls_ca=str(tls.ca_cert))
        assert a.json == {"tables": ["sales"]}
        with pytest.raises(OSError):
            call(url, "GET", "/v1/table")  # a client that does not trust the CA
