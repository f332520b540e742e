"""Encoders for Lance 2.0 pages: Arrow arrays -> `lance.encodings.ArrayEncoding` + buffers.

In a 2.0 file every field of the pre-order schema walk owns one column: a struct has a
header column (`SimpleStruct` pages with no buffers), a list has an offsets column
(`List` pages) followed by its item columns, a packed struct is one column and everything
else is one value column. Columns are paged independently.

A `FieldEncoder` per field receives the field's arrays batch by batch, keeps them (as
zero-copy slices, compacted when they pin much larger buffers) until about `page_bytes`
are buffered, then encodes one page and hands it to the writer's `emit` callback, which
writes the buffers out at once. So memory stays at about one page per column.

What is written, as pylance 14 does for 2.0:

* fixed width (ints, floats, temporal, decimal, fixed_size_binary, bool at 1 bit LSB
  first): ``Nullable{NoNull{Flat}}``, ``Nullable{SomeNull{validity Flat 1, values Flat}}``
  or ``Nullable{AllNull}`` (no buffers);
* fixed_size_list: the same ``Nullable`` wrapper around ``FixedSizeList{dimension, items}``
  where the items are encoded recursively;
* string / binary (and large_): ``Binary`` with u64 end offsets, nulls stored as
  ``end + null_adjustment`` (total bytes + 1); low-cardinality ``string`` pages (>= 100
  rows, < 100 distinct values) become ``Dictionary`` with u8 indices, 0 = null;
* dictionary-typed columns: ``Dictionary`` with indices of the index width and the
  (unified) dictionary as items, null rows pointing at a null item;
* lists: ``List`` offsets (per-page end offsets, ``null_offset_adjustment = num_items +
  1``) as ``Nullable{NoNull{Flat 64}}``; null lists hold no items;
* null type: ``Nullable{AllNull}``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.errors import UnsupportedFeatureError
from quiver.format.file.types import fixed_bits, is_var_binary
from quiver.format.proto import encodings_v2_0_pb2 as pb
from quiver.format.table.schema import LanceField

DEFAULT_PAGE_BYTES = 8 * 1024 * 1024  # buffered per column before a page is written
MAX_PAGE_BYTES = 32 * 1024 * 1024  # no page grows past this (unless one value is bigger)
# Automatic string dictionaries (pylance: Utf8 pages of >= 100 rows, < 100 distinct values).
DICT_MIN_ROWS = 100
DICT_MAX_ITEMS = 100
_DICT_SAMPLE = 4096
# A retained slice whose underlying buffers are this much larger than itself is copied,
# so a small tail does not pin a whole input batch (or IPC body) in memory.
_PIN_SLACK = 64 * 1024

Buffer = memoryview
# (column, rows in the page, page encoding, page buffers in encoding order)
Emit = Callable[[int, int, pb.ArrayEncoding, list[Buffer]], None]


@dataclass(frozen=True)
class EncoderOptions:
    """Page sizing and encoding choices shared by all encoders of a file."""

    page_bytes: int = DEFAULT_PAGE_BYTES
    max_page_bytes: int = MAX_PAGE_BYTES
    string_dictionaries: bool = True


# -- small helpers --------------------------------------------------------------------------
def storage_type(t: pa.DataType) -> pa.DataType:
    """The storage type of an extension type (any other type unchanged)."""
    return t.storage_type if isinstance(t, pa.ExtensionType) else t


def storage(arr: pa.Array) -> pa.Array:
    """The storage array of an extension array (any other array unchanged)."""
    return arr.storage if isinstance(arr, pa.ExtensionArray) else arr


def _normalised(arr: pa.Array) -> pa.Array:
    """`arr` with offset 0 (copied only when it is a slice)."""
    return pa.concat_arrays([arr]) if arr.offset else arr


def _view(buf: object) -> Buffer:
    """A flat byte view of any buffer-protocol object."""
    mv = memoryview(buf)  # type: ignore[arg-type]
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


def _bits(buf: pa.Buffer, n: int) -> Buffer:
    """The first `n` bits of an offset-0 bitmap, trailing bits of the last byte cleared."""
    nbytes = (n + 7) // 8
    mv = _view(buf)[:nbytes]
    if n % 8 == 0 or mv[-1] >> (n % 8) == 0:
        return mv
    out = np.frombuffer(mv, dtype=np.uint8).copy()
    out[-1] &= (1 << (n % 8)) - 1
    return _view(out)


def valid_mask(arr: pa.Array) -> np.ndarray:
    """A numpy bool array, True where `arr` (any offset) is valid."""
    n = len(arr)
    if arr.null_count == 0:
        return np.ones(n, dtype=bool)
    if pa.types.is_null(arr.type) or arr.null_count == n:
        return np.zeros(n, dtype=bool)
    bitmap = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
    bits = np.unpackbits(bitmap, count=arr.offset + n, bitorder="little")
    return bits[arr.offset :].astype(bool)


def _nbytes(arr: pa.Array) -> int:
    """Bytes an array's rows occupy (slice-aware; dictionaries counted separately)."""
    if pa.types.is_dictionary(arr.type):
        return arr.indices.nbytes
    return arr.nbytes


def _compact(arr: pa.Array) -> pa.Array:
    """`arr`, copied if it is a small slice of much larger buffers."""
    if pa.types.is_dictionary(arr.type):  # the dictionary is shared: compact the indices
        idx = arr.indices
        if idx.get_total_buffer_size() > 2 * idx.nbytes + _PIN_SLACK:
            return pa.DictionaryArray.from_arrays(pa.concat_arrays([idx]), arr.dictionary)
        return arr
    if arr.get_total_buffer_size() > 2 * arr.nbytes + _PIN_SLACK:
        return pa.concat_arrays([arr])
    return arr


def _same_array(a: pa.Array, b: pa.Array) -> bool:
    """Cheap identity test: same length, offset and buffers (no value comparison)."""
    if a is b:
        return True
    if len(a) != len(b) or a.offset != b.offset or a.type != b.type:
        return False
    ab, bb = a.buffers(), b.buffers()
    return len(ab) == len(bb) and all(
        (x is None and y is None) or (x is not None and y is not None and x.address == y.address)
        for x, y in zip(ab, bb, strict=True)
    )


# -- encoding trees -----------------------------------------------------------------------
class _Buffers:
    """The buffers of one page, numbered in the order the encoding tree consumes them."""

    def __init__(self) -> None:
        self.items: list[Buffer] = []

    def add(self, data: object) -> int:
        """Append a buffer; returns its index."""
        self.items.append(_view(data))
        return len(self.items) - 1


def _flat(bits: int, index: int) -> pb.ArrayEncoding:
    enc = pb.ArrayEncoding()
    enc.flat.bits_per_value = bits
    enc.flat.buffer.SetInParent()
    enc.flat.buffer.buffer_index = index
    return enc


def _no_nulls(values: pb.ArrayEncoding) -> pb.ArrayEncoding:
    enc = pb.ArrayEncoding()
    enc.nullable.no_nulls.values.CopyFrom(values)
    return enc


def _all_nulls() -> pb.ArrayEncoding:
    enc = pb.ArrayEncoding()
    enc.nullable.all_nulls.SetInParent()
    return enc


def _u64_flat(values: np.ndarray, bufs: _Buffers) -> pb.ArrayEncoding:
    """u64 values as ``Nullable{NoNull{Flat 64}}`` (offsets and indices)."""
    return _no_nulls(_flat(64, bufs.add(np.ascontiguousarray(values, dtype="<u8"))))


def _plain(arr: pa.Array, bufs: _Buffers, opts: EncoderOptions) -> pb.ArrayEncoding:
    """Values of a fixed-width or fixed_size_list offset-0 array, without a validity layer."""
    t = arr.type
    n = len(arr)
    if pa.types.is_fixed_size_list(t):
        dim = t.list_size
        items = _normalised(arr.values.slice(arr.offset * dim, n * dim))
        enc = pb.ArrayEncoding()
        enc.fixed_size_list.dimension = dim
        enc.fixed_size_list.items.CopyFrom(encode_values(items, bufs, opts, dictionaries=False))
        return enc
    bits = fixed_bits(t)
    assert bits is not None
    data = arr.buffers()[1]
    if bits == 1:
        return _flat(1, bufs.add(_bits(data, n)))
    return _flat(bits, bufs.add(_view(data)[: n * bits // 8]))


def _binary(arr: pa.Array, bufs: _Buffers) -> pb.ArrayEncoding:
    """`Binary`: u64 end offsets (null = end + total bytes + 1) and the value bytes."""
    n = len(arr)
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    _, raw_offsets, raw_data = arr.buffers()[:3]
    offs = np.frombuffer(raw_offsets, dtype="<i8" if large else "<i4", count=arr.offset + n + 1)
    offs = offs[arr.offset :]
    base, end = int(offs[0]), int(offs[-1])
    ends = offs[1:].astype(np.uint64)
    if base:
        ends -= np.uint64(base)
    enc = pb.ArrayEncoding()
    if n:  # pylance leaves the adjustment unset on empty pages
        adj = end - base + 1
        enc.binary.null_adjustment = adj
        if arr.null_count:
            ends[~valid_mask(arr)] += np.uint64(adj)
    enc.binary.indices.CopyFrom(_u64_flat(ends, bufs))
    data = _view(raw_data)[base:end] if raw_data is not None else b""
    enc.binary.bytes.CopyFrom(_flat(8, bufs.add(data)))
    return enc


def _string_dictionary(arr: pa.Array, bufs: _Buffers) -> pb.ArrayEncoding | None:
    """A low-cardinality string page as `Dictionary` (u8 indices, 0 = null), else None."""
    n = len(arr)
    if n < DICT_MIN_ROWS or arr.null_count == n:
        return None
    if n > _DICT_SAMPLE:
        sample = arr.slice(0, _DICT_SAMPLE)
        if pc.count_distinct(sample).as_py() >= DICT_MAX_ITEMS:
            return None
    encoded = pc.dictionary_encode(arr)
    items = encoded.dictionary
    if len(items) >= DICT_MAX_ITEMS:
        return None
    idx = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    indices = (idx + 1).astype(np.uint8)
    enc = pb.ArrayEncoding()
    enc.dictionary.indices.CopyFrom(_no_nulls(_flat(8, bufs.add(indices))))
    enc.dictionary.items.CopyFrom(_binary(_normalised(items), bufs))
    enc.dictionary.num_dictionary_items = len(items)
    return enc


def _dictionary(arr: pa.Array, bufs: _Buffers, opts: EncoderOptions) -> pb.ArrayEncoding:
    """A dictionary-typed page: indices of the index width, items = the dictionary.

    Null rows point at a null item (appended when the dictionary has none).
    """
    items = arr.dictionary
    indices = _normalised(arr.indices)
    itype = indices.type
    bits = itype.bit_width
    n = len(indices)
    raw = np.frombuffer(indices.buffers()[1], dtype=itype.to_pandas_dtype(), count=n)
    if indices.null_count:
        item_valid = valid_mask(items)
        nulls = np.flatnonzero(~item_valid)
        if len(nulls):
            null_item = int(nulls[0])
        else:
            null_item = len(items)
            if null_item > np.iinfo(raw.dtype).max:
                raise UnsupportedFeatureError(
                    f"a dictionary of {len(items)} items has no room for a null item in {itype}"
                )
            items = pa.concat_arrays([items, pa.nulls(1, items.type)])
        raw = np.where(valid_mask(indices), raw, raw.dtype.type(null_item))
    enc = pb.ArrayEncoding()
    enc.dictionary.indices.CopyFrom(_no_nulls(_flat(bits, bufs.add(np.ascontiguousarray(raw)))))
    items = _normalised(storage(items))
    enc.dictionary.items.CopyFrom(encode_values(items, bufs, opts, dictionaries=False))
    enc.dictionary.num_dictionary_items = len(items)
    return enc


def encode_values(
    arr: pa.Array, bufs: _Buffers, opts: EncoderOptions, *, dictionaries: bool = True
) -> pb.ArrayEncoding:
    """The encoding of one value page (any non-nested type), adding its buffers to `bufs`."""
    t = arr.type
    n = len(arr)
    if pa.types.is_null(t):
        return _all_nulls()
    arr = _normalised(arr)
    if pa.types.is_dictionary(t):
        return _dictionary(arr, bufs, opts)
    if is_var_binary(t):
        if dictionaries and opts.string_dictionaries and pa.types.is_string(t):
            enc = _string_dictionary(arr, bufs)
            if enc is not None:
                return enc
        return _binary(arr, bufs)
    if not (pa.types.is_fixed_size_list(t) or fixed_bits(t) is not None):
        raise UnsupportedFeatureError(f"Lance 2.0 has no value encoding for {t}")
    nulls = arr.null_count
    if nulls == n:  # also empty pages, as pylance writes them
        return _all_nulls()
    if not nulls:
        return _no_nulls(_plain(arr, bufs, opts))
    enc = pb.ArrayEncoding()
    some = enc.nullable.some_nulls
    some.validity.CopyFrom(_flat(1, bufs.add(_bits(arr.buffers()[0], n))))
    some.values.CopyFrom(_plain(arr, bufs, opts))
    return enc


def packable_width(t: pa.DataType) -> int | None:
    """Bytes per row of a packed-struct child (None when it cannot be packed)."""
    if pa.types.is_fixed_size_list(t):
        inner = packable_width(t.value_type)
        return None if inner is None else inner * t.list_size
    bits = fixed_bits(t)
    return None if bits is None or bits % 8 else bits // 8


def _packed_inner(t: pa.DataType) -> pb.ArrayEncoding:
    """The (buffer-less) description of one packed-struct child."""
    if pa.types.is_fixed_size_list(t):
        enc = pb.ArrayEncoding()
        enc.fixed_size_list.dimension = t.list_size
        enc.fixed_size_list.items.CopyFrom(_packed_inner(t.value_type))
        return _no_nulls(enc)
    return _no_nulls(_flat(fixed_bits(t), 0))


def _fixed_bytes(arr: pa.Array) -> np.ndarray:
    """The value bytes of an offset-0, null-free fixed-width (or nested FSL) array."""
    t = arr.type
    if pa.types.is_fixed_size_list(t):
        dim = t.list_size
        return _fixed_bytes(_normalised(arr.values.slice(arr.offset * dim, len(arr) * dim)))
    width = fixed_bits(t) // 8
    return np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=len(arr) * width)


def _has_nulls(arr: pa.Array) -> bool:
    """Whether a fixed-width or FSL array has nulls at any level."""
    if arr.null_count:
        return True
    if pa.types.is_fixed_size_list(arr.type):
        dim = arr.type.list_size
        return _has_nulls(arr.values.slice(arr.offset * dim, len(arr) * dim))
    return False


def _packed(arr: pa.Array, bufs: _Buffers) -> pb.ArrayEncoding:
    """`PackedStruct`: the fixed-width children interleaved row by row in one buffer."""
    t = arr.type
    n = len(arr)
    widths = [packable_width(t.field(i).type) for i in range(t.num_fields)]
    rows = np.empty((n, sum(widths)), dtype=np.uint8)
    pos = 0
    enc = pb.ArrayEncoding()
    for i, w in enumerate(widths):
        child = _normalised(arr.field(i))
        rows[:, pos : pos + w] = _fixed_bytes(child).reshape(n, w)
        pos += w
        enc.packed_struct.inner.append(_packed_inner(t.field(i).type))
    enc.packed_struct.buffer.SetInParent()
    enc.packed_struct.buffer.buffer_index = bufs.add(rows)
    return enc


# -- field encoders ---------------------------------------------------------------------------
class FieldEncoder(ABC):
    """Streams one field (and its descendants) into pages of its columns."""

    def __init__(self, field: LanceField, path: str, column: int, emit: Emit) -> None:
        self.field = field
        self.path = path  # dotted name, for messages
        self.column = column
        self.emit = emit
        self.pages = 0

    @abstractmethod
    def append(self, arr: pa.Array) -> None:
        """Buffer rows, writing pages as they fill."""

    @abstractmethod
    def finish(self) -> None:
        """Write the remaining buffered rows as pages."""

    @property
    def needs_check(self) -> bool:
        """Whether `check` has anything to look at (structs, packed structs)."""
        return False

    def check(self, arr: pa.Array) -> None:  # noqa: B027 - most fields need no check
        """Raise before anything is buffered if `arr` cannot be stored in 2.0."""

    def columns(self) -> list[tuple[int, int]]:
        """(field id, column) of this field's columns, in column order."""
        return [(self.field.id, self.column)]

    def encoders(self) -> Iterator[FieldEncoder]:
        """This encoder and its descendants."""
        yield self

    def _emit(self, rows: int, enc: pb.ArrayEncoding, bufs: list[Buffer]) -> None:
        self.pages += 1
        self.emit(self.column, rows, enc, bufs)


def _struct_nulls_error(path: str, nulls: int) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(
        f"the struct field {path!r} contains {nulls} null value(s), but Lance file version "
        f"2.0 does not encode struct validity; use file version 2.1 or later"
    )


class ValueEncoder(FieldEncoder):
    """A value column (also a packed struct): buffers arrays, then encodes whole pages."""

    def __init__(
        self,
        field: LanceField,
        path: str,
        column: int,
        emit: Emit,
        opts: EncoderOptions,
        *,
        packed: bool = False,
    ) -> None:
        super().__init__(field, path, column, emit)
        self.opts = opts
        self.packed = packed
        self.type = storage_type(field.arrow_type)
        self.is_dict = pa.types.is_dictionary(self.type)
        self._chunks: list[pa.Array] = []
        self._rows = 0
        self.buffered_bytes = 0
        self.peak_buffered_bytes = 0
        self._dicts: list[pa.Array] = []  # distinct dictionaries in the pending chunks
        self._dict_items = 0

    @property
    def needs_check(self) -> bool:
        """Only packed structs are checked."""
        return self.packed

    def check(self, arr: pa.Array) -> None:
        """Packed structs: no struct nulls, no child nulls."""
        if not self.packed:
            return
        if arr.null_count:
            raise _struct_nulls_error(self.path, arr.null_count)
        for i in range(arr.type.num_fields):
            if _has_nulls(arr.field(i)):
                raise UnsupportedFeatureError(
                    f"the packed struct field {self.path!r} has nulls in child "
                    f"{arr.type.field(i).name!r}; packed structs cannot store nulls in 2.0"
                )

    def append(self, arr: pa.Array) -> None:
        """Buffer `arr`, writing a page each time about `page_bytes` are buffered."""
        arr = storage(arr)
        n = len(arr)
        if n == 0:
            if not self._chunks and not self.pages:
                self._chunks.append(arr)  # so the column gets its (empty) page
            return
        fresh_from = len(self._chunks)
        start = 0
        while start < n:
            rest = arr.slice(start) if start else arr
            size = _nbytes(rest)
            room = self.opts.page_bytes - self.buffered_bytes
            if size > room and n - start > 1:
                rows = max(1, min(n - start, (n - start) * max(room, 0) // max(size, 1)))
                piece, size = rest.slice(0, rows), None
            else:
                rows, piece = n - start, rest
            if self._add(piece, size):
                fresh_from = 0
            start += rows
        # Keep only compact copies of what stays buffered past this call.
        for i in range(fresh_from, len(self._chunks)):
            self._chunks[i] = _compact(self._chunks[i])

    def _add(self, piece: pa.Array, size: int | None = None) -> bool:
        """Buffer one piece (of `size` bytes if known); True when pages were flushed."""
        flushed = False
        if size is None:
            size = _nbytes(piece)
        if self.is_dict:
            new = not any(_same_array(piece.dictionary, d) for d in self._dicts)
            if new:
                limit = np.iinfo(self.type.index_type.to_pandas_dtype()).max
                # A page's chunks are unified into one dictionary, which must stay
                # addressable by the index type and cannot contain nulls (Arrow
                # does not unify those): otherwise start a new page.
                too_many = self._dict_items + len(piece.dictionary) + 1 > limit
                nulls = piece.dictionary.null_count or any(d.null_count for d in self._dicts)
                if self._chunks and (too_many or nulls):
                    self._flush()
                    flushed = True
                self._dicts.append(piece.dictionary)
                self._dict_items += len(piece.dictionary)
                size += piece.dictionary.nbytes
        if self._chunks and self.buffered_bytes + size > self.opts.max_page_bytes:
            self._flush()
            flushed = True
            if self.is_dict:
                self._dicts, self._dict_items = [piece.dictionary], len(piece.dictionary)
        self._chunks.append(piece)
        self._rows += len(piece)
        self.buffered_bytes += size
        self.peak_buffered_bytes = max(self.peak_buffered_bytes, self.buffered_bytes)
        if self.buffered_bytes >= self.opts.page_bytes:
            self._flush()
            flushed = True
        return flushed

    def _flush(self) -> None:
        chunks, rows = self._chunks, self._rows
        self._chunks, self._rows, self.buffered_bytes = [], 0, 0
        self._dicts, self._dict_items = [], 0
        if not chunks:
            return
        arr = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
        bufs = _Buffers()
        if self.packed:
            if arr.offset:
                arr = pa.concat_arrays([arr])
            enc = _packed(arr, bufs)
        else:
            enc = encode_values(arr, bufs, self.opts)
        self._emit(rows, enc, bufs.items)

    def finish(self) -> None:
        """Write what is still buffered."""
        self._flush()


class NullEncoder(FieldEncoder):
    """A column of the null type: one `Nullable{AllNull}` page, no buffers."""

    def __init__(self, field: LanceField, path: str, column: int, emit: Emit) -> None:
        super().__init__(field, path, column, emit)
        self._rows = 0
        self._seen = False

    def append(self, arr: pa.Array) -> None:
        """Count the rows."""
        self._rows += len(arr)
        self._seen = True

    def finish(self) -> None:
        """Write the single all-null page."""
        if self._seen:
            self._emit(self._rows, _all_nulls(), [])


class StructEncoder(FieldEncoder):
    """A struct: a `SimpleStruct` header column (one page, no buffers) plus its children."""

    def __init__(
        self, field: LanceField, path: str, column: int, emit: Emit, children: list[FieldEncoder]
    ) -> None:
        super().__init__(field, path, column, emit)
        self.children = children
        self._rows = 0

    @property
    def needs_check(self) -> bool:
        """Struct validity is always checked."""
        return True

    def check(self, arr: pa.Array) -> None:
        """2.0 cannot store struct validity: refuse nulls (pylance does the same)."""
        arr = storage(arr)
        if arr.null_count:
            raise _struct_nulls_error(self.path, arr.null_count)
        for i, child in enumerate(self.children):
            if child.needs_check:
                child.check(arr.field(i))

    def append(self, arr: pa.Array) -> None:
        """Count rows and pass each child its values."""
        arr = storage(arr)
        self._rows += len(arr)
        for i, child in enumerate(self.children):
            child.append(arr.field(i))

    def finish(self) -> None:
        """Finish the children, then write the header page."""
        for child in self.children:
            child.finish()
        enc = pb.ArrayEncoding()
        enc.struct.SetInParent()
        self._emit(self._rows, enc, [])

    def columns(self) -> list[tuple[int, int]]:
        """The header column, then the children's columns."""
        out = [(self.field.id, self.column)]
        for child in self.children:
            out.extend(child.columns())
        return out

    def encoders(self) -> Iterator[FieldEncoder]:
        """This encoder and its descendants."""
        yield self
        for child in self.children:
            yield from child.encoders()


class ListEncoder(FieldEncoder):
    """A list / large_list: an offsets column of `List` pages plus the item column(s)."""

    def __init__(
        self,
        field: LanceField,
        path: str,
        column: int,
        emit: Emit,
        opts: EncoderOptions,
        child: FieldEncoder,
    ) -> None:
        super().__init__(field, path, column, emit)
        self.opts = opts
        self.child = child
        self._lengths: list[np.ndarray] = []
        self._valid: list[np.ndarray | None] = []
        self._rows = 0
        self.buffered_bytes = 0
        self.peak_buffered_bytes = 0

    @staticmethod
    def _items(arr: pa.Array) -> tuple[np.ndarray, np.ndarray | None, pa.Array]:
        """Row lengths (0 for null rows), validity (None = no nulls) and the items."""
        offs = arr.offsets.to_numpy().astype(np.int64, copy=False)
        lengths = np.diff(offs)
        if not arr.null_count:
            return lengths, None, arr.values.slice(int(offs[0]), int(offs[-1] - offs[0]))
        valid = valid_mask(arr)
        if np.any(lengths[~valid]):  # null rows backed by items: drop those items
            lengths = np.where(valid, lengths, 0)
            return lengths, valid, arr.flatten()
        return lengths, valid, arr.values.slice(int(offs[0]), int(offs[-1] - offs[0]))

    @property
    def needs_check(self) -> bool:
        """Whether the items need checking."""
        return self.child.needs_check

    def check(self, arr: pa.Array) -> None:
        """Check the items."""
        if self.child.needs_check:
            self.child.check(self._items(storage(arr))[2])

    def append(self, arr: pa.Array) -> None:
        """Buffer the offsets of the rows and pass the items on to the item column."""
        arr = storage(arr)
        n = len(arr)
        if n == 0:
            if not self._lengths and not self.pages:  # so the columns get (empty) pages
                self._lengths.append(np.zeros(0, dtype=np.int64))
                self._valid.append(None)
                self.child.append(arr.values.slice(0, 0))
            return
        per_page = max(1, self.opts.page_bytes // 8)
        start = 0
        while start < n:
            rows = min(n - start, per_page - self._rows)
            piece = arr.slice(start, rows) if (start or rows < n) else arr
            lengths, valid, items = self._items(piece)
            self.child.append(items)
            self._lengths.append(lengths)
            self._valid.append(valid)
            self._rows += rows
            self.buffered_bytes = 8 * self._rows
            self.peak_buffered_bytes = max(self.peak_buffered_bytes, self.buffered_bytes)
            if self._rows >= per_page:
                self._flush()
            start += rows

    def _flush(self) -> None:
        if not self._lengths:
            return
        chunks, valids, rows = self._lengths, self._valid, self._rows
        self._lengths, self._valid, self._rows, self.buffered_bytes = [], [], 0, 0
        lengths = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
        ends = np.cumsum(lengths, dtype=np.uint64)
        num_items = int(ends[-1]) if len(ends) else 0
        adj = num_items + 1
        if any(v is not None for v in valids):
            valid = np.concatenate(
                [
                    np.ones(len(c), dtype=bool) if v is None else v
                    for c, v in zip(chunks, valids, strict=True)
                ]
            )
            ends[~valid] += np.uint64(adj)
        bufs = _Buffers()
        enc = pb.ArrayEncoding()
        enc.list.offsets.CopyFrom(_u64_flat(ends, bufs))
        enc.list.null_offset_adjustment = adj
        enc.list.num_items = num_items
        self._emit(rows, enc, bufs.items)

    def finish(self) -> None:
        """Write the last offsets page and finish the items."""
        self._flush()
        self.child.finish()

    def columns(self) -> list[tuple[int, int]]:
        """The offsets column, then the item columns."""
        return [(self.field.id, self.column), *self.child.columns()]

    def encoders(self) -> Iterator[FieldEncoder]:
        """This encoder and its descendants."""
        yield self
        yield from self.child.encoders()
