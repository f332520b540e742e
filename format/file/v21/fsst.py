"""FSST strings of 2.1+ pages (`Fsst{symbol_table, Variable}`): compiled decoding, encoding.

Symbol table (2312 bytes = 8 + 256 * 8 + 256): a u64 LE header
`"FSST" << 32 | encoder_switch << 24 | suffix_lim << 16 | terminator << 8 | n_symbols`, then
`n_symbols` u64 symbols (their LE bytes are the symbol text), then `n_symbols` length bytes,
zero-filled to the full size. In the compressed strings a code byte c < n_symbols emits
`symbol[c][:len[c]]`; 255 is an escape and the next byte is emitted literally. Every string
is compressed on its own. With encoder_switch 0 the strings are stored uncompressed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from quiver.format import _kernels
from quiver.format.errors import CorruptFileError
from quiver.format.file.v21.gather import I64, as_i64

TABLE_SIZE = 8 + 256 * 8 + 256
MAGIC = 0x46535354
ESCAPE = 255


@dataclass(frozen=True)
class SymbolTable:
    """A parsed FSST symbol table: (256, 8) symbol bytes and their lengths."""

    compressed: bool  # the encoder switch: False means strings are stored as-is
    symbols: np.ndarray  # uint8 (256, 8)
    lengths: np.ndarray  # int8 (256,), 0 for unused codes
    n_symbols: int

    @cached_property
    def decoding(self) -> np.ndarray:
        """The table `_kernels.fsst_expand` takes, uint8 (256 * 16,): per code byte its
        symbol's 8 bytes (stored at once whatever the length), then its length at byte 8, 0
        for the escape and unused codes (the kernel splits it into symbols and lengths)."""
        out = np.zeros((256, 16), dtype=np.uint8)
        out[:, :8] = self.symbols
        out[: self.n_symbols, 8] = self.lengths[: self.n_symbols]
        return out.reshape(-1)


def parse_table(raw: bytes, where: str) -> SymbolTable:
    """Parse and validate a symbol table (cached: pages of a column share theirs)."""
    table = _parse_table(bytes(raw))
    if isinstance(table, str):
        raise CorruptFileError(where, table)
    return table


@lru_cache(maxsize=64)
def _parse_table(raw: bytes) -> SymbolTable | str:
    """The table, or why it is corrupt."""
    if len(raw) != TABLE_SIZE:
        return f"FSST symbol table of {len(raw)} bytes (expected {TABLE_SIZE})"
    head = int.from_bytes(raw[:8], "little")
    if head >> 32 != MAGIC:
        return "FSST symbol table has no FSST magic"
    n = head & 0xFF
    if n > 255:
        return f"FSST symbol table with {n} symbols"
    buf = np.frombuffer(raw, dtype=np.uint8)
    symbols = np.zeros((256, 8), dtype=np.uint8)
    symbols[:n] = buf[8 : 8 + 8 * n].reshape(n, 8)
    lengths = np.zeros(256, dtype=np.int8)
    lengths[:n] = buf[8 + 8 * n : 8 + 9 * n]
    if ((lengths[:n] < 1) | (lengths[:n] > 8)).any():
        return "FSST symbol of length outside 1..8"
    return SymbolTable(bool(head >> 24 & 1), symbols, lengths, n)


def decode(
    table: SymbolTable, offsets: np.ndarray, data: np.ndarray, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """Decompress strings `data[offsets[i]:offsets[i+1]]` -> (int64 offsets from 0, bytes)."""
    offsets = np.asarray(offsets, dtype=I64)
    codes = np.ascontiguousarray(data[offsets[0] : offsets[-1]], dtype=np.uint8)
    rel = np.ascontiguousarray(offsets - offsets[0])
    if not table.compressed:
        return rel, codes
    if (np.diff(rel) < 0).any():
        raise CorruptFileError(where, "FSST string offsets decrease")
    # As one mini-block chunk: u64 offsets relative to the chunk, then the codes.
    n = len(rel) - 1
    head = 8 * (n + 1)
    chunk = np.empty(head + len(codes), dtype=np.uint8)
    chunk[:head] = (rel + head).astype("<u8").view(np.uint8)
    chunk[head:] = codes
    one = np.ones(1, dtype=I64)
    return decode_chunks(table, chunk, 0 * one, n * one, 8, len(codes), where)


def decode_chunks(
    table: SymbolTable,
    data: np.ndarray,
    starts: np.ndarray,
    counts: np.ndarray,
    width: int,
    n_codes: int,
    where: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Decompress the strings of mini-block Variable chunks straight from the page `data`
    (uint8): chunk i is `counts[i] + 1` LE offsets of `width` bytes at `starts[i]` (relative
    to it, validated by `compression.check_variable_chunks`), then its codes; `n_codes` code
    bytes in all. Returns (int64 offsets from 0, bytes); saves gathering the codes first.

    The output starts at the decoded size's bound (the codes times the longest symbol) where
    that is at most `_WHOLE_OUTPUT`, else at a guess; when a string may not fit, it grows
    (realloc, a copy) and decoding resumes at that string. Only the bytes written are ever
    touched, and the output shrinks to them in place."""
    if not table.compressed:
        raise ValueError("decode_chunks needs a compressed table")
    data = np.ascontiguousarray(data, dtype=np.uint8)
    starts, counts = as_i64(starts), as_i64(counts)
    out_offsets = np.empty(int(counts.sum()) + 1, dtype=I64)
    out_offsets[0] = 0
    widest = max(int(table.lengths.max()), 1)  # (an escape's two codes make one byte)
    bound = n_codes * widest
    guess = bound if bound <= _WHOLE_OUTPUT else n_codes * min(widest, 3)
    out = np.empty(guess + _SLACK, dtype=np.uint8)
    state = np.zeros(4, dtype=I64)  # resume point: chunk, its string, strings before, bytes out
    decoding = table.decoding
    while True:
        status, need = _kernels.fsst_expand(
            data, starts, counts, width, decoding, out_offsets, out, state
        )
        if status != _kernels.FULL:
            break
        out.resize(max(2 * len(out), int(state[3]) + need + _SLACK), refcheck=False)
    if status == _kernels.BAD_CODE:
        raise CorruptFileError(where, f"FSST code {need} beyond the {table.n_symbols} symbols")
    if status == _kernels.TRAILING_ESCAPE:
        raise CorruptFileError(where, "FSST string ends with an escape byte")
    out.resize(int(state[3]), refcheck=False)  # shrinking keeps the bytes in place
    return out_offsets, out


# Decoding is compiled (`_kernels.fsst_expand`, C): FSST parsing is sequential within a string
# (an escape changes how the next byte reads), which numpy can only emulate with several
# full-size temporaries per code byte.
_SLACK = _kernels.FSST_SLACK  # a symbol is stored as 8 bytes whatever its length
# Outputs up to this bound are made whole at once: text of long repeated symbols decodes to
# 6-8 bytes per code, and a guess of 3 grew twice (two copies and fresh pages each time)
_WHOLE_OUTPUT = 32 << 20


# -- encoding ----------------------------------------------------------------------------------
SAMPLE_BYTES = 1 << 15
_MASKS = np.array([0] + [(1 << (8 * k)) - 1 for k in range(1, 8)] + [2**64 - 1], dtype=np.uint64)


def _windows(data: np.ndarray) -> np.ndarray:
    """uint64 little-endian 8-byte window starting at every byte (zero past the end)."""
    padded = np.concatenate([np.asarray(data, dtype=np.uint8), np.zeros(8, np.uint8)])
    out = np.zeros(len(data), dtype=np.uint64)
    for k in range(8):  # eight vectorised byte planes
        out |= padded[k : k + len(data)].astype(np.uint64) << np.uint64(8 * k)
    return out


def _room(offsets: np.ndarray, n: int) -> np.ndarray:
    """Bytes left in its string from every byte position (so symbols never cross strings)."""
    lengths = np.diff(offsets)
    ends = np.repeat(offsets[1:], lengths)
    return ends - (np.arange(n) + offsets[0])


def _index(table: SymbolTable) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Per symbol length, longest first: (length, sorted symbol keys, their codes)."""
    keys = table.symbols[: table.n_symbols].copy().view(np.uint64).reshape(-1)
    lens = table.lengths[: table.n_symbols].astype(np.int64)
    out = []
    for size in range(8, 0, -1):
        codes = np.flatnonzero(lens == size)
        if len(codes):
            order = np.argsort(keys[codes])
            out.append((size, keys[codes][order], codes[order].astype(np.uint8)))
    return out


def _match_at(
    index: list, windows: np.ndarray, room: np.ndarray, pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Longest symbol matching at positions `pos`: (code, length), length 0 if none."""
    code = np.zeros(len(pos), dtype=np.uint8)
    length = np.zeros(len(pos), dtype=np.int64)
    for size, keys, codes in index:  # longest first: only fill positions still unmatched
        todo = np.flatnonzero((length == 0) & (room[pos] >= size))
        probe = windows[pos[todo]] & _MASKS[size]
        at = np.minimum(np.searchsorted(keys, probe), len(keys) - 1)
        hit = keys[at] == probe
        code[todo[hit]] = codes[at[hit]]
        length[todo[hit]] = size
    return code, length


def _parse(
    table: SymbolTable, rel: np.ndarray, windows: np.ndarray, room: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The greedy parse of every string: (positions where a code starts, its code, its symbol
    length; 0 = escaped byte). Walks all strings at once, one vectorised step per code."""
    index = _index(table)
    nonempty = np.diff(rel) > 0
    frontier, ends = rel[:-1][nonempty], rel[1:][nonempty]
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    while len(frontier):
        code, length = _match_at(index, windows, room, frontier)
        parts.append((frontier, code, length))
        frontier = frontier + np.maximum(length, 1)
        live = frontier < ends
        frontier, ends = frontier[live], ends[live]
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.int64)
    pos, code, length = (np.concatenate(x) for x in zip(*parts, strict=True))
    order = np.argsort(pos, kind="stable")
    return pos[order], code[order], length[order]


def compress(
    table: SymbolTable, offsets: np.ndarray, data: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """FSST-compress strings `data[offsets[i]:offsets[i+1]]` with `table`: greedy longest
    match, bytes without a symbol escaped as `255, byte`. Returns (int64 offsets from 0,
    compressed bytes); `decode` inverts it."""
    offsets = np.asarray(offsets, dtype=np.int64)
    body = np.asarray(data, dtype=np.uint8)[offsets[0] : offsets[-1]]
    rel = offsets - offsets[0]
    if not table.compressed or len(body) == 0:
        return rel, body.copy()
    pos, code, length = _parse(table, rel, _windows(body), _room(rel, len(body)))
    escaped = length == 0
    out_len = np.where(escaped, 2, 1)
    first = np.cumsum(out_len) - out_len
    out = np.empty(int(out_len.sum()), dtype=np.uint8)
    out[first] = np.where(escaped, ESCAPE, code)
    out[first[escaped] + 1] = body[pos[escaped]]
    cum = np.concatenate([[0], np.cumsum(out_len)])
    return cum[np.searchsorted(pos, rel, side="left")], out


def build_table(offsets: np.ndarray, data: np.ndarray, rounds: int = 3) -> bytes:
    """A symbol table (2312 bytes, format in the module docstring) for these strings, learned
    from their first ~32 KiB: candidates are the 1..8-byte substrings ranked by the bytes
    they would save over escaping; later rounds re-rank the chosen symbols by what the greedy
    parse actually saved with them."""
    offsets = np.asarray(offsets, dtype=np.int64)
    keep = int(np.searchsorted(offsets, offsets[0] + SAMPLE_BYTES, side="right"))
    offsets = offsets[: max(keep, 2)]
    body = np.asarray(data, dtype=np.uint8)[offsets[0] : offsets[-1]]
    rel = offsets - offsets[0]
    windows, room = _windows(body), _room(rel, len(body))
    keys, lens, gain = [], [], []
    for size in range(1, 9):  # candidates, sorted by key within each size
        k, counts = np.unique(windows[room >= size] & _MASKS[size], return_counts=True)
        keys.append(k)
        lens.append(np.full(len(k), size, dtype=np.int64))
        gain.append(counts * (2.0 * size - 1))
    base = np.cumsum([0] + [len(k) for k in keys])
    all_keys, all_lens, all_gain = np.concatenate(keys), np.concatenate(lens), np.concatenate(gain)
    table = _table(all_keys, all_lens, all_gain)
    for _ in range(rounds - 1):
        _, code, length = _parse(table, rel, windows, room)
        used = np.bincount(code[length > 0], minlength=256)[: table.n_symbols]
        sym_keys = table.symbols[: table.n_symbols].copy().view(np.uint64).reshape(-1)
        sym_lens = table.lengths[: table.n_symbols].astype(np.int64)
        where = np.zeros(table.n_symbols, dtype=np.int64)
        for size in range(1, 9):  # locate the chosen symbols among the candidates
            mine = sym_lens == size
            where[mine] = base[size - 1] + np.searchsorted(keys[size - 1], sym_keys[mine])
        all_gain = all_gain / 2  # unchosen candidates: the estimate overcounts overlaps
        all_gain[where] = used * (2.0 * sym_lens - 1)
        table = _table(all_keys, all_lens, all_gain)
    return _export(table)


def _table(keys: np.ndarray, lens: np.ndarray, gain: np.ndarray) -> SymbolTable:
    top = np.argsort(-gain, kind="stable")[:255]
    top = top[gain[top] > 0]
    symbols = np.zeros((256, 8), dtype=np.uint8)
    symbols[: len(top)] = keys[top].astype("<u8").view(np.uint8).reshape(-1, 8)
    lengths = np.zeros(256, dtype=np.int8)
    lengths[: len(top)] = lens[top]
    return SymbolTable(True, symbols, lengths, len(top))


def _export(table: SymbolTable) -> bytes:
    n = table.n_symbols
    head = (MAGIC << 32) | (1 << 24) | n
    body = table.symbols[:n].tobytes() + table.lengths[:n].astype(np.uint8).tobytes()
    return (head.to_bytes(8, "little") + body).ljust(TABLE_SIZE, b"\0")
