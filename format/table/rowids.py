"""Stable row ids and row-version sequences of a fragment (``protos/rowids.proto``).

With stable row ids every fragment carries a serialized ``RowIdSequence``: one u64 id per
physical row, in physical order, deleted rows included. It is a list of segments, each one of

* ``range`` ``[start, end)``;
* ``range_with_holes`` ``[start, end)`` minus sorted absolute ``holes``;
* ``range_with_bitmap`` ``[start, end)`` where bit ``i`` (LSB-first in each byte) keeps ``start+i``;
* ``sorted_array`` / ``array``, an ``EncodedU64Array`` (u16 or u32 offsets from a base, or raw
  u64 values).

``RowDatasetVersionSequence`` (the ``*_at_versions`` fields) is a run-length list over physical
rows: each run has a span segment, of which only the *number* of values counts, and a version.

Decoding is vectorised: Python only walks the segments and runs, never the ids.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import numpy as np
from google.protobuf.message import DecodeError, Message

from quiver.format.errors import CorruptFileError, InvalidInputError
from quiver.format.proto import rowids_pb2

__all__ = [
    "decode_row_ids",
    "decode_row_versions",
    "encode_row_ids",
    "encode_row_versions",
    "row_id_count",
]

_U16_MAX = 0xFFFF
_U32_MAX = 0xFFFF_FFFF
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
# Row addresses keep the physical offset in 32 bits, so no fragment holds more rows than this.
_MAX_FRAGMENT_ROWS = 1 << 32
_WIDTHS = {"u16_array": ("<u2", 2), "u32_array": ("<u4", 4)}
_M = TypeVar("_M", bound=Message)


class _Segment(NamedTuple):
    """One parsed U64Segment: enough to count its values without materialising them."""

    kind: str
    start: int
    end: int
    values: np.ndarray | None  # holes (range_with_holes), ids (arrays), keep-bits (bitmap)
    count: int


# --------------------------------------------------------------------------------------------
# decoding
# --------------------------------------------------------------------------------------------
def _parse_message(cls: type[_M], data: bytes, source: str) -> _M:
    """Parse `data` as protobuf message `cls`, turning decode failures into CorruptFileError."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidInputError(f"{source}: expected bytes, got {type(data).__name__}")
    msg = cls()
    try:
        msg.ParseFromString(bytes(data))
    except (DecodeError, RuntimeError, ValueError) as e:
        raise CorruptFileError(source, f"cannot decode {cls.__name__}: {e}") from None
    return msg


def _decode_array(arr: rowids_pb2.EncodedU64Array, source: str, where: str) -> np.ndarray:
    """Values of an EncodedU64Array as uint64, checking widths and overflow."""
    which = arr.WhichOneof("array")
    if which is None:
        raise CorruptFileError(source, f"{where}: EncodedU64Array has no array type")
    if which == "u64_array":
        raw = arr.u64_array.values
        if len(raw) % 8:
            raise CorruptFileError(
                source, f"{where}: u64 array has {len(raw)} bytes, not a multiple of 8"
            )
        return np.frombuffer(raw, dtype="<u8").astype(np.uint64)
    dtype, width = _WIDTHS[which]
    sub = getattr(arr, which)
    raw = sub.offsets
    if len(raw) % width:
        raise CorruptFileError(
            source, f"{where}: {which} offsets have {len(raw)} bytes, not a multiple of {width}"
        )
    offsets = np.frombuffer(raw, dtype=dtype).astype(np.uint64)
    if offsets.size and sub.base + int(offsets.max()) > _U64_MAX:
        raise CorruptFileError(source, f"{where}: base {sub.base} + offset overflows u64")
    return offsets + np.uint64(sub.base)


def _check_range(start: int, end: int, source: str, where: str) -> int:
    """Span of a [start, end) range; end < start is corrupt."""
    if end < start:
        raise CorruptFileError(source, f"{where}: range end {end} < start {start}")
    return end - start


def _parse_segment(seg: rowids_pb2.U64Segment, source: str, where: str) -> _Segment:
    """Validate one U64Segment and count its values (bitmaps are unpacked, ranges are not)."""
    kind = seg.WhichOneof("segment")
    if kind == "range":
        r = seg.range
        return _Segment(kind, r.start, r.end, None, _check_range(r.start, r.end, source, where))
    if kind == "range_with_holes":
        r = seg.range_with_holes
        span = _check_range(r.start, r.end, source, where)
        if not r.HasField("holes"):
            raise CorruptFileError(source, f"{where}: range_with_holes has no holes array")
        holes = _decode_array(r.holes, source, f"{where} holes")
        if holes.size:
            if np.any(holes[1:] <= holes[:-1]):
                raise CorruptFileError(source, f"{where}: holes are not strictly increasing")
            if int(holes[0]) < r.start or int(holes[-1]) >= r.end:
                raise CorruptFileError(
                    source, f"{where}: holes fall outside the range [{r.start}, {r.end})"
                )
        return _Segment(kind, r.start, r.end, holes, span - holes.size)
    if kind == "range_with_bitmap":
        r = seg.range_with_bitmap
        span = _check_range(r.start, r.end, source, where)
        need = -(-span // 8)
        if len(r.bitmap) != need:
            what = "too short" if len(r.bitmap) < need else "too long"
            raise CorruptFileError(
                source,
                f"{where}: bitmap {what}: {len(r.bitmap)} bytes for a span of {span} "
                f"(expected {need})",
            )
        bits = np.unpackbits(np.frombuffer(r.bitmap, dtype=np.uint8), bitorder="little")
        keep = bits[:span].astype(bool)
        return _Segment(kind, r.start, r.end, keep, int(np.count_nonzero(keep)))
    if kind in ("sorted_array", "array"):
        values = _decode_array(getattr(seg, kind), source, f"{where} {kind}")
        return _Segment(kind, 0, 0, values, int(values.size))
    raise CorruptFileError(source, f"{where}: segment has no type")


def _expand_ranges(starts: list[int], ends: list[int]) -> np.ndarray:
    """Concatenate the ranges [starts[i], ends[i]) into one uint64 array, vectorised."""
    s = np.array(starts, dtype=np.uint64)
    lengths = np.array(ends, dtype=np.uint64) - s
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.uint64)
    # offset of each range in the output; id = start + (position - offset), computed mod 2**64
    offsets = np.cumsum(lengths) - lengths
    lens = lengths.astype(np.int64)
    return np.arange(total, dtype=np.uint64) + np.repeat(s - offsets, lens)


def _materialise(seg: _Segment) -> np.ndarray:
    """The ids of one non-range segment as uint64."""
    if seg.kind == "range_with_holes":
        keep = np.ones(seg.end - seg.start, dtype=bool)
        keep[(seg.values - np.uint64(seg.start)).astype(np.int64)] = False
        return np.flatnonzero(keep).astype(np.uint64) + np.uint64(seg.start)
    if seg.kind == "range_with_bitmap":
        return np.flatnonzero(seg.values).astype(np.uint64) + np.uint64(seg.start)
    return seg.values


def _parse_sequence(data: bytes, source: str) -> list[_Segment]:
    """Parse and validate every segment of a serialized RowIdSequence."""
    seq = _parse_message(rowids_pb2.RowIdSequence, data, source)
    return [_parse_segment(s, source, f"segment {i}") for i, s in enumerate(seq.segments)]


def _check_total(total: int, expected_len: int | None, source: str, what: str) -> None:
    """Reject sequences longer than a fragment can be or differing from `expected_len`."""
    if expected_len is not None and total != expected_len:
        raise CorruptFileError(source, f"{what} covers {total} rows, expected {expected_len}")
    if total > _MAX_FRAGMENT_ROWS:
        raise CorruptFileError(source, f"{what} covers {total} rows, more than a fragment can")


def row_id_count(data: bytes, *, source: str = "row id sequence") -> int:
    """Number of ids in a serialized RowIdSequence, without materialising them (cheap checks)."""
    return sum(s.count for s in _parse_sequence(data, source))


def decode_row_ids(
    data: bytes, *, source: str = "row id sequence", expected_len: int | None = None
) -> np.ndarray:
    """Decode a serialized RowIdSequence into one uint64 id per physical row, in order.

    `source` names the bytes in errors (e.g. ``"fragment 3 inline_row_ids"``); `expected_len`
    (normally the fragment's ``physical_rows``) is checked before anything is materialised.
    """
    segments = _parse_sequence(data, source)
    _check_total(sum(s.count for s in segments), expected_len, source, "row id sequence")
    pieces: list[np.ndarray] = []
    starts: list[int] = []
    ends: list[int] = []
    for seg in segments:
        if seg.kind == "range":
            starts.append(seg.start)
            ends.append(seg.end)
            continue
        if starts:
            pieces.append(_expand_ranges(starts, ends))
            starts, ends = [], []
        pieces.append(_materialise(seg))
    if starts:
        pieces.append(_expand_ranges(starts, ends))
    if not pieces:
        return np.empty(0, dtype=np.uint64)
    if len(pieces) == 1:
        return np.ascontiguousarray(pieces[0], dtype=np.uint64)
    return np.concatenate(pieces).astype(np.uint64, copy=False)


def row_id_sequence_of(fragment: Any, resolve: Callable[[str], tuple[Any, str]]) -> bytes | None:
    """A fragment's (`DataFragment`) serialized row id sequence: in the manifest, or in the
    file `resolve(path)` (-> store, path in it) names; None without stable row ids."""
    which = fragment.WhichOneof("row_id_sequence")
    if which is None:
        return None
    if which == "inline_row_ids":
        return fragment.inline_row_ids
    ext = fragment.external_row_ids
    store, path = resolve(ext.path)
    with store.open(path) as f:
        return bytes(f.read(ext.offset, ext.size))


def row_id_segments(
    data: bytes, *, source: str = "row id sequence", expected_len: int | None = None
) -> list[_Segment]:
    """The checked segments of a serialized RowIdSequence, for `offsets_in_segments`."""
    segments = _parse_sequence(data, source)
    _check_total(sum(s.count for s in segments), expected_len, source, "row id sequence")
    return segments


def offsets_in_segments(segments: list[_Segment], ids: np.ndarray) -> np.ndarray:
    """The physical offsets (ascending int64) of the rows of a row id sequence (its
    `row_id_segments`) whose ids are among `ids` (sorted, unique uint64), found segment by
    segment without materialising the fragment's ids: a range's rows by arithmetic on the
    asked ids (holes counted, a bitmap's kept bits summed), an array's ids looked up among
    the asked ones."""
    ids = np.asarray(ids, dtype=np.uint64)
    out: list[np.ndarray] = []
    first = 0  # the physical offset of the segment's first row
    for seg in segments:
        rows = _rows_holding(seg, ids)
        if len(rows):
            out.append(first + rows)
        first += seg.count
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


def _rows_holding(seg: _Segment, ids: np.ndarray) -> np.ndarray:
    """Offsets within one segment of its rows whose ids are among `ids` (sorted)."""
    if seg.kind in ("sorted_array", "array"):
        if not len(ids) or not len(seg.values):
            return np.empty(0, dtype=np.int64)
        at = np.minimum(np.searchsorted(ids, seg.values), len(ids) - 1)
        return np.flatnonzero(ids[at] == seg.values).astype(np.int64)
    lo, hi = np.searchsorted(ids, np.array([seg.start, seg.end], dtype=np.uint64))
    rel = (ids[lo:hi] - np.uint64(seg.start)).astype(np.int64)  # within the range's span
    if seg.kind == "range_with_bitmap":
        kept = seg.values  # a bool per id of the span
        rel = rel[kept[rel]]
        return np.cumsum(kept, dtype=np.int64)[rel] - 1  # kept ids before, itself included
    if seg.kind == "range_with_holes" and len(seg.values) and len(rel):
        holes = (seg.values - np.uint64(seg.start)).astype(np.int64)
        before = np.searchsorted(holes, rel)
        present = holes[np.minimum(before, len(holes) - 1)] != rel
        present |= before >= len(holes)
        return rel[present] - before[present]
    return rel


def decode_row_versions(
    data: bytes, *, source: str = "row version sequence", expected_len: int | None = None
) -> np.ndarray:
    """Decode a RowDatasetVersionSequence into one uint64 dataset version per physical row.

    Only the length of each run's span counts (spans after compaction hold old offsets).
    """
    seq = _parse_message(rowids_pb2.RowDatasetVersionSequence, data, source)
    counts: list[int] = []
    versions: list[int] = []
    for i, run in enumerate(seq.runs):
        if not run.HasField("span"):
            raise CorruptFileError(source, f"run {i} has no span")
        counts.append(_parse_segment(run.span, source, f"run {i} span").count)
        versions.append(run.version)
    _check_total(sum(counts), expected_len, source, "row version sequence")
    return np.repeat(np.array(versions, dtype=np.uint64), np.array(counts, dtype=np.int64))


# --------------------------------------------------------------------------------------------
# encoding
# --------------------------------------------------------------------------------------------
def _as_u64(values: np.ndarray | list[int], what: str) -> np.ndarray:
    """Validate a 1-D array of non-negative integers and return it as uint64."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise InvalidInputError(f"{what} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return np.empty(0, dtype=np.uint64)
    if arr.dtype.kind == "u":
        return arr.astype(np.uint64, copy=False)
    if arr.dtype.kind == "i":
        if int(arr.min()) < 0:
            raise InvalidInputError(f"{what} must be non-negative, got {int(arr.min())}")
        return arr.astype(np.uint64)
    if arr.dtype == object:
        try:
            return np.array(arr.tolist(), dtype=np.uint64)
        except (OverflowError, TypeError, ValueError) as e:
            raise InvalidInputError(f"{what} must be u64 integers: {e}") from None
    raise InvalidInputError(f"{what} must be integers, got dtype {arr.dtype}")


def _fill_array(out: rowids_pb2.EncodedU64Array, values: np.ndarray, lo: int, hi: int) -> None:
    """Fill an EncodedU64Array with the narrowest width covering ``hi - lo`` (base = min)."""
    if values.size == 0:
        out.u64_array.SetInParent()
        return
    spread = hi - lo
    if spread <= _U16_MAX:
        out.u16_array.base = lo
        out.u16_array.offsets = (values - np.uint64(lo)).astype("<u2").tobytes()
    elif spread <= _U32_MAX:
        out.u32_array.base = lo
        out.u32_array.offsets = (values - np.uint64(lo)).astype("<u4").tobytes()
    else:
        out.u64_array.values = values.astype("<u8").tobytes()


def _fill_segment(seg: rowids_pb2.U64Segment, ids: np.ndarray) -> None:
    """Choose and fill the segment pylance would pick for `ids` (``U64Segment::from_slice``)."""
    n = int(ids.size)
    if n == 0:
        seg.range.SetInParent()  # Range{0, 0}
        return
    strictly_sorted = bool(np.all(ids[1:] > ids[:-1]))
    if not strictly_sorted:
        # Unsorted (or, never in a valid dataset, duplicated) ids are kept as they are.
        _fill_array(seg.array, ids, int(ids.min()), int(ids.max()))
        return
    lo, hi = int(ids[0]), int(ids[-1])
    if hi == _U64_MAX:
        # end = max + 1 would not fit in u64: only an array can hold this id.
        _fill_array(seg.sorted_array, ids, lo, hi)
        return
    slots = hi - lo + 1
    n_holes = slots - n
    if n_holes == 0:
        seg.range.start = lo
        seg.range.end = hi + 1
        return
    size_holes = 24 + 4 * n_holes
    size_bitmap = 24 + -(-slots // 8)
    size_sorted = 24 + 2 * n
    best = min(size_holes, size_bitmap, size_sorted)
    if best == size_holes or best == size_bitmap:
        # Both sizes bound `slots` to a small multiple of n, so a dense mask is cheap.
        present = np.zeros(slots, dtype=bool)
        present[(ids - np.uint64(lo)).astype(np.int64)] = True
        if best == size_holes:
            rwh = seg.range_with_holes
            rwh.start, rwh.end = lo, hi + 1
            holes = np.flatnonzero(~present).astype(np.uint64) + np.uint64(lo)
            _fill_array(rwh.holes, holes, int(holes[0]), int(holes[-1]))
        else:
            rwb = seg.range_with_bitmap
            rwb.start, rwb.end = lo, hi + 1
            rwb.bitmap = np.packbits(present, bitorder="little").tobytes()
        return
    _fill_array(seg.sorted_array, ids, lo, hi)


def encode_row_ids(ids: np.ndarray) -> bytes:
    """Serialize ids as a one-segment RowIdSequence, choosing the segment the way pylance does.

    Contiguous sorted ids become a range; sorted ids with gaps take the smallest of
    range-with-holes (24 + 4·holes), range-with-bitmap (24 + ⌈span/8⌉) and sorted array
    (24 + 2·n), ties in that order; anything else is an array. Arrays use the narrowest offset
    width. An empty input gives ``[Range{0, 0}]``.
    """
    values = _as_u64(ids, "row ids")
    seq = rowids_pb2.RowIdSequence()
    _fill_segment(seq.segments.add(), values)
    return seq.SerializeToString()


def encode_row_versions(versions: np.ndarray) -> bytes:
    """Serialize one version per physical row as a run-length RowDatasetVersionSequence.

    Each run of equal versions over rows ``[a, b)`` becomes ``{span: Range{a, b}, version}``,
    as pylance writes for fresh fragments; no rows give an empty sequence.
    """
    values = _as_u64(versions, "row versions")
    seq = rowids_pb2.RowDatasetVersionSequence()
    n = int(values.size)
    if n:
        change = np.flatnonzero(values[1:] != values[:-1]) + 1
        starts = np.concatenate(([0], change)).tolist()
        ends = np.concatenate((change, [n])).tolist()
        run_versions = values[starts].tolist()
        # one iteration per run, not per row
        for start, end, version in zip(starts, ends, run_versions, strict=True):
            run = seq.runs.add()
            run.span.range.start = start
            run.span.range.end = end
            run.version = version
    return seq.SerializeToString()
