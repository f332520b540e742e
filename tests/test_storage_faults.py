"""Commits under storage faults: moto's S3 behind a fault-injecting proxy (`s3_faults`).

What the proxy does to a request is what S3 and the network do to real ones: throttling,
server errors, resets mid-body, answers lost after the write happened. None of it may lose
a row, duplicate a commit or leave a version pylance cannot read.
"""

from __future__ import annotations

import os
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
from moto_atomic import lance_options, moto_s3, s3fs_options  # noqa: E402
from s3_faults import FaultProxy, Rule, fault_proxy  # noqa: E402

from quiver.format.dataset import dataset, write_dataset  # noqa: E402
from quiver.format.errors import CommitUnconfirmedError  # noqa: E402
from quiver.format.table import versions  # noqa: E402

pytestmark = pytest.mark.slow

MANIFEST_PUT = r"/_versions/[^/?]+\.manifest"
# how many times each fault campaign runs every kind of commit (`make fault-campaigns`: 10)
ROUNDS = int(os.environ.get("QUIVER_FAULT_ROUNDS", "1"))
# The store's client tries each request once, so every fault reaches Quiver's own retries
# (`format/io/retry.py`, their backoff shortened by the tests): the layer under test, and
# without botocore's backoff of up to seconds a retry.
_ONE_ATTEMPT = {"config_kwargs": {"retries": {"max_attempts": 1}}}


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    with moto_s3("faults") as endpoint:
        yield endpoint


@pytest.fixture
def proxy(moto: str) -> Iterator[FaultProxy]:
    with fault_proxy(moto) as p:
        yield p


def _uri(name: str) -> str:
    return f"s3://faults/{name}-{uuid.uuid4().hex[:8]}.lance"


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _check_every_version(uri: str, moto: str, expected_ids: list[int]) -> None:
    """Every version opens in pylance (straight to moto); the latest holds each id once."""
    ds = lance.dataset(uri, storage_options=lance_options(moto))
    for v in ds.versions():
        lance.dataset(uri, version=v["version"], storage_options=lance_options(moto)).to_table()
    ids = sorted(ds.to_table(columns=["id"]).column("id").to_pylist())
    assert ids == sorted(expected_ids)


def _server(root: str, storage_options: dict[str, Any] | None = None) -> Any:
    """A Flight server in this process over `root`, on a free port."""
    from quiver.flight_server.config import ServerConfig
    from quiver.flight_server.server import build_server

    return build_server(
        ServerConfig(
            root=root,
            port=0,
            storage_options=storage_options or {},
            ticket_key=b"fault-tests-ticket-key-0123456789",
        )
    )


def _fresh_root() -> str:
    return f"s3://faults/root-{uuid.uuid4().hex[:8]}"


def test_a_lost_manifest_answer_commits_once(proxy: FaultProxy, moto: str) -> None:
    """The manifest PUT is written but its answer lost, and the requests on that key that
    follow fail too: the commit finds its own manifest (by its transaction file) rather
    than committing the rows again as the next version."""
    uri = _uri("lost")
    opts = s3fs_options(proxy.endpoint)
    write_dataset(_rows(0, 10), uri, storage_options=opts)
    proxy.set_rules(
        Rule("lost", method="PUT", key=MANIFEST_PUT, times=1),
        Rule("slowdown", key=r"/_versions/", times=4),
    )
    ds = write_dataset(_rows(10, 10), uri, mode="append", storage_options=opts)
    proxy.set_rules()
    assert proxy.injected["lost"] == 1
    assert ds.version == 2
    assert sorted(versions.list_manifests(dataset(uri, storage_options=opts)._core.store)) == [
        1,
        2,
    ]
    _check_every_version(uri, moto, list(range(20)))


def test_a_store_that_keeps_failing_is_unavailable_and_the_key_settles_it(
    proxy: FaultProxy, moto: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every request on the manifest fails after the PUT was written: the commit gives up
    with CommitUnconfirmedError (outcome unknown); the same write retried with its
    idempotency key answers the version that landed, and no rows are doubled."""
    from quiver.format.io import retry

    monkeypatch.setattr(retry, "_BACKOFF", 0.01)  # the same path, faster
    uri = _uri("down")
    opts = {**s3fs_options(proxy.endpoint), "config_kwargs": {"retries": {"max_attempts": 2}}}
    write_dataset(_rows(0, 5), uri, storage_options=opts)
    lost = Rule("lost", method="PUT", key=MANIFEST_PUT, times=1)
    proxy.set_rules(lost, Rule("error500", key=r"/_versions/|list-type", after=lost))
    with pytest.raises(CommitUnconfirmedError, match="retry with the same idempotency key"):
        write_dataset(
            _rows(5, 5), uri, mode="append", storage_options=opts, idempotency_key="job-1"
        )
    proxy.set_rules()
    again = write_dataset(
        _rows(5, 5), uri, mode="append", storage_options=opts, idempotency_key="job-1"
    )
    assert again.version == 2
    _check_every_version(uri, moto, list(range(10)))


def test_keyed_lookups_read_no_manifest_for_a_new_key(proxy: FaultProxy, moto: str) -> None:
    """A keyed commit's search for an earlier attempt costs one read of the key's record
    when the key is new, whatever the number of versions: no manifest is read for it."""
    uri = _uri("keys")
    opts = s3fs_options(proxy.endpoint)
    write_dataset(_rows(0, 1), uri, storage_options=opts)
    for i in range(1, 30):
        write_dataset(_rows(i, 1), uri, mode="append", storage_options=opts)
    from quiver.format.table.commit import find_idempotent_commit

    store = dataset(uri, storage_options=opts)._core.store
    before = proxy.requests
    assert find_idempotent_commit(store, "never-used", None) is None
    assert proxy.requests - before <= 2  # the record's read, at 30 versions as at 1
    ds = write_dataset(_rows(30, 1), uri, mode="append", storage_options=opts, idempotency_key="k")
    before = proxy.requests
    assert find_idempotent_commit(store, "k", None) == ds.version
    assert proxy.requests - before <= 6  # the record, a listing, the one newer manifest


def test_concurrent_flight_appends_under_faults_lose_and_double_nothing(
    proxy: FaultProxy, moto: str
) -> None:
    """Three clients append through one server whose storage throttles, errs, resets and
    loses answers on about one request in eight; each client's write carries an
    idempotency key and is retried on Unavailable. Every row lands exactly once and every
    version opens in pylance."""
    from quiver.clients import Client

    root = _fresh_root()
    server = _server(root, s3fs_options(proxy.endpoint))
    try:
        Client(server.locations[0]).write("t", _rows(0, 3), mode="create")
        proxy.set_rules(
            Rule("slowdown", probability=0.04),
            Rule("error500", probability=0.03),
            Rule("reset", method="GET", probability=0.03),
            Rule("lost", method="PUT", probability=0.05),
        )
        errors: list[BaseException] = []

        def writer(w: int) -> None:
            client = Client(server.locations[0])
            try:
                for i in range(6):
                    start = 1000 * (w + 1) + 10 * i
                    client.write("t", _rows(start, 10), retries=6)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        proxy.set_rules()
        assert not errors, errors
        assert sum(proxy.injected.values()) > 0
        expected = list(range(3)) + [
            1000 * (w + 1) + 10 * i + j for w in range(3) for i in range(6) for j in range(10)
        ]
        _check_every_version(f"{root}/t.lance", moto, expected)
    finally:
        server.shutdown()


def test_a_doput_repeated_with_its_key_commits_once(tmp_path: Any) -> None:
    """A committing DoPut sent twice with one idempotency key: the second answers the
    first's version and rows with `duplicate`, writes nothing, and the rows are there once;
    a key on a staged put, or an empty one, is refused."""
    from quiver.clients import Client
    from quiver.clients.errors import InvalidArgument

    server = _server(str(tmp_path))
    try:
        client = Client(server.locations[0])
        first = client.write("t", _rows(0, 4), mode="create", idempotency_key="create-1")
        assert first == {"version": 1, "rows": 4}
        assert client.write("t", _rows(0, 4), mode="create", idempotency_key="create-1") == {
            "version": 1,
            "rows": 4,
            "duplicate": True,
        }
        client.write("t", _rows(4, 2), idempotency_key="append-1")
        client.write("t", _rows(6, 1))  # another key: a new version in between
        again = client.write("t", _rows(4, 2), idempotency_key="append-1")
        assert again == {"version": 2, "rows": 2, "duplicate": True}
        ids = sorted(dataset(str(tmp_path / "t.lance")).to_table().column("id").to_pylist())
        assert ids == list(range(7))
        files = sorted(p.name for p in (tmp_path / "t.lance" / "data").iterdir())
        assert len(files) == 3  # the repeated puts wrote nothing
        from quiver.wire.requests import put_command

        with pytest.raises(InvalidArgument, match="committing puts"):
            client._put({**put_command("t"), "commit": False, "idempotency_key": "k"}, _rows(0, 1))
        with pytest.raises(InvalidArgument, match="non-empty"):
            client._put({**put_command("t"), "idempotency_key": ""}, _rows(0, 1))
        with pytest.raises(InvalidArgument, match="'idempotency_key' must be 1 to 256"):
            client.update("t", {"id": "id"}, idempotency_key="k" * 257)
    finally:
        server.shutdown()


def test_a_listing_that_lags_does_not_stop_a_commit(proxy: FaultProxy, moto: str) -> None:
    """Listings through the proxy miss the newest manifest (written by another writer):
    the commit's conditional create finds that version taken, reads it by name, checks
    it and commits after it, keeping both writers' rows."""
    from quiver.format.table.manifest import manifest_name

    uri = _uri("lag")
    direct = s3fs_options(moto)
    write_dataset(_rows(0, 3), uri, storage_options=direct)
    write_dataset(_rows(3, 3), uri, mode="append", storage_options=direct)  # version 2
    hidden = manifest_name(2, v2=True).replace(".", r"\.")
    proxy.set_rules(Rule("stale_list", method="GET", key=hidden))
    ds = write_dataset(
        _rows(6, 3), uri, mode="append", storage_options=s3fs_options(proxy.endpoint)
    )
    assert proxy.injected["stale_list"] >= 1
    assert ds.version == 3
    _check_every_version(uri, moto, list(range(9)))


def test_merges_and_backfills_repeated_with_their_key_commit_once(tmp_path: Any) -> None:
    """A merge DoPut and a backfill DoPut sent twice with their keys: one version each,
    the second answers `duplicate` and changes nothing."""
    from quiver.clients import Client

    server = _server(str(tmp_path))
    try:
        client = Client(server.locations[0])
        client.write("t", pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": [0, 0, 0]}))
        upsert = pa.table({"id": pa.array([2, 4], pa.int64()), "v": [5, 5]})
        first = client.merge("t", upsert, "id", idempotency_key="m-1")
        again = client.merge("t", upsert, "id", idempotency_key="m-1")
        assert again == {"version": first["version"], "rows": 2, "duplicate": True}
        rows = client.read("t", columns=["id", "v", "_rowaddr"]).sort_by("id")
        assert rows.column("v").to_pylist() == [0, 5, 0, 5]
        extra = pa.table({"_rowaddr": rows.column("_rowaddr"), "w": [7, 7, 7, 7]})
        added = client.backfill("t", extra, idempotency_key="b-1")
        assert client.backfill("t", extra, idempotency_key="b-1")["duplicate"] is True
        ds = dataset(str(tmp_path / "t.lance"))
        assert ds.version == added["version"] == first["version"] + 1
        assert ds.to_table().sort_by("id").column("w").to_pylist() == [7, 7, 7, 7]
    finally:
        server.shutdown()


def test_cleanup_removes_key_records_older_than_every_kept_version(tmp_path: Any) -> None:
    """A key's record goes once it is older than every kept version by more than five minutes
    (its retries are long over); a recent one stays; the rows are untouched."""
    import datetime as dt
    import os
    import time

    uri = str(tmp_path / "k.lance")
    write_dataset(_rows(0, 1), uri, idempotency_key="old")
    records = tmp_path / "k.lance" / "_quiver_keys"
    [old] = list(records.iterdir())
    write_dataset(_rows(1, 1), uri, mode="append", idempotency_key="new")
    dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))
    assert len(list(records.iterdir())) == 2  # both as recent as the kept version
    past = time.time() - 3600
    os.utime(old, (past, past))
    dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))
    assert not old.exists() and len(list(records.iterdir())) == 1
    assert sorted(dataset(uri).to_table().column("id").to_pylist()) == [0, 1]


@pytest.mark.parametrize(
    "rules",
    [
        [Rule("slowdown", probability=0.05)],
        [Rule("error500", probability=0.05)],
        [Rule("reset", method="GET", probability=0.05)],
        [Rule("lost", method="PUT", probability=0.1)],
        [Rule("delay", probability=0.03, seconds=0.3)],
        [Rule("stale_list", method="GET", key="_versions/", newest=1, probability=0.3)],
    ],
    ids=["slowdown", "error500", "reset", "lost", "delay", "stale_list"],
)
def test_every_kind_of_commit_under_each_fault(
    proxy: FaultProxy, moto: str, rules: list[Rule], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appends, merges, updates, deletes, compaction, index builds and cleanup (`ROUNDS`
    times each) through one server whose storage injects one kind of fault, with reads
    between them: keyed writes
    retried on Unavailable with their key, the others (which change no row) retried as
    they are. Every change lands exactly once, reads answer the rows the changes made
    (through the index once built; where listings lag, once they catch up), and every
    version opens in pylance."""
    from commit_kinds import KINDS, Model

    from quiver.clients import Client
    from quiver.clients.errors import Unavailable
    from quiver.format.io import retry

    monkeypatch.setattr(retry, "_BACKOFF", 0.01)
    root = _fresh_root()
    server = _server(root, {**s3fs_options(proxy.endpoint), **_ONE_ATTEMPT})
    model = Model(2000)
    try:
        client = Client(server.locations[0])
        client.write("t", model.table(), mode="create")
        proxy.set_rules(*rules)

        def settled(call: Any) -> Any:
            """`call()`, again while the server answers Unavailable (up to 6 times)."""
            for attempt in range(6):
                try:
                    return call()
                except Unavailable:
                    if attempt == 5:
                        raise
            raise AssertionError("unreachable")

        def rows(**options: Any) -> pa.Table:
            return settled(lambda: client.read("t", columns=["id", "v"], **options)).sort_by("id")

        lagging = rules[0].fault == "stale_list"
        sequence = [kind for _ in range(ROUNDS) for kind in KINDS]
        for trial, kind in enumerate(sequence):
            request = KINDS[kind](model, trial)
            settled(lambda: request(client, f"fault-{trial}", 6))  # noqa: B023 - called now
            expected = model.table()
            few = expected.filter(pc.less(expected["id"], 300))
            for _ in range(20 if lagging else 1):  # a lagging listing: an older version
                got, got_few = rows(), rows(filter="id < 300")
                if got.equals(expected) and got_few.equals(few):
                    break
            assert got.equals(expected), f"{kind}: the rows"
            assert got_few.equals(few), f"{kind}: the rows through the filter"
        proxy.set_rules()
        assert sum(proxy.injected.values()) > 0
        _check_every_version(f"{root}/t.lance", moto, sorted(model.rows))
    finally:
        server.shutdown()


def test_unavailable_names_the_dataset_and_no_storage_location(
    proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read whose storage keeps failing answers Unavailable naming the dataset; neither
    the bucket nor the server's root reaches the client, in any form the store's client
    writes them."""
    import pyarrow.flight as fl

    from quiver.clients import Client
    from quiver.clients.errors import Unavailable, from_flight_error
    from quiver.flight_server.sql.messages import pack, sql
    from quiver.format.io import retry

    monkeypatch.setattr(retry, "_BACKOFF", 0.01)
    secret = f"hidden-{uuid.uuid4().hex[:8]}"
    options = {**s3fs_options(proxy.endpoint), **_ONE_ATTEMPT}
    server = _server(f"s3://faults/{secret}", options)
    try:
        client = Client(server.locations[0])
        client.write("t", _rows(0, 10), mode="create", retries=0)
        proxy.set_rules(Rule("error500", method="GET"), Rule("error500", method="HEAD"))
        with pytest.raises(Unavailable) as failed:
            client.read("t")
        message = str(failed.value)
        assert "'t'" in message, message
        assert secret not in message and "faults/" not in message, message
        # a SQL query whose rows' reads fail (planned while the store answered): the same
        proxy.set_rules()
        sql_client = fl.connect(server.locations[0])
        command = pack(sql.CommandStatementQuery(query="SELECT * FROM t"))
        info = sql_client.get_flight_info(fl.FlightDescriptor.for_command(command))
        proxy.set_rules(Rule("error500", method="GET"), Rule("error500", method="HEAD"))
        with pytest.raises(fl.FlightError) as failed_sql:
            sql_client.do_get(info.endpoints[0].ticket).read_all()
        assert from_flight_error(failed_sql.value).code == "unavailable", failed_sql.value
        message = str(failed_sql.value)
        assert "'t'" in message and "SQL" not in message, message
        assert secret not in message and "faults/" not in message, message
    finally:
        proxy.set_rules()
        server.shutdown()


def test_a_spark_job_commit_of_unknown_outcome_keeps_its_files(
    proxy: FaultProxy, moto: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Spark job's commit is written but the server cannot confirm it (its answer lost,
    the store failing after): the client resends it with the job's key, and when the store
    keeps failing the abort Spark calls next removes nothing, since the version may stand.
    Once the store answers, the version is there with its files, and the job's commit sent
    again answers it without committing the rows twice."""
    pytest.importorskip("pyspark")
    from quiver.clients.errors import Unavailable
    from quiver.clients.spark.batch import QuiverWriter
    from quiver.clients.spark.options import Conn
    from quiver.format.io import retry

    monkeypatch.setattr(retry, "_BACKOFF", 0.01)
    options = {**s3fs_options(proxy.endpoint), **_ONE_ATTEMPT}
    root = _fresh_root()
    server = _server(root, options)
    try:
        conn = Conn(uri=server.locations[0], dataset="t")
        with conn.client() as client:
            client.write("t", _rows(0, 10), mode="create")
            target = client.schema("t").serialize().to_pybytes()
        writer = QuiverWriter(conn, overwrite=False, target=target)
        message = writer.write(iter(_rows(10, 10).to_batches()))
        lost = Rule("lost", method="PUT", key=MANIFEST_PUT, times=1)
        proxy.set_rules(lost, Rule("error500", key=r"/_versions/|list-type", after=lost))
        with pytest.raises(Unavailable):
            writer.commit([message])
        assert writer.unsettled
        writer.abort([message])  # Spark's abort after a failed commit: nothing removed
        proxy.set_rules()
        _check_every_version(f"{root}/t.lance", moto, list(range(20)))
        writer.commit([message])  # the job's commit again: the version that landed
        _check_every_version(f"{root}/t.lance", moto, list(range(20)))
        with conn.client() as client:
            assert client.describe("t")["version"] == 2
    finally:
        proxy.set_rules()
        server.shutdown()
