"""Bad input to the REST namespace: ids that break the naming rules or lead out of the root,
malformed or mistyped bodies, wrong content types, damaged Arrow streams, oversized bodies,
and a random campaign. Each gets the specification's error body and code, and nothing is
written."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from namespace_helpers import ARROW, Served, call, ipc_stream, namespace_server

from quiver.flight_server.namespace.http import ROUTES

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": ["a", "b", "c"]})


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("hostile")
    outside = base / "outside"
    outside.mkdir()
    root = base / "root"
    root.mkdir()
    os.symlink(outside, root / "escape")
    with namespace_server(root, "--namespace-max-body", "4096") as s:
        assert call(s.url, "POST", "/v1/namespace/ns/create", {}).status == 200
        created = call(
            s.url, "POST", "/v1/table/ns%24t/create", ipc_stream(ROWS), content_type=ARROW
        )
        assert created.status == 200
        yield s


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.name != "server.log"}


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("POST", "/v1/table/..%24x/declare", {}, 400, 13),
        ("POST", "/v1/namespace/..%24x/create", {}, 400, 13),
        ("POST", "/v1/namespace/x.lance/create", {}, 400, 13),
        ("POST", "/v1/table/a%20b/declare", {}, 400, 13),
        ("POST", "/v1/table/%24/declare", {}, 400, 13),
        ("POST", "/v1/table/ns%24t%2Fx/describe", {}, 400, 13),
        ("POST", "/v1/namespace/escape/create", {}, 403, 15),
        ("POST", "/v1/namespace/escape/describe", {}, 404, 1),
        ("POST", "/v1/namespace/%24/drop", {}, 400, 13),
        ("POST", "/v1/table/ns%24t/describe", [1, 2], 400, 13),
        ("POST", "/v1/table/ns%24t/describe", {"version": "two"}, 400, 13),
        ("POST", "/v1/table/ns%24t/describe", {"id": "ns$t"}, 400, 13),
        ("POST", "/v1/table/ns%24t/query", {"vector": {}}, 400, 13),
        ("POST", "/v1/table/ns%24t/query", {"k": -1, "vector": {}}, 400, 13),
        ("POST", "/v1/table/ns%24t/query", {"k": 5, "vector": {}, "filter": "id >"}, 400, 13),
        ("POST", "/v1/table/ns%24t/query", {"k": 5, "vector": {}, "columns": ["zz"]}, 400, 13),
        ("POST", "/v1/table/ns%24t/count_rows", {"predicate": "nope = 1"}, 400, 13),
        ("POST", "/v1/table/ns%24t/update", {"updates": [["id"]]}, 400, 13),
        ("POST", "/v1/table/ns%24t/update", {"updates": [["id", "id +"]]}, 400, 13),
        ("POST", "/v1/table/ns%24t/delete", {}, 400, 13),
        ("POST", "/v1/table/ns%24t/tags/create", {"tag": "../x", "version": 1}, 400, 13),
        ("POST", "/v1/table/ns%24t/tags/create", {"tag": "ok", "version": 99}, 404, 11),
        ("POST", "/v1/table/ns%24t/version/describe", {"version": 99}, 404, 11),
        ("POST", "/v1/table/ns%24t/version/create",
         {"version": 2, "manifest_path": "etc/passwd"}, 400, 13),
        ("POST", "/v1/table/ns%24t/restore", {"version": 99}, 404, 11),
        ("POST", "/v1/table/ns%24t/index/nope/stats", {}, 404, 6),
        ("POST", "/v1/table/ns%24t/create_index", {"column": "id", "index_type": "FTS"}, 400, 13),
        ("POST", "/v1/table/ns%24t/create_index", {"column": "s", "index_type": "IVF_RQ"},
         400, 13),
        ("POST", "/v1/table/ns%24t/create_index", {"column": "zz", "index_type": "BTREE"}, 400, 13),
        ("POST", "/v1/namespace/new/create", {"properties": {"k": 1}}, 400, 13),
        ("POST", "/v1/namespace/new/create", {"mode": "sideways"}, 400, 13),
        ("POST", "/v1/namespace/escape%24x/create", {}, 404, 1),
        ("POST", "/v1/table/escape%24t/declare", {}, 404, 1),
        ("POST", "/v1/table/ns%24t/rename", {"new_table_name": "../../x"}, 400, 13),
        ("POST", "/v1/table/ns%24t/rename", {"new_table_name": "u", "new_namespace_id": ["zz"]},
         404, 1),
        ("POST", "/v1/table/ns%24t/register", {"location": "/etc"}, 400, 13),
        ("POST", "/v1/table/ns%24t/register", {"location": "../x.lance"}, 406, 0),
        ("POST", "/v1/table/ns%24t/register", {"location": "_deregistered~/../t.lance"}, 400, 13),
        ("PUT", "/v1/table/ns%24t/describe", {}, 405, 0),
        ("POST", "/v1/table/ns%24t/secret", {}, 404, 0),
    ],
)  # fmt: skip
def test_refused_with_the_spec_error(
    served: Served, method: str, path: str, body: object, status: int, code: int
) -> None:
    before = _files(served.root)
    a = call(served.url, method, path, body)
    assert (a.status, a.code) == (status, code), a.data
    assert "/tmp" not in a.json["error"] and "Traceback" not in a.json["error"]
    assert _files(served.root) == before


def test_bodies_of_the_wrong_kind(served: Served) -> None:
    before = _files(served.root)
    cases = [
        # JSON where an Arrow stream goes, and the reverse
        ("/v1/table/ns%24u/create", b'{"a": 1}', "application/json"),
        ("/v1/table/ns%24t/insert", b"not arrow", ARROW),
        ("/v1/table/ns%24t/insert", ipc_stream(ROWS)[:-40], ARROW),
        ("/v1/table/ns%24t/insert", b"", ARROW),
        ("/v1/table/ns%24t/describe", b"\xff\xfe", "application/json"),
        ("/v1/table/ns%24t/describe", b"{}", "text/plain"),
        ("/v1/table/ns%24t/merge_insert?on=nope&when_not_matched_insert_all=true",
         ipc_stream(ROWS), ARROW),
        ("/v1/table/ns%24t/insert", ipc_stream(pa.table({"x": [1.5]})), ARROW),
    ]  # fmt: skip
    for path, data, ctype in cases:
        a = call(served.url, "POST", path, data, content_type=ctype)
        assert (a.status, a.code) == (400, 13), (path, a.data)
    assert _files(served.root) == before
    rows = call(served.url, "POST", "/v1/table/ns%24t/count_rows", {})
    assert rows.json == 3


def test_oversized_bodies_are_refused(served: Served) -> None:
    big = ipc_stream(pa.table({"id": pa.array(range(2000), pa.int64())}))
    a = call(served.url, "POST", "/v1/table/ns%24t/insert", big, content_type=ARROW)
    assert (a.status, a.code) == (413, 13)
    a = call(served.url, "POST", "/v1/table/ns%24t/describe", {"pad": "x" * 8000})
    assert (a.status, a.code) == (413, 13)
    assert call(served.url, "POST", "/v1/table/ns%24t/count_rows", {}).json == 3


def test_random_requests_never_break_the_server(
    served: Served, record_property: pytest.RecordProperty
) -> None:
    rng = random.Random(41)
    ids = ["ns", "ns%24t", "%24", "ns%24nope", "..", "%2e%2e%24x", "a" * 300, "ns%24t%24t", "%00"]
    values: list[object] = [None, 0, -5, 2**70, "", "x" * 50, [], {}, [1, "a"], {"a": None}, True]
    keys = ["k", "vector", "filter", "columns", "version", "tag", "predicate", "updates",
            "id", "mode", "properties", "new_table_name", "manifest_path", "column",
            "index_type"]  # fmt: skip
    sent = 0
    for _ in range(300):
        route = rng.choice(ROUTES)
        path = route.path.replace("{id}", rng.choice(ids)).replace("{index_name}", "i")
        body = {rng.choice(keys): rng.choice(values) for _ in range(rng.randint(0, 4))}
        method = rng.choice(route.methods)
        data = json.dumps(body).encode() if method == "POST" else None
        if route.body == "arrow":
            data = rng.choice([b"", b"\x00" * 16, ipc_stream(ROWS)[: rng.randint(0, 300)]])
        a = call(served.url, method, path, data, content_type="application/json")
        sent += 1
        assert a.status < 500, (method, path, body, a.data)
        if a.status >= 400:
            assert isinstance(a.json.get("code"), int), a.data
    record_property("hostile_inputs", sent)
    assert not any((served.root.parent / "outside").iterdir())
    assert call(served.url, "GET", "/healthz").json == {"status": "SERVING"}
