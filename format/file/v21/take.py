"""Random access into 2.1+ pages: decode only the chunks / rows that hold the wanted rows.

Mini-block pages: the chunk metadata (and, with lists, the repetition index) says which
chunks hold which rows; only those chunks are fetched and decoded. A repetition index
entry ``(rows_completed, leftover_items)`` per chunk tells where rows end: row r ends in the
first chunk whose cumulative `rows_completed` exceeds r, and starts in the chunk where row
r - 1 ended unless that row ended exactly at the chunk's end (then in the next one).

Full-zip pages: fixed-width values without lists sit at a fixed stride; otherwise the
repetition index gives each row's byte span. Only the wanted rows' bytes are fetched.

Plans are generators (see `format.file.v2.random_access`): they yield file ranges, are sent
the bytes, and return ``[(first_row, DecodedPage)]`` runs (first_row None: exactly the
wanted rows, in order).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import numpy as np

from format.file.v2 import random_access as ra
from format.file.v21 import compression as cz
from format.file.v21.fullzip import control_width, decode_rows
from format.file.v21.gather import I64
from format.file.v21.layers import max_rep, max_visible_def, parse_layers
from format.file.v21.miniblock import (
    check_levels,
    chunk_sizes,
    decode_table,
    dictionary_items,
    parse_headers,
)
from format.file.v21.page import DecodedPage, PageWhere
from format.proto import encodings_v2_1_pb2 as pb

Runs = list[tuple[int | None, DecodedPage]]
TakePlan = Generator[list[tuple[int, int]], list, Runs]


def _row_chunks(
    cum: np.ndarray, leftover: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """First and last chunk holding each row, from the repetition index."""
    last = np.searchsorted(cum, rows, side="right")
    prev_end = np.searchsorted(cum, np.maximum(rows - 1, 0), side="right")
    starts_there = (cum[prev_end] > rows) | (leftover[prev_end] > 0)
    first = np.where(rows == 0, 0, np.where(starts_there, prev_end, prev_end + 1))
    return first, last


def plan_miniblock(
    layout: pb.MiniBlockLayout,
    buffers: Sequence[tuple[int, int]],
    num_rows: int,
    rows: np.ndarray,
    where: PageWhere,
) -> TakePlan:
    """Fetch and decode only the chunks holding `rows` (sorted local rows) of a page."""
    layers = parse_layers(layout.layers, where.full)
    has_dict = layout.HasField("dictionary")
    depth = int(layout.repetition_index_depth)
    if depth not in (0, 1):
        raise where.corrupt(f"repetition index depth {depth}")
    need = 2 + has_dict + (depth > 0)
    if len(buffers) < need:
        raise where.corrupt(f"mini-block page has {len(buffers)} buffers, needs {need}")
    small = (
        [buffers[0]]
        + ([buffers[2]] if has_dict else [])
        + ([buffers[2 + has_dict]] if depth else [])
    )
    got = yield small
    large = bool(layout.has_large_chunk)
    sizes, counts = chunk_sizes(got[0], large, int(layout.num_items), where)
    n_chunks = len(sizes)
    byte_starts = np.cumsum(sizes) - sizes
    data_pos, data_size = buffers[1]
    if n_chunks and int(byte_starts[-1] + sizes[-1]) > data_size:
        raise where.corrupt(
            f"chunks need {int(byte_starts[-1] + sizes[-1])} bytes, the data buffer has {data_size}"
        )
    dictionary = dictionary_items(layout, got[1], where) if has_dict else None
    r_max = max_rep(layers)
    if depth:
        ri = got[-1]
        if len(ri) != 16 * n_chunks:
            raise where.corrupt(f"repetition index of {len(ri)} bytes for {n_chunks} chunks")
        pairs = np.frombuffer(ri, dtype="<u8").reshape(n_chunks, 2).astype(I64)
        cum, leftover = np.cumsum(pairs[:, 0]), pairs[:, 1]
        if n_chunks and int(cum[-1]) != num_rows:
            raise where.corrupt(
                f"repetition index counts {int(cum[-1])} rows, the page has {num_rows}"
            )
        first, last = _row_chunks(cum, leftover, rows)
        sel = np.unique(ra.range_indices(first, last + 1))
    elif r_max:
        raise where.corrupt("mini-block page with lists but no repetition index")
    else:
        cum_counts = np.cumsum(counts)
        if n_chunks and int(cum_counts[-1]) != num_rows:
            raise where.corrupt(f"chunks hold {int(cum_counts[-1])} values for {num_rows} rows")
        sel = np.unique(np.searchsorted(cum_counts, rows, side="right"))
    if len(sel) and int(sel[-1]) >= n_chunks:
        raise where.corrupt("wanted rows lie beyond the page's chunks")
    data = yield from ra.fetch_spans(
        data_pos + byte_starts[sel], data_pos + byte_starts[sel] + sizes[sel]
    )
    arr = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    sub_sizes = sizes[sel]
    table = parse_headers(
        layout, arr, np.cumsum(sub_sizes) - sub_sizes, sub_sizes, counts[sel], large, where
    )
    rep, defs, values = decode_table(layout, table, where)
    check_levels(layers, rep, defs, where)
    # Split the decoded chunks into runs of consecutive chunks.
    brk = np.flatnonzero(np.diff(sel) != 1) + 1
    run_first = np.concatenate(([0], brk))
    run_last = np.concatenate((brk, [len(sel)])) - 1
    lvl_end = np.cumsum(table.levels)
    val_end = np.cumsum(table.counts)
    lvl_start, val_start = lvl_end - table.levels, val_end - table.counts
    vis_max = max_visible_def(layers)
    out: Runs = []
    for i, j in zip(run_first.tolist(), run_last.tolist(), strict=True):
        a, b = int(sel[i]), int(sel[j])
        v0, v1 = int(val_start[i]), int(val_end[j])
        if rep is None:
            first_row = int(np.sum(counts[:a]))
            d = None if defs is None else defs[int(lvl_start[i]) : int(lvl_end[j])]
            page = DecodedPage(layers, v1 - v0, None, d, values.slice(v0, v1 - v0), dictionary)
            out.append((first_row, page))
            continue
        e0, e1 = int(lvl_start[i]), int(lvl_end[j])
        rp = rep[e0:e1]
        dp = None if defs is None else defs[e0:e1]
        starts = np.flatnonzero(rp == r_max)
        lo, hi = 0, len(rp)
        first_row = int(cum[a - 1]) if a else 0
        if a and leftover[a - 1] > 0:
            first_row += 1
            lo = int(starts[0]) if len(starts) else hi
        elif len(rp) and rp[0] != r_max:
            raise where.corrupt(f"chunk {a} does not start a row though the index says so")
        if leftover[b] > 0 and len(starts):
            hi = max(lo, int(starts[-1]))
        vis = np.ones(len(rp), dtype=bool) if dp is None else dp <= vis_max
        drop_front = int(np.count_nonzero(vis[:lo]))
        keep_vals = int(np.count_nonzero(vis[lo:hi]))
        n_rows = int(np.count_nonzero(rp[lo:hi] == r_max))
        page = DecodedPage(
            layers,
            n_rows,
            rp[lo:hi],
            None if dp is None else dp[lo:hi],
            values.slice(v0 + drop_front, keep_vals),
            dictionary,
        )
        out.append((first_row, page))
    return out


def plan_fullzip(
    layout: pb.FullZipLayout,
    buffers: Sequence[tuple[int, int]],
    num_rows: int,
    rows: np.ndarray,
    where: PageWhere,
) -> TakePlan:
    """Fetch and decode only the bytes of `rows` (sorted local rows) of a full-zip page."""
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
        starts = data_pos + rows * stride
        data = yield from ra.fetch_spans(starts, starts + stride)
        arr = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        if control_width(layout) == 0:
            values = cz.decode_fullzip_fixed(layout.value_compression, arr, len(rows), where.full)
            return [(None, DecodedPage(layers, len(rows), None, None, values))]
        local = np.arange(len(rows), dtype=I64) * stride
        return [(None, decode_rows(layout, arr, local, local + stride, len(rows), where))]
    if len(buffers) < 2:
        raise where.corrupt("full-zip page without its repetition index")
    ri_pos, ri_size = buffers[1]
    n = num_rows + 1
    width = ri_size // n if ri_size % n == 0 else 0
    if width not in (1, 2, 4, 8):
        raise where.corrupt(f"repetition index of {ri_size} bytes for {num_rows} rows")
    raw = yield from ra.fetch_spans(ri_pos + rows * width, ri_pos + (rows + 2) * width)
    pairs = np.frombuffer(raw, dtype=f"<u{width}").astype(I64).reshape(len(rows), 2)
    s, e = pairs[:, 0], pairs[:, 1]
    if (e < s).any() or (e > data_size).any():
        raise where.corrupt("repetition index offsets are out of order or out of bounds")
    data = yield from ra.fetch_spans(data_pos + s, data_pos + e)
    arr = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    lens = e - s
    local = np.cumsum(lens) - lens
    return [(None, decode_rows(layout, arr, local, local + lens, len(rows), where))]
