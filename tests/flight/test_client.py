"""The Python client end to end, against a real Quiver server on a loopback port.

Each test builds the server in-process with `build_server` (port 0, root = tmp_path),
serves it in a thread, and checks the client's answers against the engine itself
(`format.dataset.dataset(...).to_table()`, whole tables).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import pytest

from quiver.clients import (
    AlreadyExists,
    Client,
    CommitConflict,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuiverError,
    Unauthenticated,
    Unavailable,
)
from quiver.flight_server.auth import hash_password
from quiver.flight_server.config import ServerConfig
from quiver.flight_server.server import build_server
from quiver.format.dataset import dataset, write_dataset

ROWS = 1200
ROWS_PER_FRAGMENT = 100  # 12 fragments, so 12 endpoints


def _table(start: int, rows: int) -> pa.Table:
    ids = pa.array(range(start, start + rows), pa.int64())
    return pa.table(
        {
            "id": ids,
            "x": pc.multiply(ids.cast(pa.float64()), 0.5),
            "s": pa.array(
                [None if i % 7 == 0 else f"s{i % 13}" for i in range(start, start + rows)]
            ),
            "v": pa.array([[i, i + 1] for i in range(start, start + rows)], pa.list_(pa.int32())),
        }
    )


class _Served:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.server = build_server(ServerConfig(root=str(root), port=0))
        self.thread = threading.Thread(target=self.server.serve, daemon=True)
        self.thread.start()
        self.uri = f"grpc://127.0.0.1:{self.server.port}"

    def path(self, name: str) -> str:
        return str(self.root / f"{name}.lance")

    def engine(self, name: str, version: int | str | None = None, **kw: Any) -> pa.Table:
        return dataset(self.path(name), version=version).to_table(**kw)

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join(timeout=10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[_Served]:
    # "sales": v1 = 1200 rows in 12 fragments, v2 = + 300 rows, v3 = rows with id % 5 == 0
    # deleted; tag "first" names v1.
    uri = str(tmp_path / "sales.lance")
    write_dataset(_table(0, ROWS), uri, max_rows_per_file=ROWS_PER_FRAGMENT)
    write_dataset(_table(ROWS, 300), uri, mode="append", max_rows_per_file=ROWS_PER_FRAGMENT)
    dataset(uri).delete("id % 5 = 0")
    dataset(uri).tags.create("first", 1)
    s = _Served(tmp_path)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def qc(served: _Served) -> Iterator[Client]:
    with Client(served.uri, timeout=30) as client:
        yield client


# ------------------------------------------------------------------------------ reads


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"columns": ["s", "id"]},
        {"filter": "x > 100 AND s LIKE 's1%'"},
        {"columns": ["id", "v"], "filter": "id IN (3, 14, 1250) OR s IS NULL"},
        {"version": 1},
        {"version": 2, "columns": ["id"], "filter": "id >= 1190"},
        {"tag": "first"},
        {"tag": "first", "filter": "id < 10"},
        {"with_row_id": True},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "all",
)
def test_read_equals_the_engine(served: _Served, qc: Client, options: dict[str, Any]) -> None:
    engine_kw = {k: v for k, v in options.items() if k not in ("version", "tag")}
    ref = options.get("version", options.get("tag"))
    expected = served.engine("sales", ref, **engine_kw)
    got = qc.read("sales", **options)
    assert got.schema.equals(expected.schema)
    assert got.equals(expected)
    assert qc.reader("sales", **options).read_all().equals(expected)
    assert qc.schema("sales", **{k: v for k, v in options.items() if k != "filter"}).equals(
        expected.schema
    )


def test_read_as_of_and_limit(served: _Served, qc: Client) -> None:
    versions = qc.versions("sales")
    assert [v["version"] for v in versions] == [1, 2, 3]
    at_v2 = dt.datetime.fromisoformat(versions[1]["timestamp"].replace("Z", "+00:00"))
    assert qc.read("sales", as_of=at_v2).equals(served.engine("sales", 2))
    limited = qc.read("sales", limit=250)
    assert limited.equals(served.engine("sales").slice(0, 250))
    assert qc.reader("sales", limit=250).read_all().equals(limited)
    assert qc.read("sales", limit=0).num_rows == 0


def test_parallel_read_keeps_endpoint_order(served: _Served, qc: Client) -> None:
    info = qc.flight_info("sales")
    assert len(info.endpoints) >= 12
    expected = served.engine("sales")
    for parallel in (1, 3, 8, 32):
        assert qc.read("sales", parallel=parallel).equals(expected)
    ids = qc.read("sales", columns=["id"], parallel=8).column("id").to_pylist()
    assert ids == sorted(ids)  # fragments were written in id order


def test_progress_line_on_stderr(
    qc: Client, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table = qc.read("sales", progress=True)  # a tqdm bar (tqdm is installed with lancedb)
    err = capsys.readouterr().err
    assert "reading sales" in err and "100%" in err and "endpoints" in err
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # without tqdm: one line
    table = qc.read("sales", progress=True)
    err = capsys.readouterr().err
    assert f"{table.num_rows:,} rows" in err and err.endswith("\n")


def test_catalog(served: _Served, qc: Client) -> None:
    write_dataset(_table(0, 10), str(served.root / "team" / "b.lance"))
    assert sorted(qc.datasets()) == ["sales", "team/b"]
    d = qc.describe("sales")
    assert d["version"] == 3 and d["rows"] == served.engine("sales").num_rows
    assert d["tags"] == {"first": 1}
    assert qc.describe("sales", tag="first")["version"] == 1
    assert qc.read("team/b").equals(served.engine("team/b"))
    assert qc.healthcheck() == {"status": "serving"}
    assert {"commit", "abort", "describe", "healthcheck"} <= set(qc.list_actions())


# ------------------------------------------------------------------------------ errors


def test_not_found(qc: Client) -> None:
    for call in (
        lambda: qc.read("nope"),
        lambda: qc.reader("nope"),
        lambda: qc.schema("nope"),
        lambda: qc.describe("nope"),
        lambda: qc.versions("nope"),
        lambda: qc.read("sales", version=99),
        lambda: qc.read("sales", tag="nope"),
    ):
        with pytest.raises(NotFound) as info:
            call()
        assert info.value.code == "not_found"
        assert "\n" not in info.value.message and "Detail" not in info.value.message
    with pytest.raises(NotFound, match="'nope'"):
        qc.read("nope")


def test_invalid_argument(qc: Client) -> None:
    with pytest.raises(InvalidArgument, match="filter") as info:
        qc.read("sales", filter="id >")
    assert info.value.code == "invalid_argument" and "Traceback" not in str(info.value)
    with pytest.raises(InvalidArgument):
        qc.reader("sales", filter="no_such_column = 1")
    with pytest.raises(InvalidArgument):
        qc.read("sales", columns=["zz"])
    with pytest.raises(InvalidArgument):
        qc.read("../escape")
    with pytest.raises(InvalidArgument):
        qc.schema("sales", columns=["zz"])
    with pytest.raises(QuiverError) as unknown:
        qc.action("no_such_action")
    assert unknown.value.code == "unimplemented"


# ------------------------------------------------------------------------------ writes


def test_write_modes(served: _Served, qc: Client) -> None:
    t = _table(0, 50)
    assert qc.write("new", t, mode="create") == {"version": 1, "rows": 50}
    with pytest.raises(AlreadyExists):
        qc.write("new", t, mode="create")
    assert qc.write("new", _table(50, 25)) == {"version": 2, "rows": 25}
    assert qc.read("new").equals(served.engine("new"))
    assert qc.read("new").num_rows == 75
    assert qc.write("new", t.slice(0, 5), mode="overwrite")["version"] == 3
    assert qc.read("new").equals(t.slice(0, 5))
    # other inputs: batches, a reader, a dict
    qc.write("new", iter(t.slice(5, 5).to_batches()))
    qc.write("new", pa.RecordBatchReader.from_batches(t.schema, t.slice(10, 5).to_batches()))
    assert qc.read("new", columns=["id"]).column("id").to_pylist() == list(range(15))


def test_stage_commit_abort(served: _Served, qc: Client) -> None:
    before = served.engine("sales")
    read_version = qc.describe("sales")["version"]
    frags = qc.stage("sales", _table(5000, 40)) + qc.stage("sales", _table(6000, 60))
    assert len(frags) >= 2 and all(isinstance(f, str) for f in frags)
    assert qc.read("sales").equals(before)  # staged rows are invisible
    done = qc.commit("sales", frags, read_version=read_version)
    assert done == {"version": read_version + 1, "rows": 100}
    after = served.engine("sales")
    assert after.num_rows == before.num_rows + 100
    assert qc.read("sales").equals(after)

    doomed = qc.stage("sales", _table(7000, 10))
    answer = qc.abort("sales", doomed)
    assert answer["removed_files"] >= 1
    with pytest.raises(InvalidArgument, match="gone"):
        qc.commit("sales", doomed)
    assert qc.describe("sales")["version"] == read_version + 1

    # a new dataset from staged fragments
    new = qc.stage("fresh", _table(0, 30), mode="create")
    assert qc.commit("fresh", new, operation="create") == {"version": 1, "rows": 30}
    assert qc.read("fresh").equals(served.engine("fresh"))


def test_idempotency_key_commits_once(served: _Served, qc: Client) -> None:
    frags = qc.stage("sales", _table(9000, 20))
    first = qc.commit("sales", frags, idempotency_key="job-17")
    again = qc.commit("sales", frags, idempotency_key="job-17")
    assert again["version"] == first["version"]
    assert [v["version"] for v in qc.versions("sales")][-1] == first["version"]
    ids = qc.read("sales", columns=["id"], filter="id >= 9000").column("id").to_pylist()
    assert ids == list(range(9000, 9020))


def test_commit_conflict(served: _Served, qc: Client) -> None:
    read_version = qc.describe("sales")["version"]
    frags = qc.stage("sales", _table(8000, 10))
    won = qc.write("sales", _table(0, 5), mode="overwrite")  # a concurrent overwrite
    with pytest.raises(CommitConflict) as info:
        qc.commit("sales", frags, read_version=read_version)
    err = info.value
    assert err.code == "commit_conflict"
    assert err.retryable is False
    assert err.version == won["version"]
    assert qc.read("sales").equals(_table(0, 5))
    qc.abort("sales", frags)


# ------------------------------------------------------------------------------ table operations


def test_table_operations(served: _Served, qc: Client) -> None:
    v3 = served.engine("sales")
    deleted = qc.delete("sales", "id < 100")
    assert deleted["version"] == 4
    assert qc.read("sales").equals(served.engine("sales"))
    assert qc.read("sales").num_rows == v3.num_rows - deleted["deleted_rows"]

    assert qc.create_tag("sales", "before", 3) == {"tag": "before", "version": 3}
    assert {t: info["version"] for t, info in qc.tags("sales").items()} == {
        "first": 1,
        "before": 3,
    }
    assert qc.read("sales", tag="before").equals(v3)
    qc.delete_tag("sales", "before")
    assert set(qc.tags("sales")) == {"first"}

    restored = qc.restore("sales", 3)
    assert qc.read("sales").equals(v3)
    assert qc.restore("sales", "first")["version"] == restored["version"] + 1
    assert qc.read("sales").equals(served.engine("sales", 1))

    qc.add_columns("sales", {"y": "x * 2"})
    qc.alter_columns("sales", {"path": "y", "name": "y2"})
    qc.drop_columns("sales", ["v"])
    got = qc.read("sales")
    assert got.column_names == ["id", "x", "s", "y2"]
    assert got.equals(served.engine("sales"))

    compacted = qc.compact("sales", target_rows_per_fragment=10_000)
    assert compacted["fragments_removed"] >= 2
    assert qc.read("sales").equals(got)
    stats = qc.cleanup("sales", older_than=dt.timedelta(0), error_if_tagged_old_versions=False)
    assert stats["old_versions"] >= 1
    assert qc.read("sales").equals(got)

    assert qc.drop_dataset("sales")["dropped"] is True
    with pytest.raises(NotFound):
        qc.read("sales")
    assert qc.datasets() == []


def test_dead_replica_is_skipped(served: _Served, qc: Client) -> None:
    # endpoints name an unreachable replica first; the client falls over to the next location
    served.server.locations = ["grpc://127.0.0.1:1", served.uri]
    info = qc.flight_info("sales")
    assert [loc.uri.decode() for loc in info.endpoints[0].locations] == served.server.locations
    assert qc.read("sales", parallel=4).equals(served.engine("sales"))


def test_basic_then_bearer_and_rights(tmp_path: Path) -> None:
    write_dataset(_table(0, 10), str(tmp_path / "sales.lance"))
    write_dataset(_table(0, 10), str(tmp_path / "team" / "b.lance"))
    users = {
        "alice": {"password": hash_password("s3cret-pw"), "read": ["*"], "write": ["team/*"]},
        "bob": {"password": hash_password("bob-pw-123"), "read": ["team/*"]},
    }
    auth_file = tmp_path / "auth.json"
    auth_file.write_text(json.dumps({"users": users}))
    server = build_server(ServerConfig(root=str(tmp_path), port=0, auth_file=str(auth_file)))
    uri = f"grpc://127.0.0.1:{server.port}"
    try:
        with Client(uri, username="alice", password="s3cret-pw") as qc:
            assert qc.read("sales").num_rows == 10  # GetFlightInfo and DoGet with the token
            assert qc.write("team/b", _table(10, 5))["rows"] == 5
            with pytest.raises(PermissionDenied) as denied:
                qc.write("sales", _table(10, 5))
            assert denied.value.code == "permission_denied"
            with pytest.raises(PermissionDenied):
                qc.delete("sales", "id < 3")
        with Client(uri, username="bob", password="bob-pw-123") as qc:
            assert qc.datasets() == ["team/b"]  # only what bob may read
            assert qc.read("team/b").num_rows == 15
            with pytest.raises(PermissionDenied):
                qc.read("sales")
        raw = flight.FlightClient(uri)
        _, bearer = raw.authenticate_basic_token("alice", "s3cret-pw")
        raw.close()
        with Client(uri, token=bearer.decode().removeprefix("Bearer ")) as qc:
            assert sorted(qc.datasets()) == ["sales", "team/b"]
        with pytest.raises(Unauthenticated):
            Client(uri, username="alice", password="wrong")
        with Client(uri) as qc, pytest.raises(Unauthenticated) as info:
            qc.read("sales")
        assert info.value.code == "unauthenticated" and "\n" not in info.value.message
        with Client(uri, token="q1.forged") as qc, pytest.raises(Unauthenticated):
            qc.datasets()
    finally:
        server.shutdown()


def test_endpoints_read_the_planned_snapshot(served: _Served, qc: Client) -> None:
    info = qc.flight_info("sales", columns=["id"])
    qc.write("sales", _table(50_000, 10))  # commits after planning...
    qc.delete("sales", "id < 600")
    batches = [b for e in info.endpoints for b in qc.endpoint_batches(e)]
    got = pa.Table.from_batches(batches, schema=info.schema)
    assert got.equals(served.engine("sales", 3, columns=["id"]))  # ...but reads version 3


def test_quickstart_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import runpy

    from quiver.flight_server.demo import ensure_demo

    ensure_demo(str(tmp_path))
    s = _Served(tmp_path)
    try:
        example = Path(__file__).parents[2] / "clients" / "examples" / "quickstart.py"
        runpy.run_path(str(example))["main"](s.uri)
    finally:
        s.close()
    out = capsys.readouterr().out
    assert "datasets: ['demo', 'orders']" in out and "NotFound:" in out
    assert not (tmp_path / "quickstart.lance").exists()


def test_mutual_tls(tmp_path: Path) -> None:
    from tls_certs import make_tls_material

    certs = make_tls_material(tmp_path / "certs")
    write_dataset(_table(0, 10), str(tmp_path / "sales.lance"))
    config = ServerConfig(
        root=str(tmp_path),
        port=0,
        tls_cert=str(certs.server_cert),
        tls_key=str(certs.server_key),
        tls_client_ca=str(certs.ca_cert),
    )
    server = build_server(config)
    uri = f"grpc+tls://127.0.0.1:{server.port}"
    try:
        assert server.locations[0].startswith("grpc+tls://")
        with Client(
            uri,
            tls_root_certs=certs.ca_cert,  # a path
            cert_chain=certs.read("client_cert"),  # PEM bytes
            private_key=certs.read("client_key").decode(),  # PEM text
            timeout=10,
        ) as qc:
            assert qc.read("sales", parallel=2).num_rows == 10
        with Client(uri, tls_root_certs=certs.ca_cert, timeout=10) as qc:
            with pytest.raises(Unavailable):  # no client certificate: refused in the handshake
                qc.datasets()
    finally:
        server.shutdown()
