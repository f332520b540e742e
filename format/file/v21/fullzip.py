"""Full-zip pages: per entry a control word (rep/def) zipped with the entry's value bytes.

Buffer [0] holds, per level entry, ``[control word][value]``: the control word
``rep << bits_def | def`` takes 0, 1, 2 or 4 bytes; fixed-width values follow every visible
entry, variable-width ones (``[length][bytes]``) only visible valid entries. Buffer [1], the
repetition index, holds ``rows + 1`` byte offsets of the rows (present with lists or variable
width values). Rows are walked in lock step: one numpy step per entry position in a row, so
the work per step is vectorised over all rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from quiver.format import _kernels
from quiver.format.file.v21 import compression as cz
from quiver.format.file.v21.gather import I64, gather, read_uint
from quiver.format.file.v21.layers import max_rep, max_visible_def, parse_layers
from quiver.format.file.v21.page import DecodedPage, PageWhere
from quiver.format.proto import encodings_v2_1_pb2 as pb


def control_width(layout: pb.FullZipLayout) -> int:
    """Bytes of each entry's control word."""
    bits = int(layout.bits_rep) + int(layout.bits_def)
    if bits == 0:
        return 0
    return 1 if bits <= 8 else 2 if bits <= 16 else 4


def row_offsets(
    buf: bytes | memoryview, num_rows: int, data_size: int, where: PageWhere
) -> np.ndarray:
    """The repetition index: `num_rows + 1` row byte offsets into the zipped buffer."""
    n = num_rows + 1
    if len(buf) % n or len(buf) // n not in (1, 2, 4, 8):
        raise where.corrupt(f"repetition index of {len(buf)} bytes for {num_rows} rows")
    width = len(buf) // n
    out = np.frombuffer(buf, dtype=f"<u{width}").astype(I64)
    if out[0] != 0 or (np.diff(out) < 0).any() or out[-1] > data_size:
        raise where.corrupt("repetition index offsets are out of order or out of bounds")
    return out


def walk(
    layout: pb.FullZipLayout,
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    where: PageWhere,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Parse the entries of rows [starts[i], ends[i]): (rep, def, visible, value start,
    value length), one per entry in row order. Lengths of variable-width nulls are 0."""
    layers = parse_layers(layout.layers, where.full)
    cwb = control_width(layout)
    bits_def = int(layout.bits_def)
    vis_max = max_visible_def(layers)
    fixed = layout.WhichOneof("details") == "bits_per_value"
    vb = int(layout.bits_per_value) // 8 if fixed else 0
    lw = 0 if fixed else int(layout.bits_per_offset) // 8
    if not fixed and lw not in (4, 8):
        raise where.corrupt(f"full-zip lengths of {8 * lw} bits")
    if not fixed:  # entry by entry in a kernel (a posting list is one row of many entries)
        args = (cwb, bits_def, vis_max, lw, max_rep(layers))
        rep, defs, vstarts, vlens = _kernel_walk(data, starts, ends, *args, where)
        return rep, defs, defs <= vis_max, vstarts, vlens
    w = where.full
    rows = np.arange(len(starts), dtype=I64)
    pos = starts.astype(I64, copy=True)
    out: list[tuple[np.ndarray, ...]] = []
    if cwb and max_rep(layers):
        rows, pos = _fixed_stride_rows(layout, layers, data, starts, ends, out, where)
    first = True
    while len(rows):
        if cwb:
            cw = read_uint(data, pos, cwb, w, "full-zip control word").astype(I64)
            rep, d = cw >> bits_def, cw & ((1 << bits_def) - 1)
        else:
            rep = d = np.zeros(len(rows), dtype=I64)
        if first and max_rep(layers) and (rep != max_rep(layers)).any():
            raise where.corrupt("a row does not start with the top repetition level")
        first = False
        pos = pos + cwb
        visible = d <= vis_max
        vstart, vlen = pos, np.where(visible, vb, 0)
        pos = pos + vlen
        out.append((rows, rep, d, visible, vstart, vlen))
        over = pos > ends[rows]
        if over.any():
            raise where.corrupt(f"row {int(rows[np.argmax(over)])} runs past its end")
        more = pos < ends[rows]
        rows, pos = rows[more], pos[more]
    if not out:
        z = np.zeros(0, dtype=I64)
        return z, z, z.astype(bool), z, z
    cols = [np.concatenate(c) for c in zip(*out, strict=True)]
    order = np.argsort(cols[0], kind="stable")
    return tuple(c[order] for c in cols[1:])  # type: ignore[return-value]


_WALK_ERRORS = {
    _kernels.FZ_CONTROL: "a row ends inside a control word",
    _kernels.FZ_TOP: "a row does not start with the top repetition level",
    _kernels.FZ_LENGTH: "a row ends inside a value length",
    _kernels.FZ_PAST: "a row runs past its end",
}


def walk_variable(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    control: int,
    lengths: int,
    where: PageWhere,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`walk` of rows of one list level of all-valid variable-width values (no definition
    bits; `control` bytes of repetition per entry, `lengths` bytes per value length): each
    entry's (rep, value start, value length)."""
    rep, _, vstarts, vlens = _kernel_walk(data, starts, ends, control, 0, 0, lengths, 1, where)
    return rep, vstarts, vlens


def _kernel_walk(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    cwb: int,
    bits_def: int,
    vis_max: int,
    lw: int,
    top: int,
    where: PageWhere,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rep, def, value start, value length) of every entry of rows of variable-width
    values, walked by a kernel: counted, then written."""
    st = np.ascontiguousarray(starts, dtype=I64)
    en = np.ascontiguousarray(ends, dtype=I64)
    args = (data, st, en, cwb, bits_def, vis_max, lw, top)
    none = np.empty(0, I64)
    status, _, count = _kernels.fullzip_walk(*args, none, none, none, none)
    if status != _kernels.OK:
        raise where.corrupt(_WALK_ERRORS[status])
    rep, defs, vstarts, vlens = (np.empty(count, I64) for _ in range(4))
    status, _, written = _kernels.fullzip_walk(*args, rep, defs, vstarts, vlens)
    if status != _kernels.OK or written != count:
        raise where.corrupt(_WALK_ERRORS.get(status, "a row runs past its end"))
    return rep, defs, vstarts, vlens


def _fixed_stride_rows(
    layout: pb.FullZipLayout,
    layers: list,
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    out: list[tuple[np.ndarray, ...]],
    where: PageWhere,
) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-width rows whose entries are all visible sit at a constant stride: parse those
    at once (appending to `out`) and return the other rows (and their starts) for the walk."""
    cwb = control_width(layout)
    vb = int(layout.bits_per_value) // 8
    stride = cwb + vb
    bits_def = int(layout.bits_def)
    lens = ends - starts
    k = np.where(lens % stride == 0, lens // stride, 0)
    cand = np.flatnonzero(k > 0)
    kc = k[cand]
    total = int(kc.sum())
    ent_row = np.repeat(cand, kc)
    first_ent = np.cumsum(kc) - kc
    j = np.arange(total, dtype=I64) - np.repeat(first_ent, kc)
    ent_pos = starts[ent_row] + j * stride
    cw = read_uint(data, ent_pos, cwb, where.full, "full-zip control word").astype(I64)
    rep, d = cw >> bits_def, cw & ((1 << bits_def) - 1)
    visible = d <= max_visible_def(layers)
    all_visible = np.ones(len(cand), dtype=bool)
    if total:
        all_visible = np.logical_and.reduceat(visible, first_ent)
    if len(cand) and (rep[first_ent] != max_rep(layers)).any():
        raise where.corrupt("a row does not start with the top repetition level")
    take = np.repeat(all_visible, kc)
    out.append(
        (
            ent_row[take],
            rep[take],
            d[take],
            visible[take],
            ent_pos[take] + cwb,
            np.full(int(take.sum()), vb, dtype=I64),
        )
    )
    rest = np.ones(len(starts), dtype=bool)
    rest[cand[all_visible]] = False
    left = np.flatnonzero(rest)
    return left, starts[left].astype(I64)


def decode_rows(
    layout: pb.FullZipLayout,
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    num_rows: int,
    where: PageWhere,
) -> DecodedPage:
    """Decode the rows [starts[i], ends[i]) of a full-zip page."""
    layers = parse_layers(layout.layers, where.full)
    rep, d, visible, vstart, vlen = walk(layout, data, starts, ends, where)
    w = where.full
    enc = layout.value_compression
    vs, vl = vstart[visible], vlen[visible]
    if layout.WhichOneof("details") == "bits_per_value":
        raw = gather(data, vs, vl, w, "full-zip values")
        values = cz.decode_fullzip_fixed(enc, raw, int(visible.sum()), w)
    else:
        offsets = np.zeros(len(vs) + 1, dtype=I64)
        np.cumsum(vl, out=offsets[1:])
        values = cz.decode_fullzip_variable(
            enc, offsets, gather(data, vs, vl, w, "full-zip values"), w
        )
    if len(values) != int(visible.sum()):
        raise where.corrupt(f"{len(values)} values decoded for {int(visible.sum())} visible items")
    return DecodedPage(
        layers,
        num_rows,
        rep.astype(np.uint16) if max_rep(layers) else None,
        d.astype(np.uint16) if int(layout.bits_def) else None,
        values,
    )


def page_rows(
    layout: pb.FullZipLayout, bufs: Sequence[bytes | memoryview], num_rows: int, where: PageWhere
) -> tuple[np.ndarray, np.ndarray]:
    """Byte starts and ends of every row of the page."""
    data_size = len(bufs[0])
    layers = parse_layers(layout.layers, where.full)
    fixed = layout.WhichOneof("details") == "bits_per_value"
    if fixed and not max_rep(layers):
        bits = int(layout.bits_per_value)
        if bits % 8:
            raise where.corrupt(f"full-zip values of {bits} bits")
        stride = control_width(layout) + bits // 8
        if stride * num_rows != data_size:
            raise where.corrupt(
                f"{num_rows} rows of {stride} bytes need {stride * num_rows}, "
                f"the buffer has {data_size}"
            )
        starts = np.arange(num_rows, dtype=I64) * stride
        return starts, starts + stride
    if len(bufs) < 2:
        raise where.corrupt("full-zip page without its repetition index")
    offs = row_offsets(bufs[1], num_rows, data_size, where)
    return offs[:-1], offs[1:]


def decode_fullzip(
    layout: pb.FullZipLayout, bufs: Sequence[bytes | memoryview], num_rows: int, where: PageWhere
) -> DecodedPage:
    """Decode a whole full-zip page."""
    if not bufs:
        raise where.corrupt("full-zip page has no buffers")
    details = layout.WhichOneof("details")
    if details is None:
        raise where.corrupt("full-zip page has neither bits_per_value nor bits_per_offset")
    data = np.frombuffer(bufs[0], dtype=np.uint8)
    layers = parse_layers(layout.layers, where.full)
    if details == "bits_per_value" and not max_rep(layers) and control_width(layout) == 0:
        bits = int(layout.bits_per_value)
        if bits % 8 or len(data) != num_rows * bits // 8:
            raise where.corrupt(f"{len(data)} bytes for {num_rows} values of {bits} bits")
        values = cz.decode_fullzip_fixed(layout.value_compression, data, num_rows, where.full)
        return DecodedPage(layers, num_rows, None, None, values)
    starts, ends = page_rows(layout, bufs, num_rows, where)
    page = decode_rows(layout, data, starts, ends, num_rows, where)
    if len(page.values) != int(layout.num_visible_items) and layout.num_visible_items:
        raise where.corrupt(
            f"{len(page.values)} visible items, the layout says {int(layout.num_visible_items)}"
        )
    return page
