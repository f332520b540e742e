"""`V2FileWriter`: streams Arrow record batches into a Lance v2 data file (2.0 encodings).

The file is laid out as pylance lays it out: page buffers (each on a 64-byte boundary,
padded with 'H'), global buffer 0 (the `FileDescriptor`: schema and row count), the
column metadata blobs back to back, the column-metadata and global-buffer offset tables,
and the 40-byte footer (``0.3`` for file version 2.0). Pages are written as soon as they
are encoded, so memory stays at about one page per column whatever the row count.

Only file version 2.0 is written for now; the version-specific part is the factory of
field encoders (`_ENCODER_FACTORIES`), so 2.1/2.2 structural encoders can slot in later.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import BinaryIO

import pyarrow as pa

from quiver.format.errors import InvalidInputError, SchemaMismatchError, UnsupportedFeatureError
from quiver.format.file.base import DataFileWriter, WrittenFile
from quiver.format.file.blob_values import LEGACY_DESCRIPTION, BlobSpill
from quiver.format.file.container import (
    ALIGNMENT,
    ARRAY_ENCODING_URL,
    COLUMN_ENCODING_URL,
    FOOTER_VERSIONS,
    PAD_BYTE,
    Footer,
    any_bytes,
)
from quiver.format.file.v20 import encode as v20
from quiver.format.proto import encodings_v2_0_pb2, file2_pb2, file_pb2
from quiver.format.table.schema import LanceField, LanceSchema

# The manifest's DataFile (major, minor) for each written file version.
MANIFEST_VERSIONS = {"2.0": (2, 0)}
_LIST_TYPES = ("list", "list.struct", "large_list", "large_list.struct")
_SMALL_WRITE = 64 * 1024  # writes below this are gathered into one sink write
_GATHER_LIMIT = 1024 * 1024
_COLUMN_ENCODING = any_bytes(
    COLUMN_ENCODING_URL,
    encodings_v2_0_pb2.ColumnEncoding(values={}).SerializeToString(),
)
# A blob column's: its pages hold the descriptions of values written out of line.
_BLOB_COLUMN_ENCODING = any_bytes(
    COLUMN_ENCODING_URL,
    encodings_v2_0_pb2.ColumnEncoding(
        blob=encodings_v2_0_pb2.Blob(inner=encodings_v2_0_pb2.ColumnEncoding(values={}))
    ).SerializeToString(),
)


class _Output:
    """Appends bytes to the sink, tracking the position and 64-byte aligning buffers."""

    def __init__(self, sink: BinaryIO, pad: bytes = PAD_BYTE) -> None:
        self.sink = sink
        self.pos = 0
        self._small = bytearray()
        self._pad = pad  # pylance pads with 'H' when it writes pages, with zeros when it copies

    def _write_all(self, data: memoryview) -> None:
        while len(data):
            n = self.sink.write(data)
            if n is None or n >= len(data):
                return
            data = data[n:]

    def drain(self) -> None:
        """Hand the gathered small writes to the sink."""
        if self._small:
            self._write_all(memoryview(self._small))
            self._small = bytearray()

    def write(self, data: bytes | memoryview) -> None:
        """Append raw bytes."""
        n = len(data)
        if n < _SMALL_WRITE:
            self._small += data
            if len(self._small) >= _GATHER_LIMIT:
                self.drain()
        else:
            self.drain()
            self._write_all(memoryview(data))
        self.pos += n

    def align(self) -> None:
        """Pad with 'H' up to the next 64-byte boundary."""
        pad = -self.pos % ALIGNMENT
        if pad:
            self.write(self._pad * pad)

    def buffer(self, data: bytes | memoryview) -> tuple[int, int]:
        """Write a buffer on a 64-byte boundary; returns its (position, size)."""
        self.align()
        pos = self.pos
        self.write(data)
        return pos, len(data)


_EncoderFactory = Callable[
    [Sequence[LanceField], Callable[..., None], v20.EncoderOptions, str], list[v20.FieldEncoder]
]


def _build_v20(
    fields: Sequence[LanceField], emit: Callable[..., None], opts: v20.EncoderOptions, where: str
) -> list[v20.FieldEncoder]:
    """2.0 field encoders for the top-level fields, columns numbered in pre-order."""
    next_column = [0]

    def build(f: LanceField, path: str) -> v20.FieldEncoder:
        column = next_column[0]
        next_column[0] += 1
        lt = f.logical_type
        if lt == "map":
            raise UnsupportedFeatureError(
                f"{where}: Lance file version 2.0 has no encoding for the map field {path!r}; "
                f"use file version 2.1 or later"
            )
        if f.is_blob:
            if f.is_blob_v2 or f.parent_id != -1:
                what = "blob v2" if f.is_blob_v2 else "a blob column inside a struct or list"
                raise UnsupportedFeatureError(
                    f"{where}: field {path!r}: Lance file version 2.0 cannot store {what}"
                )
            # the values go out of line (`blob_values`); the column packs their descriptions
            blob = v20.ValueEncoder(f, path, column, emit, opts, packed=True)
            blob.type = LEGACY_DESCRIPTION
            return blob
        if lt == "struct" and f.is_packed:
            for c in f.children:
                if v20.packable_width(v20.storage_type(c.arrow_type)) is None:
                    raise UnsupportedFeatureError(
                        f"{where}: packed struct {path!r}: child {c.name!r} of type "
                        f"{c.arrow_type} is not fixed-width"
                    )
            return v20.ValueEncoder(f, path, column, emit, opts, packed=True)
        if lt == "struct":
            kids = [build(c, f"{path}.{c.name}") for c in f.children]
            return v20.StructEncoder(f, path, column, emit, kids)
        if lt in _LIST_TYPES:
            child = build(f.children[0], f"{path}.{f.children[0].name}")
            return v20.ListEncoder(f, path, column, emit, opts, child)
        t = v20.storage_type(f.arrow_type)
        if pa.types.is_null(t):
            return v20.NullEncoder(f, path, column, emit)
        if not _value_type_ok(t):
            raise UnsupportedFeatureError(
                f"{where}: Lance file version 2.0 has no encoding for field {path!r} of type {t}"
            )
        return v20.ValueEncoder(f, path, column, emit, opts)

    return [build(f, f.name) for f in fields]


def _value_type_ok(t: pa.DataType) -> bool:
    """Whether a non-nested type has a 2.0 value encoding here."""
    if pa.types.is_fixed_size_list(t):
        inner = v20.storage_type(t.value_type)
        if pa.types.is_fixed_size_list(inner):
            return _value_type_ok(inner)
        return v20.fixed_bits(inner) is not None
    if pa.types.is_dictionary(t):
        value = t.value_type
        return pa.types.is_integer(t.index_type) and (
            v20.is_var_binary(value) or v20.fixed_bits(value) is not None
        )
    return v20.is_var_binary(t) or v20.fixed_bits(t) is not None


def check_writer_args(path: str, schema: LanceSchema, page_bytes: int, max_page_bytes: int) -> None:
    """Refuse page sizes and field ids no v2 writer can use, naming the file."""
    if page_bytes <= 0 or max_page_bytes < page_bytes:
        raise InvalidInputError(
            f"{path}: need 0 < page_bytes <= max_page_bytes, got {page_bytes} and {max_page_bytes}"
        )
    ids = schema.field_ids()
    if len(set(ids)) != len(ids) or any(i < 0 for i in ids):
        raise InvalidInputError(f"{path}: schema field ids must be unique and >= 0")


def check_batch_schema(path: str, batch: pa.RecordBatch, want: pa.Schema) -> None:
    """Refuse a batch whose column names differ from the file schema's, or whose types lay
    out differently (extension types compare by their storage type)."""
    got = batch.schema
    if got.names != want.names:
        raise SchemaMismatchError(
            f"{path}: batch columns {got.names} do not match the file schema {want.names}"
        )
    for col, f in zip(batch.columns, want, strict=True):
        t = v20.storage_type(col.type)
        if not t.equals(f.type) and _layout(t) != _layout(f.type):
            raise SchemaMismatchError(
                f"{path}: column {f.name!r} has type {col.type}, the file schema expects {f.type}"
            )


def _layout(t: pa.DataType) -> pa.DataType:
    """`t` without what Lance types do not record: list item names and nullability."""
    t = v20.storage_type(t)
    if pa.types.is_struct(t):
        return pa.struct([(f.name, _layout(f.type)) for f in t])
    if pa.types.is_fixed_size_list(t):
        return pa.list_(_layout(t.value_type), t.list_size)
    if pa.types.is_large_list(t):
        return pa.large_list(_layout(t.value_type))
    if pa.types.is_list(t):
        return pa.list_(_layout(t.value_type))
    return t


_ENCODER_FACTORIES: dict[str, _EncoderFactory] = {"2.0": _build_v20}


def write_tail(
    out: _Output,
    version: str,
    descriptor: bytes,
    column_metas: Sequence[bytes],
    global_buffers: Sequence[tuple[int, int]] = (),
    *,
    align: bool = True,
) -> None:
    """The end of a v2 file after its pages: the file descriptor (global buffer 0, before
    the `global_buffers` written already; on a 64-byte boundary unless not `align`, as
    pylance's binary copy of 2.0 files leaves it), the column metadata back to back, the
    column and global-buffer offset tables and the footer; then the sink is flushed."""
    first = out.buffer(descriptor) if align else (out.pos, len(descriptor))
    if not align:
        out.write(descriptor)
    buffers = [first, *global_buffers]
    meta_start = out.pos
    table = []
    for raw in column_metas:
        table.append((out.pos, len(raw)))
        out.write(raw)
    cmo = out.pos
    out.write(b"".join(struct.pack("<QQ", p, s) for p, s in table))
    gbo = out.pos
    out.write(b"".join(struct.pack("<QQ", p, s) for p, s in buffers))
    major, minor = FOOTER_VERSIONS[version]
    out.write(Footer(meta_start, cmo, gbo, len(buffers), len(table), major, minor).pack())
    out.drain()
    flush = getattr(out.sink, "flush", None)
    if flush is not None:
        flush()


class V2FileWriter(DataFileWriter):
    """Writes one Lance v2 data file (file version 2.0) to a binary sink, streaming.

    `sink` is a fresh writable binary file (only `write` is used; positions are counted
    from its start). The caller closes it after `finish` (closing an `open_write` sink
    publishes the file).
    """

    def __init__(
        self,
        sink: BinaryIO,
        schema: LanceSchema,
        *,
        version: str = "2.0",
        path_for_errors: str,
        page_bytes: int = v20.DEFAULT_PAGE_BYTES,
        max_page_bytes: int = v20.MAX_PAGE_BYTES,
        string_dictionaries: bool = True,
    ) -> None:
        self.path = path_for_errors
        factory = _ENCODER_FACTORIES.get(version)
        if factory is None:
            raise UnsupportedFeatureError(
                f"{self.path}: writing Lance file version {version!r} is not supported "
                f"(supported: {', '.join(_ENCODER_FACTORIES)})"
            )
        check_writer_args(self.path, schema, page_bytes, max_page_bytes)
        self.version = version
        self.schema = schema
        self.arrow_schema = schema.to_arrow()
        self._out = _Output(sink)
        opts = v20.EncoderOptions(page_bytes, max_page_bytes, string_dictionaries)
        self._encoders = factory(schema.fields, self._emit_page, opts, self.path)
        self._columns_of = [c for e in self._encoders for c in e.columns()]
        self._metadata = [file2_pb2.ColumnMetadata() for _ in self._columns_of]
        self.num_rows = 0
        self._finished = False
        self._global_buffers: list[tuple[int, int]] = []
        self._failed = False
        self._blobs = {e.column for e in self._encoders if e.field.is_blob}
        self._spill = BlobSpill(
            lambda data: self._out.buffer(data)[0], lambda: self._out.pos, None, self.path
        )

    # -- pages --------------------------------------------------------------------------
    def _emit_page(
        self,
        column: int,
        rows: int,
        encoding: encodings_v2_0_pb2.ArrayEncoding,
        buffers: list[memoryview],
    ) -> None:
        """Write a page's buffers now and remember where they went."""
        page = self._metadata[column].pages.add()
        for data in buffers:
            pos, size = self._out.buffer(data)
            page.buffer_offsets.append(pos)
            page.buffer_sizes.append(size)
        page.length = rows
        page.encoding.direct.encoding = any_bytes(ARRAY_ENCODING_URL, encoding.SerializeToString())
        page.priority = 0  # what pylance writes in 2.0 files

    # -- public API ---------------------------------------------------------------------
    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append rows; `batch` has exactly the columns and types of the writer's schema."""
        if self._finished:
            raise InvalidInputError(f"{self.path}: write() after finish()")
        if self._failed:
            raise InvalidInputError(f"{self.path}: the writer failed earlier; start a new file")
        if isinstance(batch, pa.Table):
            for b in batch.to_batches():
                self.write(b)
            return
        columns = self._check_batch(batch)
        if batch.num_rows == 0:
            return
        try:
            for enc, col in zip(self._encoders, columns, strict=True):
                enc.append(col)
        except BaseException:
            self._failed = True
            raise
        self.num_rows += batch.num_rows

    def _check_batch(self, batch: pa.RecordBatch) -> list[pa.Array]:
        """The batch's columns, after checking names, types and 2.0 restrictions."""
        check_batch_schema(self.path, batch, self.arrow_schema)
        columns = []
        for i, enc in enumerate(self._encoders):
            col = batch.column(i)
            if enc.column in self._blobs:  # the bytes go into the file now
                col = self._spill.legacy(col, null_description=False)
            if enc.needs_check:
                enc.check(col)
            columns.append(col)
        return columns

    def finish(self) -> WrittenFile:
        """Flush the remaining pages, write metadata and footer; the sink is then complete."""
        if self._finished:
            raise InvalidInputError(f"{self.path}: finish() called twice")
        if self._failed:
            raise InvalidInputError(f"{self.path}: the writer failed earlier; start a new file")
        self._finished = True
        for enc in self._encoders:
            enc.finish()
        out = self._out
        # Global buffer 0: the file's schema and row count.
        desc = file_pb2.FileDescriptor(length=self.num_rows)
        for pb in self.schema.to_protos():
            if pb.logical_type.startswith("dict:"):
                pb.dictionary.SetInParent()  # as pylance's dataset writer does
            desc.schema.fields.append(pb)
        for k, v in self.schema.metadata.items():
            desc.schema.metadata[k] = v if isinstance(v, bytes) else str(v).encode()
        for column, cm in enumerate(self._metadata):
            blob = column in self._blobs
            cm.encoding.direct.encoding = _BLOB_COLUMN_ENCODING if blob else _COLUMN_ENCODING
        metas = [cm.SerializeToString() for cm in self._metadata]
        write_tail(out, self.version, desc.SerializeToString(), metas, self._global_buffers)
        fmajor, fminor = MANIFEST_VERSIONS[self.version]
        return WrittenFile(
            num_rows=self.num_rows,
            size_bytes=out.pos,
            fields=[fid for fid, _ in self._columns_of],
            column_indices=[col for _, col in self._columns_of],
            major_version=fmajor,
            minor_version=fminor,
        )

    # -- introspection ------------------------------------------------------------------
    @property
    def peak_buffered_bytes(self) -> dict[int, int]:
        """Per column: the most bytes ever buffered before a page was written."""
        return {
            e.column: e.peak_buffered_bytes
            for top in self._encoders
            for e in top.encoders()
            if hasattr(e, "peak_buffered_bytes")
        }

    @property
    def pages_written(self) -> dict[int, int]:
        """Per column: pages written so far."""
        return {e.column: e.pages for top in self._encoders for e in top.encoders()}
