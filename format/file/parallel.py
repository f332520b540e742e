"""A process-wide thread pool for decoding the pages of several columns at once.

Page decoders spend their time in numpy, pyarrow and compiled kernels that release the GIL,
so the columns of one step decode in parallel on a multi-core machine. Pool tasks never
submit to the pool themselves, so callers on any thread (e.g. scan readahead) can't deadlock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            workers = max(1, min(8, os.cpu_count() or 1))
            _pool = ThreadPoolExecutor(workers, thread_name_prefix="quiver-decode")
        return _pool


def map_parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """`[fn(x) for x in items]`, spread over the pool when there is more than one item; the
    first exception raised (in item order) propagates."""
    if len(items) < 2 or (os.cpu_count() or 1) < 2:
        return [fn(x) for x in items]
    return list(_executor().map(fn, items))
