"""Progress of a read: a tqdm bar when tqdm is installed, else one stderr line."""

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
