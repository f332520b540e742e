"""Arrow arrays -> the leaf columns of Lance 2.1+ files: repetition/definition levels and values.

In 2.1+ only leaves get columns; every struct, list or map above a leaf is folded into the
leaf's levels. `shred` walks a top-level array once, outermost layer first, and yields one
`Shredded` per leaf with

* `rep`: uint16 repetition level per level entry (None without list ancestors), already in
  the file's numbering (`max_rep` starts a row, 0 continues the innermost list);
* `defs`: uint16 *raw* definition codes per entry, numbered from the **outermost** layer:
  depth d (0 = the top-level field) null -> ``2d + 1``, empty list -> ``2d + 2``, 0 = valid.
  The page encoder turns them into the file's numbering once it knows which layers of the
  page actually hold nulls or empty lists (`layer_kinds`, `def_table`);
* `values`: the visible value slots (valid items and null items inside the innermost list)
  as an Arrow array of the leaf's storage type; null slots carry whatever the input had.

Everything is vectorised: a list layer expands its entries with `np.repeat`, values are
gathered once per leaf with `take`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from quiver.format.errors import UnsupportedFeatureError
from quiver.format.file.v21.layers import Layer
from quiver.format.table.schema import LanceField

LIST_TYPES = ("list", "list.struct", "large_list", "large_list.struct", "map")


@dataclass(frozen=True)
class LeafPath:
    """What lies above one leaf column: each ancestor's kind, outermost first."""

    field: LanceField  # the leaf field
    kinds: tuple[str, ...]  # "item" (struct or the leaf itself) or "list", outermost first
    name: str  # dotted path, for messages
    nullable: tuple[bool, ...] = ()  # per layer, outermost first: the field's nullability

    def structs_above_lists(self) -> list[int]:
        """Depths of nullable struct layers with a list below them on this path."""
        last_list = max((d for d, k in enumerate(self.kinds) if k == "list"), default=-1)
        return [
            d
            for d in range(last_list)
            if self.kinds[d] == "item" and (not self.nullable or self.nullable[d])
        ]

    @property
    def max_rep(self) -> int:
        """Number of list ancestors."""
        return sum(1 for k in self.kinds if k == "list")

    @property
    def has_list(self) -> bool:
        """Whether a list is above the leaf."""
        return "list" in self.kinds


@dataclass
class Shredded:
    """Levels and visible values of one leaf column for some top-level rows."""

    rep: np.ndarray | None  # uint16 per entry
    defs: np.ndarray  # uint16 raw codes per entry (see module docstring)
    values: pa.Array  # visible slots
    num_rows: int

    @property
    def num_entries(self) -> int:
        """Number of level entries."""
        return len(self.defs)


def leaf_paths(field: LanceField, where: str) -> list[LeafPath]:
    """The leaves under a top-level field, in column order (pre-order)."""
    out: list[LeafPath] = []

    def walk(
        f: LanceField, kinds: tuple[str, ...], name: str, nulls: tuple[bool, ...] = ()
    ) -> None:
        lt = f.logical_type
        if f.is_blob:
            if kinds:
                raise UnsupportedFeatureError(
                    f"{where}: blob field {name!r}: blob columns inside structs or lists "
                    "are not written"
                )
            out.append(LeafPath(f, ("item",), name, (f.nullable,)))
            return
        if lt == "struct" and f.is_packed:
            raise UnsupportedFeatureError(
                f"{where}: packed struct {name!r} is not written in Lance 2.1+ files yet"
            )
        if lt == "struct":
            if not f.children:
                raise UnsupportedFeatureError(
                    f"{where}: struct field {name!r} has no children; Lance 2.1+ files "
                    "cannot store a struct without leaf columns"
                )
            for c in f.children:
                walk(c, (*kinds, "item"), f"{name}.{c.name}", (*nulls, f.nullable))
            return
        if lt in LIST_TYPES:
            child = f.children[0]
            walk(child, (*kinds, "list"), f"{name}.{child.name}", (*nulls, f.nullable))
            return
        _check_leaf_type(f.arrow_type, name, where)
        out.append(LeafPath(f, (*kinds, "item"), name, (*nulls, f.nullable)))

    walk(field, (), field.name)
    return out


def _check_leaf_type(t: pa.DataType, name: str, where: str) -> None:
    if isinstance(t, pa.ExtensionType):
        t = t.storage_type
    if pa.types.is_fixed_size_list(t):
        inner = t.value_type
        if pa.types.is_struct(inner) or pa.types.is_list(inner) or pa.types.is_large_list(inner):
            raise UnsupportedFeatureError(
                f"{where}: field {name!r}: fixed_size_list of {inner} is not written in Lance "
                "2.1+ files"
            )
        _check_leaf_type(inner, name, where)


def valid_mask(arr: pa.Array) -> np.ndarray | None:
    """True where `arr` (any offset) is valid; None when it has no nulls."""
    n = len(arr)
    if arr.null_count == 0:
        return None
    if pa.types.is_null(arr.type) or arr.null_count == n:
        return np.zeros(n, dtype=bool)
    bitmap = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
    bits = np.unpackbits(bitmap, count=arr.offset + n, bitorder="little")
    return bits[arr.offset :].astype(bool)


def _storage(arr: pa.Array) -> pa.Array:
    return arr.storage if isinstance(arr, pa.ExtensionArray) else arr


class _State:
    """Level entries of some rows while descending: rep "depth" code, raw def, position."""

    __slots__ = ("defs", "pos", "reps")

    def __init__(self, reps: np.ndarray | None, defs: np.ndarray, pos: np.ndarray | None) -> None:
        self.reps = reps  # int: 0 = new top-level row, k + 1 = new element of list k
        self.defs = defs  # uint16 raw codes
        self.pos = pos  # int64 position in the current array (-1: no slot); None = identity


def shred(field: LanceField, arr: pa.Array, where: str) -> Iterator[tuple[LeafPath, Shredded]]:
    """The levels and visible values of every leaf under `field` for the rows of `arr`."""
    n = len(arr)
    state = _State(None, np.zeros(n, dtype=np.uint16), None)
    paths = iter(leaf_paths(field, where))
    yield from _walk(field, _storage(arr), state, 0, 0, paths, n)


def _walk(
    f: LanceField,
    arr: pa.Array,
    st: _State,
    depth: int,
    lists: int,
    paths: Iterator[LeafPath],
    num_rows: int,
) -> Iterator[tuple[LeafPath, Shredded]]:
    lt = f.logical_type
    if f.is_blob:  # one column of descriptions (the writer puts the bytes out of line)
        path = next(paths)
        yield path, _finish(path, arr, _apply_nulls(arr, st, depth), num_rows)
        return
    if lt == "struct":
        st = _apply_nulls(arr, st, depth)
        for i, child in enumerate(f.children):
            yield from _walk(child, _storage(arr.field(i)), st, depth + 1, lists, paths, num_rows)
        return
    if lt in LIST_TYPES:
        st = _expand_list(arr, st, depth, lists)
        yield from _walk(
            f.children[0], _storage(arr.values), st, depth + 1, lists + 1, paths, num_rows
        )
        return
    path = next(paths)
    if pa.types.is_dictionary(arr.type):
        # Decoded, so nulls inside the dictionary count as nulls; the page encoder builds
        # each page's dictionary again.
        arr = arr.dictionary_decode()
    if pa.types.is_null(arr.type):
        st_leaf = _State(st.reps, st.defs.copy(), st.pos)
        st_leaf.defs[st_leaf.defs == 0] = 2 * depth + 1
    else:
        st_leaf = _apply_nulls(arr, st, depth)
    yield path, _finish(path, arr, st_leaf, num_rows)


def _apply_nulls(arr: pa.Array, st: _State, depth: int) -> _State:
    """Mark still-valid entries whose slot is null in `arr` as null at `depth`."""
    valid = valid_mask(arr)
    if valid is None:
        return st
    if st.pos is None:
        slot_null = ~valid
    else:
        has = st.pos >= 0
        slot_null = np.zeros(len(st.pos), dtype=bool)
        slot_null[has] = ~valid[st.pos[has]]
    hit = slot_null & (st.defs == 0)
    if not hit.any():
        return st
    defs = st.defs.copy()
    defs[hit] = 2 * depth + 1
    return _State(st.reps, defs, st.pos)


def _expand_list(arr: pa.Array, st: _State, depth: int, lists: int) -> _State:
    """Entries of the list's items: valid non-empty lists expand, the rest stay one entry."""
    n_entries = len(st.defs)
    offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    pos = np.arange(n_entries, dtype=np.int64) if st.pos is None else st.pos
    has = (pos >= 0) & (st.defs == 0)
    valid = valid_mask(arr)
    p = np.where(has, pos, 0)
    lengths = (
        np.where(has, offsets[p + 1] - offsets[p], 0)
        if len(offsets) > 1
        else np.zeros(n_entries, dtype=np.int64)
    )
    defs = st.defs.copy()
    if valid is not None:
        null = has & ~valid[p]
        defs[null] = 2 * depth + 1
        lengths[null] = 0
        has &= ~null
    empty = has & (lengths == 0)
    defs[empty] = 2 * depth + 2
    expands = lengths > 0
    counts = np.where(expands, lengths, 1)
    total = int(counts.sum())
    group_start = np.cumsum(counts) - counts
    within = np.arange(total, dtype=np.int64) - np.repeat(group_start, counts)
    reps_parent = np.zeros(n_entries, dtype=np.uint16) if st.reps is None else st.reps
    new_reps = np.repeat(reps_parent, counts)
    new_reps[within > 0] = lists + 1
    new_defs = np.repeat(defs, counts)
    first = np.repeat(np.where(expands, offsets[p], -1), counts)
    new_pos = np.where(first >= 0, first + within, -1)
    return _State(new_reps, new_defs, new_pos)


def _finish(path: LeafPath, arr: pa.Array, st: _State, num_rows: int) -> Shredded:
    """Final rep numbering and the visible values of one leaf."""
    rep = None
    if st.reps is not None:
        rep = (path.max_rep - st.reps).astype(np.uint16)
    if st.pos is None:
        values = arr
    else:
        visible = st.pos[st.pos >= 0]
        if len(visible) == len(arr) and (len(visible) == 0 or _is_range(visible)):
            values = arr
        else:
            values = arr.take(pa.array(visible, pa.int64()))
    return Shredded(rep, st.defs, values, num_rows)


def _is_range(idx: np.ndarray) -> bool:
    return bool(idx[0] == 0 and idx[-1] == len(idx) - 1 and np.all(np.diff(idx) == 1))


# -- page-time numbering ------------------------------------------------------------------
def seen_codes(path: LeafPath, defs: np.ndarray) -> np.ndarray:
    """Which raw definition codes occur in `defs` (bool per code)."""
    size = 2 * len(path.kinds) + 1
    if not len(defs):
        return np.zeros(size, dtype=bool)
    return np.bincount(defs, minlength=size)[:size] > 0


def layer_kinds(path: LeafPath, seen: np.ndarray) -> list[Layer]:
    """The layers, innermost first, for pages holding the raw codes marked in `seen`."""
    depth = len(path.kinds)
    layers = []
    for d in range(depth - 1, -1, -1):
        null, empty = bool(seen[2 * d + 1]), bool(seen[2 * d + 2])
        if path.kinds[d] == "list":
            # pylance's reader needs a list layer with validity under any null or empty
            # ancestor (it writes them that way too)
            null = null or bool(seen[1 : 2 * d + 1].any())
            if null and empty:
                layers.append(Layer.NULL_AND_EMPTY_LIST)
            elif null:
                layers.append(Layer.NULLABLE_LIST)
            elif empty:
                layers.append(Layer.EMPTYABLE_LIST)
            else:
                layers.append(Layer.ALL_VALID_LIST)
        else:
            # pylance pushes a struct's nulls down into what it holds: an item layer under
            # a null struct (no list between them) is nullable too, or pylance's reader of
            # the leaf alone would see values where the struct is null
            for above in range(d - 1, -1, -1):
                if null or path.kinds[above] == "list":
                    break
                null = bool(seen[2 * above + 1])
            layers.append(Layer.NULLABLE_ITEM if null else Layer.ALL_VALID_ITEM)
    return layers


def def_table(path: LeafPath, layers: list[Layer]) -> np.ndarray:
    """Raw code -> the file's definition level, for a page with `layers` (innermost first)."""
    depth = len(path.kinds)
    table = np.zeros(2 * depth + 1, dtype=np.uint16)
    level = 0
    for i, layer in enumerate(layers):
        d = depth - 1 - i
        if layer in (Layer.NULLABLE_ITEM, Layer.NULLABLE_LIST):
            table[2 * d + 1] = level + 1
            level += 1
        elif layer == Layer.EMPTYABLE_LIST:
            table[2 * d + 2] = level + 1
            level += 1
        elif layer == Layer.NULL_AND_EMPTY_LIST:
            table[2 * d + 1] = level + 1
            table[2 * d + 2] = level + 2
            level += 2
    return table


def visible(path: LeafPath, defs: np.ndarray) -> np.ndarray:
    """Which entries have a value slot: valid, or null below the innermost list."""
    last_list = max((d for d, k in enumerate(path.kinds) if k == "list"), default=-1)
    if last_list < 0:
        return np.ones(len(defs), dtype=bool)
    return (defs == 0) | (defs > 2 * last_list + 2)


def concat(pieces: list[Shredded]) -> Shredded:
    """One `Shredded` of consecutive pieces."""
    if len(pieces) == 1:
        return pieces[0]
    rep = None if pieces[0].rep is None else np.concatenate([p.rep for p in pieces])
    defs = np.concatenate([p.defs for p in pieces])
    values = pa.concat_arrays([p.values for p in pieces])
    return Shredded(rep, defs, values, sum(p.num_rows for p in pieces))


def slice_rows(sh: Shredded, path: LeafPath, start: int, stop: int) -> Shredded:
    """Rows [start, stop) of a shredded piece."""
    if sh.rep is None:
        return Shredded(
            None, sh.defs[start:stop], sh.values.slice(start, stop - start), stop - start
        )
    row_starts = np.flatnonzero(sh.rep == path.max_rep)
    e0 = int(row_starts[start]) if start < sh.num_rows else sh.num_entries
    e1 = int(row_starts[stop]) if stop < sh.num_rows else sh.num_entries
    vis = visible(path, sh.defs)
    v0 = int(np.count_nonzero(vis[:e0]))
    v1 = v0 + int(np.count_nonzero(vis[e0:e1]))
    return Shredded(sh.rep[e0:e1], sh.defs[e0:e1], sh.values.slice(v0, v1 - v0), stop - start)
