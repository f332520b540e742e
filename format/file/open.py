"""Open the right reader for a manifest `DataFile` entry, by its file version."""

from __future__ import annotations

from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.file.base import DataFileReader
from quiver.format.io.store import NotARegularFile, ObjectStore
from quiver.format.proto import table_pb2
from quiver.format.table.manifest import storage_version_of_file


def open_data_file(store: ObjectStore, path: str, data_file: table_pb2.DataFile) -> DataFileReader:
    """A reader for `data_file`, stored at `path` (relative to `store`)."""
    version = storage_version_of_file(data_file.file_major_version, data_file.file_minor_version)
    size = data_file.file_size_bytes or None
    where = store.uri_of(path)
    try:
        file = store.open(path, size)
    except NotARegularFile:
        raise CorruptFileError(
            where, "data file listed in the manifest is a directory, not a file"
        ) from None
    except FileNotFoundError:
        raise CorruptFileError(where, "data file listed in the manifest is missing") from None
    try:
        if version == "0.1":
            from quiver.format.file.legacy import LegacyFileReader

            return LegacyFileReader(file, path_for_errors=where, field_ids=list(data_file.fields))
        if version in ("2.1", "2.2", "2.3"):
            from quiver.format.file.v21.reader import StructuralFileReader

            return StructuralFileReader(
                file, list(data_file.fields), list(data_file.column_indices), path_for_errors=where
            )
        if version == "2.0":
            from quiver.format.file.v20 import V2FileReader

            return V2FileReader(
                file, list(data_file.fields), list(data_file.column_indices), path_for_errors=where
            )
        raise UnsupportedFeatureError(f"{where}: data file version {version} is not supported")
    except BaseException:
        file.close()
        raise
