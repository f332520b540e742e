"""Arrow schemas as the namespace specification's ``JsonArrowSchema``.

The form is the one pylance's reference adapter answers DescribeTable with: fields with
``name``, ``nullable``, ``type`` (``{"type": name, "fields"?: [...], "length"?: n}``) and
``metadata`` when present. Fixed sizes travel in ``length`` (decimals as precision * 1000 +
scale, as the reference sends them); time units and zones are not part of the form.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.types as pt

_SIMPLE: list[tuple[Any, str]] = [
    (pt.is_null, "null"),
    (pt.is_boolean, "bool"),
    (pt.is_int8, "int8"),
    (pt.is_int16, "int16"),
    (pt.is_int32, "int32"),
    (pt.is_int64, "int64"),
    (pt.is_uint8, "uint8"),
    (pt.is_uint16, "uint16"),
    (pt.is_uint32, "uint32"),
    (pt.is_uint64, "uint64"),
    (pt.is_float16, "float16"),
    (pt.is_float32, "float32"),
    (pt.is_float64, "float64"),
    (pt.is_string, "utf8"),
    (pt.is_string_view, "utf8"),
    (pt.is_large_string, "large_utf8"),
    (pt.is_binary, "binary"),
    (pt.is_binary_view, "binary"),
    (pt.is_large_binary, "large_binary"),
    (pt.is_date32, "date32"),
    (pt.is_date64, "date64"),
    (pt.is_timestamp, "timestamp"),
    (pt.is_time32, "time32"),
    (pt.is_time64, "time64"),
    (pt.is_duration, "duration"),
]


def schema_json(schema: pa.Schema) -> dict[str, Any]:
    """`schema` as a JsonArrowSchema."""
    out: dict[str, Any] = {"fields": [field_json(f) for f in schema]}
    if schema.metadata:
        out["metadata"] = _text_map(schema.metadata)
    return out


def field_json(field: pa.Field) -> dict[str, Any]:
    """One field as a JsonArrowField."""
    out: dict[str, Any] = {"name": field.name, "nullable": field.nullable}
    out["type"] = type_json(field.type)
    if field.metadata:
        out["metadata"] = _text_map(field.metadata)
    return out


def type_json(t: pa.DataType) -> dict[str, Any]:
    """One type as a JsonArrowDataType."""
    if pt.is_dictionary(t):
        return type_json(t.value_type)
    for test, name in _SIMPLE:
        if test(t):
            return {"type": name}
    if pt.is_fixed_size_binary(t) and not pt.is_decimal(t):
        return {"type": "fixed_size_binary", "length": t.byte_width}
    if pt.is_decimal(t):
        return {"type": f"decimal{t.bit_width}", "length": t.precision * 1000 + t.scale}
    if pt.is_map(t):
        entries = pa.field(
            "entries",
            pa.struct([t.key_field, t.item_field]),
            nullable=False,
        )
        return {"type": "map", "fields": [field_json(entries)]}
    if pt.is_fixed_size_list(t):
        return {
            "type": "fixed_size_list",
            "length": t.list_size,
            "fields": [field_json(t.value_field)],
        }
    if pt.is_large_list(t) or pt.is_large_list_view(t):
        return {"type": "large_list", "fields": [field_json(t.value_field)]}
    if pt.is_list(t) or pt.is_list_view(t):
        return {"type": "list", "fields": [field_json(t.value_field)]}
    if pt.is_struct(t):
        return {"type": "struct", "fields": [field_json(t.field(i)) for i in range(t.num_fields)]}
    return {"type": str(t)}


def _text_map(metadata: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in metadata.items()}
