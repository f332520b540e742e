"""AND / OR evaluate a term that could fail only on the rows that need it (issue 19, item 1).

pylance never evaluates the right of `a AND b` on a batch where `a` is false everywhere (and
evaluates it only on the matches where `a` is rarely true), so filters whose later terms
would fail on other rows answer there. Every filter pylance answers must answer the same
here; those that fail on a row pylance evaluates fail here too.
"""

from __future__ import annotations

import itertools

import lance
import pyarrow as pa
import pytest
from compare import assert_same_table

from quiver.format.dataset import dataset
from quiver.format.errors import InvalidInputError
from quiver.format.expr import compile_filter
from quiver.format.expr.plan import Junction, Leaf, Negation

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    n = 40
    table = pa.table(
        {
            "i": pa.array(range(n), pa.int64()),
            "s": [str(i) if i % 2 == 0 else "word" for i in range(n)],
            "tz": pa.array([1] * n, pa.int32()),  # never null
            "h": [None if i < 5 else i for i in range(n)],
            "d": pa.array([i % 4 for i in range(n)], pa.int32()),
        }
    )
    path = str(tmp_path_factory.mktemp("short") / "ds")
    lance.write_dataset(table, path, max_rows_per_file=20)
    return path


GUARDS = ["tz IS NULL", "i = 0", "i > 100", "i % 2 = 0", "h IS NULL", "i < 0 OR i = 38"]
FALLIBLE = ["CAST(s AS BIGINT) = -1", "CAST(s AS BIGINT) >= 0", "i / d > 2", "i % d = 1"]


def _filters() -> list[str]:
    out = ["tz IS NULL AND CAST(s AS BIGINT) = -1"]
    for g, f in itertools.product(GUARDS, FALLIBLE):
        out += [f"{g} AND {f}", f"NOT ({g}) OR {f}", f"({g} AND {f}) OR i = 3"]
        out += [f"NOT ({g} AND {f})", f"i >= 0 AND {g} AND {f}"]
    return out


@pytest.mark.parametrize("sql", _filters())
def test_filters_pylance_answers_answer_alike(uri: str, sql: str):
    try:
        expected = lance.dataset(uri).to_table(filter=sql)
    except (OSError, ValueError) as e:  # pylance evaluated a failing row
        assert "cast" in str(e).lower() or "divide" in str(e).lower(), e
        return
    assert_same_table(dataset(uri).to_table(filter=sql), expected, sql)
    assert dataset(uri).count_rows(sql) == expected.num_rows


def test_the_issues_filter_answers(uri: str):
    sql = "tz IS NULL AND CAST(s AS BIGINT) = -1"
    assert lance.dataset(uri).to_table(filter=sql).num_rows == 0
    assert dataset(uri).to_table(filter=sql).num_rows == 0
    # the first term is evaluated on every row, in pylance and here alike
    for failing in ("CAST(s AS BIGINT) = -1 AND tz IS NULL", "CAST(s AS BIGINT) = -1"):
        with pytest.raises(pa.ArrowInvalid, match="word"):
            lance.dataset(uri).to_table(filter=failing)
        with pytest.raises(InvalidInputError, match="word"):
            dataset(uri).to_table(filter=failing)


def test_plans_stage_only_terms_that_could_fail():
    schema = pa.schema([("a", pa.int64()), ("s", pa.string()), ("b", pa.int64())])
    assert compile_filter("a > 1 AND s = 'x' OR b IS NULL", schema).plan is None
    # a failing first term runs on every row in pylance too: nothing to stage
    assert compile_filter("CAST(s AS INT) = 1 AND a > 1", schema).plan is None
    assert compile_filter("a > 1 AND CAST(s AS INT) = 1", schema).plan is not None
    plan = compile_filter("a > 1 AND CAST(s AS INT) = 1 AND b < 3", schema).plan
    # the terms that cannot fail run first, together; the cast only where they hold
    assert isinstance(plan, Junction) and plan.conjunction and len(plan.terms) == 2
    assert all(isinstance(t, Leaf) for t in plan.terms)
    assert "cast" in str(plan.terms[1].expression)
    negated = compile_filter("NOT (a = 1 OR a / b = 2)", schema).plan
    assert isinstance(negated, Negation) and not negated.term.conjunction


def test_staged_evaluation_keeps_nulls_and_order(uri: str):
    sql = "(i = 32 AND CAST(s AS BIGINT) > 31) OR (h IS NULL AND i = 4) OR NOT (i >= 2)"
    expected = lance.dataset(uri).to_table(filter=sql, columns=["i", "h"])
    ours = dataset(uri).to_table(filter=sql, columns=["i", "h"])
    assert_same_table(ours, expected, sql)
    assert ours.column("i").to_pylist() == [0, 1, 4, 32]
