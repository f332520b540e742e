"""Progress on stderr: of a read (rows and endpoints: a tqdm bar when tqdm is installed, else
one line), and of work that says nothing until it ends (a server action: the time so far)."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any


class Progress:
    """Rows read so far: a tqdm bar when tqdm is installed, else one stderr line."""

    def __init__(self, enabled: bool, desc: str, total_rows: int | None, endpoints: int) -> None:
        self._enabled = enabled
        self._lock = threading.Lock()
        self._rows = 0
        self._done = 0
        self._endpoints = endpoints
        self._desc = desc
        self._last = 0.0
        self._bar: Any = None
        if not enabled:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            self._render(force=True)
        else:
            self._bar = tqdm(
                total=total_rows, desc=desc, unit="rows", unit_scale=True, file=sys.stderr
            )

    def rows(self, n: int) -> None:
        if not self._enabled:
            return
        with self._lock:
            self._rows += n
            if self._bar is not None:
                self._bar.update(n)
            else:
                self._render()

    def endpoint_done(self) -> None:
        if not self._enabled:
            return
        with self._lock:
            self._done += 1
            if self._bar is not None:
                self._bar.set_postfix_str(f"{self._done}/{self._endpoints} endpoints")
            else:
                self._render()

    def _render(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < 0.1 and self._done < self._endpoints:
            return
        self._last = now
        sys.stderr.write(
            f"\r{self._desc}: {self._rows:,} rows, {self._done}/{self._endpoints} endpoints"
        )
        sys.stderr.flush()

    def close(self) -> None:
        if not self._enabled:
            return
        with self._lock:
            if self._bar is not None:
                self._bar.close()
            else:
                self._render(force=True)
                sys.stderr.write("\n")
                sys.stderr.flush()


class Elapsed:
    """While the block runs, one stderr line `desc... 12.3 s` redrawn every `interval`
    seconds, erased at the end: for work that reports nothing until it is done."""

    def __init__(self, enabled: bool, desc: str, interval: float = 0.2) -> None:
        self._enabled = enabled
        self._desc = desc
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._width = 0

    def __enter__(self) -> Elapsed:
        if self._enabled:
            started = time.monotonic()
            self._thread = threading.Thread(
                target=self._run, args=(started,), name="quiver-elapsed", daemon=True
            )
            self._thread.start()
        return self

    def _run(self, started: float) -> None:
        while not self._stop.wait(self._interval):
            line = f"{self._desc}... {time.monotonic() - started:.1f} s"
            self._width = max(self._width, len(line))
            sys.stderr.write(f"\r{line}")
            sys.stderr.flush()

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        if self._width:
            sys.stderr.write("\r" + " " * self._width + "\r")
            sys.stderr.flush()
