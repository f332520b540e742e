"""Flight SQL's metadata commands: server information, catalogs, schemas, tables, keys,
types.

Each answer is one Arrow table in the exact schema the specification gives (nullability
included: ADBC's driver compares the schemas field by field, and panics on a SqlInfo value
of the wrong union member). Datasets the caller may not read are not listed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from quiver.flight_server.errors import InvalidArgument, NotFound
from quiver.flight_server.sql.catalog import CATALOG, dataset_names, schemas_of, split_name
from quiver.flight_server.sql.messages import sql
from quiver.flight_server.sql.type_info import type_info_table
from quiver.format.dataset.merge_insert import primary_key

if TYPE_CHECKING:
    from quiver.flight_server.service import DatasetService

_STR = pa.string()
CATALOGS_SCHEMA = pa.schema([pa.field("catalog_name", _STR, False)])
DB_SCHEMAS_SCHEMA = pa.schema(
    [pa.field("catalog_name", _STR), pa.field("db_schema_name", _STR, False)]
)
TABLES_SCHEMA = pa.schema(
    [
        pa.field("catalog_name", _STR),
        pa.field("db_schema_name", _STR),
        pa.field("table_name", _STR, False),
        pa.field("table_type", _STR, False),
    ]
)
TABLES_WITH_SCHEMA = TABLES_SCHEMA.append(pa.field("table_schema", pa.binary(), False))
TABLE_TYPES_SCHEMA = pa.schema([pa.field("table_type", _STR, False)])
PRIMARY_KEYS_SCHEMA = pa.schema(
    [
        pa.field("catalog_name", _STR),
        pa.field("db_schema_name", _STR),
        pa.field("table_name", _STR, False),
        pa.field("column_name", _STR, False),
        pa.field("key_sequence", pa.int32(), False),
        pa.field("key_name", _STR),
    ]
)
FOREIGN_KEYS_SCHEMA = pa.schema(
    [
        pa.field("pk_catalog_name", _STR),
        pa.field("pk_db_schema_name", _STR),
        pa.field("pk_table_name", _STR, False),
        pa.field("pk_column_name", _STR, False),
        pa.field("fk_catalog_name", _STR),
        pa.field("fk_db_schema_name", _STR),
        pa.field("fk_table_name", _STR, False),
        pa.field("fk_column_name", _STR, False),
        pa.field("key_sequence", pa.int32(), False),
        pa.field("fk_key_name", _STR),
        pa.field("pk_key_name", _STR),
        pa.field("update_rule", pa.uint8(), False),
        pa.field("delete_rule", pa.uint8(), False),
    ]
)
_INFO_MEMBERS = [
    pa.field("string_value", _STR),
    pa.field("bool_value", pa.bool_()),
    pa.field("bigint_value", pa.int64()),
    pa.field("int32_bitmask", pa.int32()),
    pa.field("string_list", pa.list_(_STR)),
    pa.field("int32_to_int32_list_map", pa.map_(pa.int32(), pa.list_(pa.int32()))),
]
SQL_INFO_SCHEMA = pa.schema(
    [
        pa.field("info_name", pa.uint32(), False),
        pa.field("value", pa.dense_union(_INFO_MEMBERS, type_codes=list(range(6))), False),
    ]
)
TABLE_TYPE = "TABLE"
# the Substrait version the SQL engine (DataFusion) writes and reads; a test checks it
SUBSTRAIT_VERSION = "0.85.0"


def _sql_info_values(version: str) -> dict[int, Any]:
    """SqlInfo id -> value: str (string_value), bool, int (bigint_value), `Bitmask`
    (int32_bitmask), list[str] (string_list)."""
    return {
        0: "quiver",  # FLIGHT_SQL_SERVER_NAME
        1: version,  # FLIGHT_SQL_SERVER_VERSION
        2: pa.__version__,  # FLIGHT_SQL_SERVER_ARROW_VERSION
        3: False,  # FLIGHT_SQL_SERVER_READ_ONLY
        4: True,  # FLIGHT_SQL_SERVER_SQL
        5: True,  # FLIGHT_SQL_SERVER_SUBSTRAIT: query plans
        6: SUBSTRAIT_VERSION,  # FLIGHT_SQL_SERVER_SUBSTRAIT_MIN_SPEC_VERSION
        7: SUBSTRAIT_VERSION,  # FLIGHT_SQL_SERVER_SUBSTRAIT_MAX_SPEC_VERSION
        8: Bitmask(0),  # FLIGHT_SQL_SERVER_TRANSACTION: none
        9: True,  # FLIGHT_SQL_SERVER_CANCEL
        10: True,  # FLIGHT_SQL_SERVER_BULK_INGESTION
        11: False,  # FLIGHT_SQL_SERVER_INGEST_TRANSACTIONS_SUPPORTED
        100: Bitmask(0),  # FLIGHT_SQL_SERVER_STATEMENT_TIMEOUT: none
        101: Bitmask(0),  # FLIGHT_SQL_SERVER_TRANSACTION_TIMEOUT: none
        500: False,  # SQL_DDL_CATALOG
        501: False,  # SQL_DDL_SCHEMA
        502: False,  # SQL_DDL_TABLE (tables are created by ingest)
        503: 1,  # SQL_IDENTIFIER_CASE: lower case (unquoted names are folded)
        504: '"',  # SQL_IDENTIFIER_QUOTE_CHAR
        505: 0,  # SQL_QUOTED_IDENTIFIER_CASE: case sensitive
        506: True,  # SQL_ALL_TABLES_ARE_SELECTABLE (only readable ones are listed)
        507: 2,  # SQL_NULL_ORDERING: nulls at the end (ascending default)
        513: "\\",  # SQL_SEARCH_STRING_ESCAPE
        515: True,  # SQL_SUPPORTS_COLUMN_ALIASING
        516: True,  # SQL_NULL_PLUS_NULL_IS_NULL
        518: True,  # SQL_SUPPORTS_TABLE_CORRELATION_NAMES
        520: True,  # SQL_SUPPORTS_EXPRESSIONS_IN_ORDER_BY
        521: True,  # SQL_SUPPORTS_ORDER_BY_UNRELATED
        522: Bitmask(3),  # SQL_SUPPORTED_GROUP_BY: unrelated and beyond select
        523: True,  # SQL_SUPPORTS_LIKE_ESCAPE_CLAUSE
        524: True,  # SQL_SUPPORTS_NON_NULLABLE_COLUMNS
        529: "schema",  # SQL_SCHEMA_TERM
        531: "catalog",  # SQL_CATALOG_TERM
        532: True,  # SQL_CATALOG_AT_START
    }


class Bitmask(int):
    """A SqlInfo value sent as the union's int32 member."""


def sql_info_table(requested: Iterable[int], version: str) -> pa.Table:
    """The SqlInfo rows asked for (all known ones when none are), in the order asked."""
    values = _sql_info_values(version)
    ids = [i for i in requested if i in values] if requested else sorted(values)
    children: list[list[Any]] = [[] for _ in _INFO_MEMBERS]
    types, offsets = [], []
    for i in ids:
        value = values[i]
        if isinstance(value, str):
            code = 0
        elif isinstance(value, bool):
            code = 1
        elif isinstance(value, Bitmask):
            code, value = 3, int(value)
        elif isinstance(value, int):
            code = 2
        else:
            code = 4
        types.append(code)
        offsets.append(len(children[code]))
        children[code].append(value)
    union = pa.UnionArray.from_dense(
        pa.array(types, pa.int8()),
        pa.array(offsets, pa.int32()),
        [pa.array(c, f.type) for c, f in zip(children, _INFO_MEMBERS, strict=True)],
        [f.name for f in _INFO_MEMBERS],
        list(range(6)),
    )
    return pa.table([pa.array(ids, pa.uint32()), union], schema=SQL_INFO_SCHEMA)


def like(pattern: str | None) -> Callable[[str], bool]:
    """A test for SQL LIKE `pattern` (`%`, `_`, `\\` escapes); everything without one."""
    if pattern is None:
        return lambda _: True
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    regex = re.compile("".join(out), re.DOTALL)
    return lambda name: regex.fullmatch(name) is not None


def _catalog_matches(catalog: str | None) -> bool:
    return catalog is None or catalog in ("", CATALOG)


class Metadata:
    """Answers the metadata commands for one caller."""

    def __init__(self, service: DatasetService, identity: Any, version: str) -> None:
        self.service = service
        self.identity = identity
        self.version = version

    def answer(self, command: Any) -> pa.Table:
        """The result table of a metadata command."""
        if isinstance(command, sql.CommandGetSqlInfo):
            return sql_info_table(list(command.info), self.version)
        if isinstance(command, sql.CommandGetCatalogs):
            return pa.table([[CATALOG]], schema=CATALOGS_SCHEMA)
        if isinstance(command, sql.CommandGetDbSchemas):
            return self.db_schemas(command)
        if isinstance(command, sql.CommandGetTables):
            return self.tables(command)
        if isinstance(command, sql.CommandGetTableTypes):
            return pa.table([[TABLE_TYPE]], schema=TABLE_TYPES_SCHEMA)
        if isinstance(command, sql.CommandGetXdbcTypeInfo):
            return type_info_table(command.data_type if command.HasField("data_type") else None)
        if isinstance(command, sql.CommandGetPrimaryKeys):
            return self.primary_keys(command)
        if isinstance(
            command,
            sql.CommandGetExportedKeys | sql.CommandGetImportedKeys | sql.CommandGetCrossReference,
        ):
            return FOREIGN_KEYS_SCHEMA.empty_table()  # Lance declares no foreign keys
        raise InvalidArgument(f"{type(command).__name__} is not a metadata command")

    def _datasets(self) -> list[Any]:
        return self.service.list_datasets("", self.identity)

    def db_schemas(self, command: Any) -> pa.Table:
        match = like(_optional(command, "db_schema_filter_pattern"))
        if not _catalog_matches(_optional(command, "catalog")):
            return DB_SCHEMAS_SCHEMA.empty_table()
        names = sorted(schemas_of(d.name for d in self._datasets()))
        names = [n for n in names if match(n)]
        return pa.table([[CATALOG] * len(names), names], schema=DB_SCHEMAS_SCHEMA)

    def tables(self, command: Any) -> pa.Table:
        schema_match = like(_optional(command, "db_schema_filter_pattern"))
        table_match = like(_optional(command, "table_name_filter_pattern"))
        types = set(command.table_types)
        with_schema = command.include_schema
        out_schema = TABLES_WITH_SCHEMA if with_schema else TABLES_SCHEMA
        if not _catalog_matches(_optional(command, "catalog")) or (
            types and TABLE_TYPE not in types
        ):
            return out_schema.empty_table()
        rows = []
        for d in self._datasets():
            schema, table = split_name(d.name)
            if schema_match(schema) and table_match(table):
                rows.append((schema, table, d.schema))
        rows.sort(key=lambda r: (r[0], r[1]))
        columns: list[list[Any]] = [
            [CATALOG] * len(rows),
            [r[0] for r in rows],
            [r[1] for r in rows],
            [TABLE_TYPE] * len(rows),
        ]
        if with_schema:
            columns.append([column_metadata(r[2]).serialize().to_pybytes() for r in rows])
        return pa.table(columns, schema=out_schema)

    def primary_keys(self, command: Any) -> pa.Table:
        """The dataset's unenforced primary key (Lance's `merge_insert` default key)."""
        schema = _optional(command, "db_schema") or "public"
        if not _catalog_matches(_optional(command, "catalog")):
            return PRIMARY_KEYS_SCHEMA.empty_table()
        ds = self._readable(schema, command.table)
        if ds is None:
            return PRIMARY_KEYS_SCHEMA.empty_table()
        key = primary_key(ds.lance_schema)
        n = len(key)
        return pa.table(
            [
                [CATALOG] * n,
                [schema] * n,
                [command.table] * n,
                list(key),
                list(range(1, n + 1)),
                [None] * n,
            ],
            schema=PRIMARY_KEYS_SCHEMA,
        )

    def _readable(self, schema: str, table: str) -> Any:
        """The dataset `schema.table` names, as a query resolves it, if the caller may read
        it (None otherwise, or when there is none)."""
        for name in dataset_names(schema, table):
            if not self.service.may_read(self.identity, name):
                continue
            try:
                return self.service.handles.open_current(name)
            except (InvalidArgument, NotFound):
                continue
        return None


def _optional(message: Any, name: str) -> str | None:
    return getattr(message, name) if message.HasField(name) else None


# the names `CommandGetXdbcTypeInfo` lists (`flight_server.sql.type_info`)
_TYPE_NAMES = [
    (pa.types.is_boolean, "BOOLEAN"),
    (pa.types.is_int8, "TINYINT"),
    (pa.types.is_int16, "SMALLINT"),
    (pa.types.is_int32, "INTEGER"),
    (pa.types.is_int64, "BIGINT"),
    (pa.types.is_uint8, "TINYINT UNSIGNED"),
    (pa.types.is_uint16, "SMALLINT UNSIGNED"),
    (pa.types.is_uint32, "INTEGER UNSIGNED"),
    (pa.types.is_uint64, "BIGINT UNSIGNED"),
    (pa.types.is_float16, "HALF FLOAT"),
    (pa.types.is_float32, "REAL"),
    (pa.types.is_float64, "DOUBLE"),
    (pa.types.is_decimal, "DECIMAL"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "VARCHAR"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), "BYTEA"),
    (pa.types.is_date, "DATE"),
    (pa.types.is_time, "TIME"),
    (pa.types.is_timestamp, "TIMESTAMP"),
]


def column_metadata(schema: pa.Schema) -> pa.Schema:
    """`schema` with each top-level field's SQL type name (and a decimal's precision and
    scale) in Flight SQL's column metadata, which JDBC's `getColumns` reports."""
    fields = []
    for f in schema:
        name = next((n for test, n in _TYPE_NAMES if test(f.type)), str(f.type).upper())
        meta = dict(f.metadata or {})
        meta[b"ARROW:FLIGHT:SQL:TYPE_NAME"] = name.encode()
        if pa.types.is_decimal(f.type):
            meta[b"ARROW:FLIGHT:SQL:PRECISION"] = str(f.type.precision).encode()
            meta[b"ARROW:FLIGHT:SQL:SCALE"] = str(f.type.scale).encode()
        fields.append(f.with_metadata(meta))
    return pa.schema(fields, metadata=schema.metadata)
