"""A lean take of a list-of-binary column: the rows' values as flat bytes, no Arrow lists.

An INVERTED index's posting list is one row of ``list<large_binary>`` (a value per posting
block), in full-zip pages. The generic take plans each page, builds Arrow lists and
unravels them, about 0.4 ms whatever the rows; a search of a few words paid that on every
query, a third of its time. Here a take is one read of the wanted rows' repetition index
entries, one read of their bytes and one kernel walk of their entries, straight into the
flat form the posting decoder wants.

Only plain values (no compression), all valid and one list level, are taken this way;
`take_list_bytes` answers None for anything else and the caller takes the rows generically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from quiver.format.file.base import ListBytes
from quiver.format.file.v20 import random_access as ra
from quiver.format.file.v21.fullzip import walk
from quiver.format.file.v21.gather import I64, gather
from quiver.format.file.v21.layers import max_rep, parse_layers
from quiver.format.file.v21.page import PageWhere
from quiver.format.proto import encodings_v2_1_pb2 as pb

# a page's layout when its rows are taken this way, else None
PageShape = pb.FullZipLayout | None


def page_shape(layout: pb.PageLayout) -> PageShape:
    """Where a full-zip page of plain, all-valid binary values in one list level keeps its
    bytes and repetition index; None for any other page."""
    if layout.WhichOneof("layout") != "full_zip_layout":
        return None
    fz = layout.full_zip_layout
    if fz.WhichOneof("details") != "bits_per_offset":
        return None
    if fz.value_compression.WhichOneof("compression") != "variable":
        return None
    all_valid = (pb.RepDefLayer.REPDEF_ALL_VALID_ITEM, pb.RepDefLayer.REPDEF_ALL_VALID_LIST)
    if list(fz.layers) != list(all_valid) or int(fz.bits_def):
        return None
    return fz


def take_list_bytes(
    pages: Sequence[tuple[PageShape, Sequence[tuple[int, int]], int]],
    page_starts: np.ndarray,
    indices: np.ndarray,
    read: Callable[[list], list],
    where: str,
) -> ListBytes | None:
    """Rows `indices` (sorted, unique, checked) of a column whose pages are `pages` (each
    its `page_shape`, buffers and rows), read with `read` (a container's `read_ranges`);
    None when a page holding one of them is not a plain full-zip list page."""
    page_of = np.searchsorted(page_starts, indices, side="right") - 1
    index_starts, index_stops, homes = [], [], []
    for k in np.unique(page_of).tolist():
        shape, buffers, rows = pages[k]
        if shape is None or len(buffers) < 2:
            return None
        (ri_pos, ri_size) = buffers[1]
        width = ri_size // (rows + 1) if ri_size % (rows + 1) == 0 else 0
        if width not in (1, 2, 4, 8):
            raise PageWhere(where, f"page {k}").corrupt(
                f"repetition index of {ri_size} bytes for {rows} rows"
            )
        local = indices[page_of == k] - int(page_starts[k])
        index_starts.append(ri_pos + local * width)
        index_stops.append(ri_pos + (local + 2) * width)
        homes.append((k, width, len(local)))
    # every row's (start, end) in its page's zipped bytes, from the repetition index
    raw = read([ra.Spans(np.concatenate(index_starts), np.concatenate(index_stops))])[0]
    raw = np.frombuffer(raw, np.uint8) if not isinstance(raw, np.ndarray) else raw
    spans, at = [], 0
    for k, width, n in homes:
        size = 2 * width * n
        pairs = raw[at : at + size].view(f"<u{width}").astype(I64).reshape(n, 2)
        at += size
        data_pos, data_size = pages[k][1][0]
        if (pairs[:, 1] < pairs[:, 0]).any() or (pairs[:, 1] > data_size).any():
            raise PageWhere(where, f"page {k}").corrupt(
                "repetition index offsets are out of order or out of bounds"
            )
        spans.append(pairs + data_pos)
    bounds = np.concatenate(spans)
    data = read([ra.Spans(bounds[:, 0], bounds[:, 1])])[0]
    data = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    ends = np.cumsum(bounds[:, 1] - bounds[:, 0])
    starts = np.concatenate(([0], ends[:-1])).astype(I64)
    firsts, vstarts, vlens, row = [], [], [], 0
    for k, _, n in homes:  # each page's rows walked under its own layout
        layout = pages[k][0]
        page_where = PageWhere(where, f"page {k}")
        rep, _, visible, vstart, vlen = walk(
            layout, data, starts[row : row + n], ends[row : row + n], page_where
        )
        if not visible.all():
            return None
        first = np.flatnonzero(rep == max_rep(parse_layers(layout.layers, page_where.full)))
        if len(first) != n:
            raise page_where.corrupt(f"{len(first)} lists in the bytes of {n} rows")
        firsts.append(first + sum(len(v) for v in vlens))
        vstarts.append(vstart)
        vlens.append(vlen)
        row += n
    vstart, vlen = np.concatenate(vstarts), np.concatenate(vlens)
    value_offsets = np.zeros(len(vlen) + 1, I64)
    np.cumsum(vlen, out=value_offsets[1:])
    row_values = np.append(np.concatenate(firsts), len(vlen)).astype(I64)
    return ListBytes(gather(data, vstart, vlen, where, "list values"), value_offsets, row_values)
