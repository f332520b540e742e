"""`LanceDataset.sql`: the same queries through pylance's and Quiver's, compared whole
(values, types, nulls), with the builder's options (table name, row ids and addresses,
blob handling, batch sizes) and the errors of bad queries."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from compare import assert_same_table

import quiver
from quiver.format.errors import InvalidInputError

ROWS = 5000


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = np.random.default_rng(3)
    nulls = rng.random(ROWS) < 0.05
    table = pa.table(
        {
            "id": pa.array(np.arange(ROWS), pa.int64()),
            "grp": pa.array([f"g{i % 7}" for i in range(ROWS)], pa.string(), mask=nulls),
            "value": pa.array(rng.normal(size=ROWS), pa.float64(), mask=rng.random(ROWS) < 0.1),
            "qty": pa.array(rng.integers(0, 100, ROWS), pa.int32()),
            "ts": pa.array(np.arange(ROWS) * 60_000_000, pa.timestamp("us")),
            "tags": pa.array([[f"t{i % 3}"] * (i % 3) for i in range(ROWS)]),
        }
    )
    path = str(tmp_path_factory.mktemp("sql") / "t.lance")
    lance.write_dataset(table, path, max_rows_per_file=1200)
    lance.dataset(path).delete("id % 11 = 4")
    return path


QUERIES = [
    "SELECT count(*) AS n FROM dataset WHERE value > 0.5 AND grp <> 'g2'",
    "SELECT grp, count(*) AS n, sum(qty) AS q, round(avg(value), 9) AS a FROM dataset "
    "GROUP BY grp ORDER BY grp",
    "SELECT id, value FROM dataset WHERE value IS NOT NULL ORDER BY value DESC, id LIMIT 7",
    "SELECT * FROM dataset WHERE id BETWEEN 100 AND 140 ORDER BY id",
    "SELECT a.id, b.qty FROM dataset a JOIN dataset b ON a.id = b.id + 1 WHERE a.id < 50 "
    "ORDER BY a.id",
    "SELECT grp, max(ts) AS last FROM dataset WHERE ts >= TIMESTAMP '1970-01-02' GROUP BY grp "
    "ORDER BY grp NULLS FIRST",
    "SELECT id, rank() OVER (PARTITION BY grp ORDER BY qty DESC, id) AS r FROM dataset "
    "WHERE id < 300 ORDER BY id",
    "SELECT 1 + 1 AS two",
]


def _whole(batches: list[pa.RecordBatch]) -> pa.Table:
    return pa.Table.from_batches(batches)


@pytest.mark.parametrize("query", QUERIES)
def test_queries_equal_pylance_s(uri: str, query: str) -> None:
    want = _whole(lance.dataset(uri).sql(query).build().to_batch_records())
    got = _whole(quiver.dataset(uri).sql(query).build().to_batch_records())
    assert_same_table(got, want, query)


def test_builder_options_as_pylance(uri: str) -> None:
    query = "SELECT * FROM facts WHERE qty = 7 ORDER BY id"
    results = []
    for engine in (lance, quiver):
        builder = engine.dataset(uri).sql(query).table_name("facts").with_row_id()
        reader = builder.with_row_addr(True).batch_size(5).build().to_stream_reader()
        batches = list(reader)
        assert max(b.num_rows for b in batches) <= 5
        results.append(pa.Table.from_batches(batches))
    assert results[0].column_names[-2:] == ["_rowid", "_rowaddr"]
    assert_same_table(results[1], results[0], "row columns")
    small = quiver.dataset(uri).sql("SELECT * FROM dataset").batch_size_bytes(2000).build()
    batches = small.to_batch_records()
    assert sum(b.num_rows for b in batches) == quiver.dataset(uri).count_rows()
    assert max(b.nbytes for b in batches) < 4000


def test_blob_columns_are_descriptions_unless_asked(tmp_path: Path) -> None:
    blob = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    values = [b"x" * 10, None, b"y" * 5000]
    table = pa.table({"id": [0, 1, 2], "b": values}, schema=pa.schema([("id", pa.int64()), blob]))
    path = str(tmp_path / "b.lance")
    lance.write_dataset(table, path)
    for handling in (None, "all_binary"):
        got = []
        for engine in (lance, quiver):
            builder = engine.dataset(path).sql("SELECT * FROM dataset ORDER BY id")
            if handling:
                builder = builder.blob_handling(handling)
            got.append(_whole(builder.build().to_batch_records()))
        assert_same_table(got[1], got[0], str(handling))
    assert got[1].column("b").to_pylist() == values


@pytest.mark.parametrize(
    ("query", "match"),
    [
        ("SELECT a FROM other", "other"),
        ("SELEC a", "SELEC"),
        ("DELETE FROM dataset", "DML|Delete"),
        ("SELECT nope FROM dataset", "nope"),
        ("SELECT _rowid FROM dataset", "_rowid"),
        ("", "query"),
    ],
)
def test_bad_queries_are_one_clear_error(uri: str, query: str, match: str) -> None:
    with pytest.raises(ValueError):
        lance.dataset(uri).sql(query).build().to_batch_records()
    with pytest.raises(InvalidInputError, match=match) as e:
        quiver.dataset(uri).sql(query).build().to_batch_records()
    assert "\n" not in str(e.value)


def test_a_query_reads_the_version_it_was_built_on(uri: str, tmp_path: Path) -> None:
    path = str(tmp_path / "v.lance")
    lance.write_dataset(pa.table({"x": [1, 2]}), path)
    ds = quiver.dataset(path)
    query = ds.sql("SELECT sum(x) AS s FROM dataset").build()
    lance.write_dataset(pa.table({"x": [10]}), path, mode="append")
    assert query.to_batch_records()[0].to_pylist() == [{"s": 3}]
    assert quiver.dataset(path).sql("SELECT sum(x) AS s FROM dataset").build().to_batch_records()[
        0
    ].to_pylist() == [{"s": 13}]


def test_a_damaged_file_raises_its_own_error(tmp_path: Path) -> None:
    """A query meeting a damaged data file raises the scan's `CorruptFileError` (naming the
    file), not the engine's text of it, each time it runs."""
    from quiver.format.errors import CorruptFileError

    path = str(tmp_path / "t.lance")
    ids = pa.array(range(40_000), pa.int64())
    table = pa.table({"id": ids, "s": pa.compute.cast(ids, pa.string())})
    quiver.write_dataset(table, path, max_rows_per_file=10_000)
    ds = quiver.dataset(path)
    data = tmp_path / "t.lance" / "data" / ds.get_fragments()[2].data_files()[0].path
    size = data.stat().st_size
    with open(data, "r+b") as f:
        f.seek(size // 4)
        f.write(bytes(range(256)) * (size // 3 // 256))
    query = ds.sql("SELECT s FROM dataset").build()
    for _ in range(2):
        with pytest.raises(CorruptFileError, match=data.name):
            query.to_stream_reader().read_all()
