"""Substrait plans through ADBC's Flight SQL driver against a real `quiver serve`: a plan
made by DataFusion's producer over pylance's reads of the datasets runs on Quiver's scans and
returns what the same plan returns over pylance; prepared plans give their schema first;
GetSqlInfo reports the Substrait version; bad plans, plans that change data, unknown tables
and tables the caller may not read are refused with one clear line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_manager
import pyarrow as pa
import pytest
from datafusion.substrait import Consumer, Plan, Producer, Serde
from server_process import quiver_serve
from sql_helpers import connect, fetch, oracle_context, same_rows, write_datasets

from quiver.flight_server.auth import hash_password
from quiver.flight_server.sql.metadata import SUBSTRAIT_VERSION


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("substrait")
    write_datasets(root)
    with quiver_serve(root) as (uri, _pid):
        yield uri, root


@pytest.fixture(scope="module")
def conn(served: tuple[str, Path]) -> Iterator[object]:
    with connect(served[0]) as c:
        yield c


def _plan(root: Path, query: str) -> bytes:
    """`query` as a serialized Substrait plan, made over pylance's reads of the datasets."""
    ctx = oracle_context(root)
    return Producer.to_substrait_plan(ctx.sql(query).logical_plan(), ctx).encode()


def _oracle(root: Path, plan: bytes) -> pa.Table:
    """The plan run by DataFusion over pylance's reads of the datasets."""
    ctx = oracle_context(root)
    logical = Consumer.from_substrait_plan(ctx, Serde.deserialize_bytes(plan))
    return ctx.create_dataframe_from_logical_plan(logical).to_arrow_table()


QUERIES = {
    "count with a filter": "SELECT count(*) AS n FROM facts WHERE value > 60 AND grp <> 'g2'",
    "group-by": (
        "SELECT grp, count(*) AS n, sum(qty) AS q, min(value) AS lo FROM facts "
        "GROUP BY grp ORDER BY grp"
    ),
    "top-k": "SELECT id, value FROM facts WHERE value IS NOT NULL ORDER BY value DESC, id LIMIT 7",
    "join with a dimension in a schema": (
        "SELECT d.label, count(*) AS n, sum(f.qty * d.weight) AS w FROM facts f "
        "JOIN team.dims d ON f.grp = d.grp WHERE f.flag GROUP BY d.label ORDER BY d.label"
    ),
    "full projection": "SELECT * FROM facts ORDER BY id",
    "legacy storage": "SELECT grp, sum(qty) AS q FROM legacy WHERE id % 3 = 0 GROUP BY grp",
}


@pytest.mark.parametrize("name", list(QUERIES))
def test_plans_return_what_they_return_over_pylance(served, conn, name: str) -> None:
    uri, root = served
    plan = _plan(root, QUERIES[name])
    got = fetch(conn, plan)
    same_rows(got, _oracle(root, plan), ordered="ORDER BY" in QUERIES[name])
    # and what the SQL itself returns through Quiver
    same_rows(got, fetch(conn, QUERIES[name]), ordered="ORDER BY" in QUERIES[name])


def test_prepared_plans_give_their_schema_and_run_again(served, conn) -> None:
    plan = _plan(served[1], "SELECT id, grp, value * 2 AS v2 FROM facts WHERE id < 50")
    with conn.cursor() as cur:
        cur.adbc_prepare(plan)  # CreatePreparedSubstraitPlan
        schema = cur.adbc_execute_schema(plan)
        assert schema.names == ["id", "grp", "v2"]
        assert [f.type for f in schema] == [pa.int64(), pa.string(), pa.float64()]
        cur.execute(plan)
        first = cur.fetch_arrow_table()
        cur.execute(plan)
        assert cur.fetch_arrow_table() == first
    assert first.num_rows == 50


def test_a_plan_reads_a_version_as_its_table_name_says(served, conn) -> None:
    root = served[1]
    plan = _plan(root, "SELECT count(*) AS n FROM history")
    doc = json.loads(Serde.deserialize_bytes(plan).to_json())
    _rename_tables(doc, {("history",): ["history@v1"]})  # as a client names version 1
    then = fetch(conn, Plan.from_json(json.dumps(doc)).encode()).column("n")[0].as_py()
    assert fetch(conn, plan).column("n")[0].as_py() - then == 100


def _rename_tables(node: object, names: dict[tuple[str, ...], list[str]]) -> None:
    """Rename the named tables a plan's JSON reads."""
    if isinstance(node, dict):
        table = node.get("namedTable")
        if isinstance(table, dict) and tuple(table.get("names", ())) in names:
            table["names"] = names[tuple(table["names"])]
        for value in node.values():
            _rename_tables(value, names)
    elif isinstance(node, list):
        for value in node:
            _rename_tables(value, names)


def test_sql_info_reports_substrait(served, conn) -> None:
    # ADBC's info codes 4-6: vendor_substrait, its minimum and maximum version
    handle = conn.adbc_connection.get_info([4, 5, 6])
    rows = pa.RecordBatchReader._import_from_c(handle.address).read_all().to_pylist()
    info = {row["info_name"]: row["info_value"] for row in rows}
    assert info == {4: True, 5: SUBSTRAIT_VERSION, 6: SUBSTRAIT_VERSION}
    # the version is the one the engine's own producer writes
    plan = _plan(served[1], "SELECT 1 AS one")
    version = json.loads(Serde.deserialize_bytes(plan).to_json())["version"]
    parts = (version.get(k, 0) for k in ("majorNumber", "minorNumber", "patchNumber"))
    assert SUBSTRAIT_VERSION == ".".join(str(p) for p in parts)


def _write_plan(root: Path) -> bytes:
    """A Substrait plan inserting facts' rows back into facts (a write relation)."""
    read = json.loads(Serde.deserialize_bytes(_plan(root, "SELECT id FROM facts")).to_json())
    source = read["relations"][0]["root"]["input"]
    schema = {
        "names": ["id"],
        "struct": {
            "types": [{"i64": {"nullability": "NULLABILITY_NULLABLE"}}],
            "nullability": "NULLABILITY_REQUIRED",
        },
    }
    write = {
        "namedTable": {"names": ["facts"]},
        "tableSchema": schema,
        "op": "WRITE_OP_INSERT",
        "input": source,
        "output": "OUTPUT_MODE_NO_OUTPUT",
    }
    doc = {"version": read["version"], "relations": [{"root": {"input": {"write": write}}}]}
    return Plan.from_json(json.dumps(doc)).encode()


def test_bad_plans_are_refused_in_one_line(served, conn) -> None:
    uri, root = served
    before = fetch(conn, "SELECT count(*) AS n FROM facts")
    cases = [
        (b"\xff\x00not a plan", "INVALID_ARGUMENT.*Substrait: the plan could not be read"),
        (_write_plan(root), "INVALID_ARGUMENT.*Substrait: write relations are not supported"),
    ]
    missing = json.loads(Serde.deserialize_bytes(_plan(root, "SELECT id FROM facts")).to_json())
    _rename_tables(missing, {("facts",): ["nothere"]})
    cases.append((Plan.from_json(json.dumps(missing)).encode(), "NOT_FOUND.*nothere"))
    for plan, message in cases:
        with pytest.raises(adbc_driver_manager.Error, match=message) as caught:
            fetch(conn, plan)
        text = str(caught.value)
        assert "Traceback" not in text and str(root) not in text
        assert len(text.splitlines()[0]) < 600
    # nothing changed
    assert fetch(conn, "SELECT count(*) AS n FROM facts") == before
    # a plan takes no parameters
    plan = _plan(root, "SELECT id FROM facts WHERE id < 3")
    with pytest.raises(adbc_driver_manager.Error, match="Substrait plan takes no parameters"):
        fetch(conn, plan, (1,))


def test_plans_read_only_what_the_caller_may_read(tmp_path: Path) -> None:
    root = tmp_path / "data"
    write_datasets(root)
    users = {"factsonly": {"password": hash_password("f-Pa55word!"), "read": ["facts"]}}
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"users": users}))
    login = {"username": "factsonly", "password": "f-Pa55word!"}
    with (
        quiver_serve(root, "--auth-file", str(auth)) as (uri, _pid),
        connect(uri, db_kwargs=login) as c,
    ):
        ok = _plan(root, "SELECT count(*) AS n FROM facts")
        assert fetch(c, ok).column("n")[0].as_py() > 0
        joined = "SELECT count(*) AS n FROM facts f JOIN team.dims d ON f.grp = d.grp"
        with pytest.raises(adbc_driver_manager.ProgrammingError, match="UNAUTHORIZED|denied"):
            fetch(c, _plan(root, joined))


def test_a_plan_s_columns_filters_and_limits_reach_quiver_s_scan(served) -> None:
    from quiver.flight_server.service import DatasetService
    from quiver.flight_server.sql.engine import SqlEngine

    root = served[1]
    engine = SqlEngine(DatasetService(str(root)))
    plan = _plan(root, "SELECT grp FROM facts WHERE qty > 97 AND id < 4000")
    physical = engine.plan(plan, None).frame.execution_plan().display_indent()
    scan = next(line for line in physical.splitlines() if "DatasetExec" in line)
    assert "projection=[grp]" in scan
    assert "qty" in scan and "97" in scan and "id" in scan and "4000" in scan
    top = _plan(root, "SELECT id, value FROM facts ORDER BY value DESC LIMIT 5")
    [table] = engine.plan(top, None).planning.opened
    assert table.top_k is not None  # ORDER BY ... LIMIT answered from each group's best rows
