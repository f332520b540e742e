"""The one data file of a single-fragment dataset pylance wrote, and our 2.1+ reader of it."""

from __future__ import annotations

from typing import Any

import lance

from quiver.format.file.v21.reader import StructuralFileReader
from quiver.format.io.store import open_store


def one_file(uri: str) -> tuple[str, Any]:
    """(path, DataFile) of the dataset's only data file."""
    frag = lance.dataset(uri).get_fragments()[0]
    (df,) = frag.data_files()
    return f"{uri}/data/{df.path}", df


def open_reader(path: str, df: Any, **options: Any) -> StructuralFileReader:
    """Our reader of data file `path` with the fields and columns its DataFile lists."""
    folder, name = path.rsplit("/", 1)
    return StructuralFileReader(
        open_store(folder).open(name),
        list(df.fields),
        list(df.column_indices),
        path_for_errors=path,
        **options,
    )
