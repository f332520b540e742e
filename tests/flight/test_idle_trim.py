"""`IdleTrim` gives memory back once, a moment after the last stream of a run of them."""

from __future__ import annotations

import time

import pytest

from quiver.flight_server import memory


@pytest.fixture
def trims(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    calls: list[float] = []
    monkeypatch.setattr(memory, "release_free_memory", lambda: calls.append(time.monotonic()))
    return calls


def _settle(trim: memory.IdleTrim) -> None:
    """Wait for the trim thread of the current idle moment to end (after its trim, if any)."""
    thread = trim._thread
    assert thread is not None
    thread.join(timeout=5)
    assert not thread.is_alive(), "the trim thread did not end"
    assert trim._thread is None


def test_streams_in_quick_succession_trim_once_after_the_last(trims: list[float]) -> None:
    trim = memory.IdleTrim(lambda: True, delay=0.5)
    for _ in range(5):  # a one-row read's DoGets, one after another
        trim.stream_ended()
        time.sleep(0.01)
    last = time.monotonic()
    _settle(trim)
    # one trim, half a second after the last stream ended (no earlier one's deadline held)
    assert len(trims) == 1 and trims[0] >= last + 0.4


def test_no_trim_while_a_stream_runs(trims: list[float]) -> None:
    trim = memory.IdleTrim(lambda: False, delay=0.05)
    trim.stream_ended()
    _settle(trim)
    assert trims == []


def test_a_later_idle_moment_trims_again(trims: list[float]) -> None:
    trim = memory.IdleTrim(lambda: True, delay=0.05)
    trim.stream_ended()
    _settle(trim)
    trim.stream_ended()
    _settle(trim)
    assert len(trims) == 2
