"""Flight SQL's writes through ADBC's Flight SQL driver: bulk ingest in every mode, and
DELETE / UPDATE / INSERT / MERGE statements, each compared with the same change made by
pylance on a copy of the dataset (rows, types and the commit's operation)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_manager
import lance
import pyarrow as pa
import pytest
from server_process import quiver_serve
from sql_helpers import connect, facts_table, fetch


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("sqlw")
    lance.write_dataset(
        pa.table({"grp": ["g0", "g1", "g2", "g3"], "weight": [1.5, 2.5, 3.5, 4.5]}),
        str(root / "dims.lance"),
    )
    with quiver_serve(root) as (uri, _pid):
        yield uri, root


@pytest.fixture(scope="module")
def conn(served: tuple[str, Path]) -> Iterator[object]:
    with connect(served[0]) as c:
        yield c


def operations(path: Path, n: int) -> list[str]:
    """The operations of the latest `n` commits, newest first, as pylance reads them."""
    return [t.operation.__class__.__name__ for t in lance.dataset(str(path)).get_transactions(n)]


def table_of(path: Path) -> pa.Table:
    return lance.dataset(str(path)).to_table().sort_by("id")


def test_ingest_create_append_replace(served, conn) -> None:
    root = served[1]
    first, second = facts_table(500, seed=1), facts_table(300, seed=2)
    with conn.cursor() as cur:
        assert cur.adbc_ingest("ingested", first, mode="create") == 500
        assert cur.adbc_ingest("ingested", second, mode="append") == 300
        with pytest.raises(adbc_driver_manager.ProgrammingError, match="already exists"):
            cur.adbc_ingest("ingested", second, mode="create")
        with pytest.raises(adbc_driver_manager.ProgrammingError, match="does not exist"):
            cur.adbc_ingest("missing", second, mode="append")
    got = lance.dataset(str(root / "ingested.lance")).to_table()
    assert got.equals(pa.concat_tables([first, second]))
    assert operations(root / "ingested.lance", 2) == ["Append", "Overwrite"]
    assert not (root / "missing.lance").exists()
    with conn.cursor() as cur:
        assert cur.adbc_ingest("ingested", second, mode="replace") == 300
        assert cur.adbc_ingest("sub", first, mode="create_append", db_schema_name="team") == 500
        assert cur.adbc_ingest("sub", second, mode="create_append", db_schema_name="team") == 300
    assert lance.dataset(str(root / "ingested.lance")).to_table().equals(second)
    assert operations(root / "ingested.lance", 1) == ["Overwrite"]
    assert lance.dataset(str(root / "team" / "sub.lance")).count_rows() == 800
    assert fetch(conn, "SELECT count(*) AS n FROM team.sub").to_pylist() == [{"n": 800}]


def test_ingest_with_a_bad_stream_commits_nothing(served, conn) -> None:
    root = served[1]
    with conn.cursor() as cur:
        cur.adbc_ingest("typed", facts_table(50), mode="create")
        version = lance.dataset(str(root / "typed.lance")).version
        with pytest.raises(adbc_driver_manager.Error):
            cur.adbc_ingest("typed", pa.table({"other": [1, 2]}), mode="append")
        with pytest.raises(adbc_driver_manager.ProgrammingError, match="invalid dataset name"):
            cur.adbc_ingest("../escape", facts_table(5), mode="create")
    with conn.cursor() as cur:
        with pytest.raises(adbc_driver_manager.ProgrammingError, match="catalog 'other'"):
            cur.adbc_ingest("typed", facts_table(5), mode="append", catalog_name="other")
    assert lance.dataset(str(root / "typed.lance")).version == version


# (SQL run by Quiver, the same change made by pylance, the operation both commit)
CHANGES = [
    (
        "DELETE FROM {t} WHERE qty < 10 OR value IS NULL",
        lambda ds: ds.delete("qty < 10 OR value IS NULL"),
        "Delete",
    ),
    (
        "UPDATE {t} SET qty = qty + 1000, grp = 'moved' WHERE grp = 'g1' AND flag",
        lambda ds: ds.update({"qty": "qty + 1000", "grp": "'moved'"}, where="grp = 'g1' AND flag"),
        "Update",
    ),
    (
        "INSERT INTO {t} (id, grp, qty) VALUES (100000, 'new', 7), (100001, 'new', 8)",
        lambda ds: ds.insert(
            pa.table(
                {
                    "id": pa.array([100000, 100001], pa.int64()),
                    "grp": ["new", "new"],
                    "value": pa.array([None, None], pa.float64()),
                    "qty": pa.array([7, 8], pa.int32()),
                    "flag": pa.array([None, None], pa.bool_()),
                    "ts": pa.array([None, None], pa.timestamp("us")),
                    "tags": pa.array([None, None], pa.list_(pa.string())),
                }
            )
        ),
        "Append",
    ),
    (
        "DELETE FROM {t}",
        lambda ds: ds.delete("true"),
        "Delete",
    ),
]


@pytest.mark.parametrize("index", range(len(CHANGES)))
def test_changes_equal_pylance(served, conn, tmp_path: Path, index: int) -> None:
    root = served[1]
    name = f"changed{index}"
    path = root / f"{name}.lance"
    lance.write_dataset(facts_table(2_000, seed=index), str(path), max_rows_per_file=700)
    copy = tmp_path / "copy.lance"
    shutil.copytree(path, copy)
    sql, change, operation = CHANGES[index]
    with conn.cursor() as cur:
        cur.execute(sql.format(t=name))
        changed = cur.rowcount
    before = lance.dataset(str(copy)).count_rows()
    change(lance.dataset(str(copy)))
    want = table_of(copy)
    assert table_of(path).equals(want)
    assert operations(path, 1) == operations(copy, 1) == [operation]
    assert lance.dataset(str(path)).version == 2
    if operation == "Delete":
        assert changed == before - want.num_rows
    elif operation == "Append":
        assert changed == want.num_rows - before


def test_insert_from_a_query_and_merge_equal_pylance(served, conn, tmp_path: Path) -> None:
    root = served[1]
    path = root / "merged.lance"
    lance.write_dataset(facts_table(1_000, seed=5), str(path))
    copy = tmp_path / "copy.lance"
    shutil.copytree(path, copy)
    source = facts_table(1_000, seed=6).slice(900)  # ids 900..999 match, none are new
    source = source.set_column(0, "id", pa.array(range(900, 1000), pa.int64()))
    extra = facts_table(50, seed=7)
    extra = extra.set_column(0, "id", pa.array(range(5_000, 5_050), pa.int64()))
    with conn.cursor() as cur:
        cur.adbc_ingest("updates", pa.concat_tables([source, extra]), mode="create")
        cur.execute(
            "MERGE INTO merged AS t USING updates AS s ON t.id = s.id "
            "WHEN MATCHED AND s.qty > t.qty THEN UPDATE SET * "
            "WHEN NOT MATCHED THEN INSERT *"
        )
        merged_rows = cur.rowcount
        cur.execute(
            "INSERT INTO merged SELECT id + 10000, grp, value, qty, flag, ts, tags FROM merged "
            "WHERE id < 10"
        )
        assert cur.rowcount == 10
    (
        lance.dataset(str(copy))
        .merge_insert("id")
        .when_matched_update_all("source.qty > target.qty")
        .when_not_matched_insert_all()
        .execute(pa.concat_tables([source, extra]))
    )
    want = lance.dataset(str(copy))
    head = want.to_table(filter="id < 10")
    head = head.set_column(0, "id", pa.compute.add(head.column("id"), 10000))
    want.insert(head)
    assert table_of(path).equals(table_of(copy))
    assert operations(path, 2) == operations(copy, 2) == ["Append", "Update"]
    assert merged_rows > 50


COLUMNS = ["id", "grp", "value", "qty", "flag", "ts", "tags"]


def _merge_case(
    path: Path, tmp_path: Path, rows: int, seed: int, changed: int
) -> tuple[Path, Path, pa.Table]:
    """A served target of `rows` facts, its copy for pylance, and a source of `changed`
    rows whose first half matches the target's last ids and the rest are new."""
    lance.write_dataset(facts_table(rows, seed=seed), str(path))
    copy = tmp_path / "copy.lance"
    shutil.copytree(path, copy)
    first = rows - changed // 2
    source = facts_table(changed, seed=seed + 1)
    return path, copy, source.set_column(0, "id", pa.array(range(first, first + changed)))


def test_a_merge_listing_its_columns_as_dbt_writes_it_equals_pylance(
    served, conn, tmp_path: Path
) -> None:
    """dbt's incremental MERGE lists every column in SET and INSERT, from a query aliased
    like `DBT_INTERNAL_SOURCE`; values may be computed from the source's columns. The
    result equals pylance's merge_insert of the same rows, and a commit of one Update."""
    path, copy, source = _merge_case(served[1] / "dbt_merged.lance", tmp_path, 1_000, 9, 200)
    quoted = ", ".join(f'"{c}"' for c in COLUMNS)
    values = ", ".join(
        "DBT_INTERNAL_SOURCE.qty * 2" if c == "qty" else f'DBT_INTERNAL_SOURCE."{c}"'
        for c in COLUMNS
    )
    sets = ", ".join(f'"{c}" = {v}' for c, v in zip(COLUMNS, values.split(", "), strict=True))
    with conn.cursor() as cur:
        cur.adbc_ingest("dbt_source", source, mode="create")
        cur.execute(
            "merge into dbt_merged as DBT_INTERNAL_DEST using (select * from dbt_source) as "
            'DBT_INTERNAL_SOURCE on (DBT_INTERNAL_SOURCE."id" = DBT_INTERNAL_DEST."id") '
            f"when matched then update set {sets} "
            f"when not matched then insert ({quoted}) values ({values})"
        )
        assert cur.rowcount == 200
    twice = pa.compute.multiply(source.column("qty"), 2).cast(pa.int32())
    doubled = source.set_column(3, "qty", twice)
    (
        lance.dataset(str(copy))
        .merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute(doubled)
    )
    assert table_of(path).equals(table_of(copy))
    assert operations(path, 1) == operations(copy, 1) == ["Update"]


def test_a_merge_of_some_columns_keeps_or_nulls_the_others_as_pylance(
    served, conn, tmp_path: Path
) -> None:
    """`UPDATE SET` of some columns keeps an updated row's others, `INSERT` of some columns
    leaves the others NULL: pylance's merge_insert of a source of those columns."""
    path, copy, source = _merge_case(served[1] / "some_merged.lance", tmp_path, 300, 12, 100)
    with conn.cursor() as cur:
        cur.adbc_ingest("some_source", source, mode="create")
        cur.execute(
            "MERGE INTO some_merged AS t USING some_source AS s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET qty = s.qty, grp = s.grp "
            "WHEN NOT MATCHED THEN INSERT (id, qty, grp) VALUES (s.id, s.qty, s.grp)"
        )
        assert cur.rowcount == 100
        cur.execute(
            "MERGE INTO some_merged AS t USING some_source AS s ON t.id = s.id "
            "WHEN MATCHED AND t.qty > 50 THEN UPDATE SET value = s.value"
        )
        with pytest.raises(adbc_driver_manager.Error, match="listed columns"):
            cur.execute(
                "MERGE INTO some_merged AS t USING some_source AS s ON t.id = s.id "
                "WHEN MATCHED AND s.flag THEN UPDATE SET value = s.value"
            )
    few = source.select(["id", "qty", "grp"])
    ds = lance.dataset(str(copy))
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(few)
    values = source.select(["id", "value"])
    ds = lance.dataset(str(copy))
    ds.merge_insert("id").when_matched_update_all("target.qty > 50").execute(values)
    assert table_of(path).equals(table_of(copy))
    assert operations(path, 2) == operations(copy, 2)


@pytest.mark.parametrize(
    ("clauses", "match"),
    [
        (
            "when matched then update set qty = s.qty when not matched then insert (id, grp) "
            "values (s.id, s.grp)",
            "same columns",
        ),
        ("when not matched then insert (grp) values (s.grp)", "key column 'id'"),
        (
            "when matched then update set * when not matched then insert "
            f"({', '.join(COLUMNS)}) values (s.id + 1, {', '.join('s.' + c for c in COLUMNS[1:])})",
            "the same value|key column",
        ),
        (
            f"when matched then update set {', '.join(f'{c} = t.{c}' for c in COLUMNS)}",
            "source's columns only",
        ),
        ("when matched then update set nope = s.qty", "no column 'nope'"),
        ("when matched then update set qty = qty + 1", "named by its alias"),
    ],
)
def test_merge_column_lists_that_cannot_be_written_whole_are_refused(
    served, conn, clauses: str, match: str
) -> None:
    path = served[1] / "mfacts.lance"
    if not path.exists():
        lance.write_dataset(facts_table(20, seed=11), str(path))
    version = lance.dataset(str(path)).version
    with pytest.raises(adbc_driver_manager.Error, match=match):
        with conn.cursor() as cur:
            cur.execute(f"MERGE INTO mfacts AS t USING mfacts AS s ON t.id = s.id {clauses}")
    assert lance.dataset(str(path)).version == version


def test_parameters_of_a_change_run_once_per_row(served, conn) -> None:
    root = served[1]
    path = root / "params.lance"
    lance.write_dataset(facts_table(100, seed=8), str(path))
    with conn.cursor() as cur:
        cur.execute("DELETE FROM params WHERE id = $1", (5,))
        assert cur.rowcount == 1
        cur.executemany("UPDATE params SET qty = $1 WHERE id = $2", [(-1, 7), (-2, 8)])
    got = lance.dataset(str(path)).to_table(filter="id IN (5, 7, 8)").sort_by("id")
    assert got.column("id").to_pylist() == [7, 8]
    assert got.column("qty").to_pylist() == [-1, -2]


BAD_CHANGES = {
    "DELETE FROM nothere WHERE id = 1": "NOT_FOUND",
    "UPDATE dims SET nope = 1": "nope",
    "UPDATE dims SET weight = 1 WHERE grp IN (SELECT grp FROM dims)": "subqueries",
    "INSERT INTO dims (grp) VALUES (1, 2)": "2 values per row for 1 columns",
    "INSERT INTO dims VALUES ('a', 'not a number')": "cannot be cast",
    'DELETE FROM "dims@v1"': "names a version",
    "MERGE INTO dims AS t USING dims AS s ON t.grp < s.grp WHEN MATCHED THEN DELETE": "equalities",
    "DELETE FROM dims WHERE": "SQL",
    "DELETE FROM elsewhere.public.dims": "NOT_FOUND.*catalog 'elsewhere' does not exist",
}


@pytest.mark.parametrize("sql", list(BAD_CHANGES))
def test_bad_changes_are_refused_and_change_nothing(served, conn, sql: str) -> None:
    path = served[1] / "dims.lance"
    version = lance.dataset(str(path)).version
    with pytest.raises(adbc_driver_manager.Error, match=BAD_CHANGES[sql]) as info:
        with conn.cursor() as cur:
            cur.execute(sql)
    assert "Traceback" not in str(info.value)
    assert lance.dataset(str(path)).version == version


def test_a_branch_read_and_changed_through_sql(served, conn) -> None:
    """`"name#branch"` is a branch's latest version, `"name#branch@v3"` a version of it:
    queries, DML and bulk ingest act on the branch, the main line untouched (as pylance
    reads both)."""
    root = served[1]
    path = str(root / "brs.lance")
    lance.write_dataset(facts_table(200, seed=5), path).create_branch("dev")
    with conn.cursor() as cur:
        cur.execute('DELETE FROM "brs#dev" WHERE id < 50')
        cur.execute('UPDATE "brs#dev" SET qty = qty + 1000 WHERE id < 60')
        assert cur.adbc_ingest("brs#dev", facts_table(20, seed=6), mode="append") == 20
    dev = lance.dataset(path).checkout_version(("dev", None))
    main = lance.dataset(path)
    assert main.version == 1 and main.to_table().equals(facts_table(200, seed=5))
    assert dev.count_rows() == 170
    count = fetch(conn, 'SELECT count(*) AS n, sum(qty) AS q FROM "brs#dev"').to_pylist()[0]
    assert count == {"n": 170, "q": dev.to_table()["qty"].to_numpy().sum()}
    before = fetch(conn, 'SELECT count(*) AS n FROM "brs#dev@v2"').to_pylist()[0]["n"]
    assert before == lance.dataset(path).checkout_version(("dev", 2)).count_rows() == 150
    both = fetch(
        conn,
        'SELECT (SELECT count(*) FROM brs) - (SELECT count(*) FROM "brs#dev") AS d',
    )
    assert both.to_pylist() == [{"d": 30}]
    for sql, text in (
        ('SELECT * FROM "brs#nope"', "create_branch"),
        ('DELETE FROM "brs#dev@v2" WHERE id = 1', "names a version"),
        ('SELECT * FROM "brs#"', "branch name"),
    ):
        with pytest.raises(adbc_driver_manager.Error, match=text):
            fetch(conn, sql) if sql.startswith("SELECT") else conn.cursor().execute(sql)
