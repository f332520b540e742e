"""Flight SQL's parts on their own: statement handles, LIKE patterns, SqlInfo values, batch
splitting, the statements that change datasets, catalog names."""

from __future__ import annotations

import pyarrow as pa
import pytest

from quiver.flight_server.errors import InvalidArgument
from quiver.flight_server.sql import dml
from quiver.flight_server.sql.catalog import dataset_names, split_name
from quiver.flight_server.sql.engine import split_batch
from quiver.flight_server.sql.messages import is_flight_sql, pack, sql, unpack
from quiver.flight_server.sql.metadata import SQL_INFO_SCHEMA, like, sql_info_table
from quiver.flight_server.sql.statements import MAX_HANDLE_BYTES, Statement


def test_statement_handles_round_trip_and_refuse_foreign_bytes() -> None:
    params = pa.table({"0": [3], "1": ["x"]})
    statement = Statement("SELECT $1, $2").with_parameters(params).planned({"t": 4})
    back = Statement.decode(statement.encode())
    assert back == statement
    assert back.single_parameters() == [pa.scalar(3), pa.scalar("x")]
    assert back.query_id and back.versions == {"t": 4}
    # a Substrait plan's bytes travel as they are
    plan = Statement(bytes(range(256))).planned({"t": 2})
    assert Statement.decode(plan.encode()) == plan
    for bad in (
        b"",
        b"SELECT 1",
        b"quiver-sql/1:{",
        b'quiver-sql/1:{"q": 1}',
        b"quiver-sql/1:[]",
        b'quiver-sql/1:{"s": "not base64!"}',
        b'quiver-sql/1:{"s": 5}',
    ):
        with pytest.raises(InvalidArgument, match="not a prepared statement handle"):
            Statement.decode(bad)
    with pytest.raises(InvalidArgument, match="at most"):
        Statement("x" * (MAX_HANDLE_BYTES + 1)).encode()
    two_rows = Statement("q").with_parameters(pa.table({"a": [1, 2]}))
    with pytest.raises(InvalidArgument, match="one row of parameters"):
        two_rows.single_parameters()


def test_like_patterns() -> None:
    assert like(None)("anything")
    assert like("sa%")("sales") and not like("sa%")("team")
    assert like("s_les")("sales") and not like("s_les")("sles")
    assert like("a\\_b")("a_b") and not like("a\\_b")("axb")
    assert like("%.*%")("x.*y") and not like("%.*%")("xy")


def test_sql_info_types_follow_the_union_members() -> None:
    table = sql_info_table([0, 8, 4, 504, 999], "1.2.3")
    assert table.schema == SQL_INFO_SCHEMA
    assert table.column("info_name").to_pylist() == [0, 8, 4, 504]  # 999 is unknown: left out
    union = table.column("value").chunk(0)
    assert union.type_codes.to_pylist() == [0, 3, 1, 0]  # string, int32 bitmask, bool, string
    assert union.to_pylist() == ["quiver", 0, True, '"']
    assert sql_info_table([], "1").num_rows > 20  # none asked: all


def test_split_batch_keeps_every_row_in_order() -> None:
    batch = pa.record_batch({"a": pa.array(range(100_000)), "s": pa.array(["x" * 100] * 100_000)})
    pieces = list(split_batch(batch, 1 << 20))
    assert len(pieces) > 5 and all(p.nbytes <= (1 << 20) * 1.1 for p in pieces)
    assert pa.Table.from_batches(pieces).equals(pa.Table.from_batches([batch]))


def test_messages_are_recognised_only_when_packed() -> None:
    data = pack(sql.CommandStatementQuery(query="SELECT 1"))
    assert is_flight_sql(data) and unpack(data).query == "SELECT 1"
    assert not is_flight_sql(b'{"dataset": "x"}') and unpack(b'{"dataset": "x"}') is None


def test_changing_statements_are_told_apart_by_their_first_keyword() -> None:
    for query in (
        "INSERT INTO t VALUES (1)",
        " delete from t",
        "UPDATE t SET a = 1",
        "MERGE INTO t",
    ):
        assert dml.is_change(query)
    for query in ("SELECT 1", "WITH x AS (SELECT 1) SELECT * FROM x", "EXPLAIN DELETE FROM t", ""):
        assert not dml.is_change(query)
    assert dml._insert_source('INSERT INTO a."b" (x, y) SELECT 1, 2') == "SELECT 1, 2"
    assert dml._insert_source("INSERT INTO t VALUES (1)") == "VALUES (1)"
    assert dml._insert_source("INSERT INTO t (SELECT 1)") == "(SELECT 1)"


def test_names_map_between_datasets_and_tables() -> None:
    assert split_name("sales") == ("public", "sales")
    assert split_name("team/sales") == ("team", "sales")
    assert split_name("a/b/c") == ("a/b", "c")
    assert dataset_names("public", "sales") == ["sales", "public/sales"]
    assert dataset_names("team", "sales") == ["team/sales"]


def test_recent_plans_are_reused_only_while_their_tables_are_unchanged(tmp_path) -> None:
    from quiver.flight_server.service import DatasetService
    from quiver.flight_server.sql.engine import SqlEngine
    from quiver.format.dataset import write_dataset

    write_dataset(pa.table({"a": [1, 2, 3]}), str(tmp_path / "t.lance"))
    engine = SqlEngine(DatasetService(str(tmp_path)))
    query = "SELECT sum(a) AS s FROM t"
    first = engine.plan(query, None)
    assert engine.plan(query, None) is first  # nothing changed: the same plan
    pinned = engine.plan(query, None, pins=first.versions)
    assert pinned is first  # the ticket's versions are the plan's
    write_dataset(pa.table({"a": [10]}), str(tmp_path / "t.lance"), mode="append")
    fresh = engine.plan(query, None)
    assert fresh is not first and fresh.versions == {"t": first.versions["t"] + 1}
    rows = [b.to_pylist() for b in engine.stream(fresh)]
    assert rows == [[{"s": 16}]]
    assert [
        b.to_pylist() for b in engine.stream(engine.plan(query, None, pins=first.versions))
    ] == [[{"s": 6}]]


def test_primary_keys_answer_the_dataset_a_query_would_read(tmp_path) -> None:
    from quiver.flight_server.service import DatasetService
    from quiver.flight_server.sql.metadata import PRIMARY_KEYS_SCHEMA, Metadata
    from quiver.format.dataset import write_dataset

    key = pa.field(
        "k", pa.int64(), nullable=False, metadata={"lance-schema:unenforced-primary-key": "true"}
    )
    write_dataset(
        pa.table({"k": [1], "v": [2]}, schema=pa.schema([key, ("v", pa.int64())])),
        str(tmp_path / "t.lance"),
    )
    write_dataset(pa.table({"k": [1]}), str(tmp_path / "public" / "t.lance"))  # shadowed by t
    meta = Metadata(DatasetService(str(tmp_path)), None, "1")
    got = meta.answer(sql.CommandGetPrimaryKeys(table="t"))
    assert got.schema == PRIMARY_KEYS_SCHEMA
    assert got.to_pylist() == [
        {"catalog_name": "quiver", "db_schema_name": "public", "table_name": "t",
         "column_name": "k", "key_sequence": 1, "key_name": None}
    ]  # fmt: skip
    for table in ("nothere", "../t", ""):
        assert meta.answer(sql.CommandGetPrimaryKeys(table=table)).num_rows == 0


def test_a_plain_scan_is_one_stream_of_the_whole_table_that_stops_when_closed(tmp_path) -> None:
    """A plain scan of a table of two fragments: one endpoint, whose stream holds every row
    (both fragment groups decoded into it); a stream closed after its first batch yields no
    more, and the next read of the ticket streams the table again."""
    import pyarrow.compute as pc
    import pyarrow.flight as flight

    from quiver.flight_server.service import DatasetService
    from quiver.flight_server.sql.front import FlightSql
    from quiver.format.dataset import write_dataset

    ids = pa.array(range(600_000), pa.int64())
    text = pc.binary_repeat(pc.cast(pc.divide(ids, 7), pa.string()), 12)
    write_dataset(
        pa.table({"id": ids, "s": text}), str(tmp_path / "t.lance"), max_rows_per_file=300_000
    )
    front = FlightSql(DatasetService(str(tmp_path)))
    command = pack(sql.CommandStatementQuery(query="SELECT * FROM t"))
    info = front.flight_info(command, flight.FlightDescriptor.for_command(command), None)
    assert len(info.endpoints) == 1
    ticket = info.endpoints[0].ticket.ticket
    got = pa.Table.from_batches(front.read(ticket, None).batches).sort_by("id")
    assert got.column("id").equals(pa.chunked_array([ids])) and got.column("s").equals(
        pa.chunked_array([text])
    )
    stream = front.read(ticket, None)
    assert next(stream.batches).num_rows > 0
    stream.close()
    assert next(stream.batches, None) is None
    again = pa.Table.from_batches(front.read(ticket, None).batches)
    assert again.num_rows == len(ids)
