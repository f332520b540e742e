"""What Flight SQL pushes into Quiver's scans beyond columns and filters
(`format.dataset.sql.pushdown`), checked against DataFusion's answers over the whole table
read by pylance.

- Top-k (`format.dataset.sql.topk`): `ORDER BY key LIMIT k` answered from each fragment
  group's best rows: every orderable key type, both directions, nulls first and last, NaN
  of both signs, -0.0 and infinities, ties, filters, deletions.
- Limits: a scan stops after the rows a `LIMIT` asks for.
- The queries neither may touch are left alone."""

from __future__ import annotations

from pathlib import Path

import datafusion
import lance
import numpy as np
import pyarrow as pa
import pytest

from quiver.flight_server.service import DatasetService
from quiver.flight_server.sql.engine import SqlEngine
from quiver.format.dataset import dataset, write_dataset
from quiver.format.dataset.sql import topk

ROWS = 5_000
KEYS = ("f", "f32", "i", "u", "u64", "ts", "d")


def _table() -> pa.Table:
    rng = np.random.default_rng(11)
    f = rng.normal(0, 10, ROWS)
    special = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf])
    f[rng.choice(ROWS, 400, replace=False)] = special[rng.integers(0, len(special), 400)]
    stamps = np.int64(1_700_000_000_000_000) + rng.integers(0, 2_000, ROWS) * 1_000_000
    return pa.table(
        {
            "id": pa.array(np.arange(ROWS, dtype=np.int64)),
            "f": pa.array(f, mask=rng.random(ROWS) < 0.04),
            "f32": pa.array(f.astype(np.float32), mask=rng.random(ROWS) < 0.04),
            "i": pa.array(
                rng.integers(-50, 50, ROWS).astype(np.int32), mask=rng.random(ROWS) < 0.05
            ),
            "u": pa.array(rng.integers(0, 1 << 32, ROWS, dtype=np.uint64).astype(np.uint32)),
            "u64": pa.array(np.uint64(1 << 63) + rng.integers(0, 1 << 62, ROWS, dtype=np.uint64)),
            "ts": pa.array(stamps, pa.timestamp("us", tz="UTC"), mask=rng.random(ROWS) < 0.03),
            "d": pa.array(rng.integers(18_000, 18_100, ROWS).astype(np.int32), pa.date32()),
            "s": pa.array([f"s{v % 97}" for v in range(ROWS)]),
        }
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("topk")
    write_dataset(_table(), str(root / "t.lance"), max_rows_per_file=800)
    dataset(str(root / "t.lance")).delete("id % 7 = 3")
    return root


@pytest.fixture(scope="module")
def engine(root: Path) -> SqlEngine:
    return SqlEngine(DatasetService(str(root)), partitions=2)


@pytest.fixture(scope="module")
def oracle(root: Path) -> datafusion.SessionContext:
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("t", [lance.dataset(str(root / "t.lance")).to_table().to_batches()])
    return ctx


def _run(engine: SqlEngine, query: str) -> tuple[pa.Table, topk.TopK | None]:
    planned = engine.plan(query, None)
    pushed = {t.top_k for t in planned.planning.opened}
    assert len(pushed) == 1
    table = pa.Table.from_batches(list(engine.stream(planned)), schema=planned.schema)
    return table, pushed.pop()


def _cells(column: pa.ChunkedArray) -> list:
    """A column's values as comparable cells: floats by their bits (NaN of each sign, -0.0)."""
    array = column.combine_chunks()
    if pa.types.is_floating(array.type):
        bits = array.cast(pa.float64()).fill_null(0).to_numpy().view(np.int64)
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        return [int(b) if ok else None for b, ok in zip(bits, valid, strict=True)]
    return array.to_pylist()


def _queries(key: str, limits: tuple[int, ...]) -> list[str]:
    queries = []
    for order in ("ASC NULLS FIRST", "ASC NULLS LAST", "DESC NULLS FIRST", "DESC NULLS LAST"):
        for k in limits:
            for where in ("", " WHERE id > 450 AND s <> 's5'"):
                queries.append(f"SELECT id, {key} FROM t{where} ORDER BY {key} {order} LIMIT {k}")
    return queries


@pytest.mark.parametrize("key", KEYS)
def test_single_key_top_k_keeps_the_first_k_keys(engine, oracle, root: Path, key: str) -> None:
    source = lance.dataset(str(root / "t.lance")).to_table()
    cells = dict(zip(source.column("id").to_pylist(), _cells(source.column(key)), strict=True))
    for query in _queries(key, (1, 7, 300, 4_000)):
        got, pushed = _run(engine, query)
        want = oracle.sql(query).to_arrow_table()
        assert pushed is not None and pushed.column == key and not pushed.ties, query
        assert got.schema == want.schema, query
        # ties on the only key may be broken either way: the keys, in order, are the answer
        assert _cells(got.column(key)) == _cells(want.column(key)), query
        ids = got.column("id").to_pylist()
        assert len(set(ids)) == len(ids), query
        assert all(cells[i] == c for i, c in zip(ids, _cells(got.column(key)), strict=True))


@pytest.mark.parametrize("key", KEYS)
def test_top_k_with_later_keys_equals_the_whole_sort(engine, oracle, key: str) -> None:
    for query in _queries(key, (1, 7, 300)):
        query = query.replace(" LIMIT", ", id DESC LIMIT")
        got, pushed = _run(engine, query)
        want = oracle.sql(query).to_arrow_table()
        assert pushed is not None and pushed.ties, query
        assert got.column_names == want.column_names
        for name in got.column_names:
            assert _cells(got.column(name)) == _cells(want.column(name)), query


def test_whole_rows_aliases_offsets_and_subqueries(engine, oracle) -> None:
    for query in (
        "SELECT * FROM t ORDER BY f DESC, id LIMIT 25",
        "SELECT x.id AS k, x.u AS v FROM t x WHERE s <> 's3' ORDER BY v, k LIMIT 10 OFFSET 5",
        "SELECT count(*) AS n, max(i) AS m FROM (SELECT i FROM t ORDER BY i DESC, id LIMIT 40)",
        "SELECT id, ts FROM t WHERE ts IS NOT NULL ORDER BY ts, id LIMIT 3",
    ):
        got, pushed = _run(engine, query)
        assert pushed is not None, query
        want = oracle.sql(query).to_arrow_table()
        for name in got.column_names:
            assert _cells(got.column(name)) == _cells(want.column(name)), query


@pytest.mark.parametrize(
    "query",
    [
        "SELECT id, s FROM t ORDER BY s LIMIT 5",  # strings: not pushed
        "SELECT id FROM t ORDER BY f + 1 LIMIT 5",  # an expression
        f"SELECT id FROM t ORDER BY f LIMIT {topk.MAX_K + 1}",
        "SELECT id FROM t ORDER BY f",  # no limit
        "SELECT id FROM t WHERE id % 3 <> 0 ORDER BY f LIMIT 5",  # a filter the scan can't run
        "SELECT a.id FROM t a JOIN t b ON a.id = b.id ORDER BY a.f LIMIT 5",  # two scans
        "SELECT i, count(*) AS n FROM t GROUP BY i ORDER BY i LIMIT 5",  # over an aggregate
        "SELECT id, rank() OVER (ORDER BY u) AS r FROM t ORDER BY u LIMIT 5",  # over a window
    ],
)
def test_queries_the_pushdown_leaves_alone(engine, oracle, query: str) -> None:
    got, pushed = _run(engine, query)
    assert pushed is None
    want = oracle.sql(query).to_arrow_table()
    assert got.num_rows == want.num_rows


@pytest.mark.parametrize(
    ("query", "limit"),
    [
        ("SELECT * FROM t LIMIT 7", 7),
        ("SELECT id, s FROM t WHERE s <> 's3' AND id > 100 LIMIT 50 OFFSET 10", 60),
        ("SELECT id FROM t WHERE f IS NULL LIMIT 1000", 1000),
    ],
)
def test_a_scan_stops_after_the_rows_a_limit_asks_for(
    engine, oracle, query: str, limit: int
) -> None:
    planned = engine.plan(query, None)
    assert {t.limit for t in planned.planning.opened} == {limit}
    got = pa.Table.from_batches(list(engine.stream(planned)), schema=planned.schema)
    everything = oracle.sql(query.split(" LIMIT")[0]).to_arrow_table()
    want_rows = min(everything.num_rows, oracle.sql(query).to_arrow_table().num_rows)
    assert got.num_rows == want_rows
    assert got.schema == everything.schema
    rows = got.to_pylist()
    assert len({r["id"] for r in rows}) == len(rows)  # no row twice
    allowed = {r["id"]: r for r in everything.to_pylist()}
    assert all(_same_row(r, allowed[r["id"]]) for r in rows)  # rows the query may answer


def _same_row(a: dict, b: dict) -> bool:
    return all((x != x and y != y) or x == y for x, y in zip(a.values(), b.values(), strict=True))


@pytest.mark.parametrize(
    "query",
    [
        "SELECT id FROM t WHERE id % 3 <> 0 LIMIT 5",  # a filter the scan can't run
        "SELECT a.id FROM t a JOIN t b ON a.id = b.id LIMIT 5",  # two scans
        "SELECT count(*) AS n FROM t LIMIT 1",  # over an aggregate
        "SELECT id FROM t ORDER BY id LIMIT 5",  # a sort's fetch: a top-k, not a limit
    ],
)
def test_limits_the_scan_may_not_stop_at(engine, oracle, query: str) -> None:
    planned = engine.plan(query, None)
    assert {t.limit for t in planned.planning.opened} == {None}
    got = pa.Table.from_batches(list(engine.stream(planned)), schema=planned.schema)
    assert got.num_rows == oracle.sql(query).to_arrow_table().num_rows


def test_a_group_whose_ties_outgrow_the_limit_scans_in_full(engine, oracle, monkeypatch) -> None:
    monkeypatch.setattr(topk, "MAX_TIES", 5)
    query = "SELECT id, i FROM t ORDER BY i DESC NULLS LAST, id LIMIT 30"
    got, pushed = _run(engine, query.replace("LIMIT 30", "LIMIT 31"))  # a fresh plan
    want = oracle.sql(query.replace("LIMIT 30", "LIMIT 31")).to_arrow_table()
    assert pushed is not None and pushed.ties
    assert got.to_pylist() == want.to_pylist()
