"""What we write, pylance reads back identically; and the two engines take turns on one dataset."""

from __future__ import annotations

import os
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from compare import assert_same_table
from corpus import TYPE_COLUMNS, excluded, types_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quiver.format.dataset import dataset, write_dataset
from quiver.format.errors import DatasetAlreadyExistsError, SchemaMismatchError

pytestmark = pytest.mark.compat
VERSIONS = ["legacy", "2.0", "2.1", "2.2", "2.3"]


@pytest.mark.parametrize("version", VERSIONS)
def test_types_written_by_us_read_by_pylance(tmp_path: Path, version: str):
    columns = [c for c in TYPE_COLUMNS if not excluded(version, c)]
    table = types_table(columns, version, files=2, rows=700)
    ours = str(tmp_path / "ours")
    theirs = str(tmp_path / "theirs")
    layout = {"max_rows_per_file": 500, "max_rows_per_group": 100}
    write_dataset(table, ours, data_storage_version=version, **layout)
    # pylance 2.1+ cannot write the nested-struct slices that 500-row files need
    # (WRITE_LIMITATIONS "types:slices"); its reference files follow the 700-row chunks
    ref_layout = layout if version in ("legacy", "2.0") else {"max_rows_per_file": 700}
    lance.write_dataset(table, theirs, data_storage_version=version, **ref_layout)
    expected = lance.dataset(theirs).to_table()
    assert_same_table(lance.dataset(ours).to_table(), expected, f"{version}: pylance reading ours")
    assert_same_table(dataset(ours).to_table(), expected, f"{version}: we read ours")
    assert [f.physical_rows for f in lance.dataset(ours).get_fragments()] == [500, 500, 400]
    idx = [0, 699, 1399, 3]
    assert_same_table(lance.dataset(ours).take(idx), lance.dataset(theirs).take(idx), "take")


@pytest.mark.parametrize("version", VERSIONS)
def test_alternating_writers_keep_every_version_identical(tmp_path: Path, version: str):
    uri = str(tmp_path / "ds")

    def rows(start: int, n: int) -> pa.Table:
        return pa.table(
            {
                "id": pa.array(range(start, start + n), pa.int64()),
                "s": [f"row {i} ✓" if i % 7 else "" for i in range(start, start + n)],
                "f": [i / 3 for i in range(start, start + n)],
            }
        )

    write_dataset(rows(0, 300), uri, data_storage_version=version, max_rows_per_file=120)
    lance.write_dataset(rows(300, 50), uri, mode="append")
    write_dataset(rows(350, 50), uri, mode="append")
    lance.dataset(uri).delete("id % 10 = 0")
    dataset(uri).delete("id % 10 = 1 OR id >= 390")
    write_dataset(rows(400, 10), uri, mode="append")
    lance.dataset(uri).delete("id < 120")  # a whole fragment goes
    ref = lance.dataset(uri)
    assert ref.version == 7
    assert ref.data_storage_version == {"legacy": "0.1"}.get(version, version)
    for v in range(1, 8):
        assert_same_table(
            dataset(uri, version=v).to_table(), ref.checkout_version(v).to_table(), f"v{v}"
        )
    live = [i for i in range(120, 390) if i % 10 not in (0, 1)] + list(range(400, 410))
    assert ref.to_table().column("id").to_pylist() == live
    assert len(ref.get_transactions()) >= 7


def test_stable_row_ids_survive_appends_and_deletes(tmp_path: Path):
    uri = str(tmp_path / "ds")
    t = pa.table({"a": list(range(100))})
    write_dataset(
        t, uri, data_storage_version="2.0", max_rows_per_file=30, enable_stable_row_ids=True
    )
    lance.write_dataset(t, uri, mode="append")
    write_dataset(t, uri, mode="append")
    dataset(uri).delete("a % 4 = 0")
    ref = lance.dataset(uri).to_table(with_row_id=True)
    assert ref == dataset(uri).to_table(with_row_id=True)
    assert sorted(ref.column("_rowid").to_pylist()) == [i for i in range(300) if (i % 100) % 4 != 0]


def test_overwrite_changes_schema_and_keeps_history(tmp_path: Path):
    uri = str(tmp_path / "ds")
    write_dataset(pa.table({"a": [1, 2]}), uri, data_storage_version="2.0")
    write_dataset(pa.table({"b": ["x"]}), uri, mode="overwrite")
    ref = lance.dataset(uri)
    assert ref.version == 2 and ref.to_table() == pa.table({"b": ["x"]})
    assert ref.checkout_version(1).to_table() == pa.table({"a": [1, 2]})
    assert [f.fragment_id for f in ref.get_fragments()] == [1]


def test_bad_appends_are_refused_before_writing(tmp_path: Path):
    uri = str(tmp_path / "ds")
    schema = pa.schema([pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.string())])
    write_dataset(pa.table({"a": [1], "b": ["x"]}, schema=schema), uri, data_storage_version="2.0")
    before = sorted(os.listdir(Path(uri) / "data"))
    cases = {  # a nullable column may be left out (see test_parity), a non-nullable one not
        "missing columns a": pa.table({"b": ["y"]}),
        "unexpected columns c": pa.table({"a": [2], "b": ["y"], "c": [1.0]}),
        "b (int64 instead of string)": pa.table({"a": [2], "b": [3]}),
    }
    for message, data in cases.items():
        with pytest.raises(
            SchemaMismatchError, match=message.replace("(", r"\(").replace(")", r"\)")
        ):
            write_dataset(data, uri, mode="append")
    with pytest.raises(DatasetAlreadyExistsError):
        write_dataset(pa.table({"a": [1], "b": ["x"]}, schema=schema), uri)
    assert sorted(os.listdir(Path(uri) / "data")) == before
    assert lance.dataset(uri).version == 1


def test_streaming_input_from_a_reader(tmp_path: Path):
    uri = str(tmp_path / "ds")
    schema = pa.schema([("i", pa.int64()), ("s", pa.string())])
    batches = (
        pa.record_batch(
            [pa.array(range(k * 1000, (k + 1) * 1000)), pa.array(["v"] * 1000)], schema=schema
        )
        for k in range(30)
    )
    write_dataset(pa.RecordBatchReader.from_batches(schema, batches), uri, max_rows_per_file=7000)
    ref = lance.dataset(uri)
    assert [f.physical_rows for f in ref.get_fragments()] == [7000] * 4 + [2000]
    assert ref.to_table().column("i").to_pylist() == list(range(30000))


_scalar = st.sampled_from(
    [pa.int8(), pa.int64(), pa.float32(), pa.string(), pa.large_binary(), pa.bool_(), pa.date32()]
)


@st.composite
def _tables(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(0, 60))
    types = draw(st.lists(_scalar, min_size=1, max_size=4))
    cols = {}
    for i, t in enumerate(types):
        if pa.types.is_list(t):
            continue
        values = draw(
            st.lists(
                st.one_of(st.none(), st.integers(-100, 100)),
                min_size=n,
                max_size=n,
            )
        )
        arr = pa.array(values, pa.int64())
        if pa.types.is_string(t) or pa.types.is_large_binary(t):
            arr = pa.array([None if v is None else str(v) * (abs(v) % 5) for v in values])
            arr = arr.cast(t)
        elif pa.types.is_boolean(t):
            arr = pa.array([None if v is None else v > 0 for v in values])
        elif pa.types.is_date32(t):
            arr = arr.cast(pa.int32()).cast(t)
        else:
            arr = arr.cast(t)
        cols[f"c{i}"] = arr
    cols["lst"] = pa.array(
        [None if i % 5 == 0 else list(range(i % 3)) for i in range(n)], pa.list_(pa.int32())
    )
    return pa.table(cols)


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2", "2.3"])
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(table=_tables())
def test_hypothesis_round_trip_through_pylance(
    tmp_path_factory: pytest.TempPathFactory, version: str, table
):
    uri = str(tmp_path_factory.mktemp("h") / "ds")
    write_dataset(table, uri, data_storage_version=version, max_rows_per_file=25)
    assert_same_table(lance.dataset(uri).to_table(), table, "pylance reads ours")


def _hostile(n: int) -> pa.Table:
    """Edge data: all-null columns of every nesting, nulls under constants, empty strings and
    lists, unicode, NUL bytes and values of a few megabytes."""
    big = b"\x00\xff" * (3 << 20)
    s_type = pa.struct([("a", pa.int32()), ("b", pa.string())])
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "null": pa.nulls(n),
            "all_null_str": pa.nulls(n, pa.string()),
            "all_null_list": pa.array([None] * n, pa.list_(pa.int64())),
            "list_of_nulls": pa.array(
                [[None] * (i % 3) if i % 5 else None for i in range(n)], pa.list_(pa.int32())
            ),
            "const_nulls": pa.array([7 if i % 4 else None for i in range(n)], pa.int16()),
            "struct_const": pa.array(
                [{"a": 1, "b": None} if i % 3 else None for i in range(n)], s_type
            ),
            "empty_lists": pa.array([[] for _ in range(n)], pa.list_(pa.string())),
            "text": [["", "ünïcødé ✓", "a\x00b", "𝄞" * 50][i % 4] for i in range(n)],
            "huge": pa.array([big if i == n // 2 else b"" for i in range(n)], pa.large_binary()),
            "nested": pa.array(
                [[[i, None], []] if i % 2 else [None] for i in range(n)],
                pa.list_(pa.list_(pa.int64())),
            ),
        }
    )


@pytest.mark.parametrize("version", ["2.2", "2.3"])
def test_hostile_data_and_schema_changes_by_both_engines(tmp_path: Path, version: str):
    uri = str(tmp_path / "ds")
    table = _hostile(60)
    write_dataset(table, uri, data_storage_version=version, max_rows_per_file=25)
    assert_same_table(lance.dataset(uri).to_table(), table, f"{version}: pylance reads ours")
    lance.write_dataset(_hostile(9), uri, mode="append")
    write_dataset(table.schema.empty_table(), uri, mode="append")  # writes no fragment
    both = pa.concat_tables([table, _hostile(9)])
    assert_same_table(dataset(uri).to_table(), both, f"{version}: we read pylance's append")
    dataset(uri).add_columns({"twice": "id * 2"})
    lance.dataset(uri).add_columns({"label": "concat(text, '!')"})
    dataset(uri).delete("id % 7 = 3")
    lance.dataset(uri).delete("id = 0")
    ref = lance.dataset(uri)
    assert ref.data_storage_version == version
    for v in range(1, ref.version + 1):
        expected = ref.checkout_version(v).to_table()
        assert_same_table(dataset(uri, version=v).to_table(), expected, f"{version} v{v}")
    assert dataset(uri).to_table().column("twice").to_pylist() == [
        2 * i for i in ref.to_table().column("id").to_pylist()
    ]
