"""Every Arrow type Lance stores, read through Spark and written back (pylance the oracle);
vectors, case-insensitive appends, option and overflow errors (issue 15)."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

pyspark = pytest.importorskip("pyspark")

from quiver.clients import Client  # noqa: E402
from tests.corpus import TYPE_COLUMNS, excluded, types_table  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

STORAGE = "2.2"
EPOCH = dt.datetime(1970, 1, 1)
UTC = dt.timezone.utc

# what Spark shows for the columns Spark's Arrow conversion cannot take as they are
WIDENED = {
    "uint8": "smallint",
    "uint16": "int",
    "uint32": "bigint",
    "uint64": "decimal(20,0)",
    "float16": "float",
    "date64": "date",
    "time32_s": "timestamp_ntz",
    "time64_ns": "timestamp_ntz",
    "ts_ns": "timestamp_ntz",
    "ts_ns_utc": "timestamp",
    "dur_ns": "interval day to second",
    "decimal128": "decimal(20,4)",
    "decimal256": "string",  # decimal256(50, 10): beyond Spark's 38 digits
    "large_utf8": "string",
    "fixed_size_binary": "binary",
    "dict_i8": "string",
    "fsl_f16_2": "array<float>",
    "large_list_i64": "array<bigint>",
    "nested_unsigned": "struct<u:smallint,t:timestamp_ntz,l:array<int>>",
}


def _nested_unsigned(n: int, seed: int) -> pa.Array:
    """struct<u: uint8, t: time64[ns], l: list<uint16>>: conversions below the top level."""
    rng = np.random.default_rng(seed)
    u = pa.array(rng.integers(0, 256, n).astype(np.uint8), mask=rng.random(n) < 0.1)
    t = pa.array(rng.integers(0, 86_400 * 10**9, n), pa.int64()).cast(pa.time64("ns"))
    offsets = pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32))
    items = pa.array(rng.integers(0, 65_536, 2 * n).astype(np.uint16))
    lists = pa.ListArray.from_arrays(offsets, items)
    return pa.StructArray.from_arrays([u, t, lists], names=["u", "t", "l"])


@pytest.fixture(scope="module")
def types_dataset(root: Path) -> tuple[str, pa.Table]:
    """`types`: every column the corpus writes at 2.2, plus nested conversions, written by
    pylance in 3 fragments; returns its name and pylance's read."""
    columns = [c for c in TYPE_COLUMNS if not excluded(STORAGE, c)]
    table = types_table(columns, STORAGE, files=3, rows=100)
    table = table.append_column(
        "nested_unsigned",
        pa.chunked_array(
            [_nested_unsigned(c.num_rows, i) for i, c in enumerate(table.to_batches())]
        ),
    )
    path = root / "types.lance"
    lance.write_dataset(table, str(path), data_storage_version=STORAGE, max_rows_per_file=100)
    return "types", lance.dataset(str(path)).to_table()


def reader(spark: Any, uri: str, name: str) -> Any:
    return spark.read.format("quiver").option("uri", uri).option("dataset", name)


# --------------------------------------------------------------------------------------------
# What Spark must show, computed from pylance's read independently of clients/spark/convert


def _micros(array: pa.Array, unit: str, floor: bool = True) -> list[int | None]:
    """Integer microseconds of temporal values of `unit` (ns: floored, or towards zero)."""
    per = {"s": 10**6, "ms": 10**3, "us": 1, "ns": 1}[unit]
    out = []
    ints = array.view(pa.int32() if array.type.bit_width == 32 else pa.int64())
    for v in ints.to_pylist():
        if v is None:
            out.append(None)
        elif unit == "ns":
            out.append(v // 1000 if floor or v >= 0 else -(-v // 1000))
        else:
            out.append(v * per)
    return out


def _norm(value: Any) -> Any:
    """Python values made comparable: NaN equal to NaN, floats as floats, maps as lists."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, (np.floating,)):
        return _norm(float(value))
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    return value


def expected_column(column: pa.ChunkedArray) -> list[Any]:
    t = column.type
    array = column.combine_chunks()
    if pa.types.is_time(t) or pa.types.is_timestamp(t) or pa.types.is_duration(t):
        return _micros(array, t.unit, floor=not pa.types.is_duration(t))
    if pa.types.is_decimal256(t) and t.precision > 38:
        return [None if v is None else decimal.Decimal(v) for v in array.to_pylist()]
    if pa.types.is_struct(t) and t.get_field_index("t") >= 0:  # nested_unsigned
        times = _micros(array.field("t"), "ns")
        return [
            {"u": u, "t": tt, "l": lst}
            for u, tt, lst in zip(
                array.field("u").to_pylist(), times, array.field("l").to_pylist(), strict=True
            )
        ]
    if pa.types.is_float16(t):
        return _norm([None if v is None else float(v) for v in array.to_pylist()])
    if pa.types.is_fixed_size_list(t) and pa.types.is_float16(t.value_type):
        return _norm(
            [
                None if v is None else [None if x is None else float(x) for x in v]
                for v in array.to_pylist()
            ]
        )
    return _norm(array.to_pylist())


def spark_column(column: pa.ChunkedArray, name: str) -> list[Any]:
    t = column.type
    array = column.combine_chunks()
    if pa.types.is_timestamp(t) or pa.types.is_duration(t):
        return array.cast(pa.int64()).to_pylist()
    if name == "decimal256":
        return [None if v is None else decimal.Decimal(v) for v in array.to_pylist()]
    if name == "nested_unsigned":
        times = array.field("t").cast(pa.int64()).to_pylist()
        return [
            {"u": u, "t": tt, "l": lst}
            for u, tt, lst in zip(
                array.field("u").to_pylist(), times, array.field("l").to_pylist(), strict=True
            )
        ]
    if pa.types.is_map(t):
        return _norm([None if v is None else [tuple(kv) for kv in v] for v in array.to_pylist()])
    return _norm(array.to_pylist())


def test_every_lance_type_reads_and_writes_back(spark, uri, root, types_dataset) -> None:
    name, want = types_dataset
    df = reader(spark, uri, name).load()
    shown = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    for column, spark_type in WIDENED.items():
        assert shown[column] == spark_type, column
    # PySpark's own toArrow() breaks array<void> (pyarrow cuts a cast list's null values
    # to the list's length): that column is compared through collect()
    got = df.drop("list_null").toArrow().sort_by("id")
    want = want.sort_by("id")
    assert got.num_rows == want.num_rows == 300
    assert got.column_names == [c for c in want.column_names if c != "list_null"]
    rows = sorted(df.select("id", "list_null").collect())
    assert [r.list_null for r in rows] == want.column("list_null").to_pylist()
    for column in got.column_names:
        w = want.column(column)
        if pa.types.is_map(w.type):
            expect = _norm([None if v is None else [tuple(kv) for kv in v] for v in w.to_pylist()])
        else:
            expect = expected_column(w)
        assert spark_column(got.column(column), column) == expect, column

    # written back (append) into the same dataset: the new rows hold the original types
    # and values (nanoseconds truncated to microseconds)
    before = lance.dataset(str(root / "types.lance")).version
    df.write.format("quiver").option("uri", uri).option("dataset", name).mode("append").save()
    ds = lance.dataset(str(root / "types.lance"))
    assert ds.version == before + 1
    assert ds.schema == lance.dataset(str(root / "types.lance"), version=before).schema
    new_ids = set(ds.to_table(columns=["id"]).column("id").to_pylist())
    assert len(new_ids) == 300
    everything = ds.to_table().sort_by([("id", "ascending")])
    again = everything.take(list(range(1, 600, 2)))  # each id twice: its second copy
    first = everything.take(list(range(0, 600, 2)))
    for column in want.column_names:
        a, b = first.column(column), again.column(column)
        t = a.type
        if pa.types.is_dictionary(t):
            a, b = a.cast(t.value_type), b.cast(t.value_type)
        if column in ("time64_ns", "ts_ns", "ts_ns_utc", "dur_ns"):
            assert _micros(b.combine_chunks(), "ns") == expected_column(a), column
        elif column == "nested_unsigned":
            assert expected_column(b) == expected_column(a)
        else:
            assert str(b) == str(a), column


# --------------------------------------------------------------------------------------------
# Vectors


def test_vector_append_and_wrong_length(spark, uri, root) -> None:
    vec = pa.list_(pa.float32(), 4)
    with Client(uri) as qc:
        qc.write(
            "vectors",
            pa.table({"id": pa.array([0], pa.int64()), "emb": pa.array([[0.0] * 4], vec)}),
            mode="create",
        )
    df = reader(spark, uri, "vectors").load()
    assert df.schema["emb"].dataType.simpleString() == "array<float>"
    rows = spark.createDataFrame(
        [(1, [1.0, 2.0, 3.0, 4.0]), (2, None), (3, [0.5] * 4)], "id BIGINT, emb ARRAY<FLOAT>"
    )
    rows.write.format("quiver").option("uri", uri).option("dataset", "vectors").mode(
        "append"
    ).save()
    table = lance.dataset(str(root / "vectors.lance")).to_table().sort_by("id")
    assert table.schema.field("emb").type == vec
    assert table.column("emb").to_pylist() == [[0.0] * 4, [1.0, 2.0, 3.0, 4.0], None, [0.5] * 4]

    before = lance.dataset(str(root / "vectors.lance")).version
    wrong = spark.createDataFrame(
        [(4, [1.0] * 4), (5, [1.0, 2.0])], "id BIGINT, emb ARRAY<FLOAT>"
    ).coalesce(1)
    with pytest.raises(Exception, match="emb") as e:
        wrong.write.format("quiver").option("uri", uri).option("dataset", "vectors").mode(
            "append"
        ).save()
    assert "vectors of 4 values" in str(e.value) and "row 1 " in str(e.value)
    assert "has 2" in str(e.value)
    assert lance.dataset(str(root / "vectors.lance")).version == before


def test_vector_columns_create_a_dataset(spark, uri, root) -> None:
    df = spark.createDataFrame(
        [(1, [1.0, 2.0, 3.0], [1.5, 2.5]), (2, [4.0, 5.0, 6.0], None)],
        "id BIGINT, emb ARRAY<FLOAT>, other ARRAY<DOUBLE>",
    )
    (
        df.write.format("quiver")
        .option("uri", uri)
        .option("dataset", "made_vectors")
        .option("vector_columns", "emb:3, other:2")
        .mode("append")
        .save()
    )
    ds = lance.dataset(str(root / "made_vectors.lance"))
    assert ds.schema.field("emb").type == pa.list_(pa.float32(), 3)
    assert ds.schema.field("other").type == pa.list_(pa.float64(), 2)
    table = ds.to_table().sort_by("id")
    assert table.column("emb").to_pylist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    assert table.column("other").to_pylist() == [[1.5, 2.5], None]
    # an overwrite that reads the dataset back keeps its vector type without the option
    back = reader(spark, uri, "made_vectors").load()
    back.write.format("quiver").option("uri", uri).option("dataset", "made_vectors").mode(
        "overwrite"
    ).save()
    assert lance.dataset(str(root / "made_vectors.lance")).schema == ds.schema
    with pytest.raises(Exception, match="vector_columns"):
        df.write.format("quiver").option("uri", uri).option("dataset", "bad_vectors").option(
            "vector_columns", "emb"
        ).mode("append").save()


# --------------------------------------------------------------------------------------------
# Names, options, overflow


def test_append_matches_column_names_case_insensitively(spark, uri, root) -> None:
    with Client(uri) as qc:
        qc.write(
            "cased",
            pa.table({"c": pa.array([1], pa.int32()), "Name": pa.array(["a"])}),
            mode="create",
        )
    df = spark.createDataFrame([("b", 2)], "NAME STRING, C INT")
    df.write.format("quiver").option("uri", uri).option("dataset", "cased").mode("append").save()
    table = lance.dataset(str(root / "cased.lance")).to_table().sort_by("c")
    assert table.column_names == ["c", "Name"]
    assert table.to_pylist() == [{"c": 1, "Name": "a"}, {"c": 2, "Name": "b"}]


def test_unknown_and_malformed_options(spark, uri, root, types_dataset) -> None:
    with pytest.raises(Exception, match="unknown option 'colums'") as e:
        reader(spark, uri, "types").option("colums", "id").load()
    assert "columns" in str(e.value).split("knows:")[1]
    with pytest.raises(Exception, match="starting_version"):
        reader(spark, uri, "types").option("starting_version", "1").load().count()
    with pytest.raises(Exception, match="'timeout' option must be a number") as e:
        reader(spark, uri, "types").option("timeout", "abc").load()
    assert "abc" in str(e.value)
    df = spark.createDataFrame([(1,)], "id BIGINT")
    with pytest.raises(Exception, match="unknown option 'mode2'"):
        df.write.format("quiver").option("uri", uri).option("dataset", "x").option(
            "mode2", "a"
        ).mode("append").save()
    # options are case-insensitive, as everywhere in Spark; load("name") names the dataset
    assert reader(spark, uri, "types").option("COLUMNS", "id").load().columns == ["id"]
    by_path = spark.read.format("quiver").option("uri", uri).option("columns", "id")
    assert by_path.load("types").count() == lance.dataset(f"{root}/types.lance").count_rows()


def test_overflow_names_column_and_value(spark, uri, root) -> None:
    with Client(uri) as qc:
        qc.write(
            "narrow",
            pa.table(
                {"i": pa.array([1], pa.int32()), "u": pa.array([1], pa.uint8())},
            ),
            mode="create",
        )
    before = lance.dataset(str(root / "narrow.lance")).version
    big = spark.createDataFrame([(2, 3), (2**40, 4)], "i BIGINT, u SMALLINT").coalesce(1)
    with pytest.raises(Exception, match="column 'i'") as e:
        big.write.format("quiver").option("uri", uri).option("dataset", "narrow").mode(
            "append"
        ).save()
    assert str(2**40) in str(e.value) and "int32" in str(e.value)
    wide = spark.createDataFrame([(2, 300)], "i BIGINT, u SMALLINT")
    with pytest.raises(Exception, match="column 'u'") as e:
        wide.write.format("quiver").option("uri", uri).option("dataset", "narrow").mode(
            "append"
        ).save()
    assert "300" in str(e.value) and "uint8" in str(e.value)
    assert lance.dataset(str(root / "narrow.lance")).version == before
    fits = spark.createDataFrame([(2, 255)], "i BIGINT, u SMALLINT")
    fits.write.format("quiver").option("uri", uri).option("dataset", "narrow").mode("append").save()
    table = lance.dataset(str(root / "narrow.lance")).to_table()
    assert table.schema.field("u").type == pa.uint8()
    assert sorted(table.column("u").to_pylist()) == [1, 255]


def test_prefetching_reader_thread_raises_and_stops() -> None:
    import threading

    from quiver.clients.spark.batch import _prefetched

    def failing():
        yield 1
        yield 2
        raise RuntimeError("boom")

    it = _prefetched(failing())
    assert next(it) == 1 and next(it) == 2
    with pytest.raises(RuntimeError, match="boom"):
        next(it)

    closed = threading.Event()

    def endless():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()  # the task's client closes with its generator

    it = _prefetched(endless())
    assert [next(it) for _ in range(5)] == [0, 1, 2, 3, 4]
    it.close()  # Spark stops reading (a limit): the producer stops too
    assert closed.wait(5)
