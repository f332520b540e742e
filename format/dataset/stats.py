"""Dataset statistics as pylance's `ds.stats` gives them: `dataset_stats()` (deleted rows,
fragments, small files), `data_stats()` (bytes on disk per field) and `index_stats(name)`.

A field's bytes on disk are the sizes of the page buffers of its column in every data file
(Lance 2.x files; a legacy file's columns count 0, and so does a field without a column of
its own, such as a 2.0 struct). A small file is a fragment of fewer rows than a row group.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from quiver.format.dataset.core import DatasetCore
from quiver.format.file.container import V2Container
from quiver.format.table.manifest import storage_version_of_file

# pylance counts a fragment of fewer physical rows than this (its default row group) small
SMALL_FILE_ROWS = 1024


@dataclass(frozen=True)
class FieldStatistics:
    """One field's statistics (its Lance field id)."""

    id: int
    bytes_on_disk: int


@dataclass(frozen=True)
class DataStatistics:
    """Every field's statistics, in field id order."""

    fields: list[FieldStatistics]


class LanceStats:
    """pylance's `ds.stats` over one version."""

    def __init__(self, core: DatasetCore, index_statistics: Any) -> None:
        self._core = core
        self._index_statistics = index_statistics

    def dataset_stats(self) -> dict[str, int]:
        """{"num_deleted_rows", "num_fragments", "num_small_files"}."""
        frags = self._core.manifest.pb.fragments
        return {
            "num_deleted_rows": sum(int(f.deletion_file.num_deleted_rows) for f in frags),
            "num_fragments": len(frags),
            "num_small_files": sum(1 for f in frags if f.physical_rows < SMALL_FILE_ROWS),
        }

    def data_stats(self) -> DataStatistics:
        """Bytes on disk of every field of the schema."""
        sizes: Counter[int] = Counter()
        core = self._core
        for frag in core.manifest.pb.fragments:
            for df in frag.files:
                version = storage_version_of_file(df.file_major_version, df.file_minor_version)
                columns = {
                    c: f for f, c in zip(df.fields, df.column_indices, strict=False) if c >= 0
                }
                if version == "0.1" or not columns:
                    continue
                store, path = core.resolve(
                    f"data/{df.path}", df.base_id if df.HasField("base_id") else None
                )
                with store.open(path, df.file_size_bytes or None) as file:
                    container = V2Container(file, store.uri_of(path))
                    for info in container.columns(sorted(columns)):
                        sizes[columns[info.index]] += sum(
                            size for page in info.pages for _, size in page.buffers
                        )
        return DataStatistics(
            [FieldStatistics(i, sizes[i]) for i in sorted(core.lance_schema.field_ids())]
        )

    def index_stats(self, index_name: str) -> dict[str, Any]:
        """The statistics of an index (`index_statistics`)."""
        return self._index_statistics(index_name)
