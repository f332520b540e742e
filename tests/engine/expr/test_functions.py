"""DataFusion's functions that pylance accepts (issue 19, item 5), compared with pylance:
as SQL projections (values, types, nulls), in filters, and through add_columns."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from compare import assert_same_table

from quiver.format.dataset import dataset
from quiver.format.errors import FilterBindError, FilterSyntaxError

pytestmark = pytest.mark.compat


def _table() -> pa.Table:
    return pa.table(
        {
            "i": pa.array([1, -2, None, 7, 0], pa.int32()),
            "g": pa.array([10, 3, 4, None, 1], pa.int64()),
            "f": [1.25, -2.5, None, float("nan"), 0.5],
            "f32": pa.array([1.5, 2.5, None, 4.0, -0.5], pa.float32()),
            "s": ["abc", "Hello World", None, "a,b,c", "ünïcode ï"],
            "t": ["x", None, "z", "w", ""],
            "d": pa.array(
                [dt.date(2024, 3, 15), dt.date(1969, 12, 31), None, dt.date(2000, 2, 29)]
                + [dt.date(2024, 12, 30)]
            ),
            "ts": pa.array(
                [
                    dt.datetime(2024, 3, 15, 13, 45, 30, 123456),
                    dt.datetime(1969, 12, 31, 23, 59, 59),
                    None,
                    dt.datetime(2000, 2, 29),
                    dt.datetime(2024, 12, 30, 1, 2, 3),
                ],
                pa.timestamp("us"),
            ),
            "l": pa.array([[1, 2, 3], [], None, [4, None], [2, 2]], pa.list_(pa.int64())),
            "ls": pa.array([["a", "b"], ["c"], None, [], [None, "a"]], pa.list_(pa.string())),
        }
    )


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("functions") / "ds")
    lance.write_dataset(_table(), path)
    return path


VALUES = [
    # math
    "round(f)",
    "round(f, 1)",
    "round(f, -1)",
    "round(i)",
    "round(f32)",
    "sqrt(f)",
    "sqrt(i)",
    "trunc(f)",
    "power(i, 2)",
    "power(f, 0.5)",
    "exp(i)",
    "ln(f)",
    "log10(g)",
    "log2(g)",
    "log(g)",
    "signum(f)",
    "abs(f)",
    "greatest(i, g)",
    "least(f, 0.0)",
    "greatest(f, 0.0)",
    # strings
    "concat(s, t)",
    "concat(s, i, f)",
    "concat(t)",
    "concat_ws('-', s, t)",
    "concat_ws(',', i, s)",
    "replace(s, 'l', 'L')",
    "reverse(s)",
    "strpos(s, 'l')",
    "strpos(s, 'ï')",
    "btrim(s, 'a')",
    "ltrim(t)",
    "rtrim(s, 'c')",
    "left(s, 2)",
    "right(s, 2)",
    "left(s, -2)",
    "right(s, -2)",
    "lpad(s, 5, 'x')",
    "rpad(t, 3, '.')",
    "repeat(s, 2)",
    "initcap(s)",
    "split_part(s, ',', 2)",
    "split_part(s, ',', 4)",
    "regexp_replace(s, 'l+', 'L')",
    "regexp_replace(s, 'l', 'L', 'g')",
    "octet_length(s)",
    "regexp_match(s, '(l+)')",
    "regexp_match(s, 'l+')",
    "regexp_match(s, '(H)(e)')",
    # times
    "date_trunc('month', ts)",
    "date_trunc('month', d)",
    "date_trunc('week', ts)",
    "date_trunc('day', ts)",
    "date_part('year', d)",
    "date_part('month', ts)",
    "date_part('epoch', ts)",
    "date_part('epoch', d)",
    "date_part('dow', d)",
    "date_part('doy', d)",
    "date_part('week', d)",
    "date_part('quarter', d)",
    "date_part('second', ts)",
    "date_part('millisecond', ts)",
    "CAST(d AS BIGINT)",
    "CAST(d AS INT)",
    "CAST(ts AS BIGINT)",
    # lists
    "array_has_any(l, [1, 5])",
    "array_has_all(l, [1, 2])",
    "array_has_all(l, [2])",
    "array_contains(l, 4)",
    "array_has(ls, 'a')",
    "array_length(l)",
    "cardinality(ls)",
]


@pytest.mark.parametrize("sql", VALUES)
def test_projection_matches_pylance(uri: str, sql: str):
    expected = lance.dataset(uri).to_table(columns={"r": sql})
    assert_same_table(dataset(uri).to_table(columns={"r": sql}), expected, sql)


FILTERS = [
    "round(f, 1) = 1.3",
    "sqrt(g) > 2",
    "strpos(s, 'l') > 0",
    "concat(s, t) = 'abcx'",
    "reverse(s) LIKE 'c%'",
    "date_part('year', d) = 2024",
    "date_trunc('month', ts) = TIMESTAMP '2024-03-01 00:00:00'",
    "array_has_any(l, [1, 4])",
    "array_has_all(l, [2, 3]) OR i = 7",
    "array_contains(l, 2) AND strpos(s, 'b') = 2",
    "CAST(d AS BIGINT) > 0",
    "regexp_match(s, 'l+')",
    "greatest(i, g) >= 7",
]


@pytest.mark.parametrize("sql", FILTERS)
def test_filter_matches_pylance(uri: str, sql: str):
    expected = lance.dataset(uri).to_table(filter=sql)
    assert expected.num_rows > 0, sql
    assert_same_table(dataset(uri).to_table(filter=sql), expected, sql)


def test_add_columns_matches_pylance(tmp_path: Path):
    added = {
        "a": "round(f, 1)",
        "b": "concat(s, '!')",
        "c": "date_part('month', d)",
        "e": "regexp_match(s, '(l+)')",
        "h": "array_has_any(l, [3])",
        "k": "left(s, 2)",
    }
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    lance.write_dataset(_table(), ours)
    lance.write_dataset(_table(), ref)
    dataset(ours).add_columns(added)
    lance.dataset(ref).add_columns(added)
    expected = lance.dataset(ref).to_table()
    assert_same_table(lance.dataset(ours).to_table(), expected, "pylance reading ours")
    assert_same_table(dataset(ours).to_table(), expected, "ours")


def test_stricter_than_pylance_where_arguments_must_be_constants(uri: str):
    """Known limits: lengths and fills that vary by row, fills of several characters."""
    for sql in ("left(s, i)", "lpad(s, 4, 'ab')"):
        lance.dataset(uri).to_table(columns={"r": sql})  # pylance answers
        with pytest.raises((FilterBindError, FilterSyntaxError)):
            dataset(uri).to_table(columns={"r": sql})


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("round(s)", FilterBindError),
        ("date_part('fortnight', d)", FilterBindError),
        ("array_has_any(s, [1])", FilterBindError),
        ("no_such_function(i)", FilterBindError),
    ],
)
def test_bad_calls_are_refused_by_both(uri: str, sql: str, error: type):
    with pytest.raises((ValueError, OSError)):
        lance.dataset(uri).to_table(columns={"r": sql})
    with pytest.raises(error):
        dataset(uri).to_table(columns={"r": sql})


def test_functions_pylance_refuses_are_refused(uri: str):
    for sql in ("ceil(f)", "floor(f)", "substr(s, 2, 3)", "trim(s)", "CASE WHEN i > 0 THEN 1 END"):
        with pytest.raises(ValueError, match="not supported"):
            lance.dataset(uri).to_table(columns={"r": sql})
        with pytest.raises(FilterSyntaxError, match="not supported"):
            dataset(uri).to_table(columns={"r": sql})


@pytest.mark.parametrize(
    "sql", ["top", "(top)", "c0.f0", "c0['f0']", "c0.f1", "upper(c0.f0) = 'X'", "c0.f0 = 'y'"]
)
def test_a_dictionary_column_projected_as_it_is_stays_encoded(tmp_path: Path, sql: str) -> None:
    """A projection or new column that is only a reference to a dictionary-encoded column
    (nested ones too) keeps its dictionary type, as pylance's does; one that computes with it
    sees its values."""
    words = pa.array(["x", "y", "x", None]).dictionary_encode()
    c0 = pa.StructArray.from_arrays([words, pa.array([1, 2, 3, 4])], names=["f0", "f1"])
    uri = str(tmp_path / "d.lance")
    lance.write_dataset(pa.table({"top": words, "c0": c0}), uri)
    expected = lance.dataset(uri).to_table(columns={"r": sql})
    assert_same_table(dataset(uri).to_table(columns={"r": sql}), expected, sql)
    twin = str(tmp_path / "twin.lance")
    lance.write_dataset(pa.table({"top": words, "c0": c0}), twin)
    lance.dataset(uri).add_columns({"r": sql})
    dataset(twin).add_columns({"r": sql})
    assert_same_table(lance.dataset(twin).to_table(), lance.dataset(uri).to_table(), sql)
