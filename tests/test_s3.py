"""S3 storage end to end, against moto's S3 server on loopback, through s3fs over HTTP."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

import lance  # noqa: E402
import pyarrow.flight as fl  # noqa: E402
from moto_atomic import moto_s3  # noqa: E402

from quiver.format.dataset import dataset, write_dataset  # noqa: E402
from quiver.format.errors import UnsupportedFeatureError  # noqa: E402
from quiver.format.io.store import ObjectStore, _RemoteUpload, open_store  # noqa: E402


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, Any]]:
    """A moto S3 server with the bucket `bucket`; yields storage options for it."""
    with moto_s3("bucket") as endpoint:
        yield {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }


def _uri(name: str) -> str:
    return f"s3://bucket/{name}-{uuid.uuid4().hex[:8]}.lance"


def _table(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "s": pa.array([None if i % 7 == 0 else f"s{i % 13}" for i in ids], pa.string()),
            "v": pa.array([[float(i)] * (i % 3) for i in ids], pa.list_(pa.float32())),
        }
    )


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


def _lance_options(s3: dict[str, Any]) -> dict[str, str]:
    """pylance's storage options for the same moto endpoint."""
    return {
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "aws_endpoint": s3["client_kwargs"]["endpoint_url"],
        "aws_region": "us-east-1",
        "allow_http": "true",
    }


def test_write_append_delete_tag_and_time_travel(s3):
    uri = _uri("ds")
    v1 = _table(100)
    ds = write_dataset(v1, uri, max_rows_per_file=40, storage_options=s3)
    assert ds.version == 1 and len(ds.get_fragments()) == 3
    write_dataset(_table(50, 100), uri, mode="append", storage_options=s3)
    ds = dataset(uri, storage_options=s3)
    assert ds.version == 2
    ds.delete("id % 10 = 3")
    ds.tags.create("before-delete", 2)
    ds = dataset(uri, storage_options=s3)
    assert ds.version == 3

    full = pa.concat_tables([v1, _table(50, 100)])
    expected = full.filter(pc.not_equal(pc.modulo(full["id"], 10), 3))
    assert _sorted(ds.to_table()).equals(expected)
    assert dataset(uri, version=1, storage_options=s3).to_table().equals(v1)
    assert _sorted(dataset(uri, version="before-delete", storage_options=s3).to_table()).equals(
        full
    )
    assert ds.checkout_version(2).count_rows() == 150
    assert ds.tags.list()["before-delete"]["version"] == 2
    assert [v["version"] for v in ds.versions()] == [1, 2, 3]
    # pylance reads what we wrote to S3 (through the same endpoint)
    ref = lance.dataset(uri, storage_options=_lance_options(s3))
    assert ref.version == 3
    assert _sorted(ref.to_table()).equals(expected)


def test_lance_style_storage_options(s3):
    uri = _uri("aliases")
    options = {
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "aws_endpoint": s3["client_kwargs"]["endpoint_url"],
        "aws_region": "us-east-1",
        "allow_http": "true",
    }
    write_dataset(_table(10), uri, storage_options=options)
    assert dataset(uri, storage_options=s3).to_table().equals(_table(10))


def test_reads_a_pylance_dataset_uploaded_to_s3(s3, tmp_path):
    local = tmp_path / "ref.lance"
    lance.write_dataset(_table(300), str(local), max_rows_per_file=120, data_storage_version="2.0")
    lance.write_dataset(_table(30, 300), str(local), mode="append")
    ref = lance.dataset(str(local))
    ref.delete("id < 5")
    ref = lance.dataset(str(local))

    uri = _uri("uploaded")
    store = open_store(uri, s3)
    store.fs.put(str(local) + "/", store.root + "/", recursive=True)
    ours = dataset(uri, storage_options=s3)
    assert ours.version == ref.version
    assert ours.to_table().equals(ref.to_table())
    assert ours.to_table(columns=["s", "id"], filter="id > 250").equals(
        ref.to_table(columns=["s", "id"], filter="id > 250")
    )
    assert ours.take([0, 7, 299]).equals(ref.take([0, 7, 299]))
    assert ours.checkout_version(1).to_table().equals(ref.checkout_version(1).to_table())


def test_put_if_absent_is_a_real_conditional_create(s3):
    store = open_store(_uri("cas"), s3)
    store.put_if_absent("_versions/1.manifest", b"first")
    with pytest.raises(FileExistsError):
        store.put_if_absent("_versions/1.manifest", b"second")
    assert store.read_all("_versions/1.manifest") == b"first"
    store.put_if_absent("_refs/tags/t.json", b"{}")
    with pytest.raises(FileExistsError):
        store.put_if_absent("_refs/tags/t.json", b"{}!")


def test_put_if_absent_refuses_backends_without_conditional_writes(tmp_path):
    from fsspec.implementations.dirfs import DirFileSystem
    from fsspec.implementations.local import LocalFileSystem

    fs = DirFileSystem(str(tmp_path), fs=LocalFileSystem())
    store = ObjectStore(fs, "", "dir://x")
    with pytest.raises(UnsupportedFeatureError):
        store.put_if_absent("_versions/1.manifest", b"x")


def test_listing_sees_other_writers_and_ranged_reads(s3):
    uri = _uri("listing")
    a = open_store(uri, s3)
    assert a.list_dir("_versions") == []
    a.put("_versions/1.manifest", b"1")
    assert [n for n, _, _ in a.list_dir("_versions")] == ["1.manifest"]
    # a write through another client (another process, as far as caches go)
    import s3fs

    other = s3fs.S3FileSystem(skip_instance_cache=True, **s3)
    other.pipe_file(a.full_path("_versions/2.manifest"), b"22")
    assert sorted(n for n, _, _ in a.list_dir("_versions")) == ["1.manifest", "2.manifest"]
    assert a.size("_versions/2.manifest") == 2 and a.exists("_versions/2.manifest")

    blob = bytes(range(256)) * 8192  # 2 MiB
    a.put("data/blob", blob)
    with a.open("data/blob") as r:
        assert r.size == len(blob)
        assert r.read(1000, 10) == blob[1000:1010]
        assert r.read_tail(5) == blob[-5:]
        ranges = [(0, 3), (5, 7), (1_500_000, 100), (len(blob) - 10, 10), (9, 0)]
        assert r.read_ranges(ranges) == [blob[s : s + n] for s, n in ranges]
        with pytest.raises(EOFError):
            r.read(len(blob) - 1, 2)


def test_open_write_publishes_only_on_clean_close(s3):
    store = open_store(_uri("writes"), s3)
    sink = store.open_write("data/a.lance")
    assert isinstance(sink, _RemoteUpload)
    sink.write(b"partial")
    sink.flush()
    assert not store.exists("data/a.lance")
    sink.abort()
    assert not store.exists("data/a.lance")

    with pytest.raises(RuntimeError), store.open_write("data/b.lance") as sink:
        sink.write(b"partial")
        raise RuntimeError("writer died")
    assert not store.exists("data/b.lance")

    sink = store.open_write("data/c.lance")
    sink.write(b"hello ")
    sink.write(b"world")
    del sink  # dropped without close: nothing published
    assert not store.exists("data/c.lance")

    with store.open_write("data/d.lance") as sink:
        sink.write(b"whole")
    assert store.read_all("data/d.lance") == b"whole"


def test_failed_write_leaves_no_data_files(s3):
    uri = _uri("failed")

    def batches():
        yield _table(10).to_batches()[0]
        raise RuntimeError("source broke")

    schema = _table(1).schema
    with pytest.raises(RuntimeError):
        write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), uri, storage_options=s3)
    store = open_store(uri, s3)
    assert store.list_dir("data") == [] and store.list_dir("_versions") == []


def test_racing_creates_have_one_winner(s3):
    store = open_store(_uri("race"), s3)
    for key in range(5):
        path = f"_versions/{key}.manifest"
        won: list[int] = []
        barrier = threading.Barrier(4)

        def create(i: int, path: str = path, won: list[int] = won, barrier: Any = barrier) -> None:
            barrier.wait()
            try:
                store.put_if_absent(path, f"writer {i}".encode())
                won.append(i)
            except FileExistsError:
                pass

        pool = [threading.Thread(target=create, args=(i,)) for i in range(4)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        assert len(won) == 1
        assert store.read_all(path) == f"writer {won[0]}".encode()


def test_concurrent_appends_lose_nothing(s3):
    uri = _uri("concurrent")
    write_dataset(_table(1), uri, storage_options=s3)
    threads, per_thread = 2, 10
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def worker(t: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                row = _table(1, 1000 + t * 100 + i)
                write_dataset(row, uri, mode="append", storage_options=s3)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    assert not errors, errors
    ds = dataset(uri, storage_options=s3)
    assert ds.version == 1 + threads * per_thread
    ids = ds.to_table()["id"].to_pylist()
    expected = [0] + [1000 + t * 100 + i for t in range(threads) for i in range(per_thread)]
    assert sorted(ids) == sorted(expected)  # each append present exactly once
    assert len(ds.versions()) == 1 + threads * per_thread


def test_flight_server_on_s3_root(s3):
    from quiver.flight_server.config import ServerConfig
    from quiver.flight_server.server import build_server

    root = f"s3://bucket/root-{uuid.uuid4().hex[:8]}"
    server = build_server(
        ServerConfig(
            root=root, port=0, storage_options=s3, ticket_key=b"s3-tests-ticket-key-0123456789"
        )
    )
    client = fl.connect(server.locations[0])
    try:
        data = _table(200)
        writer, reader = client.do_put(fl.FlightDescriptor.for_path("sales"), data.schema)
        writer.write_table(data)
        writer.done_writing()
        reply = json.loads(reader.read().to_pybytes())
        writer.close()
        assert reply["version"] == 1, reply

        writer, reader = client.do_put(fl.FlightDescriptor.for_path("sales"), data.schema)
        writer.write_table(_table(20, 200))
        writer.done_writing()
        reader.read()
        writer.close()

        info = client.get_flight_info(fl.FlightDescriptor.for_path("sales"))
        got = pa.Table.from_batches(
            [b for e in info.endpoints for b in client.do_get(e.ticket).read_all().to_batches()],
            schema=info.schema,
        )
        assert _sorted(got).equals(_sorted(pa.concat_tables([data, _table(20, 200)])))
        names = [i.descriptor.path[0].decode() for i in client.list_flights()]
        assert names == ["sales"]
        assert dataset(f"{root}/sales.lance", storage_options=s3).count_rows() == 220
        health = list(client.do_action(fl.Action("healthcheck", b"{}")))
        assert json.loads(health[0].body.to_pybytes())["status"] == "serving"
    finally:
        client.close()
        server.shutdown()


def test_config_s3_endpoint(monkeypatch):
    from quiver.flight_server.config import ServerConfig

    env = {
        "QUIVER_ROOT": "s3://bucket/root",
        "QUIVER_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
        "QUIVER_STORAGE_OPTIONS": json.dumps({"key": "k", "secret": "s"}),
    }
    config = ServerConfig.from_args([], env=env)
    assert config.storage_options == {
        "key": "k",
        "secret": "s",
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"},
    }
    config = ServerConfig.from_args(["--s3-endpoint-url", "http://h:1"], env=env)
    assert config.storage_options["client_kwargs"]["endpoint_url"] == "http://h:1"


def test_demo_on_s3_root_uses_the_storage_options(s3):
    from quiver.flight_server.demo import (
        DEMO_NAME,
        ORDERS_NAME,
        demo_table,
        ensure_demo,
        orders_table,
    )

    root = f"s3://bucket/demo-{uuid.uuid4().hex[:8]}"
    assert sorted(ensure_demo(root, s3)) == sorted([DEMO_NAME, ORDERS_NAME])
    assert ensure_demo(root, s3) == []  # already there
    for name, make in ((DEMO_NAME, demo_table), (ORDERS_NAME, orders_table)):
        got = dataset(f"{root}/{name}.lance", storage_options=s3).to_table()
        assert got.equals(make())


def test_flight_sql_on_s3_root(s3):
    """ADBC's Flight SQL driver against a server on an S3 root: ingest, queries pushed into
    the scans, a DELETE, time travel."""
    import warnings

    import adbc_driver_flightsql.dbapi as flight_sql

    from quiver.flight_server.config import ServerConfig
    from quiver.flight_server.server import build_server

    root = f"s3://bucket/sql-{uuid.uuid4().hex[:8]}"
    server = build_server(
        ServerConfig(
            root=root, port=0, storage_options=s3, ticket_key=b"s3-tests-ticket-key-0123456789"
        )
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            conn = flight_sql.connect(server.locations[0], autocommit=True)
        data = _table(300)
        with conn.cursor() as cur:
            assert cur.adbc_ingest("sales", data, mode="create", db_schema_name="team") == 300
            cur.execute("SELECT count(*) AS n, sum(id) AS s FROM team.sales WHERE id >= 100")
            assert cur.fetch_arrow_table().to_pylist() == [{"n": 200, "s": sum(range(100, 300))}]
            cur.execute("DELETE FROM team.sales WHERE id < 50")
            assert cur.rowcount == 50
            cur.execute(
                "SELECT count(*) AS now FROM team.sales "
                'UNION ALL SELECT count(*) FROM team."sales@v1"'
            )
            assert sorted(cur.fetch_arrow_table().column("now").to_pylist()) == [250, 300]
        conn.close()
        left = dataset(f"{root}/team/sales.lance", storage_options=s3).to_table()
        assert _sorted(left).equals(_sorted(data.filter(pc.field("id") >= 50)))
    finally:
        server.shutdown()


@pytest.mark.parametrize("vend", ["static", "sts"])
def test_namespace_on_s3_root_vends_what_clients_need(s3, vend):
    """pylance, given nothing but the namespace's URL, writes and reads an S3 table with the
    location and storage options (endpoint, region, vended credentials) DescribeTable
    answers; Flight reads what it wrote."""
    import time

    import lance.namespace as lns
    from lance_namespace import CreateNamespaceRequest, DescribeTableRequest, ListNamespacesRequest

    from quiver.flight_server.config import ServerConfig
    from quiver.flight_server.namespace import start_namespace
    from quiver.flight_server.server import build_server

    root = f"s3://bucket/ns-{uuid.uuid4().hex[:8]}"
    config = ServerConfig(
        root=root,
        port=0,
        storage_options=s3,
        ticket_key=b"s3-tests-ticket-key-0123456789",
        namespace_port=0,
        vend_credentials=vend,
        vend_seconds=900,
    )
    server = build_server(config)
    namespace = start_namespace(config, server.service, server.authenticator)
    try:
        ns = lns.RestNamespace(uri=namespace.url)
        ns.create_namespace(CreateNamespaceRequest(id=["team"]))
        ns.create_namespace(CreateNamespaceRequest(id=["empty"]))
        assert ns.list_namespaces(ListNamespacesRequest(id=[])).namespaces == ["empty", "team"]
        data = _table(120)
        lance.write_dataset(data, namespace_client=ns, table_id=["team", "t"], mode="create")
        lance.write_dataset(
            _table(30, 120), namespace_client=ns, table_id=["team", "t"], mode="append"
        )
        got = lance.dataset(namespace_client=ns, table_id=["team", "t"]).to_table()
        assert _sorted(got).equals(_sorted(pa.concat_tables([data, _table(30, 120)])))

        described = ns.describe_table(DescribeTableRequest(id=["team", "t"]))
        assert described.location == f"{root}/team/t.lance"
        options = described.storage_options
        assert options["aws_endpoint"] == s3["client_kwargs"]["endpoint_url"]
        assert options["allow_http"] == "true" and options["aws_region"] == "us-east-1"
        expires = int(options["expires_at_millis"]) / 1000
        assert time.time() + 600 < expires <= time.time() + 901
        if vend == "static":
            assert options["aws_access_key_id"] == "testing"
        else:
            assert options["aws_session_token"] and options["aws_access_key_id"] != "testing"

        client = fl.connect(server.locations[0])
        try:
            ticket = client.get_flight_info(fl.FlightDescriptor.for_path("team", "t"))
            rows = sum(client.do_get(e.ticket).read_all().num_rows for e in ticket.endpoints)
            assert rows == 150
        finally:
            client.close()
    finally:
        namespace.stop()
        server.shutdown()


def test_the_latest_version_is_one_small_listing_away(s3):
    """On S3 the newest manifest is found by one listing of at most 16 names, at 41
    versions as at one (V2 names sort newest first), a temporary file before it or not."""
    from quiver.format.table.versions import FIRST_NAMES, latest_entry, list_manifests

    uri = _uri("latest")
    write_dataset(_table(1), uri, storage_options=s3)
    for i in range(40):
        write_dataset(_table(1, i + 1), uri, mode="append", storage_options=s3)
    store = open_store(uri, s3)
    store.put("_versions/.tmp_abandoned", b"partial")  # sorts before every manifest name
    calls: list[tuple[str, Any]] = []
    real = store.fs.call_s3

    def spy(method: str, **kwargs: Any) -> Any:
        calls.append((method, kwargs.get("MaxKeys")))
        return real(method, **kwargs)

    store.fs.call_s3 = spy  # the filesystem object is shared: put back below
    try:
        entry = latest_entry(store)
    finally:
        del store.fs.call_s3
    assert entry.version == 41 == max(list_manifests(store))
    assert calls == [("list_objects_v2", FIRST_NAMES)]
    assert dataset(uri, storage_options=s3).version == 41


def test_blobs_on_s3(s3):
    """Blob v2 values inline, packed and in dedicated sidecars on S3: written, read back as
    ranged reads by both engines, compacted and cleaned up."""
    import datetime as dt

    blob = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    schema = pa.schema([pa.field("id", pa.int64()), blob])
    values = [b"small", None, b"p" * 100_000, b"d" * 5_000_000]
    uri = _uri("blobs")
    write_dataset(pa.table({"id": range(4), "b": values}, schema=schema), uri, storage_options=s3)
    write_dataset(
        pa.table({"id": [4], "b": [b"e" * 70_000]}, schema=schema),
        uri,
        mode="append",
        storage_options=s3,
    )
    want = [*values, b"e" * 70_000]
    ds = dataset(uri, storage_options=s3)
    (big,) = ds.take_blobs("b", indices=[3])
    big.seek(4_999_990)
    assert big.read() == b"d" * 10 and big.read_range(0, 3) == b"ddd"
    assert [d for _, d in ds.read_blobs("b", indices=range(5))] == want
    ref = lance.dataset(uri, storage_options=_lance_options(s3))
    assert [f and f.readall() for f in ref.take_blobs("b", indices=range(5))] == want
    ds.optimize.compact_files()
    ds.cleanup_old_versions(older_than=dt.timedelta(0), delete_unverified=True)
    ds = dataset(uri, storage_options=s3)
    assert ds.to_table(blob_handling="all_binary")["b"].to_pylist() == want
    store = open_store(uri, s3)
    files = list(store.fs.find(store.root))
    assert len([p for p in files if p.endswith(".lance")]) == 1
    assert len([p for p in files if p.endswith(".blob")]) == 2  # one pack, one dedicated
