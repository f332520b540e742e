"""Writer for legacy Lance data files (file version 0.1, `DataFile` major.minor 0.2).

The layout is the one `format.file.legacy` reads, produced the way pylance's
`previous::FileWriter` produces it, so a file of the same rows and row groups comes out
byte for byte the same (apart from the writer name in the embedded schema):

1. Row groups of `max_rows_per_group` rows (the last one shorter). Rows are buffered
   across `write()` calls until a group is full, as pylance's dataset writer does, so at
   most one group is held. In each group every field of the schema writes its page in
   pre-order: PLAIN (raw little-endian values, bit-packed booleans, flattened fixed-size
   lists), VAR_BINARY (value bytes, then ``n + 1`` absolute i64 positions; the page points
   at the positions), DICTIONARY keys (PLAIN), list offsets (``n + 1`` entries from 0)
   followed by the child's pages; structs write nothing and null columns write an empty
   page.
2. The page table: a dense ``(max id - min id + 1) x groups x (position, length)`` i64
   matrix, (0, 0) where a field has no page.
3. Per-group statistics (null count, min, max) of the primitive and binary-like fields
   outside lists, stored as one group of ``struct<null_count, min_value, max_value>``
   columns named by field id, with their own page table (pylance's rules: integer bounds
   when everything is null, NaN ignored, signed zeros normalised, binary bounds truncated
   to 64 bytes with the maximum incremented).
4. Dictionary values, once per dictionary field, in field-id order.
5. The schema as a u32-length-prefixed `lance.table.Manifest` holding only the fields (each
   dictionary field's `dictionary{offset, length}` pointing at its values), the schema
   metadata, version 1, the writer version and data format ``lance 0.1``.
6. The u32-length-prefixed `lance.file.Metadata`, then the 16-byte footer
   ``i64 metadata position | u16 0 | u16 2 | "LANC"``.

Nothing stores validity: as in pylance, the bytes under null slots are written as the
Arrow buffers hold them (zero or empty for arrays built by pyarrow), except booleans,
whose nulls become ``False``.

A dictionary field stores one dictionary per file, the first batch's (or one given up
front); unlike pylance, which writes later batches' keys unchanged even when their
dictionary differs, keys are remapped onto the stored values (unseen values are
appended). pylance reads a legacy dataset's dictionaries from the head of its manifest
file, not from the data files: `encode_dictionaries` lays them out for that.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.errors import (
    CorruptFileError,
    InvalidInputError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from quiver.format.file.base import DataFileWriter, WrittenFile
from quiver.format.file.legacy import FOOTER_SIZE, LEGACY_VERSIONS, MAGIC, _fixed_info
from quiver.format.file.types import is_var_binary
from quiver.format.proto import file_pb2, table_pb2
from quiver.format.table.schema import ENCODING_NONE, LanceField, LanceSchema

# What the manifest's DataFile records for files of this writer (pylance: 0.2).
MAJOR_VERSION, MINOR_VERSION = LEGACY_VERSIONS[-1]
DEFAULT_MAX_ROWS_PER_GROUP = 1024
WRITER_VERSION = ("quiver", "0.1.0")
# Encoded bytes are collected and handed to the sink in pieces of about this size.
_FLUSH_BYTES = 4 * 1024 * 1024
# Binary statistics keep at most this many leading bytes (pylance's BINARY_PREFIX_LENGTH).
_STATS_PREFIX = 64

_Pages = dict[int, tuple[int, int]]  # field id -> (position, length) within one group


def _unwrap(arr: pa.Array) -> pa.Array:
    """The storage array of an extension array, else the array itself."""
    return arr.storage if isinstance(arr, pa.ExtensionArray) else arr


def _storage_type(t: pa.DataType) -> pa.DataType:
    """The storage type of an extension type, else the type itself."""
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def _same_type(got: pa.DataType, want: pa.DataType) -> bool:
    """Whether a batch column of type `got` can be written as `want` (dictionary order ignored)."""
    got = _storage_type(got)
    if pa.types.is_dictionary(got) and pa.types.is_dictionary(want):
        return got.index_type == want.index_type and got.value_type == want.value_type
    return bool(got == want)


def _supports_stats(t: pa.DataType) -> bool:
    """Whether pylance collects statistics for a field of type `t`."""
    return (
        pa.types.is_boolean(t)
        or pa.types.is_integer(t)
        or pa.types.is_float32(t)
        or pa.types.is_float64(t)
        or pa.types.is_date32(t)
        or pa.types.is_date64(t)
        or pa.types.is_decimal128(t)
        or is_var_binary(t)
    )


def _truncate_utf8(data: bytes, limit: int) -> bytes:
    """The longest prefix of UTF-8 `data` that ends on a character boundary within `limit`."""
    cut = limit
    while cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return data[:cut]


def _increment_utf8(data: bytes) -> bytes | None:
    """The smallest valid UTF-8 string above `data` that changes one byte (pylance's rule)."""
    buf = bytearray(data)
    for idx in range(len(buf) - 1, -1, -1):
        original = buf[idx]
        for byte in range(original + 1, 256):
            buf[idx] = byte
            try:
                bytes(buf).decode("utf-8")
            except UnicodeDecodeError:
                continue
            return bytes(buf)
        buf[idx] = original
    return None


def _increment(data: bytes) -> bytes | None:
    """`data` plus one as a big-endian number of the same length, None if it overflows."""
    buf = bytearray(data)
    for idx in range(len(buf) - 1, -1, -1):
        if buf[idx] < 255:
            buf[idx] += 1
            return bytes(buf)
        buf[idx] = 0
    return None


def _int_dtype(t: pa.DataType) -> np.dtype:
    """The little-endian numpy integer dtype of an integer or date type."""
    if pa.types.is_date32(t):
        return np.dtype("<i4")
    if pa.types.is_date64(t):
        return np.dtype("<i8")
    return np.dtype(t.to_pandas_dtype()).newbyteorder("<")


@dataclass
class _StatsColumn:
    """The statistics collected so far for one field: a row per row group."""

    field: LanceField
    type: pa.DataType
    path: tuple[int, ...]  # child indexes from the top-level column down through structs
    null_counts: list[int]
    mins: list[object]  # raw bytes (fixed width), bool, or bytes | None (binary-like)
    maxs: list[object]


class _Output:
    """Encoded bytes on their way to a sink, with the file position of the next byte."""

    def __init__(self, sink: BinaryIO | None, start: int = 0) -> None:
        """Collect into memory (`sink` None) or hand to `sink` in pieces of `_FLUSH_BYTES`."""
        self.sink = sink
        self.pos = start
        self.chunks: list[memoryview] = []
        self.pending = 0

    def emit(self, data: object) -> None:
        """Append bytes (any contiguous buffer)."""
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        mv = memoryview(data).cast("B")  # type: ignore[arg-type]
        n = mv.nbytes
        if not n:
            return
        self.chunks.append(mv)
        self.pos += n
        self.pending += n
        if self.sink is not None and self.pending >= _FLUSH_BYTES:
            self.flush()

    def message(self, body: bytes) -> int:
        """Append a u32-length-prefixed message; returns its position."""
        pos = self.pos
        self.emit(struct.pack("<I", len(body)) + body)
        return pos

    def flush(self) -> None:
        """Hand the collected bytes to the sink."""
        if self.sink is None or not self.chunks:
            return
        self.sink.write(self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks))
        self.chunks = []
        self.pending = 0

    def getvalue(self) -> bytes:
        """Everything collected (in-memory outputs)."""
        return b"".join(self.chunks)

    def plain(self, arrays: Sequence[pa.Array], t: pa.DataType) -> int:
        """PLAIN: raw values, fixed-size lists flattened, booleans bit-packed (nulls False).

        Returns the page position.
        """
        pos = self.pos
        leaves = list(arrays)
        while pa.types.is_fixed_size_list(t):
            k = t.list_size
            leaves = [a.values.slice(a.offset * k, len(a) * k) for a in leaves]
            t = t.value_type
        leaves = [a for a in leaves if len(a)]
        if pa.types.is_boolean(t):
            if leaves:
                bits = np.concatenate([_bool_bits(a) for a in leaves])
                self.emit(np.packbits(bits, bitorder="little"))
            return pos
        width = t.bit_width // 8
        for a in leaves:
            buf = a.buffers()[1]
            self.emit(memoryview(buf)[a.offset * width : (a.offset + len(a)) * width])
        return pos

    def binary(self, arrays: Sequence[pa.Array]) -> int:
        """VAR_BINARY: value bytes then ``n + 1`` absolute positions; returns their position."""
        running = self.pos
        positions = [np.array([running], dtype=np.int64)]
        for a in arrays:
            if not len(a):
                continue
            offs = _offsets(a)
            lo, hi = int(offs[0]), int(offs[-1])
            if hi > lo:
                self.emit(memoryview(a.buffers()[2])[lo:hi])
            positions.append(offs[1:].astype(np.int64) + (running - lo))
            running += hi - lo
        pos = self.pos
        self.emit(np.concatenate(positions).astype("<i8", copy=False))
        return pos

    def list_offsets(self, arrays: Sequence[pa.Array], large: bool) -> tuple[int, list[pa.Array]]:
        """A list's offsets page (``n + 1`` entries from 0); returns it and the child pieces."""
        running = 0
        parts = [np.zeros(1, dtype=np.int64)]
        children = []
        for a in arrays:
            if not len(a):
                continue
            offs = _offsets(a)
            lo, hi = int(offs[0]), int(offs[-1])
            parts.append(offs[1:].astype(np.int64) + (running - lo))
            children.append(a.values.slice(lo, hi - lo))
            running += hi - lo
        if not large and running >= 2**31:
            raise OverflowError("more than 2**31 list items in one row group")
        pos = self.pos
        self.emit(np.concatenate(parts).astype("<i8" if large else "<i4"))
        return pos, children

    def dictionary_values(self, values: pa.Array) -> tuple[int, int]:
        """Dictionary values (PLAIN or VAR_BINARY); returns their (offset, length)."""
        pos = (
            self.binary([values])
            if is_var_binary(values.type)
            else self.plain([values], values.type)
        )
        return pos, len(values)


def encode_dictionaries(
    dictionaries: Mapping[int, pa.Array], start: int = 0
) -> tuple[bytes, dict[int, tuple[int, int]]]:
    """Dictionary values laid out as pylance stores them, in field-id order, from `start`.

    Legacy datasets also keep every dictionary at the head of the manifest file, where
    `Field.dictionary{offset, length}` points (pylance loads them from there): the bytes,
    and each field id's (offset, length).
    """
    out = _Output(None, start)
    where = {fid: out.dictionary_values(dictionaries[fid]) for fid in sorted(dictionaries)}
    return out.getvalue(), where


class LegacyFileWriter(DataFileWriter):
    """Writes one legacy (v0.1) Lance data file, streaming one row group at a time."""

    def __init__(
        self,
        sink: BinaryIO,
        schema: LanceSchema,
        *,
        max_rows_per_group: int = DEFAULT_MAX_ROWS_PER_GROUP,
        path_for_errors: str,
        writer_version: tuple[str, str] = WRITER_VERSION,
        dictionaries: Mapping[int, pa.Array] | None = None,
    ) -> None:
        """Check that every field can be stored; nothing is written until a group fills.

        `sink` is a fresh writable binary file; `finish()` completes it but leaves closing
        it (which, for `ObjectStore.open_write`, publishes it) to the caller.
        `dictionaries` (field id -> values) fixes dictionary fields' values up front, e.g.
        the dataset's, so that every file of a dataset shares them; otherwise each field
        keeps the first batch's. Keys of batches with other dictionaries are remapped.
        """
        self.path = path_for_errors
        if max_rows_per_group <= 0:
            raise InvalidInputError(
                f"{self.path}: max_rows_per_group must be positive, not {max_rows_per_group}"
            )
        if not schema.fields:
            raise InvalidInputError(f"{self.path}: cannot write a data file with no columns")
        for f in schema.fields:
            self._check_field(f, f.name)
        self.schema = schema
        self.max_rows_per_group = max_rows_per_group
        self.writer_version = writer_version
        self._sink = sink
        self._names = [f.name for f in schema.fields]
        self._types = [f.arrow_type for f in schema.fields]
        self._type_of = {f.id: f.arrow_type for f in schema.walk()}  # computed once
        ids = schema.field_ids()
        self._min_id, self._max_id = min(ids), max(ids)

        self._out = _Output(sink)
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._batch_offsets = [0]
        self._page_rows: list[np.ndarray] = []  # per group: (num ids, 2) int64
        self._dicts: dict[int, pa.Array] = {}  # field id -> dictionary values
        for fid, values in (dictionaries or {}).items():
            t = self._type_of.get(fid)
            if t is None or not pa.types.is_dictionary(t):
                raise InvalidInputError(f"{self.path}: field id {fid} is not a dictionary field")
            values = _unwrap(values)
            if values.type != t.value_type:
                raise SchemaMismatchError(
                    f"{self.path}: dictionary of field id {fid} has type {values.type}, "
                    f"expected {t.value_type}"
                )
            self._dicts[fid] = values
        self._stats = self._stats_columns()
        self._finished: WrittenFile | None = None

    # -- validation -----------------------------------------------------------------------
    def _check_field(self, field: LanceField, where: str) -> None:
        """Raise UnsupportedFeatureError naming the column if `field` has no v1 encoding."""
        try:
            t = field.arrow_type
        except (UnsupportedFeatureError, CorruptFileError) as e:
            raise UnsupportedFeatureError(f"{self.path}: column {where!r}: {e}") from None
        if pa.types.is_map(t):
            raise UnsupportedFeatureError(
                f"{self.path}: column {where!r}: maps cannot be stored in legacy (0.1) files"
            )
        if pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
            for c in field.children:
                self._check_field(c, f"{where}.{c.name}")
            return
        if pa.types.is_dictionary(t):
            vt = t.value_type
            if not (pa.types.is_integer(vt) or is_var_binary(vt)):
                raise UnsupportedFeatureError(
                    f"{self.path}: column {where!r}: dictionary values of type {vt} cannot be "
                    "stored in legacy (0.1) files"
                )
            return
        if pa.types.is_null(t) or is_var_binary(t) or _fixed_info(t) is not None:
            return
        raise UnsupportedFeatureError(
            f"{self.path}: column {where!r}: type {t} cannot be stored in legacy (0.1) files"
        )

    def _check_batch(self, batch: pa.RecordBatch) -> list[pa.Array]:
        """The batch's columns, after checking names, types and non-nullable fields."""
        if batch.schema.names != self._names:
            raise SchemaMismatchError(
                f"{self.path}: batch columns {batch.schema.names} do not match the file's "
                f"columns {self._names}"
            )
        cols = []
        for i, (name, want) in enumerate(zip(self._names, self._types, strict=True)):
            got = batch.schema.field(i).type
            if not _same_type(got, want):
                raise SchemaMismatchError(
                    f"{self.path}: column {name!r} has type {got}, expected {want}"
                )
            col = _unwrap(batch.column(i))
            self._check_nulls(self.schema.fields[i], col, name)
            cols.append(col)
        return cols

    def _check_nulls(self, field: LanceField, arr: pa.Array, where: str) -> None:
        """Reject nulls in non-nullable fields, looking through structs and lists."""
        if not field.nullable and arr.null_count:
            raise SchemaMismatchError(
                f"{self.path}: column {where!r} is not nullable but holds "
                f"{arr.null_count} null value(s)"
            )
        t = field.arrow_type
        if pa.types.is_struct(t):
            for i, c in enumerate(field.children):
                self._check_nulls(c, arr.field(i), f"{where}.{c.name}")
        elif (pa.types.is_list(t) or pa.types.is_large_list(t)) and len(arr):
            lo, hi = _list_bounds(arr)
            child = field.children[0]
            self._check_nulls(child, arr.values.slice(lo, hi - lo), f"{where}.{child.name}")

    # -- public API -----------------------------------------------------------------------
    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append rows; full row groups are encoded and handed to the sink at once."""
        if self._finished is not None:
            raise InvalidInputError(f"{self.path}: the writer is already finished")
        if isinstance(batch, pa.Table):
            for b in batch.to_batches():
                self.write(b)
            return
        cols = self._check_batch(batch)
        n = batch.num_rows
        if n == 0:
            return
        batch = pa.RecordBatch.from_arrays(cols, names=self._names)
        start = 0
        while start < n:
            take = min(n - start, self.max_rows_per_group - self._pending_rows)
            self._pending.append(batch.slice(start, take) if take < n else batch)
            self._pending_rows += take
            start += take
            if self._pending_rows == self.max_rows_per_group:
                self._write_group()

    def finish(self) -> WrittenFile:
        """Write the last group, page table, statistics, dictionaries, schema and footer."""
        if self._finished is not None:
            return self._finished
        if self._pending_rows:
            self._write_group()
        n_ids = self._max_id - self._min_id + 1
        if self._page_rows:
            table = np.stack(self._page_rows, axis=1)
        else:
            table = np.zeros((n_ids, 0, 2), dtype=np.int64)
        out = self._out
        page_table_position = out.pos
        out.emit(np.ascontiguousarray(table, dtype="<i8"))

        statistics = self._write_statistics()

        dict_info = {fid: out.dictionary_values(self._dicts[fid]) for fid in sorted(self._dicts)}

        protos = self.schema.to_protos()
        for pb in protos:
            if pb.logical_type == "null":
                pb.encoding = ENCODING_NONE  # pylance's hint for null columns
            if pb.id in dict_info:
                pb.dictionary.offset, pb.dictionary.length = dict_info[pb.id]
        library, version = self.writer_version
        manifest = table_pb2.Manifest(
            fields=protos,
            version=1,
            writer_version=table_pb2.Manifest.WriterVersion(library=library, version=version),
            data_format=table_pb2.Manifest.DataStorageFormat(file_format="lance", version="0.1"),
        )
        for k, v in self.schema.metadata.items():
            manifest.schema_metadata[k] = v
        manifest_position = out.message(manifest.SerializeToString())

        metadata = file_pb2.Metadata(
            manifest_position=manifest_position,
            batch_offsets=self._batch_offsets,
            page_table_position=page_table_position,
        )
        if statistics is not None:
            metadata.statistics.CopyFrom(statistics)
        metadata_position = out.message(metadata.SerializeToString())
        footer = struct.pack("<qHH4s", metadata_position, MAJOR_VERSION, MINOR_VERSION, MAGIC)
        assert len(footer) == FOOTER_SIZE
        out.emit(footer)
        out.flush()
        if hasattr(self._sink, "flush"):
            self._sink.flush()
        self._finished = WrittenFile(
            num_rows=self._batch_offsets[-1],
            size_bytes=out.pos,
            fields=self.schema.field_ids(),
            column_indices=[],
            major_version=MAJOR_VERSION,
            minor_version=MINOR_VERSION,
        )
        return self._finished

    # -- row groups -----------------------------------------------------------------------
    def _write_group(self) -> None:
        """Encode the buffered rows as one row group."""
        pieces, rows = self._pending, self._pending_rows
        self._pending, self._pending_rows = [], 0
        pages: _Pages = {}
        for i, field in enumerate(self.schema.fields):
            self._write_field(field, [p.column(i) for p in pieces], pages, self._type_of)
        self._collect_stats(pieces)
        row = np.zeros((self._max_id - self._min_id + 1, 2), dtype=np.int64)
        for fid, page in pages.items():
            row[fid - self._min_id] = page
        self._page_rows.append(row)
        self._batch_offsets.append(self._batch_offsets[-1] + rows)
        if self._batch_offsets[-1] >= 2**31:
            raise InvalidInputError(f"{self.path}: legacy files hold fewer than 2**31 rows")
        self._out.flush()

    def _write_field(
        self,
        field: LanceField,
        arrays: Sequence[pa.Array],
        pages: _Pages,
        type_of: Mapping[int, pa.DataType],
    ) -> None:
        """Write the pages of `field` for one group made of `arrays` (pieces, in row order).

        `type_of` maps the field ids of the schema being written to their Arrow types.
        """
        t = type_of[field.id]
        arrays = [_unwrap(a) for a in arrays]
        n = sum(len(a) for a in arrays)
        if pa.types.is_struct(t):
            for i, child in enumerate(field.children):
                self._write_field(child, [a.field(i) for a in arrays], pages, type_of)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            try:
                pos, children = self._out.list_offsets(arrays, pa.types.is_large_list(t))
            except OverflowError as e:
                raise InvalidInputError(f"{self.path}: column {field.name!r}: {e}") from None
            pages[field.id] = (pos, n + 1)
            self._write_field(field.children[0], children, pages, type_of)
        elif pa.types.is_null(t):
            pages[field.id] = (self._out.pos, n)
        elif pa.types.is_dictionary(t):
            keys = [self._dictionary_keys(field, a) for a in arrays]
            pages[field.id] = (self._out.plain(keys, t.index_type), n)
        elif is_var_binary(t):
            pages[field.id] = (self._out.binary(arrays), n)
        else:
            pages[field.id] = (self._out.plain(arrays, t), n)

    # -- dictionaries ---------------------------------------------------------------------
    @property
    def dictionaries(self) -> dict[int, pa.Array]:
        """The dictionary values this file stores (so far), by field id.

        A dataset manifest needs them too: see `encode_dictionaries`.
        """
        return dict(self._dicts)

    def _dictionary_keys(self, field: LanceField, arr: pa.DictionaryArray) -> pa.Array:
        """The keys of `arr` against the file's dictionary of `field`, extending it if needed.

        The file stores one dictionary per field: the first batch's. Batches with another
        dictionary have their keys remapped (new values are appended to the file's).
        """
        values = arr.dictionary
        stored = self._dicts.get(field.id)
        if stored is None:
            self._dicts[field.id] = values
            return arr.indices
        if _same_buffers(values, stored) or values.equals(stored):
            return arr.indices
        mapping = pc.index_in(values, value_set=stored)
        missing = mapping.is_null()
        if pc.any(missing).as_py():
            stored = pa.concat_arrays([stored, values.filter(missing)])
            self._dicts[field.id] = stored
            mapping = pc.index_in(values, value_set=stored)
        index_type = arr.type.index_type
        limit = np.iinfo(index_type.to_pandas_dtype()).max
        if len(stored) - 1 > limit:
            raise InvalidInputError(
                f"{self.path}: column {field.name!r}: {len(stored)} distinct dictionary values "
                f"do not fit {index_type} keys"
            )
        keys = pc.take(mapping, arr.indices).fill_null(0)
        return keys.cast(index_type)

    # -- statistics -----------------------------------------------------------------------
    def _stats_columns(self) -> list[_StatsColumn]:
        """The fields pylance keeps statistics for (outside lists), by field id."""
        out: list[_StatsColumn] = []

        def visit(field: LanceField, path: tuple[int, ...]) -> None:
            t = self._type_of[field.id]
            if pa.types.is_struct(t):
                for i, c in enumerate(field.children):
                    visit(c, (*path, i))
            elif _supports_stats(t):
                out.append(_StatsColumn(field, t, path, [], [], []))

        for i, f in enumerate(self.schema.fields):
            visit(f, (i,))
        return sorted(out, key=lambda s: s.field.id)

    def _collect_stats(self, pieces: Sequence[pa.RecordBatch]) -> None:
        """Append one statistics row per eligible field for the group made of `pieces`."""
        for col in self._stats:
            arrays = []
            for p in pieces:
                a = _unwrap(p.column(col.path[0]))
                for i in col.path[1:]:
                    a = _unwrap(a.field(i))
                arrays.append(a)
            lo, hi, nulls = _group_stats(col.type, arrays)
            col.null_counts.append(nulls)
            col.mins.append(lo)
            col.maxs.append(hi)

    def _write_statistics(self) -> file_pb2.Metadata.StatisticsMetadata | None:
        """Write the statistics group and its page table; None if there is nothing to keep."""
        if not self._stats or not self._page_rows:
            return None
        fields, arrays = [], []
        for col in self._stats:
            t = col.type
            kids = [
                pa.field("null_count", pa.int64(), nullable=False),
                pa.field("min_value", t),  # pylance: nullable whatever the field is
                pa.field("max_value", t),
            ]
            fields.append(pa.field(str(col.field.id), pa.struct(kids), nullable=False))
            arrays.append(
                pa.StructArray.from_arrays(
                    [
                        pa.array(col.null_counts, pa.int64()),
                        _stats_array(t, col.mins),
                        _stats_array(t, col.maxs),
                    ],
                    fields=kids,
                )
            )
        schema = LanceSchema.from_arrow(pa.schema(fields))
        pages: _Pages = {}
        type_of = {f.id: f.arrow_type for f in schema.walk()}
        for f, a in zip(schema.fields, arrays, strict=True):
            self._write_field(f, [a], pages, type_of)
        ids = schema.field_ids()
        table = np.zeros((max(ids) + 1, 2), dtype="<i8")
        for fid, page in pages.items():
            table[fid] = page
        position = self._out.pos
        self._out.emit(table)
        return file_pb2.Metadata.StatisticsMetadata(
            schema=schema.to_protos(), fields=ids, page_table_position=position
        )


# -- helpers ------------------------------------------------------------------------------
def _offsets(arr: pa.Array) -> np.ndarray:
    """The ``len + 1`` offsets of a (sliced) list or binary-like array."""
    t = arr.type
    large = pa.types.is_large_list(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    raw = np.frombuffer(arr.buffers()[1], dtype="<i8" if large else "<i4")
    return raw[arr.offset : arr.offset + len(arr) + 1]


def _list_bounds(arr: pa.Array) -> tuple[int, int]:
    """The child range ``lo..hi`` that a (sliced) list array covers."""
    offs = _offsets(arr)
    return int(offs[0]), int(offs[-1])


def _bool_bits(arr: pa.Array) -> np.ndarray:
    """One uint8 0/1 per value of a boolean array, nulls as 0."""
    n, off = len(arr), arr.offset
    validity, data = arr.buffers()[0], arr.buffers()[1]

    def bits(buf: pa.Buffer) -> np.ndarray:
        raw = np.frombuffer(buf, dtype=np.uint8)[off // 8 : (off + n + 7) // 8]
        return np.unpackbits(raw, bitorder="little")[off % 8 : off % 8 + n]

    out = bits(data)
    if validity is not None and arr.null_count:
        out = out & bits(validity)
    return out


def _same_buffers(a: pa.Array, b: pa.Array) -> bool:
    """Whether two arrays are views of the very same memory (a cheap equality test)."""
    if a.type != b.type or len(a) != len(b) or a.offset != b.offset:
        return False
    ba, bb = a.buffers(), b.buffers()
    return all(
        (x is None and y is None) or (x is not None and y is not None and x.address == y.address)
        for x, y in zip(ba, bb, strict=True)
    )


def _group_stats(t: pa.DataType, arrays: Sequence[pa.Array]) -> tuple[object, object, int]:
    """(min, max, null count) of one field over one group, by pylance's rules."""
    nulls = sum(a.null_count for a in arrays)
    if pa.types.is_boolean(t):
        ch = pa.chunked_array(arrays, type=t)
        true_present = bool(pc.any(ch).as_py())
        false_present = bool(pc.any(pc.invert(ch)).as_py())
        return true_present and not false_present, true_present or not false_present, nulls
    if pa.types.is_floating(t):
        mm = pc.min_max(pa.chunked_array(arrays, type=t))
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        dtype = np.dtype("<f4") if pa.types.is_float32(t) else np.dtype("<f8")
        if lo is None or np.isnan(lo):
            lo, hi = -np.inf, np.inf
        lo = -0.0 if lo == 0 else lo
        hi = 0.0 if hi == 0 else hi
        return np.array([lo], dtype).tobytes(), np.array([hi], dtype).tobytes(), nulls
    if pa.types.is_decimal128(t):
        mm = pc.min_max(pa.chunked_array(arrays, type=t))
        if not mm["min"].is_valid:
            lo, hi = b"\x00" * 15 + b"\x80", b"\xff" * 15 + b"\x7f"  # i128 MIN, MAX
            return lo, hi, nulls
        bounds = pa.array([mm["min"].as_py(), mm["max"].as_py()], t).buffers()[1]
        return bounds.to_pybytes()[:16], bounds.to_pybytes()[16:32], nulls
    if is_var_binary(t):
        ch = pa.chunked_array(arrays, type=t)
        mm = pc.min_max(ch)
        if not mm["min"].is_valid:
            return None, None, nulls
        is_str = pa.types.is_string(t) or pa.types.is_large_string(t)
        lo, hi = (mm[k].as_py() for k in ("min", "max"))
        lo_b = lo.encode() if is_str else lo
        hi_b = hi.encode() if is_str else hi
        longest = pc.max(pc.binary_length(ch)).as_py() or 0
        if longest > _STATS_PREFIX:
            cut = _truncate_utf8 if is_str else (lambda d, n: d[:n])
            if len(lo_b) > _STATS_PREFIX:
                lo_b = cut(lo_b, _STATS_PREFIX)
            if len(hi_b) > _STATS_PREFIX:
                hi_b = cut(hi_b, _STATS_PREFIX)
            hi_b = _increment_utf8(hi_b) if is_str else _increment(hi_b)
        return lo_b, hi_b, nulls
    # integers and dates
    dtype = _int_dtype(t)
    int_type = pa.from_numpy_dtype(dtype.newbyteorder("="))
    viewed = [a.view(int_type) if a.type != int_type else a for a in arrays]
    mm = pc.min_max(pa.chunked_array(viewed, type=int_type))
    if not mm["min"].is_valid:
        info = np.iinfo(dtype)
        lo, hi = info.min, info.max
    else:
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
    return np.array([lo], dtype).tobytes(), np.array([hi], dtype).tobytes(), nulls


def _stats_array(t: pa.DataType, values: list[object]) -> pa.Array:
    """A statistics column of type `t` from the per-group values `_group_stats` returned."""
    n = len(values)
    if pa.types.is_boolean(t):
        return pa.array(values, pa.bool_())
    if is_var_binary(t):
        large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        binary = pa.array(values, pa.large_binary() if large else pa.binary())
        return pa.Array.from_buffers(t, n, binary.buffers(), null_count=binary.null_count)
    data = b"".join(values)  # type: ignore[arg-type]
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(data)])
