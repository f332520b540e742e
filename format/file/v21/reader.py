"""`StructuralFileReader`: reads Lance 2.1 / 2.2 data files ("structural" encodings).

Only leaf fields have columns; a struct's or list's validity and offsets live in the
repetition/definition levels of each of its leaves. Each leaf's rows are decoded into levels
plus visible values, then unravelled into a *path array* (the top-level field pruned to that
leaf), and the leaves of a field are merged into one array of its type at each step.

Reads stream below page granularity (pylance writes pages of up to a million rows and tens
of megabytes): a mini-block page fetches and decodes only the chunks a step overlaps, a
full-zip page only the step's rows; the small buffers that locate them (chunk metadata,
repetition index, dictionary) are parsed once per page and kept while the page is being
read. Constant and blob-description pages, which are small, are decoded whole. Every step
fetches the bytes of all its columns with one coalesced `read_ranges` call and decodes the
columns in parallel, so a scan holds about one step of raw and decoded data per column.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import threading
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa

from quiver.format.errors import CorruptFileError, LanceError, UnsupportedFeatureError
from quiver.format.file.base import (
    DECODE_ERRORS,
    DEFAULT_BATCH_SIZE,
    DataFileReader,
    ListBytes,
    PageBreaks,
    check_read_args,
    checked_take_indices,
    column_map,
    split_ranges,
)
from quiver.format.file.container import ColumnInfo, V2Container
from quiver.format.file.parallel import run_plans
from quiver.format.file.v20 import random_access as ra
from quiver.format.file.v21 import planar
from quiver.format.file.v21 import unravel as uv
from quiver.format.file.v21.blob import decode_blob
from quiver.format.file.v21.constant import decode_constant
from quiver.format.file.v21.fullzip import decode_fullzip
from quiver.format.file.v21.list_bytes import PageShape, page_shape, take_list_bytes
from quiver.format.file.v21.miniblock import decode_miniblock
from quiver.format.file.v21.page import DecodedPage, PageWhere
from quiver.format.file.v21.steps import MiniBlockSteps
from quiver.format.file.v21.steps import prepare as prepare_steps
from quiver.format.file.v21.take import (
    MiniBlockIndex,
    miniblock_index,
    miniblock_small_ranges,
    plan_chunks,
    plan_fullzip,
    plan_fullzip_range,
)
from quiver.format.io.lru import ByteLRU
from quiver.format.io.store import FileReader
from quiver.format.proto import encodings_v2_1_pb2 as pb
from quiver.format.table.schema import LanceField

# Mini-block page indexes of takes kept across readers of a file: a take of a few rows from
# a file opened again (a search's answers) then costs one read, not two. Data files never change
# once written; keys hold the file's size beside its path.
PAGE_INDEXES: ByteLRU[MiniBlockIndex] = ByteLRU(16 << 20)
# Those of the small pages scans read (small tables': at most `_SCAN_INDEX_ROWS` rows and
# `_SCAN_INDEX_BYTES` of index), kept apart from the takes': a small table read again parses
# none of its pages' indexes again (a 3,000-row table of 67 columns in 3 fragments: 56-58
# against 60-70 ms a read), while a scan of a large table, whose pages are larger, leaves
# nothing behind to crowd the server's memory.
SCAN_PAGE_INDEXES: ByteLRU[MiniBlockIndex] = ByteLRU(4 << 20)
_SCAN_INDEX_ROWS = 8192
_SCAN_INDEX_BYTES = 16 << 10
# Takes of fewer rows decode their pages in the caller's thread (see `take`).
_PARALLEL_TAKE_ROWS = 1024
# So do read steps of fewer rows: an index's page of 4096 rows of two columns took 0.94 ms
# with its two plans handed to the pool, most of it waiting on the hand-off.
_PARALLEL_READ_ROWS = 8192
# Whole columns of fixed-width values, decoded once a file's column has served a few takes:
# a search's answers are a few rows of the same files again and again, and a take of
# decoded values costs an index, not a page's plan (ClickHouse keeps an uncompressed cache
# for such short queries). Keyed like the page indexes; at most `TAKEN_COLUMN_BYTES` each.
TAKEN_COLUMNS: ByteLRU[pa.Array] = ByteLRU(64 << 20)
TAKEN_COLUMN_BYTES = 16 << 20
_TAKES_BEFORE_KEEPING = 4
# Takes per column, the admission test of `TAKEN_COLUMNS` (a column is kept only if it has
# served more takes than the one it would push out, so takes spread over more columns than
# fit do not decode column after column); halved every `_TAKES_PER_AGE` takes.
_take_counts: dict[tuple, int] = {}
_TAKES_PER_AGE = 1 << 14
_counting = threading.Lock()
_counted = 0


def _count_takes(keys: list[tuple]) -> list[int]:
    """Count one take of each column `keys` names; their counts (aged, bounded)."""
    global _counted
    with _counting:
        _counted += 1
        if _counted >= _TAKES_PER_AGE or len(_take_counts) > 4 * _TAKES_PER_AGE:
            _counted = 0
            for key, n in list(_take_counts.items()):
                if n > 1:
                    _take_counts[key] = n // 2
                else:
                    del _take_counts[key]
        counts = []
        for key in keys:
            _take_counts[key] = n = _take_counts.get(key, 0) + 1
            counts.append(n)
        return counts


@dataclass(eq=False)
class _Column:
    """One leaf column: metadata, the leaf's path and the decoded-page cache."""

    info: ColumnInfo
    where: str
    path: list[LanceField]
    leaf_type: pa.DataType
    cache: dict[int, pa.Array] = field(default_factory=dict)  # small pages decoded whole
    indexes: dict[int, MiniBlockIndex] = field(default_factory=dict)  # mini-block pages
    # mini-block pages' prepared readers of runs of rows (None: not preparable)
    steps: dict[int, MiniBlockSteps | None] = field(default_factory=dict)
    shapes: list[PageShape | None] | None = None  # pages' `list_bytes.page_shape`, once asked

    @cached_property
    def starts(self) -> list[int]:
        """Page start rows (plus the end) as Python ints, for bisecting."""
        return self.info.page_starts.tolist()

    def forget_except(self, pages: Sequence[int], keep_indexes: int = 0) -> None:
        """Drop the decoded pages and page indexes of every page but `pages`; with
        `keep_indexes`, the indexes (and prepared readers) of up to that many other pages
        stay, the least recently used dropped first. Readers of shared index files run
        this from several threads at once: keys are copied before the walk and may already
        be gone."""
        for k in [k for k in list(self.cache) if k not in pages]:
            self.cache.pop(k, None)
        for held in (self.indexes, self.steps):
            others = [k for k in list(held) if k not in pages]
            for k in others[: max(0, len(others) - keep_indexes)]:
                held.pop(k, None)

    def pages_for(self, start: int, stop: int) -> list[int]:
        """Indices of the non-empty pages overlapping rows [start, stop)."""
        s = self.starts
        k = bisect.bisect_right(s, start) - 1
        out = []
        while 0 <= k < len(s) - 1 and s[k] < stop:
            if s[k + 1] > s[k]:
                out.append(k)
            k += 1
        return out


def kept_column(path: str, size: int, field: LanceField) -> pa.Array | None:
    """The whole decoded column of `field` in the data file `path` (as its readers name
    it) of `size` bytes, when takes have kept it in `TAKEN_COLUMNS`; None otherwise."""
    key = _kept_key(path, size, field)
    column = TAKEN_COLUMNS.get(key)
    if column is not None:
        _count_takes([key])
    return column


def forget_files(paths: Collection[str]) -> None:
    """Drop what the caches keep of these files (data and index files, as their readers
    name them): cleanup removed them, so nothing reads them again, and under steady
    compaction and index updates the dead files' columns would otherwise hold the caches'
    whole budget."""
    if paths:
        TAKEN_COLUMNS.drop_where(lambda key: key[0] in paths)  # type: ignore[index]
        PAGE_INDEXES.drop_where(lambda key: key[0] in paths)  # type: ignore[index]
        SCAN_PAGE_INDEXES.drop_where(lambda key: key[0] in paths)  # type: ignore[index]


def _kept_key(path: str, size: int, field: LanceField) -> tuple:
    return (path, size, field.id, field.logical_type)


def _fixed_width(field: LanceField) -> int | None:
    """Bytes per row of a field whose rows are fixed-width values (validity included), or
    None (lists, strings, structs, blobs)."""
    if field.children or field.is_blob:
        return None
    t = field.arrow_type
    if pa.types.is_dictionary(t) or isinstance(t, pa.ExtensionType):
        return None
    if pa.types.is_boolean(t):
        return 1
    try:
        return t.bit_width // 8 + 1
    except ValueError:  # variable width
        return None


class StructuralFileReader(DataFileReader):
    """Reads one Lance 2.1 / 2.2 data file as Arrow arrays of the fields' types.

    Its `page_breaks` let a scan end steps at page starts: a step across one decodes each
    page into an array of its own and stitches them, a copy of the step's column into fresh
    memory (over Flight SQL, `SELECT id, text` of the benchmark table stitched 150 of its
    254 MB; ending steps at the text's pages took 13 % off the query, 4 % off a Flight read
    of those columns, and left `SELECT *` as it was)."""

    def __init__(
        self,
        file: FileReader,
        fields: Sequence[int],
        column_indices: Sequence[int],
        *,
        path_for_errors: str,
        blob_descriptions: bool = True,
        kept_page_indexes: int = 0,
    ) -> None:
        self.path = path_for_errors
        self._file = file
        self.blob_descriptions = blob_descriptions
        # Reads of index files land at random places again and again (a MinHash band
        # table's pages): the indexes of up to this many pages per column a read moved past
        # stay for the next read instead of being parsed again.
        self.kept_page_indexes = kept_page_indexes
        self._container = V2Container(file, self.path)
        self.version = self._container.version
        if self.version not in ("2.1", "2.2", "2.3"):
            raise UnsupportedFeatureError(
                f"{self.path}: file version {self.version} is not read by the 2.1+ reader"
            )
        self._column_of = column_map(self.path, fields, column_indices, self._container.num_columns)
        self.num_rows = self._container.num_rows
        self._columns: dict[int, _Column] = {}
        self._list_bytes: dict[int, _Column | None] = {}  # `take_list_bytes`'s, by field id

    # -- public API ---------------------------------------------------------------------
    def read(
        self,
        fields: Sequence[LanceField],
        ranges: Sequence[tuple[int, int]],
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[list[pa.Array]]:
        """Stream `fields` over sorted, disjoint row ranges, one step per `split_ranges` item."""
        check_read_args(self.path, ranges, batch_size, self.num_rows)
        plan = self._plan(fields)
        cols = [c for _, leaves in plan for c in leaves]
        end = 0
        try:
            for start, stop in split_ranges(ranges, batch_size):
                end = stop
                owners, plans = [], []
                for i, col in enumerate(cols):
                    needed = col.pages_for(start, stop)
                    col.forget_except(needed, self.kept_page_indexes)
                    s = col.starts
                    for k in needed:
                        lo = s[k]
                        a, b = max(start, lo) - lo, min(stop, s[k + 1]) - lo
                        owners.append(i)
                        plans.append(self._range_plan(col, k, a, b))
                yield self._step(plan, cols, owners, plans, stop - start >= _PARALLEL_READ_ROWS)
        finally:
            # pages already passed go now; indexes of the page it stopped in stay for a
            # following read of the same reader (a scan's next step), until `close`
            for col in cols:
                col.forget_except(
                    col.pages_for(end - 1, end) if end else (), self.kept_page_indexes
                )

    def read_at_once(
        self, fields: Sequence[LanceField], ranges: Sequence[tuple[int, int]]
    ) -> list[pa.Array]:
        """`fields` over a few short, sorted, disjoint row `ranges`, back to back: the
        plans of every range's pages driven together, so the whole lookup is one round of
        reads and one pass of decoding (a MinHash search's band pages: one step per page
        cost a round and its bookkeeping each)."""
        most = max((b - a for a, b in ranges), default=1)
        check_read_args(self.path, ranges, max(1, most), self.num_rows)
        plan = self._plan(fields)
        cols = [c for _, leaves in plan for c in leaves]
        owners, plans = [], []
        try:
            for i, col in enumerate(cols):
                s = col.starts
                for start, stop in ranges:
                    for k in col.pages_for(start, stop):
                        lo = s[k]
                        a, b = max(start, lo) - lo, min(stop, s[k + 1]) - lo
                        owners.append(i)
                        plans.append(self._range_plan(col, k, a, b))
            return self._step(plan, cols, owners, plans, parallel=False)
        finally:
            for col in cols:
                col.forget_except((), self.kept_page_indexes)

    def _step(
        self,
        plan: list[tuple[LanceField, list[_Column]]],
        cols: list[_Column],
        owners: list[int],
        plans: list[ra.Plan],
        parallel: bool = True,
    ) -> list[pa.Array]:
        """One step's arrays, from the plans of its columns' pages (owners[i]: the column
        of plans[i]), decoded on the pool when `parallel`. Its own frame, so the pages'
        pieces are gone before the next step is read: a generator's locals live across its
        `yield`."""
        results = run_plans(plans, self._container.read_ranges, parallel=parallel)
        pieces: list[list[pa.Array]] = [[] for _ in cols]
        for i, arr in zip(owners, results, strict=True):
            pieces[i].append(arr)
        return self._merge(plan, [_concat(p, c) for p, c in zip(pieces, cols, strict=True)])

    def page_breaks(self, fields: Sequence[LanceField]) -> list[PageBreaks]:
        """Page starts (in rows: 2.1+ pages hold whole rows, lists included) of every leaf
        column `fields` read, with its stored bytes per row."""
        if not self.num_rows:
            return []
        out = []
        for _, leaves in self._plan(fields):
            for col in leaves:
                out.append(PageBreaks(col.info.page_starts, col.info.stored_bytes / self.num_rows))
        return out

    def take(self, fields: Sequence[LanceField], indices: np.ndarray) -> list[pa.Array]:
        """The rows at sorted, unique physical offsets `indices` (uint64), one array per field."""
        idx = checked_take_indices(self.path, indices, self.num_rows)
        if len(idx) < _PARALLEL_TAKE_ROWS:
            kept = self._taken_columns(fields)
            if kept is not None:
                positions = pa.array(idx)
                return [column.take(positions) for column in kept]
        plan = self._plan(fields)
        cols = [c for _, leaves in plan for c in leaves]
        plans, owners = [], []
        for i, col in enumerate(cols):
            ps = col.info.page_starts
            page_of = ps.searchsorted(idx, side="right") - 1
            # idx is sorted: each page's rows are one run of it
            cuts = [0, *(np.flatnonzero(page_of[1:] != page_of[:-1]) + 1).tolist(), len(idx)]
            for a, b in itertools.pairwise(cuts):
                k = int(page_of[a])
                plans.append(self._take_plan(col, k, idx[a:b] - int(ps[k])))
                owners.append(i)
        # a few rows decode in less time than handing their plans to the pool costs
        parallel = len(idx) >= _PARALLEL_TAKE_ROWS
        results = run_plans(plans, self._container.read_ranges, parallel=parallel)
        pieces: list[list[pa.Array]] = [[] for _ in cols]
        for i, arr in zip(owners, results, strict=True):
            pieces[i].append(arr)
        return self._merge(plan, [_concat(p, c) for p, c in zip(pieces, cols, strict=True)])

    def take_list_bytes(self, field: LanceField, indices: np.ndarray) -> ListBytes | None:
        """Rows at sorted, unique `indices` of a list-of-binary `field` as flat bytes
        (`list_bytes.take_list_bytes`: an index's posting lists); None when the field is
        not one, or is stored in pages that lean take does not read."""
        idx = checked_take_indices(self.path, indices, self.num_rows)
        if field.id not in self._list_bytes:
            self._list_bytes[field.id] = self._list_bytes_column(field)
        col = self._list_bytes[field.id]
        if col is None or not len(idx):
            return None
        with self._guard(col.where):
            if col.shapes is None:
                col.shapes = [
                    page_shape(self._layout(col, k), list(page.buffers), page.length)
                    for k, page in enumerate(col.info.pages)
                ]
            return take_list_bytes(
                col.shapes, col.info.page_starts, idx, self._container.read_ranges, self.path
            )

    def _list_bytes_column(self, field: LanceField) -> _Column | None:
        """The one leaf column of a list-of-binary `field`, which `take_list_bytes` may
        read lean; None for any other field."""
        binary = (pa.types.is_binary, pa.types.is_large_binary)
        if (
            self.version == "2.3"
            or field.logical_type not in ("list", "large_list")
            or len(field.children) != 1
            or field.children[0].children
            or not any(test(field.children[0].arrow_type) for test in binary)
        ):
            return None
        ((_, cols),) = self._plan([field])
        return cols[0] if len(cols) == 1 else None

    def _taken_columns(self, fields: Sequence[LanceField]) -> list[pa.Array] | None:
        """The whole decoded columns of `fields` when every one is a fixed-width leaf
        small enough to keep: from `TAKEN_COLUMNS`, or read now once they have served
        `_TAKES_BEFORE_KEEPING` takes; None otherwise (the take reads pages)."""
        if not self.num_rows:
            return None
        keys, sizes = [], []
        for f in fields:
            width = _fixed_width(f)
            if width is None or width * self.num_rows > TAKEN_COLUMN_BYTES:
                return None
            keys.append(_kept_key(self.path, self._file.size, f))
            sizes.append(width * self.num_rows)
        kept = [TAKEN_COLUMNS.get(k) for k in keys]
        counts = _count_takes(keys)
        if all(c is not None for c in kept):
            return kept  # type: ignore[return-value]
        if min(counts) < _TAKES_BEFORE_KEEPING:
            return None
        for n, size, column in zip(counts, sizes, kept, strict=True):
            if column is not None:
                continue
            victim = TAKEN_COLUMNS.first_dropped(size)
            if victim is not None and _take_counts.get(victim, 0) >= n:
                return None  # worth no more than what it would push out: read pages
        steps = list(self.read(fields, [(0, self.num_rows)], max(1, self.num_rows)))
        columns = [pa.concat_arrays([s[i] for s in steps]) for i in range(len(fields))]
        for key, column in zip(keys, columns, strict=True):
            TAKEN_COLUMNS.put(key, column, column.nbytes)
        return columns

    def close(self) -> None:
        """Drop cached pages and release the file handle."""
        for col in self._columns.values():
            col.forget_except(())
        self._file.close()

    # -- planning -----------------------------------------------------------------------
    def _plan(self, fields: Sequence[LanceField]) -> list[tuple[LanceField, list[_Column]]]:
        """Per field, its leaf columns in `leaf_paths` order (metadata fetched at once)."""
        paths = [(f, uv.leaf_paths(f)) for f in fields]
        wanted = []
        for f, leaves in paths:
            for p in leaves:
                leaf = p[-1]
                col = self._column_of.get(leaf.id)
                if col is None:
                    raise CorruptFileError(
                        self.path,
                        f"field {leaf.name!r} (id {leaf.id}) of {f.name!r} has no column here",
                    )
                wanted.append(col)
        missing = [c for c in dict.fromkeys(wanted) if c not in self._columns]
        infos = {info.index: info for info in self._container.columns(missing)}
        out = []
        it = iter(wanted)
        for f, leaves in paths:
            cols = []
            for p in leaves:
                c = next(it)
                leaf = p[-1]
                leaf_type = leaf.arrow_type
                if leaf.is_blob and self.blob_descriptions:
                    leaf_type = leaf.blob_description
                elif leaf.is_blob_v2:
                    raise UnsupportedFeatureError(
                        f"{self.path}: field {leaf.name!r}: reading blob v2 bytes (not their "
                        "descriptions)"
                    )
                col = self._columns.get(c)
                if col is None or col.path != p or col.leaf_type != leaf_type:
                    info = infos[c] if c in infos else self._columns[c].info
                    col = _Column(
                        info, f"column {c} (field {leaf.name!r}, id {leaf.id})", p, leaf_type
                    )
                    if info.num_rows != self.num_rows:
                        raise CorruptFileError(
                            self.path,
                            f"{col.where} has {info.num_rows} rows, the file has {self.num_rows}",
                        )
                    self._columns[c] = col
                cols.append(col)
            out.append((f, cols))
        return out

    def _merge(
        self, plan: list[tuple[LanceField, list[_Column]]], pieces: list[pa.Array]
    ) -> list[pa.Array]:
        out, pos = [], 0
        for f, cols in plan:
            arrays = pieces[pos : pos + len(cols)]
            pos += len(cols)
            with self._guard(f"field {f.name!r}"):
                out.append(uv.merge(f, arrays, self.path))
        return out

    # -- pages --------------------------------------------------------------------------
    def _layout(self, col: _Column, k: int) -> pb.PageLayout:
        if self.version == "2.3":  # planar pages, as their 2.2 equivalent where one exists
            where = PageWhere(self.path, f"{col.where} page {k}")
            return planar.page_layout(self._container, col.info.pages[k], where)
        return self._container.page_message(
            col.info.pages[k], pb.PageLayout, f"{col.where} page {k}", "2.1/2.2 page-layout reader"
        )

    def _decode_layout(
        self, layout: pb.PageLayout, bufs: list[bytes | memoryview], rows: int, where: PageWhere
    ) -> DecodedPage:
        kind = layout.WhichOneof("layout")
        if kind == "mini_block_layout":
            self._check_chunk_grammar(layout.mini_block_layout, where)
            return decode_miniblock(layout.mini_block_layout, bufs, rows, where)
        if kind == "full_zip_layout":
            self._check_fullzip_grammar(layout.full_zip_layout, where)
            return decode_fullzip(layout.full_zip_layout, bufs, rows, where)
        if kind == "constant_layout":
            return decode_constant(layout.constant_layout, bufs, rows, where)
        if kind == "blob_layout":
            if not self.blob_descriptions:
                raise UnsupportedFeatureError(
                    f"{self.path}: {where.page}: reading 2.1 blob bytes (not descriptions)"
                )
            return decode_blob(layout.blob_layout, bufs, rows, where, self._decode_layout)
        name = kind or "unknown (empty or newer)"
        raise UnsupportedFeatureError(
            f"{self.path}: {where.page}: page layout {name} is not supported by this reader"
        )

    def _check_chunk_grammar(self, ml: pb.MiniBlockLayout, where: PageWhere) -> None:
        """2.1 chunks use u16 sizes, 2.2 chunks u32 ("large chunks"); nothing else is valid."""
        if ml.has_large_chunk != (self.version != "2.1"):
            raise where.corrupt(
                f"has_large_chunk={ml.has_large_chunk} is not valid in a {self.version} file"
            )

    def _check_fullzip_grammar(self, fz: pb.FullZipLayout, where: PageWhere) -> None:
        """VariablePackedStruct values (packed structs with variable-width fields, blob v2
        descriptions) are 2.2+ only."""
        enc = fz.value_compression.WhichOneof("compression")
        if self.version == "2.1" and enc == "variable_packed_struct":
            raise where.corrupt("VariablePackedStruct is not part of the Lance 2.1 grammar")

    @contextlib.contextmanager
    def _guard(self, where: str) -> Iterator[None]:
        """Turn unexpected decoding failures (Arrow, numpy) into CorruptFileError."""
        try:
            yield
        except LanceError:
            raise
        except DECODE_ERRORS as e:
            raise CorruptFileError(self.path, f"{where}: {e}") from None

    def _page_index(
        self, col: _Column, k: int, ml: pb.MiniBlockLayout, where: PageWhere, share: bool = False
    ):
        """A plan step returning page k's mini-block index (fetched and parsed on first use;
        with `share`, kept for later readers too: takes of a few rows; without, kept apart
        when it is small: scans, whose large pages' indexes would only crowd the cache and
        the memory budget)."""
        index = col.indexes.get(k)
        if index is not None and self.kept_page_indexes:  # most recently used last
            col.indexes[k] = col.indexes.pop(k, index)
        if index is None:
            key = (self.path, self._file.size, col.info.index, k)
            index = PAGE_INDEXES.get(key)
            if index is None and not share:
                index = SCAN_PAGE_INDEXES.get(key)
            if index is None:
                page = col.info.pages[k]
                small = yield miniblock_small_ranges(ml, page.buffers, where)
                index = miniblock_index(ml, page.buffers, page.length, small, where)
                if share:
                    PAGE_INDEXES.put(key, index, index.nbytes)
                elif page.length <= _SCAN_INDEX_ROWS and index.nbytes <= _SCAN_INDEX_BYTES:
                    SCAN_PAGE_INDEXES.put(key, index, index.nbytes)
            col.indexes[k] = index
        return index

    def _range_plan(self, col: _Column, k: int, lo: int, hi: int) -> ra.Plan:
        """Local rows [lo, hi) of page k as a path array, fetching only what they need: by
        the page's prepared reader of runs of rows where it has one (`steps`)."""
        steps = col.steps.get(k)
        if steps is None and k not in col.steps:
            steps = yield from self._prepare_steps(col, k)
            col.steps[k] = steps
        elif self.kept_page_indexes:  # most recently used last (`forget_except`)
            col.steps[k] = col.steps.pop(k, steps)
        if steps is not None:
            return (yield from steps.plan(lo, hi))
        return (yield from self._page_plan(col, k, (lo, hi)))

    def _prepare_steps(self, col: _Column, k: int) -> ra.Plan:
        """Page k's prepared reader of runs of rows (its index fetched first), or None."""
        where = PageWhere(self.path, f"{col.where} page {k}")
        with self._guard(where.page):
            layout = self._layout(col, k)
            if layout.WhichOneof("layout") != "mini_block_layout":
                return None
            ml = layout.mini_block_layout
            self._check_chunk_grammar(ml, where)
            index = yield from self._page_index(col, k, ml, where)
            return prepare_steps(ml, index, col.path, col.leaf_type, where)

    def _take_plan(self, col: _Column, k: int, rows: np.ndarray) -> ra.Plan:
        """Rows `rows` (local, sorted) of page k as a path array."""
        return self._page_plan(col, k, rows)

    def _page_plan(self, col: _Column, k: int, rows: np.ndarray | tuple[int, int]) -> ra.Plan:
        """Rows of page k (sorted local rows, or a range) as a path array, reading only their
        chunks (mini-block) or bytes (full-zip); other layouts are decoded whole and kept."""
        where = PageWhere(self.path, f"{col.where} page {k}")
        page = col.info.pages[k]
        span = isinstance(rows, tuple)
        wanted = rows[1] - rows[0] if span else len(rows)
        with self._guard(where.page):
            layout = self._layout(col, k)
            kind = layout.WhichOneof("layout")
            if kind == "mini_block_layout":
                ml = layout.mini_block_layout
                self._check_chunk_grammar(ml, where)
                index = yield from self._page_index(col, k, ml, where, share=not span)
                decoded, pos = yield from plan_chunks(ml, index, rows, where)
            elif kind == "full_zip_layout":
                fz = layout.full_zip_layout
                self._check_fullzip_grammar(fz, where)
                if span:
                    decoded, pos = yield from plan_fullzip_range(
                        fz, page.buffers, page.length, rows[0], rows[1], where
                    )
                else:
                    decoded, pos = yield from plan_fullzip(
                        fz, page.buffers, page.length, rows, where
                    )
            else:
                arr = col.cache.get(k)
                if arr is None:
                    bufs = yield list(page.buffers)
                    if isinstance(layout, planar.SparsePage):
                        arr = planar.sparse_path_array(
                            layout, list(bufs), page.length, col.path, col.leaf_type, where
                        )
                    else:
                        decoded = self._decode_layout(layout, list(bufs), page.length, where)
                        arr = uv.unravel(decoded, col.path, col.leaf_type, where)
                    col.cache[k] = arr
                out = arr.slice(rows[0], wanted) if span else arr.take(pa.array(rows))
                if len(out) != wanted:
                    raise where.corrupt(f"{len(out)} rows decoded for {wanted} wanted")
                return out
            arr = uv.unravel(decoded, col.path, col.leaf_type, where)
            if pos is None:
                out = arr
            elif isinstance(pos, slice):
                out = arr.slice(pos.start, pos.stop - pos.start)
            else:
                out = arr.take(pa.array(pos))
            if len(out) != wanted:
                raise where.corrupt(f"{len(out)} rows decoded for {wanted} wanted")
            return out


def _concat(parts: list[pa.Array], col: _Column) -> pa.Array:
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return pa.array([], type=uv.path_type(col.path, col.leaf_type))
    return pa.concat_arrays(parts)
