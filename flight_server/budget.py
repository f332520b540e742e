"""`MemoryBudget`: one byte budget that all running DoGet streams of a server share.

A stream asks to be admitted with an estimate of what it will hold (a few decoded
batches) and waits, first come first served, until the estimate fits beside what the
running streams hold; a stream bigger than the whole budget runs once nothing else does.
An admitted stream never waits again: if its batches turn out bigger than estimated it
grows its lease without blocking, which only delays later admissions. So streams cannot
deadlock on the budget, and the overshoot is bounded by what running streams misjudged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType

from quiver.flight_server.errors import Cancelled

log = logging.getLogger("quiver.budget")

# How often a waiting stream checks whether its client went away.
POLL_SECONDS = 0.1


class Lease:
    """The bytes one admitted stream is accounted for, until `release`."""

    def __init__(self, budget: MemoryBudget, nbytes: int) -> None:
        self._budget = budget
        self._nbytes = nbytes
        self._released = False

    @property
    def nbytes(self) -> int:
        """The bytes this lease holds (0 once released)."""
        return 0 if self._released else self._nbytes

    def grow_to(self, nbytes: int) -> None:
        """Account for at least `nbytes` from now on; never blocks (see the module doc)."""
        self._budget._grow(self, nbytes)

    def release(self) -> None:
        """Give the bytes back and wake waiting streams; later calls do nothing."""
        self._budget._release(self)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class MemoryBudget:
    """At most `limit` bytes held by admitted leases (None or 0: unlimited), FIFO admission."""

    def __init__(self, limit: int | None, on_active: Callable[[int], None] | None = None) -> None:
        if limit is not None and limit < 0:
            raise ValueError(f"a memory budget must be >= 0 bytes, not {limit}")
        self.limit = limit or None
        self._on_active = on_active  # told the count of leases held, under the lock
        self._cond = threading.Condition()
        self._queue: deque[object] = deque()  # one token per waiting admit(), oldest first
        self._in_use = 0
        self._active = 0
        self._peak = 0
        self._admitted_total = 0

    # -- counters (for logs and a future metrics endpoint) ------------------------------
    @property
    def in_use(self) -> int:
        """Bytes held by admitted leases now."""
        return self._in_use

    @property
    def peak(self) -> int:
        """The most bytes ever held at once."""
        return self._peak

    @property
    def waiting(self) -> int:
        """Streams waiting to be admitted now."""
        return len(self._queue)

    @property
    def active(self) -> int:
        """Leases held now."""
        return self._active

    @property
    def admitted_total(self) -> int:
        """Leases granted since the start."""
        return self._admitted_total

    # -- admission ------------------------------------------------------------------------
    def _fits(self, estimate: int) -> bool:
        return self.limit is None or self._active == 0 or self._in_use + estimate <= self.limit

    def admit(
        self, estimate: int, cancelled: Callable[[], bool] = lambda: False, *, label: str = ""
    ) -> Lease:
        """Wait for room for `estimate` bytes (FIFO) and hold them; raises `Cancelled` if
        `cancelled()` turns true meanwhile (whatever `cancelled` raises also propagates)."""
        estimate = max(1, int(estimate))  # so no lease is free and "nothing held" is exact
        token = object()
        with self._cond:
            if not self._queue and self._fits(estimate):
                return self._grant(estimate)
            self._queue.append(token)
            started = time.monotonic()
            log.debug(
                "stream %s waits for %d bytes (%d of %s in use, %d waiting)",
                label or "?",
                estimate,
                self._in_use,
                self.limit,
                len(self._queue),
            )
            try:
                while not (self._queue[0] is token and self._fits(estimate)):
                    if cancelled():
                        raise Cancelled("the call was cancelled while waiting for memory")
                    self._cond.wait(POLL_SECONDS)
                lease = self._grant(estimate)
            finally:
                self._queue.remove(token)
                self._cond.notify_all()  # the next in line may fit too, or be first now
            log.debug(
                "stream %s admitted after %.3f s (%d bytes)",
                label or "?",
                time.monotonic() - started,
                estimate,
            )
            return lease

    def _grant(self, nbytes: int) -> Lease:
        self._in_use += nbytes
        self._active += 1
        self._admitted_total += 1
        self._peak = max(self._peak, self._in_use)
        if self._on_active is not None:
            self._on_active(self._active)
        return Lease(self, nbytes)

    def _grow(self, lease: Lease, nbytes: int) -> None:
        with self._cond:
            if lease._released or nbytes <= lease._nbytes:
                return
            self._in_use += nbytes - lease._nbytes
            lease._nbytes = nbytes
            self._peak = max(self._peak, self._in_use)

    def _release(self, lease: Lease) -> None:
        with self._cond:
            if lease._released:
                return
            lease._released = True
            self._in_use -= lease._nbytes
            self._active -= 1
            if self._on_active is not None:
                self._on_active(self._active)
            self._cond.notify_all()
