"""`V2FileReader`: reads Lance v2.x data files (2.0 encodings) as Arrow arrays.

In a 2.0 file every field of the pre-order schema walk has its own column: a struct has an
empty header column followed by its children, a list has an offsets column (`List` pages)
followed by its item columns, and anything else is one value column. Columns are paged
independently, so a list's item pages need not line up with its offsets pages: each
offsets page records how many items it covers, which places its rows in the item column.

Reading works level by level. The requested row ranges of the top-level fields select
pages of their columns (structs pass ranges to their children unchanged); all missing
pages of one level are fetched with one coalesced `read_ranges` call and decoded whole;
list columns then turn their row ranges into item ranges, which form the next level.
Decoded pages stay cached per column only while requests still overlap them, so a scan
holds about one page per column plus one step of output; a step inside the one cached
page of every (value) column is a zero-copy slice of it.

`take` does not decode whole pages of value columns when their encoding allows random
access (Flat, Nullable, FixedSizeList, Binary, dictionary indices; see `random_access`):
it reads only the bytes of the wanted rows. Other encodings and list offsets still read
whole pages. A scan's steps, one run of rows per page, go through a reader each page builds
on its first step (`step_rows`) rather than planning from the encoding every time.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa

from quiver.format.errors import CorruptFileError, LanceError, UnsupportedFeatureError
from quiver.format.file.base import (
    DECODE_ERRORS,
    DEFAULT_BATCH_SIZE,
    DataFileReader,
    PageBreaks,
    check_read_args,
    checked_take_indices,
    column_map,
    split_ranges,
)
from quiver.format.file.container import (
    ColumnInfo,
    V2Container,
)
from quiver.format.file.parallel import run_plans
from quiver.format.file.v20 import decode as v20
from quiver.format.file.v20 import random_access as ra
from quiver.format.file.v20.step_rows import StepRows
from quiver.format.file.v20.step_rows import prepare as prepare_steps
from quiver.format.io.store import FileReader
from quiver.format.proto import encodings_v2_0_pb2 as pb
from quiver.format.table.schema import LanceField

_LIST_TYPES = ("list", "list.struct", "large_list", "large_list.struct")
_INT32_MAX = (1 << 31) - 1
_BLOB_DESC = pa.struct([("position", pa.uint64()), ("size", pa.uint64())])

LEAF, STRUCT, LIST, BLOB = "leaf", "struct", "list", "blob"


# -- row ranges ----------------------------------------------------------------------------
@dataclass
class Ranges:
    """Sorted, disjoint, non-empty row ranges [starts[i], stops[i]) as int64 arrays."""

    starts: np.ndarray
    stops: np.ndarray

    @classmethod
    def single(cls, start: int, stop: int) -> Ranges:
        """One range (empty if stop <= start)."""
        if stop <= start:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))
        return cls(np.array([start], np.int64), np.array([stop], np.int64))

    @classmethod
    def from_spans(cls, starts: np.ndarray, stops: np.ndarray) -> Ranges:
        """Ranges from ordered, non-overlapping spans: empty ones dropped, touching ones merged."""
        keep = stops > starts
        starts, stops = starts[keep], stops[keep]
        if len(starts) > 1:
            gap = np.flatnonzero(starts[1:] != stops[:-1])
            starts = starts[np.concatenate(([0], gap + 1))]
            stops = stops[np.concatenate((gap, [len(stops) - 1]))]
        return cls(starts.astype(np.int64, copy=False), stops.astype(np.int64, copy=False))

    @classmethod
    def from_indices(cls, indices: np.ndarray) -> Ranges:
        """Ranges covering sorted, unique row indices (runs merged)."""
        idx = indices.astype(np.int64, copy=False)
        return cls.from_spans(idx, idx + 1)

    @property
    def total(self) -> int:
        """Rows covered."""
        return int((self.stops - self.starts).sum())


def range_indices(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """All positions in the ranges, concatenated (vectorised `np.r_[s0:e0, s1:e1, ...]`)."""
    lens = stops - starts
    total = int(lens.sum())
    firsts = np.cumsum(lens) - lens
    return np.arange(total, dtype=np.int64) - np.repeat(firsts - starts, lens)


# -- columns and nodes ---------------------------------------------------------------------
_Split = tuple[int, np.ndarray, np.ndarray]  # (page, local starts, local stops)


class _AllNull:
    """Placeholder for a decoded `Nullable{AllNull}` page (nothing to keep in memory)."""


@dataclass(eq=False)
class _Column:
    """One physical column: its metadata, per-page list info and decoded-page cache."""

    info: ColumnInfo
    where: str
    item_bases: np.ndarray | None = None  # list columns: first item of each page
    cache: dict[int, object] = field(default_factory=dict)
    # pages' prepared readers of runs of rows (None: not preparable), kept like `cache`
    steps: dict[int, StepRows | None] = field(default_factory=dict)

    @property
    def num_rows(self) -> int:
        """Rows (items) over all pages."""
        return self.info.num_rows

    @cached_property
    def starts_list(self) -> list[int]:
        """Page start rows as Python ints (plus the end), for bisecting."""
        return self.info.page_starts.tolist()

    def split(self, rng: Ranges, path: str) -> list[_Split]:
        """(page, local starts, local stops) for every page the ranges overlap, in order."""
        if not len(rng.starts):
            return []
        ps = self.info.page_starts
        if int(rng.stops[-1]) > int(ps[-1]):
            raise CorruptFileError(
                path,
                f"{self.where}: rows up to {int(rng.stops[-1])} needed but the column has "
                f"{int(ps[-1])}",
            )
        if len(rng.starts) == 1:  # the streaming case: plain Python is faster
            start, stop = int(rng.starts[0]), int(rng.stops[0])
            starts = self.starts_list
            k = bisect.bisect_right(starts, start) - 1
            out = []
            while k < len(starts) - 1 and starts[k] < stop:
                lo, hi = starts[k], starts[k + 1]
                if hi > lo:
                    local = (np.array([max(start, lo) - lo]), np.array([min(stop, hi) - lo]))
                    out.append((k, *local))
                k += 1
            return out
        first = np.searchsorted(ps, rng.starts, side="right") - 1
        last = np.searchsorted(ps, rng.stops - 1, side="right") - 1
        cover = np.zeros(len(ps), dtype=np.int64)
        np.add.at(cover, first, 1)
        np.add.at(cover, last + 1, -1)
        pages = np.flatnonzero(np.cumsum(cover) > 0).tolist()
        out = []
        for k in pages:
            lo, hi = int(ps[k]), int(ps[k + 1])
            if hi == lo:
                continue
            a = int(np.searchsorted(rng.stops, lo, side="right"))
            b = int(np.searchsorted(rng.starts, hi, side="left"))
            if a >= b:
                continue
            s = np.maximum(rng.starts[a:b], lo) - lo
            e = np.minimum(rng.stops[a:b], hi) - lo
            out.append((k, s, e))
        return out


@dataclass(eq=False)
class _Node:
    """A field to read: a value column, a blob column, a list, or a struct of nodes."""

    field: LanceField
    kind: str
    arrow_type: pa.DataType
    column: _Column | None = None
    children: list[_Node] = field(default_factory=list)


# Module functions, not closures: a recursive closure is a reference cycle, which would keep
# every array of a step alive until the cyclic garbage collector happens to run.
def _collect(node: _Node, rng: Ranges, out: list[tuple[_Node, Ranges]]) -> None:
    """The value, list and blob nodes under `node` (structs opened), with their ranges."""
    if node.kind == STRUCT:
        for c in node.children:
            _collect(c, rng, out)
    else:
        out.append((node, rng))


def _assemble(node: _Node, rng: Ranges, arrays: Iterator[pa.Array]) -> pa.Array:
    """`node`'s array from the arrays of its `_collect`ed nodes, in that order."""
    if node.kind != STRUCT:
        return next(arrays)
    kids = [_assemble(c, rng, arrays) for c in node.children]
    t = node.arrow_type
    if not kids:
        return pa.Array.from_buffers(t, rng.total, [None], children=[])
    return pa.StructArray.from_arrays(kids, fields=list(t))


def _is_packed(f: LanceField) -> bool:
    """Whether a struct field is stored packed (one column) rather than child by child."""
    meta = f.metadata
    if "packed" in meta:
        v = meta["packed"]
        return (v.decode() if isinstance(v, bytes) else str(v)).lower() == "true"
    return "lance-encoding:packed" in meta


def _empty(t: pa.DataType) -> pa.Array:
    """A zero-length array of type `t`."""
    return pa.array([], type=t)


def _concat(pieces: list[pa.Array], t: pa.DataType) -> pa.Array:
    """Concatenate page pieces (no copy for a single piece)."""
    if not pieces:
        return _empty(t)
    if len(pieces) == 1:
        return pieces[0]
    return pa.concat_arrays(pieces)


class V2FileReader(DataFileReader):
    """Reads one Lance v2.x data file; decodes 2.0 (`ArrayEncoding`) pages."""

    def __init__(
        self,
        file: FileReader,
        fields: Sequence[int],
        column_indices: Sequence[int],
        *,
        path_for_errors: str,
        blob_descriptions: bool = True,
    ) -> None:
        self.path = path_for_errors
        self._file = file
        # pylance's default: blob columns read as (position, size) descriptions, not bytes
        self.blob_descriptions = blob_descriptions
        self._container = V2Container(file, self.path)
        self.version = self._container.version
        self._column_of = column_map(self.path, fields, column_indices, self._container.num_columns)
        self.num_rows = self._container.num_rows
        self._columns: dict[int, _Column] = {}

    # -- public API ---------------------------------------------------------------------
    def read(
        self,
        fields: Sequence[LanceField],
        ranges: Sequence[tuple[int, int]],
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[list[pa.Array]]:
        """Stream `fields` over sorted, disjoint row ranges, one step per `split_ranges` item."""
        check_read_args(self.path, ranges, batch_size, self.num_rows)
        nodes = self._plan(fields)
        # Pages decoded whole stay after the read (for a following read of the next step)
        # until a later step passes them or the reader closes.
        for start, stop in split_ranges(ranges, batch_size):
            reqs = [(n, Ranges.single(start, stop)) for n in nodes]
            yield self._materialize(reqs, partial=True)

    def take(self, fields: Sequence[LanceField], indices: np.ndarray) -> list[pa.Array]:
        """The rows at sorted, unique physical offsets `indices` (uint64), one array per field."""
        idx = checked_take_indices(self.path, indices, self.num_rows)
        nodes = self._plan(fields)
        rng = Ranges.from_indices(idx)
        try:
            return self._materialize([(n, rng) for n in nodes], partial=True)
        finally:
            self._release(nodes)

    def page_breaks(self, fields: Sequence[LanceField]) -> list[PageBreaks]:
        """Page starts of the columns `fields` read that hold one value per row (a list's
        items do not)."""
        out: list[PageBreaks] = []
        nodes = self._plan(fields)
        while nodes:
            node = nodes.pop()
            if node.kind == STRUCT:
                nodes.extend(node.children)
                continue
            col = node.column
            if col is not None and col.num_rows == self.num_rows and self.num_rows:
                out.append(PageBreaks(col.info.page_starts, col.info.stored_bytes / self.num_rows))
        return out

    def close(self) -> None:
        """Drop cached pages and release the file handle."""
        for col in self._columns.values():
            col.cache.clear()
            col.steps.clear()
        self._file.close()

    # -- planning -----------------------------------------------------------------------
    def _plan(self, fields: Sequence[LanceField]) -> list[_Node]:
        """Nodes for the requested fields, loading the metadata of their columns at once."""
        if self.version != "2.0":
            self._unsupported_layout(fields)
        wanted: list[int] = []
        for f in fields:
            self._collect_columns(f, wanted)
        missing = [c for c in dict.fromkeys(wanted) if c not in self._columns]
        for info in self._container.columns(missing):
            self._columns[info.index] = _Column(info, f"column {info.index}")
        return [self._node(f, top=True) for f in fields]

    def _collect_columns(self, f: LanceField, out: list[int]) -> None:
        """The columns decoding `f` needs (a plain struct's empty header column is not one)."""
        packed = f.logical_type == "struct" and _is_packed(f)
        col = self._column_of.get(f.id)
        if col is not None and (f.logical_type != "struct" or packed):
            out.append(col)
        if not packed:
            for c in f.children:
                self._collect_columns(c, out)

    def _column_for(self, f: LanceField, top: bool, role: str) -> _Column:
        col_index = self._column_of.get(f.id)
        if col_index is None:
            raise CorruptFileError(
                self.path, f"field {f.name!r} (id {f.id}) has no {role} column in this file"
            )
        col = self._columns[col_index]
        col.where = f"column {col_index} (field {f.name!r}, id {f.id})"
        if top and col.num_rows != self.num_rows:
            raise CorruptFileError(
                self.path, f"{col.where} has {col.num_rows} rows, the file has {self.num_rows}"
            )
        return col

    def _node(self, f: LanceField, top: bool) -> _Node:
        lt = f.logical_type
        t = f.arrow_type
        if lt == "struct" and _is_packed(f):
            return _Node(f, LEAF, t, self._column_for(f, top, "packed struct"))
        if lt == "struct":
            return _Node(f, STRUCT, t, None, [self._node(c, top) for c in f.children])
        if lt in _LIST_TYPES:
            col = self._column_for(f, top, "list offsets")
            if col.item_bases is None:
                col.item_bases = self._item_bases(col)
            return _Node(f, LIST, t, col, [self._node(f.children[0], False)])
        if lt == "map":
            raise UnsupportedFeatureError(
                f"{self.path}: field {f.name!r}: maps cannot be stored in 2.0 files"
            )
        col = self._column_for(f, top, "value")
        kind = LEAF
        ce = self._container.column_encoding(col.info)
        if ce is not None and ce.WhichOneof("column_encoding") == "blob":
            if not pa.types.is_large_binary(t):
                raise CorruptFileError(self.path, f"{col.where}: blob column of type {t}")
            kind = BLOB
        return _Node(f, kind, t, col)

    def _item_bases(self, col: _Column) -> np.ndarray:
        """Item position of the first item of every page of a list offsets column."""
        counts = np.zeros(len(col.info.pages) + 1, dtype=np.int64)
        for page in col.info.pages:
            enc = self._page_encoding(col, page.index)
            if v20.variant(enc) != "list":
                raise CorruptFileError(
                    self.path, f"{col.where} page {page.index}: not a List page in a list column"
                )
            n = int(enc.list.num_items)
            if n >= 1 << 62:
                raise CorruptFileError(self.path, f"{col.where}: absurd item count {n}")
            counts[page.index + 1] = n
        return np.cumsum(counts)

    def _unsupported_layout(self, fields: Sequence[LanceField]) -> None:
        """Raise for files whose pages are not 2.0 `ArrayEncoding`s (2.1+ structural)."""
        cols = [self._column_of[x.id] for f in fields for x in f.walk() if x.id in self._column_of]
        for info in self._container.columns(cols[:1]):
            for page in info.pages[:1]:
                ref = self._container.resolve(page.encoding, f"column {info.index}")
                raise UnsupportedFeatureError(
                    f"{self.path}: column {info.index} page 0 uses {ref.type_url!r} "
                    f"(file version {self.version}); only 2.0 page encodings are supported"
                )
        raise UnsupportedFeatureError(
            f"{self.path}: file version {self.version} is not supported by this reader"
        )

    # -- pages --------------------------------------------------------------------------
    def _page_encoding(self, col: _Column, k: int) -> pb.ArrayEncoding:
        return self._container.page_message(
            col.info.pages[k], pb.ArrayEncoding, f"{col.where} page {k}", "2.0 decoder"
        )

    def _other_buffer(self, col: _Column) -> Callable[[int, int], bytes | memoryview]:
        """A fetcher of the column's (1) or the file's global (2) buffers by index."""

        def fetch(kind: int, index: int) -> bytes | memoryview:
            bufs = col.info.buffers if kind == v20.BUFFER_COLUMN else self._container.global_buffers
            if index >= len(bufs):
                raise CorruptFileError(self.path, f"{col.where}: no buffer {index} of type {kind}")
            (raw,) = self._container.read_ranges([bufs[index]])
            return raw

        return fetch

    def _decode_page(self, node: _Node, k: int, buffers: list[bytes | memoryview]) -> object:
        col = node.column
        assert col is not None
        page = col.info.pages[k]
        enc = self._page_encoding(col, k)
        ctx = v20.PageContext(self.path, f"{col.where} page {k}", buffers, self._other_buffer(col))
        with self._guard(ctx.where):
            if node.kind == LIST:
                return v20.decode_list_page(enc, page.length, ctx)
            if v20.is_all_null(enc):
                return _AllNull()
            t = _BLOB_DESC if node.kind == BLOB else node.arrow_type
            return v20.decode_array(enc, page.length, t, ctx)

    @contextlib.contextmanager
    def _guard(self, where: str) -> Iterator[None]:
        """Turn unexpected decoding failures (Arrow, numpy) into CorruptFileError."""
        try:
            yield
        except LanceError:
            raise
        except DECODE_ERRORS as e:
            raise CorruptFileError(self.path, f"{where}: {e}") from None

    def _load(self, reqs: list[tuple[_Node, Ranges]]) -> list[list[_Split]]:
        """Make the pages the requests overlap resident (one batched read), evicting others.

        Returns each request's split into (page, local starts, local stops).
        """
        splits = []
        todo: list[tuple[_Node, int]] = []
        for node, rng in reqs:
            col = node.column
            assert col is not None
            split = col.split(rng, self.path)
            splits.append(split)
            needed = {k for k, _, _ in split}
            stale = [k for k in col.cache if k not in needed]
            for k in stale:
                del col.cache[k]
            todo.extend((node, k) for k in sorted(needed) if k not in col.cache)
        ranges = [b for node, k in todo for b in node.column.info.pages[k].buffers]
        blobs = self._container.read_ranges(ranges)
        i = 0
        for node, k in todo:
            n = len(node.column.info.pages[k].buffers)
            node.column.cache[k] = self._decode_page(node, k, blobs[i : i + n])
            i += n
        return splits

    def _take_direct(self, reqs: list[tuple[int, _Node, Ranges]]) -> dict[int, pa.Array]:
        """Rows of value columns read with random access (whole pages only where needed)."""
        plans, owners = [], []
        for i, node, rng in reqs:
            col = node.column
            split = col.split(rng, self.path)
            needed = {k for k, _, _ in split}
            for k in [k for k in col.cache if k not in needed]:
                del col.cache[k]  # reads move forward: a page not needed now is done
            for k in [k for k in col.steps if k not in needed]:
                del col.steps[k]
            for k, s, e in split:
                plans.append(self._take_plan(node, k, s, e))
                owners.append(i)
        # 2.0 plans mostly slice bytes already read: the pool would cost more than it saves
        arrays = run_plans(plans, self._container.read_ranges, parallel=False)
        pieces: dict[int, list[pa.Array]] = {i: [] for i, _, _ in reqs}
        for i, arr in zip(owners, arrays, strict=True):
            pieces[i].append(arr)
        return {i: _concat(pieces[i], node.arrow_type) for i, node, _ in reqs}

    def _take_plan(self, node: _Node, k: int, s: np.ndarray, e: np.ndarray) -> ra.Plan:
        """A plan for local rows [s, e) of page k: random access, or the whole page."""
        col = node.column
        if len(s) == 1:  # one run of rows (a scan's step): the page's prepared reader
            steps = col.steps.get(k, False)
            if steps is False:
                steps = col.steps[k] = self._prepare_steps(node, k)
            if steps is not None:
                return steps.plan(int(s[0]), int(e[0]))
        page = col.info.pages[k]
        where = f"{col.where} page {k}"
        with self._guard(where):
            enc = self._page_encoding(col, k)
            ctx = v20.PageContext(self.path, where, [], None)
            plan = None
            if not v20.is_all_null(enc):
                plan = ra.plan_rows(enc, page.length, node.arrow_type, s, e, page.buffers, ctx)
        if plan is None:
            plan = self._whole_page(node, k, s, e)
        return self._guarded(plan, where)

    def _prepare_steps(self, node: _Node, k: int) -> StepRows | None:
        """Page k's reader of runs of rows, or None when its encoding has none."""
        col = node.column
        page = col.info.pages[k]
        where = f"{col.where} page {k}"
        with self._guard(where):
            enc = self._page_encoding(col, k)
            ctx = v20.PageContext(self.path, where, [], None)
            return prepare_steps(enc, page.length, node.arrow_type, page.buffers, ctx)

    def _whole_page(self, node: _Node, k: int, s: np.ndarray, e: np.ndarray) -> ra.Plan:
        """Rows of a page without random access: decoded whole once, kept while it is read."""
        page = node.column.cache.get(k)
        if page is None:
            bufs = yield list(node.column.info.pages[k].buffers)
            page = self._decode_page(node, k, bufs)
            node.column.cache[k] = page
        t = node.arrow_type
        if isinstance(page, _AllNull):
            return pa.nulls(int((e - s).sum()), t)
        if len(s) == 1:
            return page.slice(int(s[0]), int(e[0] - s[0]))
        return page.take(pa.array(range_indices(s, e)))

    def _guarded(self, plan: ra.Plan, where: str) -> ra.Plan:
        with self._guard(where):
            return (yield from plan)

    def _release(self, nodes: list[_Node]) -> None:
        """Drop the decoded pages of these nodes' columns."""
        for node in nodes:
            if node.column is not None:
                node.column.cache.clear()
                node.column.steps.clear()
            self._release(node.children)

    # -- gathering ----------------------------------------------------------------------
    def _gather(self, node: _Node, split: list[_Split], t: pa.DataType) -> pa.Array:
        """The rows of a value column in the ranges (slices of the cached pages)."""
        col = node.column
        pieces = []
        for k, s, e in split:
            page = col.cache[k]
            if isinstance(page, _AllNull):
                pieces.append(pa.nulls(int((e - s).sum()), t))
            elif len(s) == 1:
                pieces.append(page.slice(int(s[0]), int(e[0] - s[0])))
            else:
                pieces.append(page.take(pa.array(range_indices(s, e))))
        return _concat(pieces, t)

    def _gather_list(
        self, node: _Node, split: list[_Split]
    ) -> tuple[np.ndarray, np.ndarray | None, Ranges]:
        """Offsets (from 0), validity and the item ranges of the list rows in the ranges."""
        col = node.column
        starts, ends, valids = [], [], []
        any_null = False
        for k, s, e in split:
            lp = col.cache[k]
            base = int(col.item_bases[k])
            if len(s) == 1:
                sel = slice(int(s[0]), int(e[0]))
            else:
                sel = range_indices(s, e)
            starts.append(lp.starts[sel] + base)
            ends.append(lp.ends[sel] + base)
            if lp.valid is None:
                valids.append(np.ones(len(starts[-1]), dtype=bool))
            else:
                valids.append(lp.valid[sel])
                any_null = True
        if not starts:
            return np.zeros(1, np.int64), None, Ranges.single(0, 0)
        st, en = np.concatenate(starts), np.concatenate(ends)
        offsets = np.zeros(len(st) + 1, dtype=np.int64)
        np.cumsum(en - st, out=offsets[1:])
        valid = np.concatenate(valids) if any_null else None
        return offsets, valid, Ranges.from_spans(st, en)

    def _blobs(self, node: _Node, split: list[_Split]) -> pa.Array:
        """Blob column rows: descriptions (position, size) resolved to their bytes."""
        desc = self._gather(node, split, _BLOB_DESC)
        n = len(desc)
        if desc.null_count:
            raise CorruptFileError(self.path, f"{node.column.where}: null blob descriptions")
        pos = desc.field("position").to_numpy(zero_copy_only=False).astype(np.int64)
        size = desc.field("size").to_numpy(zero_copy_only=False).astype(np.int64)
        if n and (pos.min() < 0 or size.min() < 0):
            raise CorruptFileError(self.path, f"{node.column.where}: blob position out of range")
        valid = ~((pos == 1) & (size == 0))
        has = size > 0
        wanted = list(zip(pos[has].tolist(), size[has].tolist(), strict=True))
        for p, s in wanted:
            self._container.check_range(p, s, f"{node.column.where} blob")
        data = b"".join(self._container.read_ranges(wanted))
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.where(has, size, 0), out=offsets[1:])
        bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(
            pa.large_binary(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
        )

    def _materialize(
        self, reqs: list[tuple[_Node, Ranges]], partial: bool = False
    ) -> list[pa.Array]:
        """The arrays of the requested (node, ranges), reading one nesting level at a time.

        With `partial` (take), value columns read only the bytes of the wanted rows where
        their encoding allows it (`random_access`) instead of whole pages.
        """
        flat: list[tuple[_Node, Ranges]] = []
        for node, rng in reqs:
            _collect(node, rng, flat)
        direct: dict[int, pa.Array] = {}
        if partial:
            direct = self._take_direct(
                [(i, n, r) for i, (n, r) in enumerate(flat) if n.kind == LEAF]
            )
        loaded = iter(self._load([(n, r) for i, (n, r) in enumerate(flat) if i not in direct]))
        splits = [[] if i in direct else next(loaded) for i in range(len(flat))]

        lists, child_reqs = [], []
        for (node, _), split in zip(flat, splits, strict=True):
            if node.kind == LIST:
                with self._guard(node.column.where):
                    offsets, valid, items = self._gather_list(node, split)
                lists.append((offsets, valid))
                child_reqs.append((node.children[0], items))
        child_arrays = iter(self._materialize(child_reqs, partial) if child_reqs else [])
        list_parts = iter(lists)

        results = []
        for i, ((node, _), split) in enumerate(zip(flat, splits, strict=True)):
            with self._guard(node.column.where):
                if i in direct:
                    results.append(direct[i])
                elif node.kind == LIST:
                    offsets, valid = next(list_parts)
                    results.append(self._list_array(node, offsets, valid, next(child_arrays)))
                elif node.kind == BLOB and self.blob_descriptions:
                    results.append(self._gather(node, split, _BLOB_DESC))
                elif node.kind == BLOB:
                    results.append(self._blobs(node, split))
                else:
                    results.append(self._gather(node, split, node.arrow_type))
        it = iter(results)
        return [_assemble(node, rng, it) for node, rng in reqs]

    def _list_array(
        self, node: _Node, offsets: np.ndarray, valid: np.ndarray | None, items: pa.Array
    ) -> pa.Array:
        t = node.arrow_type
        n = len(offsets) - 1
        if len(items) != int(offsets[-1]):
            raise CorruptFileError(
                self.path,
                f"{node.column.where}: {len(items)} items for offsets up to {offsets[-1]}",
            )
        if pa.types.is_large_list(t):
            off = offsets
        else:
            if int(offsets[-1]) > _INT32_MAX:
                raise UnsupportedFeatureError(
                    f"{self.path}: {node.column.where}: {int(offsets[-1])} items in one step "
                    f"overflow {t}; use a smaller batch size"
                )
            off = offsets.astype(np.int32)
        bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(t, n, [bitmap, pa.py_buffer(off)], children=[items])
