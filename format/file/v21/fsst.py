"""FSST string decompression of 2.1+ pages (`Fsst{symbol_table, Variable}`), vectorised.

Symbol table (2312 bytes = 8 + 256 * 8 + 256): a u64 LE header
`"FSST" << 32 | encoder_switch << 24 | suffix_lim << 16 | terminator << 8 | n_symbols`, then
`n_symbols` u64 symbols (their LE bytes are the symbol text), then `n_symbols` length bytes,
zero-filled to the full size. In the compressed strings a code byte c < n_symbols emits
`symbol[c][:len[c]]`; 255 is an escape and the next byte is emitted literally. Every string
is compressed on its own. With encoder_switch 0 the strings are stored uncompressed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from format.errors import CorruptFileError

TABLE_SIZE = 8 + 256 * 8 + 256
MAGIC = 0x46535354
ESCAPE = 255


@dataclass(frozen=True)
class SymbolTable:
    """A parsed FSST symbol table: (256, 8) symbol bytes and their lengths."""

    compressed: bool  # the encoder switch: False means strings are stored as-is
    symbols: np.ndarray  # uint8 (256, 8)
    lengths: np.ndarray  # int64 (256,), 0 for unused codes
    n_symbols: int


def parse_table(raw: bytes, where: str) -> SymbolTable:
    """Parse and validate a symbol table."""
    if len(raw) != TABLE_SIZE:
        raise CorruptFileError(
            where, f"FSST symbol table of {len(raw)} bytes (expected {TABLE_SIZE})"
        )
    head = int.from_bytes(raw[:8], "little")
    if head >> 32 != MAGIC:
        raise CorruptFileError(where, "FSST symbol table has no FSST magic")
    n = head & 0xFF
    if n > 255:
        raise CorruptFileError(where, f"FSST symbol table with {n} symbols")
    buf = np.frombuffer(raw, dtype=np.uint8)
    symbols = np.zeros((256, 8), dtype=np.uint8)
    symbols[:n] = buf[8 : 8 + 8 * n].reshape(n, 8)
    lengths = np.zeros(256, dtype=np.int8)
    lengths[:n] = buf[8 + 8 * n : 8 + 9 * n]
    if ((lengths[:n] < 1) | (lengths[:n] > 8)).any():
        raise CorruptFileError(where, "FSST symbol of length outside 1..8")
    return SymbolTable(bool(head >> 24 & 1), symbols, lengths, n)


def decode(
    table: SymbolTable, offsets: np.ndarray, data: np.ndarray, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """Decompress strings `data[offsets[i]:offsets[i+1]]` -> (int64 offsets from 0, bytes)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    codes = data[offsets[0] : offsets[-1]]
    rel = offsets - offsets[0]
    if not table.compressed:
        return rel, np.asarray(codes, dtype=np.uint8)
    n = len(codes)
    if n == 0:
        return rel, np.zeros(0, dtype=np.uint8)
    # Escapes: inside each maximal run of 255s (runs cut at string starts) the even positions
    # are escapes; the byte after an escape is a literal (whatever its value).
    is_ff = codes == ESCAPE
    if is_ff.any():
        escape, literal = _escapes(is_ff, rel, n, where)
    else:
        escape = literal = np.zeros(n, dtype=bool)
    plain = ~escape & ~literal
    if (plain & (codes >= table.n_symbols)).any():
        bad = int(codes[np.argmax(plain & (codes >= table.n_symbols))])
        raise CorruptFileError(where, f"FSST code {bad} beyond the {table.n_symbols} symbols")
    # Literals become 1-byte pseudo-symbols 256 + byte. Every code emits its 8-byte symbol
    # word; a (codes, 8) mask then keeps the first len bytes of each.
    row = codes.astype(np.int16)
    if literal.any():
        row[literal] += 256
    row_len = _EXTENDED_LEN.copy()
    row_len[:256] = table.lengths
    out_len = row_len[row]
    out_len[escape] = 0
    words = _extended(table).view(np.uint64)[row]
    out = words.view(np.uint8).reshape(n, 8)[_LANES[None, :] < out_len[:, None]]
    # String boundaries in the output: the output position of each string's first code.
    cum = np.concatenate([[0], np.cumsum(out_len, dtype=np.int64)])
    return cum[rel], out


def _escapes(
    is_ff: np.ndarray, rel: np.ndarray, n: int, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """Escape and literal flags of the code bytes. Inside each maximal run of 255s (runs cut
    at string starts) the even positions are escapes; the byte after an escape is a literal."""
    string_start = np.zeros(n, dtype=bool)
    string_start[rel[:-1][rel[:-1] < n]] = True
    run_start = is_ff & (string_start | ~np.concatenate([[False], is_ff[:-1]]))
    pos = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    last_start = np.maximum.accumulate(np.where(run_start, pos, 0))
    escape = is_ff & ((pos - last_start) % 2 == 0)
    literal = np.concatenate([[False], escape[:-1]]) & ~string_start
    string_end = np.zeros(n, dtype=bool)
    string_end[rel[1:][rel[1:] > rel[:-1]] - 1] = True
    if (escape & string_end).any():
        raise CorruptFileError(where, "FSST string ends with an escape byte")
    return escape, literal


_EXTENDED_LEN = np.concatenate([np.zeros(256, np.int8), np.ones(256, np.int8)])
_LANES = np.arange(8, dtype=np.int8)
_LITERALS = np.zeros((256, 8), np.uint8)
_LITERALS[:, 0] = np.arange(256)


def _extended(table: SymbolTable) -> np.ndarray:
    """The symbol table followed by one pseudo-symbol per literal byte, flattened."""
    return np.concatenate([table.symbols, _LITERALS]).reshape(-1)
