"""Actions that report progress: index builds stream `{"progress": {...}}` results while they
run, then their result, when the body asks with `"progress": true`.

The action runs in a worker thread with `actions.PROGRESS` set to a callback that queues each
stage; the RPC's result iterator hands the queued stages to gRPC as they come. A client that
cancels the call (or goes away) stops the build at its next stage: the callback raises
`Cancelled`, the build discards its files and commits nothing.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.flight as flight

from quiver.flight_server.actions import PROGRESS
from quiver.flight_server.errors import Cancelled
from quiver.wire.requests import PROGRESS_ACTIONS

__all__ = ["stream_with_progress", "wants_progress"]

# Seconds between checks of the call's cancellation while no stage arrives.
_POLL_SECONDS = 0.5


def wants_progress(name: str, body: bytes) -> bool:
    """Whether an action body asks for progress results (`"progress": true`)."""
    if name not in PROGRESS_ACTIONS or b"progress" not in body:
        return False
    try:
        doc = json.loads(body)
    except ValueError:
        return False  # the action itself refuses the body
    return isinstance(doc, dict) and doc.get("progress") is True


def stream_with_progress(
    run: Callable[[], dict[str, Any]],
    cancelled: Callable[[], bool],
    encode: Callable[[dict[str, Any]], bytes],
) -> Iterator[flight.Result | dict[str, Any]]:
    """Run `run` in a worker; yield a Result per stage it reports, then its result (a dict,
    for the caller to log and send). Its error is raised here."""
    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    stop = threading.Event()

    def report(stage: dict[str, Any]) -> None:
        if stop.is_set():
            raise Cancelled("the client cancelled the call: the index build stopped")
        events.put(("progress", stage))

    def work() -> None:
        PROGRESS.set(report)
        try:
            events.put(("done", run()))
        except BaseException as e:  # noqa: BLE001 - handed to the RPC's thread
            events.put(("error", e))

    threading.Thread(target=work, name="quiver-action", daemon=True).start()
    try:
        while True:
            try:
                kind, item = events.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if cancelled():
                    stop.set()
                continue
            if kind == "progress":
                yield flight.Result(encode({"progress": item}))
            elif kind == "done":
                yield item
                return
            else:
                raise item
    finally:
        stop.set()  # the client stopped reading: the build stops at its next stage
