"""Arrow types between Lance datasets and Spark, both ways.

Reading, every type Lance stores gets the Spark type of the nearest Arrow type Spark's
Arrow conversion takes; the executors cast the server's batches to it (the driver only
declares the schema). As Spark's own Parquet reader does, unsigned integers widen
(`uint8` → smallint, `uint16` → int, `uint32` → bigint, `uint64` → decimal(20,0)) and
`date64` reads as date. Further:

- `float16` → float (exact);
- `time32` / `time64` → timestamp_ntz on 1970-01-01 (Spark's TIME type is off by default;
  `hour()`, comparisons and `date_format(t, 'HH:mm:ss')` work);
- `timestamp[ns]` (with or without a zone) → timestamp / timestamp_ntz and `duration[ns]` →
  interval day to second, truncated to microseconds (timestamps towards the past,
  durations towards zero) rather than failing the task;
- `decimal256(p, s)` → decimal(p, s) when p <= 38, else string (Spark's decimals stop at 38);
- `large_string` / `string_view` → string; `large_binary` / `binary_view` /
  `fixed_size_binary` → binary; dictionaries → their value type;
- `fixed_size_list` (vectors), `large_list` → array.

Writing into an existing dataset narrows each column back to the dataset's type: a value
that does not fit (a smallint of 300 into `uint8`, a long into `int32`, a float beyond
`float16`, a timestamp with a fraction into `time32[s]`) fails the task with a message
naming the column, the row and the value; an array going into a `fixed_size_list` must have
exactly its length. Columns match the dataset's by name, case-insensitively as Spark does
(`spark.sql.caseSensitive=false`) when the exact name is not there.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

__all__ = [
    "QuiverWriteError",
    "arrow_schema",
    "conform",
    "for_spark",
    "spark_schema",
    "spark_type",
    "to_dataset",
]

_WIDENED = {
    pa.uint8(): pa.int16(),
    pa.uint16(): pa.int32(),
    pa.uint32(): pa.int64(),
    pa.uint64(): pa.decimal128(20, 0),
    pa.float16(): pa.float32(),
    pa.date64(): pa.date32(),
    pa.large_string(): pa.string(),
    pa.string_view(): pa.string(),
    pa.large_binary(): pa.binary(),
    pa.binary_view(): pa.binary(),
}


class QuiverWriteError(ValueError):
    """Data that does not fit the dataset it is written to."""


# ---------------------------------------------------------------------------------------------
# Read: the types Spark gets


def spark_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type Spark reads for a dataset column of type `t` (see the module docs)."""
    if t in _WIDENED:
        return _WIDENED[t]
    if pa.types.is_time(t):
        return pa.timestamp("us")
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", t.tz) if t.unit == "ns" else t
    if pa.types.is_duration(t):
        return pa.duration("us") if t.unit == "ns" else t
    if pa.types.is_decimal256(t):
        return pa.decimal128(t.precision, t.scale) if t.precision <= 38 else pa.string()
    if pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_dictionary(t):
        return spark_type(t.value_type)
    if pa.types.is_map(t):
        key, item = t.key_field, t.item_field
        return pa.map_(key.with_type(spark_type(key.type)), item.with_type(spark_type(item.type)))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(spark_type(t.value_type)))
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return pa.list_(t.value_field.with_type(spark_type(t.value_type)))
    if pa.types.is_struct(t):
        # children nullable: a null struct's children hold nulls, which Spark's Arrow
        # conversion refuses under a non-nullable field (blob descriptions are such structs)
        return pa.struct([f.with_type(spark_type(f.type)).with_nullable(True) for f in t])
    return t


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of a dataset's Arrow schema (timestamps with a zone → timestamp,
    without → timestamp_ntz)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    fields = []
    for f in schema:
        try:
            fields.append(f.with_type(spark_type(f.type)))
            from_arrow_schema(pa.schema([fields[-1]]), prefer_timestamp_ntz=True)
        except Exception as e:
            raise TypeError(
                f"column {f.name!r} has a type Spark cannot represent ({f.type}): {e}"
            ) from e
    return from_arrow_schema(pa.schema(fields), prefer_timestamp_ntz=True)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark expects `read()` to yield for `schema`."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def _plain(t: pa.DataType) -> bool:
    """Whether pyarrow's safe cast takes `t` to its Spark type as this module means it."""
    if pa.types.is_time(t) or pa.types.is_decimal256(t) or pa.types.is_null(t):
        return False  # null: pyarrow 26 cuts a list's null values to the list's length
    if pa.types.is_timestamp(t) or pa.types.is_duration(t):
        return t.unit != "ns"
    if pa.types.is_dictionary(t):
        return _plain(t.value_type)
    return all(_plain(t.field(i).type) for i in range(t.num_fields))


def for_spark(array: pa.Array, target: pa.DataType) -> pa.Array:
    """`array` (a dataset column) cast to `target`, its Spark Arrow type."""
    t = array.type
    if t.equals(target):
        return array
    if _plain(t):
        return array.cast(target)
    if pa.types.is_dictionary(t):
        return for_spark(array.dictionary_decode(), target)
    if pa.types.is_time(t):
        micros = array.cast(pa.time64("us")) if t.unit in ("s", "ms") else array
        if t.unit == "ns":
            micros = pc.divide(array.cast(pa.int64()), 1000)  # time of day: never negative
        return micros.cast(pa.int64()).cast(target)
    if pa.types.is_timestamp(t):  # ns: towards the past, as Python's datetime would
        return pc.floor_temporal(array, unit="microsecond").cast(target)
    if pa.types.is_duration(t):  # ns: towards zero
        return array.cast(target, safe=False)
    if pa.types.is_decimal256(t):
        return array.cast(target)  # decimal128 (p <= 38) or string
    if pa.types.is_struct(t):  # field(i) is the child over the struct's own rows
        children = [for_spark(array.field(i), f.type) for i, f in enumerate(target)]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=_mask(array))
    if pa.types.is_fixed_size_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        array = array.cast(pa.list_(t.value_field))  # same values, list offsets
        t = array.type
    if pa.types.is_list(t) or pa.types.is_map(t):
        # the same validity and offsets (and slice) over the converted values
        if pa.types.is_map(t):
            entries = pa.StructArray.from_arrays(
                [array.keys, array.items], fields=[t.key_field, t.item_field]
            )
            values = for_spark(entries, target.value_type)
        else:
            values = for_spark(array.values, target.value_type)
        validity, offsets = array.buffers()[:2]
        return pa.Array.from_buffers(
            target, len(array), [validity, offsets], array.null_count, array.offset, [values]
        )
    return array.cast(target)


def _mask(array: pa.Array) -> pa.Array | None:
    return array.is_null() if array.null_count else None


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """A server batch with exactly Spark's Arrow schema `target` (columns by name)."""
    if batch.schema.equals(target, check_metadata=True):
        return batch
    columns = []
    for f in target:
        column = batch.column(f.name)
        if not column.type.equals(f.type):
            column = for_spark(column, f.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=target)


# ---------------------------------------------------------------------------------------------
# Write: back to the dataset's types


def match_names(names: list[str], target: pa.Schema) -> dict[str, str]:
    """Each of Spark's column names → the dataset's name it writes to: the same name, else
    the one name equal but for case (refused when ambiguous); unmatched names stay."""
    exact = set(target.names)
    folded: dict[str, list[str]] = {}
    for name in target.names:
        folded.setdefault(name.lower(), []).append(name)
    out = {}
    for name in names:
        if name in exact:
            out[name] = name
            continue
        candidates = folded.get(name.lower(), [])
        if len(candidates) > 1:
            raise QuiverWriteError(
                f"column {name!r} matches several columns of the dataset but for case "
                f"({', '.join(candidates)}); rename it to one of them"
            )
        out[name] = candidates[0] if candidates else name
    return out


def to_dataset(
    batch: pa.RecordBatch,
    target: pa.Schema | None,
    vectors: Mapping[str, int] | None = None,
    *,
    loose: bool = False,
    first_row: int = 0,
    blobs: Collection[str] = (),
) -> pa.RecordBatch:
    """Spark's batch in the dataset's types: columns renamed to the dataset's names, each
    narrowed to its type (`vectors`: column → dimension of new fixed-size list columns;
    `blobs`: binary columns stored as Lance blob columns). A dataset's blob column takes
    Spark's binary values as they are (the server stores them out of line).

    With `loose` (an overwrite, whose schema may change), only columns whose Spark type is
    what the dataset's column reads as are narrowed; others keep Spark's type. `first_row`
    is the task's row number of the batch's first row (for error messages)."""
    names = batch.schema.names
    if target is not None:
        renamed = match_names(names, target)
        if any(renamed[n] != n for n in names):
            if len(set(renamed.values())) < len(names):
                raise QuiverWriteError(
                    "the DataFrame has columns that differ only in case: "
                    + ", ".join(n for n in names if renamed[n] != n)
                )
            batch = batch.rename_columns([renamed[n] for n in names])
            names = batch.schema.names
    fields, columns, changed = [], [], False
    for i, name in enumerate(names):
        column, field = batch.column(i), batch.schema.field(i)
        want = None
        if target is not None and name in target.names:
            want = target.field(name)
            if loose and not spark_type(want.type).equals(column.type):
                want = None
            elif _is_blob(want):
                want = _blob_field(field, column, name)
        if want is None and name in blobs:
            want = _blob_field(field, column, name)
        if want is None and vectors and name in vectors:
            want = field.with_type(_vector_type(column.type, vectors[name], name))
        if want is not None and not want.type.equals(column.type):
            column = narrow(column, want.type, name, first_row)
            field = field.with_type(want.type)
            changed = True
        if want is not None and _is_blob(want) and field.metadata != want.metadata:
            field, changed = want, True
        fields.append(field)
        columns.append(column)
    if not changed:
        return batch
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields, batch.schema.metadata))


_BLOB = {b"lance-encoding:blob": b"true"}


def _is_blob(field: pa.Field) -> bool:
    """A dataset's blob column (legacy binary, or blob v2), or one being made."""
    meta = field.metadata or {}
    if isinstance(field.type, pa.ExtensionType):
        return field.type.extension_name == "lance.blob.v2"
    return meta.get(b"lance-encoding:blob") == b"true" or (
        meta.get(b"ARROW:extension:name") == b"lance.blob.v2"
    )


def _blob_field(field: pa.Field, column: pa.Array, name: str) -> pa.Field:
    """Spark's binary column as a blob column's values: large binary, marked as a blob."""
    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        raise QuiverWriteError(
            f"column {name!r} is a blob column (or named in 'blob_columns') but is not "
            f"binary ({column.type})"
        )
    return pa.field(name, pa.large_binary(), field.nullable, _BLOB)


def _vector_type(t: pa.DataType, dimension: int, name: str) -> pa.DataType:
    if pa.types.is_fixed_size_list(t) and t.list_size == dimension:
        return t
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        raise QuiverWriteError(
            f"column {name!r} is named in the 'vector_columns' option but is not an array "
            f"({t}); vectors are arrays of numbers, e.g. array<float>"
        )
    return pa.list_(t.value_field, dimension)


def narrow(column: pa.Array, target: pa.DataType, name: str, first_row: int = 0) -> pa.Array:
    """`column` cast to the dataset's `target` type; a value that does not fit raises
    `QuiverWriteError` naming the column, the row and the value."""
    if pa.types.is_dictionary(target) and not pa.types.is_dictionary(column.type):
        values = narrow(column, target.value_type, name, first_row)
        return narrow(values.dictionary_encode(), target, name, first_row)
    if pa.types.is_fixed_size_list(target) and not pa.types.is_fixed_size_list(column.type):
        _check_lengths(column, target.list_size, name, first_row)
        column = _fixed_size(column, target.list_size)
    try:
        out = column.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise _does_not_fit(column, target, name, first_row, e) from None
    if pa.types.is_floating(target) and target.bit_width < _float_width(column.type):
        grew = pc.and_(pc.is_finite(column), pc.invert(pc.is_finite(out)))
        if pc.any(grew).as_py():
            row = _first_true(grew)
            raise QuiverWriteError(
                f"column {name!r}: value {column[row].as_py()!r} (row {first_row + row}) is "
                f"beyond the dataset's {target} range"
            )
    return out


def _float_width(t: pa.DataType) -> int:
    return t.bit_width if pa.types.is_floating(t) else 0


def _check_lengths(column: pa.Array, size: int, name: str, first_row: int) -> None:
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return  # the cast's own error
    lengths = pc.list_value_length(column)
    wrong = pc.fill_null(pc.not_equal(lengths, size), False)
    if pc.any(wrong).as_py():
        row = _first_true(wrong)
        raise QuiverWriteError(
            f"column {name!r} holds vectors of {size} values (fixed_size_list), but row "
            f"{first_row + row} of this task has {lengths[row].as_py()}"
        )


def _fixed_size(column: pa.Array, size: int) -> pa.Array:
    """A list array whose non-null lists hold `size` values as a fixed-size list array.

    Not pyarrow's cast: with null lists (0 values) in the input it reads out of bounds
    and may crash the worker (pyarrow 26)."""
    import numpy as np

    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return column  # the cast's own error
    starts = column.offsets.to_numpy()[:-1].astype(np.int64)
    indices = (starts[:, None] + np.arange(size, dtype=np.int64)).ravel()
    nulls = column.is_null().to_numpy(zero_copy_only=False)
    taken = pa.array(indices, mask=np.repeat(nulls, size) if nulls.any() else None)
    values = column.values.take(taken)
    mask = pa.array(nulls) if nulls.any() else None
    return pa.FixedSizeListArray.from_arrays(values, size, mask=mask)


def _first_true(mask: pa.Array) -> int:
    return int(pc.index(mask, True).as_py())


def _does_not_fit(
    column: pa.Array, target: pa.DataType, name: str, first_row: int, error: Exception
) -> QuiverWriteError:
    """The error of a failed narrowing cast, locating the first value that does not fit."""
    reason = str(error).split("\n")[0]
    try:
        back = column.cast(target, safe=False).cast(column.type)
        differs = pc.fill_null(pc.not_equal(back, column), False)
        if pc.any(differs).as_py():
            row = _first_true(differs)
            return QuiverWriteError(
                f"column {name!r}: value {column[row].as_py()!r} (row {first_row + row}) does "
                f"not fit the dataset's type {target} ({reason})"
            )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass  # nested, or a value no cast reads: the column and Arrow's reason
    return QuiverWriteError(
        f"column {name!r} ({column.type}) does not fit the dataset's type {target}: {reason}"
    )
