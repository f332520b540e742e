"""moto's S3 server with S3's atomic conditional writes.

moto answers `PUT` with `If-None-Match: *` by looking the key up and then storing the
object, two steps that two requests racing on one key in its threaded server can
interleave, so both "win". S3 makes the check and the write one step (one writer wins, the
other gets 412), and the commit protocol relies on it, so tests that race writers serialize
moto's handling of object PUTs.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from moto.s3.responses import S3Response

_PUTS = threading.Lock()


def make_object_puts_atomic() -> None:
    """Serialize moto's object PUT handling, in this process, from now on (idempotent)."""
    original = S3Response.put_object
    if getattr(original, "quiver_atomic", False):
        return

    @functools.wraps(original)
    def put_object(self: S3Response, *args: Any, **kwargs: Any) -> Any:
        with _PUTS:
            return original(self, *args, **kwargs)

    put_object.quiver_atomic = True  # type: ignore[attr-defined]
    S3Response.put_object = put_object  # type: ignore[method-assign]
