"""Helpers for the REST namespace tests: a real `quiver serve --namespace-port`, pylance's
reference adapter as the oracle, raw HTTP calls and Arrow bodies."""

from __future__ import annotations

import http.client
import json
import re
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
from server_process import quiver_serve

_NAMESPACE_URL = re.compile(rb"namespace on (https?://\S+?)[; ]")


@dataclass
class Served:
    """A running server: its Flight URI, namespace URL, process id and root."""

    flight: str
    url: str
    pid: int
    root: Path


@contextmanager
def namespace_server(root: Path, *args: str) -> Iterator[Served]:
    """`quiver serve` on `root` with the namespace on a free port."""
    root.mkdir(parents=True, exist_ok=True)
    with quiver_serve(root, "--namespace-port", "0", *args) as (uri, pid):
        found = _NAMESPACE_URL.search((root / "server.log").read_bytes())
        assert found, "the ready line names no namespace URL"
        yield Served(uri, found.group(1).decode(), pid, root)


@contextmanager
def reference_adapter(root: Path, **properties: str) -> Iterator[str]:
    """pylance's own REST adapter over a directory namespace: the oracle."""
    from lance.namespace import RestAdapter

    root.mkdir(parents=True, exist_ok=True)
    adapter = RestAdapter("dir", {"root": str(root), **properties}, host="127.0.0.1", port=0)
    adapter.start()
    try:
        yield f"http://127.0.0.1:{adapter.port}"
    finally:
        adapter.stop()


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    data: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.data) if self.data else None

    @property
    def code(self) -> int | None:
        doc = self.json if self.data[:1] == b"{" else None
        return doc.get("code") if isinstance(doc, dict) and self.status >= 400 else None

    def table(self) -> pa.Table:
        return pa.ipc.open_file(pa.BufferReader(self.data)).read_all()


def call(
    url: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str | None = "application/json",
    headers: dict[str, str] | None = None,
    tls_ca: str | None = None,
) -> Answer:
    """One raw HTTP request; JSON bodies are encoded, bytes sent as they are."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        context = ssl.create_default_context(cafile=tls_ca)
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname, parts.port, context=context, timeout=60
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    sent = dict(headers or {})
    if content_type and data is not None:
        sent["Content-Type"] = content_type
    try:
        conn.request(method, path, body=data, headers=sent)
        r = conn.getresponse()
        return Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


def ipc_stream(table: pa.Table) -> bytes:
    """`table` as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


ARROW = "application/vnd.apache.arrow.stream"
