"""A fault-injecting HTTP proxy in front of an S3-protocol server (moto) on loopback.

Storage clients talk to the proxy's endpoint as to S3; each request is forwarded to the
real server unless a rule injects a fault into it:

- ``slowdown`` / ``error500``: answer 503 SlowDown (with Retry-After) or 500 InternalError
  without forwarding: nothing happened;
- ``delay``: wait `seconds`, then forward;
- ``reset``: forward (the request takes effect), then send the status, headers and half of
  the body and drop the connection: a reset mid-body;
- ``lost``: forward (a PUT is written), then drop the connection without an answer: the
  client cannot know the write happened;
- ``stale_list``: forward a listing and remove from its answer the keys the rule matches
  (or only the `newest` few of them), as a listing that lags behind the newest objects.

A rule matches by method, by a regular expression on the request's path (for
``stale_list``: on the listed keys to hide) and by probability,
optionally only its first `times` matches or only once another rule
has injected; each injection is counted by fault.
"""

from __future__ import annotations

import contextlib
import http.client
import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

FAULTS = ("slowdown", "error500", "delay", "reset", "lost", "stale_list")


@dataclass
class Rule:
    fault: str
    probability: float = 1.0
    method: str | None = None  # GET, PUT, HEAD, DELETE, POST (None: any)
    key: str | None = None  # regular expression searched in the request's path
    times: int | None = None  # inject into the first `times` matches only
    seconds: float = 0.5  # for delay
    newest: int | None = None  # for stale_list: hide only the newest this many of the keys
    after: Rule | None = None  # only once that rule has injected a fault
    matched: int = 0

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ValueError(f"unknown fault {self.fault!r}")

    def applies(self, method: str, path: str, rng: random.Random) -> bool:
        if self.after is not None and not self.after.matched:
            return False
        if self.method is not None and method != self.method:
            return False
        if self.fault == "stale_list":  # listings only; `key` picks the keys to hide
            if "list-type=" not in path and "prefix=" not in path:
                return False
        elif self.key is not None and not re.search(self.key, path):
            return False
        if self.times is not None and self.matched >= self.times:
            return False
        if rng.random() >= self.probability:
            return False
        self.matched += 1
        return True


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # connections the proxy drops on purpose


def _error(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    ).encode()


@dataclass
class FaultProxy:
    """The proxy: `endpoint` for clients, `rules` consulted in order (first match wins)."""

    upstream: str
    rules: list[Rule] = field(default_factory=list)
    seed: int = 0
    injected: Counter = field(default_factory=Counter)
    requests: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        up = urlsplit(self.upstream)
        self._host, self._port = up.hostname or "127.0.0.1", up.port or 80
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any  # noqa: N815

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def set_rules(self, *rules: Rule) -> None:
        with self._lock:
            self.rules = list(rules)

    def _choose(self, method: str, path: str) -> Rule | None:
        with self._lock:
            self.requests += 1
            for rule in self.rules:
                if rule.applies(method, path, self._rng):
                    self.injected[rule.fault] += 1
                    return rule
        return None

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        body = _read_body(h)
        if body is None:  # the client went away before its whole body came: S3 stores nothing
            _drop(h)
            return
        rule = self._choose(h.command, h.path)
        fault = rule.fault if rule else None
        if fault in ("slowdown", "error500"):
            status, code = (503, "SlowDown") if fault == "slowdown" else (500, "InternalError")
            payload = _error(code, "injected by the fault proxy")
            h.send_response(status)
            h.send_header("Content-Type", "application/xml")
            h.send_header("Content-Length", str(len(payload)))
            if status == 503:
                h.send_header("Retry-After", "0")
            h.end_headers()
            if h.command != "HEAD":  # an answer to HEAD has no body
                h.wfile.write(payload)
            return
        if fault == "delay":
            time.sleep(rule.seconds)  # type: ignore[union-attr]
        status, reason, headers, answer = self._forward(h, body)
        if fault == "lost":
            _drop(h)
            return
        if fault == "stale_list" and h.command == "GET" and b"<Contents>" in answer:
            answer = _hide_listed(answer, rule)  # type: ignore[arg-type]
        h.send_response(status, reason)
        length = str(len(answer))
        for name, value in headers:
            if name.lower() == "content-length" and h.command == "HEAD":
                length = value  # the object's size, which an answer to HEAD carries alone
            elif name.lower() not in ("content-length", "transfer-encoding", "connection"):
                h.send_header(name, value)
        h.send_header("Content-Length", length)
        h.end_headers()
        if fault == "reset":
            if h.command != "HEAD":
                h.wfile.write(answer[: len(answer) // 2])
            h.wfile.flush()
            _drop(h)
            return
        if h.command != "HEAD":
            h.wfile.write(answer)

    def _forward(
        self, h: BaseHTTPRequestHandler, body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self._host, self._port, timeout=60)
        try:
            headers = {k: v for k, v in h.headers.items() if k.lower() != "transfer-encoding"}
            headers["Content-Length"] = str(len(body))
            conn.request(h.command, h.path, body=body, headers=headers)
            r = conn.getresponse()
            answer = r.read()
            return r.status, r.reason, r.getheaders(), answer
        finally:
            conn.close()


def _hide_listed(answer: bytes, rule: Rule) -> bytes:
    """A listing without the entries whose XML matches the rule's `key` (with `newest`,
    only the most recently modified of those)."""
    pattern = re.compile(rule.key or "")
    entries = re.findall(rb"<Contents>(?:(?!</Contents>).)*</Contents>", answer, flags=re.S)
    hidden = [e for e in entries if pattern.search(e.decode())]
    if rule.newest is not None:

        def modified(entry: bytes) -> bytes:
            found = re.search(rb"<LastModified>([^<]*)</LastModified>", entry)
            return found.group(1) if found else b""

        hidden = sorted(hidden, key=modified)[-rule.newest :] if rule.newest else []
    for entry in hidden:
        answer = answer.replace(entry, b"", 1)
    return answer


def _read_body(h: BaseHTTPRequestHandler) -> bytes | None:
    """The request's body; None when the connection ends before all of it came."""
    if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
        out = bytearray()
        while True:
            size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(out)
            out += h.rfile.read(size)
            h.rfile.readline()
    length = int(h.headers.get("Content-Length") or 0)
    body = h.rfile.read(length) if length else b""
    return body if len(body) == length else None


def _drop(h: BaseHTTPRequestHandler) -> None:
    """Close the client's connection at once (RST, not a clean FIN)."""
    h.close_connection = True
    with contextlib.suppress(OSError):
        h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        h.connection.close()


@contextlib.contextmanager
def fault_proxy(upstream: str, *rules: Rule, seed: int = 0) -> Iterator[FaultProxy]:
    """A FaultProxy in front of `upstream` for the duration of the block."""
    proxy = FaultProxy(upstream, list(rules), seed)
    try:
        yield proxy
    finally:
        proxy.close()
