"""Index files: Lance files described by their own schema, as pylance writes under `_indices/`.

A data file of a dataset is read through the manifest's `DataFile` (field ids, column
indices); an index file carries everything in itself: its schema and row count in the
FileDescriptor, JSON and positions of protobuf messages in the schema metadata, and those
messages in global buffers. `IndexFile` opens one and reads its columns and buffers; vector
and scalar indices both read through it, and `write_index_file` writes one (remapped scalar
indices).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa

from quiver.format.errors import CorruptFileError, LanceError, UnsupportedFeatureError
from quiver.format.file.base import DataFileReader, ListBytes
from quiver.format.file.container import V2Container
from quiver.format.file.v20.writer import V2FileWriter
from quiver.format.file.v21.writer import StructuralFileWriter
from quiver.format.io.store import ObjectStore, discard
from quiver.format.table.schema import LanceField, LanceSchema


def _column_fields(schema: LanceSchema, version: str) -> list[int]:
    """Field ids in column order: in 2.0 every field has a column (struct headers and list
    offsets included), from 2.1 on only the leaves do."""
    return [f.id for f in schema.walk() if version == "2.0" or not f.children]


# Index files are read at random places again and again (a MinHash band table's pages, an
# IVF index's partitions): the page indexes of up to this many pages per column stay with
# the open file between reads (a few hundred KB each for 8 MB pages).
KEPT_PAGE_INDEXES = 16
# Ranges of at most this many rows, when several are asked at once, are read in one round.
_AT_ONCE_ROWS = 1 << 16


class IndexFile:
    """One open index file: its schema, metadata, global buffers and columns (close it, or
    use it as a context manager)."""

    def __init__(self, store: ObjectStore, path: str) -> None:
        self.path = store.uri_of(path)
        try:
            self._file = store.open(path)
        except FileNotFoundError:
            raise CorruptFileError(
                self.path, "index file listed in the manifest is missing"
            ) from None
        try:
            self._container = V2Container(self._file, self.path)
            desc = self._container.descriptor
            self.schema = LanceSchema.from_protos(
                desc.schema.fields, dict(desc.schema.metadata), where=self.path
            )
            self.num_rows = int(desc.length)
            self.version = self._container.version  # "2.2": rewrites of the index keep it
            self._reader = self._open_reader()
        except BaseException:
            self._file.close()
            raise

    def _open_reader(self) -> DataFileReader:
        version = self._container.version
        ids = _column_fields(self.schema, version)
        columns = list(range(len(ids)))
        if version == "2.0":
            from quiver.format.file.v20 import V2FileReader

            return V2FileReader(self._file, ids, columns, path_for_errors=self.path)
        if version in ("2.1", "2.2", "2.3"):
            from quiver.format.file.v21.reader import StructuralFileReader

            return StructuralFileReader(
                self._file,
                ids,
                columns,
                path_for_errors=self.path,
                kept_page_indexes=KEPT_PAGE_INDEXES,
            )
        raise UnsupportedFeatureError(f"{self.path}: index file version {version}")

    # -- metadata and buffers -------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, bytes]:
        """The schema metadata (JSON documents and buffer positions, by key)."""
        return self.schema.metadata

    def text(self, key: str) -> str:
        """A schema metadata value as text; CorruptFileError naming the key when absent."""
        value = self.metadata.get(key)
        if value is None:
            raise CorruptFileError(self.path, f"schema metadata has no {key!r}")
        return value.decode() if isinstance(value, bytes) else str(value)

    @property
    def global_buffers(self) -> list[tuple[int, int]]:
        """The (position, size) of every global buffer, the FileDescriptor's first."""
        return list(self._container.global_buffers)

    def global_buffer(self, index: int) -> bytes:
        """The bytes of global buffer `index` (0 is the FileDescriptor)."""
        buffers = self._container.global_buffers
        if not 0 <= index < len(buffers):
            raise CorruptFileError(
                self.path, f"global buffer {index} does not exist (file has {len(buffers)})"
            )
        (raw,) = self._container.read_ranges([buffers[index]])
        return bytes(raw)

    # -- columns --------------------------------------------------------------------------
    def field(self, name: str) -> LanceField:
        """A top-level field by name; CorruptFileError naming the file when absent."""
        for f in self.schema.fields:
            if f.name == name:
                return f
        raise CorruptFileError(self.path, f"index file has no column {name!r}")

    def read(self, names: Sequence[str], start: int = 0, stop: int | None = None) -> pa.Table:
        """Columns `names` over rows [start, stop) as one table."""
        stop = self.num_rows if stop is None else stop
        return self.read_ranges(names, [(start, stop)] if stop > start else [])

    def read_ranges(self, names: Sequence[str], ranges: Sequence[tuple[int, int]]) -> pa.Table:
        """Columns `names` over the sorted, disjoint row `ranges`, back to back, as one
        table: several short ranges (lookups at scattered places) read together in one
        round (`read_at_once`), others streamed step by step and decoded on the pool."""
        fields = [self.field(n) for n in names]
        schema = pa.schema([f.to_arrow() for f in fields])
        ranges = [(int(a), int(b)) for a, b in ranges if b > a]
        if not ranges:
            return schema.empty_table()
        start, stop = ranges[0][0], ranges[-1][1]
        try:
            most = max(b - a for a, b in ranges)
            if len(ranges) > 1 and most <= _AT_ONCE_ROWS:
                arrays = self._reader.read_at_once(fields, ranges)
                return pa.Table.from_arrays(arrays, schema=schema)
            steps = list(self._reader.read(fields, ranges, batch_size=most))
        except LanceError:
            raise
        except (ValueError, IndexError, OSError, EOFError) as e:
            raise CorruptFileError(self.path, f"cannot decode rows {start}-{stop}: {e}") from e
        return pa.Table.from_batches(
            [pa.RecordBatch.from_arrays(arrays, schema=schema) for arrays in steps], schema
        )

    def take(self, names: Sequence[str], rows: np.ndarray) -> pa.Table:
        """Columns `names` at sorted, unique row positions."""
        fields = [self.field(n) for n in names]
        schema = pa.schema([f.to_arrow() for f in fields])
        arrays = self._reader.take(fields, np.asarray(rows, dtype=np.uint64))
        return pa.Table.from_arrays(arrays, schema=schema)

    def take_list_bytes(self, name: str, rows: np.ndarray) -> ListBytes:
        """A list-of-binary column `name` at sorted, unique row positions, as flat bytes
        (read lean where the file's pages allow, else taken as Arrow lists)."""
        rows = np.asarray(rows, dtype=np.uint64)
        found = self._reader.take_list_bytes(self.field(name), rows)
        if found is None:
            found = ListBytes.of(self.take([name], rows).column(0))
        return found

    def close(self) -> None:
        """Release the file."""
        self._reader.close()

    def __enter__(self) -> IndexFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_index_file(
    store: ObjectStore,
    path: str,
    schema: LanceSchema,
    tables: Iterable[pa.Table],
    version: str = "2.2",
    buffers: Sequence[bytes] = (),
) -> int:
    """Write one index file (a Lance file of `schema`, its metadata included, as pylance's
    index files carry it) from `tables`, with `buffers` as its global buffers 1, 2, ...
    (written first, as pylance writes them); returns its size in bytes. On error nothing is
    left under `path`."""
    sink = store.open_write(path)
    try:
        cls = V2FileWriter if version == "2.0" else StructuralFileWriter
        writer = cls(sink, schema, version=version, path_for_errors=store.uri_of(path))
        for data in buffers:
            writer.add_global_buffer(data)
        for table in tables:
            if table.num_rows:
                writer.write(table)
        size = writer.finish().size_bytes
    except BaseException:
        discard(sink)
        with contextlib.suppress(Exception):
            store.delete(path)
        raise
    sink.close()
    return int(size)
