"""NGRAM indices as pylance 14 builds them: the rows holding each trigram of a text column,
read to narrow `contains` / LIKE filters and written so pylance uses them as its own.

Trigrams, as pylance makes them: each code point is lower-cased, then folded to ASCII on
its own (the ASCII pieces of its NFKD decomposition, 15 letters such as æ or ß spelled out;
the character itself when nothing is left); every window of three consecutive code points
that are all ASCII letters or digits is a trigram. Its token packs the three characters in
base 37 as bytes: '0'-'9' are 1-10, 'a'-'z' 11-36, and the upper-case letters folding can
yield wrap around a byte ('A' 235 ... 'V' 0, 'W' 1 ... 'Z' 4), so a few trigrams share a
token. A null row is posted under token 0.

`ngram_postings.lance` has one row per token, ascending: `tokens` (uint32) and
`posting_list`, the ids of the rows holding the token (row addresses, or stable row ids) as
a serialized 64-bit Roaring treemap without run containers. An index only narrows a scan:
the rows it names hold every trigram of the needle, and the scan checks the filter itself.
"""

from __future__ import annotations

import array
import functools
import unicodedata
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap64

from quiver.format.errors import CorruptFileError
from quiver.format.index.files import IndexFile, write_index_file
from quiver.format.index.scalar.rows import EMPTY
from quiver.format.io.store import ObjectStore
from quiver.format.table.schema import LanceSchema

NGRAM_DETAILS = "/lance.table.NGramIndexDetails"
POSTINGS_FILE = "ngram_postings.lance"
TOKENS, POSTINGS = "tokens", "posting_list"
NULL_TOKEN = 0

# letters NFKD leaves alone that folding spells out in ASCII
_SPELLED = {
    "æ": "ae", "Æ": "AE", "ð": "d", "ø": "o", "þ": "th", "đ": "d", "ħ": "h", "Ħ": "H",
    "ı": "i", "ĸ": "k", "ł": "l", "ŋ": "n", "œ": "oe", "ŧ": "t", "ß": "ss",
}  # fmt: skip
# decompositions newer than Python's Unicode database (Unicode 16): outlined Latin capital
# letters and digits, and the modifier letter capital S
_NEWER = {
    0xA7F1: "S",
    **{0x1CCD6 + i: chr(ord("A") + i) for i in range(26)},
    **{0x1CCF0 + i: str(i) for i in range(10)},
}
# each byte's base-37 digit after ASCII lower-casing (0: not a letter or digit)
_ASCII_DIGITS = np.zeros(256, dtype=np.uint32)
_ASCII_DIGITS[ord("0") : ord("9") + 1] = np.arange(1, 11)
_ASCII_DIGITS[ord("a") : ord("z") + 1] = np.arange(11, 37)
_ASCII_DIGITS[ord("A") : ord("Z") + 1] = np.arange(11, 37)
# rows tokenized at once by the vectorised path (bounds the pairs held while building)
_CHUNK_ROWS = 65536


def _digit(ch: str) -> int:
    """A letter or digit's base-37 digit, computed on its byte as pylance does."""
    b = ord(ch)
    return b - 47 if b <= 57 else (b - 86) & 0xFF


def _token(gram: str) -> int:
    return _digit(gram[0]) * 1369 + _digit(gram[1]) * 37 + _digit(gram[2])


@functools.lru_cache(maxsize=1 << 16)
def _normal(ch: str) -> str:
    """One code point as trigrams see it: lower-cased, folded to ASCII, and every character
    that is not an ASCII letter or digit a '|' (no trigram spans it)."""
    out = []
    for low in ch.lower():
        if low.isascii():
            out.append(low)
        elif ord(low) in _NEWER:
            out.append(_NEWER[ord(low)])
        else:
            pieces = unicodedata.normalize("NFKD", low)
            folded = "".join(_SPELLED.get(p, p if p.isascii() else "") for p in pieces)
            out.append(folded or low)
    return "".join(c if c.isascii() and c.isalnum() else "|" for c in "".join(out))


def text_tokens(text: str) -> set[int]:
    """The tokens of one text, as pylance posts its row."""
    s = "".join(map(_normal, text))
    return {_token(s[i : i + 3]) for i in range(len(s) - 2) if "|" not in s[i : i + 3]}


def _ascii_pairs(texts: pa.Array, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(token, row id) of every trigram of ASCII `texts` (no nulls), vectorised over their
    bytes; a row's token may repeat."""
    n = len(texts)
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64)[texts.offset : texts.offset + n + 1]
    data = texts.buffers()[2]
    if data is None or int(offsets[-1]) - int(offsets[0]) < 3:
        return np.empty(0, np.uint32), np.empty(0, np.uint64)
    raw = np.frombuffer(data, dtype=np.uint8)[int(offsets[0]) : int(offsets[-1])]
    digits = _ASCII_DIGITS[raw]
    row = np.repeat(np.arange(n, dtype=np.int32), np.diff(offsets))
    ok = (digits[:-2] > 0) & (digits[1:-1] > 0) & (digits[2:] > 0) & (row[:-2] == row[2:])
    at = np.flatnonzero(ok)
    tokens = digits[at] * 1369 + digits[at + 1] * 37 + digits[at + 2]
    return tokens, ids[row[at]]


def _chunk_pairs(texts: pa.Array, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(token, row id) pairs of one chunk of rows: ASCII texts at once, others one by one,
    null rows under token 0."""
    valid = texts.is_valid().to_numpy(zero_copy_only=False)
    ascii_ = pc.fill_null(pc.string_is_ascii(texts), False).to_numpy(zero_copy_only=False)
    parts = [_ascii_pairs(texts.filter(pa.array(ascii_)), ids[ascii_])]
    if not valid.all():
        nulls = ids[~valid]
        parts.append((np.full(len(nulls), NULL_TOKEN, np.uint32), nulls))
    other = np.flatnonzero(valid & ~ascii_)
    if len(other):
        tokens, owners = [], []
        for i, text in zip(other.tolist(), texts.take(pa.array(other)).to_pylist(), strict=True):
            found = text_tokens(text)
            tokens.extend(found)
            owners.extend([i] * len(found))
        parts.append((np.array(tokens, np.uint32), ids[np.array(owners, np.int64)]))
    return np.concatenate([t for t, _ in parts]), np.concatenate([i for _, i in parts])


def build_ngram(
    store: ObjectStore, directory: str, values: pa.Array, row_ids: np.ndarray, version: str
) -> list[tuple[str, int]]:
    """Write an NGRAM index of text `values` (their row ids beside) into `directory`, as
    pylance writes it; (file, size) pairs. Rows are tokenized in chunks, each token's rows
    gathered in a compressed bitmap."""
    row_ids = np.asarray(row_ids, dtype=np.uint64)
    if not pa.types.is_large_string(values.type):
        values = values.cast(pa.large_string())
    postings: dict[int, BitMap64] = {}
    for start in range(0, len(values), _CHUNK_ROWS):
        tokens, ids = _chunk_pairs(
            values.slice(start, _CHUNK_ROWS), row_ids[start : start + _CHUNK_ROWS]
        )
        order = np.lexsort((ids, tokens))
        tokens, ids = tokens[order], ids[order]
        cuts = np.flatnonzero(np.diff(tokens)) + 1
        bounds = [0, *cuts.tolist(), len(tokens)]
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            if hi > lo:
                token = int(tokens[lo])
                chunk = array.array("Q", ids[lo:hi].tobytes())
                found = postings.get(token)
                if found is None:
                    postings[token] = BitMap64(chunk, optimize=False)
                else:
                    found.update(chunk)
    order = sorted(postings)
    schema = LanceSchema.from_arrow(
        pa.schema(
            [
                pa.field(TOKENS, pa.uint32()),
                pa.field(
                    POSTINGS,
                    pa.binary(),
                    nullable=False,
                    metadata={"lance-encoding:compression": "none"},
                ),
            ]
        )
    )
    table = pa.table(
        [
            pa.array(order, pa.uint32()),
            pa.array([postings[t].serialize() for t in order], pa.binary()),
        ],
        schema=schema.to_arrow(),
    )
    size = write_index_file(store, f"{directory}/{POSTINGS_FILE}", schema, [table], version)
    return [(POSTINGS_FILE, size)]


@dataclass(frozen=True)
class NGramIndex:
    """The tokens of one NGRAM index segment; their posting lists are read when asked."""

    store: ObjectStore
    directory: str
    tokens: np.ndarray  # uint32, ascending

    @classmethod
    def load(cls, store: ObjectStore, directory: str) -> NGramIndex:
        """Read the tokens of the index in `directory` (relative to `store`)."""
        with IndexFile(store, f"{directory}/{POSTINGS_FILE}") as postings:
            column = postings.read([TOKENS]).column(TOKENS).combine_chunks()
            where = postings.path
        if column.null_count or not pa.types.is_uint32(column.type):
            raise CorruptFileError(where, f"NGRAM tokens of type {column.type} with nulls")
        tokens = column.to_numpy(zero_copy_only=False)
        if len(tokens) > 1 and not (tokens[1:] > tokens[:-1]).all():
            raise CorruptFileError(where, "NGRAM tokens are not strictly ascending")
        return cls(store, directory, tokens)

    def rows_with_all(self, tokens: set[int]) -> np.ndarray:
        """Sorted ids of the rows posted under every one of `tokens` (a non-empty set)."""
        wanted = np.array(sorted(tokens), dtype=np.uint32)
        at = np.searchsorted(self.tokens, wanted)
        if (at >= len(self.tokens)).any() or (
            self.tokens[np.minimum(at, len(self.tokens) - 1)] != wanted
        ).any():
            return EMPTY  # a trigram no row holds
        with IndexFile(self.store, f"{self.directory}/{POSTINGS_FILE}") as postings:
            blobs = postings.take([POSTINGS], at.astype(np.int64)).column(POSTINGS)
            where = postings.path
        found: BitMap64 | None = None
        try:
            # the rarest first: each intersection is then no larger than it
            for bitmap in sorted((BitMap64.deserialize(b.as_py()) for b in blobs), key=len):
                found = bitmap if found is None else found & bitmap
                if not found:
                    return EMPTY
        except ValueError as e:  # pyroaring refuses a malformed treemap
            raise CorruptFileError(where, f"bad NGRAM posting list: {e}") from None
        assert found is not None
        return np.frombuffer(found.to_array(), dtype=np.uint64)
