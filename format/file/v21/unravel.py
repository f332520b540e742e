"""Repetition/definition levels plus visible values -> Arrow arrays, then leaves -> fields.

A leaf column's page is turned into a *path array*: the top-level field pruned to the one
child chain leading to that leaf (a map becomes a list of its entries struct). The levels
are peeled outside-in with numpy: the slots of a layer are entry positions; a struct (item)
layer keeps them and takes its validity from their def levels, a list layer's children are
the entries that start an element at its depth (``rep >= r - 1``) and are defined inside
it, and its offsets are where the slots fall among them. `merge` then zips the path arrays
of all leaves of a field (same structure, different leaves) into one array of its type.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.file.items import ItemTable, item_table, take_items
from quiver.format.file.v21.layers import Layer, def_levels_owned, is_list, max_rep
from quiver.format.file.v21.page import DecodedPage, PageWhere
from quiver.format.table.schema import LanceField

_LISTS = ("list", "list.struct", "large_list", "large_list.struct", "map")
_INT32_MAX = (1 << 31) - 1


# -- paths -----------------------------------------------------------------------------------
def leaf_paths(f: LanceField) -> list[list[LanceField]]:
    """Each leaf under `f` (a packed struct counts as one) with its ancestors, top first."""
    if f.is_leaf:
        return [[f]]
    return [[f, *p] for c in f.children for p in leaf_paths(c)]


def path_type(path: Sequence[LanceField], leaf_type: pa.DataType) -> pa.DataType:
    """The Arrow type of a path array: `path[0]` pruned to the chain down to the leaf."""
    if len(path) == 1:
        return leaf_type
    child = path[1]
    inner = pa.field(child.name, path_type(path[1:], leaf_type), child.nullable)
    lt = path[0].logical_type
    if lt == "struct":
        return pa.struct([inner])
    if lt.startswith("large_list"):
        return pa.large_list(inner)
    if lt in _LISTS:
        return pa.list_(inner)
    raise UnsupportedFeatureError(f"field {path[0].name!r}: nested type {lt!r} in a 2.1+ file")


# -- validity and buffers --------------------------------------------------------------------
def bitmap(valid: np.ndarray | None, offset: int = 0) -> pa.Buffer | None:
    """A validity bitmap for `valid` starting `offset` bits into the buffer (None: all valid)."""
    if valid is None:
        return None
    if offset:
        valid = np.concatenate([np.zeros(offset, dtype=bool), valid])
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _all_or_none(valid: np.ndarray) -> np.ndarray | None:
    return None if valid.all() else valid


def _normalised_binary(phys: pa.Array) -> tuple[np.ndarray, pa.Buffer]:
    """int64 offsets from 0 and the byte buffer of a (possibly sliced) large_binary array."""
    n = len(phys)
    offs = np.frombuffer(phys.buffers()[1], dtype=np.int64)[phys.offset : phys.offset + n + 1]
    base, end = int(offs[0]), int(offs[-1])
    data = phys.buffers()[2]
    data = data.slice(base, end - base) if data is not None else pa.py_buffer(b"")
    return offs - base, data


def to_logical(
    phys: pa.Array,
    t: pa.DataType,
    valid: np.ndarray | None,
    dictionary: pa.Array | None,
    where: PageWhere,
    table: ItemTable | None = None,
) -> pa.Array:
    """Reinterpret physical visible values as type `t`, with validity `valid`; `table` is
    the string dictionary's `item_table` when the caller keeps it for the page's next rows."""
    n = len(phys)
    if pa.types.is_dictionary(t):
        if dictionary is not None:
            items = to_logical(dictionary, t.value_type, None, None, where)
            if len(items) == 0:
                if valid is not None and valid.any() or valid is None and n:
                    raise where.corrupt("dictionary indices into an empty dictionary")
                return pa.DictionaryArray.from_arrays(pa.nulls(n, t.index_type), items)
            idx = _dictionary_indices(phys, valid, len(items), where)
            mask = None if valid is None else pa.array(~valid)
            indices = pc.if_else(mask, None, idx) if mask is not None else idx
            return pa.DictionaryArray.from_arrays(indices.cast(t.index_type), items)
        plain = to_logical(phys, t.value_type, valid, None, where)
        return plain.dictionary_encode().cast(t)
    if dictionary is not None:
        if len(dictionary) == 0:
            if valid is not None and valid.any() or valid is None and n:
                raise where.corrupt("dictionary indices into an empty dictionary")
            phys = pa.nulls(n)
        else:
            idx = _dictionary_indices(phys, valid, len(dictionary), where)
            rows = _gathered_strings(dictionary, idx, t, valid, table)
            if rows is not None:
                return rows
            phys = dictionary.take(idx)
        return to_logical(phys, t, valid, None, where)
    if pa.types.is_null(t):
        return pa.nulls(n)
    if pa.types.is_null(phys.type):
        return pa.nulls(n, t)
    if valid is not None and len(valid) != n:
        raise where.corrupt(f"{len(valid)} validity entries for {n} values")
    if pa.types.is_fixed_size_list(t):
        if not pa.types.is_fixed_size_list(phys.type) or phys.type.list_size != t.list_size:
            raise where.corrupt(f"values of physical type {phys.type} for {t}")
        k = t.list_size
        inner = phys.values.slice(phys.offset * k, n * k)
        inner_valid = (
            _all_or_none(inner.is_valid().to_numpy(zero_copy_only=False))
            if inner.null_count
            else None
        )
        items = to_logical(inner, t.value_type, inner_valid, None, where)
        return pa.Array.from_buffers(t, n, [bitmap(valid)], children=[items])
    if pa.types.is_struct(t) and pa.types.is_struct(phys.type):  # a packed struct
        if phys.type.num_fields != t.num_fields:
            raise where.corrupt(f"packed struct of {phys.type.num_fields} fields for {t}")
        kids = [
            to_logical(phys.field(i), t.field(i).type, None, None, where)
            for i in range(t.num_fields)
        ]
        return pa.Array.from_buffers(t, n, [bitmap(valid)], children=kids)
    if (
        pa.types.is_struct(t)
        or pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_map(t)
    ):
        raise UnsupportedFeatureError(f"{where.path}: {where.page}: leaf values of type {t}")
    if (
        pa.types.is_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_large_string(t)
    ):
        if not pa.types.is_large_binary(phys.type):
            raise where.corrupt(f"values of physical type {phys.type} for {t}")
        offs, data = _normalised_binary(phys)
        if pa.types.is_binary(t) or pa.types.is_string(t):
            if n and int(offs[-1]) > _INT32_MAX:
                raise UnsupportedFeatureError(
                    f"{where.path}: {where.page}: {int(offs[-1])} bytes overflow {t}; read a "
                    "smaller batch"
                )
            offs = offs.astype(np.int32)
        return pa.Array.from_buffers(t, n, [bitmap(valid), pa.py_buffer(offs), data])
    if pa.types.is_boolean(t):
        if pa.types.is_uint8(phys.type):  # an inline constant byte
            phys = pa.array(phys.to_numpy(zero_copy_only=False) != 0)
        if not pa.types.is_boolean(phys.type):
            raise where.corrupt(f"values of physical type {phys.type} for {t}")
        return pa.Array.from_buffers(
            t, n, [bitmap(valid, phys.offset), phys.buffers()[1]], offset=phys.offset
        )
    width = getattr(t, "bit_width", None)
    pw = getattr(phys.type, "bit_width", None)
    if width is None or pw != width:
        raise where.corrupt(f"values of physical type {phys.type} for {t}")
    return pa.Array.from_buffers(
        t, n, [bitmap(valid, phys.offset), phys.buffers()[1]], offset=phys.offset
    )


def _gathered_strings(
    items: pa.Array,
    idx: pa.Array,
    t: pa.DataType,
    valid: np.ndarray | None,
    table: ItemTable | None,
) -> pa.Array | None:
    """Rows `items[idx]` of a string or binary column, gathered by the compiled kernel
    (`format.file.items`) straight into int32 offsets; None where Arrow's take must do
    it (large types, null items, items or rows that could overflow int32 offsets)."""
    if not (pa.types.is_string(t) or pa.types.is_binary(t)) or idx.null_count:
        return None
    if valid is not None and len(valid) != len(idx):
        return None  # the general path names the corruption
    if table is None:
        table = item_table(items, t)
    if table is None or table.type != t or len(idx) * table.widest > _INT32_MAX:
        return None
    at = idx.to_numpy(zero_copy_only=False)
    if at.dtype.kind == "i":  # checked to lie in [0, len(items)) already
        at = at.view(at.dtype.str.replace("i", "u"))
    rows = take_items(items, at, table=table)
    if valid is None:
        return rows
    return pa.Array.from_buffers(t, len(idx), [bitmap(valid), *rows.buffers()[1:]])


def _dictionary_indices(
    phys: pa.Array, valid: np.ndarray | None, size: int, where: PageWhere
) -> pa.Array:
    """A page's dictionary indices, checked against a dictionary of `size` items. Null
    slots may hold any index (they become 0); a visible one outside the dictionary is
    corruption."""
    if not pa.types.is_integer(phys.type):
        raise where.corrupt(f"dictionary indices of type {phys.type}")
    if not len(phys):
        return phys
    idx = phys.to_numpy(zero_copy_only=False)
    if int(idx.min()) >= 0 and int(idx.max()) < size:
        return phys  # the common case: no copy, and take() accepts any integer width
    bad = (idx < 0) | (idx >= size)
    if valid is not None:
        bad &= valid
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise where.corrupt(f"dictionary index {int(idx[i])} beyond the {size} items")
    return pa.array(np.where((idx >= 0) & (idx < size), idx, 0))


# -- unravelling one page ----------------------------------------------------------------
def unravel(
    page: DecodedPage,
    path: Sequence[LanceField],
    leaf_type: pa.DataType,
    where: PageWhere,
) -> pa.Array:
    """The path array (length `page.num_rows`) of one decoded page of the leaf `path[-1]`."""
    layers = page.layers
    if len(layers) != len(path):
        raise where.corrupt(
            f"{len(layers)} repetition/definition layers for a field nested {len(path)} deep"
        )
    owned = [def_levels_owned(x) for x in layers]
    cum = np.cumsum(owned).tolist()  # inner-first: levels owned up to and including layer i
    rep, defs = page.rep, page.defs
    n_entries = len(rep) if rep is not None else len(defs) if defs is not None else page.num_rows
    if defs is not None and len(defs) != n_entries:
        raise where.corrupt(f"{len(defs)} def levels for {n_entries} rep levels")
    if defs is not None and n_entries and int(defs.max()) > cum[-1]:
        raise where.corrupt(f"def level {int(defs.max())} above the maximum {cum[-1]}")
    r = max_rep(layers)
    if rep is not None:
        if n_entries and rep[0] != r:
            raise where.corrupt("the first level entry does not start a row")
        if n_entries and int(rep.max()) > r:
            raise where.corrupt(f"repetition level {int(rep.max())} above the maximum {r}")
        slots = np.flatnonzero(rep == r)
        n_slots = len(slots)
    else:
        slots = None  # every entry is a row: no lists, so no index is needed
        n_slots = n_entries
    if n_slots != page.num_rows:
        raise where.corrupt(f"levels hold {n_slots} rows, the page has {page.num_rows}")
    structure: list[tuple[np.ndarray | None, np.ndarray | None]] = []
    depth = len(layers)
    for j in range(depth):  # outside in
        i = depth - 1 - j
        layer = layers[i]
        lo = cum[i - 1] if i else 0
        d = defs if defs is None or slots is None else defs[slots]
        if is_list(layer):
            valid = None
            if d is not None:
                ok = d <= cum[i]
                if layer in (Layer.NULLABLE_LIST, Layer.NULL_AND_EMPTY_LIST):
                    ok &= d != lo + 1
                valid = _all_or_none(ok)
            if rep is None or slots is None:
                raise where.corrupt("a list layer without repetition levels")
            keep = rep >= r - 1
            if defs is not None:
                keep &= defs <= lo
            children = np.flatnonzero(keep)
            offsets = np.empty(len(slots) + 1, dtype=np.int64)
            offsets[:-1] = np.searchsorted(children, slots)
            offsets[-1] = len(children)
            if len(slots) and offsets[0] != 0:
                raise where.corrupt("list items before the first row")
            structure.append((valid, offsets))
            slots = children
            n_slots = len(children)
            r -= 1
        else:
            valid = None if d is None else _all_or_none(d <= lo)
            structure.append((valid, None))
    if n_slots != len(page.values):
        raise where.corrupt(f"{n_slots} visible items but {len(page.values)} values")
    return assemble(structure, page.values, path, leaf_type, page.dictionary, where)


def assemble(
    structure: Sequence[tuple[np.ndarray | None, np.ndarray | None]],
    values: pa.Array,
    path: Sequence[LanceField],
    leaf_type: pa.DataType,
    dictionary: pa.Array | None,
    where: PageWhere,
) -> pa.Array:
    """The path array from each layer's (validity, list offsets or None), outermost first,
    and the leaf's physical values (one per slot of the innermost layer)."""
    depth = len(structure)
    arr = to_logical(values, leaf_type, structure[-1][0], dictionary, where)
    for j in range(depth - 2, -1, -1):
        valid, offsets = structure[j]
        t = path_type(path[j:], leaf_type)
        if offsets is None:
            arr = pa.Array.from_buffers(t, len(arr), [bitmap(valid)], children=[arr])
        else:
            arr = pa.Array.from_buffers(
                t, len(offsets) - 1, [bitmap(valid), _offsets(t, offsets, where)], children=[arr]
            )
    return arr


def _offsets(t: pa.DataType, offsets: np.ndarray, where: PageWhere) -> pa.Buffer:
    if pa.types.is_large_list(t):
        return pa.py_buffer(offsets)
    if len(offsets) and int(offsets[-1]) > _INT32_MAX:
        raise UnsupportedFeatureError(f"{where.path}: {where.page}: list offsets overflow {t}")
    return pa.py_buffer(offsets.astype(np.int32))


# -- merging the leaves of a field -------------------------------------------------------
def _valid_np(a: pa.Array) -> np.ndarray | None:
    if a.null_count == 0:
        return None
    return a.is_valid().to_numpy(zero_copy_only=False)


def _list_offsets(a: pa.Array) -> np.ndarray:
    off = a.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    return off


def merge(f: LanceField, arrays: Sequence[pa.Array], path: str) -> pa.Array:
    """One array of `f`'s type from the path arrays of its leaves, in `leaf_paths` order
    (a leaf's own array is returned as it is)."""
    if f.is_leaf:
        if len(arrays) != 1:
            raise CorruptFileError(path, f"field {f.name!r}: {len(arrays)} arrays for one leaf")
        return arrays[0]
    t = f.arrow_type_of(blob_descriptions=True)  # blob leaves read as their descriptions
    lt = f.logical_type
    first = arrays[0]
    n = len(first)
    kids_in: list[list[pa.Array]] = []
    if lt == "struct":
        pieces = [a.field(0) for a in arrays]
        pos = 0
        for c in f.children:
            k = len(leaf_paths(c))
            kids_in.append(pieces[pos : pos + k])
            pos += k
        kids = [merge(c, ks, path) for c, ks in zip(f.children, kids_in, strict=True)]
        return pa.Array.from_buffers(t, n, [bitmap(_valid_np(first))], children=kids)
    if lt in _LISTS:
        off = _list_offsets(first)
        rel = off - off[0]
        values = []
        for a in arrays:
            o = _list_offsets(a) if a is not first else off
            if len(o) != len(off) or not np.array_equal(o - o[0], rel):
                raise CorruptFileError(
                    path, f"field {f.name!r}: its leaf columns disagree on list lengths"
                )
            values.append(a.values.slice(int(o[0]), int(o[-1] - o[0])))
        (child,) = f.children
        items = merge(child, values, path)
        width = np.int64 if pa.types.is_large_list(t) else np.int32
        return pa.Array.from_buffers(
            t, n, [bitmap(_valid_np(first)), pa.py_buffer(rel.astype(width))], children=[items]
        )
    raise UnsupportedFeatureError(f"{path}: field {f.name!r} of type {lt} in a 2.1+ file")
