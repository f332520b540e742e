"""Blob columns read as files (`take_blobs`, `read_blobs`, `BlobFile`) compared with pylance
on datasets pylance writes: legacy blobs in 2.0 and 2.1 files, blob v2 in 2.2 files with
every kind of storage (inline in the data file, packed and dedicated sidecars), nulls and
empty values, after deletes and appends, selected by index, row id and row address."""

from __future__ import annotations

import io
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from quiver.format.dataset import dataset
from quiver.format.errors import ColumnNotFoundError, InvalidInputError

# inline (<= 64 KiB), packed, and dedicated (>= 8 MiB in pylance 14's defaults) at 2.2
SIZES = [10, 4096, 0, 60_000, 70_000, 1 << 20, 9 << 20, 100]
BLOB = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
SCHEMA = pa.schema([pa.field("id", pa.int64()), BLOB])


def _values(start: int) -> list[bytes | None]:
    out: list[bytes | None] = [bytes([(start + i) % 251]) * n for i, n in enumerate(SIZES)]
    out[6 if start else 1] = None  # a null among them
    return out


@pytest.fixture(scope="module", params=["2.0", "2.1", "2.2"])
def blobs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Two fragments of blobs of every size, one row deleted."""
    uri = str(tmp_path_factory.mktemp("blobs") / f"b{request.param}.lance")
    for start in (0, 100):
        rows = pa.table(
            {"id": list(range(start, start + len(SIZES))), "b": _values(start)}, schema=SCHEMA
        )
        lance.write_dataset(
            rows, uri, mode="append" if start else "create", data_storage_version=request.param
        )
    lance.dataset(uri).delete("id = 3")
    return uri


def _payloads(files: list) -> list[bytes | None]:
    return [None if f is None else f.readall() for f in files]


def test_take_blobs_match_pylance_by_index_id_and_address(blobs: str) -> None:
    ours, ref = dataset(blobs), lance.dataset(blobs)
    n = ref.count_rows()
    every = list(range(n))[::-1]
    expected = _payloads(ref.take_blobs("b", indices=every))
    assert _payloads(ours.take_blobs("b", indices=every)) == expected
    assert [None if v is None else len(v) for v in expected].count(None) == 2
    table = ref.to_table(columns=["id"], with_row_id=True, with_row_address=True)
    ids, addrs = table["_rowid"].to_pylist(), table["_rowaddr"].to_pylist()
    assert _payloads(ours.take_blobs("b", ids=ids)) == _payloads(ref.take_blobs("b", ids=ids))
    assert _payloads(ours.take_blobs("b", addresses=addrs)) == _payloads(
        ref.take_blobs("b", addresses=addrs)
    )
    # the payload is the row's value
    by_id = dict(zip(table["id"].to_pylist(), range(n), strict=True))
    got = _payloads(ours.take_blobs("b", indices=[by_id[101], by_id[5]]))
    assert got == [_values(100)[1], _values(0)[5]]


def test_read_blobs_match_pylance(blobs: str) -> None:
    ours, ref = dataset(blobs), lance.dataset(blobs)
    picks = [7, 0, 2, 9, 1, 6]
    assert ours.read_blobs("b", indices=picks) == ref.read_blobs("b", indices=picks)
    addrs = ref.to_table(columns=["id"], with_row_address=True)["_rowaddr"].to_pylist()
    assert ours.read_blobs("b", addresses=addrs) == ref.read_blobs("b", addresses=addrs)


def test_blob_files_read_seek_and_ranges_as_pylance(blobs: str) -> None:
    ours, ref = dataset(blobs), lance.dataset(blobs)
    index = 5  # a 1 MiB value: packed at 2.2, in the data file before
    (mine,), (theirs,) = ours.take_blobs("b", indices=[index]), ref.take_blobs("b", indices=[index])
    whole = theirs.readall()
    assert mine.size() == theirs.size() == len(whole)
    assert isinstance(mine, io.BufferedIOBase) and mine.seekable() and mine.readable()
    assert mine.read(7) == whole[:7] and mine.tell() == 7
    assert mine.seek(-10, io.SEEK_END) == len(whole) - 10
    assert mine.read() == whole[-10:] and mine.read(5) == b""
    mine.seek(1000)
    mine.seek(24, io.SEEK_CUR)
    buf = bytearray(600_000)  # past the read-ahead buffer
    assert mine.readinto(buf) == 600_000 and bytes(buf) == whole[1024:601_024]
    ranges = [(0, 3), (len(whole) - 4, 4), (500, 0)]
    assert mine.read_ranges(ranges) == theirs.read_ranges(ranges)
    assert mine.read_range(9, 11) == theirs.read_range(9, 11)
    assert mine.tell() == 601_024  # ranged reads leave the cursor alone
    with pytest.raises(InvalidInputError, match="outside the blob"):
        mine.read_range(len(whole) - 1, 2)
    mine.close()
    assert mine.closed
    with pytest.raises(ValueError, match="closed"):
        mine.read(1)
    with dataset(blobs).take_blobs("b", indices=[index], buffer_size=0)[0] as unbuffered:
        assert unbuffered.read(5) == whole[:5]


def test_blob_selection_errors(blobs: str) -> None:
    ours = dataset(blobs)
    with pytest.raises(InvalidInputError, match="exactly one"):
        ours.take_blobs("b", ids=[0], indices=[0])
    with pytest.raises(InvalidInputError, match="exactly one"):
        ours.read_blobs("b")
    with pytest.raises(InvalidInputError, match="not a blob column"):
        ours.take_blobs("id", indices=[0])
    with pytest.raises(ColumnNotFoundError, match="nope"):
        ours.take_blobs("nope", indices=[0])
    with pytest.raises(InvalidInputError, match="out of range"):
        ours.take_blobs("b", indices=[10_000])


@pytest.mark.parametrize(
    "options",
    [{}, {"columns": ["b"], "with_row_id": True}, {"filter": "id > 4", "with_row_address": True}],
)
def test_scans_with_blob_bytes_match_pylance(blobs: str, options: dict) -> None:
    for handling in ("all_binary", "blobs_descriptions", "all_descriptions"):
        ours = dataset(blobs).to_table(blob_handling=handling, **options)
        theirs = lance.dataset(blobs).to_table(blob_handling=handling, **options)
        assert ours.schema.equals(theirs.schema, check_metadata=True), handling
        assert ours.equals(theirs), handling
    batches = list(dataset(blobs).scanner(blob_handling="all_binary", batch_size=3).to_batches())
    assert [b.num_rows for b in batches][:2] == [3, 3]


def test_blob_handling_is_checked(blobs: str) -> None:
    with pytest.raises(InvalidInputError, match="blob_handling 'bytes'"):
        dataset(blobs).to_table(blob_handling="bytes")
    with pytest.raises(InvalidInputError, match="plain scans"):
        dataset(blobs).to_table(blob_handling="all_binary", order_by=["id"])


def test_external_blobs_by_uri_and_through_a_base_path(tmp_path: Path) -> None:
    from lance.blob import Blob, blob_array

    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"0123456789abcdef")
    base = tmp_path / "media"
    base.mkdir()
    (base / "clip.bin").write_bytes(b"ZYXWVUTS")
    uri = str(tmp_path / "ext.lance")
    values = blob_array(
        [
            Blob.from_uri(outside.as_uri()),  # the whole object
            Blob.from_uri(outside.as_uri(), position=4, size=6),
            Blob.from_bytes(b"inline"),
            None,
        ]
    )
    lance.write_dataset(
        pa.table({"id": [1, 2, 3, 4], "b": values}), uri, allow_external_blob_outside_bases=True
    )
    assert dataset(uri).read_blobs("b", indices=[0, 1, 2, 3]) == [
        (0, b"0123456789abcdef"),
        (1, b"456789"),
        (2, b"inline"),
        (3, None),
    ]
    based = str(tmp_path / "based.lance")
    clip = blob_array([Blob.from_uri((base / "clip.bin").as_uri(), position=2, size=3)])
    lance.write_dataset(
        pa.table({"id": [1], "b": clip}),
        based,
        initial_bases=[lance.DatasetBasePath(base.as_uri(), name="media")],
    )
    assert lance.dataset(based).to_table()["b"][0]["blob_uri"].as_py() == "clip.bin"
    (f,) = dataset(based).take_blobs("b", indices=[0])
    assert f.readall() == b"XWV" == lance.dataset(based).take_blobs("b", indices=[0])[0].readall()


def test_deleted_rows_are_refused_as_pylance_refuses_them(blobs: str) -> None:
    ref = lance.dataset(blobs)
    gone = ref.to_table(columns=["id"], with_row_address=True)["_rowaddr"][0].as_py() + 3
    # id 3 was deleted: its address is the fourth of the first fragment
    with pytest.raises(NotImplementedError):
        ref.take_blobs("b", addresses=[gone])
    with pytest.raises(InvalidInputError, match="deleted or not in this version"):
        dataset(blobs).take_blobs("b", addresses=[gone])
    assert dataset(blobs).take_blobs("b", indices=[]) == []


def test_read_blob_ranges_match_pylance(blobs: str) -> None:
    ours, ref = dataset(blobs), lance.dataset(blobs)
    requests = [(5, 0, 10), (1, 3, 0), (5, 1_000_000, 48_576), (0, 2, 5), (5, 7, 1)]
    assert ours.read_blob_ranges("b", requests, selector="indices") == ref.read_blob_ranges(
        "b", requests, selector="indices"
    )
    ids = ref.to_table(columns=["id"], with_row_id=True)["_rowid"].to_pylist()
    by_id = [(ids[r], o, n) for r, o, n in requests]
    assert ours.read_blob_ranges("b", by_id, selector="ids") == ref.read_blob_ranges(
        "b", by_id, selector="ids"
    )
    with pytest.raises(InvalidInputError, match="selector"):
        ours.read_blob_ranges("b", requests, selector="rows")
    with pytest.raises(InvalidInputError, match="outside the blob"):
        ours.read_blob_ranges("b", [(0, 0, 1 << 30)], selector="indices")
