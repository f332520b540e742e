"""Blobs from the Python client as files: `Client.take_blobs` and `Client.read_blobs`.

```python
with Client("grpc://127.0.0.1:8815") as qc:
    (video,) = qc.take_blobs("clips", "video", indices=[7])
    video.seek(1 << 20)
    head = video.read(4096)  # a ranged read of the blob, through a read-ahead buffer
    frames = video.read_ranges([(0, 188), (1 << 24, 188)])
    qc.read_blobs("clips", "video", ids=[3, 9])  # [(row_address, bytes), ...]
```

`take_blobs` locates the blobs (one `take_blobs` action: their row addresses and sizes,
pinned to the version read) and returns a seekable file per row; reads are `read_blob`
actions fetching byte ranges, so a client touches only the bytes it reads. A null blob is
None, as in pylance's `take_blobs`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import pyarrow.flight as flight

from quiver.wire.requests import BLOB_RANGE_BYTES, json_bytes, read_command

DEFAULT_BUFFER_SIZE = 512 * 1024  # sequential read-ahead, as pylance's BlobFile


class RemoteBlob(io.RawIOBase):
    """One blob on the server, read by ranges (unbuffered: `BlobReader` buffers it)."""

    def __init__(self, client: Any, body: dict[str, Any], size: int) -> None:
        super().__init__()
        self._client = client
        self._body = body  # dataset, branch?, version, column, address
        self.length = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.length}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence: {whence}")
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def readinto(self, b: Any) -> int:
        n = max(0, min(len(b), self.length - self._pos))
        if n == 0:
            return 0
        data = self.range(self._pos, n)
        memoryview(b).cast("B")[:n] = data
        self._pos += n
        return n

    def range(self, offset: int, length: int) -> bytes:
        """`length` bytes at `offset`, in as many `read_blob` calls as the size takes."""
        if offset < 0 or length < 0 or offset + length > self.length:
            raise ValueError(f"range {offset}+{length} is outside the blob of {self.length} bytes")
        parts = []
        for start in range(offset, offset + length, BLOB_RANGE_BYTES):
            n = min(BLOB_RANGE_BYTES, offset + length - start)
            body = {**self._body, "offset": start, "length": n}
            action = flight.Action("read_blob", json_bytes(body))
            answers = self._client._rpc(
                lambda c, o, a=action: [r.body.to_pybytes() for r in c.do_action(a, o)]
            )
            header = json.loads(answers[0])
            data = b"".join(answers[1:])
            if len(data) != header["length"] != n:
                raise ConnectionError(f"read_blob answered {len(data)} of {n} bytes")
            parts.append(data)
        return b"".join(parts)


class BlobReader(io.BufferedReader):
    """A blob as a read-only, seekable binary file (pylance's `BlobFile` methods too)."""

    raw: RemoteBlob

    def size(self) -> int:
        """The blob's length in bytes."""
        return self.raw.length

    def read_range(self, offset: int, length: int) -> bytes:
        """`length` bytes at `offset`, without moving the cursor."""
        return self.raw.range(offset, length)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Several (offset, length) ranges, without moving the cursor."""
        return [self.raw.range(o, n) for o, n in ranges]

    def __repr__(self) -> str:
        return f"<BlobReader size={self.size()}>"


class Blobs:
    """The blob methods of `clients.Client` (a mixin: it uses the client's calls)."""

    def take_blobs(
        self,
        dataset: str,
        column: str,
        *,
        indices: Sequence[int] | None = None,
        ids: Sequence[int] | None = None,
        addresses: Sequence[int] | None = None,
        version: int | None = None,
        tag: str | None = None,
        as_of: Any = None,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
    ) -> list[BlobReader | None]:
        """The blobs of `column` for the rows selected by exactly one of `indices`
        (positions among the live rows), row `ids` or row `addresses`, as seekable files
        reading ranges on demand (None for a null blob), in the order given; `buffer_size`
        bytes of read-ahead for sequential reads."""
        if buffer_size < 0:
            raise ValueError(f"buffer_size must be >= 0, not {buffer_size}")
        selection = {"indices": indices, "ids": ids, "addresses": addresses}
        found = self._locate(dataset, column, selection, version, tag, as_of)
        return [
            None if size is None else BlobReader(raw, max(1, buffer_size)) for raw, size in found
        ]

    def read_blobs(
        self,
        dataset: str,
        column: str,
        *,
        indices: Sequence[int] | None = None,
        ids: Sequence[int] | None = None,
        addresses: Sequence[int] | None = None,
        version: int | None = None,
        tag: str | None = None,
        as_of: Any = None,
    ) -> list[tuple[int, bytes | None]]:
        """(row address, bytes or None) of the selected rows' blobs, read whole (selection
        and version as in `take_blobs`), as pylance's `read_blobs` answers."""
        selection = {"indices": indices, "ids": ids, "addresses": addresses}
        found = self._locate(dataset, column, selection, version, tag, as_of)
        return [
            (raw._body["address"], None if size is None else raw.range(0, size))
            for raw, size in found
        ]

    def _locate(
        self,
        dataset: str,
        column: str,
        selection: dict[str, Sequence[int] | None],
        version: int | None,
        tag: str | None,
        as_of: Any,
    ) -> list[tuple[RemoteBlob, int | None]]:
        """One `take_blobs` action: a reader of each selected blob, pinned to the version
        read, with its size (None for a null blob)."""
        body = read_command(dataset, version=version, tag=tag, as_of=as_of)
        body["column"] = column
        body.update({k: [int(v) for v in vs] for k, vs in selection.items() if vs is not None})
        found = self.action("take_blobs", body)  # type: ignore[attr-defined]
        pinned = self._scoped({"dataset": dataset})  # type: ignore[attr-defined]
        pinned.update(version=found["version"], column=column)
        return [
            (RemoteBlob(self, {**pinned, "address": b["row_address"]}, b["size"] or 0), b["size"])
            for b in found["blobs"]
        ]
