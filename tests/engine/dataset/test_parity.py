"""Operations where our engine once differed from pylance (issue 13), run through both.

Each test applies the same operation with pylance and with our engine and compares the
results (values, types, nulls) and pylance's view of the dataset our engine wrote.
"""

from __future__ import annotations

import decimal
import re
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from compare import assert_same_table

from quiver.format.dataset import dataset, write_dataset
from quiver.format.errors import ColumnNotFoundError, InvalidInputError, SchemaMismatchError


def test_take_across_fragments_with_different_null_holding_dictionaries(tmp_path: Path):
    first = pa.table({"d": pa.array(["a", None, "b", "a"]).dictionary_encode(), "i": range(4)})
    second = pa.table({"d": pa.array(["x", "y", None, "x"]).dictionary_encode(), "i": range(4, 8)})
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    write_dataset(first, ours, data_storage_version="2.0")
    write_dataset(second, ours, mode="append")
    lance.write_dataset(first, ref, data_storage_version="2.0")
    lance.write_dataset(second, ref, mode="append")
    for indices in ([0, 3], [0, 3, 5, 6], [6, 1, 4]):
        expected = lance.dataset(ref).take(indices)
        assert expected.column("d").null_count > 0 or indices == [0, 3]
        assert_same_table(dataset(ours).take(indices), expected, f"ours take {indices}")
        assert_same_table(dataset(ref).take(indices), expected, f"theirs take {indices}")
        assert_same_table(lance.dataset(ours).take(indices), expected, f"pylance on ours {indices}")


def _float_and_time_table() -> pa.Table:
    rng = np.random.default_rng(13)
    special = [1.0, float("nan"), -0.0, 0.0, 1e20, 1e15, 1e16, 1e13, 1e-5, 1e-6, 1e-7, None]
    special += [float("inf"), -float("inf"), 123456789.0, 5e-324, -2.5e-5, 1.5e300]
    rand = (rng.standard_normal(200) * 10.0 ** rng.integers(-12, 22, 200)).tolist()
    floats = special + rand
    n = len(floats)
    ns = rng.integers(-(10**18), 2 * 10**18, n)
    ns[::3] -= ns[::3] % 1_000_000_000  # whole seconds
    ns[1::3] -= ns[1::3] % 1_000_000  # whole milliseconds
    return pa.table(
        {
            "f": pa.array(floats, pa.float64()),
            "g": pa.array(floats, pa.float64()).cast(pa.float32(), safe=False),
            "ts": pa.array(ns // 1000, pa.timestamp("us")),
            "tn": pa.array(ns, pa.timestamp("ns")),
            "tz": pa.array(ns // 10**6, pa.timestamp("ms", "Asia/Kolkata")),
            "tu": pa.array(ns // 10**9, pa.timestamp("s", "UTC")),
        }
    )


def test_casts_of_floats_and_timestamps_to_strings_spell_as_pylance(tmp_path: Path):
    table = _float_and_time_table()
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    write_dataset(table, ours)
    lance.write_dataset(table, ref)
    added = {f"{c}_s": f"CAST({c} AS STRING)" for c in table.column_names}
    dataset(ours).add_columns(added)
    lance.dataset(ref).add_columns(added)
    expected = lance.dataset(ref).to_table()
    assert expected.column("f_s")[0].as_py() == "1.0"
    assert_same_table(dataset(ours).to_table(), expected, "ours after add_columns")
    assert_same_table(lance.dataset(ours).to_table(), expected, "pylance on ours")
    for text in ("1.0", "NaN", "-0.0", "1e20", "1000000000000000.0", "1e16", "1e-7", "1e15"):
        for column in ("f", "g"):
            filt = f"CAST({column} AS STRING) = '{text}'"
            assert dataset(ref).count_rows(filt) == lance.dataset(ref).count_rows(filt), filt
    some = expected.column("tn_s")[5].as_py()
    filt = f"CAST(tn AS STRING) = '{some}' OR CAST(1e20 AS STRING) = '1e20'"
    assert dataset(ref).count_rows(filt) == lance.dataset(ref).count_rows(filt) == len(table)


def _same_on_both(ours: str, ref: str, what: str, columns: list[str] | None = None) -> None:
    """pylance reads our dataset as it reads its own, and so do we."""
    expected = lance.dataset(ref).to_table(columns=columns)
    assert_same_table(lance.dataset(ours).to_table(columns=columns), expected, f"{what}: pylance")
    assert_same_table(dataset(ours).to_table(columns=columns), expected, f"{what}: ours")


def test_column_changes_update_row_versions_with_stable_row_ids(tmp_path: Path):
    table = pa.table({"i": pa.array(range(10), pa.int32()), "s": [str(x) for x in range(10)]})
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    for uri in (ours, ref):
        lance.write_dataset(table, uri, enable_stable_row_ids=True, max_rows_per_file=4)
        lance.dataset(uri).delete("i = 2")
        lance.write_dataset(table, uri, mode="append")
    versions = ["i", "_row_last_updated_at_version", "_row_created_at_version"]
    steps = [
        ("add_columns", lambda d: d.add_columns({"j": "i * 2"})),
        ("add null column", lambda d: d.add_columns(pa.field("z", pa.float64()))),
        ("rename", lambda d: d.alter_columns({"path": "s", "name": "t"})),
        ("cast", lambda d: d.alter_columns({"path": "i", "data_type": pa.int64()})),
    ]
    for what, step in steps:
        step(dataset(ours))
        step(lance.dataset(ref))
        _same_on_both(ours, ref, what)
        expected = lance.dataset(ref).to_table(columns=versions)  # we don't read these columns
        assert_same_table(lance.dataset(ours).to_table(columns=versions), expected, what)
    assert set(lance.dataset(ref).to_table(columns=versions)[1].to_pylist()) == {7}


def test_new_column_files_of_legacy_fragments_line_up_with_their_row_groups(tmp_path: Path):
    table = pa.table({"i": pa.array(range(45), pa.int32()), "s": [str(x) for x in range(45)]})
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    for uri in (ours, ref):
        lance.write_dataset(
            table, uri, data_storage_version="legacy", max_rows_per_group=10, max_rows_per_file=25
        )
        lance.dataset(uri).delete("i = 3")
    steps = [
        ("add_columns", lambda d: d.add_columns({"j": "i * 2"})),
        ("cast", lambda d: d.alter_columns({"path": "j", "data_type": pa.int32()})),
    ]
    for what, step in steps:
        step(dataset(ours))
        step(lance.dataset(ref))
        _same_on_both(ours, ref, what)
        for filt in ("j > 10", "i < 12 AND j % 4 = 0"):
            expected = lance.dataset(ref).to_table(filter=filt)
            assert expected.num_rows > 0
            assert_same_table(lance.dataset(ours).to_table(filter=filt), expected, filt)
            assert lance.dataset(ours).count_rows(filt) == expected.num_rows
    lance.dataset(ours).delete("j = 40")
    lance.dataset(ref).delete("j = 40")
    _same_on_both(ours, ref, "pylance's delete")


def test_restore_brings_back_the_restored_versions_indices(tmp_path: Path):
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    for uri in (ours, ref):
        lance.write_dataset(pa.table({"id": pa.array(range(100), pa.int64())}), uri)
        lance.dataset(uri).delete("id < 50")
        lance.dataset(uri).create_scalar_index("id", "BTREE")
    dataset(ours, version=1).restore()
    lance.dataset(ref, version=1).restore()
    assert lance.dataset(ours).list_indices() == lance.dataset(ref).list_indices() == []
    for filt in ("id < 10", "id >= 40 AND id < 60"):
        expected = lance.dataset(ref).count_rows(filt)
        assert lance.dataset(ours).count_rows(filt) == expected == dataset(ours).count_rows(filt)
    _same_on_both(ours, ref, "restored")
    # restoring a version that has the index brings it back
    dataset(ours, version=3).restore()
    lance.dataset(ref, version=3).restore()
    names = [i["name"] for i in lance.dataset(ours).list_indices()]
    assert names == [i["name"] for i in lance.dataset(ref).list_indices()] == ["id_idx"]
    assert lance.dataset(ours).count_rows("id < 60") == lance.dataset(ref).count_rows("id < 60")


@pytest.mark.parametrize(
    ("first", "second"),
    [("2.0", None), ("legacy", None), ("2.1", None), ("2.0", "2.1"), ("2.1", "2.0")],
)
def test_overwrite_keeps_the_storage_version_unless_given(
    tmp_path: Path, first: str, second: str | None
):
    table = pa.table({"a": pa.array([1, None, 3], pa.int64()), "s": ["x", "y", None]})
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    kwargs = {} if second is None else {"data_storage_version": second}
    for uri in (ours, ref):
        lance.write_dataset(table, uri, data_storage_version=first)
    write_dataset(table.slice(1), ours, mode="overwrite", **kwargs)
    lance.write_dataset(table.slice(1), ref, mode="overwrite", **kwargs)
    expected = lance.dataset(ref).data_storage_version
    assert expected == (second or ("0.1" if first == "legacy" else first))
    assert lance.dataset(ours).data_storage_version == expected
    assert dataset(ours).data_storage_version == expected
    _same_on_both(ours, ref, "overwritten")


@pytest.mark.parametrize(
    ("sql", "fails"),
    [
        ("CAST(i AS TINYINT)", True),
        ("CAST(i AS TINYINT) + 1", True),
        ("CAST(f AS INT)", True),
        ("CAST(g AS INT)", True),
        ("i / (j - 1)", True),
        ("i % 0", True),
        ("CAST(j AS TINYINT)", False),
        ("CAST(k AS INT)", False),
        ("CAST(k AS SMALLINT) * 2", False),
    ],
)
def test_add_columns_fails_where_a_row_cannot_be_computed(tmp_path: Path, sql: str, fails: bool):
    table = pa.table(
        {
            "i": pa.array([1, 300, None], pa.int64()),
            "j": pa.array([1, 2, 3], pa.int64()),
            "f": [1.5, 1e10, None],
            "g": [1.5, -2.5, float("nan")],
            "k": [1.5, -2.7, None],
        }
    )
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    for uri in (ours, ref):
        lance.write_dataset(table, uri)
    if fails:
        with pytest.raises(OSError):
            lance.dataset(ref).add_columns({"x": sql})
        with pytest.raises(InvalidInputError, match=rf"{re.escape(ours)}: cannot add .*'x'"):
            dataset(ours).add_columns({"x": sql})
        assert dataset(ours).version == lance.dataset(ref).version == 1
    else:
        lance.dataset(ref).add_columns({"x": sql})
        dataset(ours).add_columns({"x": sql})
    _same_on_both(ours, ref, sql)


@pytest.mark.parametrize("stable", [False, True])
def test_take_returns_row_id_columns_named_in_columns(tmp_path: Path, stable: bool):
    table = pa.table({"id": pa.array(range(10), pa.int64()), "s": [str(x) for x in range(10)]})
    uri = str(tmp_path / "ds")
    lance.write_dataset(table, uri, max_rows_per_file=4, enable_stable_row_ids=stable)
    lance.dataset(uri).delete("id = 1")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=100)
    for columns in (["id", "_rowid"], ["_rowid", "id"], ["_rowaddr", "s"], ["_rowid"]):
        for indices in ([0, 5, 1], []):
            expected = lance.dataset(uri).take(indices, columns=columns)
            got = dataset(uri).take(indices, columns=columns)
            assert_same_table(got, expected, f"take {indices} {columns}")
    ids = lance.dataset(uri).take([8], columns=["_rowid", "_rowaddr"]).to_pylist()[0]
    assert (ids["_rowid"] != ids["_rowaddr"]) == stable


@pytest.mark.parametrize("version", ["2.0", "2.1"])
def test_append_without_nullable_columns_reads_them_as_null(tmp_path: Path, version: str):
    schema = pa.schema(
        [
            pa.field("a", pa.int64(), nullable=False),
            pa.field("b", pa.string()),
            pa.field("st", pa.struct([("x", pa.int32())])),
            pa.field("c", pa.float64()),
        ]
    )
    table = pa.table(
        {"a": [1, 2], "b": ["x", "y"], "st": [{"x": 1}, {"x": None}], "c": [1.0, 2.0]},
        schema=schema,
    )
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    for uri in (ours, ref):
        lance.write_dataset(table, uri, data_storage_version=version)
    partial = pa.table({"c": [3.5, None], "a": pa.array([3, 4], pa.int64())})
    write_dataset(partial, ours, mode="append")
    lance.write_dataset(partial, ref, mode="append")
    _same_on_both(ours, ref, "appended without b and st")
    assert lance.dataset(ref).to_table().column("b").null_count == 2
    for filt in ("b IS NULL", "c > 2", "st.x IS NULL"):
        assert dataset(ours).count_rows(filt) == lance.dataset(ref).count_rows(filt), filt
    # a non-nullable column can't be left out, by either engine
    with pytest.raises(OSError, match="missing"):
        lance.write_dataset(pa.table({"b": ["z"]}), ref, mode="append")
    with pytest.raises(SchemaMismatchError, match=rf"{re.escape(ours)}: missing columns a\b"):
        write_dataset(pa.table({"b": ["z"]}), ours, mode="append")


def test_append_without_a_column_is_refused_on_legacy_datasets(tmp_path: Path):
    # pylance appends, then can't read the dataset ("Fragment 0 does not contain field")
    uri = str(tmp_path / "ds")
    write_dataset(pa.table({"a": [1], "b": ["x"]}), uri, data_storage_version="legacy")
    with pytest.raises(SchemaMismatchError, match="missing columns b"):
        write_dataset(pa.table({"a": [2]}), uri, mode="append")
    assert dataset(uri).version == 1


DECIMAL_EXPRESSIONS = [
    "d / 3",
    "d * 3",
    "d + 3",
    "d % 3",
    "d / e",
    "e / d",
    "d * e",
    "d - e",
    "d % e",
    "d / i",
    "i / e",
    "w / e",
    "w * e",
    "w + e",
    "d * d * d",
]


def test_decimal_arithmetic_types_and_values_follow_pylance(tmp_path: Path):
    dec = decimal.Decimal
    table = pa.table(
        {
            "d": pa.array(
                [dec("10.00"), dec("-7.55"), None, dec("1234567890.12"), dec("0.01")],
                pa.decimal128(12, 2),
            ),
            "e": pa.array(
                [dec("3.125"), dec("0.001"), dec("1.000"), dec("-2.500"), dec("-3.000")],
                pa.decimal128(5, 3),
            ),
            "w": pa.array([dec("1.5"), dec("-1"), dec("0"), None, dec("7")], pa.decimal128(38, 10)),
            "i": pa.array([3, 7, 1, -2, None], pa.int32()),
        }
    )
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    for uri in (ours, ref):
        lance.write_dataset(table, uri)
    added = {f"x{k}": sql for k, sql in enumerate(DECIMAL_EXPRESSIONS)}
    dataset(ours).add_columns(added)
    lance.dataset(ref).add_columns(added)
    assert lance.dataset(ref).schema.field("x0").type == pa.decimal128(18, 6)
    _same_on_both(ours, ref, "decimal arithmetic")
    for filt in ("d / e > 3.2", "e / d < 0", "d / 3 = 3.333333", "w + e > 4"):
        assert dataset(ref).count_rows(filt) == lance.dataset(ref).count_rows(filt), filt


def test_casting_an_indexed_column_is_refused(tmp_path: Path):
    table = pa.table({"id": pa.array(range(100), pa.int32()), "s": [str(i) for i in range(100)]})
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    for uri in (ours, ref):
        lance.write_dataset(table, uri).create_scalar_index("id", "BTREE")
    cast = {"path": "id", "data_type": pa.int64()}
    with pytest.raises(OSError, match="index"):
        lance.dataset(ref).alter_columns(cast)
    with pytest.raises(InvalidInputError, match=rf"{re.escape(ours)}: cannot cast .*'id'.*id_idx"):
        dataset(ours).alter_columns(cast)
    assert lance.dataset(ours).version == 2
    # renaming it, or casting another column, is fine (the index follows the rename)
    for alteration in (
        {"path": "id", "name": "ident"},
        {"path": "s", "data_type": pa.large_string()},
    ):
        dataset(ours).alter_columns(alteration)
        lance.dataset(ref).alter_columns(alteration)
        _same_on_both(ours, ref, str(alteration))
    indices = [(i["name"], i["fields"]) for i in lance.dataset(ours).list_indices()]
    assert indices == [(i["name"], i["fields"]) for i in lance.dataset(ref).list_indices()]
    assert lance.dataset(ours).count_rows("ident < 10") == 10


def test_nested_fields_named_by_path_come_out_as_columns(tmp_path: Path):
    struct = pa.struct(
        [("a", pa.int64()), ("b", pa.string()), ("c", pa.struct([("d", pa.float64())]))]
    )
    rows = [{"a": 1, "b": "x", "c": {"d": 1.5}}, {"a": 2, "b": "y", "c": None}, None]
    table = pa.table({"id": [1, 2, 3], "st": pa.array(rows, struct)})
    uri = str(tmp_path / "ds")
    lance.write_dataset(table, uri, data_storage_version="2.1", max_rows_per_file=2)
    for columns in (
        ["st.a"],
        ["id", "st.a", "st.b"],
        ["st.c.d"],
        ["st.a", "st"],
        ["st", "_rowid", "st.c"],
    ):
        for filt in (None, "id > 1"):
            expected = lance.dataset(uri).to_table(columns=columns, filter=filt)
            got = dataset(uri).to_table(columns=columns, filter=filt)
            assert_same_table(got, expected, f"{columns} {filt}")
    for bad in ("st.zz", "id.a", "nope.a"):
        with pytest.raises(ValueError):
            lance.dataset(uri).to_table(columns=[bad])
        with pytest.raises(ColumnNotFoundError, match=re.escape(f"{uri}: no column {bad!r}")):
            dataset(uri).to_table(columns=[bad])


def test_batches_hold_batch_size_live_rows_per_fragment(tmp_path: Path):
    table = pa.table({"i": pa.array(range(100), pa.int64()), "s": [str(i) for i in range(100)]})
    uri = str(tmp_path / "ds")
    lance.write_dataset(table, uri, max_rows_per_file=30)
    lance.dataset(uri).delete("i % 7 = 3")
    cases = [
        {"batch_size": 7},
        {"batch_size": 7, "columns": ["s", "i"]},
        {"batch_size": 7, "limit": 20, "offset": 3},
        {"batch_size": 7, "offset": 24},
        {"batch_size": 4, "with_row_id": True},
        {"batch_size": 50},
    ]
    for kwargs in cases:
        expected = list(lance.dataset(uri).to_batches(**kwargs))
        got = list(dataset(uri).to_batches(**kwargs))
        assert [b.num_rows for b in got] == [b.num_rows for b in expected], kwargs
        assert max(b.num_rows for b in got) == kwargs["batch_size"] or kwargs["batch_size"] == 50
        assert_same_table(pa.Table.from_batches(got), pa.Table.from_batches(expected), str(kwargs))


@pytest.mark.parametrize("version", ["legacy", "2.0", "2.2"])
def test_take_of_nested_paths_returns_pruned_structs(tmp_path: Path, version: str):
    """A nested field named by path comes back inside its top-level column, pruned to the
    fields named (in schema order), the columns in order of first mention; as pylance."""
    inner = pa.struct([("d", pa.float64()), ("e", pa.int32())])
    # 2.0 files hold no struct validity: structs of nulls there
    no_inner = None if version != "2.0" else {"d": None, "e": None}
    no_struct = None if version != "2.0" else {"a": None, "b": None, "c": no_inner}
    st = pa.array(
        [
            {"a": 1, "b": "x", "c": {"d": 1.5, "e": 2}},
            {"a": None, "b": "", "c": no_inner},
            no_struct,
            {"a": 4, "b": "ü", "c": {"d": None, "e": 7}},
        ],
        pa.struct([("a", pa.int64()), ("b", pa.string()), ("c", inner)]),
    )
    table = pa.table({"id": pa.array([1, 2, 3, 4]), "st": st})
    uri = str(tmp_path / "ds")
    lance.write_dataset(table, uri, data_storage_version=version, max_rows_per_file=3)
    for columns in (
        ["st.a"],
        ["id", "st.b", "st.a"],
        ["st.b", "_rowid", "id"],
        ["st", "st.a"],
        ["st.c.e", "id"],
        ["st.a", "st.c"],
    ):
        expected = lance.dataset(uri).take([3, 0, 2], columns=columns)
        got = dataset(uri).take([3, 0, 2], columns=columns)
        assert_same_table(got, expected, f"take {columns} at {version}")
