"""Lance 2.3 "planar" pages (`lance.encodings23.PlanarLayout`): read and write.

A planar page pairs a structural plane with a value plane. With a *dense* structure (the
2.1/2.2 repetition/definition layers) the value planes are the 2.2 layouts under new names,
buffers byte for byte the same: chunked = mini-block (u32 chunk sizes), zipped = full-zip,
constant = an inline scalar with trivial all-valid layers, none = all null with one nullable
leaf layer. `to_page_layout` turns such a page into the 2.2 `PageLayout` the 2.1/2.2 decoders
read, and `from_page_layout` turns what the 2.2 page encoders write into a planar page.

A *sparse* structure (pylance writes it for constant and all-null values under nulls or
lists) describes each Arrow layer, outermost first, by position sets over its slots:
validity (null or valid positions), list (the non-empty slots and their child counts, the
rest empty) and fixed-size list. Their codecs (Flat, Range, Delta, Dictionary, Constant)
read the page's buffers in order. `sparse_path_array` builds the path array from them;
`sparse_from_levels` writes one from a page's levels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from quiver.format.errors import UnsupportedFeatureError
from quiver.format.file.container import V2Container, type_name
from quiver.format.file.v21 import codecs23
from quiver.format.file.v21 import compression as cz
from quiver.format.file.v21 import unravel as uv
from quiver.format.file.v21.layers import Layer, def_levels_owned, is_list, parse_layers
from quiver.format.file.v21.page import PageWhere
from quiver.format.file.v21.page_encoders import EncodedPage, PageInput
from quiver.format.proto import encodings_v2_1_pb2 as pb
from quiver.format.proto import encodings_v2_3_pb2 as p23
from quiver.format.table.schema import LanceField

PLANAR_LAYOUT_URL = "lance.encodings23.PlanarLayout"
_NULLS = p23.SparseValiditySet.SPARSE_VALIDITY_NULL_POSITIONS
_VALIDS = p23.SparseValiditySet.SPARSE_VALIDITY_VALID_POSITIONS


@dataclass
class SparsePage:
    """A planar page with a sparse structure (decoded whole, with `sparse_path_array`)."""

    layers: Sequence[p23.SparseStructuralLayer]
    values: p23.ValuePlane

    def WhichOneof(self, _group: str) -> str:  # noqa: N802 - reads like a PageLayout
        """The layout kind, as `PageLayout.WhichOneof("layout")` would name it."""
        return "sparse_layout"


# -- reading -----------------------------------------------------------------------------------
def page_layout(
    container: V2Container, page: object, where: PageWhere
) -> pb.PageLayout | SparsePage:
    """The layout of one 2.3 page: a 2.2 `PageLayout` for dense pages, else a `SparsePage`."""
    ref = container.resolve(page.encoding, where.page)
    if type_name(ref.type_url) != PLANAR_LAYOUT_URL:
        raise UnsupportedFeatureError(
            f"{where.path}: {where.page} uses {ref.type_url!r}, not a Lance 2.3 planar layout"
        )
    msg = container.page_message(page, p23.PlanarLayout, where.page, "2.3 planar reader")
    return to_page_layout(msg, where)


def to_page_layout(msg: p23.PlanarLayout, where: PageWhere) -> pb.PageLayout | SparsePage:
    """The 2.2 equivalent of a dense planar page (or the sparse page as is)."""
    structure = msg.structure.WhichOneof("structure")
    plane = msg.values.WhichOneof("values")
    if structure is None:
        raise where.corrupt("planar page without a structural plane")
    if plane is None:
        raise where.corrupt("planar page without a value plane")
    if structure == "sparse":
        if not msg.structure.sparse.layers:
            raise where.corrupt("sparse structure without layers")
        return SparsePage(list(msg.structure.sparse.layers), msg.values)
    raw_layers = list(msg.structure.dense.layers)
    layers = parse_layers(raw_layers, where.full)
    if plane == "chunked":
        c = msg.values.chunked
        ml = pb.MiniBlockLayout(
            value_compression=c.value,
            num_buffers=c.num_buffers,
            num_items=c.num_items,
            num_dictionary_items=c.num_dictionary_items,
            repetition_index_depth=c.levels.repetition_index_depth,
            has_large_chunk=True,
        )
        if c.levels.HasField("repetition"):
            ml.rep_compression.CopyFrom(c.levels.repetition)
        if c.levels.HasField("definition"):
            ml.def_compression.CopyFrom(c.levels.definition)
        if c.HasField("dictionary"):
            ml.dictionary.CopyFrom(c.dictionary)
        ml.layers.extend(raw_layers)
        return pb.PageLayout(mini_block_layout=ml)
    if plane == "zipped":
        z = msg.values.zipped
        fz = pb.FullZipLayout(
            bits_rep=z.levels.bits_repetition,
            bits_def=z.levels.bits_definition,
            num_items=z.num_items,
            num_visible_items=z.num_visible_items,
            value_compression=z.value,
        )
        addressing = z.WhichOneof("addressing")
        if addressing == "bits_per_value":
            fz.bits_per_value = z.bits_per_value
        elif addressing == "bits_per_offset":
            fz.bits_per_offset = z.bits_per_offset
        else:
            raise where.corrupt("zipped values without a value width or offset width")
        fz.layers.extend(raw_layers)
        return pb.PageLayout(full_zip_layout=fz)
    cl = pb.ConstantLayout()
    cl.layers.extend(raw_layers)
    if plane == "constant":
        if any(x != Layer.ALL_VALID_ITEM for x in layers):
            raise where.corrupt("a dense constant page must have only all-valid item layers")
        scalar = msg.values.constant.scalar
        if not 1 <= len(scalar) <= 32:
            raise where.corrupt(f"planar constant of {len(scalar)} bytes")
        cl.inline_value = scalar
    elif layers != [Layer.NULLABLE_ITEM]:
        raise where.corrupt("a dense page without values must have one nullable leaf layer")
    return pb.PageLayout(constant_layout=cl)


class _Buffers:
    """The page's buffers, handed out in order to the codecs that have a payload."""

    def __init__(self, bufs: Sequence[bytes | memoryview], where: PageWhere) -> None:
        self.bufs, self.next, self.where = list(bufs), 0, where

    def take(self, enc: pb.CompressiveEncoding, count: int, what: str) -> np.ndarray:
        """`count` u64 values decoded by `enc` (reading the next buffer if it has one)."""
        data = np.zeros(0, dtype=np.uint8)
        if codecs23.has_payload(enc):
            if self.next >= len(self.bufs):
                raise self.where.corrupt(f"{what}: the page has too few buffers")
            data = np.frombuffer(self.bufs[self.next], dtype=np.uint8)
            self.next += 1
        if enc.WhichOneof("compression") == "constant" and not enc.constant.HasField("value"):
            if count:
                raise self.where.corrupt(f"{what}: {count} positions in an empty set")
            return np.zeros(0, dtype=np.int64)
        arr = cz.decode_block(enc, data, count, f"{self.where.full} {what}")
        out = np.asarray(arr.to_numpy(zero_copy_only=False))
        if len(out) != count or out.dtype.kind != "u":
            raise self.where.corrupt(f"{what}: {len(out)} values of {out.dtype}, expected {count}")
        return out.astype(np.int64)


def _validity(vs: p23.SparseValiditySet, n: int, bufs: _Buffers, what: str) -> np.ndarray | None:
    """The validity of `n` slots (None: all valid) from a sparse validity set."""
    if not vs.meaning and not vs.HasField("positions") and not vs.num_positions:
        return None  # an absent set: nothing is null
    if vs.meaning not in (_NULLS, _VALIDS):
        raise bufs.where.corrupt(f"{what}: validity of unknown meaning {vs.meaning}")
    pos = bufs.take(vs.positions, int(vs.num_positions), f"{what} positions")
    if len(pos) and (pos.min() < 0 or pos.max() >= n or (np.diff(pos) <= 0).any()):
        raise bufs.where.corrupt(f"{what}: positions out of order or beyond {n} slots")
    valid = np.full(n, vs.meaning == _NULLS, dtype=bool)
    valid[pos] = vs.meaning == _VALIDS
    return None if valid.all() else valid


def sparse_path_array(
    page: SparsePage,
    bufs: Sequence[bytes | memoryview],
    rows: int,
    path: Sequence[LanceField],
    leaf_type: pa.DataType,
    where: PageWhere,
) -> pa.Array:
    """The path array (`rows` long) of a sparse planar page of the leaf `path[-1]`."""
    if len(page.layers) != len(path):
        raise UnsupportedFeatureError(
            f"{where.path}: {where.page}: {len(page.layers)} sparse layers for a field nested "
            f"{len(path)} deep (fixed-size lists of nested values are not read yet)"
        )
    buffers = _Buffers(bufs, where)
    structure: list[tuple[np.ndarray | None, np.ndarray | None]] = []
    n = rows
    for depth, (layer, f) in enumerate(zip(page.layers, path, strict=True)):
        kind = layer.WhichOneof("layer")
        what = f"sparse layer {depth} ({f.name!r})"
        t = uv.path_type(path[depth:], leaf_type)
        listy = depth < len(path) - 1 and (pa.types.is_list(t) or pa.types.is_large_list(t))
        if kind == "validity" and not listy:
            structure.append((_validity(layer.validity, n, buffers, what), None))
        elif kind == "list" and listy:
            ll = layer.list
            k = int(ll.num_non_empty_positions)
            pos = buffers.take(ll.non_empty_positions, k, f"{what} non-empty positions")
            counts = buffers.take(ll.counts, k, f"{what} counts")
            if len(pos) and (pos.min() < 0 or pos.max() >= n or (np.diff(pos) <= 0).any()):
                raise where.corrupt(f"{what}: non-empty positions out of order or beyond {n}")
            if (counts <= 0).any():
                raise where.corrupt(f"{what}: a non-empty list with {counts.min()} children")
            sizes = np.zeros(n, dtype=np.int64)
            sizes[pos] = counts
            offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(sizes, out=offsets[1:])
            if offsets[-1] != int(ll.num_child_slots):
                raise where.corrupt(
                    f"{what}: counts add up to {offsets[-1]}, not {ll.num_child_slots} children"
                )
            valid = _validity(ll.validity, n, buffers, what)
            if valid is not None and (sizes[~valid] != 0).any():
                raise where.corrupt(f"{what}: a null list has children")
            structure.append((valid, offsets))
            n = int(offsets[-1])
        else:
            raise UnsupportedFeatureError(
                f"{where.path}: {where.page}: sparse {kind} layer where the schema has "
                f"{f.logical_type!r} ({f.name!r})"
            )
    plane = page.values.WhichOneof("values")
    if plane == "none":
        values: pa.Array = pa.nulls(n)
        valid = structure[-1][0]
        if valid is not None and valid.any() or valid is None and n:
            raise where.corrupt("valid leaf slots on a page without values")
        structure[-1] = (np.zeros(n, dtype=bool), None)
    elif plane == "constant":
        scalar = page.values.constant.scalar
        if not 1 <= len(scalar) <= 32:
            raise where.corrupt(f"planar constant of {len(scalar)} bytes")
        values = cz.constant_values(pb.Constant(value=scalar), n, where.full)
    else:
        raise UnsupportedFeatureError(
            f"{where.path}: {where.page}: {plane} values under a sparse structure"
        )
    if buffers.next != len(buffers.bufs):
        raise where.corrupt(f"{len(buffers.bufs) - buffers.next} page buffers left unread")
    return uv.assemble(structure, values, path, leaf_type, None, where)


# -- writing ------------------------------------------------------------------------------------
def from_page_layout(layout: pb.PageLayout) -> p23.PlanarLayout | None:
    """The planar form of a 2.2 page (same buffers); None for a constant page that needs a
    sparse structure (levels, or nulls under a constant)."""
    kind = layout.WhichOneof("layout")
    out = p23.PlanarLayout()
    if kind == "mini_block_layout":
        ml = layout.mini_block_layout
        c = out.values.chunked
        c.value.CopyFrom(ml.value_compression)
        if ml.HasField("rep_compression"):
            c.levels.repetition.CopyFrom(ml.rep_compression)
        if ml.HasField("def_compression"):
            c.levels.definition.CopyFrom(ml.def_compression)
        c.levels.repetition_index_depth = ml.repetition_index_depth
        if ml.HasField("dictionary"):
            c.dictionary.CopyFrom(ml.dictionary)
            c.num_dictionary_items = ml.num_dictionary_items
        c.num_buffers = ml.num_buffers
        c.num_items = ml.num_items
        out.structure.dense.layers.extend(ml.layers)
        return out
    if kind == "full_zip_layout":
        fz = layout.full_zip_layout
        z = out.values.zipped
        z.value.CopyFrom(fz.value_compression)
        z.levels.bits_repetition = fz.bits_rep
        z.levels.bits_definition = fz.bits_def
        if fz.WhichOneof("details") == "bits_per_value":
            z.bits_per_value = fz.bits_per_value
        else:
            z.bits_per_offset = fz.bits_per_offset
        z.num_items = fz.num_items
        z.num_visible_items = fz.num_visible_items
        out.structure.dense.layers.extend(fz.layers)
        return out
    if kind != "constant_layout":
        return None
    cl = layout.constant_layout
    layers = list(cl.layers)
    if cl.HasField("inline_value") and all(x == Layer.ALL_VALID_ITEM for x in layers):
        out.values.constant.scalar = cl.inline_value
    elif not cl.HasField("inline_value") and layers == [Layer.NULLABLE_ITEM]:
        out.values.none.SetInParent()
    else:
        return None
    out.structure.dense.layers.extend(layers)
    return out


def _position_set(vs: p23.SparseValiditySet, positions: np.ndarray, out: list[bytes]) -> None:
    """Fill `vs` with ascending `positions` as Flat u64 (nothing stored when empty)."""
    vs.num_positions = len(positions)
    if len(positions):
        vs.positions.flat.bits_per_value = 64
        out.append(np.ascontiguousarray(positions, dtype="<u8").tobytes())
    else:
        vs.positions.constant.SetInParent()


def sparse_from_levels(
    layers: Sequence[Layer],
    rep: np.ndarray | None,
    defs: np.ndarray | None,
    num_rows: int,
    scalar: bytes | None,
) -> tuple[p23.PlanarLayout, list[bytes]]:
    """A sparse planar page (and its buffers) for a page whose visible values are all null
    (`scalar` None) or all `scalar`, from its levels in the file's numbering."""
    out = p23.PlanarLayout()
    bufs: list[bytes] = []
    n_entries = len(rep) if rep is not None else len(defs) if defs is not None else num_rows
    defs = np.zeros(n_entries, dtype=np.uint16) if defs is None else defs
    owned = [def_levels_owned(x) for x in layers]
    cum = np.cumsum(owned).tolist()
    r = sum(1 for x in layers if is_list(x))
    slots = np.flatnonzero(rep == r) if rep is not None else np.arange(n_entries)
    for i in range(len(layers) - 1, -1, -1):  # outermost first
        layer = layers[i]
        lo = cum[i - 1] if i else 0
        d = defs[slots]
        sl = out.structure.sparse.layers.add()
        if is_list(layer):
            null = d > cum[i]  # null further out: the list is null too (as `unravel` reads it)
            if layer in (Layer.NULLABLE_LIST, Layer.NULL_AND_EMPTY_LIST):
                null |= d == lo + 1
            keep = rep >= r - 1
            keep &= defs <= lo
            children = np.flatnonzero(keep)
            bounds = np.searchsorted(children, np.append(slots, len(rep)))
            counts = np.diff(bounds)
            nz = np.flatnonzero(counts)
            ll = sl.list
            ll.num_child_slots = len(children)
            ll.num_non_empty_positions = len(nz)
            if len(nz):
                ll.non_empty_positions.flat.bits_per_value = 64
                bufs.append(nz.astype("<u8").tobytes())
                ll.counts.flat.bits_per_value = 64
                bufs.append(counts[nz].astype("<u8").tobytes())
            else:
                ll.non_empty_positions.constant.SetInParent()
                ll.counts.constant.SetInParent()
            ll.validity.meaning = _NULLS
            _position_set(ll.validity, np.flatnonzero(null), bufs)
            slots = children
            r -= 1
        else:
            sl.validity.meaning = _NULLS
            _position_set(sl.validity, np.flatnonzero(d > lo), bufs)
    if scalar is None:
        out.values.none.SetInParent()
    else:
        out.values.constant.scalar = scalar
    return out, bufs


def planar_page(page: EncodedPage, inp: PageInput) -> EncodedPage:
    """The 2.3 form of a page the 2.2 encoders wrote for `inp`: the same buffers under a
    planar layout, or a sparse page where 2.3 has no dense form (constants under nulls,
    all-null pages with levels)."""
    planar = from_page_layout(page.layout)
    if planar is not None:
        return EncodedPage(planar, page.buffers)
    cl = page.layout.constant_layout
    scalar = cl.inline_value if cl.HasField("inline_value") else None
    msg, bufs = sparse_from_levels(inp.layers, inp.rep, inp.defs, inp.num_rows, scalar)
    return EncodedPage(msg, bufs)
