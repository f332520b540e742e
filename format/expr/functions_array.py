"""List functions pylance accepts (array_has / array_contains, array_has_any,
array_has_all, array_length / cardinality) and regexp_match as a value (the list of its
capture groups).

A test per list row needs a reduction over each row's items, which no Arrow kernel does
inside an expression, so these run as vectorised compute functions registered on first
use (numpy over the flattened items and their parent rows; no per-row Python).
`ArrayFunctions` is a part of `format.expr.bind.Binder`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from quiver.format.expr import types as T
from quiver.format.expr.typed import Typed, const


def register_function(name: str, fn, in_types: dict[str, pa.DataType], out: pa.DataType) -> str:
    """Register a vectorised scalar compute function once (per process) and return its name."""
    if name not in pc.list_functions():
        try:
            pc.register_scalar_function(
                lambda _ctx, *args: fn(*args),
                name,
                {"summary": name, "description": ""},
                in_types,
                out,
            )
        except pa.ArrowKeyError:  # another thread registered it first
            pass
    return name


def _list_test(mode: str, lists: pa.Array, needles: pa.Scalar) -> pa.Array:
    """Per list row: holds any / all of `needles`' items (NULL for a NULL row)."""
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    wanted = pc.unique(needles.values.drop_null()) if needles.is_valid else pa.array([])
    n = len(lists)
    flat = pc.list_flatten(lists)
    parents = np.asarray(pc.list_parent_indices(lists), dtype=np.int64)
    where = np.asarray(pc.index_in(flat, value_set=wanted.cast(flat.type)).fill_null(-1))
    hit = where >= 0
    if mode == "any":
        result = np.bincount(parents[hit], minlength=n) > 0
    else:
        # distinct needles found per row: unique (row, needle) pairs
        pairs = np.unique(parents[hit] * max(len(wanted), 1) + where[hit])
        found = np.bincount(pairs // max(len(wanted), 1), minlength=n)
        result = found >= len(wanted)
    return pa.array(result, pa.bool_(), mask=np.asarray(lists.is_null()))


def _group_names(pattern: str) -> tuple[str, int]:
    """`pattern` with its capture groups named g0, g1, ... (a pattern without any captures
    the whole match), and how many there are."""
    out, count, i, in_class = [], 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(" and not pattern.startswith("(?", i):
            out.append(f"(?P<g{count}>")
            count += 1
            i += 1
            continue
        elif pattern.startswith("(?P<", i):
            raise ValueError("named groups are not supported in regexp_match")
        out.append(c)
        i += 1
    if count == 0:
        return f"(?P<g0>{pattern})", 1
    return "".join(out), count


def _regexp_match(values: pa.Array, pattern: pa.Scalar) -> pa.Array:
    """The capture groups of the first match of each row (NULL where none matches)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    named, count = _group_names(pattern.as_py())
    groups = pc.extract_regex(values, pattern=named)
    n = len(values)
    items = (
        pa.concat_arrays([groups.field(k) for k in range(count)])
        if n
        else pa.array([], pa.string())
    )
    # item j of row r sits at j * n + r: reorder row-major
    order = (np.arange(count)[None, :] * n + np.arange(n)[:, None]).reshape(-1)
    offsets = pa.array(np.arange(0, n * count + 1, count, dtype=np.int32))
    mask = np.asarray(groups.is_null())
    lists = pa.ListArray.from_arrays(
        offsets, items.take(pa.array(order, pa.int64())).cast(pa.string())
    )
    return pc.if_else(pa.array(mask), pa.scalar(None, lists.type), lists)


class ArrayFunctions:
    """Binding of list functions and regexp_match's list value (a Binder part)."""

    # value expressions bind regexp_match to its matches; filters to "has a match"
    regexp_match_lists = False

    def _array_function(self, node: exp.Expression) -> Typed | None:
        """The bound call, or None when `node` is not one of these functions."""
        name = str(node.this).lower() if isinstance(node, exp.Anonymous) else None
        args = node.expressions if isinstance(node, exp.Anonymous) else []
        if isinstance(node, exp.ArrayContains):
            return self._list_test("any", node.this, [node.expression], "array_has")
        if isinstance(node, exp.ArrayContainsAll):
            return self._list_test("all", node.this, self._items(node.expression), "array_has_all")
        if name in ("array_has_any", "array_has_all") and len(args) == 2:
            mode = "any" if name == "array_has_any" else "all"
            return self._list_test(mode, args[0], self._items(args[1]), name)
        if isinstance(node, exp.ArraySize) or (name == "cardinality" and len(args) == 1):
            x = self.bind(node.this if isinstance(node, exp.ArraySize) else args[0])
            if not (
                pa.types.is_list(x.type)
                or pa.types.is_large_list(x.type)
                or pa.types.is_fixed_size_list(x.type)
            ):
                raise self.bind_error(f"array_length needs a list, got {x.type}")
            return self._call(pc.list_value_length, [x], pa.uint64(), sql="array_length")
        return None

    def _items(self, node: exp.Expression) -> list[exp.Expression]:
        if isinstance(node, exp.Array):
            return list(node.expressions)
        if isinstance(node, exp.Anonymous) and str(node.this).lower() == "make_array":
            return list(node.expressions)
        raise self.unsupported("a list argument that is not a list of constants")

    def _list_test(
        self, mode: str, subject: exp.Expression, items: list[exp.Expression], fn: str
    ) -> Typed:
        lists = self.bind(subject)
        if not (pa.types.is_list(lists.type) or pa.types.is_large_list(lists.type)):
            raise self.bind_error(f"{fn} needs a list, got {lists.sql or 'a value'} ({lists.type})")
        item_type = lists.type.value_type
        values = []
        for item in items:
            value = self.bind(item)
            if not value.const:
                raise self.unsupported(f"{fn} with values that are not constants")
            if T.comparison_type(item_type, value.type) is None:
                raise self.bind_error(
                    f"{fn}: cannot look for {value.type} in a list of {item_type}"
                )
            values.append(self._cast(value, item_type).value)
        needles = pa.scalar(values, pa.list_(item_type))
        if lists.const:
            array = pa.array([lists.value.as_py()], lists.type)
            return const(_list_test(mode, array, needles)[0], fn)
        name = register_function(
            f"quiver_list_has_{mode}_{lists.type}",
            lambda xs, ns: _list_test(mode, xs, ns),
            {"lists": lists.type, "needles": pa.list_(item_type)},
            pa.bool_(),
        )
        expr = pc.Expression._call(name, [lists.expr, pc.scalar(needles)])
        return Typed(type=pa.bool_(), expr=expr, sql=fn)

    def _regexp_match_list(self, subject: exp.Expression, pattern_node: exp.Expression) -> Typed:
        """regexp_match as a value: list<string> of the first match's groups, or NULL."""
        x = self._string_operand(subject, "regexp_match")
        pattern = self._string_arg(pattern_node, "regexp_match")
        out = pa.list_(pa.string())
        if pattern is None or x.is_null_const:
            return const(pa.scalar(None, out))
        try:
            _group_names(pattern)
            pc.extract_regex(pa.array([], pa.string()), pattern=_group_names(pattern)[0])
        except (ValueError, pa.ArrowInvalid) as e:
            raise self.bind_error(f"invalid regular expression {pattern!r}: {e}") from None
        x = self._cast(x, pa.string())
        if x.const:
            return const(_regexp_match(pa.array([x.value.as_py()]), pa.scalar(pattern))[0])
        name = register_function(
            "quiver_regexp_match",
            _regexp_match,
            {"values": pa.string(), "pattern": pa.string()},
            out,
        )
        expr = pc.Expression._call(name, [x.expr, pc.scalar(pattern)])
        return Typed(type=out, expr=expr, sql="regexp_match")
