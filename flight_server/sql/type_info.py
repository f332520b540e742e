"""Flight SQL's `CommandGetXdbcTypeInfo`: the SQL types a query can name and a table can
hold, as JDBC's `DatabaseMetaData.getTypeInfo` and ODBC's `SQLGetTypeInfo` list them.

One row per type DataFusion (the SQL engine) and Lance datasets both have: booleans,
signed and unsigned integers, floats, decimals, text, binaries, dates, times and
timestamps, with the XDBC codes of the specification (dates and times are XDBC_DATETIME
with a subcode in `sql_data_type`), ordered by data type, then name.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["TYPE_INFO_SCHEMA", "type_info_table"]

_STR, _I32, _BOOL = pa.string(), pa.int32(), pa.bool_()
TYPE_INFO_SCHEMA = pa.schema(
    [
        pa.field("type_name", _STR, False),
        pa.field("data_type", _I32, False),
        pa.field("column_size", _I32),
        pa.field("literal_prefix", _STR),
        pa.field("literal_suffix", _STR),
        pa.field("create_params", pa.list_(pa.field("item", _STR, False))),
        pa.field("nullable", _I32, False),
        pa.field("case_sensitive", _BOOL, False),
        pa.field("searchable", _I32, False),
        pa.field("unsigned_attribute", _BOOL),
        pa.field("fixed_prec_scale", _BOOL, False),
        pa.field("auto_increment", _BOOL),
        pa.field("local_type_name", _STR),
        pa.field("minimum_scale", _I32),
        pa.field("maximum_scale", _I32),
        pa.field("sql_data_type", _I32, False),
        pa.field("datetime_subcode", _I32),
        pa.field("num_prec_radix", _I32),
        pa.field("interval_precision", _I32),
    ]
)

# XdbcDataType codes
_BIT, _TINYINT, _BIGINT, _VARBINARY = -7, -6, -5, -3
_DECIMAL, _INTEGER, _SMALLINT, _REAL, _DOUBLE, _DATETIME, _VARCHAR = 3, 4, 5, 7, 8, 9, 12
_DATE, _TIME, _TIMESTAMP = 91, 92, 93
_NULLABLE = 1  # Nullable.NULLABILITY_NULLABLE
_SEARCHABLE_BASIC, _SEARCHABLE_FULL = 2, 3
_MAX_LENGTH = 2**31 - 1


def _row(
    name: str,
    code: int,
    size: int | None,
    *,
    radix: int | None = None,
    unsigned: bool | None = None,
    prefix: str | None = None,
    params: list[str] | None = None,
    scale: tuple[int, int] | None = None,
    subcode: int | None = None,
    text: bool = False,
) -> dict:
    numeric = radix is not None
    return {
        "type_name": name,
        "data_type": code,
        "column_size": size,
        "literal_prefix": prefix,
        "literal_suffix": "'" if prefix else None,
        "create_params": params,
        "nullable": _NULLABLE,
        "case_sensitive": text,
        "searchable": _SEARCHABLE_FULL if text else _SEARCHABLE_BASIC,
        "unsigned_attribute": bool(unsigned) if numeric else None,
        "fixed_prec_scale": False,
        "auto_increment": False if numeric else None,
        "local_type_name": name,
        "minimum_scale": scale[0] if scale else None,
        "maximum_scale": scale[1] if scale else None,
        "sql_data_type": _DATETIME if subcode is not None else code,
        "datetime_subcode": subcode,
        "num_prec_radix": radix,
        "interval_precision": None,
    }


_TYPES = [
    _row("BOOLEAN", _BIT, 1),
    _row("TINYINT", _TINYINT, 3, radix=10),
    _row("TINYINT UNSIGNED", _TINYINT, 3, radix=10, unsigned=True),
    _row("BIGINT", _BIGINT, 19, radix=10),
    _row("BIGINT UNSIGNED", _BIGINT, 20, radix=10, unsigned=True),
    _row("BYTEA", _VARBINARY, _MAX_LENGTH, prefix="X'"),  # DataFusion's binary
    _row("DECIMAL", _DECIMAL, 38, radix=10, params=["precision", "scale"], scale=(0, 38)),
    _row("INTEGER", _INTEGER, 10, radix=10),
    _row("INTEGER UNSIGNED", _INTEGER, 10, radix=10, unsigned=True),
    _row("SMALLINT", _SMALLINT, 5, radix=10),
    _row("SMALLINT UNSIGNED", _SMALLINT, 5, radix=10, unsigned=True),
    _row("REAL", _REAL, 24, radix=2),
    _row("DOUBLE", _DOUBLE, 53, radix=2),
    _row("VARCHAR", _VARCHAR, _MAX_LENGTH, prefix="'", text=True),
    _row("DATE", _DATE, 10, prefix="DATE '", subcode=1),
    _row("TIME", _TIME, 18, prefix="TIME '", scale=(0, 9), subcode=2),
    _row("TIMESTAMP", _TIMESTAMP, 29, prefix="TIMESTAMP '", scale=(0, 9), subcode=3),
]
_TYPES.sort(key=lambda r: (r["data_type"], r["type_name"]))


def type_info_table(data_type: int | None = None) -> pa.Table:
    """Every type (or those of XDBC code `data_type`), in the specification's order."""
    rows = [r for r in _TYPES if data_type is None or r["data_type"] == data_type]
    return pa.Table.from_pylist(rows, schema=TYPE_INFO_SCHEMA)
