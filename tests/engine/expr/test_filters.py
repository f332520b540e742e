"""SQL filters compiled to Arrow expressions, checked row for row against pylance."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from quiver.format.errors import FilterBindError, FilterSyntaxError, InvalidInputError
from quiver.format.expr import CompiledFilter, apply_filter, compile_filter

pytestmark = pytest.mark.compat

NAN = float("nan")
INF = float("inf")


def _ts(*args: int) -> dt.datetime:
    return dt.datetime(*args)


def _table() -> pa.Table:
    """Ten rows covering every type a filter can touch, with nulls, NaN, -0.0 and unicode."""
    n = 10
    ts = [
        _ts(2024, 1, 1),
        _ts(2024, 1, 2, 3, 4, 5),
        None,
        _ts(2023, 12, 31, 23, 59, 59),
        _ts(2024, 1, 2, 3, 4, 5, 500000),
        _ts(2024, 1, 2, 8, 4, 5),
        _ts(1969, 12, 31, 23, 0, 0),
        _ts(2024, 6, 30, 12),
        _ts(2025, 1, 1),
        _ts(2024, 1, 2),
    ]
    struct_type = pa.struct(
        [
            ("a", pa.int32()),
            ("b", pa.struct([("c", pa.string()), ("d", pa.float64())])),
        ]
    )
    structs = [
        {"a": 1, "b": {"c": "x", "d": 1.5}},
        {"a": 2, "b": {"c": "y", "d": NAN}},
        None,
        {"a": None, "b": None},
        {"a": 5, "b": {"c": None, "d": -0.0}},
        {"a": 2, "b": {"c": "x", "d": 0.0}},
        {"a": -7, "b": {"c": "", "d": None}},
        {"a": 100, "b": {"c": "zz", "d": 2.0}},
        {"a": 0, "b": {"c": "ü", "d": -1.0}},
        {"a": 3, "b": {"c": "x", "d": 3.0}},
    ]
    dec = decimal.Decimal
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "i8": pa.array([1, -2, None, 127, 0, -128, 5, 5, None, 3], pa.int8()),
            "i16": pa.array([100, -300, 0, None, 32767, 1, 2, 3, 4, 5], pa.int16()),
            "i32": pa.array([10, 20, 30, None, -5, 0, 7, 10, 11, 12], pa.int32()),
            "i64": pa.array([100, None, 300, 2**40, -5, 7, 10, 0, 11, -(2**62)], pa.int64()),
            "u8": pa.array([0, 1, 255, None, 7, 8, 9, 10, 11, 12], pa.uint8()),
            "u32": pa.array([1, 2, 3, 4, 4294967295, None, 0, 10, 11, 12], pa.uint32()),
            "u64": pa.array([1, 2**63 + 5, 3, None, 0, 5, 6, 7, 8, 9], pa.uint64()),
            "f32": pa.array([1.5, None, NAN, -0.5, 2.0, -0.0, 0.0, INF, 10.0, 3.25], pa.float32()),
            "f64": pa.array([1.5, 2.5, NAN, None, -3.25, -0.0, 0.0, INF, -INF, 10.0]),
            "f64b": pa.array([1.5, 2.5, NAN, 1.0, -3.0, 0.0, -0.0, 1.0, NAN, None]),
            "s": pa.array(
                [
                    "apple",
                    "Banana",
                    "",
                    None,
                    "ünïcode_%",
                    "it's",
                    "a%b",
                    "back\\slash",
                    'say "hi"',
                    "Über",
                ]
            ),
            "ls": pa.array(
                ["a", "b", "c", "d", None, "apple", "", "Banana", "ü", "x"], pa.large_string()
            ),
            "b": pa.array([True, False, None, True, False, None, True, True, False, False]),
            "d": pa.array(
                [
                    dt.date(2024, 1, 1),
                    dt.date(2024, 1, 2),
                    None,
                    dt.date(2023, 12, 31),
                    dt.date(2024, 3, 1),
                    dt.date(1970, 1, 1),
                    dt.date(1969, 12, 31),
                    dt.date(2024, 1, 2),
                    dt.date(2100, 1, 1),
                    dt.date(2024, 2, 29),
                ],
                pa.date32(),
            ),
            "d64": pa.array(
                [dt.date(2024, 1, 1), None, *[dt.date(2024, 1, i) for i in range(2, 10)]],
                pa.date64(),
            ),
            "ts": pa.array(ts, pa.timestamp("us")),
            "ts_s": pa.array(
                [t.replace(microsecond=0) if t else None for t in ts], pa.timestamp("s")
            ),
            "ts_ms": pa.array(ts, pa.timestamp("ms")),
            "ts_ns": pa.array(ts, pa.timestamp("ns")),
            "tsz": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "tsny": pa.array(ts, pa.timestamp("us", tz="America/New_York")),
            "dec": pa.array(
                [
                    dec("1.23"),
                    dec("-4.50"),
                    None,
                    dec("100.00"),
                    dec("0.01"),
                    dec("0.00"),
                    dec("99999999.99"),
                    dec("2.00"),
                    dec("-0.01"),
                    dec("1.22"),
                ],
                pa.decimal128(10, 2),
            ),
            "bin": pa.array([b"a", b"b", None, b"", b"\x00", b"ab", b"a", b"z", b"\xff", b"x"]),
            "st": pa.array(structs, struct_type),
            "my col": pa.array([1, 2, 3, 4, 5, 6, 7, 8, 9, None], pa.int64()),
            "Name": pa.array(["x", "y", "z", "x", None, "X", "y", "", "x", "q"]),
            "CamelCase": pa.array([5, 6, 7, 5, 6, 7, 5, 6, 7, 5], pa.int32()),
        }
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[pa.Table, lance.LanceDataset]:
    table = _table()
    uri = tmp_path_factory.mktemp("filters") / "ds"
    lance.write_dataset(table, uri)
    ds = lance.dataset(uri)
    assert ds.schema == table.schema
    return table, ds


def _plain(value: object) -> object:
    """Python value with NaN made comparable (NaN != NaN would fail equal tables)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and value == 0.0:
        return ("zero", math.copysign(1.0, value))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _assert_same_table(got: pa.Table, expected: pa.Table) -> None:
    assert got.schema == expected.schema
    assert got.num_rows == expected.num_rows, (
        got.column("id").to_pylist(),
        expected.column("id").to_pylist(),
    )
    for name in expected.column_names:
        assert [_plain(v) for v in got.column(name).to_pylist()] == [
            _plain(v) for v in expected.column(name).to_pylist()
        ], name


# Filters pylance accepts; each must select exactly the rows pylance selects.
FILTERS = [
    # comparisons on every integer width, both operand orders, literals of the column type
    "i8 = 1",
    "i8 != 1",
    "i8 <> 1",
    "i8 == 5",
    "i8 >= -128",
    "-2 = i8",
    "10 < i32",
    "i16 <= 0",
    "i64 > 1000000",
    "i64 < -1",
    "u8 > 200",
    "u32 >= 4294967295",
    "u64 > 9223372036854775807",
    "u64 = 9223372036854775813",
    # NULL literals and three-valued logic
    "i32 = NULL",
    "NULL <> i32",
    "i32 = NULL OR TRUE",
    "i32 = NULL AND FALSE",
    "NOT (i32 = NULL)",
    "TRUE",
    "NOT FALSE",
    "1 = 1",
    # AND / OR / NOT / parentheses
    "i8 = 1 AND (i32 = 10 OR NOT b)",
    "(i8 = 5 OR i8 = 3) AND i32 > 7",
    "NOT (i8 > 0 AND b)",
    "b",
    "NOT b",
    "b = true",
    "b != false",
    "b AND i32 > 7 OR i8 IS NULL",
    # IS [NOT] NULL / TRUE / FALSE, IS [NOT] DISTINCT FROM
    "s IS NULL",
    "s IS NOT NULL",
    "f64 IS NULL",
    "st IS NULL",
    "st.a IS NULL",
    "b IS TRUE",
    "b IS FALSE",
    "b IS NOT TRUE",
    "b IS NOT FALSE",
    "i32 IS DISTINCT FROM 10",
    "i32 IS NOT DISTINCT FROM NULL",
    "f64 IS DISTINCT FROM f64b",
    # IN / NOT IN, with NULL in the list and non-literal items
    "i32 IN (10, 30)",
    "i32 NOT IN (10, 30)",
    "i32 IN (10, NULL)",
    "i32 NOT IN (10, NULL)",
    "i8 NOT IN (1, -2)",
    "s IN ('apple', 'Banana', NULL)",
    "ls IN ('a', 'c')",
    "st.a IN (2.0, 5)",
    "i32 IN (i64, 10)",
    "f64 IN (0, 1.5)",
    "f64 IN (CAST('NaN' AS DOUBLE))",
    "d IN (date '2024-01-02', date '2100-01-01')",
    "tsz IN (timestamp '2024-01-01 00:00:00', NULL)",
    "NOT (i8 IN (1, 1000))",
    # BETWEEN / NOT BETWEEN
    "i32 BETWEEN 10 AND 20",
    "i32 NOT BETWEEN 10 AND 20",
    "i32 BETWEEN 20 AND 10",
    "i32 BETWEEN 9 AND i64",
    "f64 BETWEEN -0.0 AND 0.0",
    "dec BETWEEN 0 AND 2",
    "d BETWEEN date '2024-01-01' AND date '2024-01-31'",
    "ts BETWEEN timestamp '2024-01-01' AND timestamp '2024-01-02 03:04:05'",
    # LIKE / NOT LIKE / ILIKE with % _ and backslash escapes
    "s LIKE 'a%'",
    "s LIKE '_pple'",
    "s NOT LIKE 'a%'",
    "s LIKE '%\\%'",
    "s LIKE 'a\\%b'",
    "s LIKE '%\\\\%'",
    "s ILIKE 'b%'",
    "s ILIKE 'ü%'",
    "s NOT ILIKE 'APPLE'",
    "ls LIKE '%a%'",
    "st.b.c LIKE 'x%'",
    "s LIKE NULL",
    # strings: quotes, empty, unicode, ordering
    "s = 'it''s'",
    's = "it\'s"',
    "s = 'say \"hi\"'",
    "s = 'back\\slash'",
    "s = ''",
    "s <> ''",
    "s > 'B'",
    "s < 'b'",
    "s = 'ünïcode_%'",
    '"apple" = s',
    "s || 'x' = 'applex'",
    "ls = 'apple'",
    # arithmetic, unary minus, integer division and remainder, mixed types
    "-i32 > 0",
    "i32 + 1 = 11",
    "i32 - -5 = 15",
    "i32 * 2.5 > 30",
    "i32 / 3 = 3",
    "i32 % 3 = 1",
    "i32 % -3 = 1",
    "(i32 + i8) * 2 > 30",
    "i8 + 127 > 0",
    "i8 * 2 > 200",
    "i32 > 1 + 2",
    "1 + 2 < i32",
    "f64 / 2 > 1",
    "f64 % 2 = 1.5",
    "u8 + 1 > 255",
    "i32 + 0.5 > 10",
    "dec * 2 > 2",
    "dec + 1.5 > 2",
    "dec / 3 > 0.4",
    # floats: NaN is largest and equals NaN; -0.0 == 0.0 against constants
    "f64 > 0",
    "f64 < 0",
    "f64 >= 0",
    "f64 = 0",
    "f64 != 0",
    "f64 = -0.0",
    "f64 != 1.5",
    "f64 = CAST('NaN' AS DOUBLE)",
    "f64 < CAST('NaN' AS DOUBLE)",
    "f64 > 1e300",
    "f32 > 1",
    "f32 = 1.5",
    "f32 <= 0",
    "f64 = f64b",
    "f64 < f64b",
    "f64 >= f64b",
    "i32 < f64",
    "st.b.d > 1",
    "st.b.d = 0",
    "isnan(f64)",
    # NaNs made by arithmetic carry a sign: 0/0 gives the CPU's default NaN (negative on
    # x86) and negation flips it; pylance sorts -NaN below every number
    "f64 / f64 > 1",
    "f64 / f64 < -1e300",
    "-f64 < -1e300",
    "f64b > -f64b",
    "-f64b = f64b",
    "f64 - f64 < 0",
    "f32 * 0 > 5",
    "(f64 + 1) * -1 > 0",
    # dates and timestamps: typed literals, units, time zones, date vs timestamp
    "d = date '2024-01-02'",
    "d > date '2024-01-01'",
    "d < timestamp '2024-01-02 00:00:01'",
    "d64 = date '2024-01-02'",
    "ts >= date '2024-01-02 03:04:05'",
    "ts = timestamp '2024-01-02 03:04:05'",
    "ts > date '2024-01-02'",
    "ts >= timestamp '2024-01-02T03:04:05.5'",
    "ts < timestamp '1970-01-01'",
    "ts_s = timestamp '2024-01-02 03:04:05.5'",
    "ts_ms > timestamp '2024-01-02 03:04:05.1'",
    "ts_ns >= timestamp '2024-01-02 03:04:05.000000001'",
    "ts_ms = ts_ns",
    "tsz = timestamp '2024-01-02 03:04:05'",
    "tsz > timestamp '2024-01-02T03:04:05Z'",
    "tsz = timestamp '2024-01-02T04:04:05+01:00'",
    "tsny = timestamp '2024-01-02 03:04:05'",
    "tsny > date '2024-01-02'",
    "tsny = tsz",
    "tsny = ts",
    "ts_ms < tsny",
    "CAST(tsny AS date) = date '2024-01-02'",
    # decimals
    "dec > 1",
    "dec = 100",
    "dec > -5",
    "dec <> 100",
    "dec IN (1, 100)",
    "dec * 2 = 2.46",
    "dec > CAST('1.22' AS decimal(5,2))",
    "CAST(dec AS double) > 1.2",
    # CAST and :: casts
    "CAST(i32 AS string) = '10'",
    "CAST(i32 AS double) / 4 = 2.5",
    "CAST(i32 AS decimal(5,1)) > 15",
    "CAST(s AS string) = 'apple'",
    "i32::bigint = 10",
    "CAST(u8 AS smallint) = 255",
    # DataFusion compares `CAST(x AS T) <op> constant` as x against the converted constant
    "CAST(dec AS INT) > 1",
    "CAST(dec AS INT) = 1",
    "CAST(dec AS INT) = 1.0",
    "CAST(u32 AS SMALLINT) IN (0, 1)",
    "CAST(u32 AS SMALLINT) BETWEEN 1 AND 1000",
    "0 < CAST(u32 AS SMALLINT)",
    "CAST(i32 AS TINYINT) = 1000",
    "CAST(ts_ms AS timestamp(0)) = timestamp '2024-01-02 03:04:05'",
    "CAST(ts_s AS timestamp(3)) = timestamp '2024-01-02 03:04:05.5'",
    "CAST(dec AS decimal(5,1)) = 1.2",
    "i64 < 1000 AND CAST(i64 AS INT) = 7",
    "CAST(tsny AS date) = date '2024-01-02'",
    "CAST(tsny AS timestamp) = timestamp '2024-01-02 03:04:05'",
    "CAST(i32 AS STRING) > '5'",
    # decimals meet floats: arithmetic in float64, comparisons in decimal
    "dec + f64b > 0",
    "dec > CAST(i32 AS DOUBLE)",
    "NOT (dec = 1.5)",
    # binary
    "bin = X'61'",
    "bin > X'61'",
    # nested struct fields, bracket access, quoted and case-insensitive names
    "st.a = 2",
    "st.b.c = 'x'",
    "st['a'] = 2",
    "st.b.d IS NULL",
    "`my col` = 2",
    "`my col` > 5",
    "Name = 'x'",
    "name = 'x'",
    "NAME = 'x'",
    "`Name` = 'x'",
    "CamelCase = 5",
    "camelcase = 6",
    "\"Name\" = 'x'",
    # pylance's literal resolution applies only from the root through AND/OR: elsewhere
    # DataFusion's looser coercion compares in a common type
    "NOT (i32 = 10.5)",
    "NOT (i32 = 10.0)",
    "NOT (d = '2024-01-02')",
    "NOT (ts > '2024-01-02')",
    "NOT (i32 = '10')",
    "NOT (i8 = 1000)",
    "(i32 = 10.0) IS TRUE",
    "i32 > i8 + 1.5",
    "i32 > CAST(2 AS INT) + 2.5",
    "10.5 + 1 > i32",
    "b = (i32 > 5)",
    "b = (1.5 > 5)",
    # functions
    "lower(s) = 'banana'",
    "upper(s) = 'ÜNÏCODE_%'",
    "length(s) = 9",
    "char_length(s) = 0",
    "abs(i32) = 5",
    "coalesce(i32, 0) = 0",
    "coalesce(s, 'zz') = 'zz'",
    "starts_with(s, 'B')",
    "ends_with(s, '%')",
    "contains(s, 'an')",
    "regexp_like(s, '^[ab]')",
    "regexp_match(s, 'an')",
    "NOT regexp_match(s, 'an')",
    "regexp_match(s, 'a.') IS NOT NULL",
    "regexp_match(s, '^a') IS NOT NULL",
    "regexp_match(s, 'e$') IS NULL",
    "regexp_match(s, '') IS NOT NULL",
    "regexp_match(s, 'A.', 'i') IS NOT NULL",
    "regexp_match(s, '(a)(n)') IS NOT NULL OR i32 > 5",
    "(regexp_match(s, 'an')) IS NULL",
    "NOT (regexp_match(s, 'an') IS NULL)",
    "is_valid(s)",
    "nullif(i32, 10) IS NULL",
]


@pytest.mark.parametrize("sql", FILTERS)
def test_filter_matches_pylance(data: tuple[pa.Table, lance.LanceDataset], sql: str) -> None:
    table, ds = data
    compiled = compile_filter(sql, table.schema)
    assert isinstance(compiled.expression, pc.Expression)
    _assert_same_table(table.filter(compiled.expression), ds.to_table(filter=sql))


# Filters pylance rejects (at planning or while scanning); ours must be refused at compile time.
REJECTED = [
    ("i32 = 10.5", FilterBindError),
    ("i32 = 10.0", FilterBindError),
    ("i32 > 1 + 2.5", FilterBindError),
    ("i32 > 2.5 - 1", FilterBindError),
    ("10.5 > i32", FilterBindError),
    ("i32 IN (i8 + 1.5)", FilterBindError),
    ("i32 BETWEEN 9.5 - 0.5 AND 20", FilterBindError),
    ("i8 = 1000", FilterBindError),
    ("i8 = 1 OR i8 = 1000", FilterBindError),
    ("i8 IN (1, 1000)", FilterBindError),
    ("u8 > -1", FilterBindError),
    ("i64 = 9999999999999999999", FilterBindError),
    ("s = 5", FilterBindError),
    ("s = true", FilterBindError),
    ("s IN ('apple', 5)", FilterBindError),
    ("b = 1", FilterBindError),
    ("d = '2024-01-02'", FilterBindError),
    ("d = 19723", FilterBindError),
    ("ts > '2024-01-02'", FilterBindError),
    ("tsz = '2024-01-02T03:04:05Z'", FilterBindError),
    ("dec = 1.23", FilterBindError),
    ("dec BETWEEN -4.5 AND 2", FilterBindError),
    ("st.a BETWEEN 1.5 AND 3", FilterBindError),
    ("st['a'] = 2.0", FilterBindError),
    ("bin = 'a'", FilterBindError),
    ("i32 LIKE '1%'", FilterBindError),
    ("NOT (s = 5)", FilterBindError),
    ("ts = timestamp 'garbage'", FilterBindError),
    ("-u8 = 1", FilterBindError),
    ("nope = 1", FilterBindError),
    ("`name` = 'x'", FilterBindError),
    ("st.zz = 1", FilterBindError),
    ("st.A = 1", FilterBindError),
    ("st.b.zz = 1", FilterBindError),
    ("i32.x = 1", FilterBindError),
    ("foo(i32) = 1", FilterBindError),
    ("NULL", FilterBindError),
    ("i32", FilterBindError),
    ("s", FilterBindError),
    ("i32 + 1", FilterBindError),
    ("i32 AND b", FilterBindError),
    ("i32 =", FilterSyntaxError),
    ("i32 IN ()", FilterSyntaxError),
    ("(i32 = 1", FilterSyntaxError),
    ("CASE WHEN i8 > 0 THEN true ELSE false END", FilterSyntaxError),
    ("s = 'unterminated", FilterSyntaxError),
]


@pytest.mark.parametrize(("sql", "error"), REJECTED)
def test_filter_rejected_like_pylance(
    data: tuple[pa.Table, lance.LanceDataset], sql: str, error: type[Exception]
) -> None:
    table, ds = data
    with pytest.raises(Exception):  # noqa: B017 - pylance raises ValueError or ArrowInvalid
        ds.to_table(filter=sql)
    with pytest.raises(error):
        compile_filter(sql, table.schema)


def test_unknown_column_message_names_it_and_lists_the_columns(data) -> None:
    table, _ = data
    with pytest.raises(FilterBindError) as info:
        compile_filter("i32 > 1 AND nope = 1", table.schema, dataset="sales")
    message = str(info.value)
    assert "'nope'" in message
    assert "'sales'" in message
    assert "i32 > 1 AND nope = 1" in message
    for name in ("i32", "my col", "CamelCase"):
        assert repr(name) in message
    assert isinstance(info.value, InvalidInputError)
    assert isinstance(info.value, ValueError)


def test_unknown_nested_field_message(data) -> None:
    table, _ = data
    with pytest.raises(FilterBindError) as info:
        compile_filter("st.b.zz = 'x'", table.schema, dataset="sales")
    message = str(info.value)
    assert "'zz'" in message and "'st.b'" in message and "'c'" in message
    assert "'sales'" in message


def test_type_mismatch_message(data) -> None:
    table, _ = data
    with pytest.raises(FilterBindError) as info:
        compile_filter("i32 = 10.5", table.schema)
    assert "'i32'" in str(info.value) and "10.5" in str(info.value)


def test_syntax_error_message_has_sql_and_position() -> None:
    schema = pa.schema([("x", pa.int64())])
    with pytest.raises(FilterSyntaxError) as info:
        compile_filter("x > 1 AND AND x < 3", schema, dataset="sales")
    message = str(info.value)
    assert "x > 1 AND AND x < 3" in message
    assert "column" in message and "'sales'" in message
    # pylance ignores trailing ORDER BY / LIMIT clauses; we refuse them
    for bad in ("", "   ", "x = 1; DROP TABLE t", "x > 1 y", "x = 1 ORDER BY x", "x = 1 LIMIT 2"):
        with pytest.raises(FilterSyntaxError):
            compile_filter(bad, schema)


def test_columns_are_top_level_in_schema_order(data) -> None:
    table, _ = data
    compiled = compile_filter("st.b.c = 'x' AND `my col` > 1 OR i8 IN (i32, 1)", table.schema)
    assert compiled.columns == ["i8", "i32", "st", "my col"]
    assert compiled.sql == "st.b.c = 'x' AND `my col` > 1 OR i8 IN (i32, 1)"
    assert compile_filter("name = 'x'", table.schema).columns == ["Name"]
    assert compile_filter("TRUE", table.schema).columns == []
    with pytest.raises(AttributeError):
        compiled.sql = "other"  # type: ignore[misc]


def test_record_batches_and_apply_filter(data) -> None:
    table, ds = data
    compiled = compile_filter("i32 > 7 AND s IS NOT NULL", table.schema)
    assert isinstance(compiled, CompiledFilter)
    expected = ds.to_table(filter=compiled.sql)
    batches = [b.filter(compiled.expression) for b in table.to_batches(max_chunksize=3)]
    _assert_same_table(pa.Table.from_batches(batches, table.schema), expected)
    batch = table.combine_chunks().to_batches()[0]
    assert isinstance(apply_filter(batch, compiled), pa.RecordBatch)
    _assert_same_table(pa.Table.from_batches([apply_filter(batch, compiled)]), expected)
    _assert_same_table(apply_filter(table, compiled), expected)


@pytest.mark.parametrize("sql", ["CAST(s AS INT) = 1", "dec > f64b", "i32 / 0 = 1"])
def test_errors_while_evaluating(data, sql: str) -> None:
    """Filters that compile but fail on these rows, in pylance too."""
    table, ds = data
    with pytest.raises(Exception):  # noqa: B017 - pylance raises ArrowInvalid or ValueError
        ds.to_table(filter=sql)
    compiled = compile_filter(sql, table.schema)
    with pytest.raises(InvalidInputError, match=re.escape(sql)):
        apply_filter(table, compiled)


def test_zero_divisor_and_narrowing_cast_give_null_not_an_error(data) -> None:
    """pylance may skip such rows (its AND/OR short-circuit a whole batch); we make NULL."""
    table, _ = data
    guarded = compile_filter("i64 <> 0 AND i32 / i64 = 0", table.schema)
    assert table.filter(guarded.expression).column("id").to_pylist() == [0, 2, 5, 6, 9]
    modulo = compile_filter("i64 = 0 OR i32 % i64 = 0", table.schema)
    assert table.filter(modulo.expression).column("id").to_pylist() == [4, 5, 7, 8]
    narrowed = compile_filter("CAST(i64 AS INT) + 0 IS NULL", table.schema)
    assert table.filter(narrowed.expression).column("id").to_pylist() == [1, 3, 9]


def test_empty_table_and_dictionary_column() -> None:
    values = pa.array(["a", "b", None, "a"]).dictionary_encode()
    table = pa.table({"k": values, "v": [1, 2, 3, 4]})
    compiled = compile_filter("k = 'a' AND v > 1", table.schema)
    assert table.filter(compiled.expression).column("v").to_pylist() == [4]
    empty = table.schema.empty_table()
    assert empty.filter(compiled.expression).num_rows == 0


def test_incomplete_filter_message_names_no_parser_internals():
    with pytest.raises(FilterSyntaxError) as err:
        compile_filter("x >", pa.schema([("x", pa.int64())]))
    assert "an operand is missing" in str(err.value)
    assert "sqlglot" not in str(err.value) and "class" not in str(err.value)


HALF_FILTERS = [
    "h > 0.5",
    "h = 0.1",
    "h < 0.1",
    "h >= 0.1",
    "h = 0.3333",
    "h > 0",
    "h = -0.0",
    "h < 1",
    "h > 65519",
    "h > 2.99e-8",
    "h IN (0.5, 1)",
    "h BETWEEN 0 AND 0.75",
    "NOT h > 0.5",
    "h != 0.1",
]
HALF_REJECTED = ["h > 70000", "h < -65520", "h = 1e-8", "h > 2.9e-8", "h > 1e10"]


def test_float16_compares_with_number_literals_like_pylance(tmp_path) -> None:
    import numpy as np

    values = [0.1, 1 / 3, 0.5, 0.75, 65504, INF, -0.0, 0.0, 6e-8, NAN, -2.0, 1.0]
    table = pa.table(
        {"h": pa.array(np.array(values, np.float16)), "i": pa.array(range(12), pa.int32())}
    )
    ds = lance.write_dataset(table, str(tmp_path / "half"))
    for sql in HALF_FILTERS:
        expected = ds.to_table(filter=sql)
        _assert_same_table(table.filter(compile_filter(sql, table.schema).expression), expected)
    for sql in HALF_REJECTED:
        with pytest.raises(Exception):  # noqa: B017 - pylance raises ValueError
            ds.to_table(filter=sql)
        with pytest.raises(FilterBindError, match="'h' of type halffloat"):
            compile_filter(sql, table.schema)


def test_compiled_filters_are_reused_and_unhashable_schemas_still_compile():
    """A filter is compiled once per (filter, schema, dataset) and then reused (a server
    compiles the same filter for every endpoint); a schema with an extension type Arrow
    cannot hash (pylance's blob column) is compiled each time instead of failing."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string())])
    first = compile_filter("id > 1 AND s = 'a'", schema)
    assert compile_filter("id > 1 AND s = 'a'", schema) is first
    assert compile_filter("id > 1 AND s = 'a'", schema, dataset="other") is not first
    wider = pa.schema([*schema, pa.field("x", pa.float64())])
    assert compile_filter("id > 1 AND s = 'a'", wider) is not first
    with_blob = pa.schema([*schema, lance.blob_field("b")])
    compiled = compile_filter("id > 1", with_blob)
    assert compiled.columns == ["id"]
    table = pa.table({"id": [0, 2, 3], "s": ["a", "a", "b"]})
    assert apply_filter(table, compiled).column("id").to_pylist() == [2, 3]
    with pytest.raises(FilterBindError):
        compile_filter("b > 1 AND nope = 2", with_blob)
