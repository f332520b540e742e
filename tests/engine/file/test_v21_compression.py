"""The 2.1/2.2 `CompressiveEncoding` codecs against pages written by pylance, plus round trips.

Each pylance test writes a one-column dataset shaped to make pylance pick one encoding,
parses the mini-block chunks with a small test-local parser (chunk metadata words and chunk
headers per the format reference) and checks that `decode_chunks` yields exactly the column.
"""

from __future__ import annotations

import decimal
import glob
import os
from dataclasses import dataclass
from unittest import mock

import lance
import lance.file
import numpy as np
import pyarrow as pa
import pytest
import zstandard
from google.protobuf import any_pb2
from hypothesis import given, settings
from hypothesis import strategies as st
from variable_layouts import encode_variable_block, encode_variable_chunks

from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.file.container import Footer, V2Container
from quiver.format.file.v21 import bitpacking as bp
from quiver.format.file.v21 import byte_stream_split as bss
from quiver.format.file.v21 import fsst, general, rle
from quiver.format.file.v21.compression import (
    Chunks,
    binary_array,
    decode_block,
    decode_chunks,
    decode_fullzip_fixed,
    decode_fullzip_variable,
    take_dictionary,
)
from quiver.format.io.store import open_store
from quiver.format.proto import encodings_v2_1_pb2 as pb
from quiver.format.proto import file2_pb2

pytestmark = pytest.mark.compat


# -- reading pylance pages -------------------------------------------------------------------
@dataclass
class Page:
    layout: pb.PageLayout
    buffers: list[np.ndarray]
    rows: int


def write_pages(
    tmp_path, column: pa.Array, version: str, metadata: dict | None = None, **kw
) -> list[Page]:
    """Write `column` as the only column of a pylance dataset; return its pages."""
    field = pa.field("c", column.type, metadata=metadata)
    path = str(tmp_path / f"ds{version}")
    lance.write_dataset(
        pa.table([column], schema=pa.schema([field])), path, data_storage_version=version, **kw
    )
    (file,) = glob.glob(path + "/data/*.lance")
    store = open_store(os.path.dirname(file))
    container = V2Container(store.open(os.path.basename(file)), file)
    pages = []
    for p in container.column(0).pages:
        ref = container.resolve(p.encoding, "page")
        assert ref.type_url.endswith("lance.encodings21.PageLayout")
        bufs = [np.frombuffer(bytes(b), dtype=np.uint8) for b in container.read_ranges(p.buffers)]
        pages.append(Page(pb.PageLayout.FromString(ref.value), bufs, p.length))
    return pages


@dataclass
class MiniBlockPage:
    rep: Chunks | None
    defs: Chunks | None
    values: list[Chunks]


def parse_miniblock(page: Page) -> MiniBlockPage:
    """Split a mini-block page's chunk data into per-buffer `Chunks` (test-local parser)."""
    mb = page.layout.mini_block_layout
    large = mb.has_large_chunk
    meta = page.buffers[0].view(np.uint32 if large else np.uint16).astype(np.int64)
    data = page.buffers[1]
    has_rep, has_def = mb.HasField("rep_compression"), mb.HasField("def_compression")
    nbuf = int(mb.num_buffers)
    remaining = int(mb.num_items)
    cols: dict[str, list[list[int]]] = {}
    pos = 0
    for i, word in enumerate(meta):
        chunk_bytes = ((int(word) >> 4) + 1) * 8
        last = i == len(meta) - 1
        nvals = remaining if last else 1 << (int(word) & 15)
        remaining -= nvals
        cur = pos
        fields = 1 + has_rep + has_def
        head = data[cur : cur + 2 * fields].view(np.uint16).astype(np.int64)
        cur += 2 * fields
        vsz = data[cur : cur + (4 if large else 2) * nbuf].view(np.uint32 if large else np.uint16)
        cur += (4 if large else 2) * nbuf
        cur = (cur + 7) // 8 * 8
        sizes = []
        names = []
        if has_rep:
            sizes.append(int(head[1]))
            names.append("rep")
        if has_def:
            sizes.append(int(head[1 + has_rep]))
            names.append("def")
        sizes += [int(s) for s in vsz]
        names += [f"v{k}" for k in range(nbuf)]
        for name, size in zip(names, sizes, strict=True):
            count = int(head[0]) if name in ("rep", "def") else nvals
            cols.setdefault(name, []).append([cur, size, count])
            cur = (cur + size + 7) // 8 * 8
        assert cur <= pos + chunk_bytes
        pos += chunk_bytes
    assert pos == len(data) and remaining == 0

    def chunks(name: str) -> Chunks | None:
        if name not in cols:
            return None
        a = np.array(cols[name], dtype=np.int64)
        return Chunks(data, a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy())

    return MiniBlockPage(chunks("rep"), chunks("def"), [chunks(f"v{k}") for k in range(nbuf)])


def decode_page_values(page: Page) -> pa.Array:
    """The visible values of one mini-block page (dictionary pages resolved)."""
    mb = page.layout.mini_block_layout
    parsed = parse_miniblock(page)
    values = decode_chunks(mb.value_compression, parsed.values, "test page")
    if mb.HasField("dictionary"):
        items = decode_block(
            mb.dictionary, page.buffers[2], int(mb.num_dictionary_items), "test dict"
        )
        values = items.take(values)
    return values


def physical(column: pa.Array) -> pa.Array:
    """The physical form the decoders return for a non-null, non-nested column."""
    t = column.type
    if pa.types.is_boolean(t):
        return column
    if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t):
        return column.cast(pa.large_binary())
    width = t.bit_width
    return pa.Array.from_buffers(
        pa.uint8() if width == 8 else getattr(pa, f"uint{width}")(), len(column), column.buffers()
    )


def encoding_kinds(enc: pb.CompressiveEncoding) -> list[str]:
    """Variant names of an encoding tree, outermost first."""
    kind = enc.WhichOneof("compression")
    inner = getattr(enc, kind)
    out = [kind]
    for name in ("values", "indices", "items", "offsets"):
        if (
            hasattr(inner, name)
            and inner.HasField(name)
            and isinstance(getattr(inner, name), pb.CompressiveEncoding)
        ):
            out += encoding_kinds(getattr(inner, name))
    return out


def check_column(tmp_path, column: pa.Array, version: str, expect: str, **kw) -> list[Page]:
    """Write with pylance, decode every page, compare with the column; `expect` must occur in
    the pages' value encodings (dictionary items included)."""
    pages = write_pages(tmp_path, column, version, **kw)
    got = pa.concat_arrays([decode_page_values(p) for p in pages])
    assert got.equals(physical(column))
    kinds = set()
    for p in pages:
        mb = p.layout.mini_block_layout
        kinds.update(encoding_kinds(mb.value_compression))
        if mb.HasField("dictionary"):
            kinds.add("dictionary")
            kinds.update(encoding_kinds(mb.dictionary))
    assert expect in kinds, kinds
    return pages


# -- Flat and Variable -----------------------------------------------------------------------
@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_flat_random_ints(tmp_path, version):
    rng = np.random.default_rng(1)
    col = pa.array(rng.integers(-(2**62), 2**62, 5000), pa.int64())
    check_column(tmp_path, col, version, "flat")


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_flat_bools(tmp_path, version):
    rng = np.random.default_rng(2)
    col = pa.array(rng.random(10_001) < 0.3)
    check_column(tmp_path, col, version, "flat")


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_variable_strings(tmp_path, version):
    col = pa.array([f"v{i}é" if i % 7 else "" for i in range(2000)])
    check_column(tmp_path, col, version, "variable")


def test_variable_block_and_offsets_checks():
    data = np.frombuffer(
        np.array([32, 20, 0, 2, 5], np.uint32).tobytes() + b"hello", dtype=np.uint8
    )
    got = decode_block(
        pb.CompressiveEncoding(
            variable=pb.Variable(offsets=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=32)))
        ),
        data,
        2,
        "blk",
    )
    assert got.to_pylist() == [b"he", b"llo"]
    bad = data.copy()
    bad[12] = 99  # second offset beyond the bytes
    with pytest.raises(CorruptFileError, match="blk"):
        decode_block(
            pb.CompressiveEncoding(
                variable=pb.Variable(
                    offsets=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=32))
                )
            ),
            bad,
            2,
            "blk",
        )
    rle_offsets = pb.CompressiveEncoding(
        variable=pb.Variable(
            offsets=pb.CompressiveEncoding(
                inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=32)
            )
        )
    )
    with pytest.raises(UnsupportedFeatureError, match="inline_bitpacking"):
        decode_block(rle_offsets, data, 2, "blk")


# -- bit-packing -----------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_inline_bitpacking_sequential(tmp_path, version):
    col = pa.array(np.arange(5000) * 3 - 7, pa.int64())
    check_column(tmp_path, col, version, "inline_bitpacking")


def test_inline_bitpacking_int8_int16(tmp_path):
    rng = np.random.default_rng(3)
    col = pa.array(rng.integers(0, 20, 3000), pa.int8())
    check_column(tmp_path / "a", col, "2.1", "inline_bitpacking")
    col = pa.array(rng.integers(0, 3000, 3000), pa.int16())
    check_column(tmp_path / "b", col, "2.1", "inline_bitpacking")


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_random_floats(tmp_path, version):
    rng = np.random.default_rng(4)
    check_column(tmp_path / "a", pa.array(rng.random(5000)), version, "inline_bitpacking")
    col = pa.array(rng.random(5000).astype(np.float32))
    check_column(tmp_path / "b", col, version, "inline_bitpacking")


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_outofline_def_levels(tmp_path, version):
    """Nullable ints: def levels OutOfLineBitpacking{16, Flat(1)}; compare levels and values."""
    rng = np.random.default_rng(5)
    n = 9000
    vals = rng.integers(0, 1 << 40, n)
    mask = rng.random(n) < 0.25
    col = pa.array(vals, pa.int64(), mask=mask)
    pages = write_pages(tmp_path, col, version)
    defs, values = [], []
    for p in pages:
        mb = p.layout.mini_block_layout
        assert encoding_kinds(mb.def_compression) == ["out_of_line_bitpacking", "flat"]
        parsed = parse_miniblock(p)
        defs.append(decode_chunks(mb.def_compression, [parsed.defs], "defs").to_numpy())
        values.append(decode_page_values(p))
    np.testing.assert_array_equal(np.concatenate(defs), mask.astype(np.uint16))
    got = pa.concat_arrays(values).to_numpy().view(np.int64)
    np.testing.assert_array_equal(got[~mask], vals[~mask])


# -- dictionary, RLE -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("card", "scale", "dict_kind"),
    [
        (1000, 1, "inline_bitpacking"),
        (1500, 7919, "out_of_line_bitpacking"),
        (1000, -7919, "general"),
    ],
)
def test_dictionary_low_cardinality_ints(tmp_path, card, scale, dict_kind):
    rng = np.random.default_rng(6)
    col = pa.array(rng.integers(0, card, 40_000) * scale, pa.int64())
    pages = check_column(tmp_path, col, "2.2", "dictionary")
    assert pages[0].layout.mini_block_layout.dictionary.HasField(dict_kind)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_dictionary_low_cardinality_strings(tmp_path, version):
    rng = np.random.default_rng(7)
    words = np.array(["alpha", "beta", "γάμμα", "", "delta-delta-delta", "ε"], dtype=object)
    col = pa.array(words[rng.integers(0, len(words), 5000)].tolist())
    check_column(tmp_path, col, version, "dictionary")


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_rle_long_runs(tmp_path, version):
    rng = np.random.default_rng(8)
    col = pa.array(
        np.repeat(rng.integers(-(2**40), 2**40, 60), rng.integers(1, 900, 60)), pa.int64()
    )
    check_column(tmp_path, col, version, "rle")


def test_rle_constant_21(tmp_path):
    check_column(tmp_path, pa.array(np.full(3000, 7, np.int32)), "2.1", "rle")


# -- FSST, general compression, byte-stream-split --------------------------------------------
@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_fsst_short_strings(tmp_path, version):
    rng = np.random.default_rng(9)
    suffix = ["", "ÿ", "\x00", "ü€", "😀", "x" * 40]
    col = pa.array(
        [f"value-{i}-{suffix[i % 6]}" if i % 11 else "" for i in rng.permutation(20_000)]
    )
    check_column(tmp_path, col, version, "fsst")


@pytest.mark.parametrize(
    ("scheme", "typ", "version"),
    [
        ("zstd", pa.int64(), "2.2"),
        ("lz4", pa.int64(), "2.1"),
        ("zstd", pa.string(), "2.2"),
        ("lz4", pa.string(), "2.1"),
    ],
)
def test_general_compression(tmp_path, scheme, typ, version):
    rng = np.random.default_rng(10)
    if typ == pa.string():
        col = pa.array([f"v{i % 97}-{i}" for i in range(3000)])
    else:
        col = pa.array(rng.integers(0, 2**60, 5000), typ)
    md = {"lance-encoding:compression": scheme}
    pages = write_pages(tmp_path, col, version, metadata=md)
    got = pa.concat_arrays([decode_page_values(p) for p in pages])
    assert got.equals(physical(col))
    assert "general" in encoding_kinds(pages[0].layout.mini_block_layout.value_compression)


@pytest.mark.parametrize("typ", [pa.float32(), pa.float64()])
def test_byte_stream_split(tmp_path, typ):
    rng = np.random.default_rng(11)
    col = pa.array(rng.random(5000) * 1000, typ)
    md = {"lance-encoding:compression": "zstd", "lance-encoding:bss": "on"}
    pages = write_pages(tmp_path, col, "2.2", metadata=md)
    kinds = encoding_kinds(pages[0].layout.mini_block_layout.value_compression)
    assert kinds[:2] == ["general", "byte_stream_split"]
    got = pa.concat_arrays([decode_page_values(p) for p in pages])
    assert got.equals(physical(col))


# -- fixed-size lists, packed structs --------------------------------------------------------
def physical_fsl(col: pa.FixedSizeListArray) -> pa.Array:
    items = col.values
    phys = pa.Array.from_buffers(pa.uint32(), len(items), items.buffers()[:2])
    return pa.FixedSizeListArray.from_arrays(phys, col.type.list_size)


@pytest.mark.parametrize("nullable_items", [False, True])
def test_fixed_size_list_miniblock(tmp_path, nullable_items):
    rng = np.random.default_rng(12)
    mask = rng.random(4000) < 0.2 if nullable_items else None
    col = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.random(4000).astype(np.float32), mask=mask), 4
    )
    pages = write_pages(tmp_path, col, "2.2")
    enc = pages[0].layout.mini_block_layout.value_compression
    assert enc.fixed_size_list.has_validity == nullable_items
    got = pa.concat_arrays([decode_page_values(p) for p in pages])
    assert got.equals(physical_fsl(col))
    assert got.values.null_count == (int(mask.sum()) if nullable_items else 0)


def fullzip_values(page: Page) -> pa.Array:
    """Values of a full-zip page without rep/def levels (test-local parser)."""
    fz = page.layout.full_zip_layout
    assert fz.bits_rep == 0 and fz.bits_def == 0
    data = page.buffers[0]
    if fz.WhichOneof("details") == "bits_per_value":
        return decode_fullzip_fixed(fz.value_compression, data, page.rows, "fz")
    index = page.buffers[1]
    width = len(index) // (page.rows + 1)
    starts = index.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width])
    starts = starts.astype(np.int64)
    lw = fz.bits_per_offset // 8
    lengths = np.array(
        [int.from_bytes(data[s : s + lw].tobytes(), "little") for s in starts[:-1]], np.int64
    )
    np.testing.assert_array_equal(starts[:-1] + lw + lengths, starts[1:])
    keep = np.concatenate(
        [np.arange(s + lw, e) for s, e in zip(starts[:-1], starts[1:], strict=True)]
    )
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return decode_fullzip_variable(fz.value_compression, offsets, data[keep], "fz")


@pytest.mark.parametrize(("nullable_items", "version"), [(False, "2.1"), (True, "2.2")])
def test_fixed_size_list_fullzip(tmp_path, nullable_items, version):
    rng = np.random.default_rng(13)
    n = 128 * 300
    mask = rng.random(n) < 0.2 if nullable_items else None
    col = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.random(n).astype(np.float32), mask=mask), 128
    )
    (page,) = write_pages(tmp_path, col, version)
    assert page.layout.WhichOneof("layout") == "full_zip_layout"
    assert fullzip_values(page).equals(physical_fsl(col))


def test_packed_struct(tmp_path):
    rng = np.random.default_rng(14)
    x = pa.array(rng.integers(-(2**31), 2**31, 3000), pa.int32())
    y = pa.array(rng.random(3000))
    col = pa.StructArray.from_arrays([x, y], names=["x", "y"])
    pages = write_pages(tmp_path, col, "2.2", metadata={"lance-encoding:packed": "true"})
    assert pages[0].layout.mini_block_layout.value_compression.HasField("packed_struct")
    got = pa.concat_arrays([decode_page_values(p) for p in pages])
    assert got.field("0").equals(physical(x)) and got.field("1").equals(physical(y))


# -- full-zip strings ------------------------------------------------------------------------
def test_fullzip_fsst_long_strings(tmp_path):
    col = pa.array([(f"long string {i} ü " * (20 + i % 13)) if i % 5 else "" for i in range(400)])
    pages = write_pages(tmp_path, col, "2.2")
    assert all(p.layout.full_zip_layout.value_compression.HasField("fsst") for p in pages)
    got = pa.concat_arrays([fullzip_values(p) for p in pages])
    assert got.equals(physical(col))


def test_fullzip_general_huge_values(tmp_path):
    rng = np.random.default_rng(15)
    words = np.array([b"lorem", b"ipsum", b"dolor", b"\xff\x00", b"sit"], dtype=object)
    col = pa.array([b" ".join(words[rng.integers(0, 5, 9000)]) for _ in range(6)], pa.binary())
    pages = write_pages(tmp_path, col, "2.2")
    kinds = {p.layout.full_zip_layout.value_compression.WhichOneof("compression") for p in pages}
    assert kinds == {"general"}, kinds
    got = pa.concat_arrays([fullzip_values(p) for p in pages])
    assert got.equals(physical(col))


# -- encoders: byte-exact against pylance ----------------------------------------------------
def test_inline_encode_matches_pylance_bytes(tmp_path):
    """Re-encoding pylance's decoded chunks at pylance's widths gives pylance's exact bytes."""
    rng = np.random.default_rng(16)
    col = pa.array(np.cumsum(rng.integers(0, 40, 6000)), pa.int64())
    (page,) = write_pages(tmp_path, col, "2.1")
    parsed = parse_miniblock(page).values[0]
    words = page.buffers[1].view(np.uint64)
    widths = words[parsed.starts // 8].astype(np.int64)
    assert len(set(widths.tolist())) > 1  # several width groups
    vals = np.zeros(len(parsed.counts) * 1024, np.uint64)
    vals[: len(col)] = col.to_numpy().view(np.uint64)
    data, sizes = bp.inline_encode(vals.reshape(-1, 1024), 64, widths)
    np.testing.assert_array_equal(sizes, parsed.sizes)
    expected = np.concatenate(
        [page.buffers[1][s : s + n] for s, n in zip(parsed.starts, parsed.sizes, strict=True)]
    )
    np.testing.assert_array_equal(data, expected)
    auto, _ = bp.inline_encode(vals.reshape(-1, 1024), 64)
    np.testing.assert_array_equal(auto, expected)  # pylance also picks the narrowest widths


def test_outofline_and_rle_encode_match_pylance_bytes(tmp_path):
    rng = np.random.default_rng(17)
    n = 9000
    mask = rng.random(n) < 0.3
    col = pa.array(np.repeat(rng.integers(0, 2**40, 30), 300), pa.int64(), mask=mask)
    pages = write_pages(tmp_path, col, "2.1")
    assert any(p.layout.mini_block_layout.value_compression.HasField("rle") for p in pages)
    for page in pages:
        mb = page.layout.mini_block_layout
        parsed = parse_miniblock(page)
        d = parsed.defs
        defs = decode_chunks(mb.def_compression, [d], "defs").to_numpy()
        width = mb.def_compression.out_of_line_bitpacking.values.flat.bits_per_value
        data, sizes = bp.outofline_encode_chunks(defs, d.counts, width, 16)
        np.testing.assert_array_equal(sizes, d.sizes)
        expected = np.concatenate(
            [page.buffers[1][s : s + k] for s, k in zip(d.starts, d.sizes, strict=True)]
        )
        np.testing.assert_array_equal(data, expected)
        if mb.value_compression.HasField("rle"):
            v, lens = parsed.values
            values = decode_chunks(mb.value_compression, parsed.values, "v").to_numpy()
            breaks = np.cumsum(v.counts)[:-1]
            run_values, run_lengths = rle.encode(values, breaks)
            np.testing.assert_array_equal(rle.runs_per_chunk(run_lengths, v.counts), lens.sizes)
            got_lens = np.concatenate(
                [page.buffers[1][s : s + k] for s, k in zip(lens.starts, lens.sizes, strict=True)]
            )
            np.testing.assert_array_equal(run_lengths, got_lens)


# -- encoders: round trips -------------------------------------------------------------------
def chunks_of(data: np.ndarray, sizes: np.ndarray, counts: np.ndarray) -> Chunks:
    sizes = np.asarray(sizes, np.int64)
    return Chunks(data, np.cumsum(sizes) - sizes, sizes, np.asarray(counts, np.int64))


def flat(bits: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=bits))


word_bits = st.sampled_from([8, 16, 32, 64])


@st.composite
def chunked_values(draw, max_chunks: int = 5):
    bits = draw(word_bits)
    counts = draw(st.lists(st.integers(0, 2100), min_size=1, max_size=max_chunks))
    width = draw(st.integers(0, bits))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    top = (1 << width) - 1
    vals = (
        rng.integers(0, top + 1, sum(counts), dtype=np.uint64)
        if width
        else np.zeros(sum(counts), np.uint64)
    )
    if width and draw(st.booleans()):
        vals[:: max(1, len(vals) // 7)] = top  # hit the widest value
    return bits, width, np.array(counts, np.int64), vals.astype(bp.dtype_of(bits))


@settings(max_examples=60, deadline=None)
@given(chunked_values())
def test_fastlanes_round_trip(case):
    bits, width, counts, vals = case
    blocks = -(-len(vals) // 1024) or 1
    grid = np.zeros(blocks * 1024, vals.dtype)
    grid[: len(vals)] = vals
    grid = grid.reshape(blocks, 1024)
    packed = bp.pack(grid, width, bits)
    assert packed.shape == (blocks, width * 1024 // bits)
    np.testing.assert_array_equal(bp.unpack(packed, width, bits), grid)
    assert (bp.bit_widths(grid, bits) <= width).all()
    data, sizes = bp.inline_encode(grid, bits)
    counts = np.full(blocks, 1024)
    counts[-1] = len(vals) - 1024 * (blocks - 1) if len(vals) else 0
    enc = pb.CompressiveEncoding(
        inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=bits)
    )
    got = decode_chunks(enc, [chunks_of(data, sizes, counts)], "rt").to_numpy()
    np.testing.assert_array_equal(got, vals)


@settings(max_examples=60, deadline=None)
@given(chunked_values())
def test_outofline_round_trip(case):
    bits, width, counts, vals = case
    data, sizes = bp.outofline_encode_chunks(vals, counts, width, bits)
    enc = pb.CompressiveEncoding(
        out_of_line_bitpacking=pb.OutOfLineBitpacking(
            uncompressed_bits_per_value=bits, values=flat(width)
        )
    )
    got = decode_chunks(enc, [chunks_of(data, sizes, counts)], "rt").to_numpy()
    np.testing.assert_array_equal(got, vals)
    # The single-buffer encoder agrees with the batched one.
    one = bp.outofline_encode(vals[: counts[0]], width, bits)
    assert one == data[: sizes[0]].tobytes()


@settings(max_examples=60, deadline=None)
@given(chunked_values(), st.integers(1, 600))
def test_rle_round_trip(case, run):
    bits, _, counts, vals = case
    vals = np.repeat(vals[:: max(1, run // 3)], run)[: counts.sum()]
    counts = counts.copy()
    counts[-1] += len(vals) - counts.sum()
    run_values, run_lengths = rle.encode(vals, np.cumsum(counts)[:-1])
    assert run_lengths.max(initial=1) <= 255 and run_lengths.min(initial=1) >= 1
    runs = rle.runs_per_chunk(run_lengths, counts)
    width = bits // 8
    enc = pb.CompressiveEncoding(rle=pb.Rle(values=flat(bits), run_lengths=flat(8)))
    got = decode_chunks(
        enc,
        [
            chunks_of(run_values.view(np.uint8), runs * width, counts),
            chunks_of(run_lengths, runs, counts),
        ],
        "rt",
    ).to_numpy()
    np.testing.assert_array_equal(got, vals)
    data, sizes = rle.encode_blocks(vals, counts)  # block form: one framed buffer per chunk
    got = decode_chunks(enc, [chunks_of(data, sizes, counts)], "rt").to_numpy()
    np.testing.assert_array_equal(got, vals)
    if len(counts) == 1:
        np.testing.assert_array_equal(decode_block(enc, data, len(vals), "rt").to_numpy(), vals)


@settings(max_examples=40, deadline=None)
@given(chunked_values(), st.sampled_from([32, 64]))
def test_byte_stream_split_round_trip(case, bits):
    _, _, counts, vals = case
    raw = np.random.default_rng(len(vals)).integers(0, 256, counts.sum() * bits // 8, np.uint8)
    split = bss.split_chunks(raw, counts, bits // 8)
    if len(counts) == 1:
        assert split.tobytes() == bss.split(raw, bits // 8)
    enc = pb.CompressiveEncoding(byte_stream_split=pb.ByteStreamSplit(values=flat(bits)))
    got = decode_chunks(enc, [chunks_of(split, counts * bits // 8, counts)], "rt")
    np.testing.assert_array_equal(np.frombuffer(got.buffers()[1], np.uint8), raw)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.binary(max_size=40) | st.text(max_size=10).map(str.encode), max_size=300),
    st.sampled_from([32, 64]),
    st.sampled_from([general.LZ4, general.ZSTD, None]),
    st.integers(1, 4),
)
def test_variable_general_round_trip(strings, bits, scheme, nchunks):
    col = pa.array(strings, pa.large_binary())
    offsets = np.frombuffer(col.buffers()[1], np.int64)[: len(col) + 1]
    data = np.frombuffer(col.buffers()[2] or b"", np.uint8)
    cuts = np.sort(np.random.default_rng(len(strings)).integers(0, len(strings) + 1, nchunks - 1))
    counts = np.diff(np.concatenate([[0], cuts, [len(strings)]]))
    out, sizes = encode_variable_chunks(offsets, data, counts, bits)
    enc = pb.CompressiveEncoding(variable=pb.Variable(offsets=flat(bits)))
    ch = chunks_of(out, sizes, counts)
    if scheme is not None:
        parts = [
            general.compress(out[s : s + n], scheme)
            for s, n in zip(ch.starts, ch.sizes, strict=True)
        ]
        for p, s, n in zip(parts, ch.starts, ch.sizes, strict=True):
            assert general.decompress(p, scheme, "rt") == out[s : s + n].tobytes()
        sizes = np.array([len(p) for p in parts], np.int64)
        ch = chunks_of(np.frombuffer(b"".join(parts), np.uint8), sizes, counts)
        enc = pb.CompressiveEncoding(
            general=pb.General(compression=pb.BufferCompression(scheme=scheme), values=enc)
        )
    assert decode_chunks(enc, [ch], "rt").equals(col)
    block = np.frombuffer(encode_variable_block(offsets, data, bits), np.uint8)
    venc = pb.CompressiveEncoding(variable=pb.Variable(offsets=flat(bits)))
    assert decode_block(venc, block, len(col), "rt").equals(col)


# -- FSST with escapes -----------------------------------------------------------------------
def fsst_table(symbols: list[bytes]) -> bytes:
    head = (0x46535354 << 32) | (1 << 24) | len(symbols)
    body = b"".join(s.ljust(8, b"\0") for s in symbols) + bytes(len(s) for s in symbols)
    return (head.to_bytes(8, "little") + body).ljust(8 + 256 * 8 + 256, b"\0")


def fsst_compress(symbols: list[bytes], s: bytes) -> bytes:
    """Greedy longest-match FSST compression (test-local, slow)."""
    out, i = bytearray(), 0
    while i < len(s):
        best = max(
            (c for c, sym in enumerate(symbols) if s.startswith(sym, i)),
            key=lambda c: len(symbols[c]),
            default=None,
        )
        if best is None:
            out += bytes([255, s[i]])
            i += 1
        else:
            out.append(best)
            i += len(symbols[best])
    return bytes(out)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=8), min_size=0, max_size=30, unique=True),
    st.lists(st.binary(max_size=30), max_size=40),
)
def test_fsst_decode_round_trip(symbols, strings):
    table = fsst_table(symbols)
    comp = [fsst_compress(symbols, s) for s in strings]
    col = pa.array(comp, pa.large_binary())
    offsets = np.frombuffer(col.buffers()[1], np.int64)[: len(col) + 1]
    data = np.frombuffer(col.buffers()[2] or b"", np.uint8)
    enc = pb.CompressiveEncoding(
        fsst=pb.Fsst(
            symbol_table=table,
            values=pb.CompressiveEncoding(variable=pb.Variable(offsets=flat(32))),
        )
    )
    assert decode_fullzip_variable(enc, offsets, data, "fz").to_pylist() == strings
    out, sizes = encode_variable_chunks(offsets, data, np.array([len(strings)]), 32)
    got = decode_chunks(enc, [chunks_of(out, sizes, [len(strings)])], "mb")
    assert got.to_pylist() == strings
    # outputs past the whole-output bound start at a guess (3 bytes a code) and grow where a
    # string may not fit, decoding resuming at that string
    with mock.patch.object(fsst, "_WHOLE_OUTPUT", 0):
        got = decode_chunks(enc, [chunks_of(out, sizes, [len(strings)])], "mb")
    assert got.to_pylist() == strings


_CODE = st.one_of(st.integers(0, 254), st.tuples(st.just(255), st.integers(0, 255)))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=8), min_size=1, max_size=255),
    st.lists(st.lists(_CODE, max_size=40), min_size=1, max_size=12),
    st.sampled_from(["valid", "unused code", "trailing escape"]),
    st.integers(0, 1 << 16),
)
def test_fsst_code_runs_with_escapes_and_corruption(symbols, strings, damage, at):
    """Codes are decoded eight at a time where none is an escape or unused: any code sequence
    (symbols, escapes of any byte, 0xff literals) decodes as the code-by-code reference, and an
    unused code or a string's last byte escaping nothing is refused wherever it falls."""
    n = len(symbols)
    coded = [
        [c % n if isinstance(c, int) else c for c in codes] if n < 255 else codes
        for codes in strings
    ]
    if damage == "unused code" and n < 255:
        codes = coded[at % len(coded)]
        codes += [0] * 16  # long enough for the bad code to fall in a run of eight
        codes.insert(at % (len(codes) + 1), n + at % (255 - n))
    elif damage == "trailing escape":
        coded[at % len(coded)].append(255)
    else:
        damage = "valid"
    raw = [
        b"".join(bytes(c) if isinstance(c, tuple) else bytes([c]) for c in codes) for codes in coded
    ]
    col = pa.array(raw, pa.large_binary())
    offsets = np.frombuffer(col.buffers()[1], np.int64)[: len(col) + 1]
    data = np.frombuffer(col.buffers()[2] or b"", np.uint8)
    enc = pb.CompressiveEncoding(
        fsst=pb.Fsst(
            symbol_table=fsst_table(symbols),
            values=pb.CompressiveEncoding(variable=pb.Variable(offsets=flat(32))),
        )
    )
    out, sizes = encode_variable_chunks(offsets, data, np.array([len(raw)]), 32)
    chunks = [chunks_of(out, sizes, [len(raw)])]
    if damage == "valid":
        want = [
            b"".join(bytes([c[1]]) if isinstance(c, tuple) else symbols[c] for c in codes)
            for codes in coded
        ]
        assert decode_chunks(enc, chunks, "mb").to_pylist() == want
        assert decode_fullzip_variable(enc, offsets, data, "fz").to_pylist() == want
    else:
        match = "ends with an escape" if damage == "trailing escape" else "FSST code"
        with pytest.raises(CorruptFileError, match=match):
            decode_chunks(enc, chunks, "mb")
        with pytest.raises(CorruptFileError, match=match):
            decode_fullzip_variable(enc, offsets, data, "fz")


# -- corrupt and unsupported input -----------------------------------------------------------
def inline(bits: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(
        inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=bits)
    )


def one_chunk(raw: bytes, count: int) -> list[Chunks]:
    return [chunks_of(np.frombuffer(raw, np.uint8), [len(raw)], [count])]


def test_corrupt_bitpacking():
    good, sizes = bp.inline_encode(np.arange(1024, dtype=np.uint32).reshape(1, 1024), 32)
    assert decode_chunks(inline(32), one_chunk(good.tobytes(), 1024), "w").to_numpy()[-1] == 1023
    wide = good.copy()
    wide[0] = 33
    with pytest.raises(CorruptFileError, match="page 7.*width 33"):
        decode_chunks(inline(32), one_chunk(wide.tobytes(), 1024), "page 7")
    with pytest.raises(CorruptFileError, match="too short"):
        decode_chunks(inline(32), one_chunk(good[:-4].tobytes(), 1024), "w")
    with pytest.raises(CorruptFileError, match="more than 1024"):
        decode_chunks(inline(32), one_chunk(good.tobytes(), 1025), "w")
    ool = pb.CompressiveEncoding(
        out_of_line_bitpacking=pb.OutOfLineBitpacking(
            uncompressed_bits_per_value=16, values=flat(3)
        )
    )
    with pytest.raises(CorruptFileError, match="out-of-line"):
        decode_chunks(ool, one_chunk(bytes(100), 2000), "w")
    with pytest.raises(CorruptFileError, match="Flat.*chunk 0"):
        decode_chunks(flat(64), one_chunk(bytes(15), 2), "w")
    with pytest.raises(CorruptFileError, match="outside"):
        decode_chunks(
            flat(8),
            [Chunks(np.zeros(8, np.uint8), np.array([4]), np.array([8]), np.array([8]))],
            "w",
        )


def test_corrupt_variable_rle_dictionary():
    var = pb.CompressiveEncoding(variable=pb.Variable(offsets=flat(32)))
    raw = np.array([12, 13, 99], np.uint32).tobytes() + b"abcd"
    with pytest.raises(CorruptFileError, match="outside"):
        decode_chunks(var, one_chunk(raw, 2), "w")
    raw = np.array([12, 14, 13], np.uint32).tobytes() + b"abcd"
    with pytest.raises(CorruptFileError, match="decrease|outside"):
        decode_chunks(var, one_chunk(raw, 2), "w")
    enc = pb.CompressiveEncoding(rle=pb.Rle(values=flat(8), run_lengths=flat(8)))
    bufs = one_chunk(b"\x01\x02", 10) + one_chunk(b"\x05\x04", 10)
    with pytest.raises(CorruptFileError, match="cover 9 values, not 10"):
        decode_chunks(enc, bufs, "w")
    bufs = one_chunk(b"\x01\x02", 10) + one_chunk(b"\x0a", 10)
    with pytest.raises(CorruptFileError, match="2 run values but 1"):
        decode_chunks(enc, bufs, "w")
    with pytest.raises(CorruptFileError, match="index 5"):
        take_dictionary(pa.array([1, 2, 3]), pa.array([0, 5], pa.uint32()), "w")


def test_corrupt_fsst_and_general():
    symbols = [b"ab", b"c"]
    enc = pb.CompressiveEncoding(
        fsst=pb.Fsst(
            symbol_table=fsst_table(symbols),
            values=pb.CompressiveEncoding(variable=pb.Variable(offsets=flat(32))),
        )
    )
    for raw, match in [(b"\x00\x05", "code 5"), (b"\x00\xff", "ends with an escape")]:
        with pytest.raises(CorruptFileError, match=match):
            decode_fullzip_variable(enc, np.array([0, 2]), np.frombuffer(raw, np.uint8), "w")
    bad = pb.CompressiveEncoding()
    bad.CopyFrom(enc)
    bad.fsst.symbol_table = b"\0" * 2312
    with pytest.raises(CorruptFileError, match="magic"):
        decode_fullzip_variable(bad, np.array([0, 1]), np.zeros(1, np.uint8), "w")
    bad.fsst.symbol_table = b"\0" * 10
    with pytest.raises(CorruptFileError, match="2312"):
        decode_fullzip_variable(bad, np.array([0, 1]), np.zeros(1, np.uint8), "w")
    for scheme in (general.LZ4, general.ZSTD):
        packed = general.compress(b"hello world" * 50, scheme)
        assert general.decompress(packed, scheme, "w") == b"hello world" * 50
        with pytest.raises(CorruptFileError, match="w"):
            general.decompress(packed[:-5], scheme, "w")
        with pytest.raises(CorruptFileError):
            general.decompress(b"\xff\xff\xff\x7f" + packed[4:], scheme, "w")
    bare = zstandard.ZstdCompressor().compress(b"bare frame")
    assert general.decompress(bare, general.ZSTD, "w") == b"bare frame"


def test_unsupported_encodings_are_named():
    future = pb.CompressiveEncoding.FromString(b"\x72\x00")  # field 14 = Range (2.3)
    with pytest.raises(UnsupportedFeatureError, match="Range"):
        decode_chunks(future, one_chunk(b"", 0), "w")
    future = pb.CompressiveEncoding.FromString(b"\x7a\x00")  # field 15 = Delta (2.3)
    with pytest.raises(UnsupportedFeatureError, match="Delta"):
        decode_block(future, np.zeros(0, np.uint8), 0, "w")
    vps = pb.CompressiveEncoding(variable_packed_struct=pb.VariablePackedStruct())
    with pytest.raises(UnsupportedFeatureError, match="VariablePackedStruct"):
        decode_chunks(vps, one_chunk(b"", 0), "w")
    with pytest.raises(UnsupportedFeatureError, match="VariablePackedStruct"):
        decode_fullzip_variable(vps, np.array([0]), np.zeros(0, np.uint8), "w")
    with pytest.raises(CorruptFileError, match="no compression"):
        decode_chunks(pb.CompressiveEncoding(), one_chunk(b"", 0), "w")


def test_fullzip_fixed_bounds_and_constant():
    fsl = pb.CompressiveEncoding(
        fixed_size_list=pb.FixedSizeList(items_per_value=3, has_validity=True, values=flat(16))
    )
    row = bytes([0b101]) + np.array([1, 2, 3], np.uint16).tobytes()
    got = decode_fullzip_fixed(fsl, np.frombuffer(row * 2, np.uint8), 2, "w")
    assert got.to_pylist() == [[1, None, 3], [1, None, 3]]
    with pytest.raises(CorruptFileError, match="need 14"):
        decode_fullzip_fixed(fsl, np.frombuffer(row, np.uint8), 2, "w")
    const = pb.CompressiveEncoding(constant=pb.Constant(value=b"\x07\x00"))
    assert decode_block(const, np.zeros(0, np.uint8), 3, "w").to_pylist() == [7, 7, 7]


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_rle_levels_block_form(tmp_path, version):
    """Long null runs: 2.2 compresses each chunk's def levels with block-form Rle."""
    rng = np.random.default_rng(18)
    n = 20_000
    mask = np.zeros(n, bool)
    for s in range(0, n, 2000):
        mask[s : s + 700] = True
    col = pa.array(rng.integers(0, 2**60, n), pa.int64(), mask=mask)
    pages = write_pages(tmp_path, col, version)
    defs = []
    for page in pages:
        mb = page.layout.mini_block_layout
        d = parse_miniblock(page).defs
        level = decode_chunks(mb.def_compression, [d], "defs").to_numpy()
        defs.append(level)
        if mb.def_compression.HasField("rle"):
            data, sizes = rle.encode_blocks(level, d.counts)  # byte-exact re-encode
            np.testing.assert_array_equal(sizes, d.sizes)
            expected = np.concatenate(
                [page.buffers[1][s : s + k] for s, k in zip(d.starts, d.sizes, strict=True)]
            )
            np.testing.assert_array_equal(data, expected)
    np.testing.assert_array_equal(np.concatenate(defs), mask.astype(np.uint16))
    if version == "2.2":
        assert pages[0].layout.mini_block_layout.def_compression.HasField("rle")


def test_rle_constant_page_levels(tmp_path):
    """All-null list items: a 2.2 constant page whose def levels are one Rle block."""
    n = 3000
    lens = np.ones(n, int)
    lens[1500:1600] = 0
    lens[2000:2500] = 3
    offs = np.concatenate([[0], np.cumsum(lens)])
    mask = np.zeros(n, bool)
    mask[100:700] = True
    col = pa.ListArray.from_arrays(
        pa.array(offs, pa.int32()), pa.nulls(int(offs[-1]), pa.int64()), mask=pa.array(mask)
    )
    (page,) = write_pages(tmp_path, col, "2.2")
    cl = page.layout.constant_layout
    assert cl.def_compression.HasField("rle")
    defs = decode_block(cl.def_compression, page.buffers[1], cl.num_def_values, "c").to_numpy()
    expected = np.where(lens == 0, 3, 1).repeat(np.maximum(lens, 1))
    expected[np.repeat(mask, np.maximum(lens, 1))] = 2
    np.testing.assert_array_equal(defs, expected)
    rep = decode_block(cl.rep_compression, page.buffers[0], cl.num_rep_values, "c").to_numpy()
    starts = np.cumsum(np.maximum(lens, 1)) - np.maximum(lens, 1)
    np.testing.assert_array_equal(np.flatnonzero(rep == 1), starts)


# -- wide and odd fixed widths ---------------------------------------------------------------
def raw_values(arr: pa.Array) -> np.ndarray:
    width = arr.type.bit_width // 8
    return np.frombuffer(arr.buffers()[1], np.uint8)[: len(arr) * width]


@pytest.mark.parametrize(
    ("make", "metadata", "expect"),
    [
        (
            lambda r: pa.array(
                [decimal.Decimal(int(x)) / 100 for x in r.integers(-(10**9), 10**9, 3000)],
                pa.decimal128(20, 2),
            ),
            None,
            "flat",
        ),
        (
            lambda r: pa.array(
                [decimal.Decimal(int(x)) for x in r.integers(-(10**9), 10**9, 3000)],
                pa.decimal256(40, 0),
            ),
            None,
            "flat",
        ),
        (
            lambda r: pa.array(
                [bytes(r.integers(0, 256, 5, dtype=np.uint8)) for _ in range(3000)], pa.binary(5)
            ),
            None,
            "flat",
        ),
        (lambda r: pa.array(r.random(3000).astype(np.float16)), None, "inline_bitpacking"),
        # The "fsst" compression hint on numbers: byte-stream-split without general compression.
        (
            lambda r: pa.array(np.arange(3000) * 0.5),
            {"lance-encoding:compression": "fsst"},
            "byte_stream_split",
        ),
    ],
)
def test_fixed_width_varieties(tmp_path, make, metadata, expect):
    col = make(np.random.default_rng(19))
    pages = write_pages(tmp_path, col, "2.2", metadata=metadata)
    kinds = {k for p in pages for k in encoding_kinds(p.layout.mini_block_layout.value_compression)}
    assert expect in kinds, kinds
    got = pa.concat_arrays([decode_page_values(p) for p in pages])
    if col.type.bit_width not in (8, 16, 32, 64):
        assert got.type == pa.binary(col.type.bit_width // 8)
    np.testing.assert_array_equal(raw_values(got), raw_values(col))


# -- list levels -----------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_list_levels(tmp_path, version):
    """list<int64> with null and empty lists: rep/def levels (out-of-line bit-packed, chunks
    with more than 1024 entries) equal the levels computed from the column."""
    rng = np.random.default_rng(20)
    n = 6000
    lens = rng.integers(0, 4, n)
    nulls = rng.random(n) < 0.05
    offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    items = pa.array(rng.integers(0, 1000, int(offs[-1])), pa.int64())
    col = pa.ListArray.from_arrays(pa.array(offs), items, mask=pa.array(nulls))
    entries = np.where(nulls | (lens == 0), 1, lens)
    rep = np.zeros(int(entries.sum()), np.uint16)
    rep[np.cumsum(entries) - entries] = 1
    defs = np.repeat(np.where(nulls, 1, np.where(lens == 0, 2, 0)), entries).astype(np.uint16)
    got_rep, got_def, got_vals = [], [], []
    for page in write_pages(tmp_path, col, version):
        mb = page.layout.mini_block_layout
        parsed = parse_miniblock(page)
        assert parsed.rep.counts.max() > 1024
        got_rep.append(decode_chunks(mb.rep_compression, [parsed.rep], "rep").to_numpy())
        got_def.append(decode_chunks(mb.def_compression, [parsed.defs], "def").to_numpy())
        got_vals.append(decode_page_values(page))
    np.testing.assert_array_equal(np.concatenate(got_rep), rep)
    np.testing.assert_array_equal(np.concatenate(got_def), defs)
    visible = np.repeat(~nulls & (lens > 0), entries)
    vals = pa.concat_arrays(got_vals).to_numpy()
    expected = col.flatten().to_numpy()  # the items of the non-null lists
    assert len(vals) == int(visible.sum())
    np.testing.assert_array_equal(vals.view(np.int64), expected)


# -- fuzzing: corrupt chunks never escape as anything but CorruptFileError ---------------------
def mutate(rng: np.random.Generator, b: Chunks) -> Chunks:
    data, starts, sizes, counts = b.data.copy(), b.starts.copy(), b.sizes.copy(), b.counts.copy()
    kind = rng.integers(0, 4)
    if kind == 0:
        idx = rng.integers(0, len(data), 4)
        data[idx] = rng.integers(0, 256, 4)
    else:
        arr = (sizes, counts, starts)[kind - 1]
        i = rng.integers(0, len(arr))
        arr[i] = max(0, arr[i] + rng.integers(-20, 20))
    return Chunks(data, starts, sizes, counts)


@pytest.mark.parametrize(
    ("col", "version", "metadata"),
    [
        (pa.array(np.arange(3000) * 3), "2.1", None),
        (pa.array([f"value-{i}-ü" for i in range(20_000)]), "2.2", None),
        (pa.array(np.repeat(np.arange(10), 300)), "2.1", None),
        (pa.array(np.arange(20_000), mask=np.arange(20_000) % 2000 < 700), "2.2", None),
        (
            pa.array([f"v{i % 97}" for i in range(3000)]),
            "2.1",
            {"lance-encoding:compression": "lz4"},
        ),
        (
            pa.array(np.random.default_rng(1).random(3000)),
            "2.2",
            {"lance-encoding:compression": "zstd", "lance-encoding:bss": "on"},
        ),
    ],
    ids=["inline", "fsst", "rle", "rle-levels", "lz4", "bss-zstd"],
)
def test_fuzzed_chunks_raise_corrupt_file_error(tmp_path, col, version, metadata):
    rng = np.random.default_rng(21)
    page = write_pages(tmp_path, col, version, metadata=metadata)[0]
    mb = page.layout.mini_block_layout
    parsed = parse_miniblock(page)
    targets = [(mb.value_compression, parsed.values)]
    if parsed.defs is not None:
        targets.append((mb.def_compression, [parsed.defs]))
    for enc, bufs in targets:
        for _ in range(150):
            try:
                decode_chunks(enc, [mutate(rng, b) for b in bufs], "fuzz")
            except CorruptFileError as e:
                assert "fuzz" in str(e)


def test_fuzzed_encodings_raise_typed_errors():
    """Nonsense widths and dimensions in the encoding tree are refused, not obeyed."""
    data = np.zeros(64, np.uint8)
    ch = one_chunk(data.tobytes(), 4)
    cases = [
        flat(0),
        flat(7),
        flat(2**40),
        inline(7),
        inline(128),
        pb.CompressiveEncoding(
            fixed_size_list=pb.FixedSizeList(items_per_value=2**62, values=flat(32))
        ),
        pb.CompressiveEncoding(fixed_size_list=pb.FixedSizeList(items_per_value=0, values=flat(8))),
        pb.CompressiveEncoding(
            general=pb.General(compression=pb.BufferCompression(scheme=7), values=flat(8))
        ),
        pb.CompressiveEncoding(rle=pb.Rle(values=flat(24), run_lengths=flat(8))),
        pb.CompressiveEncoding(packed_struct=pb.PackedStruct(bits_per_value=[3], values=flat(3))),
        pb.CompressiveEncoding(byte_stream_split=pb.ByteStreamSplit(values=flat(16))),
    ]
    for enc in cases:
        for call in (
            lambda e: decode_chunks(e, ch, "w"),
            lambda e: decode_block(e, data, 4, "w"),
            lambda e: decode_fullzip_fixed(e, data, 4, "w"),
        ):
            with pytest.raises((CorruptFileError, UnsupportedFeatureError)):
                call(enc)


# -- FSST encoder, read back by pylance ------------------------------------------------------
def replace_page(src: str, dst: str, layout: pb.PageLayout, buffers: list[bytes], rows: int):
    """Copy the one-column, one-page Lance file `src` to `dst` with its page replaced
    (test-local container writer: page buffers, global buffers, column metadata, tables,
    footer)."""
    store = open_store(os.path.dirname(src))
    c = V2Container(store.open(os.path.basename(src)), src)
    (pos, size) = c._column_table[0]
    (raw_cm,) = c.read_ranges([(int(pos), int(size))])
    cm = file2_pb2.ColumnMetadata.FromString(bytes(raw_cm))
    type_url = any_pb2.Any.FromString(cm.pages[0].encoding.direct.encoding).type_url
    globals_ = c.read_ranges(c.global_buffers)
    out = bytearray()

    def put(blob: bytes) -> tuple[int, int]:
        out.extend(b"H" * (-len(out) % 64))
        at = len(out)
        out.extend(blob)
        return at, len(blob)

    placed = [put(b) for b in buffers]
    gbo = [put(bytes(b)) for b in globals_]
    del cm.pages[:]
    page = cm.pages.add()
    page.buffer_offsets.extend([p for p, _ in placed])
    page.buffer_sizes.extend([s for _, s in placed])
    page.length = rows
    page.encoding.direct.encoding = any_pb2.Any(
        type_url=type_url, value=layout.SerializeToString()
    ).SerializeToString()
    meta_start = len(out)
    cm_at = (len(out), len(cm.SerializeToString()))
    out.extend(cm.SerializeToString())
    cmo_pos = len(out)
    out.extend(np.array([cm_at], "<u8").tobytes())
    gbo_pos = len(out)
    out.extend(np.array(gbo, "<u8").tobytes())
    foot = c.footer
    out.extend(Footer(meta_start, cmo_pos, gbo_pos, len(gbo), 1, foot.major, foot.minor).pack())
    with open(dst, "wb") as f:
        f.write(bytes(out))


def miniblock_page_bytes(value_chunks: np.ndarray, sizes: np.ndarray, counts: np.ndarray):
    """2.2 chunk metadata + chunk data for one value buffer per chunk and no levels."""
    meta, data, pos = [], bytearray(), 0
    for i, (size, count) in enumerate(zip(sizes.tolist(), counts.tolist(), strict=True)):
        head = np.array([0], "<u2").tobytes() + np.array([size], "<u4").tobytes()
        chunk = head + b"\xfe" * (-len(head) % 8)
        chunk += value_chunks[pos : pos + size].tobytes()
        chunk += b"\xfe" * (-len(chunk) % 8)
        pos += size
        log = 0 if i == len(counts) - 1 else int(np.log2(count))
        meta.append(((len(chunk) // 8 - 1) << 4) | log)
        data += chunk
    return np.array(meta, "<u4").tobytes(), bytes(data)


def test_fsst_encoder_output_read_by_pylance(tmp_path):
    rng = np.random.default_rng(22)
    words = np.array(["alpha", "beta", "γάμμα", "", "delta-delta", "😀", "x"], dtype=object)
    strings = ["".join(words[rng.integers(0, 7, rng.integers(0, 9))]) for _ in range(20_000)]
    strings[7] = "\xff\x00 rare bytes \u0394"  # bytes without symbols get escaped
    col = pa.array(strings)
    write_pages(tmp_path, col, "2.2")
    (src,) = glob.glob(str(tmp_path / "ds2.2" / "data" / "*.lance"))
    big = col.cast(pa.large_binary())
    offsets = np.frombuffer(big.buffers()[1], np.int64)[: len(big) + 1]
    data = np.frombuffer(big.buffers()[2], np.uint8)
    raw_table = fsst.build_table(offsets, data)
    comp_offsets, comp = fsst.compress(fsst.parse_table(raw_table, "t"), offsets, data)
    assert len(comp) < 0.6 * len(data)
    counts = np.full(len(strings) // 256 + 1, 256)
    counts[-1] = len(strings) - 256 * (len(counts) - 1)
    chunks, sizes = encode_variable_chunks(comp_offsets, comp, counts, 32)
    meta, chunk_data = miniblock_page_bytes(chunks, sizes, counts)
    layout = pb.PageLayout()
    mb = layout.mini_block_layout
    mb.value_compression.fsst.symbol_table = raw_table
    mb.value_compression.fsst.values.variable.offsets.flat.bits_per_value = 32
    mb.layers.append(pb.REPDEF_ALL_VALID_ITEM)
    mb.num_buffers, mb.num_items, mb.has_large_chunk = 1, len(strings), True
    dst = str(tmp_path / "ours.lance")
    replace_page(src, dst, layout, [meta, chunk_data], len(strings))
    got = lance.file.LanceFileReader(dst).read_all().to_table()
    assert got.column(0).combine_chunks().equals(col)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.binary(max_size=60) | st.text(max_size=30).map(str.encode), max_size=200),
    st.integers(1, 3),
)
def test_fsst_encode_round_trip(strings, rounds):
    col = pa.array(strings, pa.large_binary())
    offsets = np.frombuffer(col.buffers()[1], np.int64)[: len(col) + 1]
    data = np.frombuffer(col.buffers()[2] or b"", np.uint8)
    raw = fsst.build_table(offsets, data, rounds)
    table = fsst.parse_table(raw, "t")
    comp_offsets, comp = fsst.compress(table, offsets, data)
    out_offsets, out = fsst.decode(table, comp_offsets, comp, "t")
    assert binary_array(out_offsets, out).equals(col)


@pytest.mark.parametrize("scheme", [general.LZ4, general.ZSTD])
@pytest.mark.parametrize("inner", ["bss", "variable"])
def test_general_encoders_read_by_pylance(tmp_path, scheme, inner):
    """Chunks compressed with `general.compress` (byte-stream-split floats or Variable
    strings inside) form a page pylance reads back."""
    rng = np.random.default_rng(23)
    n, per_chunk = 5000, 512
    if inner == "bss":
        col = pa.array(np.round(rng.random(n) * 100, 2))
    else:
        col = pa.array([f"row {i % 300} ü" * (i % 4) for i in range(n)])
    write_pages(tmp_path, col, "2.2")
    (src,) = glob.glob(str(tmp_path / "ds2.2" / "data" / "*.lance"))
    counts = np.full(-(-n // per_chunk), per_chunk)
    counts[-1] = n - per_chunk * (len(counts) - 1)
    layout = pb.PageLayout()
    mb = layout.mini_block_layout
    g = mb.value_compression.general
    g.compression.scheme = scheme
    if inner == "bss":
        raw = bss.split_chunks(col.to_numpy().view(np.uint8), counts, 8)
        sizes = counts * 8
        g.values.byte_stream_split.values.flat.bits_per_value = 64
    else:
        big = col.cast(pa.large_binary())
        offsets = np.frombuffer(big.buffers()[1], np.int64)[: n + 1]
        raw, sizes = encode_variable_chunks(
            offsets, np.frombuffer(big.buffers()[2], np.uint8), counts, 32
        )
        g.values.variable.offsets.flat.bits_per_value = 32
    starts = np.cumsum(sizes) - sizes
    parts = [general.compress(raw[s : s + k], scheme) for s, k in zip(starts, sizes, strict=True)]
    meta, chunk_data = miniblock_page_bytes(
        np.frombuffer(b"".join(parts), np.uint8), np.array([len(p) for p in parts]), counts
    )
    mb.layers.append(pb.REPDEF_ALL_VALID_ITEM)
    mb.num_buffers, mb.num_items, mb.has_large_chunk = 1, n, True
    dst = str(tmp_path / "ours.lance")
    replace_page(src, dst, layout, [meta, chunk_data], n)
    got = lance.file.LanceFileReader(dst).read_all().to_table()
    assert got.column(0).combine_chunks().equals(col)
