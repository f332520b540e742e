"""The text analyzer of INVERTED indices: text -> the tokens pylance indexes and queries.

An index's parameters (its `metadata.lance` ``params``) choose the pipeline, which runs in
pylance's order:

1. the base tokenizer: ``simple`` (maximal runs of Unicode alphanumeric characters),
   ``whitespace`` (runs between whitespace) or ``raw`` (the whole text, one token);
2. tokens of ``max_token_length`` UTF-8 bytes or more are dropped;
3. ``lower_case``: each character lower-cased on its own;
4. ``stem``: the Snowball stemmer of the language (``snowballstemmer``, which runs
   PyStemmer's C build of it when installed: the same algorithm as pylance's rust-stemmers);
5. ``remove_stop_words``: the language's stop words (or ``custom_stop_words``), matched
   against the stemmed token;
6. ``ascii_folding``: characters spelled in ASCII (`folding.FOLDING`).

A document's tokens keep their positions in the base tokenizer's stream (removed tokens
leave gaps), which phrase queries compare.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.errors import UnsupportedFeatureError
from quiver.format.index.fts.folding import FOLDING

# pylance 14's English stop words, matched after stemming
ENGLISH_STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is
    it its itself just me more most my myself now of off on once only or other our ours
    ourselves out over own re same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we
    were what when where which while who whom why will with you your yours yourself
    yourselves
    """.split()
)
_SIMPLE = re.compile(r"[^\W_]+")
_WHITESPACE = re.compile(r"[^ \t\n\r\x0b\x0c]+")
_FOLD_TABLE = str.maketrans(FOLDING)
# `Analyzer.occurrences` splits in bulk by turning every separator byte into a space (a
# byte table over the column's data: UTF-8 never uses ASCII bytes inside a character) and
# splitting at single spaces; the simple tokenizer only where a text is ASCII, where its
# alphanumeric characters are [0-9A-Za-z]
_SPACE = ord(" ")
# rows split by Arrow at a time: each chunk's buffers (about 100 bytes a row) stay under
# glibc's mmap threshold, so the next chunk reuses them
_BULK_ROWS = 65536
_SEPARATOR_BYTES = {
    "simple": np.array(
        [_SPACE if not (chr(b).isascii() and chr(b).isalnum()) else b for b in range(256)],
        np.uint8,
    ),
    "whitespace": np.array(
        [_SPACE if b in b" \t\n\r\x0b\x0c" else b for b in range(256)], np.uint8
    ),
}


@dataclass(frozen=True)
class Occurrences:
    """Every token occurrence of a column, in row then position order."""

    rows: np.ndarray  # int32 or int64: the row (index into the column) of each occurrence
    positions: np.ndarray  # uint32: its position in its row's base token stream (if asked)
    token_ids: np.ndarray  # int32: its token, numbered in order of first appearance
    vocabulary: list[str]  # the tokens by id


@dataclass(frozen=True)
class AnalyzerParams:
    """The tokenizer options of one INVERTED index (pylance's ``params``)."""

    base_tokenizer: str = "simple"
    language: str = "English"
    with_position: bool = False
    max_token_length: int | None = 40
    lower_case: bool = True
    stem: bool = True
    remove_stop_words: bool = True
    custom_stop_words: tuple[str, ...] | None = None
    ascii_folding: bool = True

    @classmethod
    def from_json(cls, doc: dict[str, Any], where: str) -> AnalyzerParams:
        """The options an index's ``params`` JSON records; UnsupportedFeatureError for a
        tokenizer or language Quiver does not implement."""
        base = str(doc.get("base_tokenizer", "simple"))
        if base not in ("simple", "whitespace", "raw"):
            raise UnsupportedFeatureError(
                f"{where}: the {base!r} tokenizer of this full-text index is not supported "
                "(simple, whitespace and raw are)"
            )
        language = str(doc.get("language", "English"))
        stem, stop = bool(doc.get("stem", False)), bool(doc.get("remove_stop_words", False))
        custom = doc.get("custom_stop_words")
        if language != "English" and (stem or (stop and custom is None)):
            raise UnsupportedFeatureError(
                f"{where}: stemming and stop words in {language} are not supported (English is)"
            )
        length = doc.get("max_token_length")
        return cls(
            base_tokenizer=base,
            language=language,
            with_position=bool(doc.get("with_position", False)),
            max_token_length=int(length) if length is not None else None,
            lower_case=bool(doc.get("lower_case", True)),
            stem=stem,
            remove_stop_words=stop,
            custom_stop_words=tuple(custom) if custom is not None else None,
            ascii_folding=bool(doc.get("ascii_folding", False)),
        )


class Analyzer:
    """Tokens of a text as an index with `params` holds them."""

    def __init__(self, params: AnalyzerParams) -> None:
        self.params = params
        if params.custom_stop_words is not None:
            self._stop_words = frozenset(params.custom_stop_words)
        else:
            self._stop_words = ENGLISH_STOP_WORDS
        self._split = _splitter(params.base_tokenizer)
        self._normalize = _normalizer(params, self._stop_words)

    def tokens(self, text: str | None) -> list[str]:
        """The tokens of `text` in order (None has none; an empty text none either, but
        for the raw tokenizer, whose one token is then empty)."""
        if text is None or (not text and self.params.base_tokenizer != "raw"):
            return []
        out = []
        limit = self.params.max_token_length
        for raw in self._split(text):
            if limit is not None and len(raw.encode("utf-8")) >= limit:
                continue
            token = self._normalize(raw)
            if token is not None:
                out.append(token)
        return out

    def positioned(self, text: str | None) -> list[tuple[int, str]]:
        """(position, token) pairs: positions count every token of the base tokenizer."""
        if text is None or (not text and self.params.base_tokenizer != "raw"):
            return []
        out = []
        limit = self.params.max_token_length
        for position, raw in enumerate(self._split(text)):
            if limit is not None and len(raw.encode("utf-8")) >= limit:
                continue
            token = self._normalize(raw)
            if token is not None:
                out.append((position, token))
        return out

    def occurrences(self, texts: pa.Array, positions: bool = True) -> Occurrences:
        """Every token of every text, as arrays: the column's analysis in bulk, which an
        index build needs. The base split runs in Arrow's kernels where it can (every
        text for the whitespace tokenizer, ASCII texts for the simple one), the rest per
        text; the normalisation runs once per distinct word. Without `positions`, the
        positions are not computed (left empty)."""
        texts = texts.cast(pa.large_string()) if not pa.types.is_large_string(texts.type) else texts
        n = len(texts)
        separators = _SEPARATOR_BYTES.get(self.params.base_tokenizer)
        if separators is None:
            bulk = np.zeros(n, bool)
        elif self.params.base_tokenizer == "simple":
            bulk = pc.fill_null(pc.string_is_ascii(texts), True).to_numpy(zero_copy_only=False)
        else:
            bulk = np.ones(n, bool)
        ids: dict[str, int] = {}
        parts = []
        if bulk.any():
            assert separators is not None
            parts.append(self._bulk(texts, np.flatnonzero(bulk), separators, ids, positions))
        if not bulk.all():
            parts.append(self._one_by_one(texts, np.flatnonzero(~bulk), ids, positions))
        if not parts:
            return Occurrences(
                np.zeros(0, np.int64), np.zeros(0, np.uint32), np.zeros(0, np.int32), []
            )
        rows, places, tokens = (np.concatenate(x) for x in zip(*parts, strict=True))
        vocabulary = list(ids)
        if len(parts) > 1:  # back in row order, ids renumbered by first appearance
            order = np.argsort(rows, kind="stable")
            rows, tokens = rows[order], tokens[order]
            places = places[order] if positions else places
            first = np.full(len(vocabulary), len(tokens), np.int64)
            np.minimum.at(first, tokens, np.arange(len(tokens)))
            by_first = np.argsort(first, kind="stable")
            renumber = np.empty(len(vocabulary), np.int32)
            renumber[by_first] = np.arange(len(vocabulary))
            tokens = renumber[tokens]
            vocabulary = [vocabulary[i] for i in by_first]
        return Occurrences(rows, places, tokens, vocabulary)

    def _bulk(
        self,
        texts: pa.Array,
        rows: np.ndarray,
        separators: np.ndarray,
        ids: dict[str, int],
        positions: bool,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, positions, token ids) of texts `rows`, split by Arrow a chunk of rows at
        a time (Arrow's buffers then stay small enough to be reused from the heap rather
        than mapped and faulted in afresh): the words dictionary-encoded as they come
        (empty ones between repeated separators included), each distinct word judged
        (empty, too long) and normalised once over the whole column."""
        seen = _Words()
        parts = []
        for start in range(0, len(rows), _BULK_ROWS):
            chunk = rows[start : start + _BULK_ROWS]
            owner, places, tokens = self._bulk_chunk(texts, chunk, separators, ids, seen, positions)
            parts.append((chunk[owner].astype(self._row_type(len(texts))), places, tokens))
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.uint32), np.zeros(0, np.int32)
        return tuple(np.concatenate(x) for x in zip(*parts, strict=True))  # type: ignore[return-value]

    def _bulk_chunk(
        self,
        texts: pa.Array,
        rows: np.ndarray,
        separators: np.ndarray,
        ids: dict[str, int],
        seen: _Words,
        positions: bool,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`_bulk` of one chunk of rows; the rows it answers are indices into `rows`."""
        # a compact copy even for a run of rows: `_spaced` maps a slice's whole buffer
        subset = pc.take(texts, pa.array(rows))
        split = pc.split_pattern(_spaced(subset, separators), pattern=" ")
        encoded = pc.dictionary_encode(pc.list_flatten(split))
        words = encoded.dictionary
        mapped = np.append(seen.ids_of(words, lambda w: self._word_id(w, ids)), np.int32(-1))
        indices = encoded.indices.to_numpy()
        tokens = mapped[indices]
        kept = tokens >= 0
        everything = bool(kept.all())  # no stop word, empty or long word: nothing to drop
        words_per_text = np.diff(np.frombuffer(split.buffers()[1], np.int32)[: len(split) + 1])
        parents = np.repeat(np.arange(len(rows), dtype=np.int32), words_per_text)
        places = np.zeros(0, np.uint32)
        if positions:  # a word's place among the row's non-empty words
            empty = pc.index(words, "").as_py()
            nonempty = np.flatnonzero(indices != (len(words) if empty < 0 else empty))
            counts = np.bincount(parents[nonempty], minlength=len(rows))
            place = np.zeros(len(indices), np.int64)
            place[nonempty] = np.arange(len(nonempty)) - np.repeat(
                np.cumsum(counts) - counts, counts
            )
            places = (place if everything else place[kept]).astype(np.uint32)
        if everything:
            return parents, places, tokens
        return parents[kept], places, tokens[kept]

    @staticmethod
    def _row_type(n: int) -> type:
        """The narrowest integer type of row indices into `n` texts."""
        return np.int32 if n < 2**31 else np.int64

    def _word_id(self, word: str, ids: dict[str, int]) -> int:
        """The token id of one word the base tokenizer gave (-1: dropped: empty, too long,
        a stop word)."""
        size = len(word.encode("utf-8"))
        limit = self.params.max_token_length
        if not size or (limit is not None and size >= limit):
            return -1
        return _id_of(ids, self._normalize(word))

    def _one_by_one(
        self, texts: pa.Array, rows: np.ndarray, ids: dict[str, int], positions: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, positions, token ids) of texts `rows`, analysed one text at a time."""
        out_rows: list[int] = []
        places: list[int] = []
        tokens: list[int] = []
        for row, text in zip(rows.tolist(), texts.take(pa.array(rows)).to_pylist(), strict=True):
            for position, token in self.positioned(text):
                out_rows.append(row)
                places.append(position)
                tokens.append(_id_of(ids, token))
        return (
            np.array(out_rows, np.int64),
            np.array(places if positions else [], np.uint32),
            np.array(tokens, np.int32),
        )


class _Words:
    """The token id of every distinct word seen so far (over a column's chunks), looked up
    a chunk's dictionary at a time in Arrow's hash kernels."""

    def __init__(self) -> None:
        self._words: list[pa.Array] = []
        self._known = pa.array([], pa.large_string())
        self._ids = np.zeros(0, np.int32)

    def ids_of(self, words: pa.Array, new_id: Callable[[str], int]) -> np.ndarray:
        """The ids of `words` (distinct), `new_id` giving those of words not seen before,
        in the order they come."""
        words = words.cast(pa.large_string())
        at = pc.index_in(words, value_set=self._known).to_numpy(zero_copy_only=False)
        fresh = np.isnan(at) if at.dtype.kind == "f" else np.zeros(len(at), bool)
        out = np.empty(len(words), np.int32)
        out[~fresh] = self._ids[at[~fresh].astype(np.int64)]
        if fresh.any():
            added = words.filter(pa.array(fresh))
            new = np.array([new_id(w) for w in added.to_pylist()], np.int32)
            out[fresh] = new
            self._known = pa.concat_arrays([self._known, added])
            self._ids = np.concatenate([self._ids, new])
        return out


def _spaced(texts: pa.Array, table: np.ndarray) -> pa.Array:
    """`texts` (large_string) with every byte mapped through `table`."""
    validity, offsets, data = texts.buffers()
    if data is None:
        return texts
    mapped = table[np.frombuffer(data, np.uint8)]
    return pa.LargeStringArray.from_buffers(
        len(texts), offsets, pa.py_buffer(mapped), validity, texts.null_count, texts.offset
    )


def _id_of(ids: dict[str, int], token: str | None) -> int:
    """`token`'s id in `ids` (added when new); -1 for a dropped word."""
    if token is None:
        return -1
    found = ids.get(token)
    if found is None:
        found = ids[token] = len(ids)
    return found


def _splitter(base: str) -> Callable[[str], list[str]]:
    if base == "simple":
        return _SIMPLE.findall
    if base == "whitespace":
        return _WHITESPACE.findall
    return lambda text: [text]


def _normalizer(params: AnalyzerParams, stop_words: frozenset[str]) -> Callable[[str], str | None]:
    """One token through lower-casing, stemming, stop words and folding (None: dropped);
    memoised, as a corpus repeats its words."""
    stemmer = None
    if params.stem:
        import snowballstemmer

        stemmer = snowballstemmer.stemmer("english")

    @functools.lru_cache(maxsize=1 << 16)
    def normalize(token: str) -> str | None:
        if params.lower_case:
            token = token.lower() if token.isascii() else "".join(c.lower() for c in token)
        if stemmer is not None:
            token = stemmer.stemWord(token)
        if params.remove_stop_words and token in stop_words:
            return None
        if params.ascii_folding and not token.isascii():
            token = token.translate(_FOLD_TABLE)
        return token

    return normalize
