"""Flight SQL through ADBC's Flight SQL driver against a real `quiver serve`: queries
(compared with DataFusion over the same datasets read by pylance), parameters, metadata,
time travel, pushdown into Quiver's scans and the errors of bad SQL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_manager
import pyarrow as pa
import pytest
from server_process import quiver_serve
from sql_helpers import (
    FACT_ROWS,
    connect,
    dims_table,
    facts_table,
    fetch,
    oracle,
    same_rows,
    write_datasets,
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("sql")
    write_datasets(root)
    with quiver_serve(root) as (uri, _pid):
        yield uri, root


@pytest.fixture(scope="module")
def conn(served: tuple[str, Path]) -> Iterator[object]:
    with connect(served[0]) as c:
        yield c


QUERIES = {
    "count with a filter": "SELECT count(*) AS n FROM facts WHERE value > 60 AND grp <> 'g2'",
    "group-by": (
        "SELECT grp, count(*) AS n, count(value) AS nv, sum(qty) AS q, round(avg(value), 6) AS a "
        "FROM facts GROUP BY grp ORDER BY grp"
    ),
    "top-k": "SELECT id, value FROM facts WHERE value IS NOT NULL ORDER BY value DESC, id LIMIT 7",
    "top-k of whole rows, nulls first": (
        "SELECT * FROM facts ORDER BY value DESC NULLS FIRST, id LIMIT 400"
    ),
    "top-k through aliases, with an offset": (
        "SELECT f.id AS i, f.qty AS q FROM facts f WHERE grp = 'g1' ORDER BY q, i LIMIT 9 OFFSET 3"
    ),
    "top-k by time, legacy storage": "SELECT id, ts FROM legacy ORDER BY ts DESC LIMIT 5",
    "join with a dimension": (
        "SELECT d.label, count(*) AS n, sum(f.qty * d.weight) AS w FROM facts f "
        "JOIN team.dims d ON f.grp = d.grp WHERE f.flag GROUP BY d.label ORDER BY d.label"
    ),
    "full projection": "SELECT * FROM facts ORDER BY id",
    "left join keeps unmatched": (
        "SELECT d.grp, count(f.id) AS n FROM team.dims d LEFT JOIN facts f ON f.grp = d.grp "
        "GROUP BY d.grp ORDER BY d.grp"
    ),
    "window": (
        "SELECT id, grp, rank() OVER (PARTITION BY grp ORDER BY qty DESC, id) AS r FROM facts "
        "WHERE id < 300 ORDER BY id"
    ),
    "common table expression and IN": (
        "WITH big AS (SELECT grp FROM team.dims WHERE weight >= 2) SELECT count(*) AS n FROM "
        "facts WHERE grp IN (SELECT grp FROM big) AND ts >= TIMESTAMP '2023-11-14 22:20:00'"
    ),
    "null handling": (
        "SELECT count(*) AS n, count(value) AS nv FROM facts WHERE value IS NULL OR qty BETWEEN 10 "
        "AND 12"
    ),
    "list column": "SELECT id, tags, array_length(tags, 1) AS k FROM facts WHERE id < 5 ORDER BY 1",
    "LIKE, not pushed": "SELECT count(*) AS n FROM facts WHERE grp LIKE 'g1%' AND qty > 50",
    "legacy storage": "SELECT grp, sum(qty) AS q FROM legacy WHERE id % 3 = 0 GROUP BY 1 ORDER BY 1"
    "",
}


@pytest.mark.parametrize("name", list(QUERIES))
def test_queries_equal_datafusion_over_pylance(served, conn, name: str) -> None:
    query = QUERIES[name]
    same_rows(fetch(conn, query), oracle(served[1], query))


def test_connect_reports_server_info_and_no_transactions(served) -> None:
    with pytest.warns(Warning, match="Cannot disable autocommit"):
        import adbc_driver_flightsql.dbapi as flight_sql

        conn = flight_sql.connect(served[0])  # asks for transactions, which Quiver has not
    try:
        info = conn.adbc_get_info()
        assert info["vendor_name"] == "quiver"
        assert info["vendor_arrow_version"] == pa.__version__
        assert re.fullmatch(r"\d+\.\d+\.\d+.*", info["vendor_version"])
        assert fetch(conn, "SELECT 1 AS one").to_pylist() == [{"one": 1}]
    finally:
        conn.close()


def test_parameters_bind_by_position(served, conn) -> None:
    query = "SELECT id, grp, qty FROM facts WHERE grp = $1 AND qty > $2 ORDER BY id"
    got = fetch(conn, query, ("g3", 90))
    want = oracle(served[1], query.replace("$1", "'g3'").replace("$2", "90"))
    same_rows(got, want)
    assert got.num_rows > 0
    # the same prepared statement again with other values
    with conn.cursor() as cur:
        cur.execute(query, ("g1", 98))
        again = cur.fetch_arrow_table()
    assert set(again.column("grp").to_pylist()) == {"g1"}
    assert min(again.column("qty").to_pylist()) > 98


def test_description_and_schema_without_running(served, conn) -> None:
    with conn.cursor() as cur:
        schema = cur.adbc_execute_schema("SELECT id, grp, value * 2 AS v2 FROM facts")
        assert schema.names == ["id", "grp", "v2"]
        assert [f.type for f in schema] == [pa.int64(), pa.string(), pa.float64()]
        cur.execute("SELECT id, grp FROM facts WHERE id < 3 ORDER BY id")
        assert [d[0] for d in cur.description] == ["id", "grp"]
        want = facts_table().slice(0, 3).select(["id", "grp"]).to_pylist()
        assert cur.fetchall() == [(r["id"], r["grp"]) for r in want]


def test_objects_list_every_dataset_with_columns(conn) -> None:
    objects = conn.adbc_get_objects(depth="all").read_all().to_pylist()
    assert [c["catalog_name"] for c in objects] == ["quiver"]
    schemas = {s["db_schema_name"]: s for s in objects[0]["catalog_db_schemas"]}
    assert set(schemas) == {"public", "team"}
    public = {t["table_name"]: t for t in schemas["public"]["db_schema_tables"]}
    assert set(public) == {"facts", "history", "legacy"}
    columns = [c["column_name"] for c in public["facts"]["table_columns"]]
    assert columns == facts_table().schema.names
    types = {c["column_name"]: c["xdbc_type_name"] for c in public["facts"]["table_columns"]}
    assert types["id"] == "BIGINT" and types["grp"] == "VARCHAR" and types["ts"] == "TIMESTAMP"
    team = schemas["team"]["db_schema_tables"]
    assert [t["table_name"] for t in team] == ["dims"]
    # patterns narrow the listing
    only = conn.adbc_get_objects(depth="tables", table_name_filter="le%").read_all().to_pylist()
    tables = [
        t["table_name"] for s in only[0]["catalog_db_schemas"] for t in s["db_schema_tables"] or []
    ]
    assert tables == ["legacy"]
    schemas_only = conn.adbc_get_objects(depth="db_schemas", db_schema_filter="t_a%")
    names = [
        s["db_schema_name"] for s in schemas_only.read_all().to_pylist()[0]["catalog_db_schemas"]
    ]
    assert names == ["team"]


def test_table_schema_and_types(conn) -> None:
    got = conn.adbc_get_table_schema("dims", db_schema_filter="team")
    assert got.remove_metadata().names == dims_table().schema.names
    assert [f.type for f in got] == [f.type for f in dims_table().schema]
    facts = conn.adbc_get_table_schema("facts")
    assert [f.type for f in facts] == [f.type for f in facts_table().schema]
    assert conn.adbc_get_table_types() == ["TABLE"]


def test_time_travel_by_version_and_tag(conn) -> None:
    def count(table: str) -> int:
        return fetch(conn, f"SELECT count(*) AS n FROM {table}").column("n")[0].as_py()

    assert count("history") == FACT_ROWS + 100
    assert count('"history@v1"') == count('"history@first"') == FACT_ROWS
    added = fetch(
        conn,
        'SELECT (SELECT count(*) FROM history) - (SELECT count(*) FROM "history@first") AS added',
    )
    assert added.to_pylist() == [{"added": 100}]
    with pytest.raises(adbc_driver_manager.ProgrammingError, match="no version or tag 'v999'"):
        fetch(conn, 'SELECT * FROM "history@v999"')
    with pytest.raises(adbc_driver_manager.ProgrammingError, match="no version or tag 'gold'"):
        fetch(conn, 'SELECT * FROM "history@gold"')


def test_filters_and_columns_are_pushed_into_the_scan(conn) -> None:
    plan = fetch(conn, "EXPLAIN SELECT grp FROM facts WHERE qty > 97 AND id < 4000")
    text = "\n".join(str(v) for v in plan.column("plan").to_pylist())
    scan = next(line for line in text.splitlines() if "DatasetExec" in line)
    assert "projection=[grp]" in scan
    assert "qty" in scan and "97" in scan and "id" in scan and "4000" in scan


def test_large_results_arrive_in_small_messages(conn) -> None:
    # ~40 MB of strings: more than ADBC's 16 MiB message limit in one batch
    query = "SELECT id, repeat(grp, 1000) AS wide FROM facts"
    table = fetch(conn, query)
    assert table.num_rows == FACT_ROWS
    assert table.column("wide")[0].as_py() == facts_table().column("grp")[0].as_py() * 1000


BAD_SQL = {
    "SELEC 1": (adbc_driver_manager.ProgrammingError, "INVALID_ARGUMENT.*SQL: ParserError"),
    "SELECT nope FROM facts": (adbc_driver_manager.ProgrammingError, "No field named nope"),
    "SELECT * FROM nothere": (adbc_driver_manager.ProgrammingError, "NOT_FOUND.*nothere"),
    "SELECT * FROM other.facts": (adbc_driver_manager.ProgrammingError, "NOT_FOUND"),
    "CREATE TABLE t (a INT)": (adbc_driver_manager.ProgrammingError, "DDL not supported"),
    "SET datafusion.execution.batch_size = 1": (
        adbc_driver_manager.ProgrammingError,
        "not supported",
    ),
    "SELECT 'a' + 1": (adbc_driver_manager.ProgrammingError, "INVALID_ARGUMENT"),
    "SELECT qty / 0 FROM facts": (adbc_driver_manager.ProgrammingError, "Divide by zero"),
    # a string column over 2 GiB in one batch: the engine panics, the server carries on
    "SELECT repeat(grp, 200000000) FROM facts": (
        adbc_driver_manager.ProgrammingError,
        "failed in the SQL engine",
    ),
}


@pytest.mark.parametrize("query", list(BAD_SQL))
def test_bad_sql_is_one_clear_line(conn, query: str) -> None:
    error, pattern = BAD_SQL[query]
    with pytest.raises(error, match=pattern) as info:
        fetch(conn, query)
    message = str(info.value)
    assert "Traceback" not in message and "/tmp" not in message and ".py" not in message
    assert fetch(conn, "SELECT count(*) AS n FROM facts").to_pylist() == [{"n": FACT_ROWS}]


def test_every_query_answers_one_endpoint_holding_its_whole_result(served) -> None:
    """One stream per query, whatever it reads: ADBC reads a FlightInfo's endpoints in turn,
    so the engine's partitions decode into the one stream instead."""
    import pyarrow.flight as fl

    from quiver.flight_server.sql.messages import pack, sql

    client = fl.connect(served[0])

    def plan(query: str) -> fl.FlightInfo:
        command = pack(sql.CommandStatementQuery(query=query))
        return client.get_flight_info(fl.FlightDescriptor.for_command(command))

    query = "SELECT id, grp FROM facts WHERE qty > 50"
    for each in (query, "SELECT * FROM facts", query + " ORDER BY id", query + " LIMIT 5"):
        info = plan(each)
        assert len(info.endpoints) == 1 and not info.endpoints[0].locations
        got = client.do_get(info.endpoints[0].ticket).read_all()
        if "LIMIT" in each:
            assert got.num_rows == 5
        else:
            same_rows(got, oracle(served[1], each), ordered="ORDER BY" in each)


@pytest.mark.parametrize("version", ["2.0", "2.1"])
def test_blob_columns_read_as_their_bytes(tmp_path: Path, version: str) -> None:
    import lance

    blob = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    values = [b"x" * 10, None, b"", b"y" * 100_000, bytes(range(256)) * 3]
    table = pa.table(
        {"id": list(range(len(values))), "b": values}, schema=pa.schema([("id", pa.int64()), blob])
    )
    lance.write_dataset(table, str(tmp_path / "bl.lance"), data_storage_version=version)
    with quiver_serve(tmp_path) as (uri, _pid), connect(uri) as c:
        assert c.adbc_get_table_schema("bl").field("b").type == pa.large_binary()
        got = fetch(c, "SELECT * FROM bl ORDER BY id")
        assert got.column("b").to_pylist() == values
        assert fetch(c, "SELECT id FROM bl WHERE b IS NULL").to_pylist() == [{"id": 1}]
        top = fetch(c, "SELECT id, b FROM bl WHERE b IS NOT NULL ORDER BY id DESC LIMIT 2")
        assert top.to_pylist() == [{"id": 4, "b": values[4]}, {"id": 3, "b": values[3]}]
        same = fetch(c, f"SELECT id FROM bl WHERE b = X'{values[0].hex()}' OR b = X''")
        assert sorted(same.column("id").to_pylist()) == [0, 2]
        assert fetch(c, "SELECT count(*) AS n FROM bl WHERE b IS NOT NULL").to_pylist() == [
            {"n": 4}
        ]
        assert fetch(c, "SELECT id FROM bl WHERE b IS NULL LIMIT 1").to_pylist() == [{"id": 1}]
