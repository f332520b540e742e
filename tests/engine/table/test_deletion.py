"""Deletion files: paths, reading pylance's .arrow/.bin files, writing our own, corrupt files."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyroaring
import pytest

from quiver.format.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from quiver.format.io.store import open_store
from quiver.format.proto import table_pb2
from quiver.format.table.deletion import (
    ARROW_ARRAY,
    BITMAP,
    DELETION_SCHEMA,
    DeletionFileInfo,
    deletion_file_path,
    encode_deletion_file,
    live_mask,
    live_offsets,
    parse_deletion_file,
    read_deletion_file,
    read_fragment_deletions,
    write_deletion_file,
)

_ZSTD_MAGIC = bytes.fromhex("28b52ffd")


# ---------------------------------------------------------------------------------------------
# test-local manifest reader (the real one lives elsewhere; this keeps the test independent)
# ---------------------------------------------------------------------------------------------
def _read_manifest(root: str, version: int | None = None) -> table_pb2.Manifest:
    """Latest (or given) manifest of a dataset written with V2 names."""
    vdir = os.path.join(root, "_versions")
    if version is None:
        name = min(n for n in os.listdir(vdir) if n.endswith(".manifest"))
    else:
        name = f"{18446744073709551615 - version:020d}.manifest"
    data = Path(vdir, name).read_bytes()
    assert data[-4:] == b"LANC"
    (pos,) = struct.unpack("<q", data[-16:-8])
    (length,) = struct.unpack("<I", data[pos : pos + 4])
    return table_pb2.Manifest.FromString(data[pos + 4 : pos + 4 + length])


def _pylance_live_offsets(ds: lance.LanceDataset) -> dict[int, np.ndarray]:
    """Fragment id -> physical offsets of its live rows, from pylance's `_rowaddr`."""
    addr = ds.to_table(columns=[], with_row_address=True)["_rowaddr"].to_numpy()
    frag = addr >> np.uint64(32)
    out = {}
    for fid in np.unique(frag).tolist():
        out[fid] = np.sort(addr[frag == fid] & np.uint64(0xFFFFFFFF))
    return out


def _fragment_path(fragment: table_pb2.DataFragment) -> str:
    df = fragment.deletion_file
    return deletion_file_path(fragment.id, df.read_version, df.id, df.file_type == BITMAP)


# ---------------------------------------------------------------------------------------------
# a pylance dataset with .arrow and .bin deletion files at several versions
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def deleted_ds(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("deletions") / "ds")
    n = 40000
    table = pa.table({"x": pa.array(np.arange(n, dtype=np.int64))})
    # fragments of 10000 rows: 0..3
    ds = lance.write_dataset(table, root, max_rows_per_file=10000)
    ds.delete("x % 1000 = 7")  # 10 rows in every fragment -> .arrow
    ds.delete("x >= 10000 and x < 20000 and x % 3 = 0")  # frag 1: 3334 + 10 rows -> .arrow
    ds.delete("x >= 20000 and x < 30000 and x % 2 = 0")  # frag 2: 5000 + 5 more -> .bin
    ds.delete("x >= 30000 and x < 35000")  # frag 3: a run of 5000 -> .bin (run-friendly)
    ds.delete("x = 39999")  # frag 3 again: the bitmap grows
    return root


@pytest.mark.compat
def test_pylance_deletion_files_match_pylance_scan(deleted_ds: str) -> None:
    store = open_store(deleted_ds)
    latest = _read_manifest(deleted_ds).version
    seen_types = set()
    for version in range(1, latest + 1):
        manifest = _read_manifest(deleted_ds, version)
        expected = _pylance_live_offsets(lance.dataset(deleted_ds, version=version))
        for frag in manifest.fragments:
            deleted = read_fragment_deletions(store, frag)
            assert deleted.dtype == np.uint32
            assert np.all(np.diff(deleted.astype(np.int64)) > 0)
            if frag.HasField("deletion_file"):
                df = frag.deletion_file
                seen_types.add(df.file_type)
                path = _fragment_path(frag)
                assert path.startswith(f"_deletions/{frag.id}-{df.read_version}-")
                assert os.path.exists(os.path.join(deleted_ds, path))
                assert np.array_equal(read_deletion_file(store, path, df.file_type), deleted)
                assert df.num_deleted_rows == deleted.size
            live = live_offsets(frag.physical_rows, deleted)
            assert np.array_equal(live, expected.get(frag.id, np.empty(0))), (version, frag.id)
    assert seen_types == {ARROW_ARRAY, BITMAP}


def test_pylance_threshold_observed(deleted_ds: str) -> None:
    """Document what pylance chose in the fixture: ≤ 5000 -> .arrow, > 5000 -> .bin."""
    manifest = _read_manifest(deleted_ds)
    kinds = {
        f.id: (f.deletion_file.file_type, f.deletion_file.num_deleted_rows)
        for f in manifest.fragments
    }
    assert kinds[0] == (ARROW_ARRAY, 10)
    assert kinds[1] == (ARROW_ARRAY, 3334 + 10 - 4)  # x%1000==7 overlaps x%3==0 4 times
    assert kinds[2][0] == BITMAP and kinds[2][1] > 5000
    assert kinds[3] == (BITMAP, 5000 + 5 + 1)


@pytest.mark.compat
@pytest.mark.parametrize(
    ("deletes", "expected"),
    [
        ([(0, 4999)], ARROW_ARRAY),
        ([(0, 5000)], BITMAP),  # one delete of exactly 5000 rows: pylance already writes .bin
        ([(0, 4000), (4000, 5000)], ARROW_ARRAY),  # 5000 reached by growing a set: .arrow
        ([(0, 4999), (4999, 5001)], BITMAP),
    ],
)
def test_pylance_threshold_is_path_dependent(
    tmp_path: Path, deletes: list[tuple[int, int]], expected: int
) -> None:
    """pylance's .arrow/.bin choice at exactly 5000 rows depends on how the vector was built."""
    root = str(tmp_path / "ds")
    ds = lance.write_dataset(pa.table({"x": pa.array(np.arange(6000, dtype=np.int64))}), root)
    for lo, hi in deletes:
        ds.delete(f"x >= {lo} and x < {hi}")
    (frag,) = _read_manifest(root).fragments
    assert frag.deletion_file.file_type == expected
    deleted = read_fragment_deletions(open_store(root), frag)
    assert np.array_equal(deleted, np.arange(deletes[-1][1]))


@pytest.mark.compat
def test_our_files_replace_pylance_files(deleted_ds: str, tmp_path: Path) -> None:
    """Overwrite every pylance deletion file with our encoding of the same offsets: same scan."""
    root = str(tmp_path / "copy")
    shutil.copytree(deleted_ds, root)
    store = open_store(root)
    manifest = _read_manifest(root)
    before = lance.dataset(root).to_table(with_row_id=True)
    for frag in manifest.fragments:
        if not frag.HasField("deletion_file"):
            continue
        path = _fragment_path(frag)
        offsets = read_deletion_file(store, path, frag.deletion_file.file_type)
        original = store.read_all(path)
        ours = encode_deletion_file(offsets[::-1], frag.deletion_file.file_type == BITMAP)
        if frag.deletion_file.file_type == BITMAP:
            # pyroaring without run optimisation gives pylance's exact bytes
            assert ours == original
        else:
            assert ours != original  # ordering / padding differ, content must not
        store.put(path, ours)
    after = lance.dataset(root).to_table(with_row_id=True)
    assert after.equals(before)


# ---------------------------------------------------------------------------------------------
# paths and the writer
# ---------------------------------------------------------------------------------------------
def test_deletion_file_path() -> None:
    assert deletion_file_path(0, 2, 7804544671157992211, False) == (
        "_deletions/0-2-7804544671157992211.arrow"
    )
    assert deletion_file_path(12, 5, 1, True) == "_deletions/12-5-1.bin"


@pytest.mark.parametrize("count", [1, 17, 4999, 5000])
def test_write_arrow_file(tmp_path: Path, count: int) -> None:
    store = open_store(str(tmp_path))
    rng = np.random.default_rng(count)
    offsets = rng.choice(100_000, count, replace=False)
    info = write_deletion_file(store, 3, 9, rng.permutation(np.concatenate([offsets, offsets])))
    assert info.file_type == ARROW_ARRAY
    assert info.num_deleted_rows == count
    assert info.path == f"_deletions/3-9-{info.file_id}.arrow"
    assert 0 <= info.file_id < 2**64
    raw = store.read_all(info.path)
    reader = ipc.open_file(pa.py_buffer(raw))
    assert reader.schema.equals(DELETION_SCHEMA, check_metadata=True)
    assert reader.num_record_batches == 1
    assert reader.read_all().column("row_id").null_count == 0
    if count > 100:
        assert _ZSTD_MAGIC in raw  # body compressed with ZSTD, like pylance
    got = read_deletion_file(store, info.path, ARROW_ARRAY)
    assert np.array_equal(got, np.sort(offsets))
    assert got.dtype == np.uint32


@pytest.mark.parametrize("count", [5001, 70_000])
def test_write_bitmap_file(tmp_path: Path, count: int) -> None:
    store = open_store(str(tmp_path))
    offsets = np.random.default_rng(count).choice(2**32, count, replace=False)
    info = write_deletion_file(store, 0, 1, offsets)
    assert info.file_type == BITMAP
    assert info.path.endswith(".bin")
    assert info.num_deleted_rows == count
    raw = store.read_all(info.path)
    assert struct.unpack("<I", raw[:4])[0] & 0xFFFF == 12346  # no run containers, as pylance
    assert np.array_equal(
        np.array(pyroaring.BitMap.deserialize(raw), dtype=np.uint64), np.sort(offsets)
    )
    assert np.array_equal(read_deletion_file(store, info.path, BITMAP), np.sort(offsets))


def test_write_random_ids_and_memory_store() -> None:
    store = open_store("memory://quiver-test-deletion-ids")
    infos = [write_deletion_file(store, 1, 1, np.array([0, 5])) for _ in range(4)]
    assert len({i.file_id for i in infos}) == 4
    for info in infos:
        assert np.array_equal(read_deletion_file(store, info.path, info.file_type), [0, 5])


def test_write_rejects_bad_offsets(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    with pytest.raises(InvalidInputError, match="no deleted offsets"):
        write_deletion_file(store, 0, 1, np.array([], dtype=np.uint32))
    with pytest.raises(InvalidInputError, match=r"\[0, 2\*\*32\)"):
        write_deletion_file(store, 0, 1, np.array([-1, 3]))
    with pytest.raises(InvalidInputError, match=r"\[0, 2\*\*32\)"):
        write_deletion_file(store, 0, 1, np.array([2**32]))
    with pytest.raises(InvalidInputError, match="integers"):
        write_deletion_file(store, 0, 1, np.array([1.5]))
    assert not os.path.exists(tmp_path / "_deletions")


# ---------------------------------------------------------------------------------------------
# reading hand-made and corrupt files
# ---------------------------------------------------------------------------------------------
def _ipc_file(batches: list[pa.RecordBatch], schema: pa.Schema, compression: str | None) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema, options=ipc.IpcWriteOptions(compression=compression)) as w:
        for b in batches:
            w.write_batch(b)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
def test_read_arrow_any_compression(compression: str | None) -> None:
    batch = pa.record_batch([pa.array([9, 2, 2, 7], pa.uint32())], schema=DELETION_SCHEMA)
    data = _ipc_file([batch], DELETION_SCHEMA, compression)
    assert parse_deletion_file(data, ARROW_ARRAY).tolist() == [2, 7, 9]


def test_read_bitmap_with_run_containers() -> None:
    bm = pyroaring.BitMap(range(10, 90_000))
    bm.run_optimize()
    data = bm.serialize()
    assert struct.unpack("<I", data[:4])[0] & 0xFFFF == 12347
    assert np.array_equal(parse_deletion_file(data, BITMAP), np.arange(10, 90_000))


_BAD_ARROW_CASES = [
    "empty",
    "garbage",
    "truncated",
    "half",
    "stream format",
    "int32",
    "nullable",
    "renamed",
    "two columns",
    "field metadata",
    "nulls",
    "two batches",
    "no batches",
]


def _one(schema: pa.Schema, *columns: pa.Array) -> bytes:
    return _ipc_file([pa.record_batch(list(columns), schema=schema)], schema, None)


def _bad_arrow_file(case: str) -> bytes:
    good = encode_deletion_file(np.arange(0, 3000, 3), bitmap=False)
    u32 = pa.array([1, 2], pa.uint32())
    if case == "empty":
        return b""
    if case == "garbage":
        return b"this is not an arrow file at all"
    if case == "truncated":
        return good[: len(good) - 20]
    if case == "half":
        return good[: len(good) // 2]
    if case == "stream format":
        return _stream(pa.record_batch([u32], schema=DELETION_SCHEMA))
    if case == "int32":
        schema = pa.schema([pa.field("row_id", pa.int32(), nullable=False)])
        return _one(schema, pa.array([1], pa.int32()))
    if case == "nullable":
        return _one(pa.schema([("row_id", pa.uint32())]), u32)
    if case == "renamed":
        return _one(pa.schema([pa.field("offset", pa.uint32(), nullable=False)]), u32)
    if case == "two columns":
        schema = pa.schema([pa.field("row_id", pa.uint32(), nullable=False), ("x", pa.uint32())])
        return _one(schema, u32, u32)
    if case == "field metadata":
        field = pa.field("row_id", pa.uint32(), nullable=False, metadata={"k": "v"})
        return _one(pa.schema([field]), u32)
    if case == "nulls":
        return _one(DELETION_SCHEMA, pa.array([1, None], pa.uint32()))
    if case == "two batches":
        batch = pa.record_batch([u32], schema=DELETION_SCHEMA)
        return _ipc_file([batch, batch], DELETION_SCHEMA, None)
    assert case == "no batches"
    return _ipc_file([], DELETION_SCHEMA, None)


def _stream(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("case", _BAD_ARROW_CASES)
def test_corrupt_arrow_files(tmp_path: Path, case: str) -> None:
    store = open_store(str(tmp_path))
    path = "_deletions/4-2-99.arrow"
    store.put(path, _bad_arrow_file(case))
    with pytest.raises(CorruptFileError) as err:
        read_deletion_file(store, path, ARROW_ARRAY)
    assert err.value.path == path
    assert path in str(err.value)


@pytest.mark.parametrize("case", ["empty", "garbage", "truncated", "half", "bad cookie", "zeros"])
def test_corrupt_bitmap_files(tmp_path: Path, case: str) -> None:
    good = encode_deletion_file(np.arange(0, 60_000, 7), bitmap=True)
    data = {
        "empty": b"",
        "garbage": b"\x01\x02\x03",
        "truncated": good[:-10],
        "half": good[: len(good) // 2],
        "bad cookie": b"\x00\x00\x00\x00" + good[4:],
        "zeros": b"\x00" * 64,
    }[case]
    store = open_store(str(tmp_path))
    path = "_deletions/1-1-1.bin"
    store.put(path, data)
    with pytest.raises(CorruptFileError) as err:
        read_deletion_file(store, path, BITMAP)
    assert err.value.path == path


def test_unknown_file_type_and_missing_file(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    store.put("_deletions/0-1-1.arrow", encode_deletion_file(np.array([1]), False))
    with pytest.raises(CorruptFileError, match="unknown deletion file type 7"):
        read_deletion_file(store, "_deletions/0-1-1.arrow", 7)
    with pytest.raises(CorruptFileError, match="_deletions/0-1-2.arrow: deletion file .* missing"):
        read_deletion_file(store, "_deletions/0-1-2.arrow", ARROW_ARRAY)


def _fragment(fid: int, physical_rows: int, info: DeletionFileInfo) -> table_pb2.DataFragment:
    frag = table_pb2.DataFragment(id=fid, physical_rows=physical_rows)
    frag.deletion_file.file_type = info.file_type
    frag.deletion_file.read_version = int(info.path.split("-")[1])
    frag.deletion_file.id = info.file_id
    frag.deletion_file.num_deleted_rows = info.num_deleted_rows
    return frag


def test_read_fragment_deletions_checks(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    assert read_fragment_deletions(store, table_pb2.DataFragment(id=1, physical_rows=5)).size == 0
    info = write_deletion_file(store, 2, 4, np.array([1, 3, 8]))
    frag = _fragment(2, 10, info)
    assert read_fragment_deletions(store, frag).tolist() == [1, 3, 8]
    frag.deletion_file.num_deleted_rows = 0  # "unknown" is accepted
    assert read_fragment_deletions(store, frag).tolist() == [1, 3, 8]
    frag.deletion_file.num_deleted_rows = 4
    with pytest.raises(CorruptFileError, match="manifest says 4") as err:
        read_fragment_deletions(store, frag)
    assert err.value.path == info.path
    frag = _fragment(2, 8, info)
    with pytest.raises(CorruptFileError, match="offset 8 of a fragment with 8"):
        read_fragment_deletions(store, frag)
    frag.deletion_file.base_id = 1
    with pytest.raises(UnsupportedFeatureError):
        read_fragment_deletions(store, frag)


def test_live_mask() -> None:
    assert live_mask(5, np.array([], dtype=np.uint32)).tolist() == [True] * 5
    assert live_mask(5, np.array([4, 0], dtype=np.uint32)).tolist() == [
        False,
        True,
        True,
        True,
        False,
    ]
    assert live_offsets(6, np.array([1, 2], dtype=np.uint64)).tolist() == [0, 3, 4, 5]
    assert live_mask(0, np.array([], dtype=np.uint32)).size == 0
    with pytest.raises(InvalidInputError, match="outside a fragment of 5 rows"):
        live_mask(5, np.array([5]))
    with pytest.raises(InvalidInputError):
        live_mask(5, np.array([-1]))


@pytest.mark.parametrize("bitmap", [False, True])
def test_every_damaged_byte_is_corrupt_or_still_offsets(bitmap: bool) -> None:
    """Each byte of a deletion file overwritten in turn: the file still parses to sorted
    offsets, or raises CorruptFileError (never pyarrow's or pyroaring's own errors)."""
    data = encode_deletion_file(np.array([1, 5, 9, 70_000]), bitmap)
    file_type = BITMAP if bitmap else ARROW_ARRAY
    outcomes = set()
    for i in range(len(data)):
        damaged = data[:i] + bytes([data[i] ^ 0x5A]) + data[i + 1 :]
        try:
            offsets = parse_deletion_file(damaged, file_type, "_deletions/x")
        except CorruptFileError:
            outcomes.add("corrupt")
            continue
        assert offsets.dtype == np.uint32 and np.all(np.diff(offsets.astype(np.int64)) > 0)
        outcomes.add("parsed")
    assert "corrupt" in outcomes
