"""The low-level API: staged fragments become visible only through one commit."""

from __future__ import annotations

import os
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from quiver.format.dataset import (
    LanceOperation,
    commit,
    dataset,
    fragment_from_json,
    fragment_to_json,
    write_dataset,
    write_fragments,
)
from quiver.format.errors import CommitConflictError, InvalidInputError, UnsupportedFeatureError
from quiver.format.table.manifest import decode_manifest, encode_manifest


def test_stage_then_commit_append_once(tmp_path: Path):
    uri = str(tmp_path / "ds")
    write_dataset(pa.table({"a": [1, 2]}), uri, data_storage_version="2.0")
    staged = write_fragments(pa.table({"a": [3, 4, 5]}), uri, max_rows_per_file=2)
    assert len(staged) == 2 and lance.dataset(uri).count_rows() == 2  # nothing visible yet
    wire = [fragment_to_json(f) for f in staged]
    frags = [fragment_from_json(s) for s in wire]
    ds = commit(uri, LanceOperation.Append(frags), read_version=1, idempotency_key="k1")
    assert ds.version == 2
    again = commit(uri, LanceOperation.Append(frags), read_version=1, idempotency_key="k1")
    assert again.version == 2
    assert lance.dataset(uri).to_table() == pa.table({"a": [1, 2, 3, 4, 5]})


def test_commit_creates_and_overwrites(tmp_path: Path):
    uri = str(tmp_path / "new")
    t = pa.table({"x": ["a", None, "ü"]})
    frags = write_fragments(t, uri, mode="create")
    commit(uri, LanceOperation.Overwrite(t.schema, frags))
    assert lance.dataset(uri).to_table() == t
    frags = write_fragments(pa.table({"y": [1.5]}), uri, mode="overwrite")
    commit(uri, LanceOperation.Overwrite(pa.schema([("y", pa.float64())]), frags))
    assert lance.dataset(uri).to_table() == pa.table({"y": [1.5]})
    commit(uri, LanceOperation.Restore(1))
    assert lance.dataset(uri).to_table() == t and lance.dataset(uri).version == 3


def test_stale_append_after_overwrite_names_the_winner(tmp_path: Path):
    uri = str(tmp_path / "ds")
    write_dataset(pa.table({"a": [1]}), uri, data_storage_version="2.0")
    staged = write_fragments(pa.table({"a": [2]}), uri)
    lance.write_dataset(pa.table({"a": [9]}), uri, mode="overwrite")
    transactions = sorted(os.listdir(f"{uri}/_transactions"))
    with pytest.raises(CommitConflictError, match="version 2") as err:
        commit(uri, LanceOperation.Append(staged), read_version=1)
    assert err.value.version == 2 and not err.value.retryable
    assert lance.dataset(uri).to_table() == pa.table({"a": [9]})
    assert sorted(os.listdir(f"{uri}/_transactions")) == transactions  # the refused one's gone


def test_bad_staged_fragments_are_refused():
    for junk in ["", "{}", '{"v": 1, "fragment": "!!"}', '{"v": 1, "fragment": ""}']:
        with pytest.raises(InvalidInputError):
            fragment_from_json(junk)


def test_unknown_writer_flag_is_refused(tmp_path: Path):
    uri = str(tmp_path / "ds")
    write_dataset(pa.table({"a": [1]}), uri, data_storage_version="2.0")
    path = sorted((Path(uri) / "_versions").glob("*.manifest"))[0]
    m = decode_manifest(path.read_bytes(), path.name)
    m.pb.writer_feature_flags |= 1 << 20
    path.write_bytes(encode_manifest(m.pb))
    with pytest.raises(UnsupportedFeatureError, match="writer feature flags"):
        write_dataset(pa.table({"a": [2]}), uri, mode="append")
    assert dataset(uri).count_rows() == 1
    assert len(list((Path(uri) / "data").iterdir())) == 1  # refused before writing


REFUSED_SCHEMAS = {
    "reserved _rowid": pa.table({"_rowid": [1, 2]}),
    "reserved _rowaddr": pa.table({"x": [1, 2], "_rowaddr": [1, 2]}),
    "reserved _row_last_updated_at_version": pa.table({"_row_last_updated_at_version": [1]}),
    "duplicate name": pa.Table.from_arrays([pa.array([1]), pa.array(["a"])], names=["a", "a"]),
    "dot in a name": pa.table({"a.b": [1]}),
    "empty fixed-size list": pa.table({"v": pa.array([[], []], pa.list_(pa.int64(), 0))}),
    "nested empty fixed-size list": pa.table(
        {"v": pa.array([[[]], []], pa.list_(pa.list_(pa.int8(), 0)))}
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED_SCHEMAS))
def test_schemas_pylance_refuses_are_refused_before_any_file(tmp_path: Path, case: str):
    data = REFUSED_SCHEMAS[case]
    with pytest.raises(OSError):  # the oracle refuses it too
        lance.write_dataset(data, str(tmp_path / "oracle"))
    uri = str(tmp_path / "ds")
    for attempt in (
        lambda: write_dataset(data, uri),
        lambda: write_fragments(data, uri, mode="create"),
        lambda: commit(uri, LanceOperation.Overwrite(data.schema, [])),
    ):
        with pytest.raises(InvalidInputError, match="reserved|duplicate|'.'|fixed-size list"):
            attempt()
        assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").rglob("*.*"))


def test_commit_refuses_a_read_version_after_the_latest(tmp_path: Path):
    uri = str(tmp_path / "ds")
    write_dataset(pa.table({"a": [1]}), uri)
    staged = write_fragments(pa.table({"a": [2]}), uri)
    theirs = lance.fragment.write_fragments(pa.table({"a": [2]}), uri)
    with pytest.raises(OSError, match="999"):  # pylance: that version does not exist
        lance.LanceDataset.commit(uri, lance.LanceOperation.Append(theirs), read_version=999)
    for bad in (2, 999, -1):
        with pytest.raises(InvalidInputError, match=f"read_version {bad} .* latest is 1"):
            commit(uri, LanceOperation.Append(staged), read_version=bad)
    assert dataset(uri).version == 1
    assert commit(uri, LanceOperation.Append(staged), read_version=1).to_table() == pa.table(
        {"a": [1, 2]}
    )
