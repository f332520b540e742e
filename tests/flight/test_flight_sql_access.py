"""Flight SQL under Quiver's rules: Basic → Bearer auth and per-dataset rights on every table a
statement touches, TLS, cancellation, and hostile protocol messages (each a one-line error
with its gRPC status, nothing committed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_manager
import lance
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_helpers import assert_clean_error, error_code
from server_process import quiver_serve
from sql_helpers import connect, facts_table, fetch
from tls_certs import make_tls_material

from quiver.flight_server.auth import hash_password
from quiver.flight_server.sql.messages import pack, session, sql
from quiver.format.dataset import dataset, write_dataset

PASSWORDS = {
    "reader": "reader-Pa55word!",
    "salesonly": "sales-Pa55word!",
    "teamwriter": "t-Pa55word!",
}
RIGHTS = {
    "reader": {"read": ["*"]},
    "salesonly": {"read": ["sales"]},
    "teamwriter": {"read": ["team/*", "sales"], "write": ["team/*"]},
}


def _datasets(root: Path) -> None:
    for name in ("sales", "secret", "team/a"):
        lance.write_dataset(facts_table(200, seed=len(name)), str(root / f"{name}.lance"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("sqlauth")
    _datasets(root)
    users = {u: {"password": hash_password(p), **RIGHTS[u]} for u, p in PASSWORDS.items()}
    auth = root.parent / f"{root.name}-auth.json"
    auth.write_text(json.dumps({"users": users}))
    with quiver_serve(root, "--auth-file", str(auth)) as (uri, _pid):
        yield uri, root


def login(uri: str, user: str):  # noqa: ANN201 - an ADBC connection
    return connect(uri, db_kwargs={"username": user, "password": PASSWORDS[user]})


def test_rights_apply_to_every_table_a_query_reads(secured) -> None:
    uri, _ = secured
    with login(uri, "salesonly") as conn:
        assert fetch(conn, "SELECT count(*) AS n FROM sales").to_pylist() == [{"n": 200}]
        for query in (
            "SELECT * FROM secret",
            "SELECT s.id FROM sales s JOIN secret x ON s.id = x.id",
            "SELECT id FROM sales WHERE id IN (SELECT id FROM team.a)",
            'SELECT * FROM "secret@v1"',
        ):
            with pytest.raises(adbc_driver_manager.ProgrammingError, match="UNAUTHORIZED|denied"):
                fetch(conn, query)
        objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
        tables = [
            (s["db_schema_name"], t["table_name"])
            for s in objects[0]["catalog_db_schemas"]
            for t in s["db_schema_tables"] or []
        ]
        assert tables == [("public", "sales")]
    with login(uri, "reader") as conn:
        got = fetch(conn, "SELECT count(*) AS n FROM sales s JOIN secret x ON s.id = x.id")
        assert got.to_pylist() == [{"n": 200}]


def test_writes_need_the_write_right_and_commit_nothing_without_it(secured) -> None:
    uri, root = secured
    version = lance.dataset(str(root / "sales.lance")).version
    with login(uri, "teamwriter") as conn, conn.cursor() as cur:
        assert cur.adbc_ingest("b", facts_table(10), mode="create", db_schema_name="team") == 10
        cur.execute("DELETE FROM team.a WHERE id < 10")
        assert cur.rowcount == 10
        # reading sales to write team/a is allowed; writing sales is not
        cur.execute("INSERT INTO team.a SELECT * FROM sales WHERE id < 5")
        assert cur.rowcount == 5
        for statement in ("DELETE FROM sales", "UPDATE sales SET qty = 0"):
            with pytest.raises(adbc_driver_manager.ProgrammingError, match="UNAUTHORIZED|denied"):
                cur.execute(statement)
        with conn.cursor() as fresh:  # (a cursor keeps the schema of its last ingest)
            with pytest.raises(adbc_driver_manager.ProgrammingError, match="UNAUTHORIZED|denied"):
                fresh.adbc_ingest("sales", facts_table(3), mode="append")
        with pytest.raises(adbc_driver_manager.ProgrammingError, match="UNAUTHORIZED|denied"):
            cur.execute("INSERT INTO team.a SELECT * FROM secret")
    assert lance.dataset(str(root / "sales.lance")).version == version
    assert lance.dataset(str(root / "team" / "a.lance")).count_rows() == 195


def test_bad_credentials_are_refused(secured) -> None:
    uri, _ = secured
    with pytest.raises(adbc_driver_manager.Error, match="UNAUTHENTICATED|nauthenticated"):
        with connect(uri, db_kwargs={"username": "reader", "password": "wrong"}) as conn:
            fetch(conn, "SELECT 1")
    with pytest.raises(adbc_driver_manager.Error, match="UNAUTHENTICATED|nauthenticated"):
        with connect(uri) as conn:
            fetch(conn, "SELECT count(*) FROM sales")


def test_tls(tmp_path: Path) -> None:
    certs = make_tls_material(tmp_path / "tls")
    root = tmp_path / "root"
    _datasets(root)
    args = ("--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key))
    with quiver_serve(root, *args) as (uri, _pid):
        tls_uri = uri.replace("grpc://", "grpc+tls://")
        options = {"adbc.flight.sql.client_option.tls_root_certs": certs.ca_cert.read_text()}
        with connect(tls_uri, db_kwargs=options) as conn:
            assert fetch(conn, "SELECT count(*) AS n FROM sales").to_pylist() == [{"n": 200}]


# -- the protocol without ADBC: cancellation and hostile messages ---------------------------
@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[fl.FlightClient]:
    root = tmp_path_factory.mktemp("sqlraw")
    _datasets(root)
    with quiver_serve(root) as (uri, _pid):
        yield fl.connect(uri)


def query_descriptor(query: str) -> fl.FlightDescriptor:
    return fl.FlightDescriptor.for_command(pack(sql.CommandStatementQuery(query=query)))


def test_cancel_flight_info_stops_its_query(open_server) -> None:
    client = open_server
    info = client.get_flight_info(query_descriptor("SELECT * FROM sales"))
    body = session.CancelFlightInfoRequest(info=info.serialize()).SerializeToString()
    [result] = client.do_action(fl.Action("CancelFlightInfo", body))
    status = session.CancelFlightInfoResult.FromString(result.body.to_pybytes()).status
    assert status == session.CANCEL_STATUS_CANCELLED
    with pytest.raises(fl.FlightCancelledError, match="cancelled"):
        client.do_get(info.endpoints[0].ticket).read_all()
    # another plan of the same query is not affected
    again = client.get_flight_info(query_descriptor("SELECT * FROM sales"))
    assert client.do_get(again.endpoints[0].ticket).read_all().num_rows == 200


def test_metadata_and_statement_tickets_over_plain_flight(open_server) -> None:
    client = open_server
    info = client.get_flight_info(query_descriptor("SELECT id FROM sales ORDER BY id LIMIT 3"))
    assert info.schema == pa.schema([pa.field("id", pa.int64())])
    assert list(info.endpoints[0].locations) == []
    assert client.do_get(info.endpoints[0].ticket).read_all().column("id").to_pylist() == [0, 1, 2]
    tables = fl.FlightDescriptor.for_command(pack(sql.CommandGetTables(include_schema=True)))
    got = client.do_get(client.get_flight_info(tables).endpoints[0].ticket).read_all()
    assert got.column("table_name").to_pylist() == ["sales", "secret", "a"]
    schema = pa.ipc.read_schema(pa.py_buffer(got.column("table_schema")[0].as_py()))
    assert schema.names == facts_table(1).schema.names
    assert client.get_schema(tables).schema == got.schema
    keys = fl.FlightDescriptor.for_command(pack(sql.CommandGetPrimaryKeys(table="sales")))
    assert client.do_get(client.get_flight_info(keys).endpoints[0].ticket).read_all().num_rows == 0
    [closed] = client.do_action(fl.Action("CloseSession", b""))
    status = session.CloseSessionResult.FromString(closed.body.to_pybytes()).status
    assert status == session.CloseSessionResult.Status.CLOSED


def _any(type_name: str, value: bytes) -> bytes:
    from google.protobuf import any_pb2

    return any_pb2.Any(
        type_url=f"type.googleapis.com/arrow.flight.protocol.sql.{type_name}", value=value
    ).SerializeToString()


def _put(client: fl.FlightClient, command: bytes) -> None:
    """A DoPut of `command` with no rows (as a statement update is sent)."""
    writer, reader = client.do_put(fl.FlightDescriptor.for_command(command), pa.schema([]))
    writer.done_writing()
    reader.read()
    writer.close()


HOSTILE = {
    "undecodable command": (
        lambda c: c.get_flight_info(
            fl.FlightDescriptor.for_command(_any("CommandGetTables", b"\xff\xff"))
        ),
        "invalid_argument",
    ),
    "unknown message": (
        lambda c: c.get_flight_info(
            fl.FlightDescriptor.for_command(_any("CommandGetSomething", b""))
        ),
        "unimplemented",
    ),
    "forged statement handle": (
        lambda c: c.do_get(
            fl.Ticket(pack(sql.TicketStatementQuery(statement_handle=b"x")))
        ).read_all(),
        "invalid_argument",
    ),
    "update sent to GetFlightInfo": (
        lambda c: c.get_flight_info(
            fl.FlightDescriptor.for_command(
                pack(sql.CommandStatementUpdate(query="DELETE FROM sales"))
            )
        ),
        "invalid_argument",
    ),
    "transactions": (
        lambda c: list(c.do_action(fl.Action("BeginTransaction", b""))),
        "unimplemented",
    ),
    "substrait bytes that are no plan": (
        lambda c: c.get_flight_info(
            fl.FlightDescriptor.for_command(
                pack(sql.CommandStatementSubstraitPlan(plan=sql.SubstraitPlan(plan=b"p")))
            )
        ),
        "invalid_argument",
    ),
    "substrait plan sent as an update": (
        lambda c: _put(c, pack(sql.CommandStatementSubstraitPlan(plan=sql.SubstraitPlan()))),
        "unimplemented",
    ),
    "empty substrait plan": (
        lambda c: c.get_flight_info(
            fl.FlightDescriptor.for_command(pack(sql.CommandStatementSubstraitPlan()))
        ),
        "invalid_argument",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_messages_get_one_line_errors(open_server, case: str) -> None:
    call, code = HOSTILE[case]
    with pytest.raises((fl.FlightError, pa.ArrowException)) as info:
        call(open_server)
    assert error_code(info.value) == code
    message = str(info.value)
    assert "Traceback" not in message and ".py" not in message


def test_sorts_and_aggregations_bigger_than_sql_memory_spill(tmp_path: Path) -> None:
    import numpy as np

    root = tmp_path / "root"
    rng = np.random.default_rng(4)
    rows = 800_000
    words = pa.array([f"{v:012d}" * 8 for v in rng.integers(0, 10**12, rows)])  # 96-byte keys
    big = pa.table({"id": pa.array(np.arange(rows)), "key": words})
    lance.write_dataset(big, str(root / "big.lance"), max_rows_per_file=200_000)
    spill = tmp_path / "spill"
    spill.mkdir()
    args = ("--sql-memory", "64MiB", "--spill-dir", str(spill))
    with quiver_serve(root, *args) as (uri, _pid), connect(uri) as conn:
        got = fetch(conn, "SELECT id, key FROM big ORDER BY key, id")  # ~90 MB to sort
        want = big.sort_by([("key", "ascending"), ("id", "ascending")])
        assert got.equals(want)
        groups = fetch(conn, "SELECT key, count(*) AS n FROM big GROUP BY key ORDER BY n DESC, key")
        assert groups.num_rows == len(set(words.to_pylist()))


def _type_info(client: fl.FlightClient, **kwargs: int) -> pa.Table:
    descriptor = fl.FlightDescriptor.for_command(pack(sql.CommandGetXdbcTypeInfo(**kwargs)))
    info = client.get_flight_info(descriptor)
    got = client.do_get(info.endpoints[0].ticket).read_all()
    assert client.get_schema(descriptor).schema == info.schema == got.schema
    return got


def test_type_info_lists_the_types_sql_can_name(open_server) -> None:
    """GetXdbcTypeInfo (JDBC's getTypeInfo): each type once, in the specification's order,
    every name usable in a CAST, and every scalar column's TYPE_NAME among them."""
    client = open_server
    types = _type_info(client)
    rows = types.to_pylist()
    assert [(r["data_type"], r["type_name"]) for r in rows] == sorted(
        (r["data_type"], r["type_name"]) for r in rows
    )
    names = [r["type_name"] for r in rows]
    assert {"BOOLEAN", "BIGINT", "DOUBLE", "VARCHAR", "DECIMAL", "TIMESTAMP"} <= set(names)
    for r in rows:
        target = f"{r['type_name']}(10, 2)" if r["type_name"] == "DECIMAL" else r["type_name"]
        query = f"SELECT CAST(NULL AS {target}) AS v"
        info = client.get_flight_info(query_descriptor(query))
        assert client.do_get(info.endpoints[0].ticket).read_all().num_rows == 1, query
        if r["datetime_subcode"] is not None:
            assert r["sql_data_type"] == 9  # XDBC_DATETIME
    assert [r["type_name"] for r in _type_info(client, data_type=12).to_pylist()] == ["VARCHAR"]
    assert _type_info(client, data_type=1234).num_rows == 0
    tables = fl.FlightDescriptor.for_command(pack(sql.CommandGetTables(include_schema=True)))
    got = client.do_get(client.get_flight_info(tables).endpoints[0].ticket).read_all()
    for blob in got.column("table_schema").to_pylist():
        for field in pa.ipc.read_schema(pa.py_buffer(blob)):
            if pa.types.is_nested(field.type):
                continue  # lists and structs: no XDBC type
            assert field.metadata[b"ARROW:FLIGHT:SQL:TYPE_NAME"].decode() in names, field


def test_a_damaged_file_fails_a_query_as_a_plain_read_fails(tmp_path: Path) -> None:
    """A query over a damaged data file answers what a plain read of it answers: the code
    `data_corrupt`, naming the dataset, version, fragment and file (not the engine's
    wrapped text as a bad argument), whichever part, join or aggregate met it, and so do
    UPDATE and DELETE; nothing is committed, and the server then answers other queries."""
    ids = pa.array(range(40_000), pa.int64())
    data = pa.table(
        {
            "id": ids,
            "s": pa.compute.binary_join_element_wise("row ", pa.compute.cast(ids, pa.string()), ""),
        }
    )
    write_dataset(data, str(tmp_path / "t.lance"), max_rows_per_file=10_000)
    write_dataset(pa.table({"k": [1, 2]}), str(tmp_path / "d.lance"))
    frag = dataset(str(tmp_path / "t.lance")).get_fragments()[3]
    file = f"data/{frag.data_files()[0].path}"
    path = tmp_path / "t.lance" / file
    size = path.stat().st_size
    with open(path, "r+b") as f:  # the middle third of the fragment's pages overwritten
        f.seek(size // 4)
        f.write(bytes(range(256)) * (size // 3 // 256))
    with quiver_serve(tmp_path) as (uri, _pid):
        client = fl.connect(uri)
        for query in (
            "SELECT * FROM t",
            "SELECT count(*) FROM t WHERE s LIKE 'row 1%'",
            "SELECT * FROM t JOIN d ON t.id = d.k",
        ):
            info = client.get_flight_info(query_descriptor(query))
            with pytest.raises((fl.FlightError, pa.ArrowException)) as err:
                for endpoint in info.endpoints:
                    client.do_get(endpoint.ticket).read_all()
            message = assert_clean_error(err.value, "data_corrupt", tmp_path)
            assert f"dataset 't' version 1 fragment {frag.fragment_id}" in message, message
            assert file in message and "SQL" not in message, message
        with connect(uri) as conn:
            for change in (
                "UPDATE t SET s = 'x' WHERE s = '35000'",
                "DELETE FROM t WHERE s = '35001'",
            ):
                with pytest.raises(adbc_driver_manager.Error) as failed:
                    with conn.cursor() as cur:
                        cur.execute(change)
                message = str(failed.value)
                assert f"dataset 't' version 1 fragment {frag.fragment_id}" in message, message
                assert file in message and str(tmp_path) not in message, message
            assert fetch(conn, "SELECT count(*) AS n FROM d").to_pylist() == [{"n": 2}]
        assert dataset(str(tmp_path / "t.lance")).version == 1  # nothing committed
