"""Keep the server's resident memory close to what it actually uses.

Data pages arrive as multi-megabyte buffers that live for one batch each. glibc raises its
mmap threshold after the first such buffer is freed (up to 32 MiB) and serves the next ones
from the heap, which then fragments and is not given back: a streaming server's RSS creeps
up to several times its live memory. A threshold of our own keeps a step's buffers in the
heap, where the next step reuses them, and outsized ones on mmap, returned to the system
when freed. Each fresh mapping costs page faults and zeroing (at 256 KiB the server spent
more time in the kernel than decoding), so the threshold follows the streams running
(`streams_running`): 16 MiB (twice a DoGet batch) for a stream alone, 4 MiB while two or
more run. A lone stream then reuses even a filter step's 8 MB column buffers (a 2.2 one-row
read: 48 against 62 ms of server CPU at 4 MiB). In a crowd, 16 MiB let the heaps take the
2.2 vector column's 5 MB step buffers and fragment around them: the memory benchmark peaked
at 288-301 MB against 258-269 MB at 4 MiB (three alternated runs each), for 13 % less server
CPU per 2.2 full-scan pull (1.30 against 1.47 s) and none at 2.0. The trim threshold is 32
MiB: at 16 MiB, freeing one batch's buffers often left enough at the top of a heap to give
back, and the next batch faulted the same pages in again (a 2.2 projection: ~5,000 page
faults and 16 % more server CPU per pull). Every stream decodes in threads of its own, and
glibc gives threads arenas of their own (up to eight per core) that each keep what was freed
in them: two arenas stop that creep. Arrow's allocations go through the same system
allocator: pyarrow's (set here) and those of Arrow's C++ code, such as Flight's IPC writer
(`flight_server.cli` asks for it before pyarrow loads). mimalloc, Arrow's default, keeps
freed segments resident for reuse.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
import time
from collections.abc import Callable

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
MMAP_THRESHOLD = 16 << 20  # a stream alone
CROWD_MMAP_THRESHOLD = 4 << 20  # two or more streams at once
TRIM_THRESHOLD = 32 << 20
ARENA_MAX = 2


_malloc_trim: Callable[[int], int] | None = None
_mallopt: Callable[[int, int], int] | None = None
_threshold = 0  # the mmap threshold set last


def tune_allocator() -> bool:
    """Fix glibc's mmap and trim thresholds; returns False where there is no glibc."""
    global _malloc_trim, _mallopt, _threshold
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        _malloc_trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    _mallopt, _threshold = mallopt, MMAP_THRESHOLD
    ok &= bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    ok &= bool(mallopt(_M_ARENA_MAX, ARENA_MAX))
    if ok:
        import pyarrow as pa

        pa.set_memory_pool(pa.system_memory_pool())
    logging.getLogger("quiver").debug("allocator thresholds fixed: %s", ok)
    return ok


def streams_running(active: int) -> None:
    """Set glibc's mmap threshold for `active` running streams (see the module doc); the
    caller serialises calls (the memory budget's lock), so the last count wins."""
    global _threshold
    if _mallopt is None:
        return
    threshold = CROWD_MMAP_THRESHOLD if active >= 2 else MMAP_THRESHOLD
    if threshold != _threshold:
        _mallopt(_M_MMAP_THRESHOLD, threshold)
        _threshold = threshold


def mmap_threshold() -> int:
    """The mmap threshold set last (0 where `tune_allocator` found no glibc)."""
    return _threshold


def release_free_memory() -> None:
    """Give the pages the allocator holds free back to the system (glibc's `malloc_trim`,
    which also empties the middle of its heaps, past what the trim threshold keeps at their
    tops); nothing where `tune_allocator` found no glibc.

    Called when a stream ends while others run, and once the server has been idle a moment
    (`IdleTrim`). The call releases the GIL (ctypes) while it walks the heaps."""
    if _malloc_trim is not None:
        _malloc_trim(0)


class IdleTrim:
    """Gives free memory back once no stream has started for `delay` seconds after the last
    one ended: a burst's memory leaves an idle server, while reads in quick succession (a
    one-row read's four DoGets) do not pay for faulting their buffers in again."""

    def __init__(self, idle: Callable[[], bool], delay: float = 1.0) -> None:
        self._idle = idle
        self._delay = delay
        self._due = 0.0
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def stream_ended(self) -> None:
        """A stream ended with none running: give memory back `delay` seconds from now
        unless another stream runs then."""
        with self._changed:
            self._due = time.monotonic() + self._delay
            if self._thread is None:  # one short-lived thread per idle moment, none between
                self._thread = threading.Thread(target=self._run, name="quiver-trim", daemon=True)
                self._thread.start()
            self._changed.notify()

    def _run(self) -> None:
        with self._changed:
            while (left := self._due - time.monotonic()) > 0:
                self._changed.wait(left)
            self._thread = None
        if self._idle():
            release_free_memory()
