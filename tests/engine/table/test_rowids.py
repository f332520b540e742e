"""Row-id and row-version sequences: hand-made segments, round trips, pylance, corruption."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quiver.format.errors import CorruptFileError, InvalidInputError
from quiver.format.io.store import open_store
from quiver.format.proto import rowids_pb2, table_pb2
from quiver.format.table.deletion import live_offsets, read_fragment_deletions
from quiver.format.table.rowids import (
    _fill_segment,
    decode_row_ids,
    decode_row_versions,
    encode_row_ids,
    encode_row_versions,
    offsets_in_segments,
    row_id_count,
    row_id_segments,
)

U64_MAX = 2**64 - 1
_MAX_VERSION_NAME = 18446744073709551615


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def _read_manifest(root: str, version: int | None = None) -> table_pb2.Manifest:
    """Latest (or given) manifest of a dataset written with V2 names (test-local reader)."""
    vdir = os.path.join(root, "_versions")
    if version is None:
        name = min(n for n in os.listdir(vdir) if n.endswith(".manifest"))
    else:
        name = f"{_MAX_VERSION_NAME - version:020d}.manifest"
    data = Path(vdir, name).read_bytes()
    assert data[-4:] == b"LANC"
    (pos,) = struct.unpack("<q", data[-16:-8])
    (length,) = struct.unpack("<I", data[pos : pos + 4])
    return table_pb2.Manifest.FromString(data[pos + 4 : pos + 4 + length])


def _commit_manifest(root: str, manifest: table_pb2.Manifest) -> int:
    """Write `manifest` as the next version (no transaction, no index section); return it."""
    manifest.version += 1
    for field in ("transaction_section", "transaction_section_deprecated", "transaction_file"):
        manifest.ClearField(field)
    body = manifest.SerializeToString()
    data = struct.pack("<I", len(body)) + body + struct.pack("<qhh", 0, 0, 2) + b"LANC"
    name = f"{_MAX_VERSION_NAME - manifest.version:020d}.manifest"
    with open(os.path.join(root, "_versions", name), "xb") as f:
        f.write(data)
    return manifest.version


def _seq(*segments: rowids_pb2.U64Segment) -> bytes:
    return rowids_pb2.RowIdSequence(segments=list(segments)).SerializeToString()


def _u16(base: int, offsets: list[int]) -> rowids_pb2.EncodedU64Array:
    arr = rowids_pb2.EncodedU64Array()
    arr.u16_array.base = base
    arr.u16_array.offsets = np.array(offsets, dtype="<u2").tobytes()
    return arr


def _u32(base: int, offsets: list[int]) -> rowids_pb2.EncodedU64Array:
    arr = rowids_pb2.EncodedU64Array()
    arr.u32_array.base = base
    arr.u32_array.offsets = np.array(offsets, dtype="<u4").tobytes()
    return arr


def _u64(values: list[int]) -> rowids_pb2.EncodedU64Array:
    arr = rowids_pb2.EncodedU64Array()
    arr.u64_array.values = np.array(values, dtype="<u8").tobytes()
    return arr


def _range(start: int, end: int) -> rowids_pb2.U64Segment:
    seg = rowids_pb2.U64Segment()
    seg.range.start, seg.range.end = start, end
    return seg


def _holes(start: int, end: int, holes: rowids_pb2.EncodedU64Array | None):
    seg = rowids_pb2.U64Segment()
    seg.range_with_holes.start, seg.range_with_holes.end = start, end
    if holes is not None:
        seg.range_with_holes.holes.CopyFrom(holes)
    return seg


def _bitmap(start: int, end: int, bitmap: bytes) -> rowids_pb2.U64Segment:
    seg = rowids_pb2.U64Segment()
    seg.range_with_bitmap.start, seg.range_with_bitmap.end = start, end
    seg.range_with_bitmap.bitmap = bitmap
    return seg


def _array(arr: rowids_pb2.EncodedU64Array, sorted_: bool) -> rowids_pb2.U64Segment:
    seg = rowids_pb2.U64Segment()
    (seg.sorted_array if sorted_ else seg.array).CopyFrom(arr)
    return seg


def _kinds(data: bytes) -> list[str]:
    out = []
    for seg in rowids_pb2.RowIdSequence.FromString(data).segments:
        kind = seg.WhichOneof("segment")
        if kind in ("sorted_array", "array"):
            kind += ":" + getattr(seg, kind).WhichOneof("array")
        out.append(kind)
    return out


# ---------------------------------------------------------------------------------------------
# hand-made segments
# ---------------------------------------------------------------------------------------------
def test_range() -> None:
    assert decode_row_ids(_seq(_range(5, 9))).tolist() == [5, 6, 7, 8]
    assert decode_row_ids(_seq(_range(7, 7))).size == 0
    assert decode_row_ids(_seq()).size == 0
    assert decode_row_ids(b"").dtype == np.uint64
    big = decode_row_ids(_seq(_range(U64_MAX - 3, U64_MAX)))
    assert big.dtype == np.uint64 and big.tolist() == [U64_MAX - 3, U64_MAX - 2, U64_MAX - 1]


def test_many_small_ranges_are_batched() -> None:
    starts = np.random.default_rng(0).permutation(200_000) * 3
    data = _seq(*[_range(int(s), int(s) + 1 + (i % 2)) for i, s in enumerate(starts[:20000])])
    expected = np.concatenate(
        [np.arange(s, s + 1 + (i % 2)) for i, s in enumerate(starts[:20000].tolist())]
    )
    assert np.array_equal(decode_row_ids(data), expected)


def test_range_with_holes_each_width() -> None:
    # holes are absolute ids: base 101 + offsets [0, 2, 4] -> {101, 103, 105}
    got = decode_row_ids(_seq(_holes(100, 108, _u16(101, [0, 2, 4]))))
    assert got.tolist() == [100, 102, 104, 106, 107]
    got = decode_row_ids(_seq(_holes(0, 100_001, _u32(0, [0, 100_000]))))
    assert np.array_equal(got, np.arange(1, 100_000))
    start = 2**40
    got = decode_row_ids(_seq(_holes(start, start + 5, _u64([start + 1, start + 3]))))
    assert got.tolist() == [start, start + 2, start + 4]
    assert decode_row_ids(_seq(_holes(3, 6, _u64([])))).tolist() == [3, 4, 5]


def test_range_with_bitmap_is_lsb_first() -> None:
    # 0x9D = 0b10011101 -> bits 0, 2, 3, 4, 7 set
    assert decode_row_ids(_seq(_bitmap(100, 108, b"\x9d"))).tolist() == [100, 102, 103, 104, 107]
    # 10-bit span: second byte only uses its lowest 2 bits
    got = decode_row_ids(_seq(_bitmap(0, 10, b"\x01\x02")))
    assert got.tolist() == [0, 9]
    assert decode_row_ids(_seq(_bitmap(4, 4, b""))).size == 0


def test_arrays_each_width() -> None:
    assert decode_row_ids(_seq(_array(_u16(1000, [5, 0, 65535]), False))).tolist() == [
        1005,
        1000,
        66535,
    ]
    assert decode_row_ids(_seq(_array(_u32(7, [0, 70000, 2**32 - 1]), True))).tolist() == [
        7,
        70007,
        7 + 2**32 - 1,
    ]
    assert decode_row_ids(_seq(_array(_u64([U64_MAX, 0, 2**63]), False))).tolist() == [
        U64_MAX,
        0,
        2**63,
    ]
    empty = rowids_pb2.EncodedU64Array()
    empty.u64_array.SetInParent()
    assert decode_row_ids(_seq(_array(empty, True))).size == 0


def test_mixed_sequence_and_counts() -> None:
    data = _seq(
        _range(0, 3),
        _range(3, 5),
        _holes(10, 15, _u16(11, [0, 2])),
        _bitmap(20, 28, b"\x81"),
        _array(_u16(50, [2, 1, 0]), False),
        _range(100, 101),
        _array(_u32(1000, [0, 100_000]), True),
    )
    expected = [0, 1, 2, 3, 4, 10, 12, 14, 20, 27, 52, 51, 50, 100, 1000, 101_000]
    got = decode_row_ids(data, expected_len=len(expected))
    assert got.tolist() == expected
    assert row_id_count(data) == len(expected)


# ---------------------------------------------------------------------------------------------
# encoder: segment choice and round trips
# ---------------------------------------------------------------------------------------------
def _expected_kind(ids: np.ndarray) -> str:
    """The segment pylance picks (``U64Segment::from_slice``), restated independently."""
    if ids.size == 0:
        return "range"
    if not all(int(a) < int(b) for a, b in zip(ids[:-1], ids[1:], strict=False)):
        return "array"
    lo, hi = int(ids[0]), int(ids[-1])
    if hi == U64_MAX:
        return "sorted_array"
    slots, n = hi - lo + 1, int(ids.size)
    holes = slots - n
    if holes == 0:
        return "range"
    sizes = [24 + 4 * holes, 24 + (slots + 7) // 8, 24 + 2 * n]
    return ["range_with_holes", "range_with_bitmap", "sorted_array"][sizes.index(min(sizes))]


def _expected_width(ids: np.ndarray) -> str:
    spread = int(ids.max()) - int(ids.min()) if ids.size else 0
    if ids.size == 0 or spread > 2**32 - 1:
        return "u64_array"
    return "u16_array" if spread <= 65535 else "u32_array"


def _check_round_trip(ids: np.ndarray) -> bytes:
    data = encode_row_ids(ids)
    got = decode_row_ids(data, expected_len=ids.size)
    assert got.dtype == np.uint64
    assert np.array_equal(got, ids.astype(np.uint64))
    (kind,) = _kinds(data)
    assert kind.split(":")[0] == _expected_kind(ids.astype(np.uint64))
    if kind.startswith(("array", "sorted_array")):
        assert kind.split(":")[1] == _expected_width(ids)
    return data


def test_encoder_segment_choice_examples() -> None:
    cases = {
        "range": np.arange(10, 20),
        "range_with_holes": np.delete(np.arange(1000, 2000), [5, 500]),
        "range_with_bitmap": np.arange(0, 1000, 2),
        "sorted_array": np.array([0, 5_000, 10_000, 70_000]),
        "array": np.array([3, 1, 2]),
    }
    for kind, ids in cases.items():
        data = _check_round_trip(ids)
        assert _kinds(data)[0].split(":")[0] == kind
    assert _kinds(encode_row_ids(np.array([], dtype=np.uint64))) == ["range"]
    assert _kinds(encode_row_ids(np.array([2**40, 0, 2**41]))) == ["array:u64_array"]
    assert _kinds(encode_row_ids(np.array([0, 70000, 5]))) == ["array:u32_array"]
    assert _kinds(encode_row_ids(np.array([U64_MAX]))) == ["sorted_array:u16_array"]
    # hole offsets are absolute ids, LSB-first bitmaps, base = min
    seg = rowids_pb2.RowIdSequence.FromString(encode_row_ids(cases["range_with_holes"]))
    holes = seg.segments[0].range_with_holes.holes.u16_array
    assert holes.base == 1005
    assert np.frombuffer(holes.offsets, "<u2").tolist() == [0, 495]
    seg = rowids_pb2.RowIdSequence.FromString(encode_row_ids(np.array([100, 102, 103, 104, 107])))
    assert seg.segments[0].range_with_bitmap.bitmap == b"\x9d"


def test_encoder_tie_breaks_in_pylance_order() -> None:
    # 24 + 4*holes == 24 + ceil(slots/8): holes wins. slots = 32, holes = 1 -> 28 vs 28 vs 86
    ids = np.delete(np.arange(32), 7)
    assert _kinds(encode_row_ids(ids)) == ["range_with_holes"]
    # bitmap == sorted array: slots = 16 n -> 24 + 2n both; bitmap wins
    ids = np.arange(0, 160, 16)
    assert _kinds(encode_row_ids(ids)) == ["range_with_bitmap"]


def test_encoder_accepts_ints_and_rejects_garbage() -> None:
    assert decode_row_ids(encode_row_ids([4, 5, 6])).tolist() == [4, 5, 6]
    assert decode_row_ids(encode_row_ids(np.array([1, 2], dtype=np.int32))).tolist() == [1, 2]
    big = np.array([U64_MAX, 1], dtype=object)
    assert decode_row_ids(encode_row_ids(big)).tolist() == [U64_MAX, 1]
    with pytest.raises(InvalidInputError, match="non-negative"):
        encode_row_ids(np.array([-1, 2]))
    with pytest.raises(InvalidInputError, match="one-dimensional"):
        encode_row_ids(np.zeros((2, 2), dtype=np.uint64))
    with pytest.raises(InvalidInputError, match="integers"):
        encode_row_ids(np.array([1.0]))
    with pytest.raises(InvalidInputError, match="non-negative"):
        encode_row_versions(np.array([-3]))


_u64s = st.integers(min_value=0, max_value=U64_MAX)


@st.composite
def _id_arrays(draw: st.DrawFn) -> np.ndarray:
    shape = draw(st.sampled_from(["contiguous", "holes", "dense", "sparse", "unsorted", "large"]))
    n = draw(st.integers(min_value=0, max_value=3000))
    if shape == "contiguous":
        start = draw(st.integers(0, U64_MAX - n))
        return np.arange(n, dtype=np.uint64) + np.uint64(start)
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    if shape in ("holes", "dense"):
        span = n + (draw(st.integers(1, max(1, n // 40))) if shape == "holes" else n * 3 + 1)
        start = draw(st.integers(0, 2**63))
        picked = np.sort(rng.choice(span, min(n, span), replace=False)).astype(np.uint64)
        return picked + np.uint64(start)
    if shape == "sparse":
        spread = draw(st.sampled_from([2**16, 2**20, 2**33, 2**63]))
        return np.unique(rng.integers(0, spread, n, dtype=np.uint64))
    if shape == "unsorted":
        spread = draw(st.sampled_from([2**10, 2**16, 2**17, 2**32, 2**40]))
        ids = np.unique(rng.integers(0, spread, n, dtype=np.uint64))
        return rng.permutation(ids)
    values = draw(st.lists(_u64s, max_size=50, unique=True))
    if draw(st.booleans()):
        values.sort()
    return np.array(values, dtype=np.uint64)


@settings(max_examples=300, deadline=None)
@given(_id_arrays())
def test_round_trip_property(ids: np.ndarray) -> None:
    _check_round_trip(ids)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), _u64s), max_size=30))
def test_row_versions_round_trip(runs: list[tuple[int, int]]) -> None:
    versions = np.repeat(
        np.array([v for _, v in runs], dtype=np.uint64), [n for n, _ in runs]
    ).astype(np.uint64)
    data = encode_row_versions(versions)
    got = decode_row_versions(data, expected_len=versions.size)
    assert got.dtype == np.uint64 and np.array_equal(got, versions)
    seq = rowids_pb2.RowDatasetVersionSequence.FromString(data)
    # maximal runs over consecutive physical offsets
    assert all(a.version != b.version for a, b in zip(seq.runs[:-1], seq.runs[1:], strict=True))
    pos = 0
    for run in seq.runs:
        assert run.span.WhichOneof("segment") == "range" and run.span.range.start == pos
        pos = run.span.range.end
    assert pos == versions.size


def test_row_versions_only_span_length_counts() -> None:
    seq = rowids_pb2.RowDatasetVersionSequence()
    for span, version in [(_bitmap(1000, 1010, b"\x05\x03"), 4), (_range(7, 8), 9)]:
        run = seq.runs.add()
        run.span.CopyFrom(span)
        run.version = version
    run = seq.runs.add()
    run.span.CopyFrom(_array(_u16(0, [9, 3]), False))
    run.version = 2
    assert decode_row_versions(seq.SerializeToString()).tolist() == [4, 4, 4, 4, 9, 2, 2]
    assert encode_row_versions(np.array([], dtype=np.uint64)) == b""
    assert decode_row_versions(b"").size == 0
    assert rowids_pb2.RowDatasetVersionSequence.FromString(
        encode_row_versions(np.full(4000, 1))
    ) == rowids_pb2.RowDatasetVersionSequence(
        runs=[rowids_pb2.RowDatasetVersionRun(span=_range(0, 4000), version=1)]
    )


# ---------------------------------------------------------------------------------------------
# corrupt input
# ---------------------------------------------------------------------------------------------
def _bad_u16_odd() -> rowids_pb2.EncodedU64Array:
    arr = rowids_pb2.EncodedU64Array()
    arr.u16_array.offsets = b"\x01\x02\x03"
    return arr


def _bad_u32_len() -> rowids_pb2.EncodedU64Array:
    arr = rowids_pb2.EncodedU64Array()
    arr.u32_array.offsets = b"\x01\x02"
    return arr


def _bad_u64_len() -> rowids_pb2.EncodedU64Array:
    arr = rowids_pb2.EncodedU64Array()
    arr.u64_array.values = b"\x01" * 12
    return arr


_CORRUPT = {
    "garbage": (b"\xff\xff\xff\xff\xff", "cannot decode RowIdSequence"),
    "truncated": (encode_row_ids(np.arange(0, 100, 3))[:-3], "cannot decode"),
    "end < start": (_seq(_range(10, 4)), "range end 4 < start 10"),
    "holes end < start": (_seq(_holes(9, 3, _u16(0, []))), "range end 3 < start 9"),
    "bitmap too short": (_seq(_bitmap(0, 20, b"\xff\xff")), "bitmap too short"),
    "bitmap too long": (_seq(_bitmap(0, 8, b"\xff\xff")), "bitmap too long"),
    "missing holes": (_seq(_holes(0, 10, None)), "no holes array"),
    "holes outside": (_seq(_holes(0, 10, _u16(5, [0, 5]))), "outside the range"),
    "holes unsorted": (_seq(_holes(0, 10, _u16(2, [3, 1]))), "not strictly increasing"),
    "no segment type": (_seq(rowids_pb2.U64Segment()), "segment 0: segment has no type"),
    "no array type": (_seq(_array(rowids_pb2.EncodedU64Array(), True)), "no array type"),
    "odd u16 bytes": (_seq(_array(_bad_u16_odd(), False)), "not a multiple of 2"),
    "u32 bytes": (_seq(_range(0, 1), _array(_bad_u32_len(), False)), "segment 1 array"),
    "u64 bytes": (_seq(_array(_bad_u64_len(), True)), "not a multiple of 8"),
    "overflow": (_seq(_array(_u16(U64_MAX, [0, 1]), False)), "overflows u64"),
    "too many rows": (_seq(_range(0, 2**33)), "more than a fragment can"),
}


@pytest.mark.parametrize("case", sorted(_CORRUPT))
def test_corrupt_row_ids(case: str) -> None:
    data, message = _CORRUPT[case]
    with pytest.raises(CorruptFileError, match=message) as err:
        decode_row_ids(data, source="fragment 9 inline_row_ids")
    assert err.value.path == "fragment 9 inline_row_ids"


def test_corrupt_row_ids_length_and_type() -> None:
    with pytest.raises(CorruptFileError, match="covers 3 rows, expected 4"):
        decode_row_ids(_seq(_range(0, 3)), expected_len=4)
    with pytest.raises(InvalidInputError, match="expected bytes"):
        decode_row_ids("not bytes")  # type: ignore[arg-type]


def test_corrupt_row_versions() -> None:
    seq = rowids_pb2.RowDatasetVersionSequence()
    seq.runs.add().version = 3
    with pytest.raises(CorruptFileError, match="run 0 has no span"):
        decode_row_versions(seq.SerializeToString(), source="frag 1 created_at")
    with pytest.raises(CorruptFileError, match="cannot decode RowDatasetVersionSequence"):
        decode_row_versions(b"\x0a\xff\xff\xff")
    data = encode_row_versions(np.array([1, 1, 2]))
    with pytest.raises(CorruptFileError, match="covers 3 rows, expected 5"):
        decode_row_versions(data, expected_len=5)
    seq = rowids_pb2.RowDatasetVersionSequence()
    seq.runs.add(span=_range(5, 2), version=1)
    with pytest.raises(CorruptFileError, match="run 0 span: range end 2 < start 5"):
        decode_row_versions(seq.SerializeToString())


# ---------------------------------------------------------------------------------------------
# against pylance
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stable_ds(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Stable-row-id dataset whose fragments hold every segment kind pylance writes."""
    root = str(tmp_path_factory.mktemp("rowids") / "ds")

    def rows(lo: int, hi: int) -> pa.Table:
        return pa.table({"x": pa.array(np.arange(lo, hi, dtype=np.int64))})

    ds = lance.write_dataset(
        rows(0, 20000), root, enable_stable_row_ids=True, max_rows_per_file=5000
    )
    ds = lance.write_dataset(rows(20000, 90000), root, mode="append", max_rows_per_file=70000)
    ds.delete("x < 5000 and x % 7 = 3")  # -> bitmap after compaction
    ds.delete("x >= 5000 and x < 10000 and x % 1000 = 1")  # -> holes
    ds.delete("x >= 10000 and x < 15000 and x % 3 = 0")  # -> bitmap
    ds.delete("x >= 15000 and x < 20000 and x % 50 != 0")  # -> sorted array, u16
    ds.delete("x >= 20000 and x % 600 != 0")  # 69 884 rows: .bin, then sorted array, u32
    ds.optimize.compact_files(
        target_rows_per_fragment=6000, materialize_deletions_threshold=0.0001, num_threads=1
    )
    ds = lance.dataset(root)
    ds.delete("x % 997 = 5")  # deletion files on compacted fragments
    source = pa.table({"x": pa.array([12001, 24000, 9002, 4, 17000], pa.int64())})
    ds.merge_insert("x").when_matched_update_all().execute(source)  # one Range per moved row
    return root


def _check_against_pylance(root: str, version: int | None = None) -> set[str]:
    """Decode every fragment's ids and versions; compare live rows with pylance's columns."""
    store = open_store(root)
    manifest = _read_manifest(root, version)
    ds = lance.dataset(root, version=manifest.version)
    table = ds.to_table(
        columns=["_row_last_updated_at_version", "_row_created_at_version"],
        with_row_id=True,
        with_row_address=True,
    )
    addr = table["_rowaddr"].to_numpy()
    kinds: set[str] = set()
    checked = 0
    for frag in manifest.fragments:
        assert frag.WhichOneof("row_id_sequence") == "inline_row_ids"
        ids = decode_row_ids(
            frag.inline_row_ids, source=f"fragment {frag.id}", expected_len=frag.physical_rows
        )
        kinds.update(_kinds(frag.inline_row_ids))
        live = live_offsets(frag.physical_rows, read_fragment_deletions(store, frag))
        mine = addr >> np.uint64(32) == frag.id
        offsets = addr[mine] & np.uint64(0xFFFFFFFF)
        assert np.array_equal(offsets, live), frag.id  # pylance scans physical order
        assert np.array_equal(table["_rowid"].to_numpy()[mine], ids[live]), frag.id
        for field, column in [
            ("inline_last_updated_at_versions", "_row_last_updated_at_version"),
            ("inline_created_at_versions", "_row_created_at_version"),
        ]:
            versions = decode_row_versions(
                getattr(frag, field), source=field, expected_len=frag.physical_rows
            )
            assert np.array_equal(table[column].to_numpy()[mine], versions[live]), (frag.id, field)
        checked += int(live.size)
    assert checked == table.num_rows
    return kinds


@pytest.mark.compat
def test_pylance_row_ids_every_version(stable_ds: str) -> None:
    latest = _read_manifest(stable_ds).version
    kinds: set[str] = set()
    for version in range(1, latest + 1):
        kinds |= _check_against_pylance(stable_ds, version)
    assert {
        "range",
        "range_with_holes",
        "range_with_bitmap",
        "sorted_array:u16_array",
        "sorted_array:u32_array",
    } <= kinds


@pytest.mark.compat
def test_reencoding_pylance_segments_is_byte_identical(stable_ds: str) -> None:
    """Each segment pylance wrote is exactly what our encoder produces for its ids."""
    seen = 0
    for frag in _read_manifest(stable_ds).fragments:
        for seg in rowids_pb2.RowIdSequence.FromString(frag.inline_row_ids).segments:
            alone = _seq(seg)
            assert encode_row_ids(decode_row_ids(alone)) == alone
            seen += 1
    assert seen >= 5


@pytest.mark.compat
def test_pylance_reads_our_sequences(tmp_path: Path) -> None:
    """Put our encodings of chosen ids and versions into a manifest: pylance reads them back."""
    root = str(tmp_path / "ds")
    table = pa.table({"x": pa.array(np.arange(7000, dtype=np.int64))})
    ds = lance.write_dataset(table, root, enable_stable_row_ids=True, max_rows_per_file=1000)
    ds.delete("x % 97 = 3")
    manifest = _read_manifest(root)
    rng = np.random.default_rng(7)
    n = 1000
    makers = {
        "array:u16_array": lambda: rng.permutation(n).astype(np.uint64),
        "array:u32_array": lambda: rng.permutation(n).astype(np.uint64) * np.uint64(70_000),
        "array:u64_array": lambda: rng.permutation(n).astype(np.uint64) * np.uint64(2**33),
        "sorted_array:u64_array": lambda: np.sort(rng.choice(2**40, n, replace=False)),
        "range_with_holes": lambda: np.delete(np.arange(n + 3, dtype=np.uint64), [1, 500, n]),
        "range_with_bitmap": lambda: np.arange(0, 2 * n, 2, dtype=np.uint64),
        "range": lambda: np.arange(n, dtype=np.uint64),
    }
    assert len(manifest.fragments) == len(makers)
    base = manifest.next_row_id
    wanted_ids: dict[int, np.ndarray] = {}
    wanted_versions: dict[int, np.ndarray] = {}
    for frag, (kind, make) in zip(manifest.fragments, makers.items(), strict=True):
        assert frag.physical_rows == n
        ids = make().astype(np.uint64) + np.uint64(base)
        base += 2**44
        frag.inline_row_ids = encode_row_ids(ids)
        assert _kinds(frag.inline_row_ids) == [kind]
        versions = np.repeat(np.array([1, 3, 2], dtype=np.uint64), [300, 300, 400])
        frag.inline_last_updated_at_versions = encode_row_versions(versions)
        wanted_ids[frag.id], wanted_versions[frag.id] = ids, versions
    manifest.next_row_id = base
    version = _commit_manifest(root, manifest)

    store = open_store(root)
    table = lance.dataset(root, version=version).to_table(
        columns=["_row_last_updated_at_version"], with_row_id=True, with_row_address=True
    )
    addr = table["_rowaddr"].to_numpy()
    for frag in manifest.fragments:
        live = live_offsets(frag.physical_rows, read_fragment_deletions(store, frag))
        assert live.size < n
        mine = addr >> np.uint64(32) == frag.id
        assert np.array_equal(table["_rowid"].to_numpy()[mine], wanted_ids[frag.id][live])
        got_versions = table["_row_last_updated_at_version"].to_numpy()[mine]
        assert np.array_equal(got_versions, wanted_versions[frag.id][live])
        assert np.array_equal(decode_row_ids(frag.inline_row_ids), wanted_ids[frag.id])


@settings(max_examples=150, deadline=None)
@given(
    runs=st.lists(
        st.tuples(
            st.integers(0, 3000), st.integers(1, 60), st.sampled_from(["run", "gaps", "shuffle"])
        ),
        min_size=1,
        max_size=6,
    ),
    asked_seed=st.integers(0, 2**32 - 1),
)
def test_offsets_in_segments_are_the_rows_holding_them(runs, asked_seed) -> None:
    """`offsets_in_segments` finds, segment by segment (one per run here: ranges, ranges with
    holes or bitmaps, sorted and unsorted arrays, the offset carried from segment to
    segment), the rows the materialised sequence holds the asked ids in."""
    rng = np.random.default_rng(asked_seed)
    used: set[int] = set()
    seq = rowids_pb2.RowIdSequence()
    for start, n, shape in runs:
        ids = np.arange(start * 100, start * 100 + n, dtype=np.uint64)
        if shape == "gaps" and n > 1:
            ids = ids[rng.random(n) < 0.7]
        elif shape == "shuffle":
            ids = rng.permutation(ids)
        ids = np.array([i for i in ids.tolist() if i not in used], dtype=np.uint64)
        used.update(ids.tolist())
        if len(ids):
            _fill_segment(seq.segments.add(), ids)
    if not seq.segments:
        return
    data = seq.SerializeToString()
    everything = decode_row_ids(data)
    pool = np.concatenate([everything, np.arange(0, 310_000, 997, dtype=np.uint64)])
    asked = np.unique(rng.choice(pool, size=min(len(pool), 40)))
    want = np.flatnonzero(np.isin(everything, asked))
    got = offsets_in_segments(row_id_segments(data, expected_len=len(everything)), asked)
    assert got.dtype == np.int64 and got.tolist() == want.tolist()


def test_offsets_in_segments_of_every_kind() -> None:
    """A hand-made sequence of each segment kind, a range with an empty holes array too."""
    data = _seq(
        _range(10, 15),
        _holes(100, 110, _u16(100, [])),
        _holes(200, 210, _u16(200, [1, 5, 9])),
        _bitmap(300, 308, bytes([0b10110101])),
        _array(_u32(500, [7, 3, 5]), False),
        _array(_u64([900, 905]), True),
    )
    everything = decode_row_ids(data)
    for asked in ([], [12], [10, 14, 105, 203, 305, 307, 503, 905], everything.tolist()):
        asked = np.unique(np.array(asked, dtype=np.uint64))  # sorted, as asked for
        want = np.flatnonzero(np.isin(everything, asked)).tolist()
        assert offsets_in_segments(row_id_segments(data), asked).tolist() == want, asked
