"""Binary copy: data files concatenated page by page into one, without decoding a page, as
pylance's compaction modes "try_binary_copy" and "force_binary_copy" merge them.

Every page's buffers are copied to the new file in source order (file by file, column by
column, each buffer on a 64-byte boundary in 2.1+ files, back to back in 2.0 ones) and its
metadata kept but for the buffers' new positions and its priority (the row it starts at)
moved by the rows before it; a column's own buffers follow its pages. The file descriptor
is the first file's with the new row count. A 2.0 file's struct columns (`headers`) hold
no values: the first file's page stands for all the rows. Files can be merged so only when
they share a version, their columns' encodings and no global buffer beyond the
descriptor; each column's pages must hold their own encodings (`NotCopyable` says what
stands in the way).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import BinaryIO

from google.protobuf.message import DecodeError

from quiver.format.errors import CorruptFileError
from quiver.format.file.container import V2Container
from quiver.format.file.v20.writer import _Output, write_tail
from quiver.format.io.store import FileReader
from quiver.format.proto import file2_pb2, file_pb2

COPYABLE_VERSIONS = ("2.0", "2.1", "2.2")
READ_BATCH_BYTES = 16 << 20  # page bytes read at once from a source file


class NotCopyable(Exception):
    """Files that cannot be merged by copying their pages; the message says why."""


def copy_files(
    sources: Sequence[FileReader],
    sink: BinaryIO,
    *,
    headers: Collection[int] = (),
    read_batch_bytes: int = READ_BATCH_BYTES,
) -> tuple[int, int, str]:
    """Write `sources` (readers of data files in row order) into `sink` as one file:
    (rows, bytes written, file version). `headers`: the columns of a 2.0 file's structs.
    NotCopyable before anything is written when the files cannot be merged so."""
    files = [V2Container(r, r.store.uri_of(r.path)) for r in sources]
    columns = [_columns(f) for f in files]
    version = _check(files, columns)
    headers = headers if version == "2.0" else ()
    out = _Output(sink, pad=b"\x00")
    place = out.buffer if version != "2.0" else _back_to_back(out)
    merged = [file2_pb2.ColumnMetadata(encoding=c.encoding) for c in columns[0]]
    rows = 0
    for container, metas in zip(files, columns, strict=True):
        for column, meta in enumerate(metas):
            if column in headers and rows:
                continue  # one page stands for every row (set below)
            _copy_pages(container, meta, merged[column], place, rows, read_batch_bytes)
            ranges = list(zip(meta.buffer_offsets, meta.buffer_sizes, strict=True))
            for data in container.read_ranges([(int(o), int(n)) for o, n in ranges]):
                position, size = place(data)
                merged[column].buffer_offsets.append(position)
                merged[column].buffer_sizes.append(size)
        rows += container.num_rows
    for column in headers:
        for page in merged[column].pages[:1]:
            page.length, page.priority = rows, 0
    descriptor = file_pb2.FileDescriptor()
    descriptor.CopyFrom(files[0].descriptor)
    descriptor.length = rows
    metas = [m.SerializeToString() for m in merged]
    write_tail(out, version, descriptor.SerializeToString(), metas, align=version != "2.0")
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
            if any(p.encoding.WhichOneof("location") != "direct" for p in meta.pages):
                raise NotCopyable(f"{where}: column {column} has pages encoded out of line")
    return version


def _back_to_back(out: _Output) -> Callable[[bytes | memoryview], tuple[int, int]]:
    """Where a 2.0 file's copied buffer goes: right after the previous one."""

    def place(data: bytes | memoryview) -> tuple[int, int]:
        position = out.pos
        out.write(data)
        return position, len(data)

    return place


def _copy_pages(
    container: V2Container,
    source: file2_pb2.ColumnMetadata,
    target: file2_pb2.ColumnMetadata,
    place: Callable[[bytes | memoryview], tuple[int, int]],
    rows_before: int,
    read_batch_bytes: int,
) -> None:
    """Append a column's pages to `target`, each buffer written by `place`."""
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
                position, written = place(next(data))
                copied.buffer_offsets.append(position)
                copied.buffer_sizes.append(written)
            copied.priority = page.priority + rows_before
        start = stop
