"""moto's S3 server on loopback, with S3's atomic conditional writes (`moto_s3`).

moto answers `PUT` with `If-None-Match: *` by looking the key up and then storing the
object, two steps that two requests racing on one key in its threaded server can
interleave, so both "win". S3 makes the check and the write one step (one writer wins, the
other gets 412), and the commit protocol relies on it, so tests that race writers serialize
moto's handling of object PUTs.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

from moto.s3.responses import S3Response
from moto.server import ThreadedMotoServer

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


@contextlib.contextmanager
def moto_s3(bucket: str) -> Iterator[str]:
    """A moto S3 server on a free loopback port, its object PUTs atomic, holding the empty
    bucket `bucket`; yields its endpoint URL and stops the server on exit."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    make_object_puts_atomic()  # as S3 is: one conditional create of a key wins
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        import boto3

        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        server.stop()


def s3fs_options(endpoint: str) -> dict[str, Any]:
    """The storage options Quiver's store (s3fs) takes for the moto server at `endpoint`."""
    return {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }


def lance_options(endpoint: str) -> dict[str, str]:
    """The storage options pylance takes for the moto server at `endpoint`."""
    return {
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "aws_endpoint": endpoint,
        "aws_region": "us-east-1",
        "allow_http": "true",
    }
