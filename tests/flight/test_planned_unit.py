"""`flight_server.planned`: searches GetFlightInfo built wait for their DoGet, each taken
once, bounded in number and age."""

from __future__ import annotations

import pytest

from quiver.flight_server import planned
from quiver.flight_server.planned import PlannedSearches


def test_taken_once() -> None:
    kept = PlannedSearches()
    search = object()
    kept.put(b"t1", search)
    assert kept.take(b"t2") is None
    assert kept.take(b"t1") is search
    assert kept.take(b"t1") is None
    assert len(kept) == 0


def test_oldest_dropped_beyond_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planned, "MAX_PLANNED", 3)
    kept = PlannedSearches()
    for i in range(5):
        kept.put(b"t%d" % i, i)
    assert len(kept) == 3
    assert kept.take(b"t0") is None and kept.take(b"t1") is None
    assert [kept.take(b"t%d" % i) for i in (2, 3, 4)] == [2, 3, 4]


def test_stale_searches_are_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(planned.time, "monotonic", lambda: clock[0])
    kept = PlannedSearches()
    kept.put(b"old", "old")
    clock[0] += planned.WAIT_SECONDS + 1
    assert kept.take(b"old") is None  # past its wait: the DoGet builds its own
    kept.put(b"a", "a")
    clock[0] += planned.WAIT_SECONDS + 1
    kept.put(b"b", "b")  # drops "a", past its wait
    assert len(kept) == 1 and kept.take(b"b") == "b"
