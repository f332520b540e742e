"""Blob columns on their way into data files, as pylance 14 takes them.

A blob column is given as binary marked `lance-encoding:blob` (legacy) or as the
`lance.blob.v2` struct of `data` / `uri` (`lance.blob.blob_array`). In 2.2+ datasets pylance
stores every blob column as blob v2 (a legacy field becomes the `lance.blob.v2` struct of
`data` and `uri`), and older storage versions take only legacy blobs. Appends may give
either form for a blob v2 column. The file writers then put the bytes out of line
(`format.file.blob_values`).
"""

from __future__ import annotations

import pyarrow as pa

from quiver.format.errors import SchemaMismatchError, UnsupportedFeatureError
from quiver.format.table.schema import BLOB_V2_EXTENSION

_BLOB_KEY = b"lance-encoding:blob"
_EXTENSION_NAME = b"ARROW:extension:name"
_V2_STORAGE = pa.struct([pa.field("data", pa.large_binary()), pa.field("uri", pa.utf8())])


def is_legacy_blob(field: pa.Field) -> bool:
    """A binary field marked `lance-encoding:blob`."""
    meta = field.metadata or {}
    marked = meta.get(_BLOB_KEY, b"").lower() in (b"true", b"1", b"yes")
    binary = pa.types.is_large_binary(field.type) or pa.types.is_binary(field.type)
    return marked and binary


def is_blob_v2(field: pa.Field) -> bool:
    """A `lance.blob.v2` field (the extension type, or its storage carrying the name)."""
    if isinstance(field.type, pa.ExtensionType):
        return field.type.extension_name == BLOB_V2_EXTENSION
    return (field.metadata or {}).get(_EXTENSION_NAME) == BLOB_V2_EXTENSION.encode()


def stored_schema(schema: pa.Schema, storage_version: str, uri: str) -> pa.Schema:
    """The schema a new dataset of `storage_version` keeps for data of `schema`: at 2.2 and
    later a legacy blob field becomes blob v2; blob v2 below 2.2 is refused."""
    v2 = storage_version not in ("0.1", "2.0", "2.1")
    fields = []
    for f in schema:
        if is_legacy_blob(f) and v2:
            meta = {k: v for k, v in (f.metadata or {}).items() if k != _BLOB_KEY}
            meta[_EXTENSION_NAME] = BLOB_V2_EXTENSION.encode()
            f = pa.field(f.name, _V2_STORAGE, f.nullable, meta)
        elif is_blob_v2(f) and not v2:
            raise UnsupportedFeatureError(
                f"{uri}: blob v2 column {f.name!r} needs data storage version 2.2 or later "
                f"(not {storage_version})"
            )
        elif (is_legacy_blob(f) or is_blob_v2(f)) and storage_version == "0.1":
            raise UnsupportedFeatureError(f"{uri}: blob column {f.name!r} in a 0.1 dataset")
        fields.append(f)
    return pa.schema(fields, metadata=schema.metadata)


def fits_blob_v2(given: pa.DataType, target: pa.Field) -> bool:
    """Whether data of type `given` may be written to the blob v2 field `target`: binary
    values or either form of the `lance.blob.v2` struct."""
    if isinstance(given, pa.ExtensionType):
        given = given.storage_type
    if pa.types.is_large_binary(given) or pa.types.is_binary(given):
        return True
    return pa.types.is_struct(given) and [given.field(i).name for i in range(2)] == ["data", "uri"]


def to_blob_v2(column: pa.Array, target: pa.Field, uri: str) -> pa.Array:
    """`column` (binary, or a `lance.blob.v2` struct of 2 or 4 fields) as the type of the
    blob v2 field `target`."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if isinstance(column, pa.ExtensionArray):
        column = column.storage
    storage = target.type.storage_type if isinstance(target.type, pa.ExtensionType) else target.type
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        data = column.cast(pa.large_binary())
        children = [data, pa.nulls(len(column), pa.utf8())]
        children += [
            pa.nulls(len(column), storage.field(i).type) for i in range(2, storage.num_fields)
        ]
        mask = column.is_null() if column.null_count else None
        struct = pa.StructArray.from_arrays(children, fields=list(storage), mask=mask)
    elif pa.types.is_struct(column.type):
        have = {column.type.field(i).name: column.field(i) for i in range(column.type.num_fields)}
        children = []
        for i in range(storage.num_fields):
            f = storage.field(i)
            children.append(
                have[f.name].cast(f.type) if f.name in have else pa.nulls(len(column), f.type)
            )
        mask = column.is_null() if column.null_count else None
        struct = pa.StructArray.from_arrays(children, fields=list(storage), mask=mask)
    else:
        raise SchemaMismatchError(
            f"{uri}: blob column {target.name!r} takes binary values or lance.blob.v2 structs, "
            f"not {column.type}"
        )
    if isinstance(target.type, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(target.type, struct)
    return struct
