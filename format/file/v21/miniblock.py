"""Mini-block pages: chunk metadata and headers -> per-chunk buffers -> levels and values.

Buffers: [0] chunk metadata (one u16 word per chunk in 2.1, u32 with `has_large_chunk`),
[1] chunk data, [2] the dictionary (if any), then the repetition index (if any). A metadata
word is ``(chunk_bytes / 8 - 1) << 4 | log2(values)``; the last chunk stores log 0 and holds
the remaining values. A chunk is ``u16 num_levels | u16 rep_size? | u16 def_size? |
value_size[num_buffers] (u16, or u32 for large chunks) | pad8 | rep | pad8 | def | pad8 |
values... `` with every buffer padded to 8 bytes. All chunks are parsed with numpy at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from quiver.format.file.v21 import compression as cz
from quiver.format.file.v21.gather import I64, read_uint
from quiver.format.file.v21.layers import Layer, parse_layers
from quiver.format.file.v21.page import DecodedPage, PageWhere, levels_array
from quiver.format.proto import encodings_v2_1_pb2 as pb


def _pad8(x: np.ndarray) -> np.ndarray:
    return (x + 7) // 8 * 8


@dataclass
class ChunkTable:
    """Where every chunk's buffers sit inside the chunk-data buffer, and what they hold."""

    data: np.ndarray  # uint8 chunk data
    starts: np.ndarray  # chunk byte starts
    sizes: np.ndarray  # chunk byte sizes
    counts: np.ndarray  # values per chunk
    levels: np.ndarray  # level entries per chunk
    rep: tuple[np.ndarray, np.ndarray] | None  # (starts, sizes)
    defs: tuple[np.ndarray, np.ndarray] | None
    values: list[tuple[np.ndarray, np.ndarray]]

    def select(self, which: np.ndarray) -> ChunkTable:
        """The table restricted to chunks `which` (in order)."""

        def sub(pair: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray] | None:
            return None if pair is None else (pair[0][which], pair[1][which])

        return ChunkTable(
            self.data,
            self.starts[which],
            self.sizes[which],
            self.counts[which],
            self.levels[which],
            sub(self.rep),
            sub(self.defs),
            [sub(v) for v in self.values],  # type: ignore[misc]
        )


def chunk_sizes(
    meta: bytes | memoryview, large: bool, num_items: int, where: PageWhere
) -> tuple[np.ndarray, np.ndarray]:
    """(byte sizes, value counts) of every chunk, from the chunk-metadata buffer."""
    width = 4 if large else 2
    if len(meta) % width:
        raise where.corrupt(f"chunk metadata of {len(meta)} bytes is not a multiple of {width}")
    words = np.frombuffer(meta, dtype="<u4" if large else "<u2").astype(I64)
    sizes = ((words >> 4) + 1) * 8
    counts = np.left_shift(np.ones(len(words), dtype=I64), words & 0xF)
    if len(words):
        rest = num_items - int(counts[:-1].sum())
        if rest < 0 or (words[-1] & 0xF) != 0 and rest != counts[-1]:
            raise where.corrupt(
                f"chunk value counts add up to more than the page's {num_items} items"
            )
        counts[-1] = rest
    elif num_items:
        raise where.corrupt(f"no chunks for {num_items} items")
    return sizes, counts


def parse_chunks(
    layout: pb.MiniBlockLayout,
    meta: bytes | memoryview,
    data: bytes | memoryview,
    where: PageWhere,
    first_chunk: int = 0,
    chunk_starts: np.ndarray | None = None,
) -> ChunkTable:
    """Parse the chunk metadata and every chunk header (vectorised)."""
    large = bool(layout.has_large_chunk)
    sizes, counts = chunk_sizes(meta, large, int(layout.num_items), where)
    arr = np.frombuffer(data, dtype=np.uint8)
    if chunk_starts is None:
        starts = np.cumsum(sizes) - sizes
        if len(sizes) and int(starts[-1] + sizes[-1]) > len(arr):
            raise where.corrupt(
                f"chunks need {int(starts[-1] + sizes[-1])} bytes, the data buffer has {len(arr)}"
            )
    else:
        starts = chunk_starts
    return parse_headers(layout, arr, starts, sizes, counts, large, where)


def parse_headers(
    layout: pb.MiniBlockLayout,
    arr: np.ndarray,
    starts: np.ndarray,
    sizes: np.ndarray,
    counts: np.ndarray,
    large: bool,
    where: PageWhere,
) -> ChunkTable:
    has_rep = layout.HasField("rep_compression")
    has_def = layout.HasField("def_compression")
    nbuf = int(layout.num_buffers)
    if nbuf < 1 or nbuf > 64:
        raise where.corrupt(f"mini-block page with {nbuf} value buffers per chunk")
    vw = 4 if large else 2
    head = 2 + 2 * has_rep + 2 * has_def + vw * nbuf
    if len(sizes) and int(sizes.min()) < head:
        raise where.corrupt(f"a chunk is smaller than its {head}-byte header")
    w = where.full
    levels = read_uint(arr, starts, 2, w, "chunk header").astype(I64)
    pos = 2
    rep_size = def_size = None
    if has_rep:
        rep_size = read_uint(arr, starts + pos, 2, w, "chunk header").astype(I64)
        pos += 2
    if has_def:
        def_size = read_uint(arr, starts + pos, 2, w, "chunk header").astype(I64)
        pos += 2
    value_sizes = []
    for _ in range(nbuf):
        value_sizes.append(read_uint(arr, starts + pos, vw, w, "chunk header").astype(I64))
        pos += vw
    cur = starts + _pad8(np.int64(head))
    rep = defs = None
    if rep_size is not None:
        rep = (cur, rep_size)
        cur = cur + _pad8(rep_size)
    if def_size is not None:
        defs = (cur, def_size)
        cur = cur + _pad8(def_size)
    values = []
    for vs in value_sizes:
        values.append((cur, vs))
        cur = cur + _pad8(vs)
    over = cur > starts + sizes
    if over.any():
        c = int(np.argmax(over))
        raise where.corrupt(
            f"chunk {c}: its buffers need {int(cur[c] - starts[c])} bytes, the chunk has "
            f"{int(sizes[c])}"
        )
    if not (has_rep or has_def):
        levels = np.zeros(len(starts), dtype=I64)
    return ChunkTable(arr, starts, sizes, counts, levels, rep, defs, values)


def decode_table(
    layout: pb.MiniBlockLayout,
    table: ChunkTable,
    where: PageWhere,
    select: np.ndarray | None = None,
) -> tuple[np.ndarray | None, np.ndarray | None, pa.Array]:
    """(rep, def, values) of the chunks of `table`, all chunks decoded at once; with
    `select` (sorted positions among the chunks' values) only those values."""
    w = where.full
    n_levels = int(table.levels.sum())
    rep = defs = None
    if table.rep is not None:
        ch = cz.Chunks(table.data, table.rep[0], table.rep[1], table.levels)
        rep = levels_array(
            cz.decode_chunks(layout.rep_compression, [ch], w), n_levels, "rep", where
        )
    if table.defs is not None:
        ch = cz.Chunks(table.data, table.defs[0], table.defs[1], table.levels)
        defs = levels_array(
            cz.decode_chunks(layout.def_compression, [ch], w), n_levels, "def", where
        )
    bufs = [cz.Chunks(table.data, s, n, table.counts) for s, n in table.values]
    total = int(table.counts.sum())
    if select is not None:
        if len(select) and not 0 <= int(select[0]) <= int(select[-1]) < total:
            raise where.corrupt(f"values wanted beyond the {total} the chunks hold")
        values = cz.decode_chunks(layout.value_compression, bufs, w, select=select)
        if len(values) != len(select):
            raise where.corrupt(f"{len(values)} values decoded for {len(select)} wanted")
        return rep, defs, values
    values = cz.decode_chunks(layout.value_compression, bufs, w)
    if len(values) != total:
        raise where.corrupt(f"values decode to {len(values)} items, the chunks hold {total}")
    return rep, defs, values


def dictionary_items(
    layout: pb.MiniBlockLayout, buf: bytes | memoryview, where: PageWhere
) -> pa.Array:
    """The page dictionary (buffer 2), block-decoded."""
    n = int(layout.num_dictionary_items)
    items = cz.decode_block(layout.dictionary, np.frombuffer(buf, dtype=np.uint8), n, where.full)
    if len(items) != n:
        raise where.corrupt(f"dictionary decodes to {len(items)} items, expected {n}")
    return items


def check_levels(
    layers: Sequence[Layer], rep: np.ndarray | None, defs: np.ndarray | None, where: PageWhere
) -> None:
    """Refuse rep/def buffers the layer stack cannot have (or lacks)."""
    from quiver.format.file.v21.layers import max_rep

    if (rep is not None) != (max_rep(layers) > 0):
        raise where.corrupt(
            f"repetition levels {'present' if rep is not None else 'missing'} for layers "
            f"{[layer.name for layer in layers]}"
        )


def decode_miniblock(
    layout: pb.MiniBlockLayout, bufs: Sequence[bytes | memoryview], num_rows: int, where: PageWhere
) -> DecodedPage:
    """Decode a whole mini-block page."""
    layers = parse_layers(layout.layers, where.full)
    has_dict = layout.HasField("dictionary")
    need = 2 + has_dict
    if len(bufs) < need:
        raise where.corrupt(f"mini-block page has {len(bufs)} buffers, needs at least {need}")
    table = parse_chunks(layout, bufs[0], bufs[1], where)
    rep, defs, values = decode_table(layout, table, where)
    check_levels(layers, rep, defs, where)
    if rep is None and len(values) != num_rows:
        raise where.corrupt(f"{len(values)} values for {num_rows} rows")
    dictionary = dictionary_items(layout, bufs[2], where) if has_dict else None
    return DecodedPage(layers, num_rows, rep, defs, values, dictionary)
