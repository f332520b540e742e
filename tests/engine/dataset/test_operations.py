"""The low-level API: staged fragments become visible only through one commit."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from format.dataset import (
    LanceOperation,
    commit,
    dataset,
    fragment_from_json,
    fragment_to_json,
    write_dataset,
    write_fragments,
)
from format.errors import CommitConflictError, InvalidInputError, UnsupportedFeatureError
from format.table.manifest import decode_manifest, encode_manifest


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
    with pytest.raises(CommitConflictError, match="version 2") as err:
        commit(uri, LanceOperation.Append(staged), read_version=1)
    assert err.value.version == 2 and not err.value.retryable
    assert lance.dataset(uri).to_table() == pa.table({"a": [9]})


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
