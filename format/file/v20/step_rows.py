"""Per-page readers of one run of rows, prepared once: a streaming scan's every step.

A scan reads each page in steps of a few thousand contiguous rows. `random_access.plan_rows`
works out, at every step, from the page's encoding message, which bytes those rows need:
walking the protobuf, building one-element numpy arrays and nesting generators cost a 2.0
full scan more of its time than the decoding itself, and more again with several streams
contending for the GIL. `prepare(...)` walks the encoding once per page and returns a
`StepRows` whose `plan(start, stop)` is a few lines of integer arithmetic and one request
per round. A dictionary page's items are decoded on its first step and kept for the next.

Encodings prepared here: `Flat` of fixed-width values, `FixedSizeList` of such, `Binary`
(strings) and `Dictionary` (of any item encoding), each possibly inside `Nullable{NoNull}`.
Any other page (nulls, compression, booleans) returns None and keeps `plan_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from format.errors import LanceError
from format.file.types import fixed_bits
from format.file.v20 import decode as v20
from format.file.v20 import random_access as ra
from format.proto import encodings_v2_0_pb2 as pb

# What an unexpected Arrow / numpy failure on hostile bytes looks like (named as corruption).
_DECODE_ERRORS = (pa.ArrowException, ValueError, TypeError, IndexError, OverflowError)


class StepRows:
    """Rows [start, stop) of one page as a plan (`random_access.Plan`)."""

    ctx: v20.PageContext

    def plan(self, start: int, stop: int) -> ra.Plan:
        """The plan reading rows [start, stop) of the page (0 <= start < stop <= rows)."""
        try:
            return (yield from self._rows(start, stop))
        except LanceError:
            raise
        except _DECODE_ERRORS as e:
            raise self.ctx.corrupt(str(e)) from None

    def _rows(self, start: int, stop: int) -> ra.Plan:
        raise NotImplementedError


class _Fixed(StepRows):
    """Fixed-width values (`width` bytes a row), or fixed-size lists of them."""

    def __init__(self, pos: int, width: int, t: pa.DataType, ctx: v20.PageContext) -> None:
        self.pos, self.width, self.t, self.ctx = pos, width, t, ctx
        self.item_type = t.value_type if pa.types.is_fixed_size_list(t) else None
        self.dim = t.list_size if self.item_type is not None else 1

    def _rows(self, start: int, stop: int) -> ra.Plan:
        w, n = self.width, stop - start
        (raw,) = yield [(self.pos + start * w, n * w)]
        values = pa.py_buffer(raw)
        if self.item_type is None:
            return pa.Array.from_buffers(self.t, n, [None, values], null_count=0)
        items = pa.Array.from_buffers(self.item_type, n * self.dim, [None, values], null_count=0)
        return pa.FixedSizeListArray.from_arrays(items, type=self.t)


class _Binary(StepRows):
    """`Binary` rows: their end offsets (and the one before), then one span of bytes."""

    def __init__(
        self,
        b: pb.Binary,
        flat: pb.Flat,
        locations: Sequence[tuple[int, int]],
        t: pa.DataType,
        ctx: v20.PageContext,
    ) -> None:
        self.b, self.flat, self.locations, self.t, self.ctx = b, flat, locations, t, ctx
        self.off_pos = locations[int(flat.buffer.buffer_index)][0]
        self.off_width = int(flat.bits_per_value) // 8
        self.off_dtype = np.dtype(f"<u{self.off_width}")
        self.data_loc = locations[int(b.bytes.flat.buffer.buffer_index)]
        self.adjustment = int(b.null_adjustment)

    def _rows(self, start: int, stop: int) -> ra.Plan:
        first = start - 1 if start else 0  # the end of the row before, unless it is row 0
        w = self.off_width
        (raw_bytes,) = yield [(self.off_pos + first * w, (stop - first) * w)]
        raw = np.frombuffer(raw_bytes, dtype=self.off_dtype)
        if self.adjustment and int(raw.max()) >= self.adjustment:  # nulls: the general path
            have = np.array([first], np.int64)
            return (
                yield from ra._binary(
                    self.b,
                    self.flat,
                    ra._const(raw_bytes),
                    have,
                    np.array([stop], np.int64),
                    np.array([start], np.int64),
                    np.array([stop], np.int64),
                    self.data_loc,
                    self.t,
                    self.ctx,
                )
            )
        prev = int(raw[0]) if start else 0
        ends = raw[1:] if start else raw
        if int(ends[0]) < prev:  # the rest is checked by _var_array
            raise self.ctx.corrupt("string offsets decrease")
        last = int(ends.max())
        pos, size = self.data_loc
        if last > size:
            raise self.ctx.corrupt(f"string offsets reach {last} but only {size} bytes exist")
        (data,) = yield [(pos + prev, last - prev)]
        rebased = (ends - ends.dtype.type(prev)).astype(np.int64, copy=False)
        return v20._var_array(self.t, rebased, data, None, self.ctx)


class _Dictionary(StepRows):
    """`Dictionary` rows: their indices, gathered from items decoded on the first step."""

    def __init__(
        self,
        d: pb.Dictionary,
        flat: pb.Flat,
        used: list[int],
        locations: Sequence[tuple[int, int]],
        t: pa.DataType,
        ctx: v20.PageContext,
    ) -> None:
        self.d, self.used, self.locations, self.t, self.ctx = d, used, locations, t, ctx
        self.idx_pos = locations[int(flat.buffer.buffer_index)][0]
        self.idx_width = int(flat.bits_per_value) // 8
        self.idx_dtype = np.dtype(f"<u{self.idx_width}")
        self.items: pa.Array | None = None

    def _rows(self, start: int, stop: int) -> ra.Plan:
        w = self.idx_width
        want = [(self.idx_pos + start * w, (stop - start) * w)]
        if self.items is None:
            blobs = yield want + [self.locations[i] for i in self.used]
            page_buffers: list[ra.Bytes] = [b""] * len(self.locations)
            for i, blob in zip(self.used, blobs[1:], strict=True):
                page_buffers[i] = blob
            items_ctx = v20.PageContext(self.ctx.path, self.ctx.where, page_buffers)
            t = self.t.value_type if pa.types.is_dictionary(self.t) else self.t
            self.items = v20.decode_array(
                self.d.items, int(self.d.num_dictionary_items), t, items_ctx
            )
            raw = blobs[0]
        else:
            (raw,) = yield want
        idx = np.frombuffer(raw, dtype=self.idx_dtype)
        return v20.dictionary_values(idx, None, self.items, self.t, self.ctx)


def prepare(
    enc: pb.ArrayEncoding,
    n: int,
    t: pa.DataType,
    locations: Sequence[tuple[int, int]],
    ctx: v20.PageContext,
) -> StepRows | None:
    """A reader of runs of rows of a page of `n` rows read as `t`, or None when the page's
    encoding is not one prepared here (`random_access.plan_rows` then reads it)."""
    enc = _no_nulls(enc)
    kind = v20.variant(enc)
    if kind == "dictionary":
        return _prepare_dictionary(enc.dictionary, n, t, locations, ctx)
    if pa.types.is_dictionary(t) or pa.types.is_null(t):
        return None
    if kind == "flat":
        bits = fixed_bits(t)
        if bits is None or bits % 8 or bits != int(enc.flat.bits_per_value):
            return None
        pos = _whole_buffer(enc.flat, n, locations)
        return None if pos is None else _Fixed(pos, bits // 8, t, ctx)
    if kind == "fixed_size_list":
        fsl = enc.fixed_size_list
        dim = int(fsl.dimension)
        if fsl.has_validity or not pa.types.is_fixed_size_list(t) or t.list_size != dim:
            return None
        items = _no_nulls(fsl.items)
        bits = fixed_bits(t.value_type)
        if v20.variant(items) != "flat" or bits is None or bits % 8 or dim <= 0:
            return None
        if bits != int(items.flat.bits_per_value):
            return None
        pos = _whole_buffer(items.flat, n * dim, locations)
        return None if pos is None else _Fixed(pos, bits // 8 * dim, t, ctx)
    if kind == "binary":
        return _prepare_binary(enc.binary, n, t, locations, ctx)
    return None


def _no_nulls(enc: pb.ArrayEncoding) -> pb.ArrayEncoding:
    """`enc` without its `Nullable{NoNull}` wrappers."""
    while v20.variant(enc) == "nullable" and enc.nullable.WhichOneof("nullability") == "no_nulls":
        enc = enc.nullable.no_nulls.values
    return enc


def _whole_buffer(flat: pb.Flat, n: int, locations: Sequence[tuple[int, int]]) -> int | None:
    """The file position of an uncompressed page buffer holding `n` values of `flat`, or
    None (another buffer kind, compression, or too short: the page decoder names that)."""
    loc = ra._page_buffer(flat.buffer, locations)
    if loc is None or not ra._uncompressed(flat):
        return None
    pos, size = loc
    if size < (n * int(flat.bits_per_value) + 7) // 8:
        return None
    return pos


def _prepare_binary(
    b: pb.Binary,
    n: int,
    t: pa.DataType,
    locations: Sequence[tuple[int, int]],
    ctx: v20.PageContext,
) -> StepRows | None:
    if not (
        pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_string(t)
        or pa.types.is_large_binary(t)
    ):
        return None
    flat = ra._uint_flat(b.indices)
    if flat is None or _whole_buffer(flat, n, locations) is None:
        return None
    if v20.variant(b.bytes) != "flat" or int(b.bytes.flat.bits_per_value) != 8:
        return None
    if ra._page_buffer(b.bytes.flat.buffer, locations) is None:
        return None
    if not ra._uncompressed(b.bytes.flat):
        return None
    return _Binary(b, flat, locations, t, ctx)


def _prepare_dictionary(
    d: pb.Dictionary,
    n: int,
    t: pa.DataType,
    locations: Sequence[tuple[int, int]],
    ctx: v20.PageContext,
) -> StepRows | None:
    flat = ra._uint_flat(d.indices)
    if flat is None or int(d.num_dictionary_items) > (1 << 32):
        return None
    if _whole_buffer(flat, n, locations) is None:
        return None
    bufs = ra._buffers_of(d.items, [])
    if any(ra._page_buffer(b, locations) is None for b in bufs):
        return None
    used = sorted({int(b.buffer_index) for b in bufs})
    return _Dictionary(d, flat, used, locations, t, ctx)
