"""Schema evolution: add, drop and alter columns, each committed as one new version.

What each operation writes and commits, as pylance 14 does (the one difference: the
tombstones below, which current Lance writes and pylance 14 reads but does not write):

- `add_columns` with SQL expressions or row-aligned Arrow data writes, for every fragment,
  one new data file holding only the new columns (existing files are never rewritten) and
  commits a `Merge` of all fragments (each with its extra file) and the extended schema.
  Columns given as Arrow fields are all NULL: a `Merge` of the unchanged fragments with the
  extended schema, no data written (refused for legacy datasets, as pylance does).
- `drop_columns` commits a `Project` with the remaining schema; data files none of whose
  fields remain leave the manifest, the others are untouched.
- `alter_columns` commits a `Project` for renames and nullability changes; a type change
  rewrites only the cast columns, into one new data file per fragment under new field ids,
  and commits a `Merge`. In 2.x data files the old field ids become tombstones (-2), as
  current Lance does; legacy files keep their ids (pylance locates a legacy file's pages
  from its first field id, so a tombstone there would break it), which is harmless since
  ids are never reused. Files left without any field of the schema are dropped.

New field ids start after the largest id of the schema *and* of every data file, so an id
a data file still lists is never given to another column. New data files have exactly
`physical_rows` rows: computed values for live rows, and for deleted rows NULL (or, in a
non-nullable column, a zero value), which no reader ever returns.

Indices on a dropped or retyped column are dropped by the same commit, as pylance does.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fragment import LanceFragment, fragments_of
from quiver.format.dataset.rows import RowSource
from quiver.format.dataset.scan import Scanner
from quiver.format.dataset.write import (
    DEFAULT_MAX_ROWS_PER_GROUP,
    conform_batch,
    data_file_name,
    normalize_storage_version,
    open_writer,
    to_reader,
)
from quiver.format.errors import (
    ColumnNotFoundError,
    CommitConflictError,
    InvalidInputError,
    UnsupportedFeatureError,
)
from quiver.format.expr import compile_expression, evaluate_expressions
from quiver.format.file.base import DEFAULT_BATCH_SIZE, TOMBSTONE, split_ranges
from quiver.format.file.open import open_data_file
from quiver.format.io.store import discard
from quiver.format.proto import table_pb2, transaction_pb2
from quiver.format.table.indices import indices_of
from quiver.format.table.manifest import Manifest
from quiver.format.table.schema import LanceField, LanceSchema, check_primary_key_nullability
from quiver.format.table.transaction import new_transaction

_ALTER_KEYS = {"path", "name", "nullable", "data_type"}

__all__ = ["add_columns", "alter_columns", "drop_columns", "max_field_id"]


# ---------------------------------------------------------------------------- helpers


def max_field_id(manifest: Manifest) -> int:
    """The largest field id of the schema and of every data file (-1 when there is none)."""
    ids = manifest.schema.field_ids()
    for frag in manifest.pb.fragments:
        for df in frag.files:
            ids.extend(i for i in df.fields if i >= 0)
    return max(ids, default=-1)


def _resolve_path(schema: LanceSchema, path: str) -> list[LanceField]:
    """The chain of fields from the top-level one down to `path` ("a" or "a.b.c")."""
    if not isinstance(path, str) or not path:
        raise InvalidInputError(f"a column path must be a non-empty string, not {path!r}")
    for f in schema.fields:
        if f.name == path:
            return [f]
    parts = path.split(".")
    chain: list[LanceField] = []
    candidates = schema.fields
    for part in parts:
        found = next((f for f in candidates if f.name == part), None)
        if found is None:
            raise ColumnNotFoundError(f"Column {path} does not exist in the dataset")
        chain.append(found)
        candidates = found.children if found.logical_type == "struct" else []
    return chain


def _find_by_id(fields: Sequence[LanceField], field_id: int) -> LanceField:
    for f in fields:
        for g in f.walk():
            if g.id == field_id:
                return g
    raise KeyError(field_id)  # pragma: no cover - ids come from the same schema


def _all_nullable(f: pa.Field) -> bool:
    """Whether a field and every field nested in it accept NULL."""
    if not f.nullable:
        return False
    t = f.type
    if pa.types.is_struct(t):
        return all(_all_nullable(t.field(i)) for i in range(t.num_fields))
    return True


def _zero_array(t: pa.DataType) -> pa.Array:
    """One non-null "zero" value of type `t`, non-null at every nesting level."""
    if isinstance(t, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(t, _zero_array(t.storage_type))
    if pa.types.is_null(t):
        return pa.nulls(1)
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays(
            [_zero_array(t.field(i).type) for i in range(t.num_fields)],
            fields=[t.field(i) for i in range(t.num_fields)],
        )
    if pa.types.is_fixed_size_list(t):
        values = pa.concat_arrays([_zero_array(t.value_type)] * t.list_size)
        return pa.FixedSizeListArray.from_arrays(values, type=t)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        return pa.array([[]], t)
    if pa.types.is_dictionary(t):
        return pa.DictionaryArray.from_arrays(
            pa.array([0], t.index_type), _zero_array(t.value_type)
        )
    if pa.types.is_boolean(t):
        return pa.array([False])
    if pa.types.is_fixed_size_binary(t):
        return pa.array([b"\0" * t.byte_width], t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.array([""], t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.array([b""], t)
    try:
        return pa.array([0], t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.nulls(1, t)


def filler_row(schema: pa.Schema) -> pa.RecordBatch:
    """The row written in place of deleted rows: NULL, or zero where NULL is not allowed."""
    arrays = [pa.nulls(1, f.type) if _all_nullable(f) else _zero_array(f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def to_physical(
    batch: pa.RecordBatch, keep: np.ndarray | None, filler: pa.RecordBatch
) -> pa.RecordBatch:
    """Spread the live rows of one step over its physical rows, filling the deleted ones."""
    if keep is None or keep.all():
        return batch
    if batch.num_rows != int(keep.sum()):
        raise InvalidInputError(
            f"expected {int(keep.sum())} rows for the live rows of a step, got {batch.num_rows}"
        )
    index = np.where(keep, np.cumsum(keep) - 1, batch.num_rows)
    return pa.concat_batches([batch, filler]).take(pa.array(index))


def _live_steps(
    frag: LanceFragment, batch_size: int
) -> Iterator[tuple[int, int, np.ndarray | None]]:
    """(start, stop, live mask of the step or None) for the physical steps of a fragment."""
    mask = frag.live_mask
    for s, e in split_ranges([(0, frag.physical_rows)], batch_size):
        yield s, e, None if mask is None else mask[s:e]


def read_live(
    frag: LanceFragment, projection: LanceSchema, batch_size: int
) -> Iterator[tuple[np.ndarray | None, pa.RecordBatch]]:
    """The live rows of `projection` step by step, each with its step's live mask."""
    n = frag.physical_rows
    if n == 0:
        return
    batches = frag.read_batches(
        projection, projection.to_arrow(), ranges=[(0, n)], batch_size=batch_size
    )
    for (_s, _e, keep), batch in zip(_live_steps(frag, batch_size), batches, strict=True):
        yield keep, batch


class FileSet:
    """The data files one operation writes; removed again if it fails."""

    def __init__(self, ds: DatasetCore, schema: LanceSchema) -> None:
        self.ds = ds
        self.schema = schema
        self.arrow = schema.to_arrow()
        self.version = normalize_storage_version(ds.data_storage_version)
        self.paths: list[str] = []

    def write(self, frag: LanceFragment, batches: Iterable[pa.RecordBatch]) -> table_pb2.DataFile:
        """One data file with the rows of `batches`, which must cover the fragment exactly."""
        store = self.ds.store
        name = data_file_name()
        path = f"data/{name}"
        self.paths.append(path)
        sink = store.open_write(path)
        try:
            writer = open_writer(
                sink,
                self.schema,
                self.version,
                max_rows_per_group=self._group_rows(frag),
                path=store.uri_of(path),
            )
            for batch in batches:
                if batch.num_rows:
                    writer.write(conform_batch(batch, self.arrow, store.uri_of(path)))
            info = writer.finish()
        except BaseException:
            discard(sink)
            raise
        sink.close()
        if info.num_rows != frag.physical_rows:
            raise InvalidInputError(
                f"{store.uri_of(path)}: wrote {info.num_rows} rows for fragment "
                f"{frag.fragment_id}, which has {frag.physical_rows}"
            )
        return table_pb2.DataFile(
            path=name,
            fields=info.fields,
            column_indices=info.column_indices,
            file_major_version=info.major_version,
            file_minor_version=info.minor_version,
            file_size_bytes=info.size_bytes,
        )

    def _group_rows(self, frag: LanceFragment) -> int:
        """Rows per group for a new file of `frag`: pylance reads a legacy fragment's files
        group by group together, so legacy groups must line up with the existing files'."""
        files = frag.data_files()
        if self.version != "0.1" or not files:
            return DEFAULT_MAX_ROWS_PER_GROUP
        df = files[0]
        store, path = self.ds.resolve(
            f"data/{df.path}", df.base_id if df.HasField("base_id") else None
        )
        reader = open_data_file(store, path, df)
        try:
            sizes = np.diff(getattr(reader, "batch_offsets", np.zeros(1, np.int64)))
        finally:
            reader.close()
        if len(sizes) == 0:
            return DEFAULT_MAX_ROWS_PER_GROUP
        if np.any(sizes[:-1] != sizes[0]) or sizes[-1] > sizes[0]:
            raise UnsupportedFeatureError(
                f"{store.uri_of(path)}: row groups of unequal sizes {sizes.tolist()}; a new "
                f"column file of fragment {frag.fragment_id} could not line up with them"
            )
        return int(sizes[0])

    def remove(self) -> None:
        for path in self.paths:
            with contextlib.suppress(Exception):
                self.ds.store.delete(path)


def commit_body(
    ds: DatasetCore,
    operation: str,
    body: object,
    files: FileSet | None = None,
    properties: dict[str, str] | None = None,
) -> DatasetCore:
    """Commit on top of `ds`'s version (with transaction `properties`); the new version."""
    try:
        return ds.commit(new_transaction(ds.version, operation, body, properties=properties))
    except CommitConflictError:
        if files is not None:
            files.remove()  # no manifest references them
        raise


def merge_body(
    fragments: Iterable[table_pb2.DataFragment], schema: LanceSchema
) -> transaction_pb2.Transaction.Merge:
    body = transaction_pb2.Transaction.Merge(fragments=fragments, schema=schema.to_protos())
    for k, v in schema.metadata.items():
        body.schema_metadata[k] = v if isinstance(v, bytes) else str(v).encode()
    return body


# ---------------------------------------------------------------------------- add


def new_fields(ds: DatasetCore, arrow: pa.Schema) -> LanceSchema:
    """Lance fields for new columns, ids after every id in use; refuses name clashes."""
    existing = set(ds.lance_schema.names)
    seen: set[str] = set()
    for f in arrow:
        if not f.name:
            raise InvalidInputError("a new column needs a non-empty name")
        if f.name in existing:
            raise InvalidInputError(f"Column {f.name} already exists in the dataset")
        if f.name in seen:
            raise InvalidInputError(f"Column {f.name} is added twice")
        seen.add(f.name)
    if not len(arrow):
        raise InvalidInputError("add_columns needs at least one new column")
    return LanceSchema.from_arrow(pa.schema(list(arrow)), first_id=max_field_id(ds.manifest) + 1)


def write_new_columns(
    ds: DatasetCore,
    new: LanceSchema,
    per_fragment: Callable[[LanceFragment], Iterable[pa.RecordBatch]],
    finish: Callable[[], None] | None = None,
    properties: dict[str, str] | None = None,
) -> DatasetCore:
    """Write one file of the new columns per fragment, then commit the Merge."""
    files = FileSet(ds, new)
    fragments = []
    try:
        for frag in fragments_of(ds):
            pb = table_pb2.DataFragment()
            pb.CopyFrom(frag.metadata)
            pb.files.append(files.write(frag, per_fragment(frag)))
            fragments.append(pb)
        if finish is not None:
            finish()
    except BaseException:
        files.remove()
        raise
    schema = LanceSchema(ds.lance_schema.fields + new.fields, ds.lance_schema.metadata)
    return commit_body(ds, "merge", merge_body(fragments, schema), files, properties)


def _add_sql(ds: DatasetCore, transforms: Mapping[str, str], batch_size: int) -> DatasetCore:
    arrow = ds.schema
    compiled = []
    for name, sql in transforms.items():
        if not isinstance(name, str) or not isinstance(sql, str):
            raise InvalidInputError(
                "add_columns takes {new column name: SQL expression string}, got "
                f"{name!r}: {sql!r}"
            )
        compiled.append((name, compile_expression(sql, arrow, dataset=ds.uri)))
    new = new_fields(ds, pa.schema([c.to_field(name) for name, c in compiled]))
    used = {c for _, e in compiled for c in e.columns}
    projection = ds.lance_schema.project([n for n in arrow.names if n in used])
    filler = filler_row(new.to_arrow())

    def per_fragment(frag: LanceFragment) -> Iterator[pa.RecordBatch]:
        for keep, batch in read_live(frag, projection, batch_size):
            try:
                values = evaluate_expressions(batch, compiled)
            except InvalidInputError as e:
                names = ", ".join(repr(name) for name, _ in compiled)
                raise InvalidInputError(f"{ds.uri}: cannot add column(s) {names}: {e}") from None
            yield to_physical(conform_batch(values, filler.schema, ds.uri), keep, filler)

    return write_new_columns(ds, new, per_fragment)


def _add_stream(
    ds: DatasetCore, data: Any, reader_schema: pa.Schema | None, batch_size: int
) -> DatasetCore:
    reader = to_reader(data, reader_schema)
    new = new_fields(ds, reader.schema)
    target = new.to_arrow()
    filler = filler_row(target)
    source = RowSource(
        iter(reader),
        short="the new column data ended before producing values for all rows in the dataset",
        long="the new column data has more rows than the dataset has live rows",
        error=InvalidInputError,
    )

    def per_fragment(frag: LanceFragment) -> Iterator[pa.RecordBatch]:
        for s, e, keep in _live_steps(frag, batch_size):
            live = e - s if keep is None else int(keep.sum())
            pieces = [conform_batch(b, target, ds.uri) for b in list(source.take(live))]
            if pieces:
                batch = pa.concat_batches(pieces)
            else:
                batch = pa.RecordBatch.from_arrays(
                    [pa.array([], f.type) for f in target], schema=target
                )
            yield to_physical(batch, keep, filler)

    return write_new_columns(ds, new, per_fragment, finish=source.check_exhausted)


def _add_all_null(ds: DatasetCore, fields: Sequence[pa.Field]) -> DatasetCore:
    for f in fields:
        if not f.nullable:
            raise InvalidInputError(
                f"All-null columns must be nullable, but field '{f.name}' is not."
            )
    if ds.data_storage_version == "0.1":
        raise UnsupportedFeatureError("Cannot add all-null columns to legacy dataset version.")
    new = new_fields(ds, pa.schema(list(fields)))
    schema = LanceSchema(ds.lance_schema.fields + new.fields, ds.lance_schema.metadata)
    return commit_body(ds, "merge", merge_body(ds.manifest.pb.fragments, schema))


def add_columns(
    ds: DatasetCore,
    transforms: Any,
    *,
    reader_schema: pa.Schema | None = None,
    batch_size: int | None = None,
) -> DatasetCore:
    """Add columns, as one new version (pylance's `LanceDataset.add_columns`).

    `transforms` is one of:
    - a dict {new column name: SQL expression over existing columns}, computed row by row
      (`{"b": "a * 2"}`; the type follows pylance's rules: `a * 2` on int32 is int32);
    - a `pa.Field`, a list of fields or a `pa.Schema`: all-NULL nullable columns, a
      metadata-only change (not on legacy datasets, like pylance);
    - Arrow data (table, record batch, RecordBatchReader, or batches with `reader_schema`)
      whose rows line up with the dataset's live rows in scan order.
    Functions of each batch and data naming each row's `_rowaddr` are backfills
    (`format.dataset.backfill`), which `LanceDataset.add_columns` also takes.
    """
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise InvalidInputError(f"batch_size must be a positive integer, not {batch_size!r}")
    batch_size = batch_size or DEFAULT_BATCH_SIZE
    if isinstance(transforms, Mapping):
        if not transforms:
            raise InvalidInputError("add_columns needs at least one new column")
        return _add_sql(ds, transforms, batch_size)
    elif isinstance(transforms, pa.Field):
        return _add_all_null(ds, [transforms])
    elif isinstance(transforms, pa.Schema):
        return _add_all_null(ds, list(transforms))
    elif (
        isinstance(transforms, list)
        and transforms
        and all(isinstance(f, pa.Field) for f in transforms)
    ):
        return _add_all_null(ds, transforms)
    elif callable(transforms) and not hasattr(transforms, "__arrow_c_stream__"):
        raise UnsupportedFeatureError(
            "add_columns computes columns with a function through "
            "quiver.format.dataset.backfill.add_columns_udf"
        )
    return _add_stream(ds, transforms, reader_schema, batch_size)


# ---------------------------------------------------------------------------- drop


def _without(fields: list[LanceField], drop: set[int]) -> list[LanceField]:
    """`fields` minus the subtrees whose ids are in `drop` (emptied structs go too)."""
    out = []
    for f in fields:
        if f.id in drop:
            continue
        if f.children and f.logical_type == "struct":
            kids = _without(f.children, drop)
            if not kids:
                continue
            if len(kids) != len(f.children):
                f = copy.copy(f)
                f.children = kids
        out.append(f)
    return out


def drop_columns(ds: DatasetCore, columns: Sequence[str] | str) -> DatasetCore:
    """Remove columns (top-level names or "a.b" paths), as a metadata-only new version."""
    if isinstance(columns, str):
        columns = [columns]
    schema = ds.lance_schema
    drop: set[int] = set()
    for c in columns:
        chain = _resolve_path(schema, c)
        if len(chain) > 1 and chain[-2].logical_type != "struct":
            raise InvalidInputError(f"cannot drop {c!r}: only struct fields can be dropped")
        drop.add(chain[-1].id)
    remaining = _without(schema.fields, drop)
    if not remaining:
        raise InvalidInputError("Cannot drop all columns from a dataset")
    new = LanceSchema(remaining, schema.metadata)
    return commit_body(ds, "project", transaction_pb2.Transaction.Project(schema=new.to_protos()))


# ---------------------------------------------------------------------------- alter


def _family(t: pa.DataType) -> str | None:
    """The kind of type pylance lets a column be cast within (None: not castable)."""
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_temporal(t):
        return "temporal"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return "list"
    return None


def _castable(src: pa.DataType, dst: pa.DataType) -> bool:
    """pylance's rule: casts stay within integers, floats, strings, lists of castables..."""
    family = _family(src)
    if family is None or family != _family(dst):
        return False
    if family == "list":
        return _castable(src.value_type, dst.value_type)
    try:
        pc.cast(pa.array([], src), dst)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


def _check_no_nulls(ds: DatasetCore, chain: list[LanceField], path: str) -> None:
    """Refuse making `path` non-nullable while some live value of it is NULL."""
    for batch in Scanner(ds, fragments_of(ds), columns=[chain[0].name]).to_batches():
        arr = batch.column(0)
        null = arr.is_null()
        for f in chain[1:]:  # a field under a NULL struct reads as NULL too
            arr = arr.field(f.name)
            null = pc.or_(null, arr.is_null())
        if pc.any(null).as_py():
            raise InvalidInputError(
                f'Column "{path}" contains NULL values and cannot be made non-nullable'
            )


def _check_unique_names(fields: Sequence[LanceField], where: str = "") -> None:
    seen: set[str] = set()
    for f in fields:
        if f.name in seen:
            raise InvalidInputError(f'Duplicate field name "{where}{f.name}" in the schema')
        seen.add(f.name)
        if f.logical_type == "struct":
            _check_unique_names(f.children, f"{where}{f.name}.")


def alter_columns(ds: DatasetCore, *alterations: Mapping[str, Any]) -> DatasetCore:
    """Rename columns, change their nullability or their type (pylance's `alter_columns`).

    Each alteration is a dict with "path" (a column name or "a.b" path) and at least one of
    "name", "nullable" and "data_type". Renames and nullability are metadata-only (a
    `Project`); type changes (top-level columns) rewrite the cast columns only (a `Merge`).
    """
    if len(alterations) == 1 and isinstance(alterations[0], (list, tuple)):
        alterations = tuple(alterations[0])
    if not alterations:
        raise InvalidInputError("alter_columns needs at least one alteration")
    old = ds.lance_schema
    fields = copy.deepcopy(old.fields)
    next_id = max_field_id(ds.manifest) + 1
    casts: list[tuple[LanceField, int]] = []  # (old field, index of the top-level field)
    for alt in alterations:
        if not isinstance(alt, Mapping):
            raise InvalidInputError(f"an alteration must be a dict, not {type(alt).__name__}")
        unknown = set(alt) - _ALTER_KEYS
        if unknown:
            raise InvalidInputError(f"unknown alteration keys {sorted(unknown)}")
        if "path" not in alt:
            raise InvalidInputError("an alteration needs a 'path'")
        path = alt["path"]
        name, nullable, data_type = alt.get("name"), alt.get("nullable"), alt.get("data_type")
        if name is None and nullable is None and data_type is None:
            raise InvalidInputError(
                "At least one of name, nullable, or data_type must be specified"
            )
        chain = _resolve_path(old, path)
        src = chain[-1]
        dest = _find_by_id(fields, src.id)
        if name is not None:
            if not isinstance(name, str) or not name:
                raise InvalidInputError(f"a new column name must be a non-empty string: {name!r}")
            dest.name = name
        if nullable is not None:
            if not nullable and src.nullable:
                _check_no_nulls(ds, chain, path)
            dest.nullable = bool(nullable)
        if data_type is not None:
            if not isinstance(data_type, pa.DataType):
                raise InvalidInputError(f"data_type must be a pyarrow DataType, not {data_type!r}")
            if src.arrow_type.equals(data_type):
                continue
            if not _castable(src.arrow_type, data_type):
                raise InvalidInputError(
                    f'Cannot cast column "{path}" from {src.arrow_type} to {data_type}'
                )
            if len(chain) > 1:
                raise UnsupportedFeatureError(
                    f"changing the type of nested field {path!r} is not supported"
                )
            if any(o.id == src.id for o, _ in casts):
                raise InvalidInputError(f"column {path!r} is cast twice")
            position = next(i for i, f in enumerate(fields) if f.id == src.id)
            kept = pa.field(dest.name, data_type, dest.nullable, metadata=src.metadata or None)
            cast = LanceSchema.from_arrow(pa.schema([kept]), first_id=next_id).fields[0]
            next_id = max(f.id for f in cast.walk()) + 1
            fields[position] = cast
            casts.append((src, position))
    _check_unique_names(fields)
    new_schema = LanceSchema(fields, old.metadata)
    check_primary_key_nullability(new_schema, ds.uri)
    if not casts:
        project = transaction_pb2.Transaction.Project(schema=new_schema.to_protos())
        return commit_body(ds, "project", project)
    _check_not_indexed(ds, [src for src, _ in casts])
    return _rewrite_cast_columns(ds, new_schema, sorted(casts, key=lambda c: c[1]))


def _check_not_indexed(ds: DatasetCore, fields: Sequence[LanceField]) -> None:
    """Refuse to cast indexed columns, as pylance does: the cast would invalidate the index."""
    ids = {g.id for f in fields for g in f.walk()}
    names = sorted({i.name for i in indices_of(ds.manifest, system=True) if ids & set(i.field_ids)})
    if names:
        raise InvalidInputError(
            f"{ds.uri}: cannot cast column(s) {', '.join(repr(f.name) for f in fields)}: "
            f"index(es) {', '.join(names)} cover them; drop the index(es) first"
        )


def _rewrite_cast_columns(
    ds: DatasetCore, new_schema: LanceSchema, casts: list[tuple[LanceField, int]]
) -> DatasetCore:
    """Write the cast columns, one file per fragment, and commit the Merge."""
    sources = LanceSchema([src for src, _ in casts], ds.lance_schema.metadata)
    targets = LanceSchema([new_schema.fields[i] for _, i in casts], new_schema.metadata)
    target_arrow = targets.to_arrow()
    filler = filler_row(target_arrow)
    old_ids = {g.id for src, _ in casts for g in src.walk()}
    schema_ids = set(new_schema.field_ids())

    def per_fragment(frag: LanceFragment) -> Iterator[pa.RecordBatch]:
        for keep, batch in read_live(frag, sources, DEFAULT_BATCH_SIZE):
            arrays = []
            for col, f in zip(batch.columns, target_arrow, strict=True):
                try:
                    # checked, but times may lose precision (us -> ms), as in pylance
                    options = pc.CastOptions(f.type, allow_time_truncate=True)
                    arrays.append(pc.cast(col, options=options))
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise InvalidInputError(
                        f"{ds.uri}: cannot cast column {f.name!r} to {f.type}: {e}"
                    ) from None
            cast = pa.RecordBatch.from_arrays(arrays, schema=target_arrow)
            yield to_physical(cast, keep, filler)

    files = FileSet(ds, targets)
    fragments = []
    try:
        for frag in fragments_of(ds):
            new_file = files.write(frag, per_fragment(frag))
            pb = table_pb2.DataFragment()
            pb.CopyFrom(frag.metadata)
            for df in pb.files:
                if df.file_major_version >= 2:  # legacy files keep their ids (see above)
                    df.fields[:] = [TOMBSTONE if i in old_ids else i for i in df.fields]
            pb.files.append(new_file)
            live = [df for df in pb.files if any(i in schema_ids for i in df.fields)]
            del pb.files[:]
            pb.files.extend(live)
            fragments.append(pb)
    except BaseException:
        files.remove()
        raise
    return commit_body(ds, "merge", merge_body(fragments, new_schema), files)
