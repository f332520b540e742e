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

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from quiver.format import _kernels
from quiver.format.errors import LanceError
from quiver.format.file.base import DECODE_ERRORS
from quiver.format.file.items import ItemTable, item_table
from quiver.format.file.types import fixed_bits
from quiver.format.file.v20 import decode as v20
from quiver.format.file.v20 import random_access as ra
from quiver.format.proto import encodings_v2_0_pb2 as pb


class StepRows(ABC):
    """Rows [start, stop) of one page as a plan (`random_access.Plan`)."""

    ctx: v20.PageContext

    def plan(self, start: int, stop: int) -> ra.Plan:
        """The plan reading rows [start, stop) of the page (0 <= start < stop <= rows)."""
        try:
            return (yield from self._rows(start, stop))
        except LanceError:
            raise
        except DECODE_ERRORS as e:
            raise self.ctx.corrupt(str(e)) from None

    @abstractmethod
    def _rows(self, start: int, stop: int) -> ra.Plan:
        """The plan itself, for the encoding at hand (errors are named by `plan`)."""


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
        data_loc: tuple[int, int],
        locations: Sequence[tuple[int, int]],
        t: pa.DataType,
        ctx: v20.PageContext,
    ) -> None:
        self.b, self.flat, self.t, self.ctx = b, flat, t, ctx
        self.off_pos, self.off_width, _ = _uints(flat, locations)
        self.data_loc = data_loc
        self.adjustment = int(b.null_adjustment)
        large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        self.offset_dtype = np.dtype(np.int64 if large else np.int32)

    def _rows(self, start: int, stop: int) -> ra.Plan:
        first = start - 1 if start else 0  # the end of the row before, unless it is row 0
        w = self.off_width
        (raw_bytes,) = yield [(self.off_pos + first * w, (stop - first) * w)]
        # Arrow's offsets straight from the stored ends, checked in the same pass
        offsets = np.empty(stop - start + 1, dtype=self.offset_dtype)
        status, prev, last = _kernels.rebase_ends(raw_bytes, w, start > 0, self.adjustment, offsets)
        if status == _kernels.NULL_ENDS:  # nulls: the general path
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
        if status == _kernels.DECREASING:
            raise self.ctx.corrupt("string offsets decrease")
        if status == _kernels.TOO_WIDE:
            raise self.ctx.unsupported(f"{last} bytes of {self.t} in one page (use a large_ type)")
        pos, size = self.data_loc
        if last > size:
            raise self.ctx.corrupt(f"string offsets reach {last} but only {size} bytes exist")
        (data,) = yield [(pos + prev, last - prev)]
        buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        return pa.Array.from_buffers(self.t, stop - start, buffers, null_count=0)


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
        self.idx_pos, self.idx_width, self.idx_dtype = _uints(flat, locations)
        self.items: pa.Array | None = None
        self.table: ItemTable | None = None  # the items laid out for gathering, once

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
            if not pa.types.is_dictionary(self.t):
                self.table = item_table(self.items)
            raw = blobs[0]
        else:
            (raw,) = yield want
        idx = np.frombuffer(raw, dtype=self.idx_dtype)
        return v20.dictionary_values(idx, None, self.items, self.t, self.ctx, self.table)


def prepare(
    enc: pb.ArrayEncoding,
    n: int,
    t: pa.DataType,
    locations: Sequence[tuple[int, int]],
    ctx: v20.PageContext,
) -> StepRows | None:
    """A reader of runs of rows of a page of `n` rows read as `t`, or None when the page's
    encoding is not one prepared here (`random_access.plan_rows` then reads it)."""
    enc = v20.without_no_nulls(enc)
    kind = v20.variant(enc)
    if kind == "dictionary":
        layout = ra.dictionary_layout(enc.dictionary, n, locations)
        return None if layout is None else _Dictionary(enc.dictionary, *layout, locations, t, ctx)
    if pa.types.is_dictionary(t) or pa.types.is_null(t):
        return None
    if kind == "flat":
        bits = fixed_bits(t)
        if bits is None or bits % 8 or bits != int(enc.flat.bits_per_value):
            return None
        pos = ra.flat_position(enc.flat, n, locations)
        return None if pos is None else _Fixed(pos, bits // 8, t, ctx)
    if kind == "fixed_size_list":
        fsl = enc.fixed_size_list
        dim = int(fsl.dimension)
        if fsl.has_validity or not pa.types.is_fixed_size_list(t) or t.list_size != dim:
            return None
        items = v20.without_no_nulls(fsl.items)
        bits = fixed_bits(t.value_type)
        if v20.variant(items) != "flat" or bits is None or bits % 8 or dim <= 0:
            return None
        if bits != int(items.flat.bits_per_value):
            return None
        pos = ra.flat_position(items.flat, n * dim, locations)
        return None if pos is None else _Fixed(pos, bits // 8 * dim, t, ctx)
    if kind == "binary":
        layout = ra.binary_layout(enc.binary, n, t, locations)
        return None if layout is None else _Binary(enc.binary, *layout, locations, t, ctx)
    return None


def _uints(flat: pb.Flat, locations: Sequence[tuple[int, int]]) -> tuple[int, int, np.dtype]:
    """(file position, bytes per value, numpy dtype) of a page buffer of unsigned integers."""
    width = int(flat.bits_per_value) // 8
    return locations[int(flat.buffer.buffer_index)][0], width, np.dtype(f"<u{width}")
