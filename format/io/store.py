"""An object store rooted at one URI, on fsspec, with ranged and coalesced reads.

Paths given to `ObjectStore` methods are relative to its root (``"_versions/1.manifest"``).
Nothing here assumes a local filesystem; the local backend only gets faster reads
(``os.pread`` on a kept descriptor) and an atomic create-if-absent through ``link(2)``.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import io
import mmap
import os
import posixpath
import stat
import tempfile
import threading
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import fsspec
import numpy as np
from fsspec.implementations.local import LocalFileSystem

from quiver.format._kernels import copy_ranges
from quiver.format.errors import UnsupportedFeatureError
from quiver.format.io.iostats import IoCounter
from quiver.format.io.retry import is_transient, remote_call

# Local reads at least this large are mapped rather than copied (see `FileReader.read`).
_MAP_MIN = 1 << 20
# Local reads of more scattered ranges than this map their span once (see `_mapped_groups`),
# if it is no wider than `_MAP_SPAN_MAX`.
_MAP_GROUPS = 8
_MAP_SPAN_MAX = 1 << 30
# Local reads of at most this many spans read each one into place with its own system call:
# copying them out of the mapping faults its pages in, and they leave the page tables again
# when the read is dropped (takes of a `contains` filter's candidates: 7.7 ms with the
# mapping, 5.6 ms read one by one)
_PREAD_SPANS = 512
_MAP_MIN_AVERAGE = 4096  # bytes per range (a page); smaller ones cost less to copy than to map
# Dropping a mapped view's pages from the page tables (where the platform can), by the
# aligned 2 MiB around them: a fault maps a large page-cache folio whole (one entry for
# 2 MiB, or many pages at once), past the view's own bytes. Dropping the view's pages only
# left the rest mapped: the memory benchmark's file-backed RSS averaged 100 MB, not 70.
# A neighbour still in use that shares those 2 MiB faults them back in.
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)
_DROP_ALIGN = 2 << 20
# Ranges closer than this are fetched with one request and split afterwards.
_COALESCE_GAP_LOCAL = 4 * 1024
_COALESCE_GAP_REMOTE = 1024 * 1024
# Up to this many ranges are coalesced in plain Python (see `FileReader._read_few`).
_FEW_RANGES = 16


_S3_PROTOCOLS = ("s3", "s3a")

# Lance / object_store style option names, accepted for S3 next to s3fs's own.
_S3_ALIASES = {
    "aws_access_key_id": "key",
    "access_key_id": "key",
    "aws_secret_access_key": "secret",
    "secret_access_key": "secret",
    "aws_session_token": "token",
    "session_token": "token",
    "aws_endpoint": "endpoint_url",
    "aws_endpoint_url": "endpoint_url",
    "endpoint": "endpoint_url",
}
_S3_REGION_KEYS = ("aws_region", "region", "region_name", "aws_default_region")
_S3_DROPPED = ("allow_http", "aws_allow_http", "virtual_hosted_style_request")


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return tuple(protocol) if isinstance(protocol, (tuple, list)) else (protocol,)


def _is_s3(fs: Any) -> bool:
    return any(p in _S3_PROTOCOLS for p in _protocols(fs))


def _s3_options(options: dict[str, Any]) -> dict[str, Any]:
    """s3fs keyword arguments from storage options (s3fs's names or Lance's)."""
    out: dict[str, Any] = {}
    client_kwargs = dict(options.get("client_kwargs") or {})
    for key, value in options.items():
        low = key.lower()
        if key == "client_kwargs" or low in _S3_DROPPED:
            continue
        if low in _S3_REGION_KEYS:
            client_kwargs.setdefault("region_name", value)
        elif low in _S3_ALIASES:
            out.setdefault(_S3_ALIASES[low], value)
        else:
            out[key] = value
    if client_kwargs:
        out["client_kwargs"] = client_kwargs
    # Listings are cached per process by default: another writer's new manifest would stay
    # invisible (and `info` on it would even raise FileNotFoundError). Never cache them.
    out.setdefault("use_listings_cache", False)
    return out


def filesystem(uri: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """(fsspec filesystem, backend path) of a URI, with the storage options normalized."""
    options = dict(storage_options or {})
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme in _S3_PROTOCOLS:
        options = _s3_options(options)
    return fsspec.core.url_to_fs(uri, **options)


def _split_uri(uri: str, storage_options: dict[str, Any] | None) -> tuple[Any, str]:
    """Return (filesystem, root path without trailing slash) for a URI or local path."""
    fs, path = filesystem(uri, storage_options)
    if isinstance(fs, LocalFileSystem):
        path = os.path.abspath(path)
    return fs, path.rstrip("/") or "/"


@dataclass(frozen=True)
class Spans:
    """A request for many byte spans of one file at once (sorted by start), answered by
    `FileReader.read_spans` with one uint8 array of their bytes back to back: a take's
    thousands of chunks or rows then cost no Python object each."""

    starts: np.ndarray
    stops: np.ndarray


class NotARegularFile(FileNotFoundError):
    """A directory (or other non-file) stands where a file should be: for its readers, the
    file is missing (a damaged dataset), not an I/O failure."""


class FileReader:
    """Random access to one stored file: sized, ranged and batched reads."""

    def __init__(self, store: ObjectStore, path: str, size: int | None = None) -> None:
        self.store = store
        self.path = path
        self.full_path = store.full_path(path)
        self._fd: int | None = None
        if store.is_local:
            try:
                self._fd = os.open(self.full_path, os.O_RDONLY)
            except FileNotFoundError:
                raise FileNotFoundError(f"{store.uri_of(path)} does not exist") from None
            st = os.fstat(self._fd)
            if not stat.S_ISREG(st.st_mode):  # Linux opens a directory read-only
                os.close(self._fd)
                self._fd = None
                raise NotARegularFile(f"{store.uri_of(path)} is not a regular file")
            self._file_size = st.st_size
            self.size = self._file_size if size is None else size
            # which file this is, beyond its address: a file replaced in place differs
            self.identity: tuple | None = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        else:
            self.size = store.size(path) if size is None else size
            self.identity = None  # objects are not replaced under Lance's unique file names
        self._map: mmap.mmap | None = None  # the whole local file, mapped on first use
        self._map_lock = threading.Lock()

    def close(self) -> None:
        """Release the local descriptor, if any (views already handed out stay valid)."""
        self._map = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def read(self, start: int, length: int) -> bytes | memoryview:
        """Read exactly `length` bytes at `start`; raises EOFError if the file is shorter.

        Large local reads are a read-only mapping of the file instead of a copy: no fresh
        buffer to fault in, zero and fill (that cost a streaming server more system time than
        the whole transfer), and the pages are the page cache's own. Only ranges inside the
        file's size as found on opening are mapped (a mapping past the end would fault).
        """
        if start < 0 or length < 0 or start + length > self.size:
            raise EOFError(
                f"{self.store.uri_of(self.path)}: range {start}+{length} outside file of "
                f"{self.size} bytes"
            )
        if length == 0:
            return b""
        if self._fd is not None:
            if length >= _MAP_MIN and start + length <= self._file_size:
                self.store.io.read(1, length)
                return self._mapped(start, length)
            data = os.pread(self._fd, length, start)
        else:
            data = remote_call(
                lambda: self.store.fs.cat_file(self.full_path, start=start, end=start + length),
                f"{self.store.uri_of(self.path)}: read of {start}+{length}",
            )
        if len(data) != length:
            raise EOFError(f"{self.store.uri_of(self.path)}: short read at {start}+{length}")
        self.store.io.read(1, length)
        return data

    def read_tail(self, length: int) -> bytes:
        """Read the last `min(length, size)` bytes."""
        n = min(length, self.size)
        return self.read(self.size - n, n)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | memoryview]:
        """Read many (start, length) ranges, coalescing neighbours into fewer requests; each
        range comes back as its own bytes or a view of a coalesced read."""
        if not ranges:
            return []
        gap = _COALESCE_GAP_LOCAL if self._fd is not None else _COALESCE_GAP_REMOTE
        if len(ranges) <= _FEW_RANGES:
            return self._read_few(ranges, gap)
        table = np.array(ranges, dtype=np.int64).reshape(len(ranges), 2)
        starts, lengths = table[:, 0], table[:, 1]
        order, g_start, g_end, group = coalesce(starts, starts + lengths, gap)
        groups = list(zip(g_start.tolist(), g_end.tolist(), strict=True))
        if self._fd is not None and len(groups) > _MAP_GROUPS:
            blobs = self._mapped_groups(groups)
        else:
            blobs = self._fetch_groups(groups)
        members = np.bincount(group, minlength=len(g_start))
        if (members == 1).all():  # nothing coalesced: each range is its group's read
            out: list[bytes | memoryview] = [b""] * len(ranges)
            for i, blob in zip(order.tolist(), blobs, strict=True):
                out[i] = blob
            return out
        views = [memoryview(b) for b in blobs]
        rel = (starts[order] - g_start[group]).tolist()
        out = [b""] * len(ranges)
        for i, g, r, n in zip(
            order.tolist(), group.tolist(), rel, lengths[order].tolist(), strict=True
        ):
            out[i] = views[g][r : r + n]
        return out

    def _read_few(self, ranges: Sequence[tuple[int, int]], gap: int) -> list[bytes | memoryview]:
        """`read_ranges` of a few ranges (a scan step's): the same coalescing in plain
        Python, which costs a tenth of numpy's on a handful of items."""
        groups: list[list] = []  # [start, end, member indices]
        for i in sorted(range(len(ranges)), key=lambda i: ranges[i][0]):
            start, length = ranges[i]
            end = start + length
            if groups and start <= groups[-1][1] + gap:
                last = groups[-1]
                if end > last[1]:
                    last[1] = end
                last[2].append(i)
            else:
                groups.append([start, end, [i]])
        spans = [(g[0], g[1]) for g in groups]
        if self._fd is not None and len(spans) > _MAP_GROUPS:
            blobs = self._mapped_groups(spans)
        else:
            blobs = self._fetch_groups(spans)
        out: list[bytes | memoryview] = [b""] * len(ranges)
        for (g_start, _, members), blob in zip(groups, blobs, strict=True):
            if len(members) == 1:
                out[members[0]] = blob
                continue
            view = memoryview(blob)
            for i in members:
                start, length = ranges[i]
                out[i] = view[start - g_start : start - g_start + length]
        return out

    def read_spans(self, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
        """The bytes of spans [starts[i], stops[i]) back to back, as one uint8 array; spans
        sorted by start (they may touch or overlap). Many scattered spans of a local file are
        copied out of one mapping of their extent by a compiled loop (no system call and no
        Python object per span); elsewhere neighbours are coalesced into few reads."""
        starts = np.ascontiguousarray(starts, dtype=np.int64)
        stops = np.ascontiguousarray(stops, dtype=np.int64)
        lengths = stops - starts
        if len(starts) == 0:
            return np.zeros(0, dtype=np.uint8)
        lo, hi = int(starts.min()), int(stops.max())
        if len(starts) > 1 and (starts[1:] < starts[:-1]).any():
            raise ValueError("read_spans: spans must be sorted by start")
        if lo < 0 or hi > self.size or (lengths < 0).any():
            raise EOFError(
                f"{self.store.uri_of(self.path)}: spans [{lo}, {hi}) outside file of "
                f"{self.size} bytes"
            )
        if (starts[1:] == stops[:-1]).all():  # back to back already: one read, no copy
            return np.frombuffer(self.read(lo, hi - lo), dtype=np.uint8)
        out = np.empty(int(lengths.sum()), dtype=np.uint8)
        local = self._fd is not None
        if local and len(starts) <= _PREAD_SPANS and hi <= self._file_size:
            # a few spans of a local file (a take's chunks): each read straight into place
            view, pos = memoryview(out), 0
            for s, n in zip(starts.tolist(), lengths.tolist(), strict=True):
                if os.preadv(self._fd, [view[pos : pos + n]], s) != n:
                    raise EOFError(f"{self.store.uri_of(self.path)}: short read at {s}+{n}")
                pos += n
            self.store.io.read(len(starts), len(out))
            return out
        _, g_start, g_end, group = coalesce(
            starts, stops, _COALESCE_GAP_LOCAL if local else _COALESCE_GAP_REMOTE
        )
        if (
            local
            and len(g_start) > _MAP_GROUPS
            and hi <= self._file_size
            and hi - lo <= _MAP_SPAN_MAX
        ):
            source = np.frombuffer(self._mapped(lo, hi - lo), np.uint8)
            copy_ranges(source, starts - lo, lengths, 1, out)
            self.store.io.read(len(g_start), len(out))
            return out
        blobs = self._fetch_groups(list(zip(g_start.tolist(), g_end.tolist(), strict=True)))
        firsts = np.searchsorted(group, np.arange(len(blobs) + 1))
        done = np.concatenate(([0], np.cumsum(lengths)))
        for g, (g_s, blob) in enumerate(zip(g_start.tolist(), blobs, strict=True)):
            a, b = int(firsts[g]), int(firsts[g + 1])
            copy_ranges(
                np.frombuffer(blob, np.uint8),
                starts[a:b] - g_s,
                lengths[a:b],
                1,
                out[int(done[a]) : int(done[b])],
            )
        return out

    def _fetch_groups(self, groups: list[tuple[int, int]]) -> list[bytes | memoryview]:
        """The coalesced ranges [start, end) (ascending): read one by one from a local file
        (or when there is one), fetched together from a remote store; each checked whole."""
        if self._fd is not None or len(groups) == 1:
            blobs = [self.read(s, e - s) for s, e in groups]
        else:
            if groups[-1][1] > self.size:
                raise EOFError(f"{self.store.uri_of(self.path)}: range ends past {self.size}")
            blobs = remote_call(
                lambda: self.store.fs.cat_ranges(
                    [self.full_path] * len(groups), [s for s, _ in groups], [e for _, e in groups]
                ),
                f"{self.store.uri_of(self.path)}: read of {len(groups)} ranges",
            )
        for (g_s, g_e), blob in zip(groups, blobs, strict=True):
            if len(blob) != g_e - g_s:
                raise EOFError(f"{self.store.uri_of(self.path)}: short read at {g_s}")
        if self._fd is None and len(groups) > 1:  # (local reads counted themselves)
            self.store.io.read(len(groups), sum(e - s for s, e in groups))
        return blobs

    def _mapped_groups(self, groups: list[tuple[int, int]]) -> list[bytes | memoryview]:
        """Many scattered local ranges (a take's chunks) as slices of one mapping of their
        span: no system call per range, and only the pages they touch are read in. Small
        ranges (single rows) and ranges past the file's size as found on opening are read
        (and refused) as usual."""
        lo, hi = groups[0][0], max(e for _, e in groups)
        wanted = sum(e - s for s, e in groups)
        small = wanted < _MAP_MIN_AVERAGE * len(groups)  # a fault per range beats a copy
        if small or hi > self._file_size or hi > self.size or hi - lo > _MAP_SPAN_MAX:
            return [self.read(s, e - s) for s, e in groups]
        view = self._mapped(lo, hi - lo)
        self.store.io.read(len(groups), wanted)
        return [view[s - lo : e - lo] for s, e in groups]

    def _mapped(self, start: int, length: int) -> memoryview:
        """A read-only view of local file bytes [start, start + length), inside the file's
        size as found on opening.

        The file is mapped once, whole, on the first such read: later reads neither map nor
        unmap, and the page cache's 2 MiB folios are mapped 2 MiB at a time rather than
        through small mappings of their parts (a mapping per read cost a 2.0 full scan about
        a tenth of the server's CPU in faults, mmap and munmap). Pages are mapped in as they
        are first touched, often by gRPC sending them off the GIL. When the last user of a
        view lets go (an Arrow buffer sent, a decoded step dropped), its pages leave the
        process's page tables (MADV_DONTNEED; the page cache keeps them), so the server's
        resident memory stays what its streams hold, not what they have read."""
        m = self._map
        if m is None:
            with self._map_lock:
                m = self._map
                if m is None:
                    assert self._fd is not None
                    m = self._map = mmap.mmap(
                        self._fd, self._file_size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ
                    )
        view = np.frombuffer(m, np.uint8, count=length, offset=start)
        if _DONTNEED is not None:
            first = start - start % _DROP_ALIGN
            end = min(-(-(start + length) // _DROP_ALIGN) * _DROP_ALIGN, len(m))
            weakref.finalize(view, m.madvise, _DONTNEED, first, end - first).atexit = False
        return memoryview(view)


def coalesce(
    starts: np.ndarray, ends: np.ndarray, gap: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Merge byte ranges [starts, ends) that overlap or lie within `gap` of each other.
    Returns the ranges' order by start, the merged groups' starts and ends (ascending), and
    the group of each range in that order."""
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[:1] = True
    new[1:] = s[1:] > reach[:-1] + gap
    firsts = np.flatnonzero(new)
    lasts = np.append(firsts[1:] - 1, len(s) - 1)
    return order, s[firsts], reach[lasts], np.cumsum(new) - 1


class _StagedFile(io.FileIO):
    """A file written to a local temporary path and published whole only on a clean close.

    `abort()`, an exception inside a ``with`` block or dropping the writer unclosed
    discard the temporary file, so no partial file ever appears under the final name.
    """

    tmp: str
    counter: IoCounter | None = None  # the store's, told of the file once it is published

    def _publish(self) -> None:
        """Move the finished temporary file to its final place (each subclass's own way)."""

    def close(self) -> None:
        """Publish the complete file under its final name."""
        if self.closed:
            return
        size = self.tell()
        super().close()
        self._publish()
        if self.counter is not None:
            self.counter.wrote(1, size)

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    def __del__(self) -> None:
        self.abort()

    def abort(self) -> None:
        """Close and remove the temporary file without publishing it."""
        if not self.closed:
            super().close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)


class _AtomicLocalFile(_StagedFile):
    """A local file written under a temporary name beside it and renamed into place."""

    def __init__(self, final: str) -> None:
        self.final = final
        self.tmp = os.path.join(
            os.path.dirname(final), f".tmp_{os.path.basename(final)}_{uuid.uuid4().hex}"
        )
        super().__init__(self.tmp, "wb")

    def _publish(self) -> None:
        os.replace(self.tmp, self.final)


class _RemoteUpload(_StagedFile):
    """A remote object staged in a local temporary file and uploaded in one request.

    S3 objects only become visible once a PUT or multipart upload completes.
    """

    def __init__(self, fs: Any, final: str, shown: str) -> None:
        self.fs = fs
        self.final = final
        self.shown = shown  # the object's URI, as errors name it
        fd, self.tmp = tempfile.mkstemp(prefix="quiver-upload-")
        super().__init__(fd, "wb", closefd=True)

    def _publish(self) -> None:
        try:
            remote_call(lambda: self.fs.put_file(self.tmp, self.final), f"{self.shown}: upload")
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)


# memory:// lives in this process, so one lock makes its create-if-absent atomic.
_MEMORY_LOCK = threading.Lock()


def _s3_supports_create(fs: Any) -> bool:
    try:
        return "mode" in inspect.signature(fs._pipe_file).parameters
    except (AttributeError, TypeError, ValueError):
        return False


class ObjectStore:
    """A directory-like view of one storage location (a dataset root)."""

    def __init__(self, fs: Any, root: str, uri: str, io: IoCounter | None = None) -> None:
        self.fs = fs
        self.root = root
        self.uri = uri
        self.is_local = isinstance(fs, LocalFileSystem)
        # the reads and writes of this store and those derived from it (`io_stats_*`)
        self.io = io if io is not None else IoCounter()

    def __reduce__(self) -> tuple[Any, ...]:
        return (ObjectStore, (self.fs, self.root, self.uri))

    # paths -------------------------------------------------------------------------------
    def full_path(self, path: str) -> str:
        """The backend path of a root-relative path."""
        return posixpath.join(self.root, path) if path else self.root

    def uri_of(self, path: str) -> str:
        """A human-readable URI of a root-relative path, for messages."""
        return f"{self.uri.rstrip('/')}/{path}" if path else self.uri

    def child(self, path: str) -> ObjectStore:
        """A store rooted at a sub-directory."""
        return ObjectStore(self.fs, self.full_path(path), self.uri_of(path), self.io)

    def sibling(self, uri: str) -> ObjectStore:
        """A store of the same filesystem (and credentials) rooted at another of its URIs,
        such as a dataset's base path."""
        path = self.fs._strip_protocol(uri)
        if self.is_local:
            path = os.path.abspath(path)
        return ObjectStore(self.fs, path.rstrip("/") or "/", uri, self.io)

    # reads -------------------------------------------------------------------------------
    def open(self, path: str, size: int | None = None) -> FileReader:
        """Open a file for ranged reads."""
        return FileReader(self, path, size)

    def read_all(self, path: str) -> bytes:
        """Read a whole (small) file."""
        try:
            if self.is_local:  # as fsspec's, without its per-call path handling
                with open(self.full_path(path), "rb") as f:
                    data = f.read()
            else:
                full = self.full_path(path)
                data = remote_call(lambda: self.fs.cat_file(full), f"{self.uri_of(path)}: read")
            self.io.read(1, len(data))
            return data
        except (IsADirectoryError, NotADirectoryError):
            raise NotARegularFile(f"{self.uri_of(path)} is not a regular file") from None
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.uri_of(path)} does not exist") from None

    def size(self, path: str) -> int:
        """Size in bytes of a file."""
        try:
            full = self.full_path(path)
            return int(remote_call(lambda: self.fs.size(full), f"{self.uri_of(path)}: size"))
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.uri_of(path)} does not exist") from None

    def exists(self, path: str) -> bool:
        """Whether a file or directory exists."""
        full = self.full_path(path)
        return bool(remote_call(lambda: self.fs.exists(full), f"{self.uri_of(path)}: lookup"))

    def list_dir(self, path: str) -> list[tuple[str, int, float | None]]:
        """(name, size, mtime seconds or None) of the files directly under `path`; [] if absent."""
        full = self.full_path(path)
        if self.is_local:  # every request lists _versions: fsspec's ls stats each entry thrice
            try:
                it = os.scandir(full)
            except (FileNotFoundError, NotADirectoryError):
                return []
            found = []
            with it:
                for e in it:
                    try:
                        if e.is_dir():
                            continue
                        st = e.stat()
                    except OSError:  # removed meanwhile, or a dangling link
                        continue
                    found.append((e.name, st.st_size, st.st_mtime))
            return found
        with contextlib.suppress(Exception):
            self.fs.invalidate_cache(full)  # a cached listing would hide new versions
        try:
            entries = remote_call(
                lambda: self.fs.ls(full, detail=True), f"{self.uri_of(path)}: listing"
            )
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for e in entries:
            if e.get("type") == "directory":
                continue
            name = posixpath.basename(e["name"].rstrip("/"))
            mtime = e.get("mtime") or e.get("LastModified") or e.get("created")
            if hasattr(mtime, "timestamp"):
                mtime = mtime.timestamp()
            out.append((name, int(e.get("size") or 0), mtime))
        return out

    def list_first(self, path: str, count: int) -> list[tuple[str, int, float | None]] | None:
        """The first `count` files directly under `path` in name order, by one small listing
        where the store can ask for that (S3); None where it cannot (then `list_dir`)."""
        if self.is_local or not _is_s3(self.fs):
            return None
        bucket, _, key = self.full_path(path).partition("/")
        prefix = key.rstrip("/") + "/"
        found = remote_call(
            lambda: self.fs.call_s3(
                "list_objects_v2", Bucket=bucket, Prefix=prefix, Delimiter="/", MaxKeys=count
            ),
            f"{self.uri_of(path)}: listing",
        )
        return [
            (c["Key"][len(prefix) :], int(c.get("Size") or 0), c["LastModified"].timestamp())
            for c in found.get("Contents", [])
        ]

    def list_subdirs(self, path: str) -> list[str]:
        """Names of the directories directly under `path`; [] if absent."""
        full = self.full_path(path)
        with contextlib.suppress(Exception):
            self.fs.invalidate_cache(full)
        try:
            entries = remote_call(
                lambda: self.fs.ls(full, detail=True), f"{self.uri_of(path)}: listing"
            )
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(
            posixpath.basename(e["name"].rstrip("/"))
            for e in entries
            if e.get("type") == "directory"
        )

    # writes ------------------------------------------------------------------------------
    def put(self, path: str, data: bytes) -> None:
        """Write a whole file; locally through a temporary file and rename (atomic replace)."""
        full = self.full_path(path)
        if self.is_local:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            tmp = f"{full}.tmp{uuid.uuid4().hex}"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, full)
        else:
            remote_call(lambda: self.fs.pipe_file(full, data), f"{self.uri_of(path)}: write")
        self.io.wrote(1, len(data))

    def open_write(self, path: str) -> BinaryIO:
        """A streaming writer for a new file; the file appears whole only once closed.

        Locally it is written to a temporary name and renamed on close, so a writer killed
        midway leaves no partial file under the final name (only a removable temporary).
        Remotely it is staged in a local temporary file and uploaded on a clean close.
        """
        full = self.full_path(path)
        if self.is_local:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            staged: _StagedFile = _AtomicLocalFile(full)
        else:
            staged = _RemoteUpload(self.fs, full, self.uri_of(path))
        staged.counter = self.io
        return staged

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create a file only if nothing exists at `path`; raises FileExistsError otherwise.

        Atomic on every backend it accepts: ``link(2)`` locally, a conditional PUT
        (``If-None-Match: *``) on S3, a process-wide lock for ``memory://``. Other backends
        raise UnsupportedFeatureError rather than risk two writers both "winning".
        """
        full = self.full_path(path)
        if self.is_local:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            tmp = f"{full}#{uuid.uuid4().hex}"
            with open(tmp, "wb") as f:
                f.write(data)
            try:
                os.link(tmp, full)
            finally:
                os.unlink(tmp)
            self.io.wrote(1, len(data))
            return
        if _is_s3(self.fs):
            self._s3_put_if_absent(path, full, data)
            self.io.wrote(1, len(data))
            return
        if "memory" in _protocols(self.fs):
            with _MEMORY_LOCK:
                if self.fs.exists(full):
                    raise FileExistsError(f"{self.uri_of(path)} already exists")
                self.fs.pipe_file(full, data)
            self.io.wrote(1, len(data))
            return
        raise UnsupportedFeatureError(
            f"{self.uri}: storage backend {self.fs.protocol!r} offers no atomic "
            "create-if-absent, so commits could overwrite each other; refusing to commit"
        )

    def _s3_put_if_absent(self, path: str, full: str, data: bytes) -> None:
        if not _s3_supports_create(self.fs):
            raise UnsupportedFeatureError(
                f"{self.uri}: this s3fs has no conditional create (pipe_file mode='create'); "
                "upgrade s3fs to commit safely"
            )
        try:
            self.fs.pipe_file(full, data, mode="create")
            return
        except FileExistsError:
            pass
        except OSError as e:
            # 409 ConditionalRequestConflict: a concurrent conditional write to the same key
            # is in flight. Nothing of ours was written; report it as a lost race.
            if e.errno != errno.EBUSY:
                raise
        # Lost the race, unless a retried request of ours is what created the object (when
        # that cannot be read either, the commit checks the manifest it finds there).
        try:
            if self.fs.cat_file(full) == data:
                return
        except Exception as e:
            if not is_transient(e) and not isinstance(e, FileNotFoundError):
                raise
        raise FileExistsError(f"{self.uri_of(path)} already exists")

    def delete(self, path: str) -> None:
        """Remove a file; a missing file is not an error."""
        full = self.full_path(path)
        try:
            remote_call(lambda: self.fs.rm_file(full), f"{self.uri_of(path)}: removal")
        except FileNotFoundError:
            pass

    def delete_tree(self, path: str, keep: Callable[[str], bool] = lambda _: False) -> None:
        """Remove every file under directory `path` but those `keep` holds on to (paths
        relative to this store); a missing directory is not an error."""
        full = self.full_path(path)
        try:
            found = remote_call(lambda: self.fs.find(full), f"{self.uri_of(path)}: listing")
        except FileNotFoundError:
            return
        for name in (n[len(self.root.rstrip("/")) + 1 :] for n in sorted(found)):
            if not keep(name):
                self.delete(name)
        for directory, _, _ in sorted(os.walk(full) if self.is_local else (), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(directory)

    def remove_empty_dir(self, path: str) -> None:
        """Remove a directory if it exists and is empty (object stores have none to remove)."""
        if self.is_local:
            with contextlib.suppress(OSError):
                os.rmdir(self.full_path(path))


def discard(sink: Any) -> None:
    """Close a sink `ObjectStore.open_write` gave without publishing what it holds (where
    the backend can; otherwise it is closed and the caller removes the file). Never raises:
    it runs while another error is on its way."""
    abort = getattr(sink, "abort", None)
    with contextlib.suppress(Exception):
        abort() if abort else sink.close()


def open_store(uri: str, storage_options: dict[str, Any] | None = None) -> ObjectStore:
    """Open the store rooted at `uri` (a local path, ``file://``, ``memory://`` or ``s3://``)."""
    fs, root = _split_uri(uri, storage_options)
    return ObjectStore(fs, root, uri)
