"""Blob columns written by Quiver as pylance 14 writes them: the same data files and
sidecars byte for byte (legacy blobs in 2.0 and 2.1 files; blob v2 in 2.2 files with inline,
packed and dedicated values, the thresholds a field sets, pack files rotating), read back by
pylance, appended to by either engine in either form, and bad blob input refused."""

from __future__ import annotations

import datetime as dt
import hashlib
import struct
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.blob import Blob, blob_array, blob_field

from quiver.format.dataset import dataset, write_dataset
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError
from quiver.format.proto import file_pb2

BLOB = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
SCHEMA = pa.schema([pa.field("id", pa.int64()), BLOB])
# inline, empty, packed (just past 64 KiB), packed, dedicated (past 4 MiB), nulls
SIZES = [5, 0, 65_536, 65_537, 3_000_000, 100, 4_194_305, 64]


def _table(start: int = 0) -> pa.Table:
    values: list[bytes | None] = [bytes([(start + i) % 251]) * n for i, n in enumerate(SIZES)]
    values.insert(3, None)
    return pa.table({"id": range(start, start + len(values)), "b": values}, schema=SCHEMA)


def _contents(uri: str) -> list[tuple[str, str]]:
    """Every file under data/: (name within its data file's directory or "data file",
    digest), sorted, so datasets written by different engines compare. A data file's schema
    is compared decoded: pylance lists a field's metadata in hash-map order, which changes
    from process to process."""
    out = []
    for f in sorted(Path(uri, "data").rglob("*")):
        if f.is_file():
            data = f.read_bytes()
            if f.parent.name != "data":
                out.append((f.name, hashlib.sha256(data).hexdigest()))
                continue
            gbo = struct.unpack_from("<Q", data, len(data) - 24)[0]
            at, size = struct.unpack_from("<QQ", data, gbo)
            desc = file_pb2.FileDescriptor.FromString(data[at : at + size])
            rest = data[:at] + data[at + size :]
            out.append(("data file", hashlib.sha256(rest).hexdigest() + str(desc)))
    return sorted(out)


def _payloads(ds: lance.LanceDataset) -> list[bytes | None]:
    return [f and f.readall() for f in ds.take_blobs("b", indices=range(ds.count_rows()))]


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_blob_files_are_pylances_byte_for_byte(tmp_path: Path, version: str) -> None:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    write_dataset(_table(), ours, data_storage_version=version)
    lance.write_dataset(_table(), theirs, data_storage_version=version)
    assert _contents(ours) == _contents(theirs)
    if version == "2.2":
        names = [name for name, _ in _contents(ours)]
        assert names.count("data file") == 1 and len(names) == 3  # a pack and a dedicated file
    ref = lance.dataset(ours)
    assert ref.schema == lance.dataset(theirs).schema
    assert _payloads(ref) == _table()["b"].to_pylist()
    assert (
        dataset(ours)
        .to_table(blob_handling="all_binary")
        .equals(ref.to_table(blob_handling="all_binary"))
    )


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_appends_by_either_engine_in_either_form(tmp_path: Path, version: str) -> None:
    uri = str(tmp_path / "mixed")
    lance.write_dataset(_table(), uri, data_storage_version=version)
    write_dataset(_table(100), uri, mode="append")
    if version == "2.2":  # blob v2 columns also take lance.blob.blob_array values
        values = blob_array([b"x" * 70_000, None, Blob.empty(), b"tail"])
        write_dataset(pa.table({"id": [200, 201, 202, 203], "b": values}), uri, mode="append")
    lance.write_dataset(_table(300), uri, mode="append")
    want = _table()["b"].to_pylist() + _table(100)["b"].to_pylist()
    if version == "2.2":
        want += [b"x" * 70_000, None, b"", b"tail"]
    want += _table(300)["b"].to_pylist()
    assert _payloads(lance.dataset(uri)) == want
    assert dataset(uri).to_table(blob_handling="all_binary")["b"].to_pylist() == want


def test_field_thresholds_and_pack_rotation_as_pylance(tmp_path: Path) -> None:
    field = blob_field(
        "b", inline_size_threshold=10, dedicated_size_threshold=1000, pack_file_size_threshold=600
    )
    sizes = [10, 11, 300, 300, 1000, 1001, 0, 5]
    table = pa.table(
        {"id": range(len(sizes)), "b": blob_array([b"q" * n for n in sizes])},
        schema=pa.schema([pa.field("id", pa.int64()), field]),
    )
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    write_dataset(table, ours)
    lance.write_dataset(table, theirs)
    assert _contents(ours) == _contents(theirs)
    kinds = lance.dataset(ours).to_table()["b"].to_pylist()
    assert [d["kind"] for d in kinds] == [0, 1, 1, 1, 1, 2, 0, 0]
    assert len({d["blob_id"] for d in kinds if d["kind"] == 1}) == 3  # rotated at 600 bytes
    assert _payloads(lance.dataset(ours)) == [b"q" * n for n in sizes]


def test_bad_blob_input_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "bad")
    v2 = pa.table({"id": [1], "b": blob_array([b"x"])})
    with pytest.raises(UnsupportedFeatureError, match="2.2 or later"):
        write_dataset(v2, uri, data_storage_version="2.1")
    external = pa.table({"id": [1], "b": blob_array([Blob.from_uri("file:///tmp/x.bin")])})
    with pytest.raises(InvalidInputError, match="outside registered external bases"):
        write_dataset(external, uri)
    with pytest.raises(InvalidInputError, match="only applies"):
        write_dataset(
            external, uri, allow_external_blob_outside_bases=True, external_blob_mode="ingest"
        )
    nested = pa.schema(
        [pa.field("s", pa.struct([pa.field("b", pa.large_binary(), metadata=BLOB.metadata)]))]
    )
    with pytest.raises(UnsupportedFeatureError, match="inside structs or lists"):
        write_dataset(pa.table({"s": [{"b": b"x"}]}, schema=nested), uri)
    assert not Path(uri, "_versions").exists()
    assert not [f for f in Path(uri).rglob("*") if f.is_file()]


def _by_id(uri: str) -> dict[int, bytes | None]:
    ref = lance.dataset(uri)
    table = ref.to_table(columns=["id"], blob_handling="all_binary")
    payloads = _payloads(ref)
    ours = dataset(uri).to_table(columns=["id", "b"], blob_handling="all_binary")
    assert ours["b"].to_pylist() == payloads  # both engines read the same bytes
    return dict(zip(table["id"].to_pylist(), payloads, strict=True))


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_rows_rewritten_by_quiver_keep_their_blobs(tmp_path: Path, version: str) -> None:
    """Updates, merges and compaction rewrite rows holding blobs: their values are copied
    into the new files (and sidecars), the old ones go with cleanup."""
    uri = str(tmp_path / "rw")
    lance.write_dataset(_table(), uri, data_storage_version=version)
    lance.write_dataset(_table(100), uri, mode="append")
    want = _by_id(uri)
    ds = dataset(uri)
    ds.delete("id = 1")
    del want[1]
    ds.update({"id": "id + 1000"}, where="id = 4 OR id = 105")
    want[1004], want[1105] = want.pop(4), want.pop(105)
    fresh = pa.table({"id": [0, 7, 500], "b": [b"new" * 30_000, None, b"z" * 5_000_000]})
    fresh = fresh.cast(SCHEMA)
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(fresh)
    want.update({0: b"new" * 30_000, 7: None, 500: b"z" * 5_000_000})
    partial = pa.table({"id": pa.array([2, 106], pa.int64())})  # no blob column: kept
    ds.merge_insert("id").when_matched_update_all().execute(partial)
    assert _by_id(uri) == want
    with pytest.raises(UnsupportedFeatureError, match="cannot update blob column"):
        ds.update({"b": "NULL"})
    ds.optimize.compact_files()
    assert len(lance.dataset(uri).get_fragments()) == 1
    assert _by_id(uri) == want
    ds.cleanup_old_versions(older_than=dt.timedelta(0), delete_unverified=True)
    assert _by_id(uri) == want
    left = [f for f in Path(uri, "data").rglob("*") if f.is_file()]
    assert len([f for f in left if f.suffix == ".lance"]) == 1
    write_dataset(_table(700), uri, mode="append")
    want.update(zip(_table(700)["id"].to_pylist(), _table(700)["b"].to_pylist(), strict=True))
    lance.dataset(uri).optimize.compact_files()  # and pylance rewrites Quiver's files
    assert len(lance.dataset(uri).get_fragments()) == 1
    assert _by_id(uri) == want


def test_rewrites_read_blobs_in_bounded_steps(tmp_path: Path, monkeypatch) -> None:
    """Compaction and updates read the blobs they copy a budget at a time (here 100 KB:
    about one large value per step), and the result is the same."""
    from quiver.format.dataset import blobs

    steps: list[int] = []
    real = blobs.with_blob_values

    def counted(core, rows, addresses, *rest):  # noqa: ANN001, ANN002, ANN202
        steps.append(rows.num_rows)
        return real(core, rows, addresses, *rest)

    monkeypatch.setattr(blobs, "BLOB_BATCH_BYTES", 100_000)
    monkeypatch.setattr(blobs, "with_blob_values", counted)
    uri = str(tmp_path / "steps")
    write_dataset(_table(), uri)
    write_dataset(_table(100), uri, mode="append")
    want = _by_id(uri)
    dataset(uri).update({"id": "id + 1000"}, where="id < 100")
    want = {(k + 1000 if k < 100 else k): v for k, v in want.items()}
    dataset(uri).optimize.compact_files()
    assert _by_id(uri) == want
    assert max(steps) < len(SIZES) and len(steps) > 4


@pytest.mark.parametrize("mode", ["reference", "ingest"])
def test_external_blobs_written_as_pylance_writes_them(tmp_path: Path, mode: str) -> None:
    """Blob values given as URIs: stored as references (outside registered bases, when
    allowed) or read in and stored as any value, the files pylance's byte for byte."""
    media = tmp_path / "media"
    media.mkdir()
    (media / "clip.bin").write_bytes(bytes(range(256)) * 400)  # 100 KiB: packed if read in
    (media / "note.txt").write_bytes(b"hello external")
    values = blob_array(
        [
            Blob.from_uri((media / "clip.bin").as_uri()),
            Blob.from_uri((media / "note.txt").as_uri(), position=6, size=8),
            Blob.from_bytes(b"inline"),
            None,
        ]
    )
    table = pa.table({"id": [1, 2, 3, 4], "b": values})
    kw = {"external_blob_mode": mode}
    if mode == "reference":
        kw["allow_external_blob_outside_bases"] = True
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    write_dataset(table, ours, **kw)
    lance.write_dataset(table, theirs, **kw)
    assert _contents(ours) == _contents(theirs)
    want = [(media / "clip.bin").read_bytes(), b"external", b"inline", None]
    assert _payloads(lance.dataset(ours)) == want
    assert dataset(ours).to_table(blob_handling="all_binary")["b"].to_pylist() == want
    kinds = [d and d["kind"] for d in lance.dataset(ours).to_table()["b"].to_pylist()]
    assert kinds == ([3, 3, 0, None] if mode == "reference" else [1, 0, 0, None])
    relative = blob_array([Blob.from_uri("media/clip.bin")])
    with pytest.raises(InvalidInputError, match="not absolute"):
        write_dataset(pa.table({"id": [9], "b": relative}), ours, mode="append", **kw)


def test_compaction_keeps_external_references(tmp_path: Path) -> None:
    """Compaction, updates and merges rewrite rows holding external references as
    references, as pylance keeps them; a new reference in a merge's source is refused."""
    note = tmp_path / "note.txt"
    note.write_bytes(b"hello external")
    uri = str(tmp_path / "ext")
    for k in range(2):
        values = blob_array(
            [Blob.from_uri(note.as_uri()), Blob.from_uri(note.as_uri(), 6, 8), b"in" * k, None]
        )
        rows = pa.table({"id": [4 * k + i for i in range(4)], "b": values})
        write_dataset(rows, uri, mode="append", allow_external_blob_outside_bases=True)
    want = _payloads(lance.dataset(uri))
    dataset(uri).optimize.compact_files()
    assert len(lance.dataset(uri).get_fragments()) == 1
    assert _payloads(lance.dataset(uri)) == want
    kinds = [d and d["kind"] for d in lance.dataset(uri).to_table()["b"].to_pylist()]
    assert kinds == [3, 3, 0, None, 3, 3, 0, None]
    dataset(uri).update({"id": "id + 100"}, where="id < 2")  # references stay references
    assert _payloads(lance.dataset(uri)) == want[2:] + want[:2]
    updated = [d and d["kind"] for d in lance.dataset(uri).to_table()["b"].to_pylist()]
    assert updated == [0, None, 3, 3, 0, None, 3, 3]
    source = pa.table({"id": pa.array([5], pa.int64()), "b": blob_array([b"new"])})
    dataset(uri).merge_insert("id").when_matched_update_all().execute(source)
    # a source without the blob column carries the target's references over
    dataset(uri).merge_insert("id").when_matched_update_all().execute(
        pa.table({"id": pa.array([4], pa.int64())})
    )
    merged = dict(
        zip(
            lance.dataset(uri).to_table(columns=["id"])["id"].to_pylist(),
            _payloads(lance.dataset(uri)),
            strict=True,
        )
    )
    assert merged[4] == want[4] and merged[5] == b"new"
    # a new reference in a source is refused, as in any write that does not allow it
    fresh = pa.table({"id": [50], "b": blob_array([Blob.from_uri(note.as_uri())])})
    with pytest.raises(InvalidInputError, match="outside registered external bases"):
        dataset(uri).merge_insert("id").when_not_matched_insert_all().execute(fresh)
