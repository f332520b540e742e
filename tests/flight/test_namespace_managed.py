"""Quiver as the commit coordinator (``--managed-versioning``): pylance commits every new
version of a namespace table through CreateTableVersion, reads versions through
ListTableVersions / DescribeTableVersion, and concurrent writers (pylance's and Quiver's own)
never lose or overwrite a commit."""

from __future__ import annotations

import re
import threading
import urllib.request
from collections.abc import Iterator

import lance
import lance.namespace as lns
import pyarrow as pa
import pytest
from lance_namespace import CreateNamespaceRequest
from namespace_helpers import Served, call, namespace_server

from quiver.clients import Client

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": ["a", "b", "c"]})


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("managed")
    with namespace_server(root, "--managed-versioning", "--metrics-port", "0") as s:
        lns.RestNamespace(uri=s.url).create_namespace(CreateNamespaceRequest(id=["m"]))
        yield s


def _count(served: Served, op: str) -> int:
    port = re.search(
        rb"metrics on http://127.0.0.1:(\d+)", (served.root / "server.log").read_bytes()
    )
    assert port
    text = urllib.request.urlopen(f"http://127.0.0.1:{int(port.group(1))}/metrics").read().decode()
    found = re.search(rf'quiver_requests_total\{{code="ok",rpc="namespace:{op}"\}} (\d+)', text)
    return int(found.group(1)) if found else 0


def test_pylance_commits_through_quiver(served: Served) -> None:
    ns = lns.RestNamespace(uri=served.url)
    before = _count(served, "CreateTableVersion")
    lance.write_dataset(ROWS, namespace_client=ns, table_id=["m", "t"], mode="create")
    lance.write_dataset(ROWS, namespace_client=ns, table_id=["m", "t"], mode="append")
    ds = lance.dataset(namespace_client=ns, table_id=["m", "t"])
    ds.delete("id = 1")
    assert _count(served, "CreateTableVersion") - before == 3
    ds = lance.dataset(namespace_client=ns, table_id=["m", "t"])
    assert ds.version == 3 and ds.count_rows() == 4
    assert lance.dataset(namespace_client=ns, table_id=["m", "t"], version=1).to_table() == ROWS
    versions = sorted((served.root / "m" / "t.lance" / "_versions").glob("*.manifest*"))
    assert [p.name for p in versions] == [f"{2**64 - 1 - v}.manifest" for v in (3, 2, 1)]
    described = call(served.url, "POST", "/v1/table/m%24t/describe", {})
    assert described.json["managed_versioning"] is True
    listed = call(served.url, "POST", "/v1/table/m%24t/version/list?limit=2&descending=true")
    assert [v["version"] for v in listed.json["versions"]] == [3, 2]
    assert listed.json["page_token"] == "2"
    with Client(served.flight) as client:
        assert client.read("m/t").sort_by("id") == pa.concat_tables([ROWS, ROWS]).filter(
            pa.compute.field("id") != 1
        ).sort_by("id")


def test_a_version_is_published_once(served: Served) -> None:
    ns = lns.RestNamespace(uri=served.url)
    lance.write_dataset(ROWS, namespace_client=ns, table_id=["m", "once"], mode="create")
    versions = served.root / "m" / "once.lance" / "_versions"
    final = versions / f"{2**64 - 2}.manifest"
    staged = versions / f"{2**64 - 3}.manifest-0f3e"
    staged.write_bytes(final.read_bytes())
    prefix = str(versions).lstrip("/")
    body = {"version": 2, "manifest_path": f"{prefix}/{staged.name}", "naming_scheme": "V2"}
    first = call(served.url, "POST", "/v1/table/m%24once/version/create", body)
    assert first.status == 200 and first.json["version"]["version"] == 2
    assert not staged.exists()
    staged.write_bytes(final.read_bytes())
    again = call(served.url, "POST", "/v1/table/m%24once/version/create", body)
    assert (again.status, again.code) == (409, 14)
    wrong = dict(body, version=5)
    assert call(served.url, "POST", "/v1/table/m%24once/version/create", wrong).code == 13


def test_concurrent_writers_lose_nothing(served: Served) -> None:
    ns = lns.RestNamespace(uri=served.url)
    lance.write_dataset(ROWS, namespace_client=ns, table_id=["m", "busy"], mode="create")
    errors: list[BaseException] = []

    def pylance_writer(i: int) -> None:
        try:
            for j in range(3):
                rows = pa.table({"id": pa.array([100 * i + j], pa.int64()), "s": [f"p{i}"]})
                lance.write_dataset(
                    rows, namespace_client=ns, table_id=["m", "busy"], mode="append"
                )
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def flight_writer() -> None:
        try:
            with Client(served.flight) as client:
                for j in range(3):
                    rows = pa.table({"id": pa.array([1000 + j], pa.int64()), "s": ["f"]})
                    client.write("m/busy", rows)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=pylance_writer, args=(i,)) for i in range(3)]
    threads.append(threading.Thread(target=flight_writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    ds = lance.dataset(namespace_client=ns, table_id=["m", "busy"])
    ids = sorted(ds.to_table()["id"].to_pylist())
    expected = sorted(
        [1, 2, 3, *(100 * i + j for i in range(3) for j in range(3)), 1000, 1001, 1002]
    )
    assert ids == expected
    assert ds.version == 1 + 12


def test_storage_without_atomic_create(tmp_path, monkeypatch) -> None:
    """Where the storage offers no create-if-absent, the server's lock orders the commits
    clients send it: concurrent pylance writers still lose nothing."""
    from quiver.flight_server.config import ServerConfig
    from quiver.flight_server.namespace import start_namespace
    from quiver.flight_server.server import build_server
    from quiver.format.errors import UnsupportedFeatureError
    from quiver.format.io.store import ObjectStore

    def no_atomic_create(self: ObjectStore, path: str, data: bytes) -> None:
        raise UnsupportedFeatureError("no conditional writes here")

    config = ServerConfig(
        root=str(tmp_path / "root"), port=0, namespace_port=0, managed_versioning=True
    )
    server = build_server(config)
    namespace = start_namespace(config, server.service, server.authenticator)
    monkeypatch.setattr(ObjectStore, "put_if_absent", no_atomic_create)
    try:
        ns = lns.RestNamespace(uri=namespace.url)
        lance.write_dataset(ROWS, namespace_client=ns, table_id=["t"], mode="create")
        errors: list[BaseException] = []

        def writer(i: int) -> None:
            try:
                for j in range(3):
                    rows = pa.table({"id": pa.array([10 * i + j], pa.int64()), "s": ["w"]})
                    lance.write_dataset(rows, namespace_client=ns, table_id=["t"], mode="append")
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(1, 4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        ds = lance.dataset(namespace_client=ns, table_id=["t"])
        assert ds.version == 10 and ds.count_rows() == 3 + 9
    finally:
        namespace.stop()
        server.shutdown()


def test_pylance_branches_commit_through_quiver(served: Served) -> None:
    """pylance's create_branch and its writes on the branch publish each version through
    CreateTableVersion (with `branch`), into the branch's tree; the main line is untouched."""
    ns = lns.RestNamespace(uri=served.url)
    lance.write_dataset(ROWS, namespace_client=ns, table_id=["m", "br"], mode="create")
    ds = lance.dataset(namespace_client=ns, table_id=["m", "br"])
    before = _count(served, "CreateTableVersion")
    ds.create_branch("dev")
    dev = ds.checkout_version(("dev", None))
    dev.insert(ROWS)
    dev.delete("id = 2")
    assert _count(served, "CreateTableVersion") - before == 3
    tree = served.root / "m" / "br.lance" / "tree" / "dev" / "_versions"
    assert sorted(p.name for p in tree.glob("*.manifest*")) == [
        f"{2**64 - 1 - v}.manifest" for v in (3, 2, 1)
    ]
    main = lance.dataset(namespace_client=ns, table_id=["m", "br"])
    assert main.version == 1 and main.to_table() == ROWS
    with Client(served.flight) as client:
        got = client.branch("dev").read("m/br").sort_by("id")
    want = pa.concat_tables([ROWS, ROWS]).filter(pa.compute.field("id") != 2).sort_by("id")
    assert got == want
    staged = {"version": 9, "manifest_path": "m/br.lance/tree/dev/_versions/x", "branch": "dev"}
    refused = call(served.url, "POST", "/v1/table/m%24br/version/create", staged)
    assert (refused.status, refused.code) == (400, 13)
    bad = dict(staged, branch="../up")
    assert call(served.url, "POST", "/v1/table/m%24br/version/create", bad).code == 13
