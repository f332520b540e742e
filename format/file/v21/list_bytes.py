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

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from quiver.format.file.base import ListBytes
from quiver.format.file.v21.fullzip import control_width, walk_variable
from quiver.format.file.v21.gather import I64, gather
from quiver.format.file.v21.page import PageWhere
from quiver.format.io.store import Spans
from quiver.format.proto import encodings_v2_1_pb2 as pb


@dataclass(frozen=True)
class PageShape:
    """A full-zip page of plain, all-valid binary values in one list level, as its rows are
    taken here: where its zipped bytes and repetition index are, and the widths of its
    index entries, control words and value lengths."""

    data: tuple[int, int]  # (position, size) of the zipped bytes
    index: tuple[int, int]  # (position, size) of the repetition index
    rows: int
    index_width: int  # bytes per repetition index entry; 0: the index is damaged
    control: int  # bytes of each entry's control word
    lengths: int  # bytes of each value's length


def page_shape(
    layout: pb.PageLayout, buffers: Sequence[tuple[int, int]], rows: int
) -> PageShape | None:
    """The `PageShape` of a full-zip page of plain, all-valid binary values in one list
    level (its buffers and rows as the column metadata gives them); None for any other."""
    if layout.WhichOneof("layout") != "full_zip_layout" or len(buffers) < 2:
        return None
    fz = layout.full_zip_layout
    if fz.WhichOneof("details") != "bits_per_offset" or int(fz.bits_per_offset) not in (32, 64):
        return None
    if fz.value_compression.WhichOneof("compression") != "variable":
        return None
    all_valid = (pb.RepDefLayer.REPDEF_ALL_VALID_ITEM, pb.RepDefLayer.REPDEF_ALL_VALID_LIST)
    if list(fz.layers) != list(all_valid) or int(fz.bits_def):
        return None
    (data_pos, data_size), (index_pos, index_size) = buffers[0], buffers[1]
    width = index_size // (rows + 1) if index_size % (rows + 1) == 0 else 0
    return PageShape(
        (int(data_pos), int(data_size)),
        (int(index_pos), int(index_size)),
        int(rows),
        width if width in (1, 2, 4, 8) else 0,
        control_width(fz),
        int(fz.bits_per_offset) // 8,
    )


def take_list_bytes(
    shapes: Sequence[PageShape | None],
    page_starts: np.ndarray,
    indices: np.ndarray,
    read: Callable[[list], list],
    where: str,
) -> ListBytes | None:
    """Rows `indices` (sorted, unique, checked, int64) of a column whose pages have
    `shapes`, read with `read` (a container's `read_ranges`); None when a page holding one
    of them is not a plain full-zip list page. The rows of a search's words are mostly in
    one page: that case costs few numpy calls."""
    page_of = np.searchsorted(page_starts, indices, side="right") - 1
    if page_of[0] == page_of[-1]:
        groups = [(int(page_of[0]), indices)]
    else:
        cuts = [0, *(np.flatnonzero(page_of[1:] != page_of[:-1]) + 1).tolist(), len(indices)]
        groups = [(int(page_of[a]), indices[a:b]) for a, b in itertools.pairwise(cuts)]
    index_starts = []
    for k, rows in groups:
        shape = shapes[k]
        if shape is None:
            return None
        if not shape.index_width:
            raise PageWhere(where, f"page {k}").corrupt(
                f"repetition index of {shape.index[1]} bytes for {shape.rows} rows"
            )
        index_starts.append(shape.index[0] + (rows - int(page_starts[k])) * shape.index_width)
    # every row's (start, end) in its page's zipped bytes, from the repetition index
    first_entries = np.concatenate(index_starts) if len(groups) > 1 else index_starts[0]
    widths = [shapes[k].index_width for k, _ in groups]  # type: ignore[union-attr]
    entry_ends = first_entries + 2 * np.repeat(widths, [len(r) for _, r in groups])
    raw = _bytes(read([Spans(first_entries, entry_ends)])[0])
    spans, at = [], 0
    for (k, rows), width in zip(groups, widths, strict=True):
        size = 2 * width * len(rows)
        pairs = raw[at : at + size].view(f"<u{width}").astype(I64).reshape(len(rows), 2)
        at += size
        data_pos, data_size = shapes[k].data  # type: ignore[union-attr]
        if (pairs[:, 1] < pairs[:, 0]).any() or int(pairs[:, 1].max()) > data_size:
            raise PageWhere(where, f"page {k}").corrupt(
                "repetition index offsets are out of order or out of bounds"
            )
        spans.append(pairs + data_pos)
    bounds = np.concatenate(spans) if len(spans) > 1 else spans[0]
    data = _bytes(read([Spans(bounds[:, 0], bounds[:, 1])])[0])
    ends = np.cumsum(bounds[:, 1] - bounds[:, 0])
    starts = ends - (bounds[:, 1] - bounds[:, 0])
    firsts, vstarts, vlens, row, values = [], [], [], 0, 0
    for k, rows in groups:  # each page's rows walked with its own widths
        shape, n = shapes[k], len(rows)
        rep, vstart, vlen = walk_variable(
            data, starts[row : row + n], ends[row : row + n], shape.control, shape.lengths,  # type: ignore[union-attr]
            PageWhere(where, f"page {k}"),
        )  # fmt: skip
        first = np.flatnonzero(rep == 1)
        if len(first) != n:
            raise PageWhere(where, f"page {k}").corrupt(
                f"{len(first)} lists in the bytes of {n} rows"
            )
        firsts.append(first + values)
        vstarts.append(vstart)
        vlens.append(vlen)
        row += n
        values += len(vlen)
    if len(groups) > 1:
        vstart, vlen, first = np.concatenate(vstarts), np.concatenate(vlens), np.concatenate(firsts)
    else:
        vstart, vlen, first = vstarts[0], vlens[0], firsts[0]
    value_offsets = np.zeros(len(vlen) + 1, I64)
    np.cumsum(vlen, out=value_offsets[1:])
    row_values = np.empty(len(first) + 1, I64)
    row_values[:-1], row_values[-1] = first, len(vlen)
    return ListBytes(gather(data, vstart, vlen, where, "list values"), value_offsets, row_values)


def _bytes(found: object) -> np.ndarray:
    return found if isinstance(found, np.ndarray) else np.frombuffer(found, np.uint8)  # type: ignore[call-overload]
