"""The Lance v2.x data-file container, shared by file versions 2.0, 2.1 and 2.2.

Layout: page buffers, global buffers (buffer 0 = `FileDescriptor`), the column metadata
blobs, a column-metadata offset table (CMO), a global-buffer offset table (GBO) and a
40-byte footer ``u64 A | u64 CMO | u64 GBO | u32 GN | u32 CN | u16 major | u16 minor |
"LANC"``. Everything here is about locating bytes; decoding pages is someone else's job.
Column metadata is parsed lazily, per requested column.
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError, Message

from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.io.store import FileReader, Spans
from quiver.format.proto import encodings_v2_0_pb2, file2_pb2, file_pb2

MAGIC = b"LANC"
FOOTER_SIZE = 40
# One read at the end of the file normally covers the footer, both offset tables and the
# metadata of every column of a modest file.
TAIL_READ_BYTES = 64 * 1024

ARRAY_ENCODING_URL = "lance.encodings.ArrayEncoding"  # 2.0 pages
PAGE_LAYOUT_URL = "lance.encodings21.PageLayout"  # 2.1+ pages
COLUMN_ENCODING_URL = "lance.encodings.ColumnEncoding"

M = TypeVar("M", bound=Message)

_FOOTER = struct.Struct("<QQQIIHH4s")
_VERSIONS = {(0, 3): "2.0", (2, 0): "2.0", (2, 1): "2.1", (2, 2): "2.2", (2, 3): "2.3"}
# What writers put in the footer for each file version (pylance writes 0.3 for 2.0).
FOOTER_VERSIONS = {"2.0": (0, 3), "2.1": (2, 1), "2.2": (2, 2), "2.3": (2, 3)}
# Page and global buffers start on 64-byte boundaries; pylance pads with 'H' (0x48).
ALIGNMENT = 64
PAD_BYTE = b"H"


def any_bytes(type_name: str, value: bytes) -> bytes:
    """A serialized `google.protobuf.Any` of message `type_name` (URL "/type_name")."""
    return any_pb2.Any(type_url=f"/{type_name}", value=value).SerializeToString()


def type_name(type_url: str) -> str:
    """The message name of a `google.protobuf.Any` type URL (text after the last '/')."""
    return type_url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Footer:
    """The fixed 40-byte footer of a v2 data file."""

    column_meta_start: int
    cmo_table_pos: int
    gbo_table_pos: int
    num_global_buffers: int
    num_columns: int
    major: int
    minor: int

    @property
    def version(self) -> str:
        """The file version string ("2.0", "2.1", ...)."""
        return _VERSIONS[(self.major, self.minor)]

    def pack(self) -> bytes:
        """The 40 footer bytes, ending in the magic."""
        return _FOOTER.pack(
            self.column_meta_start,
            self.cmo_table_pos,
            self.gbo_table_pos,
            self.num_global_buffers,
            self.num_columns,
            self.major,
            self.minor,
            MAGIC,
        )


@dataclass(frozen=True)
class EncodingRef:
    """Where an `Encoding` lives: inline (`value`) or deferred to a file range."""

    type_url: str
    value: bytes | None
    deferred: tuple[int, int] | None = None


@dataclass
class Page:
    """One page of a column: its buffers, row count and (still serialized) encoding."""

    index: int
    buffers: list[tuple[int, int]]
    length: int
    priority: int
    encoding: EncodingRef


@dataclass
class ColumnInfo:
    """The parsed metadata of one column (its pages in row order)."""

    index: int
    pages: list[Page]
    buffers: list[tuple[int, int]]
    encoding: EncodingRef | None
    page_starts: np.ndarray  # len(pages) + 1 cumulative row positions

    @property
    def num_rows(self) -> int:
        """Rows (or items, for nested columns) over all pages."""
        return int(self.page_starts[-1])

    @property
    def stored_bytes(self) -> int:
        """Bytes of all its pages' buffers in the file."""
        return sum(n for page in self.pages for _, n in page.buffers)


class _FileMeta:
    """What a data file's footer, offset tables and column metadata parse to: the same for
    every reader of the file, so it is parsed once and shared (`_MetaCache`)."""

    def __init__(
        self, key: tuple, footer: Footer, column_table: np.ndarray, global_buffers: list
    ) -> None:
        self.key = key
        self.footer = footer
        self.column_table = column_table
        self.global_buffers: list[tuple[int, int]] = global_buffers
        self.descriptor: file_pb2.FileDescriptor | None = None
        self.columns: dict[int, ColumnInfo] = {}
        self.deferred: dict[tuple[int, int], EncodingRef] = {}
        self.messages: dict[tuple[str, bytes], Message] = {}
        self.weight = 1  # pages and columns parsed, roughly what the parsed objects hold


class _MetaCache:
    """Parsed metadata of the data files read lately, least recently used dropped first.

    Lance data files are written once under unique names, so a file's parsed metadata holds
    as long as the file is the same: entries are keyed by its address, size and (for local
    files) inode and modification time, so a file replaced in place is parsed anew. Bounded
    by the pages and columns parsed (a few hundred bytes of Python objects each)."""

    def __init__(self, max_weight: int) -> None:
        self.max_weight = max_weight
        self._entries: OrderedDict[tuple, _FileMeta] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: tuple) -> _FileMeta | None:
        with self._lock:
            meta = self._entries.get(key)
            if meta is not None:
                self._entries.move_to_end(key)
            return meta

    def put(self, key: tuple, meta: _FileMeta) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._weight -= old.weight
            self._entries[key] = meta
            self._weight += meta.weight
            self._evict()

    def charge(self, meta: _FileMeta, weight: int) -> None:
        """`meta` parsed `weight` more (pages and columns; negative when it dropped some):
        count it, evict if over."""
        with self._lock:
            meta.weight += weight
            if self._entries.get(meta.key) is meta:
                self._weight += weight
                self._evict()

    def _evict(self) -> None:
        while self._weight > self.max_weight and len(self._entries) > 1:
            _, gone = self._entries.popitem(last=False)
            self._weight -= gone.weight


# About 40,000 pages and columns of parsed metadata, ~10-20 MB of Python objects.
METADATA_CACHE = _MetaCache(40_000)


class V2Container:
    """Random access to the structure of one v2 data file."""

    def __init__(self, file: FileReader, path_for_errors: str) -> None:
        self.file = file
        self.path = path_for_errors
        self.size = int(file.size)
        self._tail_start = 0
        self._tail = b""
        key = (file.store.uri_of(file.path), self.size, file.identity)
        meta = METADATA_CACHE.get(key)
        if meta is not None and file.identity is not None and self.size >= FOOTER_SIZE:
            # local files are cheap to check: a file rewritten within the clock's tick (same
            # size and time) still has other footer offsets
            if bytes(file.read(self.size - FOOTER_SIZE, FOOTER_SIZE)) != meta.footer.pack():
                meta = None
        if meta is None:
            footer = self._read_footer()
            column_table = self._read_table(
                footer.cmo_table_pos, footer.num_columns, "column metadata offset table"
            )
            global_buffers = [
                (int(p), int(s))
                for p, s in self._read_table(
                    footer.gbo_table_pos, footer.num_global_buffers, "global buffer table"
                )
            ]
            meta = _FileMeta(key, footer, column_table, global_buffers)
            METADATA_CACHE.put(key, meta)
        self._meta = meta
        self.footer = meta.footer
        self._column_table = meta.column_table
        self.global_buffers = meta.global_buffers
        self._columns = meta.columns
        self._deferred = meta.deferred
        self._messages = meta.messages

    # -- errors and raw reads -----------------------------------------------------------
    def corrupt(self, reason: str) -> CorruptFileError:
        """A CorruptFileError about this file."""
        return CorruptFileError(self.path, reason)

    def check_range(self, pos: int, size: int, what: str) -> None:
        """Raise CorruptFileError unless [pos, pos+size) lies before the footer."""
        if pos < 0 or size < 0 or pos + size > self.size - FOOTER_SIZE:
            raise self.corrupt(
                f"{what} at {pos}+{size} lies outside the data region of {self.size} bytes"
            )

    def read_ranges(self, ranges: Sequence) -> list:
        """Read (pos, size) ranges (already bounds-checked) with coalescing, empty ones free;
        a `Spans` item is answered with its spans' bytes back to back (a uint8 array)."""
        out: list = [b""] * len(ranges)
        wanted = []
        for i, r in enumerate(ranges):
            if isinstance(r, Spans):
                try:
                    out[i] = self.file.read_spans(r.starts, r.stops)
                except EOFError as e:
                    raise self.corrupt(f"truncated: {e}") from None
            elif r[1] > 0:
                wanted.append(i)
        tail_end = self._tail_start + len(self._tail)
        missing = []
        for i in wanted:
            pos, n = ranges[i]
            if pos >= self._tail_start and pos + n <= tail_end:
                out[i] = self._tail[pos - self._tail_start : pos - self._tail_start + n]
            else:
                missing.append(i)
        if not missing:
            return out
        try:  # the file coalesces neighbours and hands back views of its reads
            blobs = self.file.read_ranges([ranges[i] for i in missing])
        except EOFError as e:
            raise self.corrupt(f"truncated: {e}") from None
        for i, blob in zip(missing, blobs, strict=True):
            out[i] = blob
        return out

    # -- footer and tables --------------------------------------------------------------
    def _read_footer(self) -> Footer:
        if self.size < FOOTER_SIZE:
            raise self.corrupt(f"{self.size} bytes is too small for a Lance v2 footer")
        try:
            self._tail = self.file.read_tail(TAIL_READ_BYTES)
        except EOFError as e:
            raise self.corrupt(f"truncated: {e}") from None
        self._tail_start = self.size - len(self._tail)
        a, cmo, gbo, gn, cn, major, minor, magic = _FOOTER.unpack(self._tail[-FOOTER_SIZE:])
        if magic != MAGIC:
            raise self.corrupt(f"bad magic {magic!r} (expected {MAGIC!r}); not a Lance file")
        if (major, minor) in ((0, 1), (0, 2)):
            raise self.corrupt(f"footer says legacy file version {major}.{minor}, not v2")
        if (major, minor) not in _VERSIONS:
            raise UnsupportedFeatureError(
                f"{self.path}: unsupported Lance data file version {major}.{minor}"
            )
        data_end = self.size - FOOTER_SIZE
        if not a <= cmo <= data_end or not gbo <= data_end:
            raise self.corrupt(
                f"footer offsets (metadata {a}, column table {cmo}, buffer table {gbo}) "
                f"lie outside the file of {self.size} bytes"
            )
        return Footer(a, cmo, gbo, gn, cn, major, minor)

    def _read_table(self, pos: int, count: int, what: str) -> np.ndarray:
        """A (count, 2) array of u64 (position, size) pairs at `pos`."""
        self.check_range(pos, count * 16, what)
        (raw,) = self.read_ranges([(pos, count * 16)])
        table = np.frombuffer(raw, dtype="<u8").reshape(count, 2)
        if count and np.any(table[:, 0] + table[:, 1] > self.size - FOOTER_SIZE):
            bad = int(np.flatnonzero(table[:, 0] + table[:, 1] > self.size - FOOTER_SIZE)[0])
            raise self.corrupt(
                f"{what} entry {bad} ({int(table[bad, 0])}+{int(table[bad, 1])}) "
                f"points past the end of the data"
            )
        return table

    @property
    def version(self) -> str:
        """The file version string ("2.0", "2.1", "2.2" or "2.3")."""
        return self.footer.version

    @property
    def num_columns(self) -> int:
        """How many physical columns the file has."""
        return self.footer.num_columns

    @property
    def column_table(self) -> list[tuple[int, int]]:
        """(position, size) of every column's metadata, in column order."""
        return [(int(p), int(s)) for p, s in self._column_table]

    # -- global buffers -----------------------------------------------------------------
    @property
    def descriptor(self) -> file_pb2.FileDescriptor:
        """Global buffer 0: the file's schema and row count."""
        if self._meta.descriptor is not None:
            return self._meta.descriptor
        if not self.global_buffers:
            raise self.corrupt("no global buffers (the FileDescriptor is missing)")
        (raw,) = self.read_ranges([self.global_buffers[0]])
        try:
            self._meta.descriptor = file_pb2.FileDescriptor.FromString(bytes(raw))
        except DecodeError as e:
            raise self.corrupt(f"bad FileDescriptor: {e}") from None
        return self._meta.descriptor

    @property
    def num_rows(self) -> int:
        """Rows in the file, from the FileDescriptor."""
        return int(self.descriptor.length)

    # -- columns ------------------------------------------------------------------------
    def columns(self, indices: Sequence[int]) -> list[ColumnInfo]:
        """The metadata of these columns, fetching the missing ones in one batched read."""
        todo = sorted({i for i in indices if i not in self._columns})
        for i in todo:
            if not 0 <= i < self.num_columns:
                raise self.corrupt(f"column {i} does not exist (file has {self.num_columns})")
        if todo:
            ranges = [(int(self._column_table[i, 0]), int(self._column_table[i, 1])) for i in todo]
            parsed = {
                i: self._parse_column(i, raw)
                for i, raw in zip(todo, self.read_ranges(ranges), strict=True)
            }
            self._columns.update(parsed)
            METADATA_CACHE.charge(self._meta, sum(1 + len(c.pages) for c in parsed.values()))
        return [self._columns[i] for i in indices]

    def column(self, index: int) -> ColumnInfo:
        """The metadata of one column."""
        return self.columns([index])[0]

    def _encoding(self, enc: file2_pb2.Encoding, what: str) -> EncodingRef | None:
        kind = enc.WhichOneof("location")
        if kind is None or kind == "none":
            return None
        if kind == "indirect":
            pos, size = int(enc.indirect.buffer_location), int(enc.indirect.buffer_length)
            self.check_range(pos, size, f"{what} deferred encoding")
            return EncodingRef("", None, (pos, size))
        try:
            msg = any_pb2.Any.FromString(enc.direct.encoding)
        except DecodeError as e:
            raise self.corrupt(f"{what}: bad encoding: {e}") from None
        return EncodingRef(msg.type_url, msg.value)

    def resolve(self, ref: EncodingRef, what: str) -> EncodingRef:
        """An inline copy of a deferred encoding (reads it from the file)."""
        if ref.deferred is None:
            return ref
        hit = self._deferred.get(ref.deferred)
        if hit is not None:
            return hit
        (raw,) = self.read_ranges([ref.deferred])
        try:
            msg = any_pb2.Any.FromString(bytes(raw))
        except DecodeError as e:
            raise self.corrupt(f"{what}: bad deferred encoding: {e}") from None
        out = EncodingRef(msg.type_url, msg.value)
        self._remember(self._deferred, ref.deferred, out)
        return out

    def page_message(self, page: Page, message: type[M], where: str, reader: str) -> M:
        """A page's encoding parsed as `message` (ArrayEncoding for 2.0 pages, PageLayout for
        2.1+), cached by its bytes (pages of a column usually share one); a page encoded as
        anything else is UnsupportedFeatureError naming `reader`, the decoder asking."""
        ref = self.resolve(page.encoding, where)
        if type_name(ref.type_url) != message.DESCRIPTOR.full_name:
            raise UnsupportedFeatureError(
                f"{self.path}: {where} uses {ref.type_url!r}, which the {reader} cannot read"
            )
        raw = ref.value or b""
        key = (message.DESCRIPTOR.full_name, raw)
        parsed = self._messages.get(key)
        if parsed is None:
            try:
                parsed = message.FromString(raw)
            except DecodeError as e:
                raise self.corrupt(f"{where}: bad {message.DESCRIPTOR.name}: {e}") from None
            self._remember(self._messages, key, parsed)
        return parsed  # type: ignore[return-value]

    def _remember(self, parsed: dict, key: object, value: object) -> None:
        """Keep one more parsed message in the file's shared metadata, starting that table
        afresh past 4096 entries; the cache counts what the tables hold."""
        if len(parsed) > 4096:
            METADATA_CACHE.charge(self._meta, -len(parsed))
            parsed.clear()
        parsed[key] = value
        METADATA_CACHE.charge(self._meta, 1)

    def _parse_column(self, index: int, raw: bytes) -> ColumnInfo:
        what = f"column {index}"
        try:
            cm = file2_pb2.ColumnMetadata.FromString(bytes(raw))
        except DecodeError as e:
            raise self.corrupt(f"{what}: bad ColumnMetadata: {e}") from None
        if len(cm.buffer_offsets) != len(cm.buffer_sizes):
            raise self.corrupt(f"{what}: buffer offsets and sizes differ in length")
        buffers = [
            (int(p), int(s)) for p, s in zip(cm.buffer_offsets, cm.buffer_sizes, strict=True)
        ]
        for b, (p, s) in enumerate(buffers):
            self.check_range(p, s, f"{what} buffer {b}")
        pages = []
        for k, pg in enumerate(cm.pages):
            where = f"{what} page {k}"
            if len(pg.buffer_offsets) != len(pg.buffer_sizes):
                raise self.corrupt(f"{where}: buffer offsets and sizes differ in length")
            bufs = [
                (int(p), int(s)) for p, s in zip(pg.buffer_offsets, pg.buffer_sizes, strict=True)
            ]
            for b, (p, s) in enumerate(bufs):
                self.check_range(p, s, f"{where} buffer {b}")
            enc = self._encoding(pg.encoding, where)
            if enc is None:
                raise self.corrupt(f"{where} has no encoding")
            pages.append(Page(k, bufs, int(pg.length), int(pg.priority), enc))
        starts = np.zeros(len(pages) + 1, dtype=np.int64)
        if pages:
            lengths = np.array([p.length for p in pages], dtype=np.uint64)
            if np.any(lengths >= 1 << 62):
                raise self.corrupt(f"{what}: absurd page length")
            np.cumsum(lengths.astype(np.int64), out=starts[1:])
        return ColumnInfo(
            index, pages, buffers, self._encoding(cm.encoding, f"{what} encoding"), starts
        )

    def column_encoding(self, info: ColumnInfo) -> encodings_v2_0_pb2.ColumnEncoding | None:
        """The column-level `ColumnEncoding`, or None when absent or of another type."""
        if info.encoding is None:
            return None
        ref = self.resolve(info.encoding, f"column {info.index} encoding")
        if type_name(ref.type_url) != COLUMN_ENCODING_URL:
            return None
        try:
            return encodings_v2_0_pb2.ColumnEncoding.FromString(ref.value or b"")
        except DecodeError as e:
            raise self.corrupt(f"column {info.index}: bad ColumnEncoding: {e}") from None
