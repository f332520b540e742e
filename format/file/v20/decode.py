"""Decoders for Lance 2.0 pages: one function per `lance.encodings.ArrayEncoding` variant.

A 2.0 page is a tree of `ArrayEncoding` messages whose leaves name the page's buffers
(`Buffer.buffer_index`). `decode_array` turns a whole value page into an Arrow array of the
requested type; `decode_list_page` turns a `List` (offsets) page into per-row item spans.
Everything is vectorised with numpy / pyarrow; buffers are only sliced, never overrun, and
malformed input raises `CorruptFileError` (or `UnsupportedFeatureError` for encodings this
reader does not implement) naming the file, column and page.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.file.items import ItemTable, take_items
from quiver.format.file.types import fixed_bits
from quiver.format.proto import encodings_v2_0_pb2 as pb

BUFFER_PAGE, BUFFER_COLUMN, BUFFER_FILE = 0, 1, 2
Bytes = bytes | memoryview
_INT32_MAX = (1 << 31) - 1


@dataclass
class PageContext:
    """The buffers of one page plus what error messages need to say where they are."""

    path: str
    where: str  # "column 3 (field 'x') page 2"
    page_buffers: Sequence[Bytes]
    # Fetches column (1) or file-global (2) buffers by index, for encodings that use them.
    other_buffer: Callable[[int, int], Bytes] | None = None

    def corrupt(self, reason: str) -> CorruptFileError:
        """A CorruptFileError about this page."""
        return CorruptFileError(self.path, f"{self.where}: {reason}")

    def unsupported(self, what: str) -> UnsupportedFeatureError:
        """An UnsupportedFeatureError about this page."""
        return UnsupportedFeatureError(f"{self.path}: {self.where}: {what} is not supported")

    def buffer(self, buf: pb.Buffer) -> Bytes:
        """The bytes a `Buffer` reference points at."""
        kind, index = int(buf.buffer_type), int(buf.buffer_index)
        if kind == BUFFER_PAGE:
            if index >= len(self.page_buffers):
                raise self.corrupt(
                    f"refers to page buffer {index} but the page has {len(self.page_buffers)}"
                )
            return self.page_buffers[index]
        if kind in (BUFFER_COLUMN, BUFFER_FILE) and self.other_buffer is not None:
            return self.other_buffer(kind, index)
        raise self.corrupt(f"unknown buffer type {kind}")


@dataclass
class ListPage:
    """A decoded `List` offsets page: item span and validity of every list row."""

    starts: np.ndarray  # int64, relative to the first item of the page
    ends: np.ndarray  # int64
    valid: np.ndarray | None  # bool, None = no nulls
    num_items: int


def variant(enc: pb.ArrayEncoding) -> str:
    """The name of the `ArrayEncoding` oneof member that is set ("" if none)."""
    return enc.WhichOneof("array_encoding") or ""


def without_no_nulls(enc: pb.ArrayEncoding) -> pb.ArrayEncoding:
    """`enc` without its `Nullable{NoNull}` wrappers."""
    while variant(enc) == "nullable" and enc.nullable.WhichOneof("nullability") == "no_nulls":
        enc = enc.nullable.no_nulls.values
    return enc


def is_all_null(enc: pb.ArrayEncoding) -> bool:
    """Whether a page is `Nullable{AllNull}` (no buffers, every row null)."""
    return variant(enc) == "nullable" and enc.nullable.WhichOneof("nullability") == "all_nulls"


# -- helpers ------------------------------------------------------------------------------
def _bitmap(valid: np.ndarray) -> pa.Buffer | None:
    """An Arrow validity bitmap (LSB first) of a bool array; None when all are valid."""
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _valid_mask(arr: pa.Array) -> np.ndarray:
    """A numpy bool array, True where `arr` is valid."""
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return arr.is_valid().to_numpy(zero_copy_only=False)


def with_validity(arr: pa.Array, valid: pa.Buffer | None) -> pa.Array:
    """`arr` with `valid` (a bitmap) ANDed into its own validity."""
    if valid is None:
        return arr
    n = len(arr)
    t = arr.type
    if pa.types.is_null(t):
        return arr
    if arr.offset:
        arr = pa.concat_arrays([arr])  # normalise to offset 0 (rare)
    if pa.types.is_dictionary(t):
        return pa.DictionaryArray.from_arrays(with_validity(arr.indices, valid), arr.dictionary)
    if arr.null_count:
        own = np.frombuffer(arr.buffers()[0], dtype=np.uint8, count=(n + 7) // 8)
        new = np.frombuffer(valid, dtype=np.uint8, count=(n + 7) // 8)
        valid = pa.py_buffer(own & new)
    if pa.types.is_fixed_size_list(t):
        return pa.Array.from_buffers(t, n, [valid], children=[arr.values])
    if pa.types.is_struct(t):
        return pa.Array.from_buffers(
            t, n, [valid], children=[arr.field(i) for i in range(t.num_fields)]
        )
    if t.num_fields:
        raise UnsupportedFeatureError(f"cannot attach validity to {t}")
    return pa.Array.from_buffers(t, n, [valid, *arr.buffers()[1:]])


def _decompress(data: Bytes, comp: pb.Compression, expected: int, ctx: PageContext) -> Bytes:
    """Undo a Flat buffer's general compression (zstd or lz4), at most `expected` bytes."""
    scheme = comp.scheme.lower()
    if scheme in ("", "none"):
        return data
    if not data:
        return b""
    try:
        if scheme == "zstd":
            import zstandard

            dctx = zstandard.ZstdDecompressor()
            magic = int.from_bytes(data[:4], "little") if len(data) >= 4 else 0
            raw_frame = len(data) < 8 or (magic == 0xFD2FB528 and not data[4] & 0x10)
            if raw_frame:
                with dctx.stream_reader(data) as reader:
                    out = reader.read(expected + 1)
            else:
                size = int.from_bytes(data[:8], "little")
                if size > expected:
                    raise ctx.corrupt(f"zstd buffer claims {size} bytes, expected {expected}")
                out = dctx.decompress(data[8:], max_output_size=max(size, 1))
        elif scheme == "lz4":
            import lz4.block

            if len(data) < 4:
                raise ctx.corrupt("lz4 buffer shorter than its size prefix")
            size = int.from_bytes(data[:4], "little")
            if size > expected:
                raise ctx.corrupt(f"lz4 buffer claims {size} bytes, expected {expected}")
            out = lz4.block.decompress(data)
        else:
            raise ctx.unsupported(f"compression scheme {comp.scheme!r}")
    except (CorruptFileError, UnsupportedFeatureError):
        raise
    except Exception as e:  # noqa: BLE001 - zstandard/lz4 raise their own error types
        raise ctx.corrupt(f"cannot decompress {scheme} buffer: {e}") from None
    if len(out) > expected:
        raise ctx.corrupt(f"{scheme} buffer inflates past the expected {expected} bytes")
    return out


def _flat_data(flat: pb.Flat, nbytes: int, ctx: PageContext) -> Bytes:
    """The (decompressed) bytes of a Flat buffer, checked to hold at least `nbytes`."""
    data = ctx.buffer(flat.buffer)
    if flat.HasField("compression"):
        data = _decompress(data, flat.compression, nbytes, ctx)
    if len(data) < nbytes:
        raise ctx.corrupt(f"Flat buffer has {len(data)} bytes, {nbytes} needed")
    return data


def decode_uints(
    enc: pb.ArrayEncoding, n: int, ctx: PageContext
) -> tuple[np.ndarray, np.ndarray | None]:
    """Unsigned integers (offsets, indices) of any byte width, plus validity if present."""
    kind = variant(enc)
    if kind == "nullable":
        nl = enc.nullable
        which = nl.WhichOneof("nullability")
        if which == "no_nulls":
            return decode_uints(nl.no_nulls.values, n, ctx)
        if which == "some_nulls":
            values, inner = decode_uints(nl.some_nulls.values, n, ctx)
            valid = decode_validity(nl.some_nulls.validity, n, ctx)
            return values, valid if inner is None else valid & inner
        if which == "all_nulls":
            return np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=bool)
        raise ctx.corrupt("Nullable encoding without nullability")
    if kind == "flat":
        bits = int(enc.flat.bits_per_value)
        if bits not in (8, 16, 32, 64):
            raise ctx.unsupported(f"{bits}-bit integer offsets/indices")
        width = bits // 8
        data = _flat_data(enc.flat, n * width, ctx)
        return np.frombuffer(data, dtype=f"<u{width}", count=n), None
    raise ctx.unsupported(f"{kind or 'empty'} encoding for offsets/indices")


def decode_validity(enc: pb.ArrayEncoding, n: int, ctx: PageContext) -> np.ndarray:
    """A validity (1 = valid) encoding as a numpy bool array."""
    arr = decode_array(enc, n, pa.bool_(), ctx)
    if arr.null_count:
        raise ctx.corrupt("validity bitmap has nulls of its own")
    return arr.to_numpy(zero_copy_only=False)


# -- value decoders -----------------------------------------------------------------------
def _flat(enc: pb.ArrayEncoding, n: int, t: pa.DataType, ctx: PageContext) -> pa.Array:
    """`Flat`: fixed-width values (1-bit LSB-first for bool) packed back to back."""
    bits = int(enc.flat.bits_per_value)
    want = fixed_bits(t)
    if want is None or want != bits:
        raise ctx.corrupt(f"Flat {bits}-bit values cannot be read as {t}")
    if bits == 1:
        data = _flat_data(enc.flat, (n + 7) // 8, ctx)
    elif bits % 8:
        raise ctx.unsupported(f"Flat with {bits} bits per value")
    else:
        data = _flat_data(enc.flat, n * (bits // 8), ctx)
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(data)], null_count=0)


def _nullable(enc: pb.ArrayEncoding, n: int, t: pa.DataType, ctx: PageContext) -> pa.Array:
    """`Nullable`: NoNull / AllNull / SomeNull (validity bitmap + values)."""
    nl = enc.nullable
    which = nl.WhichOneof("nullability")
    if which == "no_nulls":
        return decode_array(nl.no_nulls.values, n, t, ctx)
    if which == "all_nulls":
        return pa.nulls(n, t)
    if which == "some_nulls":
        bitmap = validity_bitmap(nl.some_nulls.validity, n, ctx)
        values = decode_array(nl.some_nulls.values, n, t, ctx)
        return with_validity(values, bitmap)
    raise ctx.corrupt("Nullable encoding without nullability")


def validity_bitmap(enc: pb.ArrayEncoding, n: int, ctx: PageContext) -> pa.Buffer:
    """A validity encoding as an Arrow bitmap (zero-copy for the usual Flat 1-bit)."""
    arr = decode_array(enc, n, pa.bool_(), ctx)
    if arr.null_count:
        raise ctx.corrupt("validity bitmap has nulls of its own")
    return arr.buffers()[1]


def _fixed_size_list(enc: pb.ArrayEncoding, n: int, t: pa.DataType, ctx: PageContext) -> pa.Array:
    """`FixedSizeList`: `dimension` items per row, decoded as one item array."""
    fsl = enc.fixed_size_list
    if fsl.has_validity:
        raise ctx.unsupported("FixedSizeList with inline validity (a 2.1 layout)")
    dim = int(fsl.dimension)
    if not pa.types.is_fixed_size_list(t) or t.list_size != dim:
        raise ctx.corrupt(f"FixedSizeList of dimension {dim} cannot be read as {t}")
    items = decode_array(fsl.items, n * dim, t.value_type, ctx)
    return pa.FixedSizeListArray.from_arrays(items, type=t)


def _binary_type_check(t: pa.DataType, what: str, ctx: PageContext) -> None:
    if not (
        pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_string(t)
        or pa.types.is_large_binary(t)
    ):
        raise ctx.corrupt(f"{what} values cannot be read as {t}")


def _var_array(
    t: pa.DataType, ends: np.ndarray, data: Bytes, valid: np.ndarray | None, ctx: PageContext
) -> pa.Array:
    """A string/binary array from end offsets (no leading 0) and value bytes."""
    n = len(ends)
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    if n:
        if np.any(ends[1:] < ends[:-1]):
            raise ctx.corrupt("string offsets decrease")
        last = int(ends[-1])
        if last > len(data):
            raise ctx.corrupt(f"string offsets reach {last} but only {len(data)} bytes exist")
        if not large and last > _INT32_MAX:
            raise ctx.unsupported(f"{last} bytes of {t} in one page (use a large_ type)")
    offsets = np.zeros(n + 1, dtype=np.int64 if large else np.int32)
    offsets[1:] = ends
    bitmap = None if valid is None else _bitmap(valid)
    return pa.Array.from_buffers(t, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)])


def _binary(enc: pb.ArrayEncoding, n: int, t: pa.DataType, ctx: PageContext) -> pa.Array:
    """`Binary`: u64 end offsets (nulls as end + null_adjustment) and value bytes."""
    b = enc.binary
    _binary_type_check(t, "Binary", ctx)
    raw, raw_valid = decode_uints(b.indices, n, ctx)
    raw = raw.astype(np.uint64, copy=False)
    adj = np.uint64(b.null_adjustment)
    if b.null_adjustment:
        valid = raw < adj
        ends = np.where(valid, raw, raw - adj)
    else:
        valid, ends = np.ones(n, dtype=bool), raw
    if raw_valid is not None:
        valid &= raw_valid
    if n and int(ends.max()) >= 1 << 62:
        raise ctx.corrupt("string offsets out of range")
    nbytes = int(ends[-1]) if n else 0
    if variant(b.bytes) != "flat" or b.bytes.flat.bits_per_value != 8:
        raise ctx.unsupported(f"Binary bytes encoded as {variant(b.bytes) or 'nothing'}")
    data = _flat_data(b.bytes.flat, nbytes, ctx)
    return _var_array(t, ends.astype(np.int64), data, valid, ctx)


def _fixed_size_binary(enc: pb.ArrayEncoding, n: int, t: pa.DataType, ctx: PageContext) -> pa.Array:
    """`FixedSizeBinary`: values of one byte width, read as fixed or variable binary."""
    f = enc.fixed_size_binary
    width = int(f.byte_width)
    if pa.types.is_fixed_size_binary(t):
        if t.byte_width != width:
            raise ctx.corrupt(f"FixedSizeBinary of width {width} cannot be read as {t}")
        data = decode_array(f.bytes, n * width, pa.uint8(), ctx)
        return pa.Array.from_buffers(t, n, [None, data.buffers()[1]], null_count=0)
    _binary_type_check(t, "FixedSizeBinary", ctx)
    data = decode_array(f.bytes, n * width, pa.uint8(), ctx)
    ends = np.arange(1, n + 1, dtype=np.int64) * width
    return _var_array(t, ends, data.buffers()[1].to_pybytes(), None, ctx)


def _dictionary(enc: pb.ArrayEncoding, n: int, t: pa.DataType, ctx: PageContext) -> pa.Array:
    """`Dictionary`: indices into per-page items (0 = null unless the type is a dictionary)."""
    d = enc.dictionary
    as_dict = pa.types.is_dictionary(t)
    value_type = t.value_type if as_dict else t
    num_items = int(d.num_dictionary_items)
    if num_items > (1 << 32):
        raise ctx.corrupt(f"absurd dictionary size {num_items}")
    idx, idx_valid = decode_uints(d.indices, n, ctx)
    items = decode_array(d.items, num_items, value_type, ctx)
    return dictionary_values(idx, idx_valid, items, t, ctx)


def dictionary_values(
    idx: np.ndarray,
    idx_valid: np.ndarray | None,
    items: pa.Array,
    t: pa.DataType,
    ctx: PageContext,
    table: ItemTable | None = None,
) -> pa.Array:
    """Rows of a `Dictionary` page from their indices and the page's decoded items (`table`:
    their `item_table`, when the caller keeps it for the page's next rows)."""
    n = len(idx)
    num_items = len(items)
    as_dict = pa.types.is_dictionary(t)
    if as_dict:
        # Values as written; a row is null when its item is (pylance stores nulls that way).
        if n and int(idx.max()) >= num_items:
            raise ctx.corrupt(f"dictionary index {int(idx.max())} >= {num_items} items")
        valid = _valid_mask(items)[idx] if n else np.ones(0, dtype=bool)
        if idx_valid is not None:
            valid &= idx_valid
        indices = pa.array(idx.astype(t.index_type.to_pandas_dtype()), t.index_type)
        indices = with_validity(indices, _bitmap(valid))
        return pa.DictionaryArray.from_arrays(indices, items)
    # Automatic string dictionaries: 0 = null, k = item k - 1.
    if n and int(idx.max()) > num_items:
        raise ctx.corrupt(f"dictionary index {int(idx.max())} > {num_items} items")
    if idx_valid is not None:
        idx = np.where(idx_valid, idx, 0).astype(idx.dtype, copy=False)
    return take_items(items, idx, base=1, table=table)


def _packed_struct(enc: pb.ArrayEncoding, n: int, t: pa.DataType, ctx: PageContext) -> pa.Array:
    """`PackedStruct`: fixed-width children interleaved row by row in one buffer."""
    ps = enc.packed_struct
    if not pa.types.is_struct(t) or t.num_fields != len(ps.inner):
        raise ctx.corrupt(f"PackedStruct of {len(ps.inner)} children cannot be read as {t}")
    widths = []
    for child in ps.inner:
        inner = without_no_nulls(child)
        if variant(inner) != "flat" or inner.flat.bits_per_value % 8:
            raise ctx.unsupported(f"PackedStruct child encoded as {variant(inner)}")
        widths.append(int(inner.flat.bits_per_value) // 8)
    row = sum(widths)
    data = ctx.buffer(ps.buffer)
    if len(data) < n * row:
        raise ctx.corrupt(f"PackedStruct buffer has {len(data)} bytes, {n * row} needed")
    rows = np.frombuffer(data, dtype=np.uint8, count=n * row).reshape(n, row)
    children, pos = [], 0
    for i, w in enumerate(widths):
        ft = t.field(i).type
        raw = pa.py_buffer(np.ascontiguousarray(rows[:, pos : pos + w]))
        pos += w
        if pa.types.is_fixed_size_list(ft) and fixed_bits(ft.value_type) not in (None, 1):
            if fixed_bits(ft.value_type) * ft.list_size != w * 8:
                raise ctx.corrupt(f"PackedStruct child {i} is {w} bytes, not {ft}")
            vals = pa.Array.from_buffers(ft.value_type, n * ft.list_size, [None, raw])
            children.append(pa.FixedSizeListArray.from_arrays(vals, type=ft))
        elif fixed_bits(ft) == w * 8:
            children.append(pa.Array.from_buffers(ft, n, [None, raw], null_count=0))
        else:
            raise ctx.corrupt(f"PackedStruct child {i} is {w} bytes, not {ft}")
    return pa.StructArray.from_arrays(children, fields=list(t))


_DECODERS: dict[str, Callable[[pb.ArrayEncoding, int, pa.DataType, PageContext], pa.Array]] = {
    "flat": _flat,
    "nullable": _nullable,
    "fixed_size_list": _fixed_size_list,
    "binary": _binary,
    "dictionary": _dictionary,
    "fixed_size_binary": _fixed_size_binary,
    "packed_struct": _packed_struct,
}


def decode_array(enc: pb.ArrayEncoding, n: int, t: pa.DataType, ctx: PageContext) -> pa.Array:
    """Decode `n` values of Arrow type `t` from a (sub-)encoding of a value page."""
    kind = variant(enc)
    if pa.types.is_null(t):
        if kind == "nullable" or kind == "":
            return pa.nulls(n)
        raise ctx.corrupt(f"{kind} encoding cannot be read as null")
    decoder = _DECODERS.get(kind)
    if decoder is None:
        if kind in ("list", "struct"):
            raise ctx.corrupt(f"{kind} encoding in a column of type {t}")
        raise ctx.unsupported(f"2.0 encoding {kind or '(none)'!r}")
    if pa.types.is_dictionary(t) and kind not in ("dictionary", "nullable"):
        # Dictionary-typed column whose page was stored as plain values.
        values = decoder(enc, n, t.value_type, ctx)
        encoded = values.dictionary_encode()
        return pa.DictionaryArray.from_arrays(
            encoded.indices.cast(t.index_type), encoded.dictionary
        )
    return decoder(enc, n, t, ctx)


def decode_list_page(enc: pb.ArrayEncoding, n: int, ctx: PageContext) -> ListPage:
    """Decode a `List` page into each row's [start, end) item span within the page."""
    if variant(enc) != "list":
        raise ctx.corrupt(f"list offsets column has a {variant(enc) or 'empty'} page")
    lst = enc.list
    raw, raw_valid = decode_uints(lst.offsets, n, ctx)
    raw = raw.astype(np.uint64, copy=False)
    adj = int(lst.null_offset_adjustment)
    num_items = int(lst.num_items)
    if num_items >= 1 << 62 or adj >= 1 << 63:
        raise ctx.corrupt("absurd list item count")
    if n and adj == 0:
        raise ctx.corrupt("List page without a null offset adjustment")
    if n:
        valid = raw < np.uint64(adj)
        ends = np.where(valid, raw, raw - np.uint64(adj))
        if int(ends.max()) > num_items:
            raise ctx.corrupt(f"list offsets reach {int(ends.max())} of {num_items} items")
        ends = ends.astype(np.int64)
    else:
        valid, ends = np.ones(0, dtype=bool), np.zeros(0, dtype=np.int64)
    if raw_valid is not None:
        valid &= raw_valid
    starts = np.zeros(n, dtype=np.int64)
    starts[1:] = ends[:-1]
    if np.any(ends < starts):
        raise ctx.corrupt("list offsets decrease")
    return ListPage(starts, ends, None if valid.all() else valid, num_items)
