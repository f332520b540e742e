"""Opening the Lance files inside an index directory (`_indices/<uuid>/...`).

An index file is a standalone Lance v2 file: its schema lives in the file's own descriptor
rather than in a manifest, so a `DataFile` entry is made from it and the file is read with
the readers of data files (`format.file.open`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa

from format.errors import CorruptFileError, UnsupportedFeatureError
from format.file.container import FOOTER_VERSIONS, V2Container
from format.file.open import open_data_file
from format.file.v20.writer import V2FileWriter
from format.file.v21.writer import StructuralFileWriter
from format.io.store import ObjectStore
from format.proto import table_pb2
from format.table.schema import LanceSchema


class IndexFile:
    """One open index file: its schema (with metadata), row count and columns."""

    def __init__(self, store: ObjectStore, path: str) -> None:
        self.path = store.uri_of(path)
        try:
            file = store.open(path)
        except FileNotFoundError:
            raise CorruptFileError(
                self.path, "index file listed by the manifest is missing"
            ) from None
        try:
            container = V2Container(file, self.path)
            descriptor, version = container.descriptor, container.version
        finally:
            file.close()
        if version not in ("2.0", "2.1", "2.2", "2.3"):
            raise UnsupportedFeatureError(f"{self.path}: index file version {version} is not read")
        self.schema = LanceSchema.from_protos(
            descriptor.schema.fields, dict(descriptor.schema.metadata), where=self.path
        )
        self.num_rows = int(descriptor.length)
        self.version = version  # the Lance file version ("2.2"), kept by rewrites
        # 2.0 files give every field a column, 2.1 on only the leaves
        ids = [f.id for top in self.schema.fields for f in top.walk()]
        if version != "2.0":
            ids = [i for top in self.schema.fields for i in (f.id for f in top.walk() if f.is_leaf)]
        major, minor = FOOTER_VERSIONS[version]
        entry = table_pb2.DataFile(
            path=path,
            fields=ids,
            column_indices=list(range(len(ids))),
            file_major_version=major,
            file_minor_version=minor,
        )
        self._reader = open_data_file(store, path, entry)

    @property
    def metadata(self) -> dict[str, bytes]:
        """The schema metadata pylance stores in the file (e.g. the BTREE's batch_size)."""
        return self.schema.metadata

    def read(self, names: Sequence[str], start: int = 0, stop: int | None = None) -> pa.Table:
        """Columns `names` over rows [start, stop), as one table."""
        stop = self.num_rows if stop is None else stop
        schema = self.schema.project(list(names), dataset=self.path)
        arrow = schema.to_arrow()
        if stop <= start:
            return arrow.empty_table()
        arrays = next(iter(self._reader.read(schema.fields, [(start, stop)], stop - start)))
        return pa.Table.from_arrays(arrays, schema=arrow)

    def take(self, names: Sequence[str], rows: np.ndarray) -> pa.Table:
        """Columns `names` at sorted unique row positions."""
        schema = self.schema.project(list(names), dataset=self.path)
        arrays = self._reader.take(schema.fields, np.asarray(rows, dtype=np.uint64))
        return pa.Table.from_arrays(arrays, schema=schema.to_arrow())

    def close(self) -> None:
        """Release the file."""
        self._reader.close()


def write_index_file(
    store: ObjectStore,
    path: str,
    schema: LanceSchema,
    tables: Iterable[pa.Table],
    version: str = "2.2",
) -> int:
    """Write one index file (a Lance file of `schema`, its metadata included, as pylance's
    index files carry it) from `tables`; returns its size in bytes. On error nothing is left
    under `path`."""
    sink = store.open_write(path)
    try:
        cls = V2FileWriter if version == "2.0" else StructuralFileWriter
        writer = cls(sink, schema, version=version, path_for_errors=store.uri_of(path))
        for table in tables:
            if table.num_rows:
                writer.write(table)
        size = writer.finish().size_bytes
    except BaseException:
        abort = getattr(sink, "abort", None)
        with contextlib.suppress(Exception):
            abort() if abort else sink.close()
        with contextlib.suppress(Exception):
            store.delete(path)
        raise
    sink.close()
    return int(size)
