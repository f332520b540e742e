"""Binary copy: data files concatenated page by page into one, without decoding a page, as
pylance's compaction modes "try_binary_copy" and "force_binary_copy" merge them.

Every page's buffers are copied to the new file in source order (file by file, column by
column, each buffer on a 64-byte boundary) and its metadata kept but for the buffers'
new positions and its priority (the row it starts at) moved by the rows before it; the
file descriptor is the first file's with the new row count. Files can be merged so only
when they share a version (2.1 or later here: a 2.0 list page points at item positions of
its own file), their columns' encodings and no global buffer beyond the descriptor; each
column's pages must hold their own encodings (`NotCopyable` says what stands in the way).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import BinaryIO

from google.protobuf.message import DecodeError

from quiver.format.errors import CorruptFileError
from quiver.format.file.container import V2Container
from quiver.format.file.v20.writer import _Output, write_tail
from quiver.format.io.store import FileReader
from quiver.format.proto import file2_pb2, file_pb2

COPYABLE_VERSIONS = ("2.1", "2.2")
READ_BATCH_BYTES = 16 << 20  # page bytes read at once from a source file


class NotCopyable(Exception):
    """Files that cannot be merged by copying their pages; the message says why."""


def copy_files(
    sources: Sequence[FileReader],
    sink: BinaryIO,
    *,
    read_batch_bytes: int = READ_BATCH_BYTES,
) -> tuple[int, int, str]:
    """Write `sources` (readers of data files in row order) into `sink` as one file:
    (rows, bytes written, file version). NotCopyable before anything is written when the
    files cannot be merged so."""
    files = [V2Container(r, r.store.uri_of(r.path)) for r in sources]
    columns = [_columns(f) for f in files]
    version = _check(files, columns)
    out = _Output(sink, pad=b"\x00")
    merged = [file2_pb2.ColumnMetadata(encoding=c.encoding) for c in columns[0]]
    rows = 0
    for container, metas in zip(files, columns, strict=True):
        for column, meta in enumerate(metas):
            _copy_pages(container, meta, merged[column], out, rows, read_batch_bytes)
        rows += container.num_rows
    descriptor = file_pb2.FileDescriptor()
    descriptor.CopyFrom(files[0].descriptor)
    descriptor.length = rows
    write_tail(
        out, version, descriptor.SerializeToString(), [m.SerializeToString() for m in merged]
    )
    return rows, out.pos, version


def _columns(container: V2Container) -> list[file2_pb2.ColumnMetadata]:
    """The raw column metadata of a file (encodings kept serialized, as they are copied)."""
    out = []
    for column, raw in enumerate(container.read_ranges(container.column_table)):
        try:
            out.append(file2_pb2.ColumnMetadata.FromString(bytes(raw)))
        except DecodeError as e:
            raise CorruptFileError(container.path, f"column {column}: bad metadata: {e}") from None
    return out


def _check(files: Sequence[V2Container], columns: Sequence[list]) -> str:
    first = files[0]
    version = first.footer.version
    if version not in COPYABLE_VERSIONS:
        raise NotCopyable(f"binary copy of Lance {version} files is not supported")
    baseline = [m.encoding.SerializeToString() for m in columns[0]]
    for container, metas in zip(files, columns, strict=True):
        where = container.path
        if container.footer.version != version:
            raise NotCopyable(f"{where} is a {container.footer.version} file, not {version}")
        if len(container.global_buffers) != 1:
            raise NotCopyable(f"{where} holds global buffers beyond its descriptor")
        if [m.encoding.SerializeToString() for m in metas] != baseline:
            raise NotCopyable(f"{where}: its columns are encoded unlike the first file's")
        for column, meta in enumerate(metas):
            if meta.buffer_offsets:
                raise NotCopyable(f"{where}: column {column} holds column-level buffers")
            if any(p.encoding.WhichOneof("location") != "direct" for p in meta.pages):
                raise NotCopyable(f"{where}: column {column} has pages encoded out of line")
    return version


def _copy_pages(
    container: V2Container,
    source: file2_pb2.ColumnMetadata,
    target: file2_pb2.ColumnMetadata,
    out: _Output,
    rows_before: int,
    read_batch_bytes: int,
) -> None:
    """Append a column's pages to `target`, their buffers copied into `out`."""
    pages = list(source.pages)
    start = 0
    while start < len(pages):
        stop, size = start, 0
        while stop < len(pages) and (stop == start or size < read_batch_bytes):
            size += sum(pages[stop].buffer_sizes)
            stop += 1
        ranges = [
            (int(o), int(s))
            for page in pages[start:stop]
            for o, s in zip(page.buffer_offsets, page.buffer_sizes, strict=True)
        ]
        data = iter(container.read_ranges(ranges))
        for page in pages[start:stop]:
            copied = target.pages.add()
            copied.CopyFrom(page)
            del copied.buffer_offsets[:]
            del copied.buffer_sizes[:]
            for _ in page.buffer_offsets:
                position, written = out.buffer(next(data))
                copied.buffer_offsets.append(position)
                copied.buffer_sizes.append(written)
            copied.priority = page.priority + rows_before
        start = stop
