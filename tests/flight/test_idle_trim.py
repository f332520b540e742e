"""`IdleTrim` gives memory back once, a moment after the last stream of a run of them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from quiver.flight_server import memory


class _Trims:
    """The trims one `IdleTrim` makes: servers of other tests in this process have trim
    threads of their own, so only trims from the threads that asked this test's `idle`
    count."""

    def __init__(self) -> None:
        self._asked: set[int] = set()
        self._all: list[tuple[int, float]] = []

    def idle(self, answer: bool) -> Callable[[], bool]:
        def asked() -> bool:
            self._asked.add(threading.get_ident())
            return answer

        return asked

    def release(self) -> None:
        self._all.append((threading.get_ident(), time.monotonic()))

    @property
    def asked(self) -> bool:
        return bool(self._asked)

    @property
    def times(self) -> list[float]:
        return [t for ident, t in self._all if ident in self._asked]


@pytest.fixture
def trims(monkeypatch: pytest.MonkeyPatch) -> _Trims:
    found = _Trims()
    monkeypatch.setattr(memory, "release_free_memory", found.release)
    return found


def _settle(trim: memory.IdleTrim) -> None:
    """Wait for the trim thread of the current idle moment to end (after its trim, if any)."""
    thread = trim._thread
    assert thread is not None
    thread.join(timeout=5)
    assert not thread.is_alive(), "the trim thread did not end"
    assert trim._thread is None


def test_streams_in_quick_succession_trim_once_after_the_last(trims: _Trims) -> None:
    trim = memory.IdleTrim(trims.idle(True), delay=0.5)
    for _ in range(5):  # a one-row read's DoGets, one after another
        trim.stream_ended()
        time.sleep(0.01)
    last = time.monotonic()
    _settle(trim)
    # one trim, half a second after the last stream ended (no earlier one's deadline held)
    assert len(trims.times) == 1 and trims.times[0] >= last + 0.4


def test_no_trim_while_a_stream_runs(trims: _Trims) -> None:
    trim = memory.IdleTrim(trims.idle(False), delay=0.05)
    trim.stream_ended()
    _settle(trim)
    assert trims.asked and trims.times == []


def test_a_later_idle_moment_trims_again(trims: _Trims) -> None:
    trim = memory.IdleTrim(trims.idle(True), delay=0.05)
    trim.stream_ended()
    _settle(trim)
    trim.stream_ended()
    _settle(trim)
    assert len(trims.times) == 2
