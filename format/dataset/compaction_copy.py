"""Compaction by binary copy (`compaction_mode` "try_binary_copy" / "force_binary_copy"):
a task's fragments merged by copying their data files' pages (`format.file.binary_copy`)
instead of decoding and encoding their rows, when pylance 14 would: every fragment one data
file of the same version and columns, no deletions, no blob columns; the output files
close once they hold the task's target rows, as pylance's do."""

from __future__ import annotations

from collections.abc import Sequence

from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fragment import LanceFragment
from quiver.format.dataset.write import data_file_name
from quiver.format.file.binary_copy import NotCopyable, copy_files
from quiver.format.io.store import FileReader, discard
from quiver.format.proto import table_pb2
from quiver.format.table.manifest import storage_version_of_file


def why_not_copyable(
    ds: DatasetCore, fragments: Sequence[LanceFragment], target_version: str | None
) -> str | None:
    """Why these fragments cannot be merged by binary copy, or None when they can."""
    if any(f.is_blob for f in ds.lance_schema.fields):
        return "the dataset has blob columns"
    first = fragments[0].metadata.files[0] if fragments[0].metadata.files else None
    for frag in fragments:
        files = frag.metadata.files
        if len(files) != 1:
            return f"fragment {frag.fragment_id} has {len(files)} data files"
        if frag.metadata.HasField("deletion_file"):
            return f"fragment {frag.fragment_id} has deleted rows"
        df = files[0]
        assert first is not None
        if (df.file_major_version, df.file_minor_version) != (
            first.file_major_version,
            first.file_minor_version,
        ):
            return "the data files are of different versions"
        if list(df.fields) != list(first.fields) or list(df.column_indices) != list(
            first.column_indices
        ):
            return "the data files hold different columns"
    assert first is not None
    version = storage_version_of_file(first.file_major_version, first.file_minor_version)
    if target_version is not None and target_version != version:
        return f"the files are {version}, and {target_version} files are asked for"
    return None


def copy_fragments(
    ds: DatasetCore,
    fragments: Sequence[LanceFragment],
    target_rows: int,
    written: list[str],
    read_batch_bytes: int | None = None,
) -> list[table_pb2.DataFragment]:
    """New fragments (no ids yet) holding `fragments`' rows in order, their files' pages
    copied; a file closes once it holds `target_rows` rows. NotCopyable (nothing kept)
    when the files themselves stand in the way."""
    out: list[table_pb2.DataFragment] = []
    group: list[LanceFragment] = []
    rows = 0
    for frag in fragments:
        group.append(frag)
        rows += frag.physical_rows
        if rows >= target_rows:
            out.append(_copy(ds, group, written, read_batch_bytes))
            group, rows = [], 0
    if group:
        out.append(_copy(ds, group, written, read_batch_bytes))
    return out


def _copy(
    ds: DatasetCore,
    group: Sequence[LanceFragment],
    written: list[str],
    read_batch_bytes: int | None,
) -> table_pb2.DataFragment:
    readers: list[FileReader] = []
    try:
        for frag in group:
            df = frag.metadata.files[0]
            store, path = ds.resolve(
                f"data/{df.path}", df.base_id if df.HasField("base_id") else None
            )
            readers.append(store.open(path, int(df.file_size_bytes) or None))
        name = data_file_name()
        sink = ds.store.open_write(f"data/{name}")
        try:
            kw = {} if read_batch_bytes is None else {"read_batch_bytes": read_batch_bytes}
            headers = _struct_columns(ds, group[0].metadata.files[0])
            rows, size, _ = copy_files(readers, sink, headers=headers, **kw)
        except BaseException:
            discard(sink)
            raise
        sink.close()
        written.append(name)
    finally:
        for r in readers:
            r.close()
    first = group[0].metadata.files[0]
    data_file = table_pb2.DataFile(
        path=name,
        fields=first.fields,
        column_indices=first.column_indices,
        file_major_version=first.file_major_version,
        file_minor_version=first.file_minor_version,
        file_size_bytes=size,
    )
    return table_pb2.DataFragment(files=[data_file], physical_rows=rows)


def _struct_columns(ds: DatasetCore, df: table_pb2.DataFile) -> set[int]:
    """The columns of a data file that hold structs (not packed ones), which a 2.0 file
    keeps as columns of their own."""
    by_id = {f.id: f for f in ds.lance_schema.walk()}
    indices = list(df.column_indices) or list(range(len(df.fields)))
    return {
        column
        for field_id, column in zip(df.fields, indices, strict=True)
        if (f := by_id.get(field_id)) is not None and f.logical_type == "struct" and not f.is_packed
    }


__all__ = ["NotCopyable", "copy_fragments", "why_not_copyable"]
