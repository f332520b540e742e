"""A thread-safe least-recently-used cache bounded by bytes (and, optionally, entries).

The engine keeps what it derives from immutable files across readers and searches (page
indexes, index partitions, posting lists, scalar index pages): each cache is one of these,
with its own budget, sized by the caller's count of each value's bytes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class ByteLRU(Generic[V]):
    """Values by key, the least recently used dropped first once their bytes exceed
    `max_bytes` (or their number `max_entries`); a value bigger than the budget alone is
    not kept."""

    def __init__(self, max_bytes: int, max_entries: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        """The value of `key` (now the most recently used), or None."""
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def put(self, key: Hashable, value: V, nbytes: int) -> None:
        """Keep `value` under `key` (a key already held keeps its first value)."""
        with self._lock:
            if key in self._items or nbytes > self.max_bytes:
                return
            self._items[key] = (value, nbytes)
            self._bytes += nbytes
            limit = self.max_entries
            while self._bytes > self.max_bytes or (limit is not None and len(self._items) > limit):
                _, (_, size) = self._items.popitem(last=False)
                self._bytes -= size

    def __len__(self) -> int:
        return len(self._items)
