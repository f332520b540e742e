"""`pyarrow.compute.Expression` filters -> pylance SQL, so both kinds of filter share one
binder and one set of semantics.

pylance sends an Expression filter to DataFusion through Substrait: its literals keep their
Arrow types (`pc.field("i8") == 1000` is simply false, where the SQL `i8 = 1000` is
refused), and DataFusion's coercion and comparison rules apply. Here the expression's tree
is read from its Arrow serialisation (the format `pickle` uses: an IPC file whose schema
metadata lists the nodes in prefix order and whose columns hold the literals and function
options) and written out as SQL in which every literal is a CAST to its Arrow type, so no
SQL literal resolution happens and the binder coerces as DataFusion does.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.errors import FilterSyntaxError

_COMPARE = {
    "equal": "=",
    "not_equal": "<>",
    "less": "<",
    "less_equal": "<=",
    "greater": ">",
    "greater_equal": ">=",
}
_ARITHMETIC = {
    "add": "+",
    "add_checked": "+",
    "subtract": "-",
    "subtract_checked": "-",
    "multiply": "*",
    "multiply_checked": "*",
    "divide": "/",
    "divide_checked": "/",
}
_LOGIC = {"and_kleene": "AND", "and": "AND", "or_kleene": "OR", "or": "OR"}
_UNITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


@dataclass(frozen=True)
class _Node:
    kind: str  # "literal", "field" or "call"
    value: Any = None  # a Scalar, a field path, or a function name
    args: tuple[_Node, ...] = ()
    options: pa.StructScalar | None = None


def expression_to_sql(expression: pc.Expression, *, dataset: str | None = None) -> str:
    """The pylance SQL filter computing what `expression` does (as pylance evaluates it)."""
    where = f" on dataset {dataset!r}" if dataset else ""
    try:
        node = _read(expression)
    except (pa.ArrowException, ValueError, KeyError, IndexError) as e:
        raise FilterSyntaxError(f"cannot read the pyarrow expression {expression}: {e}") from None
    try:
        return _sql(node)
    except _Unsupported as e:
        raise FilterSyntaxError(
            f"filter expression {expression}{where}: {e} is not supported in filters"
        ) from None


class _Unsupported(Exception):
    pass


def _read(expression: pc.Expression) -> _Node:
    """The expression's tree, from its serialisation."""
    _, (buffer,) = expression.__reduce__()
    table = pa.ipc.open_file(buffer).read_all()
    # pyarrow shows schema metadata as a dict, which drops repeated keys: read the pairs
    items = _metadata_pairs(buffer.to_pybytes())
    values = [column[0] for column in table.columns]
    node, end = _parse(items, 0, values)
    if end != len(items):
        raise ValueError("trailing nodes in the serialised expression")
    return node


def _metadata_pairs(data: bytes) -> list[tuple[bytes, bytes]]:
    """The schema metadata of an Arrow IPC file, every pair in order, read from the
    file's footer (flatbuffers: Footer.schema -> Schema.custom_metadata -> KeyValue)."""

    def u32(at: int) -> int:
        return struct.unpack_from("<I", data, at)[0]

    def field(table: int, index: int) -> int | None:
        """Where field `index` of the table at `table` is stored, or None if absent."""
        vtable = table - struct.unpack_from("<i", data, table)[0]
        size = struct.unpack_from("<H", data, vtable)[0]
        if 4 + 2 * index >= size:
            return None
        offset = struct.unpack_from("<H", data, vtable + 4 + 2 * index)[0]
        return table + offset if offset else None

    def ref(at: int) -> int:
        return at + u32(at)

    def text(at: int) -> bytes:
        start = ref(at)
        return data[start + 4 : start + 4 + u32(start)]

    if data[-6:] != b"ARROW1":
        raise ValueError("not an Arrow IPC file")
    footer_len = struct.unpack_from("<i", data, len(data) - 10)[0]
    footer_start = len(data) - 10 - footer_len
    footer = footer_start + u32(footer_start)
    schema_at = field(footer, 1)
    if schema_at is None:
        raise ValueError("the IPC footer has no schema")
    metadata_at = field(ref(schema_at), 2)
    if metadata_at is None:
        return []
    vector = ref(metadata_at)
    pairs = []
    for i in range(u32(vector)):
        slot = vector + 4 + 4 * i
        pair = ref(slot)
        key_at, value_at = field(pair, 0), field(pair, 1)
        key = text(key_at) if key_at is not None else b""
        value = text(value_at) if value_at is not None else b""
        pairs.append((key, value))
    return pairs


def _parse(items: list[tuple[bytes, bytes]], pos: int, values: list[pa.Scalar]) -> tuple:
    key, value = items[pos][0].decode(), items[pos][1].decode()
    if key == "literal":
        return _Node("literal", values[int(value)]), pos + 1
    if key == "field_ref":
        return _Node("field", (value,)), pos + 1
    if key == "nested_field_ref":
        count = int(value)
        path = tuple(items[pos + 1 + i][1].decode() for i in range(count))
        return _Node("field", path), pos + 1 + count
    if key != "call":
        raise ValueError(f"unexpected {key!r} in the serialised expression")
    pos += 1
    args: list[_Node] = []
    options = None
    while not (items[pos][0] == b"end" and items[pos][1].decode() == value):
        if items[pos][0] == b"options":
            options = values[int(items[pos][1])]
            pos += 1
        else:
            arg, pos = _parse(items, pos, values)
            args.append(arg)
    return _Node("call", value, tuple(args), options), pos + 1


def _identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_type(t: pa.DataType) -> str:
    """The SQL type a CAST to `t` names (what `types.sql_type_to_arrow` maps back)."""
    simple = {
        pa.int8(): "TINYINT",
        pa.int16(): "SMALLINT",
        pa.int32(): "INT",
        pa.int64(): "BIGINT",
        pa.uint8(): "TINYINT UNSIGNED",
        pa.uint16(): "SMALLINT UNSIGNED",
        pa.uint32(): "INT UNSIGNED",
        pa.uint64(): "BIGINT UNSIGNED",
        pa.float32(): "FLOAT",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
        pa.string(): "STRING",
        pa.large_string(): "STRING",
        pa.binary(): "BINARY",
        pa.large_binary(): "BINARY",
        pa.date32(): "DATE",
    }
    if t in simple:
        return simple[t]
    if pa.types.is_timestamp(t) and t.tz is None:
        return f"TIMESTAMP({_UNITS[t.unit]})"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision}, {t.scale})"
    raise _Unsupported(f"the type {t}")


def _literal(value: pa.Scalar) -> str:
    t = value.type
    if pa.types.is_null(t):
        return "NULL"
    if not value.is_valid:
        return f"CAST(NULL AS {_sql_type(t)})"
    py = value.as_py()
    if pa.types.is_boolean(t):
        return "TRUE" if py else "FALSE"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _string(py)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return f"X'{py.hex()}'"
    if pa.types.is_integer(t):
        return f"CAST({py} AS {_sql_type(t)})"
    if pa.types.is_floating(t):
        text = repr(float(py)) if not (math.isnan(py) or math.isinf(py)) else None
        if text is None:
            return f"CAST({_string(str(py))} AS {_sql_type(t)})"
        return f"CAST({text} AS {_sql_type(t)})"
    if pa.types.is_decimal(t):
        return f"CAST({_string(str(py))} AS {_sql_type(t)})"
    if pa.types.is_date32(t):
        return f"CAST({_string(py.isoformat())} AS DATE)"
    if pa.types.is_timestamp(t) and t.tz is None:
        text = value.cast(pa.string()).as_py() if t.unit == "ns" else py.isoformat()
        return f"CAST({_string(text)} AS {_sql_type(t)})"
    if isinstance(py, dt.date):
        return f"CAST({_string(py.isoformat())} AS {_sql_type(t)})"
    raise _Unsupported(f"the literal {value} ({t})")


def _sql(node: _Node) -> str:
    if node.kind == "literal":
        return _literal(node.value)
    if node.kind == "field":
        return ".".join(_identifier(p) for p in node.value)
    name, args = node.value, [_sql(a) for a in node.args]
    options = node.options.as_py() if node.options is not None else {}
    if name in _COMPARE and len(args) == 2:
        return f"({args[0]} {_COMPARE[name]} {args[1]})"
    if name in _ARITHMETIC and len(args) == 2:
        return f"({args[0]} {_ARITHMETIC[name]} {args[1]})"
    if name in _LOGIC and len(args) == 2:
        return f"({args[0]} {_LOGIC[name]} {args[1]})"
    if name == "invert" and len(args) == 1:
        return f"(NOT {args[0]})"
    if name in ("negate", "negate_checked") and len(args) == 1:
        return f"(- {args[0]})"
    if name in ("abs", "abs_checked") and len(args) == 1:
        return f"abs({args[0]})"
    if name == "is_null" and len(args) == 1:
        if options.get("nan_is_null"):
            return f"({args[0]} IS NULL OR isnan({args[0]}))"
        return f"({args[0]} IS NULL)"
    if name == "is_valid" and len(args) == 1:
        return f"({args[0]} IS NOT NULL)"
    if name == "is_nan" and len(args) == 1:
        return f"isnan({args[0]})"
    if name == "is_in" and len(args) == 1:
        # a NULL in the set makes a non-match NULL, as in DataFusion's IN list
        items = [_literal(v) for v in pa.array(options["value_set"])]
        if not items:
            raise _Unsupported("is_in with an empty value set")
        return f"({args[0]} IN ({', '.join(items)}))"
    if name in ("starts_with", "ends_with") and len(args) == 1:
        if options.get("ignore_case"):
            raise _Unsupported(f"{name} ignoring case")
        return f"{name}({args[0]}, {_string(options['pattern'])})"
    if name == "match_substring" and len(args) == 1:
        if options.get("ignore_case"):
            raise _Unsupported(f"{name} ignoring case")
        return f"strpos({args[0]}, {_string(options['pattern'])}) > 0"
    if name == "cast" and len(args) == 1:
        return f"CAST({args[0]} AS {_sql_type(_cast_target(node))})"
    if name == "coalesce" and args:
        return f"coalesce({', '.join(args)})"
    if name == "if_else" and len(args) == 3:
        return f"(CASE WHEN {args[0]} THEN {args[1]} ELSE {args[2]} END)"
    raise _Unsupported(f"the function {name}")


def _cast_target(node: _Node) -> pa.DataType:
    """The target type of a serialised cast: the type of its options' `to_type` field."""
    if node.options is None or node.options.type.get_field_index("to_type") < 0:
        raise _Unsupported("a cast whose target type cannot be read")
    return node.options.type.field("to_type").type
