"""gRPC threads keep their Python thread state across Flight calls, and drop it on exit."""

from __future__ import annotations

import gc
import json
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import pyarrow.flight as fl

from quiver.flight_server._threadstate import pin


class _Token:
    """Something a thread state holds (in a threading.local), to see when the state goes."""


class _Probe(fl.FlightServerBase):
    """Each action pins its thread's state and says how many calls that state has seen."""

    def __init__(self, pinning: bool) -> None:
        super().__init__("grpc://127.0.0.1:0")
        self.pinning = pinning
        self.local = threading.local()
        self.tokens: list[weakref.ref] = []
        self.lock = threading.Lock()

    def do_action(self, context: fl.ServerCallContext, action: fl.Action):
        if self.pinning:
            pin()
        calls = getattr(self.local, "calls", 0) + 1
        self.local.calls = calls
        if calls == 1:
            token = self.local.token = _Token()
            with self.lock:
                self.tokens.append(weakref.ref(token))
        return [json.dumps({"thread": threading.get_native_id(), "calls": calls}).encode()]


def _calls(server: _Probe, n: int, workers: int) -> list[dict]:
    def one(_: int) -> dict:
        with fl.connect(f"grpc://127.0.0.1:{server.port}") as client:
            out = []
            for _ in range(n):
                (result,) = client.do_action(fl.Action("probe", b""))
                out.append(json.loads(result.body.to_pybytes()))
            return out

    with ThreadPoolExecutor(workers) as pool:
        return [r for rs in pool.map(one, range(workers)) for r in rs]


def test_a_pinned_state_serves_every_later_call_on_its_thread() -> None:
    server = _Probe(pinning=True)
    try:
        seen = _calls(server, 30, 4)
    finally:
        server.shutdown()
    by_thread: dict[int, list[int]] = {}
    for r in seen:
        by_thread.setdefault(r["thread"], []).append(r["calls"])
    for counts in by_thread.values():  # one state per thread, counting all its calls
        assert sorted(counts) == list(range(1, len(counts) + 1))
    assert max(len(c) for c in by_thread.values()) > 1


def test_without_pinning_each_call_gets_a_new_state() -> None:
    """What the pin changes: pyarrow enters Python from gRPC threads with a fresh state."""
    server = _Probe(pinning=False)
    try:
        seen = _calls(server, 10, 2)
    finally:
        server.shutdown()
    assert {r["calls"] for r in seen} == {1}


def test_pinned_states_are_deleted_when_their_threads_exit() -> None:
    server = _Probe(pinning=True)
    try:
        _calls(server, 20, 8)  # several gRPC threads, each pinning its state
    finally:
        server.shutdown()
        server.wait()
    tokens, local = server.tokens, server.local  # the local lives on: only states can go
    assert tokens
    del server
    # a thread exiting hands its state over; the next pin (here on a thread of its own)
    # deletes it, holding the GIL
    t = threading.Thread(target=pin)
    t.start()
    t.join()
    gc.collect()
    # the server's threads have exited: every state they pinned was deleted with its locals
    assert [t for t in tokens if t() is not None] == []
    assert local is not None


def test_pinning_a_python_thread_is_harmless() -> None:
    """A thread Python started deletes its own state on exit; the pin then finds nothing."""
    local = threading.local()
    refs: list[weakref.ref] = []

    def run() -> None:
        pin()
        pin()  # pinning twice is pinning once
        local.token = _Token()
        refs.append(weakref.ref(local.token))

    for _ in range(20):
        t = threading.Thread(target=run)
        t.start()
        t.join()
    gc.collect()
    assert len(refs) == 20 and all(r() is None for r in refs)
