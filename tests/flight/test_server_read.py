"""Reads through a real Flight server: ListFlights, GetFlightInfo, GetSchema, DoGet.

Every table that comes back is compared whole with what `format.dataset` and pylance read
from the same dataset version.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
import time

import flight_helpers
import lance
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_helpers import (
    Served,
    concat,
    start,
    table,
)

from quiver.flight_server.demo import demo_table
from quiver.format.dataset import dataset, write_dataset

served = flight_helpers.served  # fixtures shared by the server test modules
name = flight_helpers.name


def make(served: Served, name: str, n: int = 1000, per_file: int = 250, **kw) -> str:
    uri = served.path(name)
    write_dataset(table(n), uri, mode="create", max_rows_per_file=per_file, **kw)
    return uri


def oracle(uri: str, version: int | str | None = None, **kwargs) -> pa.Table:
    """format's answer, checked against pylance's."""
    ours = dataset(uri, version=version).to_table(**kwargs)
    theirs = lance.dataset(uri, version=version).to_table(**kwargs)
    assert ours.equals(theirs)
    return ours


def test_path_descriptor_reads_latest_whole_table(served: Served, name: str) -> None:
    uri = make(served, name)
    info = served.info(name)
    assert len(info.endpoints) == 4  # one per fragment
    assert info.total_records == 1000
    assert json.loads(info.app_metadata) == {"dataset": name, "version": 1}
    for e in info.endpoints:
        assert [loc.uri.decode() for loc in e.locations] == served.server.locations
        assert e.expiration_time is not None
    assert info.schema.equals(dataset(uri).schema)
    assert served.read_info(info).equals(oracle(uri))


def test_cmd_descriptor_projection_filter_limit_row_id(served: Served, name: str) -> None:
    uri = make(served, name)
    cases = [
        {"columns": ["s", "id"]},
        {"filter": "x > 100 AND s LIKE 's1%'"},
        {"filter": "id IN (3, 500, 999) OR s IS NULL", "columns": ["id"]},
        {"limit": 333},
        {"limit": 0},
        {"filter": "flag", "limit": 7, "columns": ["id", "tags"]},
        {"with_row_id": True, "columns": ["id"]},
        {"columns": []},
    ]
    for case in cases:
        got = served.read({"dataset": name, **case})
        kwargs = dict(case)
        want = oracle(uri, **kwargs)
        assert got.equals(want), case
        info = served.info({"dataset": name, **case})
        expected_total = -1 if "filter" in case else want.num_rows
        assert info.total_records == expected_total, case
        assert served.client.get_schema(
            fl.FlightDescriptor.for_command(json.dumps({"dataset": name, **case}))
        ).schema.equals(want.schema), case


def test_filter_with_limit_is_one_endpoint(served: Served, name: str) -> None:
    uri = make(served, name)
    info = served.info({"dataset": name, "filter": "id % 3 = 0", "limit": 100})
    assert len(info.endpoints) == 1
    assert served.read_info(info).equals(oracle(uri, filter="id % 3 = 0", limit=100))


def test_version_tag_and_as_of(served: Served, name: str) -> None:
    uri = make(served, name)
    before = time.time()
    time.sleep(0.05)
    write_dataset(table(10, start=5000), uri, mode="append")
    served.action("create_tag", {"dataset": name, "tag": "first", "version": 1})
    assert served.read({"dataset": name, "version": 1}).equals(oracle(uri, version=1))
    assert served.read({"dataset": name, "tag": "first"}).equals(oracle(uri, version=1))
    as_of = dt.datetime.fromtimestamp(before, dt.timezone.utc).isoformat()
    assert served.read({"dataset": name, "as_of": as_of}).equals(oracle(uri, version=1))
    assert served.read(name).equals(oracle(uri, version=2))
    assert served.info({"dataset": name, "version": 1}).total_records == 1000


def test_pylance_written_legacy_dataset_with_deletions(served: Served, name: str) -> None:
    uri = served.path(name)
    lance.write_dataset(table(900), uri, max_rows_per_file=300, data_storage_version="legacy")
    lance.dataset(uri).delete("id % 4 = 1 OR id >= 600")  # the third fragment goes
    info = served.info(name)
    assert info.total_records == lance.dataset(uri).count_rows()
    assert len(info.endpoints) == 2
    assert served.read_info(info).equals(lance.dataset(uri).to_table())


def test_row_range_endpoints_split_big_fragments(tmp_path) -> None:
    server, _ = start(tmp_path, max_rows_per_endpoint=300)
    client = fl.connect(server.locations[0])
    try:
        uri = str(tmp_path / "big.lance")
        write_dataset(demo_table(2000), uri, mode="create", max_rows_per_file=1000)
        ds = dataset(uri)
        ds.delete("id % 5 = 0 OR (id >= 300 AND id < 600)")  # a whole range goes
        sv = Served(server, client, tmp_path, None)  # type: ignore[arg-type]
        info = sv.info("big")
        ranges = [json.loads(e.app_metadata) for e in info.endpoints]
        # fragment 0: [0,300) and [600,900), [900,1000); [300,600) is all deleted
        assert [r["row_range"] for r in ranges if r["fragment_id"] == 0] == [
            [0, 300],
            [600, 900],
            [900, 1000],
        ]
        assert sum(r["rows"] for r in ranges) == info.total_records == dataset(uri).count_rows()
        assert sv.read_info(info).equals(oracle(uri))
        for case in (
            {"filter": "price > 40", "columns": ["id", "price", "warehouse"]},
            {"limit": 1234, "with_row_id": True},
            {"columns": ["id"], "limit": 250},
        ):
            got = sv.read({"dataset": "big", **case})
            assert got.equals(oracle(uri, **case)), case
        # a request may cut finer (or coarser) than the server's setting
        for step, pieces in ((100, 17), (5000, 2)):
            info = sv.info({"dataset": "big", "max_rows_per_endpoint": step})
            assert len(info.endpoints) == pieces
            assert sv.read_info(info).equals(oracle(uri))
    finally:
        client.close()
        server.shutdown()


def test_endpoints_stay_on_their_version_while_writers_commit(served: Served, name: str) -> None:
    uri = make(served, name)
    info = served.info({"dataset": name, "columns": ["id", "s"]})
    tickets = [e.ticket for e in info.endpoints]
    first = served.client.do_get(tickets[0]).read_all()
    # a writer appends, deletes and overwrites between the DoGets
    served.put(name, table(50, start=10_000))
    served.action("delete", {"dataset": name, "predicate": "id < 600"})
    rest = [served.client.do_get(t).read_all() for t in tickets[1:]]
    got = concat([first, *rest], info)
    assert got.equals(oracle(uri, version=1, columns=["id", "s"]))
    # a retried DoGet returns the same rows, also after the writes
    for t, part in zip(tickets, [first, *rest], strict=True):
        assert served.client.do_get(t).read_all().equals(part)
    served.put({"dataset": name, "mode": "overwrite"}, table(5))
    assert served.client.do_get(tickets[2]).read_all().equals(rest[1])
    assert served.read(name).equals(oracle(uri))


def test_latest_reads_see_changes_made_outside_the_server(served: Served, name: str) -> None:
    """The server keeps the latest version's handle between reads; a commit by another
    process, or the dataset deleted and written again at the same version number with other
    rows (same manifest size even), is what the very next read sees."""
    uri = make(served, name, n=200, per_file=100)
    assert served.read(name).equals(oracle(uri))
    assert served.read(name).equals(oracle(uri))  # the kept handle
    lance.write_dataset(table(30, start=5_000), uri, mode="append")
    assert served.read(name).equals(oracle(uri))
    assert served.read(name).num_rows == 230
    for start_id in (70_000, 90_000):  # the same shape each time: only the values differ
        shutil.rmtree(uri)
        write_dataset(table(200, start=start_id), uri, mode="create", max_rows_per_file=100)
        got = served.read(name)
        assert got.equals(oracle(uri)), start_id
        assert got["id"][0].as_py() == start_id
    info = served.info(name)
    assert json.loads(info.app_metadata)["version"] == 1
    shutil.rmtree(uri)
    with pytest.raises(fl.FlightError) as e:
        served.info(name)
    assert flight_helpers.error_info(e.value)["code"] == "not_found"


def test_tickets_work_on_a_replica_with_the_same_key(served: Served, name: str) -> None:
    make(served, name)
    info = served.info(name)
    replica, _ = start(served.root)
    try:
        with fl.connect(replica.locations[0]) as other:
            got = concat([other.do_get(e.ticket).read_all() for e in info.endpoints], info)
        assert got.equals(served.read_info(info))
    finally:
        replica.shutdown()


def test_do_get_streams_in_batches_and_client_can_stop(served: Served, name: str) -> None:
    uri = served.path(name)
    write_dataset(table(100_000), uri, mode="create")
    # batches are sized by bytes (8 MiB) unless --batch-size asks for fewer rows: these
    # 100 k rows (3 MB) would be one batch by default
    server, log = start(served.root, batch_size=10_000)
    try:
        with fl.connect(server.locations[0]) as client:
            info = client.get_flight_info(fl.FlightDescriptor.for_path(name))
            reader = client.do_get(info.endpoints[0].ticket)
            first = reader.read_chunk().data
            assert first.num_rows == 10_000  # streamed, not one giant batch
            reader.cancel()
            deadline = time.time() + 5
            while time.time() < deadline:
                logs = log.find("DoGet", name)
                if logs:
                    break
                time.sleep(0.02)
            assert logs and logs[-1]["status"] in ("cancelled", "ok")
    finally:
        server.shutdown()
        logging.getLogger("quiver.access").removeHandler(log)


def test_list_flights_lists_every_dataset(served: Served, name: str) -> None:
    make(served, f"ns/{name}", n=100, per_file=100)
    make(served, name, n=10)
    infos = {tuple(p.decode() for p in i.descriptor.path): i for i in served.client.list_flights()}
    assert (f"ns/{name}",) in infos and (name,) in infos
    nested = infos[(f"ns/{name}",)]
    assert nested.total_records == 100
    assert json.loads(nested.app_metadata)["version"] == 1
    assert nested.schema.equals(dataset(served.path(f"ns/{name}")).schema)
    only = [i.descriptor.path for i in served.client.list_flights(b"ns/")]
    assert only == [[f"ns/{name}".encode()]]
    # the PATH of a listed dataset reads it, also as separate path elements
    assert (
        served.client.get_flight_info(fl.FlightDescriptor.for_path("ns", name)).total_records == 100
    )


def test_access_log_line_per_call(served: Served, name: str) -> None:
    make(served, name, n=10, per_file=10)
    served.read(name)
    line = served.log.find("DoGet", name)[-1]
    assert line["status"] == "ok" and line["rows"] == 10 and line["version"] == 1
    assert line["bytes"] > 0 and line["duration_ms"] >= 0
    assert served.log.find("GetFlightInfo", name)[-1]["rows"] == 10


@pytest.mark.parametrize("storage_version", ["2.0", "2.2"])
def test_dictionary_columns_stream(served: Served, name: str, storage_version: str) -> None:
    # dictionary batches must precede the record batches that use them
    cat = pa.array(["a", "b", None, "a", "é", "b"] * 50).dictionary_encode()
    data = pa.table({"id": pa.array(range(300)), "cat": cat})
    uri = served.path(name)
    lance.write_dataset(data, uri, max_rows_per_file=100, data_storage_version=storage_version)
    got = served.read(name)
    assert got.equals(lance.dataset(uri).to_table())
    assert got.column("cat").to_pylist() == cat.to_pylist()
