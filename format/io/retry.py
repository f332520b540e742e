"""Remote storage calls tried again while they fail transiently: which errors say "try
again later" (throttling, server errors, timeouts, dropped connections, bodies cut short)
and the bounded, jittered backoff around one idempotent request."""

from __future__ import annotations

import errno
import random
import time
from collections.abc import Callable
from typing import TypeVar

from quiver.format.errors import StorageUnavailableError

# errno values object stores' clients give failures worth retrying later (s3fs: 503
# SlowDown and 409 are EBUSY, 500 InternalError is EREMOTEIO)
_TRANSIENT_ERRNOS = {
    errno.EBUSY,
    errno.EAGAIN,
    errno.ETIMEDOUT,
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.ECONNREFUSED,
    errno.EPIPE,
    getattr(errno, "EREMOTEIO", 121),
}
_TRANSIENT_NAMES = (
    "Timeout",
    "Connection",
    "Disconnected",
    "Payload",
    "IncompleteRead",
    "Checksum",  # a body cut short or damaged on the way
)


def is_transient(exc: BaseException) -> bool:
    """Whether a storage call's error says "try again later" (throttling, a server error,
    a timeout, a dropped connection) rather than "this cannot work" (missing, forbidden,
    malformed)."""
    if isinstance(exc, FileExistsError | FileNotFoundError | PermissionError):
        return False
    if isinstance(exc, TimeoutError | ConnectionError):
        return True
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
        return True
    module = type(exc).__module__ or ""
    if module.startswith(("aiohttp", "botocore", "urllib3", "http.client")):
        return any(n in type(exc).__name__ for n in _TRANSIENT_NAMES)
    return False


_T = TypeVar("_T")
# Beyond the storage client's own retries (s3fs, botocore: throttling, 5xx, dropped
# connections), a remote call that still fails transiently, or fails in a way they do not
# retry (a body cut short and caught by its checksum), is tried again this many times,
# with jittered exponential backoff, within the deadline; then StorageUnavailableError.
REMOTE_ATTEMPTS = 4
REMOTE_DEADLINE = 30.0
_BACKOFF = 0.2


def remote_call(call: Callable[[], _T], what: str) -> _T:
    """`call()` (one idempotent request of a remote store), retried while its failures
    are transient; `what` names the operation and object for the final error."""
    start = time.monotonic()
    for attempt in range(REMOTE_ATTEMPTS):
        try:
            return call()
        except Exception as e:
            if not is_transient(e):
                raise
            wait = _BACKOFF * 2**attempt * (0.5 + random.random())
            if attempt + 1 == REMOTE_ATTEMPTS or time.monotonic() - start + wait > REMOTE_DEADLINE:
                raise StorageUnavailableError(
                    f"{what}: the store kept failing ({type(e).__name__}: {e}); retry later"
                ) from None
            time.sleep(wait)
    raise AssertionError("unreachable")
