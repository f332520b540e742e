"""Thread-safe least-recently-used caches.

The engine keeps what it derives from immutable files across readers and searches (page
indexes, index partitions, posting lists, scalar index pages): each cache is a `ByteLRU`,
with its own budget, sized by the caller's count of each value's bytes. Open indices are
kept by an `OpenOnce`, bounded by their number.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable
from typing import Any, Generic, Protocol, TypeVar

V = TypeVar("V")


class _Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


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

    @property
    def nbytes(self) -> int:
        """The bytes of the values held."""
        return self._bytes

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

    def resize(self, key: Hashable, nbytes: int) -> None:
        """A held value now takes `nbytes` (it grew): dropping the least recently used
        others (or it) while the budget is exceeded."""
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return
            self._items[key] = (hit[0], nbytes)
            self._items.move_to_end(key)
            self._bytes += nbytes - hit[1]
            while self._bytes > self.max_bytes and self._items:
                _, (_, size) = self._items.popitem(last=False)
                self._bytes -= size

    def drop_where(self, doomed: Callable[[Hashable], bool]) -> int:
        """Drop the values whose key `doomed` picks; returns how many went."""
        with self._lock:
            keys = [k for k in self._items if doomed(k)]
            for k in keys:
                self._bytes -= self._items.pop(k)[1]
            return len(keys)

    def first_dropped(self, nbytes: int) -> Hashable | None:
        """The key a `put` of `nbytes` more would drop first (the least recently used),
        or None when they fit: for callers that admit a value only if it is worth more
        than what it would push out."""
        with self._lock:
            fits = self._bytes + nbytes <= self.max_bytes
            if fits and (self.max_entries is None or len(self._items) < self.max_entries):
                return None
            return next(iter(self._items), None)

    def __len__(self) -> int:
        return len(self._items)


class OpenOnce(Generic[C]):
    """Objects opened once per process by key (an index by its URI and uuid: its files
    never change), the least recently used forgotten past `max_open`. A forgotten one is
    not closed (a search may still hold it; the garbage collector closes it). Two threads
    opening one key at once both open it; the second to finish closes its own and takes
    the first's."""

    def __init__(self, max_open: int) -> None:
        self.max_open = max_open
        self._items: OrderedDict[Hashable, C] = OrderedDict()
        self._lock = threading.Lock()
        _EVERY_OPEN_ONCE.add(self)

    def get(self, key: Hashable, open_: Callable[[], C]) -> C:
        """The object of `key`, opened by `open_()` (outside the lock) when not held."""
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        opened = open_()
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                opened.close()
                return found
            self._items[key] = opened
            while len(self._items) > self.max_open:
                self._items.popitem(last=False)
            return opened

    def forget(self, key: Hashable) -> None:
        """Stop holding `key`'s object (not closed: a search may still hold it)."""
        with self._lock:
            self._items.pop(key, None)

    def forget_where(self, doomed: Callable[[Hashable], bool]) -> int:
        """Stop holding the objects whose key is `doomed` (not closed, as `forget`); how
        many."""
        with self._lock:
            keys = [k for k in self._items if doomed(k)]
            for k in keys:
                del self._items[k]
        return len(keys)


# every OpenOnce, for `forget_opened_in`
_EVERY_OPEN_ONCE: weakref.WeakSet[OpenOnce[Any]] = weakref.WeakSet()


def forget_opened_in(directories: Collection[str]) -> int:
    """Stop holding every open object (an index segment) whose key starts with the URI of
    one of `directories`: cleanup removed their files, and an open file keeps a removed
    file's space on a local disk until it is closed (the garbage collector closes them
    once no search holds them)."""
    if not directories:
        return 0
    wanted = set(directories)

    def doomed(key: Hashable) -> bool:
        first = key[0] if isinstance(key, tuple) and key else key
        return first in wanted

    return sum(cache.forget_where(doomed) for cache in list(_EVERY_OPEN_ONCE))
