"""Random access into 2.1+ pages: decode only the chunks / rows that hold the wanted rows.

Mini-block pages: the chunk metadata (and, with lists, the repetition index) says which
chunks hold which rows; only those chunks are fetched and decoded. A repetition index
entry ``(rows_completed, leftover_items)`` per chunk tells where rows end: row r ends in the
first chunk whose cumulative `rows_completed` exceeds r, and starts in the chunk where row
r - 1 ended unless that row ended exactly at the chunk's end (then in the next one).

Full-zip pages: fixed-width values without lists sit at a fixed stride; otherwise the
repetition index gives each row's byte span. Only the wanted rows' bytes are fetched.

Plans are generators (see `format.file.v20.random_access`): they yield file ranges, are sent
the bytes, and return ``(DecodedPage, positions)``: the decoded rows and where each wanted
row sits among them (None: exactly the wanted rows, in order).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from quiver.format.file.v20 import random_access as ra
from quiver.format.file.v21 import compression as cz
from quiver.format.file.v21.fullzip import control_width, decode_rows
from quiver.format.file.v21.gather import I64
from quiver.format.file.v21.layers import max_rep, max_visible_def, parse_layers
from quiver.format.file.v21.miniblock import (
    check_levels,
    chunk_sizes,
    decode_table,
    dictionary_items,
    parse_headers,
)
from quiver.format.file.v21.page import DecodedPage, PageWhere
from quiver.format.numeric import unique_sorted
from quiver.format.proto import encodings_v2_1_pb2 as pb

Result = tuple[DecodedPage, np.ndarray | None]
TakePlan = Generator[list[tuple[int, int]], list, Result]


def _row_chunks(
    cum: np.ndarray, leftover: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """First and last chunk holding each row, from the repetition index."""
    last = np.searchsorted(cum, rows, side="right")
    prev_end = np.searchsorted(cum, np.maximum(rows - 1, 0), side="right")
    starts_there = (cum[prev_end] > rows) | (leftover[prev_end] > 0)
    first = np.where(rows == 0, 0, np.where(starts_there, prev_end, prev_end + 1))
    return first, last


@dataclass
class MiniBlockIndex:
    """What a mini-block page's small buffers say, parsed once per page and reused by every
    read of it: where each chunk sits, how many values and rows it holds, the dictionary."""

    layers: list
    sizes: np.ndarray  # chunk byte sizes
    counts: np.ndarray  # values per chunk
    byte_starts: np.ndarray  # chunk starts inside the data buffer
    data_pos: int  # file position of the data buffer
    cum: np.ndarray  # rows completed by the end of each chunk (cumulative)
    leftover: np.ndarray | None  # repetition index: items of a row left open at chunk end
    dictionary: pa.Array | None
    num_rows: int

    @property
    def nbytes(self) -> int:
        """Memory the index holds (the dictionary included)."""
        arrays = (self.sizes, self.counts, self.byte_starts, self.cum, self.leftover)
        held = sum(a.nbytes for a in arrays if a is not None)
        return held + (self.dictionary.nbytes if self.dictionary is not None else 0)


def miniblock_small_ranges(
    layout: pb.MiniBlockLayout, buffers: Sequence[tuple[int, int]], where: PageWhere
) -> list[tuple[int, int]]:
    """File ranges of the page's small buffers: chunk metadata, dictionary, repetition index."""
    has_dict = layout.HasField("dictionary")
    depth = int(layout.repetition_index_depth)
    if depth not in (0, 1):
        raise where.corrupt(f"repetition index depth {depth}")
    need = 2 + has_dict + (depth > 0)
    if len(buffers) < need:
        raise where.corrupt(f"mini-block page has {len(buffers)} buffers, needs {need}")
    return (
        [buffers[0]]
        + ([buffers[2]] if has_dict else [])
        + ([buffers[2 + has_dict]] if depth else [])
    )


def miniblock_index(
    layout: pb.MiniBlockLayout,
    buffers: Sequence[tuple[int, int]],
    num_rows: int,
    small: Sequence[bytes | memoryview],
    where: PageWhere,
) -> MiniBlockIndex:
    """Parse the small buffers (`miniblock_small_ranges`, in that order) into an index."""
    layers = parse_layers(layout.layers, where.full)
    has_dict = layout.HasField("dictionary")
    depth = int(layout.repetition_index_depth)
    sizes, counts = chunk_sizes(
        small[0], bool(layout.has_large_chunk), int(layout.num_items), where
    )
    n_chunks = len(sizes)
    byte_starts = np.cumsum(sizes) - sizes
    data_pos, data_size = buffers[1]
    if n_chunks and int(byte_starts[-1] + sizes[-1]) > data_size:
        raise where.corrupt(
            f"chunks need {int(byte_starts[-1] + sizes[-1])} bytes, the data buffer has {data_size}"
        )
    dictionary = dictionary_items(layout, small[1], where) if has_dict else None
    leftover = None
    if depth:
        ri = small[-1]
        if len(ri) != 16 * n_chunks:
            raise where.corrupt(f"repetition index of {len(ri)} bytes for {n_chunks} chunks")
        pairs = np.frombuffer(ri, dtype="<u8").reshape(n_chunks, 2).astype(I64)
        cum, leftover = np.cumsum(pairs[:, 0]), pairs[:, 1]
        if n_chunks and int(cum[-1]) != num_rows:
            raise where.corrupt(
                f"repetition index counts {int(cum[-1])} rows, the page has {num_rows}"
            )
    elif max_rep(layers):
        raise where.corrupt("mini-block page with lists but no repetition index")
    else:
        cum = np.cumsum(counts)
        if n_chunks and int(cum[-1]) != num_rows:
            raise where.corrupt(f"chunks hold {int(cum[-1])} values for {num_rows} rows")
    return MiniBlockIndex(
        layers, sizes, counts, byte_starts, data_pos, cum, leftover, dictionary, num_rows
    )


def plan_miniblock(
    layout: pb.MiniBlockLayout,
    buffers: Sequence[tuple[int, int]],
    num_rows: int,
    rows: np.ndarray,
    where: PageWhere,
) -> TakePlan:
    """Fetch and decode only the chunks holding `rows` (sorted local rows) of a page."""
    small = yield miniblock_small_ranges(layout, buffers, where)
    index = miniblock_index(layout, buffers, num_rows, small, where)
    return (yield from plan_chunks(layout, index, rows, where))


def plan_chunks(
    layout: pb.MiniBlockLayout,
    index: MiniBlockIndex,
    rows: np.ndarray | tuple[int, int],
    where: PageWhere,
) -> Generator[list[tuple[int, int]], list, tuple[DecodedPage, np.ndarray | slice]]:
    """Fetch and decode only the chunks holding `rows` of a page: sorted local rows, or a
    range (first, end) of them. Returns the decoded runs of chunks and where the wanted rows
    sit in them (a slice for a range)."""
    span = isinstance(rows, tuple)
    if span:
        lo, hi = rows
        if not 0 <= lo < hi <= index.num_rows:
            raise where.corrupt(f"rows [{lo}, {hi}) wanted of a page of {index.num_rows}")
        ends = np.array([lo, hi - 1], dtype=I64)
    else:
        ends = rows
    cum, leftover, layers = index.cum, index.leftover, index.layers
    r_max = max_rep(layers)
    if r_max == 0 and not span:
        return (yield from _plan_values(layout, index, rows, where))
    if leftover is not None:
        first, last = _row_chunks(cum, leftover, ends)
        if span:
            sel = np.arange(int(first[0]), int(last[1]) + 1, dtype=I64)
        else:
            sel = unique_sorted(ra.range_indices(first, last + 1))
    elif span:
        a, b = np.searchsorted(cum, ends, side="right")
        sel = np.arange(int(a), int(b) + 1, dtype=I64)
    else:
        sel = unique_sorted(np.searchsorted(cum, rows, side="right"))
    n_chunks, sizes, counts = len(index.sizes), index.sizes, index.counts
    if len(sel) and int(sel[-1]) >= n_chunks:
        raise where.corrupt("wanted rows lie beyond the page's chunks")
    first_byte = index.data_pos + index.byte_starts[sel]
    data = yield from ra.fetch_spans(first_byte, first_byte + sizes[sel])
    arr = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    sub_sizes = sizes[sel]
    large = bool(layout.has_large_chunk)
    table = parse_headers(
        layout, arr, np.cumsum(sub_sizes) - sub_sizes, sub_sizes, counts[sel], large, where
    )
    # Runs of consecutive chunks; each holds whole rows plus maybe the tail of a row that
    # began before it and the head of one that continues after it (both dropped).
    brk = np.flatnonzero(np.diff(sel) != 1) + 1
    run_first = np.concatenate(([0], brk)).astype(I64)
    run_last = (np.concatenate((brk, [len(sel)])) - 1).astype(I64)
    a, b = sel[run_first], sel[run_last]
    rep, defs, values = decode_table(layout, table, where)
    check_levels(layers, rep, defs, where)
    if rep is None:
        first_row = np.where(a > 0, cum[a - 1], 0)
        val_end = np.cumsum(table.counts)
        run_rows = val_end[run_last] - (val_end - table.counts)[run_first]
        page = DecodedPage(layers, len(values), None, defs, values, index.dictionary)
    else:
        lvl_end = np.cumsum(table.levels)
        e0, e1 = (lvl_end - table.levels)[run_first], lvl_end[run_last]
        starts = np.flatnonzero(rep == r_max)
        carried = (a > 0) & (leftover[np.maximum(a - 1, 0)] > 0)
        nxt = np.searchsorted(starts, e0)
        lo_lvl = np.where(carried, np.minimum(np.append(starts, e1.max(initial=0))[nxt], e1), e0)
        head = rep[np.minimum(e0, len(rep) - 1)] if len(rep) else np.full(len(e0), r_max)
        bad = ~carried & (e1 > e0) & (head != r_max)
        if bad.any():
            raise where.corrupt("a chunk does not start a row though the repetition index says so")
        prv = np.searchsorted(starts, e1) - 1
        last_start = np.where(prv >= 0, starts[np.maximum(prv, 0)], -1)
        hi_lvl = np.where(leftover[b] > 0, np.maximum(lo_lvl, last_start), e1)
        keep = np.zeros(len(rep), dtype=bool)
        keep[ra.range_indices(lo_lvl, hi_lvl)] = True
        vis = np.ones(len(rep), dtype=bool) if defs is None else defs <= max_visible_def(layers)
        keep_vals = keep[vis]
        first_row = np.where(a > 0, cum[np.maximum(a - 1, 0)], 0) + carried
        run_rows = np.searchsorted(starts, hi_lvl) - np.searchsorted(starts, lo_lvl)
        page = DecodedPage(
            layers,
            int(run_rows.sum()),
            rep[keep],
            None if defs is None else defs[keep],
            values if keep_vals.all() else values.filter(pa.array(keep_vals)),
            index.dictionary,
        )
    if span:
        if int(first_row[0]) > lo or int(first_row[0] + run_rows[0]) < hi:
            raise where.corrupt("the repetition index does not cover the wanted rows")
        pos: slice | np.ndarray = slice(lo - int(first_row[0]), hi - int(first_row[0]))
    else:
        pos = _positions(rows, first_row, run_rows, where)
    return page, pos


def _plan_values(
    layout: pb.MiniBlockLayout, index: MiniBlockIndex, rows: np.ndarray, where: PageWhere
) -> Generator[list[tuple[int, int]], list, tuple[DecodedPage, slice]]:
    """`plan_chunks` for pages without lists (one value per row), where a take of a few rows
    is mostly fixed costs: fetch the chunks holding `rows`, decode only the wanted values
    where the codec can (FSST strings), and make no more than those logical (a dictionary
    lookup, string checks)."""
    cum, counts = index.cum, index.counts
    chunk = cum.searchsorted(rows, side="right")
    if len(chunk) and int(chunk[-1]) >= len(counts):
        raise where.corrupt("wanted rows lie beyond the page's chunks")
    first = np.empty(len(chunk), dtype=bool)  # rows sorted: each chunk's first wanted row
    first[:1] = True
    np.not_equal(chunk[1:], chunk[:-1], out=first[1:])
    sel = chunk[first]
    sub_sizes, sub_counts = index.sizes[sel], counts[sel]
    first_byte = index.data_pos + index.byte_starts[sel]
    data = yield from ra.fetch_spans(first_byte, first_byte + sub_sizes)
    arr = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    large = bool(layout.has_large_chunk)
    byte_ends, value_ends = sub_sizes.cumsum(), sub_counts.cumsum()
    table = parse_headers(layout, arr, byte_ends - sub_sizes, sub_sizes, sub_counts, large, where)
    k = first.cumsum() - 1  # each row's chunk among those fetched
    chunk_first_row = np.where(sel > 0, cum[np.maximum(sel - 1, 0)], 0)
    offset = rows - chunk_first_row[k]
    if (offset < 0).any() or (offset >= sub_counts[k]).any():
        raise where.corrupt("the chunks' value counts do not cover the wanted rows")
    pos = (value_ends - sub_counts)[k] + offset
    rep, defs, values = decode_table(layout, table, where, select=pos)
    check_levels(index.layers, rep, defs, where)
    defs = None if defs is None else defs[pos]
    page = DecodedPage(index.layers, len(pos), None, defs, values, index.dictionary)
    return page, slice(0, len(pos))


def _positions(
    rows: np.ndarray, first_row: np.ndarray, run_rows: np.ndarray, where: PageWhere
) -> np.ndarray:
    """Where sorted page rows `rows` sit among the rows of the decoded runs of chunks (run i
    holds `run_rows[i]` rows from page row `first_row[i]`)."""
    run = np.searchsorted(first_row, rows, side="right") - 1
    offset_in_run = rows - first_row[run]
    if (run < 0).any() or (offset_in_run >= run_rows[run]).any():
        raise where.corrupt("the repetition index does not cover the wanted rows")
    base = np.cumsum(run_rows) - run_rows
    return base[run] + offset_in_run


@dataclass(frozen=True)
class _FullZipPage:
    """Where a full-zip page's rows are: a fixed stride, or a repetition index."""

    layers: list
    data_pos: int
    data_size: int
    stride: int | None  # bytes per row when every row has the same size
    index: tuple[int, int] | None  # (file position, entry width) of the repetition index


def _fullzip_page(
    layout: pb.FullZipLayout, buffers: Sequence[tuple[int, int]], num_rows: int, where: PageWhere
) -> _FullZipPage:
    """Check a full-zip page's buffers against its layout and say where its rows are."""
    layers = parse_layers(layout.layers, where.full)
    if not buffers:
        raise where.corrupt("full-zip page has no buffers")
    details = layout.WhichOneof("details")
    if details is None:
        raise where.corrupt("full-zip page has neither bits_per_value nor bits_per_offset")
    data_pos, data_size = buffers[0]
    if details == "bits_per_value" and not max_rep(layers):
        bits = int(layout.bits_per_value)
        stride = control_width(layout) + bits // 8
        if bits % 8 or stride * num_rows != data_size:
            raise where.corrupt(f"{data_size} bytes for {num_rows} rows of {bits}-bit values")
        return _FullZipPage(layers, data_pos, data_size, stride, None)
    if len(buffers) < 2:
        raise where.corrupt("full-zip page without its repetition index")
    ri_pos, ri_size = buffers[1]
    n = num_rows + 1
    width = ri_size // n if ri_size % n == 0 else 0
    if width not in (1, 2, 4, 8):
        raise where.corrupt(f"repetition index of {ri_size} bytes for {num_rows} rows")
    return _FullZipPage(layers, data_pos, data_size, None, (ri_pos, width))


def _fixed_rows(
    layout: pb.FullZipLayout, page: _FullZipPage, data: object, n: int, where: PageWhere
) -> Result:
    """Decode `n` fixed-stride rows fetched back to back."""
    arr = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    if control_width(layout) == 0:
        values = cz.decode_fullzip_fixed(layout.value_compression, arr, n, where.full)
        return DecodedPage(page.layers, n, None, None, values), None
    local = np.arange(n, dtype=I64) * page.stride
    return decode_rows(layout, arr, local, local + page.stride, n, where), None


def _indexed_rows(
    layout: pb.FullZipLayout,
    page: _FullZipPage,
    data: object,
    starts: np.ndarray,
    ends: np.ndarray,
    where: PageWhere,
) -> Result:
    """Decode rows whose byte spans [starts, ends) (checked before fetching) were fetched
    back to back."""
    arr = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    lens = ends - starts
    local = np.cumsum(lens) - lens
    return decode_rows(layout, arr, local, local + lens, len(starts), where), None


def plan_fullzip(
    layout: pb.FullZipLayout,
    buffers: Sequence[tuple[int, int]],
    num_rows: int,
    rows: np.ndarray,
    where: PageWhere,
) -> TakePlan:
    """Fetch and decode only the bytes of `rows` (sorted local rows) of a full-zip page."""
    page = _fullzip_page(layout, buffers, num_rows, where)
    if page.stride is not None:
        starts = page.data_pos + rows * page.stride
        data = yield from ra.fetch_spans(starts, starts + page.stride)
        return _fixed_rows(layout, page, data, len(rows), where)
    ri_pos, width = page.index
    raw = yield from ra.fetch_spans(ri_pos + rows * width, ri_pos + (rows + 2) * width)
    pairs = np.frombuffer(raw, dtype=f"<u{width}").astype(I64).reshape(len(rows), 2)
    s, e = pairs[:, 0], pairs[:, 1]
    if (e < s).any() or (e > page.data_size).any():
        raise where.corrupt("repetition index offsets are out of order or out of bounds")
    data = yield from ra.fetch_spans(page.data_pos + s, page.data_pos + e)
    return _indexed_rows(layout, page, data, s, e, where)


def plan_fullzip_range(
    layout: pb.FullZipLayout,
    buffers: Sequence[tuple[int, int]],
    num_rows: int,
    lo: int,
    hi: int,
    where: PageWhere,
) -> TakePlan:
    """Fetch and decode rows [lo, hi) of a full-zip page: one span of the repetition index
    (when rows vary in size), then one span of the zipped data."""
    if not 0 <= lo < hi <= num_rows:
        raise where.corrupt(f"rows [{lo}, {hi}) wanted of a page of {num_rows}")
    page = _fullzip_page(layout, buffers, num_rows, where)
    if page.stride is not None:
        (data,) = yield [(page.data_pos + lo * page.stride, (hi - lo) * page.stride)]
        return _fixed_rows(layout, page, data, hi - lo, where)
    ri_pos, width = page.index
    (raw,) = yield [(ri_pos + lo * width, (hi - lo + 1) * width)]
    offs = np.frombuffer(raw, dtype=f"<u{width}").astype(I64)
    if (np.diff(offs) < 0).any() or offs[-1] > page.data_size:
        raise where.corrupt("repetition index offsets are out of order or out of bounds")
    first = int(offs[0])
    (data,) = yield [(page.data_pos + first, int(offs[-1]) - first)]
    return _indexed_rows(layout, page, data, offs[:-1] - first, offs[1:] - first, where)
