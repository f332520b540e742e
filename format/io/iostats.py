"""Counts of the storage requests a dataset makes, as pylance's `io_stats_*` report them.

Each `ObjectStore` holds one `IoCounter`, shared with the stores derived from it (its
sub-directories, a dataset's base paths), so a dataset's counts hold every read and write
its files cost: a ranged read, a coalesced group of ranges or a whole small file is one
read; a file written, whole or streamed, is one write.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = ["IOStats", "IoCounter"]


@dataclass(frozen=True)
class IOStats:
    """Reads and writes since the counts were last taken (pylance's `IOStats`)."""

    read_iops: int = 0
    read_bytes: int = 0
    write_iops: int = 0
    written_bytes: int = 0

    @property
    def write_bytes(self) -> int:
        """`written_bytes`, by the name pylance's repr shows."""
        return self.written_bytes


class IoCounter:
    """Thread-safe running counts of reads and writes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = [0, 0, 0, 0]

    def read(self, requests: int, nbytes: int) -> None:
        with self._lock:
            self._counts[0] += requests
            self._counts[1] += nbytes

    def wrote(self, requests: int, nbytes: int) -> None:
        with self._lock:
            self._counts[2] += requests
            self._counts[3] += nbytes

    def snapshot(self) -> IOStats:
        """The counts so far."""
        with self._lock:
            return IOStats(*self._counts)

    def take(self) -> IOStats:
        """The counts so far, which start again from zero."""
        with self._lock:
            out = IOStats(*self._counts)
            self._counts = [0, 0, 0, 0]
            return out
