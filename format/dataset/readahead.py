"""Ordered readahead: run a few producers in threads ahead of the consumer, boundedly.

Scans read fragments one after another; decoding releases the GIL (pread, numpy,
Arrow compute), so reading the next fragments in background threads while the
consumer works on the current one uses every core. Memory stays bounded by
`readahead` producers x `queue_size` items, and closing the generator stops them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
_DONE = object()


class _Producer(threading.Thread):
    def __init__(self, make: Callable[[], Iterable[T]], queue_size: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.make = make
        self.items: queue.Queue = queue.Queue(maxsize=queue_size)
        self.stop = stop

    def _put(self, item: object) -> bool:
        while not self.stop.is_set():
            try:
                self.items.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run(self) -> None:
        try:
            for item in self.make():
                if not self._put(item):
                    return
        except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
            self._put(_Failure(e))
            return
        self._put(_DONE)


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def ordered_readahead(
    producers: Iterable[Callable[[], Iterable[T]]], *, readahead: int = 2, queue_size: int = 4
) -> Iterator[T]:
    """Yield every item of each producer's iterable, in order, running up to `readahead`
    producers concurrently. With readahead <= 1 everything runs in the caller's thread."""
    if readahead <= 1:
        for make in producers:
            yield from make()
        return
    stop = threading.Event()
    pending = iter(producers)
    running: list[_Producer] = []

    def start_more() -> None:
        while len(running) < readahead:
            make = next(pending, None)
            if make is None:
                return
            p = _Producer(make, queue_size, stop)
            p.start()
            running.append(p)

    try:
        start_more()
        while running:
            head = running[0]
            item = head.items.get()
            if item is _DONE:
                running.pop(0)
                start_more()
                continue
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        stop.set()
        for p in running:
            p.join(timeout=5)
