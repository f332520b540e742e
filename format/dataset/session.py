"""pylance's `io_stats_snapshot` / `io_stats_incremental` and `session()` on a dataset.

A dataset's IO counts are its store's (`format.io.iostats`): every read and write of its
files, base paths included, since it was opened (or the counts were last taken). Quiver's
caches (index lookups, postings, partitions, page metadata, taken columns) are the
process's, shared by every dataset it opens: `session()` reports them, and two datasets of
one process have the same session.
"""

from __future__ import annotations

from dataclasses import dataclass

from quiver.format.dataset import fulltext
from quiver.format.dataset.core import DatasetCore
from quiver.format.file.v21 import reader as v21_reader
from quiver.format.index import pruning
from quiver.format.index.fts import index as fts_index
from quiver.format.index.vector import index as vector_index
from quiver.format.io.iostats import IOStats

__all__ = ["IOStats", "Session", "SessionMethods"]


@dataclass(frozen=True)
class Session:
    """The process's caches as pylance's `Session` reports a dataset's: bytes held by the
    index caches and the metadata (and data) caches."""

    index_cache_size_bytes: int
    metadata_cache_size_bytes: int

    def size_bytes(self) -> int:
        """Bytes held by every cache."""
        return self.index_cache_size_bytes + self.metadata_cache_size_bytes

    def is_same_as(self, other: Session) -> bool:
        """Whether `other` is this process's session too (Quiver has one per process)."""
        return isinstance(other, Session)


def current_session() -> Session:
    """The caches' sizes now."""
    index = [
        pruning._lookups,
        pruning._answers,
        fts_index.POSTINGS,
        fts_index.BLOCKS,
        vector_index.PARTITIONS,
        fulltext.RANKED,
        fulltext.BLOCK_MAX,
    ]
    metadata = [v21_reader.PAGE_INDEXES, v21_reader.TAKEN_COLUMNS]
    return Session(sum(c.nbytes for c in index), sum(c.nbytes for c in metadata))


class SessionMethods:
    """pylance's IO statistics and session methods of `LanceDataset` (a mixin)."""

    _core: DatasetCore

    def io_stats_snapshot(self) -> IOStats:
        """The reads and writes of this dataset's storage so far (the counts stay)."""
        return self._core.store.io.snapshot()

    def io_stats_incremental(self) -> IOStats:
        """The reads and writes since the counts were last taken, which start again."""
        return self._core.store.io.take()

    def session(self) -> Session:
        """The process's caches, which every dataset of the process shares."""
        return current_session()
