"""The C kernels of the 2.1/2.2 codecs (`format._kernels`) through their wrappers.

Hostile values (negative, overflowing, out of range) must raise CorruptFileError with the
reader's messages; the copying kernels, called directly with ranges nobody validated, must
refuse them (ValueError) rather than read or write out of bounds; long loops must let other
threads run.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from variable_layouts import encode_variable_chunks

from quiver.format import _kernels
from quiver.format.errors import CorruptFileError
from quiver.format.file.v21 import bitpacking as bp
from quiver.format.file.v21 import byte_stream_split as bss
from quiver.format.file.v21 import compression as cz
from quiver.format.file.v21 import fsst, rle
from quiver.format.file.v21.gather import check_ranges, copy_ranges, gather, read_uint

I64 = np.int64
MAX = 2**63 - 1
HOSTILE = [-1, -(2**63), MAX, 2**62, 2**32]


def i64(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=I64)


# -- gathers -----------------------------------------------------------------------------------
@given(
    st.sampled_from([np.uint8, np.uint16, np.uint32, np.uint64]),
    st.integers(0, 200),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 50)), max_size=20),
)
@settings(max_examples=100, deadline=None)
def test_gather_matches_numpy(dtype, size, ranges):
    data = np.arange(size).astype(dtype)
    starts = i64(*(min(s, size) for s, _ in ranges))
    lengths = i64(*(min(n, size - min(s, size)) for s, n in ranges))
    out = gather(data, starts, lengths, "w", "range")
    expect = [data[s : s + n] for s, n in zip(starts, lengths, strict=True)]
    np.testing.assert_array_equal(out, np.concatenate(expect) if expect else data[:0])
    assert out.dtype == data.dtype


@pytest.mark.parametrize("start", HOSTILE + [97, 100])
@pytest.mark.parametrize("length", HOSTILE + [3, 4])
def test_gather_hostile_ranges(start, length):
    data = np.zeros(100, dtype=np.uint8)
    if 0 <= start and 0 <= length and start + length <= 100:
        assert len(gather(data, i64(0, start), i64(1, length), "w", "r")) == 1 + length
        return
    msg = f"corrupt file w: r #1 spans \\[{start}, {start + length}\\) outside a 100-byte buffer"
    with pytest.raises(CorruptFileError, match=msg):
        gather(data, i64(0, start), i64(1, length), "w", "r")
    with pytest.raises(CorruptFileError, match=msg):
        check_ranges(100, i64(0, start), i64(1, length), "w", "r")


def test_read_uint():
    data = np.arange(16, dtype=np.uint8)
    assert read_uint(data, i64(0, 13), 3, "w", "u").tolist() == [0x020100, 0x0F0E0D]
    assert read_uint(data, i64(8), 8, "w", "u").tolist() == [0x0F0E0D0C0B0A0908]
    for pos in (14, -1, MAX, -(2**63)):
        with pytest.raises(CorruptFileError, match=f"u #1 spans \\[{pos}, {pos + 3}\\)"):
            read_uint(data, i64(0, pos), 3, "w", "u")


# -- bit-packing -------------------------------------------------------------------------------
def test_inline_decode_hostile():
    words, sizes = bp.inline_encode(np.arange(2048, dtype=np.uint32).reshape(2, 1024), 32)
    words = words.view(np.uint32).copy()
    starts = np.cumsum(sizes // 4) - sizes // 4
    sizes = sizes // 4
    ok = bp.inline_decode(words, starts, sizes, i64(1024, 5), 32, "w")
    np.testing.assert_array_equal(ok, np.r_[np.arange(1024), np.arange(1024, 1029)])
    for counts in (i64(1024, 1025), i64(-1, 3), i64(MAX, 0)):
        with pytest.raises(CorruptFileError, match="more than 1024 values"):
            bp.inline_decode(words, starts, sizes, counts, 32, "w")
    for bad_start in (-1, len(words), MAX, -(2**63)):
        with pytest.raises(CorruptFileError, match="outside its buffer"):
            bp.inline_decode(words, i64(0, bad_start), sizes, i64(1, 1), 32, "w")
    with pytest.raises(CorruptFileError, match="outside its buffer"):
        bp.inline_decode(words, starts, i64(sizes[0], 0), i64(1, 1), 32, "w")
    for width in (33, 2**32 - 1):  # a huge width word must not wrap to a small one
        hostile = words.copy()
        hostile[starts[1]] = width
        with pytest.raises(CorruptFileError, match=f"chunk 1 has width {width} > 32"):
            bp.inline_decode(hostile, starts, sizes, i64(1, 1), 32, "w")
    with pytest.raises(CorruptFileError, match="chunk 0 .* is too short for width"):
        bp.inline_decode(words, starts, i64(sizes[0] - 1, sizes[1]), i64(1, 1), 32, "w")


def test_outofline_decode_hostile():
    vals = np.arange(3000, dtype=np.uint16) % 1000
    data, sizes = bp.outofline_encode_chunks(vals, i64(2000, 1000), 10, 16)
    words = data.view(np.uint16)
    wsizes = sizes // 2
    wstarts = np.cumsum(wsizes) - wsizes
    out = bp.outofline_decode(words, wstarts, wsizes, i64(2000, 1000), 10, 16, "w")
    np.testing.assert_array_equal(out, vals)
    msg = "buffer of chunk 1 is too short or out of bounds"
    for counts in (i64(2000, 1025), i64(2000, -1), i64(2000, MAX), i64(2000, 2**62)):
        with pytest.raises(CorruptFileError, match=msg):
            bp.outofline_decode(words, wstarts, wsizes, counts, 10, 16, "w")
    for start, size in ((-1, wsizes[1]), (MAX, wsizes[1]), (wstarts[1], MAX), (0, -1)):
        with pytest.raises(CorruptFileError, match=msg):
            bp.outofline_decode(
                words, i64(0, start), i64(wsizes[0], size), i64(2000, 1), 10, 16, "w"
            )
    for width in (-1, 17):
        with pytest.raises(CorruptFileError, match="out-of-line bit-packing width"):
            bp.outofline_decode(words, wstarts, wsizes, i64(2000, 1000), width, 16, "w")


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
def test_unpack_every_width(bits):
    """Every width of every word size against the numpy packer (8/16-bit words are unpacked
    64 bits at a time: nothing may leak across lanes)."""
    dt = bp.dtype_of(bits)
    rng = np.random.default_rng(bits)
    raw = rng.integers(0, 2**63, (2, 1024), dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    for width in range(bits + 1):
        mask = (1 << width) - 1
        vals = raw.astype(dt) & dt(mask)
        vals[0, :64] = mask  # all ones next to zeros: any bit crossing a lane shows
        vals[0, 64:128] = 0
        np.testing.assert_array_equal(bp.unpack(bp.pack(vals, width, bits), width, bits), vals)


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
def test_unpack_misaligned_words(bits):
    """Words at an odd address (a view into a byte buffer) decode through an aligned copy."""
    dt = bp.dtype_of(bits)
    vals = (np.arange(1024, dtype=np.uint64) * 2654435761 % (1 << min(bits, 20))).astype(dt)
    packed = bp.pack(vals.reshape(1, 1024), bits, bits).reshape(-1)
    raw = np.zeros(packed.nbytes + 1, dtype=np.uint8)
    raw[1:] = packed.view(np.uint8)
    odd = raw[1:].view(dt)
    np.testing.assert_array_equal(bp.unpack(odd.reshape(1, -1), bits, bits)[0], vals)


# -- run-length, byte-stream-split ------------------------------------------------------------
@given(
    st.sampled_from([np.uint8, np.uint16, np.uint32, np.uint64, "V3"]),
    st.lists(st.lists(st.integers(1, 255), max_size=6), min_size=1, max_size=5),
)
@settings(max_examples=60, deadline=None)
def test_rle_decode_matches_repeat(dtype, chunks):
    lengths = np.array([n for c in chunks for n in c], dtype=np.uint8)
    size = len(lengths) * np.dtype(dtype).itemsize
    values = np.frombuffer(np.arange(size, dtype=np.uint8).tobytes(), dtype=dtype)
    runs = i64(*(len(c) for c in chunks))
    counts = i64(*(sum(c) for c in chunks))
    out = rle.decode(values, lengths, runs, counts, "w")
    np.testing.assert_array_equal(out, np.repeat(values, lengths.astype(I64)))


def test_rle_decode_hostile():
    values, lengths = np.arange(4, dtype=np.uint32), np.array([2, 3, 4, 5], dtype=np.uint8)
    for runs, counts in (((2, 3), (5, 9)), ((-1, 5), (5, 9)), ((MAX, 1), (5, 9)), ((1, 2), (2, 7))):
        with pytest.raises(CorruptFileError, match="RLE chunks hold"):
            rle.decode(values, lengths, i64(*runs), i64(*counts), "w")
    with pytest.raises(CorruptFileError, match="chunk 1 cover 4 values, not 9"):
        rle.decode(values, lengths, i64(2, 1), i64(5, 9), "w")
    with pytest.raises(CorruptFileError, match="chunk 1 cover 9 values, not -9"):
        rle.decode(values, lengths, i64(2, 2), i64(5, -9), "w")


def test_bss_join_round_trip():
    vals = np.arange(30, dtype=np.uint64) * 0x0101010101
    counts = i64(10, 0, 20)
    split = bss.split_chunks(vals, counts, 8)
    joined = bss.join_chunks(split, np.cumsum(counts * 8) - counts * 8, counts, 8)
    np.testing.assert_array_equal(joined.view(np.uint64), vals)


# -- Flat(1), Variable, FSST ------------------------------------------------------------------
@given(st.lists(st.lists(st.booleans(), max_size=40), min_size=1, max_size=6))
@settings(max_examples=60, deadline=None)
def test_flat_bits_matches_numpy(chunks):
    packed = [np.packbits(np.array(c, dtype=bool), bitorder="little") for c in chunks]
    sizes = i64(*(len(p) + 1 for p in packed))  # a pad byte after each bitmap
    data = np.concatenate([np.r_[p, 0xFF].astype(np.uint8) for p in packed])
    ch = cz.Chunks(data, np.cumsum(sizes) - sizes, sizes, i64(*(len(c) for c in chunks)))
    expect = [b for c in chunks for b in c]
    assert cz.flat_chunks(1, ch, "w").to_pylist() == expect


def _variable(strings: list[bytes], bits: int = 32) -> cz.Chunks:
    offsets = np.cumsum([0, *map(len, strings)]).astype(I64)
    raw = np.frombuffer(b"".join(strings), dtype=np.uint8)
    data, sizes = encode_variable_chunks(offsets, raw, i64(len(strings)), bits)
    return cz.Chunks(data.copy(), i64(0), sizes, i64(len(strings)))


def test_variable_hostile_counts_and_offsets():
    ch = _variable([b"ab", b"", b"cde"])
    assert cz.variable_chunks(32, ch, "w").to_pylist() == [b"ab", b"", b"cde"]
    for count in (MAX, 2**62, 2**61 + 1):  # (count + 1) * 4 must not wrap into range
        with pytest.raises(CorruptFileError, match="offsets of chunk 0 has"):
            cz.variable_chunks(32, cz.Chunks(ch.data, ch.starts, ch.sizes, i64(count)), "w")
    with pytest.raises(CorruptFileError, match="negative value count"):
        cz.variable_chunks(32, cz.Chunks(ch.data, ch.starts, ch.sizes, i64(-1)), "w")
    for start in (-1, MAX, 2**62):
        with pytest.raises(CorruptFileError, match="Variable offsets #0 spans"):
            cz.variable_chunks(32, cz.Chunks(ch.data, i64(start), ch.sizes, ch.counts), "w")
    for off in (0, 15, 2**32 - 1):  # below the offsets, past the chunk
        bad = ch.data.copy()
        bad[4:8] = np.frombuffer(off.to_bytes(4, "little"), dtype=np.uint8)
        with pytest.raises(CorruptFileError, match="point outside its buffer"):
            cz.variable_chunks(32, cz.Chunks(bad, ch.starts, ch.sizes, ch.counts), "w")
    bad = ch.data.copy()
    bad[8] = 16  # string 1 ends before it starts: reported after the bounds checks
    with pytest.raises(CorruptFileError, match="Variable offsets decrease"):
        cz.variable_chunks(32, cz.Chunks(bad, ch.starts, ch.sizes, ch.counts), "w")


def test_variable_bytes_outside_data_with_huge_chunk_size():
    """Offsets up to a chunk size near 2**63: start + last must not wrap past the check."""
    ch = _variable([b"ab", b"cd"], bits=64)
    bad = ch.data.copy()
    last = MAX - 5
    bad[16:24] = np.frombuffer(last.to_bytes(8, "little"), dtype=np.uint8)
    hostile = cz.Chunks(bad, i64(8), i64(MAX), ch.counts)
    data = np.r_[np.zeros(8, dtype=np.uint8), bad]
    with pytest.raises(CorruptFileError, match="Variable bytes #0 spans"):
        cz.variable_chunks(64, cz.Chunks(data, hostile.starts, hostile.sizes, ch.counts), "w")


def test_fsst_resumes_when_the_output_guess_is_short():
    table_raw = fsst.build_table(i64(0, 16), np.frombuffer(b"abcdefghabcdefgh", np.uint8))
    table = fsst.parse_table(table_raw, "w")
    strings = [b"abcdefgh" * 50, b"", b"xyz\xff", b"abcdefgh"]
    offsets = np.cumsum([0, *map(len, strings)]).astype(I64)
    data = np.frombuffer(b"".join(strings), dtype=np.uint8)
    coffs, codes = fsst.compress(table, offsets, data)
    out_offsets, out = fsst.decode(table, coffs, codes, "w")
    assert out.tobytes() == data.tobytes()
    np.testing.assert_array_equal(out_offsets, offsets)


def _short_table(singles: int, pairs: list[tuple[int, int]]) -> fsst.SymbolTable:
    """A table of one-byte symbols 0..singles-1, then two-byte ones (pairs: codes past 127
    when there are many), as FSST learns for high-entropy strings."""
    symbols, lengths = np.zeros((256, 8), np.uint8), np.zeros(256, np.int8)
    for code, sym in enumerate([bytes([b]) for b in range(singles)] + [bytes(p) for p in pairs]):
        symbols[code, : len(sym)] = list(sym)
        lengths[code] = len(sym)
    return fsst.SymbolTable(True, symbols, lengths, singles + len(pairs))


def _fsst_chunks(
    table: fsst.SymbolTable, strings: list[bytes], per_chunk: int, bits: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The strings FSST-compressed into mini-block Variable chunks of `per_chunk` strings:
    (data, starts, counts, code bytes)."""
    offsets = np.cumsum([0, *map(len, strings)]).astype(I64)
    coffs, codes = fsst.compress(table, offsets, np.frombuffer(b"".join(strings), np.uint8))
    n = len(strings)
    counts = np.array([min(per_chunk, n - k) for k in range(0, n, per_chunk)], dtype=I64)
    data, sizes = encode_variable_chunks(coffs, codes, counts, bits)
    return data, np.cumsum(sizes) - sizes, counts, len(codes)


@given(
    st.lists(st.lists(st.integers(0, 23), max_size=160).map(bytes), min_size=1, max_size=120),
    st.integers(1, 40),
    st.sampled_from([32, 64]),
    st.integers(0, 230),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=80, deadline=None)
def test_fsst_tables_of_one_and_two_byte_symbols_decode_whole(
    strings: list[bytes], per_chunk: int, bits: int, n_pairs: int, seed: int
) -> None:
    """Such tables decode 32 codes at a time across string ends where the CPU can: strings of
    every length, empty ones, escapes (bytes 20-23 have no symbol), codes past 127, chunk
    tails, both offset widths; the same bytes and offsets as the strings compressed."""
    rng = np.random.default_rng(seed)
    every_pair = [(a, b) for a in range(20) for b in range(20)]
    pairs = [every_pair[i] for i in rng.choice(len(every_pair), n_pairs, replace=False)]
    table = _short_table(20, pairs)
    data, starts, counts, n_codes = _fsst_chunks(table, strings, per_chunk, bits)
    offsets, out = fsst.decode_chunks(table, data, starts, counts, bits // 8, n_codes, "w")
    assert out.tobytes() == b"".join(strings)
    np.testing.assert_array_equal(offsets, np.cumsum([0, *map(len, strings)]))


def test_fsst_blocks_stop_at_bad_codes_and_trailing_escapes():
    table = _short_table(10, [(1, 2), (3, 4)])  # codes 12..254 unused
    strings = [bytes(range(10)) * 9 + bytes([1, 2]) * 5] * 6
    data, starts, counts, n_codes = _fsst_chunks(table, strings, 6, 32)
    codes_at, codes_end = data[:8].view(np.uint32).tolist()  # the first string's, 77 codes
    for at, code, match in [(codes_at + 50, 12, "FSST code 12 beyond the 12 symbols"),
                            (codes_end - 1, 255, "ends with an escape byte")]:  # fmt: skip
        bad = data.copy()
        bad[at] = code
        with pytest.raises(CorruptFileError, match=match):
            fsst.decode_chunks(table, bad, starts, counts, 4, n_codes, "w")


def test_fsst_kernel_resumes_a_chunk_whose_bytes_outgrow_the_output():
    """The kernel stops before a string that may not fit (FULL), even inside a chunk it
    decodes in blocks, and resumes at that string once the output has grown."""
    table = _short_table(20, [(a, b) for a in range(20) for b in range(11)])  # 240 pairs
    rng = np.random.default_rng(5)
    strings = [bytes(rng.integers(0, 20, int(rng.integers(0, 90)))) for _ in range(200)]
    data, starts, counts, _ = _fsst_chunks(table, strings, 70, 32)
    ends = np.zeros(len(strings) + 1, dtype=I64)
    out = np.zeros(_kernels.FSST_SLACK + 64, dtype=np.uint8)
    state, fulls = np.zeros(4, dtype=I64), 0
    while True:
        status, need = _kernels.fsst_expand(
            data, starts, counts, 4, table.decoding, ends, out, state
        )
        if status != _kernels.FULL:
            break
        fulls += 1
        assert int(state[3]) == ends[int(state[2]) + int(state[1])]  # whole strings kept
        out.resize(int(state[3]) + need + 100 + _kernels.FSST_SLACK, refcheck=False)
    assert status == _kernels.OK and fulls > 10
    assert out[: int(state[3])].tobytes() == b"".join(strings)
    np.testing.assert_array_equal(ends, np.cumsum([0, *map(len, strings)]))


def _guarded(data: np.ndarray) -> np.ndarray:
    """`data` copied to end where an unreadable page starts: a kernel that reads past it
    faults (Linux; elsewhere a plain copy)."""
    page = mmap.PAGESIZE
    body = -(-len(data) // page) * page
    region = mmap.mmap(-1, body + page)
    out = np.frombuffer(region, np.uint8)[body - len(data) : body]  # (keeps `region` mapped)
    out[:] = data
    if sys.platform.startswith("linux"):
        addr = ctypes.addressof(ctypes.c_char.from_buffer(region)) + body
        assert ctypes.CDLL(None).mprotect(ctypes.c_void_p(addr), page, 0) == 0  # PROT_NONE
    return out


@given(st.integers(0, 2**32 - 1), st.sampled_from([4, 8]), st.integers(0, 3000))
@settings(max_examples=300, deadline=None)
def test_fsst_kernel_on_hostile_chunks_reads_nothing_past_the_data(
    seed: int, width: int, room: int
) -> None:
    """Chunks of offsets that decrease, run past the data or past the chunk's last one, with
    unused codes and escapes, through a table of one- and two-byte symbols (blocks of 32 codes
    where the CPU has them): a status or a refusal, and no read past the page data (which ends
    at an unreadable page)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    data = rng.integers(0, 256, n, dtype=np.uint8)
    starts = np.sort(rng.integers(0, n, int(rng.integers(1, 4)))).astype(I64)
    counts = rng.integers(-1, 60, len(starts)).astype(I64)
    for s, c in zip(starts.tolist(), counts.tolist(), strict=True):
        head = (c + 1) * width
        if c < 0 or s + head > n:
            continue
        offs = head + np.sort(rng.integers(0, n - s - head + 1, c + 1))
        mode = rng.random()
        if mode < 0.3:  # one offset anywhere: past the chunk's last, the data, 2**31
            offs[rng.integers(0, c + 1)] = rng.choice([offs[-1] + 40, n - s, 2**31])
        elif mode < 0.6 and c >= 2:  # a run of ends past the last one, rising, inside the data
            k = int(rng.integers(1, c))
            offs[k:c] = np.sort(rng.integers(offs[-1], n - s + 1, c - k))
        data[s : s + head] = offs.astype(f"<u{width}").view(np.uint8)
        codes = data[s + head :]
        codes[rng.random(len(codes)) < 0.95] %= 240  # mostly symbols
    table = _short_table(20, [(a, b) for a in range(20) for b in range(11)])
    ends = np.zeros(int(counts.clip(0).sum()) + 1, dtype=I64)
    out = np.zeros(_kernels.FSST_SLACK + room, dtype=np.uint8)
    state = np.zeros(4, dtype=I64)
    try:
        status, _ = _kernels.fsst_expand(
            _guarded(data), starts, counts, width, table.decoding, ends, out, state
        )
    except ValueError:  # (offsets the kernel will not follow)
        return
    assert status in (_kernels.OK, _kernels.FULL, _kernels.BAD_CODE, _kernels.TRAILING_ESCAPE)


def test_fsst_blocks_stay_inside_the_data_when_an_offset_runs_past_the_chunk_end():
    """String ends past the chunk's last offset (inside the data): the scalar loop decodes
    up to them, and the blocks tried at the next string must not read on from there."""
    head = 5 * 4  # four strings: ends at 10, 500 and 505 codes (past the last), then 20
    offs = np.array([head, head + 10, head + 500, head + 505, head + 20], dtype="<u4")
    data = np.concatenate([offs.view(np.uint8), np.full(510, 3, np.uint8)])
    table = _short_table(20, [(1, 2)])
    state = np.zeros(4, dtype=I64)
    with pytest.raises(ValueError, match="fsst_expand"):
        _kernels.fsst_expand(
            _guarded(data), i64(0), i64(4), 4, table.decoding, np.zeros(5, dtype=I64),
            np.zeros(_kernels.FSST_SLACK + 4096, np.uint8), state,
        )  # fmt: skip


# -- the kernels on their own ------------------------------------------------------------------
def test_copying_kernels_refuse_unvalidated_ranges():
    data = np.arange(64, dtype=np.uint8)
    out = np.zeros(16, dtype=np.uint8)
    cases = [
        lambda: _kernels.copy_ranges(data, i64(60), i64(8), 1, out),
        lambda: _kernels.copy_ranges(data, i64(0), i64(17), 1, out),
        lambda: _kernels.copy_ranges(data, i64(-1), i64(1), 1, out),
        lambda: _kernels.read_uint(data, i64(62), 4, np.zeros(1, np.uint64)),
        lambda: _kernels.rle_expand(data[:2], np.array([9, 9], np.uint8), 1, out),
        lambda: _kernels.bss_join(data, i64(40), i64(7), 4, np.zeros(28, np.uint8)),
        lambda: _kernels.bss_join(data, i64(0), i64(5), 4, out),
        lambda: _kernels.copy_bits(data, i64(63), i64(9), out),
        lambda: _kernels.copy_bits(data, i64(0), i64(129), out),
        lambda: _kernels.variable_gather(data, i64(0), i64(MAX), 4, np.zeros(2, I64), out),
        lambda: _kernels.inline_unpack(
            data.view(np.uint32), i64(3), i64(5), 32, out.view(np.uint32)
        ),
        lambda: _kernels.outofline_unpack(data, i64(0), i64(64), i64(1024), 1, 8, out),
        lambda: _kernels.unpack_blocks(data, 1, 8, np.zeros(2048, np.uint8)),
    ]
    for case in cases:
        with pytest.raises(ValueError):
            case()


def test_kernels_refuse_misaligned_words():
    raw = np.zeros(4096 + 4, dtype=np.uint8)
    words = raw[1:4097].view(np.uint32)
    with pytest.raises(ValueError, match="aligned"):
        _kernels.unpack_blocks(words, 1, 32, np.zeros(1024, np.uint32))


def test_long_kernels_release_the_gil():
    """While kernels run in one thread, another runs Python: with a switch interval longer
    than all the kernels take, that only happens if they let go of the GIL."""
    lengths = np.ones(1 << 24, dtype=np.uint8)
    started = threading.Event()

    def work() -> None:
        started.set()
        # ~1 ms each: well within the switch interval. Few calls: between two, this thread
        # waits for the spinning one to hand the GIL back (up to the half-second interval).
        for _ in range(3):
            _kernels.check_runs(lengths, i64(len(lengths)), i64(len(lengths)))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.5)
    try:
        thread = threading.Thread(target=work)
        thread.start()
        started.wait()
        spins = 0
        while thread.is_alive():
            spins += 1
        thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert spins > 1000


def test_copy_ranges_keeps_dtype():
    data = np.arange(10, dtype=np.uint16)
    out = copy_ranges(data, i64(1, 7), i64(2, 3))
    assert out.dtype == np.uint16 and out.tolist() == [1, 2, 7, 8, 9]
