"""Lance schemas: the flattened, id-carrying field list of a manifest <-> Arrow schemas.

Lance stores a schema as `lance.file.Field` entries in pre-order (parent before children),
each with an id, its parent's id and a logical type string (``"timestamp:us:UTC"``,
``"fixed_size_list:float:4"``...). Field ids are what data files refer to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa

from quiver.format.errors import (
    ColumnNotFoundError,
    CorruptFileError,
    InvalidInputError,
    UnsupportedFeatureError,
)
from quiver.format.proto import file_pb2

# Legacy per-field encoding hints (lance.file.Encoding).
ENCODING_NONE, ENCODING_PLAIN, ENCODING_VAR_BINARY, ENCODING_DICTIONARY = 0, 1, 2, 3

PRIMARY_KEY_METADATA = "lance-schema:unenforced-primary-key"
# What a scan returns for a blob column by default (as pylance does): where its bytes are.
BLOB_DESCRIPTION = pa.struct([("position", pa.uint64()), ("size", pa.uint64())])
# Blob v2 (2.2+ files): a struct field of this extension, stored as one packed column of
# descriptions; `kind` says where the bytes are (0 inline in the data file, 1 a shared
# sidecar ".blob" file, 2 a dedicated one, 3 an external `blob_uri`).
BLOB_V2_EXTENSION = "lance.blob.v2"
BLOB_V2_DESCRIPTION = pa.struct(
    [
        pa.field("kind", pa.uint8(), False),
        pa.field("position", pa.uint64(), False),
        pa.field("size", pa.uint64(), False),
        pa.field("blob_id", pa.uint32(), False),
        pa.field("blob_uri", pa.string(), False),
    ]
)
_BLOB_V2_DESCRIPTION_METADATA = {"lance-encoding:blob": b"true", "lance-encoding:packed": b"true"}
_EXTENSION_NAME = "ARROW:extension:name"

# Columns a scan adds (row ids, addresses, offsets, row versions): pylance refuses to write
# data that has them.
RESERVED_COLUMNS = frozenset(
    ("_rowid", "_rowaddr", "_rowoffset", "_row_created_at_version", "_row_last_updated_at_version")
)

_SIMPLE: dict[str, pa.DataType] = {
    "null": pa.null(),
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "uint8": pa.uint8(),
    "int16": pa.int16(),
    "uint16": pa.uint16(),
    "int32": pa.int32(),
    "uint32": pa.uint32(),
    "int64": pa.int64(),
    "uint64": pa.uint64(),
    "halffloat": pa.float16(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "large_string": pa.large_string(),
    "large_binary": pa.large_binary(),
    "json": pa.large_binary(),
    "date32:day": pa.date32(),
    "date64:ms": pa.date64(),
}
_SIMPLE_NAMES = {v: k for k, v in _SIMPLE.items() if k != "json"}
_DECIMAL = re.compile(r"decimal:(128|256):(\d+):(-?\d+)$")


def _leaf_type(logical: str, where: str) -> pa.DataType:
    """Arrow type of a logical type string that needs no child fields."""
    if logical in _SIMPLE:
        return _SIMPLE[logical]
    parts = logical.split(":")
    head = parts[0]
    try:
        if head == "time32":
            return pa.time32(parts[1])
        if head == "time64":
            return pa.time64(parts[1])
        if head == "duration":
            return pa.duration(parts[1])
        if head == "timestamp":
            tz = ":".join(parts[2:]) if len(parts) > 2 else "-"
            return pa.timestamp(parts[1], None if tz == "-" else tz)
        if head == "fixed_size_binary":
            width = int(parts[1])
            if width < 0:
                raise CorruptFileError(where, f"fixed_size_binary of width {width}")
            return pa.binary(width)
        if head == "decimal":
            m = _DECIMAL.match(logical)
            if m:
                bits, precision, scale = (int(g) for g in m.groups())
                ctor = pa.decimal128 if bits == 128 else pa.decimal256
                return ctor(precision, scale)
        if head == "fixed_size_list":
            inner, size = ":".join(parts[1:-1]), int(parts[-1])
            if size < 1:  # pyarrow divides by the size: a process-killing SIGFPE
                raise CorruptFileError(where, f"fixed_size_list of {size} items")
            if inner == "lance.bfloat16":
                return pa.list_(pa.field("item", pa.binary(2), True), size)
            return pa.list_(pa.field("item", _leaf_type(inner, where), True), size)
        if head == "dict":
            value = _leaf_type(parts[1], where)
            index = _leaf_type(parts[2], where)
            return pa.dictionary(index, value)
    except (IndexError, ValueError, pa.ArrowInvalid, TypeError) as e:
        raise CorruptFileError(where, f"bad logical type {logical!r}: {e}") from None
    raise UnsupportedFeatureError(f"{where}: unsupported Lance logical type {logical!r}")


def logical_type_of(dtype: pa.DataType) -> str:
    """The Lance logical type string of an Arrow type (inverse of the table above).

    View types are stored as their plain forms, as pylance stores them.
    """
    if pa.types.is_string_view(dtype):
        return "string"
    if pa.types.is_binary_view(dtype):
        return "binary"
    if dtype in _SIMPLE_NAMES:
        return _SIMPLE_NAMES[dtype]
    if pa.types.is_time32(dtype):
        return f"time32:{dtype.unit}"
    if pa.types.is_time64(dtype):
        return f"time64:{dtype.unit}"
    if pa.types.is_duration(dtype):
        return f"duration:{dtype.unit}"
    if pa.types.is_timestamp(dtype):
        return f"timestamp:{dtype.unit}:{dtype.tz or '-'}"
    if pa.types.is_decimal128(dtype):
        return f"decimal:128:{dtype.precision}:{dtype.scale}"
    if pa.types.is_decimal256(dtype):
        return f"decimal:256:{dtype.precision}:{dtype.scale}"
    if pa.types.is_fixed_size_binary(dtype):
        return f"fixed_size_binary:{dtype.byte_width}"
    if pa.types.is_fixed_size_list(dtype):
        return f"fixed_size_list:{logical_type_of(dtype.value_type)}:{dtype.list_size}"
    if pa.types.is_dictionary(dtype):
        return f"dict:{logical_type_of(dtype.value_type)}:{logical_type_of(dtype.index_type)}:false"
    if pa.types.is_struct(dtype):
        return "struct"
    if pa.types.is_map(dtype):
        return "map"
    if pa.types.is_large_list(dtype):
        return "large_list.struct" if pa.types.is_struct(dtype.value_type) else "large_list"
    if pa.types.is_list(dtype):
        return "list.struct" if pa.types.is_struct(dtype.value_type) else "list"
    if isinstance(dtype, pa.ExtensionType):
        return logical_type_of(dtype.storage_type)
    raise UnsupportedFeatureError(f"Arrow type {dtype} has no Lance logical type")


def check_new_schema(schema: pa.Schema, where: str) -> None:
    """Refuse what pylance refuses to create a dataset with: a reserved column name, two
    columns of one name, a '.' in a column name, a fixed-size list of no items."""
    seen: set[str] = set()
    for f in schema:
        if f.name in RESERVED_COLUMNS:
            raise InvalidInputError(
                f"{where}: the column {f.name} is a reserved name and cannot be used in a "
                "Lance dataset"
            )
        if f.name in seen:
            raise InvalidInputError(f"{where}: duplicate column name {f.name!r}")
        if "." in f.name:
            raise InvalidInputError(
                f"{where}: column {f.name!r}: top-level names cannot contain '.' "
                "(use a struct column for nesting)"
            )
        seen.add(f.name)
        _check_list_sizes(f.type, f"{where}: column {f.name!r}")
        _check_primary_key(f, where, nullable=False, in_list=False)


def check_primary_key_nullability(schema: LanceSchema, where: str) -> None:
    """Refuse a schema change leaving a primary-key column, or a field above one, nullable
    (pylance refuses it: a primary key's fields are fixed once set)."""

    def walk(f: LanceField, nullable_above: bool) -> None:
        nullable = nullable_above or f.nullable
        if f.unenforced_primary_key and nullable:
            raise InvalidInputError(
                f"{where}: primary key column {f.name!r} and all the fields above it must "
                "not be nullable"
            )
        for child in f.children:
            walk(child, nullable)

    for top in schema.fields:
        walk(top, False)


def is_primary_key(f: pa.Field) -> bool:
    """Whether an Arrow field declares itself part of the unenforced primary key."""
    value = (f.metadata or {}).get(PRIMARY_KEY_METADATA.encode(), b"")
    return value.lower() in (b"true", b"1", b"yes")


def _check_primary_key(f: pa.Field, where: str, *, nullable: bool, in_list: bool) -> None:
    """pylance's rules for an unenforced primary key column: a leaf, neither it nor any
    field above it nullable, not inside a list."""
    nullable = nullable or f.nullable
    t = f.type
    if is_primary_key(f):
        if t.num_fields:
            raise InvalidInputError(
                f"{where}: primary key column {f.name!r} must be a leaf, not a {t}"
            )
        if nullable:
            raise InvalidInputError(
                f"{where}: primary key column {f.name!r} and all the fields above it must "
                "not be nullable"
            )
        if in_list:
            raise InvalidInputError(
                f"{where}: primary key column {f.name!r} must not be inside a list"
            )
    listy = in_list or pa.types.is_list(t) or pa.types.is_large_list(t)
    listy = listy or pa.types.is_fixed_size_list(t) or pa.types.is_map(t)
    for i in range(t.num_fields):
        _check_primary_key(t.field(i), where, nullable=nullable, in_list=listy)


def _check_list_sizes(dtype: pa.DataType, where: str) -> None:
    if pa.types.is_fixed_size_list(dtype) and dtype.list_size < 1:
        raise InvalidInputError(f"{where}: a fixed-size list must have at least one item")
    if pa.types.is_dictionary(dtype):
        _check_list_sizes(dtype.value_type, where)
    for i in range(dtype.num_fields):
        _check_list_sizes(dtype.field(i).type, where)


def _encoding_hint(dtype: pa.DataType) -> int:
    """The legacy `Field.encoding` value pylance writes for a type."""
    if pa.types.is_struct(dtype) or pa.types.is_map(dtype) or pa.types.is_null(dtype):
        return ENCODING_NONE
    if pa.types.is_dictionary(dtype):
        return ENCODING_DICTIONARY
    if (
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
    ):
        return ENCODING_VAR_BINARY
    return ENCODING_PLAIN


@dataclass
class LanceField:
    """One field of a Lance schema with its id, children and Arrow type."""

    id: int
    name: str
    logical_type: str
    nullable: bool = True
    parent_id: int = -1
    children: list[LanceField] = field(default_factory=list)
    metadata: dict[str, bytes] = field(default_factory=dict)
    encoding: int = ENCODING_NONE
    dictionary: tuple[int, int] | None = None  # legacy files: (offset, length) of the values
    unenforced_primary_key: bool = False
    unenforced_primary_key_position: int = 0
    extension_name: str = ""

    # -- Arrow ------------------------------------------------------------------------
    @property
    def arrow_type(self) -> pa.DataType:
        """The Arrow type this field reads as."""
        return self.arrow_type_of(blob_descriptions=False)

    def arrow_type_of(self, *, blob_descriptions: bool) -> pa.DataType:
        """The Arrow type of this field, blob fields in it optionally as their descriptions."""
        lt = self.logical_type
        where = f"field {self.name!r} (id {self.id})"
        if blob_descriptions and self.is_blob:
            return self.blob_description
        kids = [c.to_arrow(blob_descriptions=blob_descriptions) for c in self.children]
        if lt == "struct":
            return pa.struct(kids)
        if lt in ("list", "list.struct", "large_list", "large_list.struct"):
            if len(kids) != 1:
                raise CorruptFileError(where, f"{lt} needs exactly one child field")
            return pa.large_list(kids[0]) if lt.startswith("large_list") else pa.list_(kids[0])
        if lt == "map":
            if len(kids) != 1 or kids[0].type.num_fields != 2:
                raise CorruptFileError(where, "map needs one entries child with key and value")
            return pa.map_(kids[0].type.field(0), kids[0].type.field(1))
        return _leaf_type(lt, where)

    def to_arrow(self, *, blob_descriptions: bool = False) -> pa.Field:
        """The Arrow field, metadata included; blob columns (at any depth) optionally as their
        descriptions.

        A blob v2 field is its extension type when that is registered with pyarrow in this
        process (pylance registers it), else its storage struct carrying the extension name.
        """
        if self.is_blob_v2:
            if blob_descriptions:
                return pa.field(
                    self.name, BLOB_V2_DESCRIPTION, self.nullable, _BLOB_V2_DESCRIPTION_METADATA
                )
            meta = {**self.metadata, _EXTENSION_NAME: BLOB_V2_EXTENSION.encode()}
            return _registered_extension(pa.field(self.name, self.arrow_type, self.nullable, meta))
        dtype = self.arrow_type_of(blob_descriptions=blob_descriptions)
        return pa.field(self.name, dtype, self.nullable, self.metadata or None)

    @property
    def blob_description(self) -> pa.DataType:
        """The type a scan returns for this blob field: where its bytes are."""
        return BLOB_V2_DESCRIPTION if self.is_blob_v2 else BLOB_DESCRIPTION

    # -- tree helpers -----------------------------------------------------------------
    def walk(self) -> Iterator[LanceField]:
        """This field and all its descendants in pre-order."""
        yield self
        for c in self.children:
            yield from c.walk()

    @property
    def is_blob(self) -> bool:
        """Whether this field is a blob column (values stored out of line): a binary field
        marked `lance-encoding:blob`, or a blob v2 struct."""
        if self.is_blob_v2:
            return True
        return self.metadata.get("lance-encoding:blob", b"").lower() in (b"true", b"1", b"yes")

    @property
    def is_blob_v2(self) -> bool:
        """Whether this is a blob v2 field (a `lance.blob.v2` struct, one column of
        descriptions; its `data`/`uri` children have no columns)."""
        if self.logical_type != "struct":
            return False
        ext = self.extension_name or self.metadata.get(_EXTENSION_NAME, b"").decode(
            errors="replace"
        )
        return ext == BLOB_V2_EXTENSION

    @property
    def is_packed(self) -> bool:
        """Whether this struct is stored packed, as one column (children have no columns)."""
        for key in ("lance-encoding:packed", "packed"):
            if self.metadata.get(key, b"").lower() in (b"true", b"1", b"yes"):
                return True
        return False

    @property
    def is_leaf(self) -> bool:
        """Whether the field is stored as one column: no children, a packed struct or a blob
        v2 struct."""
        return not self.children or self.is_packed or self.is_blob_v2

    def project_ids(self, keep: set[int]) -> LanceField | None:
        """This field pruned to the descendants whose ids are in `keep` (None if none are)."""
        if self.is_leaf:
            return self if self.id in keep else None
        kids = [k for c in self.children if (k := c.project_ids(keep)) is not None]
        if not kids:
            return None
        if self.logical_type != "struct" and len(kids) != len(self.children):
            return None  # list/map items can't be partial
        return replace(self, children=kids)

    # -- protobuf ---------------------------------------------------------------------
    def to_protos(self) -> list[file_pb2.Field]:
        """The pre-order `lance.file.Field` messages of this subtree."""
        pb = file_pb2.Field(
            name=self.name,
            id=self.id,
            parent_id=self.parent_id,
            logical_type=self.logical_type,
            nullable=self.nullable,
            encoding=self.encoding,
            extension_name=self.extension_name,
            unenforced_primary_key=self.unenforced_primary_key,
            unenforced_primary_key_position=self.unenforced_primary_key_position,
        )
        for k, v in self.metadata.items():
            pb.metadata[k] = v
        if self.dictionary is not None:
            pb.dictionary.offset, pb.dictionary.length = self.dictionary
        out = [pb]
        for c in self.children:
            out.extend(c.to_protos())
        return out


def _registered_extension(f: pa.Field) -> pa.Field:
    """`f` as the extension type its `ARROW:extension:name` metadata names, if pyarrow has it
    registered (an IPC round trip applies the registry, as any Arrow reader does)."""
    try:
        return pa.ipc.read_schema(pa.schema([f]).serialize()).field(0)
    except (pa.ArrowException, TypeError, ValueError):  # a registered type refusing `f`
        return f


@dataclass
class LanceSchema:
    """A Lance schema: top-level fields (each a tree) plus schema metadata."""

    fields: list[LanceField]
    metadata: dict[str, bytes] = field(default_factory=dict)

    # -- construction -----------------------------------------------------------------
    @classmethod
    def from_protos(
        cls,
        pb_fields: Iterable[file_pb2.Field],
        metadata: dict[str, bytes] | None = None,
        *,
        where: str = "schema",
    ) -> LanceSchema:
        """Rebuild the field tree from pre-order protobuf fields (parents must come first)."""
        by_id: dict[int, LanceField] = {}
        top: list[LanceField] = []
        for pb in pb_fields:
            dictionary = None
            if pb.HasField("dictionary") and (pb.dictionary.offset or pb.dictionary.length):
                dictionary = (pb.dictionary.offset, pb.dictionary.length)
            f = LanceField(
                id=pb.id,
                name=pb.name,
                logical_type=pb.logical_type,
                nullable=pb.nullable,
                parent_id=pb.parent_id,
                metadata=dict(pb.metadata),
                encoding=pb.encoding,
                dictionary=dictionary,
                unenforced_primary_key=pb.unenforced_primary_key,
                unenforced_primary_key_position=pb.unenforced_primary_key_position,
                extension_name=pb.extension_name,
            )
            if f.id in by_id:
                raise CorruptFileError(where, f"duplicate field id {f.id}")
            if f.parent_id == -1:
                top.append(f)
            elif f.parent_id in by_id:
                by_id[f.parent_id].children.append(f)
            else:
                raise CorruptFileError(
                    where, f"field {f.name!r} (id {f.id}) has unknown parent {f.parent_id}"
                )
            by_id[f.id] = f
        return cls(top, dict(metadata or {}))

    @classmethod
    def from_arrow(cls, schema: pa.Schema, *, first_id: int = 0) -> LanceSchema:
        """A Lance schema for an Arrow schema, ids assigned in pre-order from `first_id`."""
        next_id = [first_id]

        def build(f: pa.Field, parent: int) -> LanceField:
            meta = {
                (k.decode() if isinstance(k, bytes) else k): v
                for k, v in (f.metadata or {}).items()
            }
            pk = is_primary_key(f)
            position = meta.get(PRIMARY_KEY_METADATA + ":position", b"")
            position = int(position) if pk and position.isdigit() else 0
            extension = ""
            if isinstance(f.type, pa.ExtensionType):  # stored as its storage, named
                extension = f.type.extension_name
                meta = {_EXTENSION_NAME: extension.encode(), **meta}
                f = pa.field(f.name, f.type.storage_type, f.nullable, f.metadata)
            elif _EXTENSION_NAME in meta:
                extension = meta[_EXTENSION_NAME].decode("utf-8", "replace")
            lf = LanceField(
                id=next_id[0],
                name=f.name,
                # pylance 14 records a field's extension name (GeoArrow's, blob v2, any);
                # arrow.json it turns into its own lance.json storage, which Quiver does not
                extension_name=extension if extension != "arrow.json" else "",
                logical_type=logical_type_of(f.type),
                nullable=f.nullable,
                parent_id=parent,
                metadata=meta,
                encoding=_encoding_hint(f.type),
                unenforced_primary_key=pk,
                unenforced_primary_key_position=position,
            )
            next_id[0] += 1
            t = f.type
            if pa.types.is_struct(t):
                lf.children = [build(t.field(i), lf.id) for i in range(t.num_fields)]
            elif pa.types.is_map(t):
                entries = pa.field(
                    "entries", pa.struct([t.key_field, t.item_field]), nullable=False
                )
                lf.children = [build(entries, lf.id)]
            elif pa.types.is_list(t) or pa.types.is_large_list(t):
                lf.children = [build(t.value_field, lf.id)]
            return lf

        fields = [build(f, -1) for f in schema]
        meta = {
            (k.decode() if isinstance(k, bytes) else k): v
            for k, v in (schema.metadata or {}).items()
        }
        return cls(fields, meta)

    # -- views ------------------------------------------------------------------------
    def to_arrow(self, *, blob_descriptions: bool = False) -> pa.Schema:
        """The Arrow schema, with field and schema metadata (see `LanceField.to_arrow`)."""
        return pa.schema(
            [f.to_arrow(blob_descriptions=blob_descriptions) for f in self.fields],
            metadata=self.metadata or None,
        )

    def to_protos(self) -> list[file_pb2.Field]:
        """All fields as pre-order protobuf messages."""
        out: list[file_pb2.Field] = []
        for f in self.fields:
            out.extend(f.to_protos())
        return out

    def walk(self) -> Iterator[LanceField]:
        """Every field, pre-order."""
        for f in self.fields:
            yield from f.walk()

    def field_ids(self) -> list[int]:
        """All field ids, pre-order."""
        return [f.id for f in self.walk()]

    def max_field_id(self) -> int:
        """The largest field id, or -1 for an empty schema."""
        return max(self.field_ids(), default=-1)

    @property
    def names(self) -> list[str]:
        """Top-level column names."""
        return [f.name for f in self.fields]

    def field(self, name: str, *, dataset: str = "dataset") -> LanceField:
        """The top-level field named `name`."""
        for f in self.fields:
            if f.name == name:
                return f
        raise ColumnNotFoundError(
            f"{dataset}: no column {name!r}; columns are {', '.join(self.names) or '(none)'}"
        )

    def column_paths(self) -> dict[int, str]:
        """Field id -> the column a filter, projection or index names it by: a top-level
        field's name, a field nested in structs by its path as pylance spells it
        (`meta.lang`, `` meta.`a.b` ``: `column_path`)."""
        out: dict[int, str] = {}
        pending: list[tuple[LanceField, list[str]]] = [(f, [f.name]) for f in self.fields]
        while pending:
            f, parts = pending.pop()
            out[f.id] = column_path(parts)
            if f.logical_type == "struct":
                pending += [(c, [*parts, c.name]) for c in f.children]
        return out

    def field_at(self, column: str, *, dataset: str = "dataset") -> LanceField:
        """The field `column` names: a top-level one, or one nested in structs by its
        dotted path (`column_paths`)."""
        for f in self.fields:
            if f.name == column:
                return f
        for field_id, path in self.column_paths().items():
            if path == column:
                return next(f for f in self.walk() if f.id == field_id)
        return self.field(column, dataset=dataset)  # raises ColumnNotFoundError

    def path_projection(self, column: str, *, dataset: str = "dataset") -> LanceSchema:
        """The schema reading `column`: that top-level column, or for a field nested in
        structs (`field_at`) its top-level column pruned to the path down to it."""
        if column in self.names:
            return self.project([column], dataset=dataset)
        return self.project_ids(f.id for f in self.field_at(column, dataset=dataset).walk())

    def canonical_column(self, column: str) -> str:
        """`column` as the schema spells it where it names a field (`column_paths`) the way
        pylance's index builders resolve a column: exactly, else case-insensitively at each
        level of the dotted path, any name in backquotes ("`meta`.LANG" -> "meta.lang");
        anything else unchanged, for the caller's own error."""
        if not isinstance(column, str):
            return column
        known = set(self.column_paths().values())
        if column in known:
            return column
        fields, names = self.fields, []
        for part in path_parts(column) or [column]:
            lower = part.lower()
            found = next((f for f in fields if f.name == part), None) or next(
                (f for f in fields if f.name.lower() == lower), None
            )
            if found is None:
                return column
            names.append(found.name)
            fields = found.children
        spelled = column_path(names)
        return spelled if spelled in known else column

    def project(self, columns: Sequence[str], *, dataset: str = "dataset") -> LanceSchema:
        """The schema restricted to the named top-level columns, in the order given."""
        seen: set[str] = set()
        out = []
        for c in columns:
            if c in seen:
                raise ColumnNotFoundError(f"{dataset}: column {c!r} requested twice")
            seen.add(c)
            out.append(self.field(c, dataset=dataset))
        return LanceSchema(out, self.metadata)

    def project_ids(self, ids: Iterable[int]) -> LanceSchema:
        """The schema pruned to the fields whose ids are in `ids` (parents kept as needed)."""
        keep = set(ids)
        kept = [k for f in self.fields if (k := f.project_ids(keep)) is not None]
        return LanceSchema(kept, self.metadata)


def path_parts(path: str) -> list[str]:
    """The field names of a dotted path, a name in backquotes holding any character, a
    backquote in it doubled ("st.`in ner`", "st.`a``b`"); [] for a path that does not
    parse (an unclosed quote, text after a closing one)."""
    parts: list[str] = []
    i = 0
    while i <= len(path):
        if path.startswith("`", i):
            name, start = [], i + 1
            while True:
                end = path.find("`", start)
                if end < 0:
                    return []
                if not path.startswith("``", end):
                    break
                name.append(path[start : end + 1])  # a doubled backquote: one in the name
                start = end + 2
            name.append(path[start:end])
            if end + 1 < len(path) and path[end + 1] != ".":
                return []
            parts.append("".join(name))
            i = end + 2
        else:
            end = path.find(".", i)
            end = len(path) if end < 0 else end
            parts.append(path[i:end])
            i = end + 1
    return parts


def format_path(parts: Sequence[str]) -> str:
    """A field path as pylance writes it (Lance's `format_field_path`): the names joined by
    dots, a name holding a dot or a backquote in backquotes, its backquotes doubled
    (["meta", "a.b"] -> "meta.`a.b`"); `path_parts` reads it back."""
    return ".".join(f"`{p.replace('`', '``')}`" if "." in p or "`" in p else p for p in parts)


def column_path(parts: Sequence[str]) -> str:
    """How a column is named by the names from the top level down: a top-level column by
    its own name, a nested field by its `format_path`."""
    return parts[0] if len(parts) == 1 else format_path(parts)
