"""A process-wide thread pool for decoding the pages of several columns at once.

Page decoders spend their time in numpy, pyarrow and compiled kernels that release the GIL,
so the columns of one step decode in parallel on a multi-core machine. Pool tasks never
submit to the pool themselves, so callers on any thread (e.g. scan readahead) can't deadlock.
While other callers are mapping (a server streaming to several clients at once: half the
cores' worth of them), a caller works in its own thread: the cores are busy already, and
handing tasks to the pool would only add thread switches (a 2.2 full scan served to four
streams on two cores: 3-9 % less server CPU).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()
_CPUS = os.cpu_count() or 1  # asked once: every step of every scan asks
_mapping = 0  # callers inside map_parallel right now, on the pool or not


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            workers = max(1, min(8, _CPUS))
            _pool = ThreadPoolExecutor(workers, thread_name_prefix="quiver-decode")
        return _pool


def map_parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """`[fn(x) for x in items]`, spread over the pool when there is more than one item and
    fewer than half the cores' worth of other callers are mapping; the first exception
    raised (in item order) propagates."""
    global _mapping
    if len(items) < 2:
        return [fn(x) for x in items]
    with _lock:
        alone = _mapping < _CPUS // 2
        _mapping += 1
    try:
        if alone:
            return list(_executor().map(fn, items))
        return [fn(x) for x in items]
    finally:
        with _lock:
            _mapping -= 1


Plan = Generator[list, list, object]


def run_plans(
    plans: Sequence[Plan], read: Callable[[list], list], *, parallel: bool = True
) -> list[object]:
    """Drive read plans to completion: a plan is a generator that yields the (position, size)
    file ranges it needs next, is sent their bytes, and returns its result. Each round reads
    every active plan's ranges with one `read` call (one coalesced request) and resumes the
    plans on the pool when `parallel` (so the decoding they do runs on every core; plans that
    only slice a few rows are cheaper resumed in the caller's thread)."""
    results: list[object] = [None] * len(plans)
    active: list[tuple[int, Plan, list]] = []
    for i, p in enumerate(plans):
        try:
            active.append((i, p, next(p)))
        except StopIteration as stop:
            results[i] = stop.value
    while active:
        blobs = read([r for _, _, req in active for r in req])
        sends, pos = [], 0
        for i, p, req in active:
            sends.append((i, p, blobs[pos : pos + len(req)]))
            pos += len(req)

        def resume(item: tuple[int, Plan, list]) -> tuple[int, Plan, list | None, object]:
            i, p, part = item
            try:
                return i, p, p.send(part), None
            except StopIteration as stop:
                return i, p, None, stop.value

        active = []
        resumed = map_parallel(resume, sends) if parallel else [resume(x) for x in sends]
        for i, p, req, value in resumed:
            if req is None:
                results[i] = value
            else:
                active.append((i, p, req))
    return results
