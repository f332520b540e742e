"""Manifest naming, framing, version/tag/timestamp resolution and bad manifests."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import struct
import time
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from quiver.format.dataset import dataset
from quiver.format.errors import (
    CorruptFileError,
    DatasetNotFoundError,
    FilterBindError,
    InvalidInputError,
    TagNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from quiver.format.table.manifest import (
    decode_manifest,
    encode_manifest,
    manifest_name,
    parse_manifest_name,
)


def test_manifest_names_both_schemes():
    assert manifest_name(1) == "18446744073709551614.manifest"
    assert manifest_name(42) == "18446744073709551573.manifest"
    assert manifest_name(7, v2=False) == "7.manifest"
    assert parse_manifest_name("18446744073709551614.manifest") == (1, True)
    assert parse_manifest_name("12.manifest") == (12, False)
    for junk in ("latest_version_hint.json", ".tmp_7.manifest_x", "3.manifest#1", "d9.manifest"):
        assert parse_manifest_name(junk) is None


@pytest.fixture
def history(tmp_path: Path) -> str:
    """A dataset with three versions and a tag on version 2."""
    uri = str(tmp_path / "h.lance")
    lance.write_dataset(pa.table({"a": [1, 2]}), uri, data_storage_version="2.0")
    time.sleep(0.02)
    lance.write_dataset(pa.table({"a": [3]}), uri, mode="append")
    time.sleep(0.02)
    ds = lance.write_dataset(pa.table({"a": [4, 5, 6]}), uri, mode="append")
    ds.tags.create("second", 2)
    return uri


def test_versions_tags_and_asof_match_pylance(history: str):
    ref = lance.dataset(history)
    ours = dataset(history)
    assert ours.version == ref.version == 3
    assert [v["version"] for v in ours.versions()] == [v["version"] for v in ref.versions()]
    assert ours.versions() == ref.versions()  # timestamps too, as pylance computes them
    assert dataset(history, version="second").to_table() == ref.checkout_version(2).to_table()
    assert ours.tags.list()["second"]["version"] == 2
    assert ours.checkout_version(1).to_table() == pa.table({"a": [1, 2]})
    # pylance's versions() rounds through a float: allow a millisecond after the commit
    ts = ref.versions()[1]["timestamp"].astimezone(dt.timezone.utc) + dt.timedelta(milliseconds=1)
    assert dataset(history, asof=ts).version == 2
    assert dataset(history, asof=ts.isoformat()).version == 2

    # asof finds in Quiver what it finds in pylance: the newest version shown strictly
    # before it, so the time shown for a version finds the one before it
    def at(engine: Any, when: dt.datetime) -> int | None:
        """The version `asof` finds, or None where there is none that early."""
        try:
            return engine(history, asof=when).version
        except (VersionNotFoundError, ValueError):
            return None

    us = dt.timedelta(microseconds=1)
    for v in ours.versions():
        for when in (v["timestamp"] - us, v["timestamp"], v["timestamp"] + us):
            assert at(dataset, when) == at(lance.dataset, when)
        assert at(dataset, v["timestamp"]) == (v["version"] - 1 or None)
        assert at(dataset, v["timestamp"] + us) == v["version"]


def test_missing_things_raise_specific_errors(history: str, tmp_path: Path):
    with pytest.raises(VersionNotFoundError, match="version 9"):
        dataset(history, version=9)
    with pytest.raises(TagNotFoundError, match="nope"):
        dataset(history, version="nope")
    with pytest.raises(VersionNotFoundError, match="committed before"):
        dataset(history, asof=dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc))
    with pytest.raises(DatasetNotFoundError, match="no Lance dataset"):
        dataset(str(tmp_path / "absent"))
    with pytest.raises(FilterBindError, match="zz"):
        dataset(history).to_table(filter="zz > 1")


def _latest_manifest(uri: str) -> Path:
    return sorted((Path(uri) / "_versions").glob("*.manifest"))[0]


@pytest.mark.parametrize(
    "damage",
    ["truncate_tail", "truncate_half", "bad_magic", "bad_position", "garbage_body", "empty"],
)
def test_corrupt_manifest_names_the_file(history: str, damage: str):
    path = _latest_manifest(history)
    data = path.read_bytes()
    if damage == "truncate_tail":
        data = data[:-3]
    elif damage == "truncate_half":
        data = data[len(data) // 2 :]
    elif damage == "bad_magic":
        data = data[:-4] + b"XXXX"
    elif damage == "bad_position":
        data = data[:-16] + struct.pack("<q", len(data) * 4) + data[-8:]
    elif damage == "garbage_body":
        (pos,) = struct.unpack_from("<q", data, len(data) - 16)
        body = bytes([0xFF]) * (len(data) - 16 - pos - 4)
        data = data[: pos + 4] + body + data[-16:]
    else:
        data = b""
    path.write_bytes(data)
    with pytest.raises(CorruptFileError) as err:
        dataset(history)
    assert path.name in str(err.value)


def test_unknown_reader_feature_flag_is_refused(history: str):
    path = _latest_manifest(history)
    m = decode_manifest(path.read_bytes(), path.name)
    m.pb.reader_feature_flags |= 4096
    path.write_bytes(encode_manifest(m.pb))
    with pytest.raises(UnsupportedFeatureError, match="version 3"):
        dataset(history)


def test_encode_manifest_round_trips_and_pylance_reads_it(history: str, tmp_path: Path):
    copy = tmp_path / "copy.lance"
    shutil.copytree(history, copy)
    path = _latest_manifest(str(copy))
    m = decode_manifest(path.read_bytes(), path.name)
    path.write_bytes(encode_manifest(m.pb))
    again = decode_manifest(path.read_bytes(), path.name)
    assert again.pb == m.pb
    assert lance.dataset(str(copy)).to_table() == lance.dataset(history).to_table()


def test_v1_manifest_naming_is_read(tmp_path: Path):
    uri = str(tmp_path / "v1.lance")
    t = pa.table({"x": ["a", None, ""]})
    lance.write_dataset(t, uri, enable_v2_manifest_paths=False, data_storage_version="2.0")
    lance.write_dataset(t, uri, mode="append")
    assert sorted(os.listdir(Path(uri) / "_versions"))[:2] == ["1.manifest", "2.manifest"]
    assert dataset(uri).to_table() == lance.dataset(uri).to_table()
    assert dataset(uri, version=1).to_table() == t


def test_atomic_write_never_publishes_partial_files(tmp_path: Path):
    from quiver.format.io import open_store

    store = open_store(str(tmp_path))
    with pytest.raises(RuntimeError), store.open_write("data/a.lance") as f:
        f.write(b"partial")
        raise RuntimeError("writer died")
    f = store.open_write("data/b.lance")
    f.write(b"dropped")
    del f
    with store.open_write("data/c.lance") as f:
        f.write(b"whole")
    assert sorted(os.listdir(tmp_path / "data")) == ["c.lance"]


def test_tag_names_too_long_for_a_file_name_are_refused(history: str):
    ours = dataset(history)
    ours.tags.create("t" * 200, 1)  # the longest tag (its file name gets .json and more)
    assert ours.tags.list()["t" * 200]["version"] == 1
    for name in ("t" * 201, "é" * 34, "x" * 10_000):  # é is 6 bytes once percent-encoded
        with pytest.raises(InvalidInputError, match="too long"):
            ours.tags.create(name, 1)
        with pytest.raises(InvalidInputError, match="too long"):
            dataset(history, version=name)
    assert sorted(os.listdir(f"{history}/_refs/tags")) == sorted(
        ["second.json", "t" * 200 + ".json"]
    )


def test_a_schema_with_an_empty_fixed_size_list_is_corrupt(history: str):
    # pyarrow divides by a fixed-size list's size: such a schema must never reach a reader
    path = f"{history}/_versions/{manifest_name(3)}"
    with open(path, "rb") as f:
        manifest = decode_manifest(f.read(), path)
    manifest.pb.fields[0].logical_type = "fixed_size_list:int64:0"
    with open(path, "wb") as f:
        f.write(encode_manifest(manifest.pb))
    with pytest.raises(CorruptFileError, match="fixed_size_list of 0 items"):
        dataset(history).to_table()
    assert dataset(history, version=2).to_table() == pa.table({"a": [1, 2, 3]})
