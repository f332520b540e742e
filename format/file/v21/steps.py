"""Per-page readers of one run of rows of a 2.1+ mini-block page, prepared once per page.

A scan reads each page in steps of a few tens of thousands of contiguous rows. The general
plan (`take.plan_chunks`, then `unravel`) serves any rows of any page: lists, sorted row
sets, runs of chunks. For a run of rows of a page without lists, most of that work is the
same at every step and cost a 2.2 full scan a fifth of its decoding time (~0.45 ms of numpy
and interpreter per column and step, against ~0.06 ms of decoding for an integer column).
`prepare(...)` does it once per page and returns a `MiniBlockSteps` whose `plan(lo, hi)`
finds the step's chunks by bisection, fetches them as one span, reads their headers with a
few array operations and decodes their values, then cuts the step's rows out.

Pages with lists (a repetition index), or whose chunk sizes cannot hold their headers, are
not prepared: the general plan reads them and names their faults.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from quiver.format.errors import LanceError
from quiver.format.file.base import DECODE_ERRORS
from quiver.format.file.items import ItemTable, item_table
from quiver.format.file.v20 import random_access as ra
from quiver.format.file.v21 import compression as cz
from quiver.format.file.v21 import unravel as uv
from quiver.format.file.v21.gather import I64, read_uint
from quiver.format.file.v21.layers import max_rep
from quiver.format.file.v21.page import DecodedPage, PageWhere, levels_array
from quiver.format.file.v21.take import MiniBlockIndex
from quiver.format.proto import encodings_v2_1_pb2 as pb
from quiver.format.table.schema import LanceField


class MiniBlockSteps:
    """Runs of rows of one mini-block page without lists, as path arrays."""

    def __init__(
        self,
        layout: pb.MiniBlockLayout,
        index: MiniBlockIndex,
        path: list[LanceField],
        leaf_type: pa.DataType,
        where: PageWhere,
    ) -> None:
        self.layout, self.index, self.path, self.leaf_type, self.where = (
            layout,
            index,
            path,
            leaf_type,
            where,
        )
        self.has_def = layout.HasField("def_compression")
        nbuf = int(layout.num_buffers)
        vw = 4 if layout.has_large_chunk else 2
        self.size_at = [2 + 2 * self.has_def + vw * j for j in range(nbuf)]  # in the header
        self.vw = vw
        self.head = (2 + 2 * self.has_def + vw * nbuf + 7) // 8 * 8  # padded header size
        self.flat_leaf = len(path) == 1 and not self.has_def
        # a string dictionary's items laid out for gathering once, not at every step
        d = index.dictionary
        self.table: ItemTable | None = None
        if self.flat_leaf and d is not None:
            self.table = item_table(d, leaf_type)

    def plan(self, lo: int, hi: int) -> ra.Plan:
        """The plan reading local rows [lo, hi) of the page (0 <= lo < hi <= rows)."""
        try:
            return (yield from self._rows(lo, hi))
        except LanceError:
            raise
        except DECODE_ERRORS as e:
            raise self.where.corrupt(str(e)) from None

    def _rows(self, lo: int, hi: int) -> ra.Plan:
        where, index = self.where, self.index
        if not 0 <= lo < hi <= index.num_rows:
            raise where.corrupt(f"rows [{lo}, {hi}) wanted of a page of {index.num_rows}")
        ends = index.cum  # rows completed by the end of each chunk
        a, b = ends.searchsorted((lo, hi - 1), side="right").tolist()
        first = int(ends[a - 1]) if a else 0
        n = int(ends[b]) - first  # rows (one value each) in chunks a..b
        s0 = int(index.byte_starts[a])
        (raw,) = yield [(index.data_pos + s0, int(index.byte_starts[b] + index.sizes[b]) - s0)]
        data = raw if isinstance(raw, np.ndarray) else np.frombuffer(raw, dtype=np.uint8)
        starts = index.byte_starts[a : b + 1] - s0
        counts = index.counts[a : b + 1]
        chunk_ends = starts + index.sizes[a : b + 1]
        w = where.full
        cur = starts + self.head
        defs_chunks = None
        if self.has_def:
            levels = read_uint(data, starts, 2, w, "chunk header").astype(I64)
            size = read_uint(data, starts + 2, 2, w, "chunk header").astype(I64)
            defs_chunks = cz.Chunks(data, cur, size, levels)
            cur = cur + (size + 7) // 8 * 8
        bufs = []
        for at in self.size_at:
            size = read_uint(data, starts + at, self.vw, w, "chunk header").astype(I64)
            bufs.append(cz.Chunks(data, cur, size, counts))
            cur = cur + (size + 7) // 8 * 8
        over = cur > chunk_ends
        if over.any():
            c = int(np.argmax(over))
            raise where.corrupt(
                f"chunk {a + c}: its buffers need {int(cur[c] - starts[c])} bytes, the chunk "
                f"has {int(index.sizes[a + c])}"
            )
        values = cz.decode_chunks(self.layout.value_compression, bufs, w)
        if len(values) != n:
            raise where.corrupt(f"values decode to {len(values)} items, the chunks hold {n}")
        values = values.slice(lo - first, hi - lo)
        if self.flat_leaf:
            return uv.to_logical(values, self.leaf_type, None, index.dictionary, where, self.table)
        defs = None
        if defs_chunks is not None:
            n_levels = int(defs_chunks.counts.sum())
            decoded = cz.decode_chunks(self.layout.def_compression, [defs_chunks], w)
            defs = levels_array(decoded, n_levels, "def", where)
            if n_levels != n:
                raise where.corrupt(f"{n_levels} def levels for {n} values")
            defs = defs[lo - first : hi - first]
        page = DecodedPage(index.layers, hi - lo, None, defs, values, index.dictionary)
        return uv.unravel(page, self.path, self.leaf_type, where)


def prepare(
    layout: pb.MiniBlockLayout,
    index: MiniBlockIndex,
    path: list[LanceField],
    leaf_type: pa.DataType,
    where: PageWhere,
) -> MiniBlockSteps | None:
    """A reader of runs of rows of a mini-block page, or None where the general plan must
    read it (lists, repetition levels, chunks too small for their headers)."""
    if index.leftover is not None or max_rep(index.layers) or layout.HasField("rep_compression"):
        return None
    if len(index.layers) != len(path):
        return None
    nbuf = int(layout.num_buffers)
    if not 1 <= nbuf <= 64:
        return None
    head = 2 + 2 * layout.HasField("def_compression") + (4 if layout.has_large_chunk else 2) * nbuf
    if len(index.sizes) and int(index.sizes.min()) < head:
        return None
    return MiniBlockSteps(layout, index, path, leaf_type, where)
