"""Constant and all-null pages (`ConstantLayout`, named `AllNullLayout` in 2.1).

Buffers, as pylance 14 writes them: none (all null, or an inline constant, without levels);
``[rep, def]`` (either may be empty) when levels exist; and a leading value buffer when the
constant is not inline (variable width: ``u32 num_buffers | u32 size per buffer | buffers``,
for strings Arrow offsets then bytes). Levels are block-compressed when the layout names a
compression, raw u16 otherwise. Every visible item gets the constant (or is null).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from quiver.format.file.v21 import compression as cz
from quiver.format.file.v21.layers import max_rep, max_visible_def, parse_layers
from quiver.format.file.v21.page import DecodedPage, PageWhere, levels_array, raw_u16
from quiver.format.proto import encodings_v2_1_pb2 as pb

_UINT = {1: pa.uint8(), 2: pa.uint16(), 4: pa.uint32(), 8: pa.uint64()}


def _levels(
    enc: pb.CompressiveEncoding | None,
    buf: bytes | memoryview,
    count: int,
    what: str,
    where: PageWhere,
) -> np.ndarray | None:
    if not len(buf):
        return None
    if enc is None:
        return raw_u16(buf, what, where)
    arr = cz.decode_block(enc, np.frombuffer(buf, dtype=np.uint8), count, where.full)
    return levels_array(arr, count, what, where)


def _repeat_fixed(value: bytes, n: int) -> pa.Array:
    """`n` copies of a little-endian fixed-width scalar, as a physical array."""
    w = len(value)
    data = pa.py_buffer(np.tile(np.frombuffer(value, dtype=np.uint8), n))
    t = _UINT.get(w, pa.binary(w))
    return pa.Array.from_buffers(t, n, [None, data])


def _repeat_variable(value: bytes, n: int) -> pa.Array:
    """`n` copies of one byte string, as large_binary."""
    offsets = np.arange(n + 1, dtype=np.int64) * len(value)
    data = np.tile(np.frombuffer(value, dtype=np.uint8), n) if value else np.zeros(0, np.uint8)
    return pa.Array.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _buffered_value(buf: bytes | memoryview, where: PageWhere) -> tuple[bytes, bool]:
    """(scalar bytes, variable width?) of a serialized constant value buffer."""
    raw = bytes(buf)
    if len(raw) < 4:
        raise where.corrupt(f"constant value buffer of {len(raw)} bytes")
    nbuf = int.from_bytes(raw[:4], "little")
    head = 4 + 4 * nbuf
    if nbuf not in (1, 2) or len(raw) < head:
        raise where.corrupt(f"constant value buffer with {nbuf} buffers")
    lens = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "little") for i in range(nbuf)]
    if head + sum(lens) > len(raw):
        raise where.corrupt("constant value buffer is shorter than its parts")
    parts, pos = [], head
    for n in lens:
        parts.append(raw[pos : pos + n])
        pos += n
    if nbuf == 1:
        return parts[0], False
    offsets, data = parts
    width = len(offsets) // 2
    if width not in (4, 8) or len(offsets) != 2 * width:
        raise where.corrupt(f"constant value offsets of {len(offsets)} bytes")
    lo = int.from_bytes(offsets[:width], "little")
    hi = int.from_bytes(offsets[width:], "little")
    if not 0 <= lo <= hi <= len(data):
        raise where.corrupt("constant value offsets out of bounds")
    return data[lo:hi], True


def decode_constant(
    layout: pb.ConstantLayout, bufs: Sequence[bytes | memoryview], num_rows: int, where: PageWhere
) -> DecodedPage:
    """Decode a constant / all-null page into levels and repeated visible values."""
    layers = parse_layers(layout.layers, where.full)
    bufs = list(bufs)
    value_buf = None
    if len(bufs) in (1, 3):
        value_buf, bufs = bufs[0], bufs[1:]
    if len(bufs) not in (0, 2):
        raise where.corrupt(f"constant page with {len(bufs) + (value_buf is not None)} buffers")
    rep = defs = None
    if bufs:
        rep_enc = layout.rep_compression if layout.HasField("rep_compression") else None
        def_enc = layout.def_compression if layout.HasField("def_compression") else None
        rep = _levels(rep_enc, bufs[0], int(layout.num_rep_values), "rep", where)
        defs = _levels(def_enc, bufs[1], int(layout.num_def_values), "def", where)
    if (rep is not None) != (max_rep(layers) > 0):
        raise where.corrupt("repetition levels do not match the page's list layers")
    n_entries = len(rep) if rep is not None else (len(defs) if defs is not None else num_rows)
    if rep is not None and defs is not None and len(defs) != len(rep):
        raise where.corrupt(f"{len(rep)} rep levels but {len(defs)} def levels")
    if rep is None and n_entries != num_rows:
        raise where.corrupt(f"{n_entries} level entries for {num_rows} rows")
    null = not layout.HasField("inline_value") and value_buf is None
    if defs is None and null:
        # All null without stored levels: every entry is null at its innermost layer.
        defs = np.ones(n_entries, dtype=np.uint16)
    if defs is None:
        visible = n_entries
    else:
        visible = int(np.count_nonzero(defs <= max_visible_def(layers)))
    if null:
        values: pa.Array = pa.nulls(visible)
    elif layout.HasField("inline_value"):
        values = _repeat_fixed(layout.inline_value, visible)
    else:
        value, variable = _buffered_value(value_buf, where)
        values = _repeat_variable(value, visible) if variable else _repeat_fixed(value, visible)
    return DecodedPage(layers, num_rows, rep, defs, values)
