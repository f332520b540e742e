"""Schema evolution (`format.dataset.evolution`) checked against pylance doing the same.

Each scenario starts from one dataset (written by pylance or by us, several fragments,
deleted rows), copies it, applies an operation with our engine to one copy and with
pylance to the other, and requires pylance (and our reader) to read both alike.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from quiver.format.dataset import dataset, write_dataset
from quiver.format.errors import (
    ColumnNotFoundError,
    FilterBindError,
    InvalidInputError,
    UnsupportedFeatureError,
)

N = 30
DELETE = "i % 4 = 1 OR i = 14 OR i = 15 OR i = 16 OR i = 17"
SCHEMA = pa.schema(
    [
        pa.field("i", pa.int32(), nullable=False),
        pa.field("f", pa.float32()),
        pa.field("s", pa.string()),
        pa.field("n", pa.int64()),
        pa.field("st", pa.struct([("x", pa.int32()), ("y", pa.string())])),
    ]
)


def _table() -> pa.Table:
    return pa.table(
        {
            "i": pa.array(range(N), pa.int32()),
            "f": pa.array([x / 4 for x in range(N)], pa.float32()),
            "s": [None if x % 6 == 0 else f"s{x}" for x in range(N)],
            "n": pa.array([None if x % 5 == 0 else x for x in range(N)], pa.int64()),
            "st": [{"x": x, "y": str(x)} for x in range(N)],
        },
        schema=SCHEMA,
    )


def _make(tmp_path: Path, version: str, writer: str, **kwargs: Any) -> tuple[str, str]:
    """(our copy, pylance's copy) of a 5-fragment dataset with deleted rows."""
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    if writer == "pylance":
        lance.write_dataset(
            _table(), ours, max_rows_per_file=7, data_storage_version=version, **kwargs
        ).delete(DELETE)
    else:
        write_dataset(_table(), ours, max_rows_per_file=7, data_storage_version=version)
        dataset(ours).delete(DELETE)
    shutil.copytree(ours, ref)
    return ours, ref


def _schema_rows(uri: str) -> list[tuple]:
    return [
        (f.id, f.parent_id, f.name, f.logical_type, f.nullable)
        for f in dataset(uri).manifest.pb.fields
    ]


def _check_same(ours: str, ref: str) -> pa.Table:
    """pylance and our reader see the same rows and schema in both copies."""
    expected = lance.dataset(ref).to_table()
    got = lance.dataset(ours).to_table()
    assert got.schema.equals(expected.schema), (got.schema, expected.schema)
    assert got.equals(expected)
    assert dataset(ours).to_table().equals(expected)
    assert dataset(ref).to_table().equals(expected)
    assert _schema_rows(ours) == _schema_rows(ref)  # same field ids too
    return expected


Step = tuple[str, Callable[[Any], None], Callable[[Any], None]]


def _steps(version: str) -> list[Step]:
    sql = {"x": "i * 2", "y": "s || '!'", "z": "f + 1", "w": "n * 2", "v": "st.x + 1", "k": "'k'"}
    casts = [
        {"path": "i", "data_type": pa.int64()},
        {"path": "f", "data_type": pa.float64()},
        {"path": "s", "data_type": pa.large_string()},
        {"path": "n", "data_type": pa.int32()},
    ]
    renames = [
        {"path": "x", "name": "xx", "nullable": True},
        {"path": "st.y", "name": "yy"},
        {"path": "w", "nullable": True},
        {"path": "z", "name": "zz"},
    ]

    def stream(d: Any) -> pa.Table:
        return pa.table({"q": pa.array(range(d.count_rows()), pa.int16())})

    steps: list[Step] = [
        ("sql", lambda d: d.add_columns(sql, batch_size=3), lambda d: d.add_columns(sql)),
        ("cast", lambda d: d.alter_columns(*casts), lambda d: d.alter_columns(*casts)),
        ("rename", lambda d: d.alter_columns(*renames), lambda d: d.alter_columns(*renames)),
        (
            "not null",
            lambda d: d.alter_columns({"path": "f", "nullable": False}),
            lambda d: d.alter_columns({"path": "f", "nullable": False}),
        ),
        (
            "drop",
            lambda d: d.drop_columns(["y", "st.x"]),
            lambda d: d.drop_columns(["y", "st.x"]),
        ),
        (
            "stream",
            lambda d: d.add_columns(stream(d), batch_size=4),
            lambda d: d.add_columns(stream(d)),
        ),
        ("drop newest", lambda d: d.drop_columns(["q"]), lambda d: d.drop_columns(["q"])),
        (
            "add after drop",
            lambda d: d.add_columns({"r": "i + 1"}),
            lambda d: d.add_columns({"r": "i + 1"}),
        ),
        (
            "cast again",
            lambda d: d.alter_columns({"path": "r", "data_type": pa.int32()}),
            lambda d: d.alter_columns({"path": "r", "data_type": pa.int32()}),
        ),
    ]
    if version != "legacy":
        nulls = pa.schema([pa.field("nu", pa.string()), pa.field("nv", pa.list_(pa.int32()))])
        steps.append(("all null", lambda d: d.add_columns(nulls), lambda d: d.add_columns(nulls)))
        steps.append(
            (
                "all null field",
                lambda d: d.add_columns(pa.field("nw", pa.float64())),
                lambda d: d.add_columns(pa.field("nw", pa.float64())),
            )
        )
    return steps


@pytest.mark.parametrize("writer", ["pylance", "ours"])
@pytest.mark.parametrize("version", ["legacy", "2.0"])
def test_evolution_matches_pylance(tmp_path: Path, version: str, writer: str):
    ours, ref = _make(tmp_path, version, writer)
    history = {dataset(ours).version: lance.dataset(ours).to_table()}
    for name, mine, theirs in _steps(version):
        ds = dataset(ours)
        before = ds.version
        mine(ds)
        assert ds.version == before + 1, name  # the object moved to the new version
        assert ds.to_table().equals(lance.dataset(ours).to_table()), name
        theirs(lance.dataset(ref))
        history[ds.version] = _check_same(ours, ref)
    for version_number, table in history.items():  # old versions still read
        assert lance.dataset(ours, version=version_number).to_table().equals(table)
        assert dataset(ours, version=version_number).to_table().equals(table)
    # pylance appends to the evolved dataset, and evolves it further; we read the result
    extra = lance.dataset(ours).to_table().slice(0, 4)
    lance.write_dataset(extra, ours, mode="append")
    lance.dataset(ours).add_columns({"after": "i + 100"})
    lance.dataset(ours).alter_columns({"path": "zz", "data_type": pa.float32()})
    assert dataset(ours).to_table().equals(lance.dataset(ours).to_table())
    # and we evolve what pylance appended
    dataset(ours).add_columns({"last": "after - i"})
    assert lance.dataset(ours).to_table().column("last").to_pylist() == [100] * (
        dataset(ours).count_rows()
    )


def test_new_files_hold_only_new_fields_and_physical_rows(tmp_path: Path):
    from quiver.format.file.open import open_data_file
    from quiver.format.table.commit import read_transaction

    ours, _ref = _make(tmp_path, "2.0", "ours")
    ds = dataset(ours)
    old = {f.fragment_id: [d.path for d in f.data_files()] for f in ds.get_fragments()}
    ds.add_columns({"x": "i * 2"})
    assert read_transaction(ds.core.store, ds.manifest).WhichOneof("operation") == "merge"
    for frag in ds.get_fragments():
        files = frag.data_files()
        assert [d.path for d in files[:-1]] == old[frag.fragment_id]  # never rewritten
        assert list(files[-1].fields) == [7]  # after st.y, the largest id (6)
        reader = open_data_file(ds.core.store, f"data/{files[-1].path}", files[-1])
        assert reader.num_rows == frag.physical_rows > frag.count_rows()
        reader.close()
    ds.alter_columns({"path": "x", "data_type": pa.int64()})
    assert read_transaction(ds.core.store, ds.manifest).WhichOneof("operation") == "merge"
    assert [(f.id, f.name) for f in ds.manifest.pb.fields][-1] == (8, "x")
    for frag in ds.manifest.pb.fragments:
        # the first add's file only held the old x: tombstoned, so dropped
        assert [list(d.fields) for d in frag.files] == [list(range(7)), [8]]
    ds.alter_columns({"path": "x", "name": "y"})
    assert read_transaction(ds.core.store, ds.manifest).WhichOneof("operation") == "project"
    ds.drop_columns(["y"])
    assert read_transaction(ds.core.store, ds.manifest).WhichOneof("operation") == "project"
    for frag in ds.manifest.pb.fragments:  # a file with no field left leaves the manifest
        assert [list(d.fields) for d in frag.files] == [list(range(7))]


def test_failed_cast_writes_nothing(tmp_path: Path):
    ours, ref = _make(tmp_path, "legacy", "ours")
    dataset(ours).add_columns({"big": "n * 1000"})
    ds = dataset(ours)
    start, files = ds.version, sorted(p.name for p in (Path(ours) / "data").iterdir())
    with pytest.raises(InvalidInputError, match="cast"):
        ds.alter_columns({"path": "big", "data_type": pa.int8()})
    lance.dataset(ref).add_columns({"big": "n * 1000"})
    with pytest.raises(OSError):
        lance.dataset(ref).alter_columns({"path": "big", "data_type": pa.int8()})
    assert dataset(ours).version == ds.version == start
    assert sorted(p.name for p in (Path(ours) / "data").iterdir()) == files


def test_stable_row_ids_survive(tmp_path: Path):
    ours, ref = _make(tmp_path, "2.0", "pylance", enable_stable_row_ids=True)
    dataset(ours).add_columns({"x": "i * 2"})
    dataset(ours).alter_columns({"path": "i", "data_type": pa.int64()})
    lance.dataset(ref).add_columns({"x": "i * 2"})
    lance.dataset(ref).alter_columns({"path": "i", "data_type": pa.int64()})
    got = lance.dataset(ours).to_table(with_row_id=True)
    assert got.equals(lance.dataset(ref).to_table(with_row_id=True))
    assert dataset(ours).to_table(with_row_id=True).equals(got)


@pytest.mark.parametrize("version", ["legacy", "2.0"])
def test_errors_leave_the_dataset_alone(tmp_path: Path, version: str):
    ours, ref = _make(tmp_path, version, "ours")
    ds = dataset(ours)
    start, data_files = ds.version, sorted(p.name for p in (Path(ours) / "data").iterdir())
    pl = lance.dataset(ref)

    with pytest.raises(ColumnNotFoundError, match="zz"):
        ds.drop_columns(["zz"])
    with pytest.raises(InvalidInputError, match="all columns"):
        ds.drop_columns(["i", "f", "s", "n", "st"])
    with pytest.raises(ColumnNotFoundError, match="zz"):
        ds.alter_columns({"path": "zz", "name": "q"})
    with pytest.raises(InvalidInputError, match="NULL"):  # (legacy files lose int NULLs)
        ds.alter_columns({"path": "s", "nullable": False})
    with pytest.raises(OSError):
        pl.alter_columns({"path": "s", "nullable": False})
    with pytest.raises(InvalidInputError, match="Cannot cast"):
        ds.alter_columns({"path": "i", "data_type": pa.float64()})
    with pytest.raises(OSError):
        pl.alter_columns({"path": "i", "data_type": pa.float64()})
    with pytest.raises(InvalidInputError, match="Cannot cast"):
        ds.alter_columns(
            {"path": "f", "data_type": pa.float64()}, {"path": "s", "data_type": pa.int8()}
        )
    with pytest.raises(InvalidInputError, match="Duplicate"):
        ds.alter_columns({"path": "i", "name": "f"})
    with pytest.raises(InvalidInputError, match="At least one"):
        ds.alter_columns({"path": "i"})
    with pytest.raises(InvalidInputError, match="already exists"):
        ds.add_columns({"s": "i + 1"})
    with pytest.raises(FilterBindError):
        ds.add_columns({"x": "i + 1.5"})  # pylance refuses it too
    with pytest.raises(OSError):
        pl.add_columns({"x": "i + 1.5"})
    with pytest.raises(FilterBindError, match="nope"):
        ds.add_columns({"x": "nope * 2"})
    live = ds.count_rows()
    for rows in (live - 1, live + 1):
        with pytest.raises(InvalidInputError, match="rows"):
            ds.add_columns(pa.table({"q": list(range(rows))}))
    with pytest.raises(InvalidInputError, match="nullable"):
        ds.add_columns(pa.field("q", pa.int32(), nullable=False))
    if version == "legacy":
        with pytest.raises(UnsupportedFeatureError, match="legacy"):
            ds.add_columns(pa.field("q", pa.int32()))
    with pytest.raises(InvalidInputError, match="already exists"):
        ds.add_columns(lambda batch: batch)  # a function giving back existing columns

    assert dataset(ours).version == ds.version == start
    assert sorted(p.name for p in (Path(ours) / "data").iterdir()) == data_files


def test_expression_types_follow_pylance(tmp_path: Path):
    ours, ref = _make(tmp_path, "2.0", "ours")
    exprs = {
        "a": "i * 2",
        "b": "2 - i",
        "c": "i * 2 + 1",
        "d": "n / 2",
        "e": "1",
        "g": "CAST(i AS double)",
        "h": "i > 3",
        "j": "coalesce(n, 0)",
        "k": "lower(s)",
        "l": "n IS NULL",
        "m": "f * 2",
        "o": "nullif(i, 1)",
    }
    dataset(ours).add_columns(exprs)
    lance.dataset(ref).add_columns(exprs)
    _check_same(ours, ref)


def test_indexed_columns(tmp_path: Path):
    ours, ref = _make(tmp_path, "2.0", "pylance")
    lance.dataset(ours).create_scalar_index("i", "BTREE")
    ds = dataset(ours)
    # retyping an indexed column is refused, as pylance 14 does (see test_parity)
    with pytest.raises(InvalidInputError, match="i_idx"):
        ds.alter_columns({"path": "i", "data_type": pa.int64()})
    ds.alter_columns({"path": "n", "data_type": pa.int32()})
    assert [i.field_names for i in lance.dataset(ours).describe_indices()] == [["i"]]
    assert lance.dataset(ours).to_table(filter="n > 3") == dataset(ours).to_table(filter="n > 3")
    # other columns evolve freely, renames keep the index, and pylance still uses it
    ds.drop_columns(["f"])
    ds.add_columns({"x": "i * 2"})
    ds.alter_columns({"path": "i", "name": "ii"}, {"path": "n", "data_type": pa.int64()})
    pl = lance.dataset(ours)
    assert [i.field_names for i in pl.describe_indices()] == [["ii"]]
    got = pl.to_table(filter="ii > 20")
    assert got.equals(dataset(ours).to_table(filter="ii > 20"))
    assert got.column("x").to_pylist() == [2 * v for v in got.column("ii").to_pylist()]


def test_blob_column_added_without_data_reads_as_null_descriptions(tmp_path) -> None:
    # fragments written before the column existed have no file for it: their rows are null
    # descriptions, as pylance returns them (not nulls of the blob's storage type)
    import lance
    import pyarrow as pa

    from quiver.format.dataset import dataset

    uri = str(tmp_path / "blobs.lance")
    lance.write_dataset(pa.table({"a": [1, 2, 3]}), uri)
    field = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    lance.dataset(uri).add_columns(field)
    want = lance.dataset(uri).to_table()
    got = dataset(uri).to_table()
    assert got.equals(want) and got.schema.equals(want.schema, check_metadata=True)
    assert got.column("b").null_count == 3
