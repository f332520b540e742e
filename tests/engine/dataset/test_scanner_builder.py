"""pylance's `ScannerBuilder` and its `substrait_aggregate`, against pylance's own builder.

Every chain of calls is made on both builders over the same dataset (written by pylance:
three fragments, deletions, nulls, an INVERTED index and a vector column) and the results
compared whole. The Substrait plans are DataFusion's (its producer writes
Project(Aggregate(Read)); pylance wants the AggregateRel at the root, so the helper lifts
it there), made over a table of the dataset's schema so that field references index its
columns.
"""

from __future__ import annotations

import json
from pathlib import Path

import datafusion
import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from compare import assert_same_table
from datafusion import substrait as ss
from lance.dataset import ColumnOrdering
from lance.dataset import ScannerBuilder as PylanceBuilder

from quiver.format.dataset import ScannerBuilder, dataset, write_dataset
from quiver.format.errors import InvalidInputError

ROWS = 3_000


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = np.random.default_rng(11)
    n = ROWS
    table = pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "cat": pa.array([["red", "green", None, "blue"][i % 4] for i in range(n)]),
            "x": pa.array([None if i % 17 == 0 else float(v) for i, v in enumerate(rng.random(n))]),
            "k": pa.array((np.arange(n) % 7).astype(np.int32)),
            "text": pa.array(
                [f"word{i % 13} common {'rare' if i % 101 == 0 else ''}" for i in range(n)]
            ),
            "vec": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(n * 4).astype(np.float32)), 4
            ),
        }
    )
    path = str(tmp_path_factory.mktemp("builder") / "d.lance")
    lance.write_dataset(table, path, max_rows_per_file=n // 3)
    ds = lance.dataset(path)
    ds.delete("id % 9 = 4")
    ds.create_scalar_index("text", "INVERTED")
    return path


def _plan_schema(uri: str) -> pa.Schema:
    """The dataset's schema with the vector column as a number: DataFusion's producer writes
    no fixed-size lists, and only the positions of the columns matter."""
    schema = lance.dataset(uri).schema
    return pa.schema([f.with_type(pa.int64()) if f.name == "vec" else f for f in schema])


def aggregate_plan(sql: str, schema: pa.Schema, names: bool = True) -> bytes:
    """The serialized plan of `sql` over table `t` of `schema`, its AggregateRel lifted to
    the root (and the root's names dropped unless `names`)."""
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("t", [[pa.RecordBatch.from_pylist([], schema=schema)]])
    body = json.loads(ss.Producer.to_substrait_plan(ctx.sql(sql).logical_plan(), ctx).to_json())
    root = body["relations"][0]["root"]
    rel = root["input"]
    while "aggregate" not in rel:
        rel = next(iter(rel.values()))["input"]
    root["input"] = rel
    if not names:
        root.pop("names", None)
    return ss.Plan.from_json(json.dumps(body)).encode()


def _both(uri: str, chain) -> tuple[pa.Table, pa.Table]:  # noqa: ANN001 - builder -> builder
    ours = chain(ScannerBuilder(dataset(uri))).to_scanner().to_table()
    theirs = chain(PylanceBuilder(lance.dataset(uri))).to_scanner().to_table()
    return ours, theirs


def _sorted(table: pa.Table) -> pa.Table:
    """Rows in one order (an aggregate's groups come in any)."""
    keys = [
        (c, "ascending")
        for c in table.column_names
        if not pa.types.is_floating(table.schema.field(c).type)
    ]
    return table.take(pc.sort_indices(table, sort_keys=keys, null_placement="at_end"))


def assert_same_aggregate(ours: pa.Table, theirs: pa.Table, what: str, rtol: float = 1e-12) -> None:
    """Equal results in any row order; floats to `rtol` relative (the engine adds a
    partition's rows per core, pylance in one; distances are float32 sums)."""
    ours, theirs = _sorted(ours), _sorted(theirs)
    floats = [f.name for f in theirs.schema if pa.types.is_floating(f.type)]
    assert_same_table(ours.drop_columns(floats), theirs.drop_columns(floats), what)
    assert ours.schema.equals(theirs.schema), what
    for c in floats:
        a, b = (
            ours.column(c).to_numpy(zero_copy_only=False),
            theirs.column(c).to_numpy(zero_copy_only=False),
        )
        np.testing.assert_allclose(a, b, rtol=rtol, err_msg=f"{what}: {c}")


QUERY = np.array([0.1, -0.2, 0.3, 0.0], dtype=np.float32)

CHAINS = {
    "columns, filter, limit, offset": lambda b: (
        b.columns(["id", "cat"]).filter("x > 0.5").limit(40).offset(7)
    ),
    "expression filter, row ids": lambda b: b.filter(pc.field("k") == 3).with_row_id(),
    "SQL projections": lambda b: b.columns({"id": "id", "twice": "k * 2"}).filter("id < 100"),
    "order by": lambda b: b.columns(["id", "x"]).order_by([ColumnOrdering("id", False)]),
    "batch size, fragments": lambda b: b.batch_size(100).with_fragments(b.ds.get_fragments()[1:]),
    "nearest": lambda b: b.columns(["id"]).nearest("vec", QUERY, k=5),
    "full text": lambda b: b.columns(["id"]).full_text_search("rare"),
    "full text over columns, limit": lambda b: b.full_text_search("word3", columns=["text"]).limit(
        3
    ),
    "full text, no score": lambda b: (
        b.columns(["id"]).full_text_search("rare").disable_scoring_autoprojection()
    ),
    "nearest, no distance": lambda b: b.nearest("vec", QUERY, k=5).disable_scoring_autoprojection(),
    "defaults": lambda b: b.apply_defaults({"columns": ["id"], "filter": "k = 1", "limit": 5}),
    "tuning calls": lambda b: (
        b.columns(["id"])
        .batch_readahead(4)
        .fragment_readahead(1)
        .io_buffer_size(1 << 20)
        .use_stats(False)
        .scan_in_order(True)
        .late_materialization(True)
        .use_scalar_index(False)
    ),
}


@pytest.mark.parametrize("name", CHAINS)
def test_a_chain_of_calls_scans_as_pylance_s_builder_does(uri: str, name: str):
    ours, theirs = _both(uri, CHAINS[name])
    if name == "nearest":  # distances to float32's last digit
        assert ours.column("id") == theirs.column("id")
        assert_same_aggregate(ours, theirs, name, rtol=1e-6)
        return
    if name.startswith("full text"):  # equal scores: either order
        ours, theirs = ours.sort_by("id"), theirs.sort_by("id")
    assert_same_table(ours, theirs, name)


AGGREGATES = {
    "group-by": "SELECT cat, count(*) AS n, sum(k) AS s, avg(x) AS mean FROM t GROUP BY cat",
    "two keys": "SELECT k, cat, min(x) AS lo, max(id) AS hi FROM t GROUP BY k, cat",
    "no groups": "SELECT count(*) AS n, count(x) AS nx, sum(x) AS sx FROM t",
    "count only": "SELECT count(*) AS n FROM t",
    "distinct": "SELECT cat, count(DISTINCT k) AS kinds FROM t GROUP BY cat",
    "expression": "SELECT id % 2 AS parity, sum(id * 2) AS s FROM t GROUP BY id % 2",
}


@pytest.mark.parametrize("names", [True, False], ids=["named", "engine-named"])
@pytest.mark.parametrize("sql", AGGREGATES.values(), ids=AGGREGATES.keys())
def test_a_substrait_aggregate_answers_as_pylance_s(uri: str, sql: str, names: bool):
    plan = aggregate_plan(sql, _plan_schema(uri), names)
    ours, theirs = _both(uri, lambda b: b.substrait_aggregate(plan))
    assert_same_aggregate(ours, theirs, sql)


SOURCES = {
    "SQL filter": lambda b: b.filter("x > 0.25 AND cat IS NOT NULL"),
    "expression filter": lambda b: b.filter(pc.field("k") >= 4),
    "fragments": lambda b: b.with_fragments(b.ds.get_fragments()[:2]),
    "projection and row ids (ignored)": lambda b: b.columns(["id"]).with_row_id(),
    "nearest": lambda b: b.nearest("vec", QUERY, k=50),
    "full text": lambda b: b.full_text_search("word5"),
}


@pytest.mark.parametrize("name", SOURCES)
def test_the_scan_decides_the_rows_an_aggregate_reads(uri: str, name: str):
    plan = aggregate_plan(AGGREGATES["group-by"], _plan_schema(uri))
    ours, theirs = _both(uri, lambda b: SOURCES[name](b).substrait_aggregate(plan))
    assert_same_aggregate(ours, theirs, name)


def test_an_aggregate_scanner_streams_counts_and_explains(uri: str):
    plan = aggregate_plan(AGGREGATES["group-by"], _plan_schema(uri))
    scan = ScannerBuilder(dataset(uri)).filter("k = 2").substrait_aggregate(plan).to_scanner()
    ref = PylanceBuilder(lance.dataset(uri)).filter("k = 2").substrait_aggregate(plan)
    ref = ref.to_scanner()
    assert scan.projected_schema == ref.projected_schema
    streamed = pa.Table.from_batches(list(scan.to_batches()), schema=scan.projected_schema)
    assert_same_aggregate(streamed, ref.to_table(), "to_batches")
    assert scan.count_rows() == ref.count_rows()  # the rows it aggregates, as pylance counts
    explained = scan.explain_plan()
    assert "SubstraitAggregate" in explained and "AggregateExec" in explained


def test_bad_aggregates_are_refused_as_pylance_refuses_them(uri: str):
    ds = dataset(uri)
    plan = aggregate_plan(AGGREGATES["group-by"], _plan_schema(uri))
    for chain in (lambda b: b.limit(5), lambda b: b.offset(1)):
        with pytest.raises(InvalidInputError, match="Cannot use limit/offset with aggregate"):
            chain(ScannerBuilder(ds)).substrait_aggregate(plan).to_scanner()
    order = [ColumnOrdering("id")]
    with pytest.raises(InvalidInputError, match="Cannot use order_by with aggregate"):
        ScannerBuilder(ds).order_by(order).substrait_aggregate(plan).to_scanner()
    # DataFusion's own plan: a projection at the root
    ctx = datafusion.SessionContext()
    schema = _plan_schema(uri)
    ctx.register_record_batches("t", [[pa.RecordBatch.from_pylist([], schema=schema)]])
    sql = AGGREGATES["group-by"]
    project = ss.Producer.to_substrait_plan(ctx.sql(sql).logical_plan(), ctx).encode()
    with pytest.raises(InvalidInputError, match="needs an AggregateRel at the plan's root, not a"):
        ScannerBuilder(ds).substrait_aggregate(project).to_scanner()
    with pytest.raises(InvalidInputError, match="no relations"):
        ScannerBuilder(ds).substrait_aggregate(b"").to_scanner()
    with pytest.raises(InvalidInputError, match="not a Substrait plan"):
        ScannerBuilder(ds).substrait_aggregate(b"\xff\xff\xff").to_scanner()
    with pytest.raises(InvalidInputError, match="serialized Substrait plan, not str"):
        ScannerBuilder(ds).substrait_aggregate("SELECT 1").to_scanner()  # type: ignore[arg-type]
    # a reference past the dataset's columns
    wide = pa.schema([*schema, pa.field("extra", pa.int64())])
    beyond = aggregate_plan("SELECT sum(extra) AS s FROM t", wide)
    with pytest.raises(InvalidInputError, match="refers to field 6; the scan's rows have 6"):
        ScannerBuilder(ds).substrait_aggregate(beyond).to_scanner()
    # a sum of text (the plan's `k` is the dataset's `cat`): the engine's one line
    bad = aggregate_plan("SELECT sum(k) AS s FROM t", _swap(schema, "k", "cat"))
    with pytest.raises(InvalidInputError, match="substrait_aggregate: .*sum"):
        ScannerBuilder(ds).substrait_aggregate(bad).to_scanner()


def _swap(schema: pa.Schema, a: str, b: str) -> pa.Schema:
    """`schema` with columns `a` and `b` in each other's place (a plan over it refers to
    `b`'s position when it names `a`)."""
    fields = list(schema)
    i, j = schema.get_field_index(a), schema.get_field_index(b)
    fields[i], fields[j] = fields[j], fields[i]
    return pa.schema(fields)


def test_bad_calls_are_refused(uri: str):
    ds = dataset(uri)
    with pytest.raises(InvalidInputError, match="approx_mode must be one of"):
        ScannerBuilder(ds).nearest("vec", QUERY, approx_mode="quick").to_scanner().to_table()
    with pytest.raises(InvalidInputError, match="filter must be"):  # no search, no SQL
        ScannerBuilder(ds).filter({"search_filter": object()})
    with pytest.raises(InvalidInputError, match="Unknown option nope"):
        ScannerBuilder(ds).apply_defaults({"nope": 1})
    with pytest.raises(InvalidInputError, match="Limit must be non-negative"):
        ScannerBuilder(ds).limit(-1)
    with pytest.raises(TypeError, match="LanceFragment"):
        ScannerBuilder(ds).with_fragments([1])
    # no effect on the answer: pylance's own switches
    assert ScannerBuilder(ds).disable_scoring_autoprojection(False).use_stats().to_scanner()


KEYWORDS = {
    "batch_size_bytes": {"columns": ["id", "text"], "batch_size_bytes": 4096},
    "io_buffer_size, batch_readahead, use_stats": {
        "filter": "k = 3",
        "io_buffer_size": 1 << 16,
        "batch_readahead": 2,
        "use_stats": False,
    },
    "full text without its score": {
        "columns": ["id"],
        "full_text_query": "rare",
        "disable_scoring_autoprojection": True,
    },
    "nearest without its distance": {
        "nearest": {"column": "vec", "q": QUERY, "k": 4},
        "disable_scoring_autoprojection": True,
    },
}


@pytest.mark.parametrize("name", KEYWORDS)
def test_scanner_takes_pylance_s_keywords_of_the_builder_s_calls(uri: str, name: str):
    """pylance's `scanner(**kwargs)` is its builder: the same keywords here."""
    kwargs = KEYWORDS[name]
    ours, theirs = dataset(uri).to_table(**kwargs), lance.dataset(uri).to_table(**kwargs)
    if "full_text_query" in kwargs:
        ours, theirs = ours.sort_by("id"), theirs.sort_by("id")
    assert_same_table(ours, theirs, name)
    if "batch_size_bytes" in kwargs:
        batches = list(dataset(uri).to_batches(**kwargs))
        assert len(batches) > 1
    with pytest.raises(InvalidInputError, match="not a uuid"):
        dataset(uri).to_table(index_segments=["x"])
    with pytest.raises(InvalidInputError, match="io_buffer_size must be greater than 0"):
        dataset(uri).to_table(io_buffer_size=0)


def test_an_aggregate_over_many_rows_reads_only_its_columns(tmp_path: Path):
    """4 fragments of 50,000 rows: the same answer as pylance, the engine reading through
    Quiver's scans (the vector column, never referenced, is never decoded)."""
    n = 200_000
    rng = np.random.default_rng(2)
    table = pa.table(
        {
            "g": pa.array((np.arange(n) % 1000).astype(np.int64)),
            "v": pa.array(rng.random(n)),
            "vec": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(n * 16).astype(np.float32)), 16
            ),
        }
    )
    path = str(tmp_path / "big.lance")
    lance.write_dataset(table, path, max_rows_per_file=n // 4)
    schema = pa.schema([pa.field("g", pa.int64()), pa.field("v", pa.float64())])
    plan = aggregate_plan("SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g", schema)
    ds = dataset(path)
    before = ds.io_stats_incremental().read_bytes
    ours = ScannerBuilder(ds).substrait_aggregate(plan).to_scanner().to_table()
    read = ds.io_stats_incremental().read_bytes - before
    theirs = PylanceBuilder(lance.dataset(path)).substrait_aggregate(plan).to_scanner().to_table()
    assert ours.num_rows == 1000
    assert_same_aggregate(ours, theirs, "group-by over 4 fragments")
    assert read < n * 16 * 4 / 2  # well under the vectors' bytes


def test_an_aggregate_over_a_damaged_file_raises_its_own_error(tmp_path: Path):
    """An aggregate whose scan meets a damaged data file raises the scan's
    `CorruptFileError`, not the engine's text of it."""
    from quiver.format.errors import CorruptFileError

    path = str(tmp_path / "t.lance")
    ids = pa.array(range(40_000), pa.int64())
    write_dataset(
        pa.table({"id": ids, "s": pc.cast(ids, pa.string())}), path, max_rows_per_file=10_000
    )
    ds = dataset(path)
    data = tmp_path / "t.lance" / "data" / ds.get_fragments()[2].data_files()[0].path
    size = data.stat().st_size
    with open(data, "r+b") as f:
        f.seek(size // 4)
        f.write(bytes(range(256)) * (size // 3 // 256))
    plan = aggregate_plan("SELECT count(*) AS n, max(s) AS m FROM t", ds.schema)
    scanner = ScannerBuilder(ds).substrait_aggregate(plan).to_scanner()
    with pytest.raises(CorruptFileError, match=data.name):
        scanner.to_table()
