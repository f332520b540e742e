"""Random access into 2.0 pages: decode some rows of a page reading only their bytes.

`take` must not fetch whole pages (often megabytes) to return a few rows. For encodings
whose rows sit at computable positions this module plans the exact byte ranges instead:

* `Flat` (fixed width, and 1-bit booleans), also inside `Nullable` (NoNull / SomeNull,
  whose validity is itself a 1-bit `Flat`) and `FixedSizeList` (row i = items
  [i*dim, (i+1)*dim));
* `Binary` (strings / binary): first the end offsets of rows i-1 and i, then only the
  value bytes those offsets delimit.

A plan is a generator: it yields the (position, size) file ranges it needs next, is sent
their bytes, and finally returns the Arrow array. `format.file.parallel.run_plans` drives
many plans in lock step so that every round is one coalesced `read_ranges` call (and
`gather_all` combines plans inside a plan). `plan_rows` returns None
when an encoding (or a compressed / non-page buffer) does not allow random access; the
caller then decodes whole pages as before.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import numpy as np
import pyarrow as pa

from quiver.format.file.types import fixed_bits, is_var_binary
from quiver.format.file.v20 import decode as v20
from quiver.format.io.store import Spans
from quiver.format.proto import encodings_v2_0_pb2 as pb

Bytes = bytes | memoryview
Request = list  # of (position, size) ranges and `Spans`
Plan = Generator[Request, list[Bytes], object]


def range_indices(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """All positions in the ranges, concatenated (vectorised `np.r_[s0:e0, s1:e1, ...]`)."""
    lens = stops - starts
    total = int(lens.sum())
    firsts = np.cumsum(lens) - lens
    return np.arange(total, dtype=np.int64) - np.repeat(firsts - starts, lens)


# -- driving plans ---------------------------------------------------------------------------
def gather_all(plans: Sequence[Plan]) -> Generator[Request, list[Bytes], list[object]]:
    """A plan running `plans` in lock step (one request per round); returns their results."""
    results: list[object] = [None] * len(plans)
    active: list[tuple[int, Plan, Request]] = []
    for i, p in enumerate(plans):
        try:
            active.append((i, p, next(p)))
        except StopIteration as stop:
            results[i] = stop.value
    while active:
        blobs = yield [r for _, _, req in active for r in req]
        pos, still = 0, []
        for i, p, req in active:
            part = blobs[pos : pos + len(req)]
            pos += len(req)
            try:
                still.append((i, p, p.send(part)))
            except StopIteration as stop:
                results[i] = stop.value
        active = still
    return results


# -- fetching spans --------------------------------------------------------------------------
def fetch_spans(starts: np.ndarray, stops: np.ndarray) -> Generator[Request, list[Bytes], object]:
    """The bytes of file spans [starts[i], stops[i]) concatenated (a uint8 array or bytes).

    Spans must be ordered by start (they may overlap or touch). A single span is returned
    without copying.
    """
    n = len(starts)
    if n == 0:
        return np.zeros(0, np.uint8)
    if n == 1:
        (blob,) = yield [(int(starts[0]), int(stops[0] - starts[0]))]
        return blob
    (data,) = yield [Spans(np.asarray(starts, dtype=np.int64), np.asarray(stops, dtype=np.int64))]
    return data


def fetch_bits(
    pos: int, starts: np.ndarray, stops: np.ndarray
) -> Generator[Request, list[Bytes], object]:
    """Bit ranges [starts[i], stops[i]) of an LSB-first bitmap at file position `pos`, packed."""
    bs, be = starts // 8, (stops + 7) // 8
    data = yield from fetch_spans(pos + bs, pos + be)
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
    nbits = (be - bs) * 8
    first = np.cumsum(nbits) - nbits + (starts % 8)
    return np.packbits(bits[range_indices(first, first + (stops - starts))], bitorder="little")


# -- planning ----------------------------------------------------------------------------------
def _page_buffer(buf: pb.Buffer, locations: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
    """(position, size) of a page buffer; None for column/file buffers or bad indices."""
    if int(buf.buffer_type) != v20.BUFFER_PAGE or int(buf.buffer_index) >= len(locations):
        return None
    return locations[int(buf.buffer_index)]


def _uncompressed(flat: pb.Flat) -> bool:
    return not flat.HasField("compression") or flat.compression.scheme.lower() in ("", "none")


def flat_position(flat: pb.Flat, n: int, locations: Sequence[tuple[int, int]]) -> int | None:
    """The file position of an uncompressed page buffer holding `n` values of `flat`, or
    None (another buffer kind, compression, or too short: the whole-page decoder reports
    that)."""
    loc = _page_buffer(flat.buffer, locations)
    if loc is None or not _uncompressed(flat):
        return None
    pos, size = loc
    if size < (n * int(flat.bits_per_value) + 7) // 8:
        return None
    return pos


def _fixed_bytes(
    flat: pb.Flat, n: int, starts: np.ndarray, stops: np.ndarray, locations: Sequence
) -> Plan | None:
    """Rows [starts, stops) of an uncompressed byte-aligned or 1-bit Flat buffer of n rows."""
    bits = int(flat.bits_per_value)
    if (bits % 8 and bits != 1) or bits == 0:
        return None
    pos = flat_position(flat, n, locations)
    if pos is None:
        return None
    if bits == 1:
        return fetch_bits(pos, starts, stops)
    w = bits // 8
    return fetch_spans(pos + starts * w, pos + stops * w)


def plan_rows(
    enc: pb.ArrayEncoding,
    n: int,
    t: pa.DataType,
    starts: np.ndarray,
    stops: np.ndarray,
    locations: Sequence[tuple[int, int]],
    ctx: v20.PageContext,
) -> Plan | None:
    """A plan decoding rows [starts[i], stops[i]) of a page of `n` rows as type `t`.

    `locations` are the page's buffers as file (position, size). None when the encoding
    does not allow random access.
    """
    kind = v20.variant(enc)
    if kind == "dictionary":
        return _plan_dictionary(enc.dictionary, n, t, starts, stops, locations, ctx)
    if pa.types.is_dictionary(t) or pa.types.is_null(t):
        return None
    count = int((stops - starts).sum())
    if kind == "nullable":
        nl = enc.nullable
        which = nl.WhichOneof("nullability")
        if which == "no_nulls":
            return plan_rows(nl.no_nulls.values, n, t, starts, stops, locations, ctx)
        if which == "all_nulls":
            return _const(pa.nulls(count, t))
        if which == "some_nulls":
            valid = plan_rows(nl.some_nulls.validity, n, pa.bool_(), starts, stops, locations, ctx)
            values = plan_rows(nl.some_nulls.values, n, t, starts, stops, locations, ctx)
            if valid is None or values is None:
                return None
            return _some_nulls(valid, values, ctx)
        return None
    if kind == "flat":
        want = fixed_bits(t)
        if want is None or want != int(enc.flat.bits_per_value):
            return None
        data = _fixed_bytes(enc.flat, n, starts, stops, locations)
        return None if data is None else _flat(data, t, count)
    if kind == "fixed_size_list":
        fsl = enc.fixed_size_list
        dim = int(fsl.dimension)
        if fsl.has_validity or not pa.types.is_fixed_size_list(t) or t.list_size != dim:
            return None
        items = plan_rows(
            fsl.items, n * dim, t.value_type, starts * dim, stops * dim, locations, ctx
        )
        return None if items is None else _fsl(items, t)
    if kind == "binary":
        return _plan_binary(enc.binary, n, t, starts, stops, locations, ctx)
    return None


def _const(arr: pa.Array) -> Plan:
    return arr
    yield []  # pragma: no cover - makes this a generator


def _flat(data: Plan, t: pa.DataType, count: int) -> Plan:
    raw = yield from data
    return pa.Array.from_buffers(t, count, [None, pa.py_buffer(raw)], null_count=0)


def _fsl(items: Plan, t: pa.DataType) -> Plan:
    arr = yield from items
    return pa.FixedSizeListArray.from_arrays(arr, type=t)


def _some_nulls(valid: Plan, values: Plan, ctx: v20.PageContext) -> Plan:
    bitmap, arr = yield from gather_all([valid, values])
    if bitmap.null_count:
        raise ctx.corrupt("validity bitmap has nulls of its own")
    return v20.with_validity(arr, bitmap.buffers()[1])


def _plan_binary(
    b: pb.Binary,
    n: int,
    t: pa.DataType,
    starts: np.ndarray,
    stops: np.ndarray,
    locations: Sequence[tuple[int, int]],
    ctx: v20.PageContext,
) -> Plan | None:
    layout = binary_layout(b, n, t, locations)
    if layout is None:
        return None
    idx, data_loc = layout
    # End offsets of the rows and of the row before each range.
    ostarts = np.maximum(starts - 1, 0)
    need_starts, need_stops = _merge(ostarts, stops)
    offsets = _fixed_bytes(idx, n, need_starts, need_stops, locations)
    assert offsets is not None  # binary_layout checked the offsets' buffer
    return _binary(b, idx, offsets, need_starts, need_stops, starts, stops, data_loc, t, ctx)


def binary_layout(
    b: pb.Binary, n: int, t: pa.DataType, locations: Sequence[tuple[int, int]]
) -> tuple[pb.Flat, tuple[int, int]] | None:
    """The end offsets' Flat and the value bytes' (position, size) of a `Binary` page of `n`
    rows read as `t`, when both are plain page buffers (rows can be read on their own);
    None otherwise."""
    if not is_var_binary(t):
        return None
    idx = _uint_flat(b.indices)
    if idx is None or flat_position(idx, n, locations) is None:
        return None
    if v20.variant(b.bytes) != "flat" or int(b.bytes.flat.bits_per_value) != 8:
        return None
    data_loc = _page_buffer(b.bytes.flat.buffer, locations)
    if data_loc is None or not _uncompressed(b.bytes.flat):
        return None
    return idx, data_loc


def _merge(starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ordered spans with touching/overlapping neighbours merged."""
    if len(starts) <= 1:
        return starts, stops
    gap = np.flatnonzero(starts[1:] > stops[:-1])
    return starts[np.concatenate(([0], gap + 1))], stops[np.concatenate((gap, [len(stops) - 1]))]


def _binary(
    b: pb.Binary,
    flat: pb.Flat,
    offsets: Plan,
    have_starts: np.ndarray,
    have_stops: np.ndarray,
    starts: np.ndarray,
    stops: np.ndarray,
    data_loc: tuple[int, int],
    t: pa.DataType,
    ctx: v20.PageContext,
) -> Plan:
    raw_bytes = yield from offsets
    w = int(flat.bits_per_value) // 8
    raw = np.frombuffer(raw_bytes, dtype=f"<u{w}")
    # pylance stores a null's end as end + null_adjustment: a run whose largest stored end
    # is below it has no nulls
    if len(starts) == 1 and len(have_starts) == 1 and len(raw):
        if not b.null_adjustment or int(raw.max()) < int(b.null_adjustment):
            return (yield from _contiguous_binary(raw, starts, have_starts, data_loc, t, ctx))
    raw = raw.astype(np.uint64)
    rows = range_indices(starts, stops)
    if len(have_starts) == 1:  # one run of offsets (a streaming step): positions are direct
        at = rows - int(have_starts[0])
        prev_at = np.maximum(rows - 1, 0) - int(have_starts[0])
    else:
        have = range_indices(have_starts, have_stops)
        at = np.searchsorted(have, rows)
        prev_at = np.searchsorted(have, np.maximum(rows - 1, 0))
    end_raw, prev_raw = raw[at], raw[prev_at]
    adj = np.uint64(b.null_adjustment)
    if b.null_adjustment:
        valid = end_raw < adj
        ends = np.where(valid, end_raw, end_raw - adj)
        prevs = np.where(prev_raw < adj, prev_raw, prev_raw - adj)
    else:
        valid, ends, prevs = None, end_raw, prev_raw
    prevs = np.where(rows == 0, np.uint64(0), prevs)
    if len(rows) and int(ends.max()) >= 1 << 62:
        raise ctx.corrupt("string offsets out of range")
    ends, prevs = ends.astype(np.int64), prevs.astype(np.int64)
    if np.any(ends < prevs) or np.any(prevs[1:] < ends[:-1]):
        raise ctx.corrupt("string offsets decrease")
    pos, size = data_loc
    if len(rows) and int(ends[-1]) > size:
        raise ctx.corrupt(f"string offsets reach {int(ends[-1])} but only {size} bytes exist")
    lens = ends - prevs
    if len(starts) == 1 and len(rows):  # contiguous rows: their bytes are one span
        data = yield from fetch_spans(pos + prevs[:1], pos + ends[-1:])
    else:
        keep = lens > 0
        data = yield from fetch_spans(pos + prevs[keep], pos + ends[keep])
    new_ends = np.cumsum(lens)
    if valid is not None and valid.all():
        valid = None
    return v20._var_array(t, new_ends, data, valid, ctx)


def _contiguous_binary(
    raw: np.ndarray,
    starts: np.ndarray,
    have_starts: np.ndarray,
    data_loc: tuple[int, int],
    t: pa.DataType,
    ctx: v20.PageContext,
) -> Plan:
    """One run of rows without nulls (a streaming step): the stored end offsets (`raw`, from
    the row before the run) are rebased by one subtraction, the bytes are one span."""
    first = int(starts[0])
    # the end before the run (unless it starts the page), then the run's own ends
    window = raw[first - int(have_starts[0]) - (first > 0) :]
    prev = int(window[0]) if first > 0 else 0
    ends = window[1:] if first > 0 else window
    if len(ends) and int(ends[0]) < prev:  # the rest is checked by _var_array
        raise ctx.corrupt("string offsets decrease")
    last = int(ends.max(initial=prev))
    pos, size = data_loc
    if last > size:
        raise ctx.corrupt(f"string offsets reach {last} but only {size} bytes exist")
    data = yield from fetch_spans(np.array([pos + prev]), np.array([pos + last]))
    return v20._var_array(t, (ends - np.uint64(prev)).astype(np.int64), data, None, ctx)


def _uint_flat(enc: pb.ArrayEncoding) -> pb.Flat | None:
    """The Flat of unsigned offsets/indices (through Nullable NoNull), if that is all it is."""
    enc = v20.without_no_nulls(enc)
    if v20.variant(enc) != "flat" or int(enc.flat.bits_per_value) not in (8, 16, 32, 64):
        return None
    return enc.flat


def _buffers_of(msg: object, out: list[pb.Buffer]) -> list[pb.Buffer]:
    """Every `Buffer` an encoding (sub)tree refers to."""
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        for v in value if fd.is_repeated else [value]:
            if fd.message_type.full_name == pb.Buffer.DESCRIPTOR.full_name:
                out.append(v)
            else:
                _buffers_of(v, out)
    return out


def _plan_dictionary(
    d: pb.Dictionary,
    n: int,
    t: pa.DataType,
    starts: np.ndarray,
    stops: np.ndarray,
    locations: Sequence[tuple[int, int]],
    ctx: v20.PageContext,
) -> Plan | None:
    """Only the wanted indices; the (small) items are decoded whole."""
    layout = dictionary_layout(d, n, locations)
    if layout is None:
        return None
    flat, used = layout
    indices = _fixed_bytes(flat, n, starts, stops, locations)
    assert indices is not None  # dictionary_layout checked the indices' buffer
    num_items = int(d.num_dictionary_items)
    return _dictionary(d, flat, indices, used, locations, num_items, t, ctx)


def dictionary_layout(
    d: pb.Dictionary, n: int, locations: Sequence[tuple[int, int]]
) -> tuple[pb.Flat, list[int]] | None:
    """The indices' Flat and the page buffers the items use, of a `Dictionary` page of `n`
    rows whose indices are a plain page buffer and whose items lie in page buffers; None
    otherwise."""
    flat = _uint_flat(d.indices)
    if flat is None or int(d.num_dictionary_items) > (1 << 32):
        return None
    if flat_position(flat, n, locations) is None:
        return None
    bufs = _buffers_of(d.items, [])
    if any(_page_buffer(b, locations) is None for b in bufs):
        return None
    return flat, sorted({int(b.buffer_index) for b in bufs})


def _fetch(ranges: Request) -> Plan:
    return (yield list(ranges))


def _dictionary(
    d: pb.Dictionary,
    flat: pb.Flat,
    indices: Plan,
    used: list[int],
    locations: Sequence[tuple[int, int]],
    num_items: int,
    t: pa.DataType,
    ctx: v20.PageContext,
) -> Plan:
    raw, blobs = yield from gather_all([indices, _fetch([locations[i] for i in used])])
    idx = np.frombuffer(raw, dtype=f"<u{int(flat.bits_per_value) // 8}")
    page_buffers: list[Bytes] = [b""] * len(locations)
    for i, blob in zip(used, blobs, strict=True):
        page_buffers[i] = blob
    items_ctx = v20.PageContext(ctx.path, ctx.where, page_buffers)
    value_type = t.value_type if pa.types.is_dictionary(t) else t
    items = v20.decode_array(d.items, num_items, value_type, items_ctx)
    return v20.dictionary_values(idx, None, items, t, ctx)
