"""Reader for legacy Lance data files (file version 0.1, `DataFile` major.minor 0.1 / 0.2).

A legacy file is a run of row groups ("batches"); in each batch every field of the file's
schema wrote one page, addressed through a dense page table of (position, length) int64
pairs indexed by field id and batch. Pages are PLAIN (fixed-width values, bit-packed
booleans, flattened fixed-size lists), VAR_BINARY (value bytes then ``n + 1`` absolute i64
file positions; the page points at the positions) or DICTIONARY (plain keys; the values
are stored once per file and located through the file's embedded schema). Lists store an
offsets page (``n + 1`` entries starting at 0 in each batch) under their own field id,
followed by the child column. Structs have no page. Nothing stores validity, so reads
reproduce what pylance returns: values under nulls are whatever the writer left (zeroes,
``False``, empty lists), and for nullable binary-like fields an empty value reads as null.

Decoding is vectorised: every column decoder is a generator that yields the byte ranges it
needs and receives their contents, so all the columns and batches of one step are fetched
with one coalesced `read_ranges` call per nesting level.
"""

from __future__ import annotations

import struct
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.file.base import (
    DEFAULT_BATCH_SIZE,
    DataFileReader,
    check_read_args,
    checked_take_indices,
    split_ranges,
)
from quiver.format.file.types import is_var_binary
from quiver.format.io.store import FileReader, ObjectStore
from quiver.format.proto import file_pb2, table_pb2
from quiver.format.table.schema import LanceField, LanceSchema

MAGIC = b"LANC"
FOOTER_SIZE = 16
LEGACY_VERSIONS = ((0, 1), (0, 2))

# First read from the end of the file: footer, metadata, embedded schema and usually the
# page table and dictionaries too.
_TAIL_READ = 64 * 1024
# When taking rows, pieces of a page closer than this are fetched as one span.
_TAKE_GAP = 4 * 1024

_Req = list[tuple[int, int]]
# A decoding coroutine: yields the byte ranges it needs, is sent their contents (in the
# same order), and finally returns its result.
_Gen = Generator[_Req, list[bytes], object]


@dataclass(frozen=True)
class _Range:
    """Positions ``start..stop`` of the pages of one batch."""

    batch: int
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class _Pick:
    """Arbitrary positions, each in its own batch's page: row i is `idx[i]` of `batch[i]`."""

    batch: np.ndarray  # int64
    idx: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.idx)


_Sel = _Range | _Pick


def _gather(gens: Sequence[_Gen]) -> Generator[_Req, list[bytes], list[object]]:
    """Run decoding coroutines in lockstep, merging their requests of each round into one."""
    results: list[object] = [None] * len(gens)
    pending: dict[int, _Req] = {}
    for i, g in enumerate(gens):
        try:
            pending[i] = next(g)
        except StopIteration as stop:
            results[i] = stop.value
    while pending:
        flat: _Req = []
        for reqs in pending.values():
            flat.extend(reqs)
        blobs = (yield flat) if flat else []
        nxt: dict[int, _Req] = {}
        at = 0
        for i, reqs in pending.items():
            part = blobs[at : at + len(reqs)]
            at += len(reqs)
            try:
                nxt[i] = gens[i].send(part)
            except StopIteration as stop:
                results[i] = stop.value
        pending = nxt
    return results


def _fixed_info(t: pa.DataType) -> tuple[pa.DataType, int, int] | None:
    """(leaf type, leaf values per row, bits per leaf value) of a PLAIN-encoded type."""
    if pa.types.is_boolean(t):
        return t, 1, 1
    if pa.types.is_fixed_size_list(t):
        inner = _fixed_info(t.value_type)
        if inner is None:
            return None
        leaf, k, bits = inner
        return leaf, k * t.list_size, bits
    if (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_temporal(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return t, 1, t.bit_width
    return None


def _wrap_fsl(values: pa.Array, t: pa.DataType) -> pa.Array:
    """Rebuild (nested) fixed-size lists of type `t` over flattened leaf `values`."""
    if not pa.types.is_fixed_size_list(t):
        return values
    inner = _wrap_fsl(values, t.value_type)
    return pa.FixedSizeListArray.from_arrays(inner, type=t)


def _expand(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Every position of the spans ``starts[i] .. starts[i] + lengths[i]``, in order."""
    total = int(lengths.sum())
    out_starts = np.cumsum(lengths) - lengths
    return np.repeat(starts - out_starts, lengths) + np.arange(total, dtype=np.int64)


class LegacyFileReader(DataFileReader):
    """Reads columns of one legacy (v0.1) Lance data file by field id."""

    def __init__(
        self,
        file: FileReader,
        *,
        path_for_errors: str | None = None,
        field_ids: Sequence[int] | None = None,
    ) -> None:
        """Parse the footer, metadata, embedded schema and page table (usually one tail read).

        `field_ids` (the manifest `DataFile.fields`) fixes the page table's field-id span
        as pylance does; without it the span comes from the file's embedded schema.
        """
        self.file = file
        self.path = path_for_errors or file.path
        self._size = file.size
        if self._size < FOOTER_SIZE:
            raise CorruptFileError(self.path, f"{self._size} bytes is too short for a Lance file")
        tail_start = max(0, self._size - _TAIL_READ)
        try:
            self._tail = file.read(tail_start, self._size - tail_start)
        except EOFError as e:
            raise CorruptFileError(self.path, f"cannot read the footer: {e}") from None
        self._tail_start = tail_start
        meta_pos, major, minor, magic = struct.unpack("<qHH4s", self._tail[-FOOTER_SIZE:])
        if magic != MAGIC:
            raise CorruptFileError(self.path, f"bad magic {magic!r} (expected {MAGIC!r})")
        if (major, minor) not in LEGACY_VERSIONS:
            raise UnsupportedFeatureError(
                f"{self.path}: footer version {major}.{minor} is not a legacy (0.1/0.2) file"
            )
        self.version = (major, minor)
        self._end = self._size - FOOTER_SIZE  # where the data before the footer ends
        try:
            self.metadata = file_pb2.Metadata.FromString(self._message(meta_pos, "metadata"))
        except DecodeError as e:
            raise CorruptFileError(self.path, f"undecodable file metadata: {e}") from None
        self._meta_pos = meta_pos

        offs = np.asarray(self.metadata.batch_offsets, dtype=np.int64)
        if len(offs) == 0:
            offs = np.zeros(1, dtype=np.int64)
        if offs[0] != 0 or np.any(np.diff(offs) < 0):
            raise CorruptFileError(self.path, "batch offsets must start at 0 and never decrease")
        self.batch_offsets = offs
        self.num_batches = len(offs) - 1
        self.num_rows = int(offs[-1])

        self.schema: LanceSchema | None = None
        self._embedded: dict[int, LanceField] = {}
        mpos = self.metadata.manifest_position
        if mpos:
            if mpos >= meta_pos:
                raise CorruptFileError(
                    self.path, f"schema position {mpos} is not before the metadata ({meta_pos})"
                )
            try:
                manifest = table_pb2.Manifest.FromString(self._message(mpos, "embedded schema"))
            except DecodeError as e:
                raise CorruptFileError(self.path, f"undecodable embedded schema: {e}") from None
            self.schema = LanceSchema.from_protos(manifest.fields, where=self.path)
            self._embedded = {f.id: f for f in self.schema.walk()}

        ids = list(field_ids) if field_ids else list(self._embedded)
        ids = [i for i in ids if i >= 0]
        self._min_id = min(ids) if ids else None
        self._max_id = max(ids) if ids else None
        self._pages: np.ndarray | None = None  # (num_fields, num_batches, 2) int64
        self._dicts: dict[int, pa.Array] = {}
        if self._page_table_span()[1] and self._in_tail(*self._page_table_span()):
            self._load_page_table()

    @classmethod
    def open(
        cls, store: ObjectStore, path: str, field_ids: Sequence[int] | None = None
    ) -> LegacyFileReader:
        """Open the legacy file at `path` (relative to `store`); errors name its full URI."""
        return cls(store.open(path), path_for_errors=store.uri_of(path), field_ids=field_ids)

    # -- file structure -------------------------------------------------------------------
    def _in_tail(self, start: int, length: int) -> bool:
        """Whether a byte range lies in the tail read at open."""
        return start >= self._tail_start and start + length <= self._size

    def _bytes(self, start: int, length: int, what: str) -> bytes:
        """Bytes of a structure, from the cached tail when possible."""
        if start < 0 or length < 0 or start + length > self._end:
            raise CorruptFileError(
                self.path, f"{what} at {start}+{length} lies outside the {self._size}-byte file"
            )
        if self._in_tail(start, length):
            at = start - self._tail_start
            return self._tail[at : at + length]
        try:
            return self.file.read(start, length)
        except EOFError as e:
            raise CorruptFileError(self.path, f"cannot read {what}: {e}") from None

    def _message(self, pos: int, what: str) -> bytes:
        """The body of a u32-length-prefixed protobuf message at `pos`."""
        (n,) = struct.unpack("<I", self._bytes(pos, 4, f"{what} length"))
        return self._bytes(pos + 4, n, what)

    def _page_table_span(self) -> tuple[int, int]:
        """(position, byte length) of the page table."""
        if self._min_id is None or self._max_id is None:
            return self.metadata.page_table_position, 0
        n_fields = self._max_id - self._min_id + 1
        return self.metadata.page_table_position, n_fields * self.num_batches * 16

    def _load_page_table(self) -> np.ndarray:
        """The page table as an int64 array indexed [field id - min id, batch, pos/len]."""
        if self._pages is None:
            if self._min_id is None or self._max_id is None:
                raise CorruptFileError(
                    self.path, "no embedded schema and no field ids: cannot size the page table"
                )
            pos, length = self._page_table_span()
            if pos + length > self._meta_pos:
                raise CorruptFileError(
                    self.path, f"page table at {pos}+{length} overlaps the metadata"
                )
            raw = np.frombuffer(self._bytes(pos, length, "page table"), dtype="<i8")
            pages = raw.reshape(self._max_id - self._min_id + 1, self.num_batches, 2)
            if np.any(pages < 0):
                raise CorruptFileError(self.path, "page table holds negative positions/lengths")
            self._pages = pages
            self._tail, self._tail_start = b"", self._size  # everything needed is parsed
        return self._pages

    def _locate(self, field: LanceField, sel: _Sel, where: str, extra: int = 0) -> Any:
        """Page position(s) of `field` for a selection, checking it lies within the page(s).

        Returns an int for a `_Range`, else the page position of each picked row.
        `extra` counts trailing entries a page has beyond one per row (list offsets: 1).
        """
        pages = self._load_page_table()
        assert self._min_id is not None and self._max_id is not None
        if not self._min_id <= field.id <= self._max_id:
            raise CorruptFileError(
                self.path,
                f"column {field.name!r} (field id {field.id}) is not in this file "
                f"(ids {self._min_id}..{self._max_id})",
            )
        col = pages[field.id - self._min_id]
        if isinstance(sel, _Range):
            pos, length = (int(v) for v in col[sel.batch])
            if len(sel):
                self._check(
                    sel.stop + extra <= length,
                    where,
                    f"rows up to {sel.stop} in a page of {length} values",
                )
            return pos
        if len(sel):
            bad = np.flatnonzero(sel.idx + extra >= col[sel.batch, 1])
            self._check(
                len(bad) == 0,
                where,
                f"row {int(sel.idx[bad[0]]) if len(bad) else 0} of batch "
                f"{int(sel.batch[bad[0]]) if len(bad) else 0} lies beyond its page",
            )
        return col[sel.batch, 0]

    # -- public API -----------------------------------------------------------------------
    def read(
        self,
        fields: Sequence[LanceField],
        ranges: Sequence[tuple[int, int]],
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[list[pa.Array]]:
        """Stream `fields` over sorted, disjoint row ranges, one step per `split_ranges` item."""
        check_read_args(self.path, ranges, batch_size, self.num_rows)
        offs = self.batch_offsets
        for start, stop in split_ranges(ranges, batch_size):
            pieces: list[_Sel] = []
            b = int(np.searchsorted(offs, start, side="right")) - 1
            while b < self.num_batches and offs[b] < stop:
                base = int(offs[b])
                lo, hi = max(start, base) - base, min(stop, int(offs[b + 1])) - base
                if hi > lo:
                    pieces.append(_Range(b, lo, hi))
                b += 1
            yield self._decode_pieces(fields, pieces)

    def take(self, fields: Sequence[LanceField], indices: np.ndarray) -> list[pa.Array]:
        """The rows at sorted, unique physical offsets `indices` (uint64), one array per field."""
        idx = checked_take_indices(self.path, indices, self.num_rows)
        if len(idx) == 0:
            return [pa.array([], type=f.arrow_type) for f in fields]
        batch = np.searchsorted(self.batch_offsets, idx, side="right") - 1
        local = idx - self.batch_offsets[batch]
        if batch[0] == batch[-1] and local[-1] - local[0] + 1 == len(idx):
            sel: _Sel = _Range(int(batch[0]), int(local[0]), int(local[-1]) + 1)
        else:
            sel = _Pick(batch, local)
        return self._decode_pieces(fields, [sel])

    def close(self) -> None:
        """Release the file handle."""
        self.file.close()

    # -- orchestration --------------------------------------------------------------------
    def _decode_pieces(
        self, fields: Sequence[LanceField], pieces: Sequence[_Sel]
    ) -> list[pa.Array]:
        """Decode every field over the selections with one read per round, then concatenate."""
        gens = [self._decode(f, sel) for f in fields for sel in pieces]
        results = self._drive(_gather(gens))
        out = []
        k = len(pieces)
        for i in range(len(fields)):
            parts = results[i * k : (i + 1) * k]
            out.append(parts[0] if k == 1 else pa.concat_arrays(parts))
        return out

    def _drive(self, gen: Generator[_Req, list[bytes], list[object]]) -> list[pa.Array]:
        """Run a coroutine to completion, serving each round of requests with one read."""
        try:
            reqs = next(gen)
            while True:
                try:
                    blobs = self.file.read_ranges(reqs)
                except EOFError as e:
                    raise CorruptFileError(self.path, str(e)) from None
                reqs = gen.send(blobs)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    def _check(self, cond: bool, where: str, reason: str) -> None:
        """Raise a CorruptFileError naming the column if `cond` is false."""
        if not cond:
            raise CorruptFileError(self.path, f"{where}: {reason}")

    def _read_span(self, start: int, length: int, where: str) -> _Gen:
        """One contiguous byte range of the data area."""
        if length == 0:
            return b""
        self._check(
            0 <= start and 0 < length and start + length <= self._end,
            where,
            f"bytes {start}+{length} lie outside the {self._size}-byte file",
        )
        (blob,) = yield [(start, length)]
        return blob

    def _fetch(self, starts: np.ndarray, lengths: np.ndarray, where: str) -> _Gen:
        """The byte spans ``starts[i] .. starts[i] + lengths[i]``, concatenated in order.

        Spans closer than `_TAKE_GAP` (after sorting) are fetched as one request.
        """
        keep = lengths > 0
        if not keep.all():
            starts, lengths = starts[keep], lengths[keep]
        n = len(starts)
        if n == 0:
            return b""
        order = None
        if n > 1 and np.any(starts[1:] < starts[:-1]):
            order = np.argsort(starts, kind="stable")
            s, ln = starts[order], lengths[order]
        else:
            s, ln = starts, lengths
        run_end = np.maximum.accumulate(s + ln)
        is_break = np.zeros(n, dtype=bool)
        is_break[1:] = s[1:] - run_end[:-1] > _TAKE_GAP
        firsts = np.concatenate(([0], np.flatnonzero(is_break)))
        lasts = np.concatenate((firsts[1:], [n])) - 1
        c_lo, c_hi = s[firsts], run_end[lasts]
        self._check(
            int(c_lo[0]) >= 0 and int(c_hi[-1]) <= self._end,
            where,
            f"bytes {int(c_lo[0])}..{int(c_hi[-1])} lie outside the {self._size}-byte file",
        )
        c_len = c_hi - c_lo
        blobs = yield list(zip(c_lo.tolist(), c_len.tolist(), strict=True))
        joined = np.frombuffer(blobs[0] if len(blobs) == 1 else b"".join(blobs), dtype=np.uint8)
        cid = np.cumsum(is_break)
        src = (np.cumsum(c_len) - c_len)[cid] + (s - c_lo[cid])
        if order is not None:
            unsorted = np.empty_like(src)
            unsorted[order] = src
            src = unsorted
        return joined[_expand(src, lengths)].tobytes()

    # -- decoders -------------------------------------------------------------------------
    def _decode(self, field: LanceField, sel: _Sel) -> _Gen:
        """Decode the selected rows of `field` as an array of exactly `field.arrow_type`."""
        t = field.arrow_type
        where = f"column {field.name!r} (field id {field.id})"
        if isinstance(sel, _Range):
            where += f", batch {sel.batch}"
        n = len(sel)
        if pa.types.is_struct(t):
            kids = yield from _gather([self._decode(c, sel) for c in field.children])
            return pa.Array.from_buffers(t, n, [None], children=kids)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return (yield from self._decode_list(field, t, sel, where))
        if pa.types.is_map(t):
            raise UnsupportedFeatureError(
                f"{self.path}: {where}: maps cannot be stored in v1 files"
            )
        pos = self._locate(field, sel, where)
        if pa.types.is_null(t):
            return pa.nulls(n)
        if pa.types.is_dictionary(t):
            values = self._dicts.get(field.id)
            if values is None:
                values = yield from self._decode_dictionary(field, t, where)
                self._dicts[field.id] = values
            keys = yield from self._decode_fixed(t.index_type, pos, sel, where)
            try:
                return pa.DictionaryArray.from_arrays(keys, values)
            except (pa.ArrowInvalid, pa.ArrowIndexError) as e:
                raise CorruptFileError(self.path, f"{where}: bad dictionary keys: {e}") from None
        if is_var_binary(t):
            return (yield from self._decode_varbin(t, pos, sel, field.nullable, where))
        if _fixed_info(t) is None:
            raise UnsupportedFeatureError(f"{self.path}: {where}: type {t} has no v1 encoding")
        return (yield from self._decode_fixed(t, pos, sel, where))

    def _decode_fixed(self, t: pa.DataType, pos: Any, sel: _Sel, where: str) -> _Gen:
        """A PLAIN page: fixed-width values, bit-packed booleans, flattened fixed-size lists."""
        info = _fixed_info(t)
        assert info is not None
        leaf, k, bits = info
        n = len(sel)
        if bits != 1:
            width = k * bits // 8
            if isinstance(sel, _Range):
                blob = yield from self._read_span(pos + sel.start * width, n * width, where)
            else:
                lengths = np.full(n, width, dtype=np.int64)
                blob = yield from self._fetch(pos + sel.idx * width, lengths, where)
            values = pa.Array.from_buffers(leaf, n * k, [None, pa.py_buffer(blob)])
            return _wrap_fsl(values, t)
        # bit-packed: row r holds bits r*k .. r*k+k-1 of its page
        if isinstance(sel, _Range):
            b0, b1 = sel.start * k, sel.stop * k
            byte0, byte1 = b0 // 8, -(-b1 // 8)
            buf = yield from self._read_span(pos + byte0, byte1 - byte0, where)
            values = pa.Array.from_buffers(leaf, n * k, [None, pa.py_buffer(buf)], offset=b0 % 8)
            return _wrap_fsl(values, t)
        bit = (sel.idx[:, None] * k + np.arange(k, dtype=np.int64)).ravel()
        addr = np.repeat(pos, k) + (bit >> 3)
        uniq, inverse = np.unique(addr, return_inverse=True)
        raw = yield from self._fetch(uniq, np.ones(len(uniq), dtype=np.int64), where)
        unpacked = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")
        picked = unpacked[inverse.ravel() * 8 + (bit & 7)]
        buf = np.packbits(picked, bitorder="little").tobytes()
        values = pa.Array.from_buffers(leaf, n * k, [None, pa.py_buffer(buf)])
        return _wrap_fsl(values, t)

    def _read_bounds(
        self, pos: Any, sel: _Sel, width: int, where: str
    ) -> Generator[_Req, list[bytes], tuple[np.ndarray, np.ndarray]]:
        """(start, end) of each selected row from an ``n + 1``-entry offsets/positions page."""
        dtype = "<i4" if width == 4 else "<i8"
        n = len(sel)
        if isinstance(sel, _Range):
            raw = yield from self._read_span(pos + sel.start * width, (n + 1) * width, where)
            vals = np.frombuffer(raw, dtype=dtype).astype(np.int64)
            starts, ends = vals[:-1], vals[1:]
        else:
            lengths = np.full(n, 2 * width, dtype=np.int64)
            raw = yield from self._fetch(pos + sel.idx * width, lengths, where)
            vals = np.frombuffer(raw, dtype=dtype).astype(np.int64).reshape(n, 2)
            starts, ends = vals[:, 0], vals[:, 1]
        self._check(
            n == 0 or (bool(np.all(ends >= starts)) and int(starts.min()) >= 0),
            where,
            "offsets decrease or are negative",
        )
        return starts, ends

    def _decode_varbin(
        self, t: pa.DataType, pos: Any, sel: _Sel, nullable: bool, where: str
    ) -> _Gen:
        """A VAR_BINARY page: value bytes, then ``n + 1`` absolute i64 positions at `pos`."""
        n = len(sel)
        starts, ends = yield from self._read_bounds(pos, sel, 8, where)
        lengths = ends - starts
        if isinstance(sel, _Range) and n:
            data = yield from self._read_span(int(starts[0]), int(ends[-1] - starts[0]), where)
        else:
            data = yield from self._fetch(starts, lengths, where)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if not (pa.types.is_large_string(t) or pa.types.is_large_binary(t)):
            self._check(offsets[-1] < 2**31, where, "more than 2 GiB of values in one read")
            offsets = offsets.astype(np.int32)
        validity, nulls = None, 0
        if nullable:  # pylance reads an empty value of a nullable field as null
            valid = lengths != 0
            nulls = n - int(np.count_nonzero(valid))
            if nulls:
                validity = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
        return pa.Array.from_buffers(
            t, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
        )

    def _decode_list(self, field: LanceField, t: pa.DataType, sel: _Sel, where: str) -> _Gen:
        """A list: an offsets page under the list's id (``n + 1`` entries), then the child."""
        pos = self._locate(field, sel, where, extra=1)
        large = pa.types.is_large_list(t)
        starts, ends = yield from self._read_bounds(pos, sel, 8 if large else 4, where)
        lengths = ends - starts
        n = len(sel)
        child_sel: _Sel
        if isinstance(sel, _Range):
            child_sel = _Range(sel.batch, int(starts[0]), int(ends[-1])) if n else sel
        else:
            child_sel = _Pick(np.repeat(sel.batch, lengths), _expand(starts, lengths))
        child = yield from self._decode(field.children[0], child_sel)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if not large:
            self._check(offsets[-1] < 2**31, where, "more than 2**31 list items in one read")
            offsets = offsets.astype(np.int32)
        return pa.Array.from_buffers(t, n, [None, pa.py_buffer(offsets)], children=[child])

    def _decode_dictionary(self, field: LanceField, t: pa.DataType, where: str) -> _Gen:
        """The dictionary values of `field`, stored once in this file."""
        own = self._embedded.get(field.id)
        info = own.dictionary if own is not None and own.dictionary else field.dictionary
        if info is None:
            raise CorruptFileError(self.path, f"{where}: dictionary values are not located")
        offset, length = info
        self._check(offset >= 0 and length >= 0, where, "negative dictionary position")
        vt = t.value_type
        rows = _Range(-1, 0, length)
        if pa.types.is_integer(vt):
            return (yield from self._decode_fixed(vt, offset, rows, where + " dictionary"))
        if is_var_binary(vt):
            return (yield from self._decode_varbin(vt, offset, rows, True, where + " dictionary"))
        raise UnsupportedFeatureError(f"{self.path}: {where}: dictionary values of type {vt}")
