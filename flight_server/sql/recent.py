"""Plans just made, kept a moment for the next call of the same statement.

A client runs one query in three calls that each need its plan: CreatePreparedStatement
(for the result schema), GetFlightInfo (for the endpoint) and DoGet (to run it). Each
plan is kept for `TTL` seconds under what made it (the SQL, its parameters, the caller,
the versions asked for); the next call reuses it when every table it read still is what
the call would read: a version it was pinned to, or, for a table read at its latest
version, the same latest version now. The caller's read right is checked again every time.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from quiver.flight_server.errors import NotFound
from quiver.flight_server.sql.catalog import on_sql_branch, table_ref
from quiver.wire.requests import READ

if TYPE_CHECKING:
    from quiver.flight_server.service import DatasetService
    from quiver.flight_server.sql.engine import PlannedQuery

TTL = 2.0
_SIZE = 256
Key = tuple[Any, ...]


def plan_key(
    query: str,
    identity: Any,
    parameters: list[pa.Scalar] | None,
    pins: dict[str, int] | None,
) -> Key:
    """What a plan is kept under."""
    who = getattr(identity, "user", None) if identity is not None else None
    who = who if who is not None else repr(identity)
    values = tuple(repr(v) for v in parameters or ())
    return (query, who, values, tuple(sorted((pins or {}).items())))


class RecentPlans:
    """A few plans from the last `TTL` seconds."""

    def __init__(self, service: DatasetService) -> None:
        self.service = service
        self._plans: OrderedDict[Key, tuple[PlannedQuery, float]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key: Key, planned: PlannedQuery) -> None:
        now = time.monotonic()
        with self._lock:
            self._plans[key] = (planned, now)
            self._plans.move_to_end(key)
            while len(self._plans) > _SIZE or (
                self._plans and next(iter(self._plans.values()))[1] < now - TTL
            ):
                self._plans.popitem(last=False)

    def get(self, key: Key, identity: Any, pinned: bool) -> PlannedQuery | None:
        """The plan kept under `key` if it still reads what a new plan would."""
        with self._lock:
            hit = self._plans.get(key)
        if hit is None or hit[1] < time.monotonic() - TTL:
            return None
        planned = hit[0]
        for name_ref, version in planned.versions.items():
            name, branch, ref = table_ref(name_ref)
            self.service.authorize(identity, name, READ)
            if pinned:
                continue
            if ref is not None:
                return None  # a tag may have moved: plan again
            try:
                current = self.service.handles.open_current(on_sql_branch(name, branch))
                if current.version != version:
                    return None
            except NotFound:
                return None
        return planned
