"""Searches GetFlightInfo built, kept for the DoGet of their ticket.

A search's GetFlightInfo builds the whole search to check it (parses the query, opens its
index, fits it to the version's schema), and its DoGet nearly always follows at once, on
this server. The built search waits under its ticket's bytes so that DoGet runs it instead
of building it again; a DoGet that finds none (the search was dropped, or the ticket went to
another replica) builds it from the ticket, as it always could. At most `MAX_PLANNED` wait,
each at most `WAIT_SECONDS`, the oldest dropped first; a DoGet takes its search once.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

MAX_PLANNED = 128
WAIT_SECONDS = 30.0


class PlannedSearches:
    """Built searches by ticket bytes, bounded in number and age."""

    def __init__(self) -> None:
        self._waiting: OrderedDict[bytes, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, ticket: bytes, search: Any) -> None:
        """Keep `search` for the DoGet of `ticket`."""
        now = time.monotonic()
        with self._lock:
            self._waiting.pop(ticket, None)
            self._waiting[ticket] = (now + WAIT_SECONDS, search)
            while self._waiting:
                until, _ = next(iter(self._waiting.values()))
                if until > now and len(self._waiting) <= MAX_PLANNED:
                    break
                self._waiting.popitem(last=False)

    def take(self, ticket: bytes) -> Any | None:
        """The search kept for `ticket` (once), or None."""
        with self._lock:
            found = self._waiting.pop(ticket, None)
        if found is None or found[0] < time.monotonic():
            return None
        return found[1]

    def __len__(self) -> int:
        return len(self._waiting)
