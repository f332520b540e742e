"""The text analyzer of INVERTED indices: text -> the tokens pylance indexes and queries.

An index's parameters (its `metadata.lance` ``params``) choose the pipeline, which runs in
pylance's order:

1. the base tokenizer: ``simple`` (maximal runs of the characters Rust calls
   alphanumeric, `format.alphanumeric`),
   ``whitespace`` (runs between whitespace), ``raw`` (the whole text, one token) or
   ``ngram`` (every run of ``min_ngram_length`` to ``max_ngram_length`` characters of the
   whole text, spaces included, by start then length; with ``prefix_only`` those at the
   start alone) or ``code`` (identifiers and operators: `code_tokens`);
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
import numbers
import re
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format import _kernels
from quiver.format.alphanumeric import token_pattern
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError
from quiver.format.index.fts.code_tokens import CodeOptions, code_tokens
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
BASE_TOKENIZERS = ("simple", "whitespace", "raw", "ngram", "code")
CODE_FLAGS = tuple(f.name for f in fields(CodeOptions))
_WHITESPACE = re.compile(r"[^ \t\n\r\x0b\x0c]+")
_FOLD_TABLE = str.maketrans(FOLDING)
# `Analyzer.occurrences` splits in bulk with a compiled loop over the column's bytes (UTF-8
# never uses ASCII bytes inside a character): a word is a run of bytes that are not
# separators; the simple tokenizer only where a text is ASCII, where its alphanumeric
# characters are [0-9A-Za-z]
# rows split at a time: each chunk's outputs stay small and are reused by the next
_BULK_ROWS = 65536
_SEPARATOR_BYTES = {
    "simple": np.array([not (chr(b).isascii() and chr(b).isalnum()) for b in range(256)], np.uint8),
    "whitespace": np.array([b in b" \t\n\r\x0b\x0c" for b in range(256)], np.uint8),
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
    min_ngram_length: int = 3
    max_ngram_length: int = 3
    prefix_only: bool = False
    code: CodeOptions = CodeOptions()  # the code tokenizer's flags

    @classmethod
    def from_json(cls, doc: dict[str, Any], where: str) -> AnalyzerParams:
        """The options an index's ``params`` JSON records; UnsupportedFeatureError for a
        tokenizer or language Quiver does not implement."""
        base = str(doc.get("base_tokenizer", "simple"))
        if base not in BASE_TOKENIZERS:
            raise UnsupportedFeatureError(
                f"{where}: the {base!r} tokenizer of this full-text index is not supported "
                "(simple, whitespace, raw, ngram and code are)"
            )
        shortest, longest = doc.get("min_ngram_length", 3), doc.get("max_ngram_length", 3)
        prefix_only = doc.get("prefix_only", False)
        for name, value in (("min_ngram_length", shortest), ("max_ngram_length", longest)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise InvalidInputError(f"{where}: {name} must be an integer, not {value!r}")
        if not isinstance(prefix_only, bool | np.bool_):
            raise InvalidInputError(f"{where}: prefix_only must be true or false")
        shortest, longest = int(shortest), int(longest)
        if base == "ngram" and not 0 < shortest <= longest:
            raise InvalidInputError(
                f"{where}: n-grams need 0 < min_ngram_length <= max_ngram_length, not "
                f"{shortest} and {longest}"
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
            min_ngram_length=shortest,
            max_ngram_length=longest,
            prefix_only=bool(prefix_only),
            code=CodeOptions(**{k: bool(doc[k]) for k in CODE_FLAGS if doc.get(k) is not None}),
        )


class Analyzer:
    """Tokens of a text as an index with `params` holds them."""

    def __init__(self, params: AnalyzerParams) -> None:
        self.params = params
        if params.custom_stop_words is not None:
            self._stop_words = frozenset(params.custom_stop_words)
        else:
            self._stop_words = ENGLISH_STOP_WORDS
        self._split = _splitter(params)
        self._normalize = _normalizer(params, self._stop_words)

    def tokens(self, text: str | None) -> list[str]:
        """The tokens of `text` in order (None has none; an empty text none either, but
        for the raw tokenizer, whose one token is then empty)."""
        if text is None or (not text and self.params.base_tokenizer != "raw"):
            return []
        return [token for _, token in self.positioned(text)]

    def positioned(self, text: str | None) -> list[tuple[int, str]]:
        """(position, token) pairs: positions count every token of the base tokenizer."""
        if text is None or (not text and self.params.base_tokenizer != "raw"):
            return []
        out = []
        limit = self.params.max_token_length
        for position, raw in self._placed(text):
            if limit is not None and len(raw.encode("utf-8")) >= limit:
                continue
            token = self._normalize(raw)
            if token is not None:
                out.append((position, token))
        return out

    def _placed(self, text: str) -> list[tuple[int, str]] | enumerate[str]:
        """The base tokenizer's (position, token) pairs: a token's place in its stream,
        the code tokenizer's own, 0 for every n-gram (as tantivy gives them)."""
        base = self.params.base_tokenizer
        if base == "code":
            return code_tokens(text, self.params.code)
        if base == "ngram":
            return [(0, raw) for raw in self._split(text)]
        return enumerate(self._split(text))

    def query_tokens(self, text: str) -> list[tuple[int, str]]:
        """A query's (position, token) pairs: `positioned`, each pair once, as pylance
        collects a query's tokens (n-grams, all at position 0, count once each)."""
        return list(dict.fromkeys(self.positioned(text)))

    def occurrences(self, texts: pa.Array, positions: bool = True) -> Occurrences:
        """Every token of every text, as arrays: the column's analysis in bulk, which an
        index build needs. The base split runs in Arrow's kernels where it can (every
        text for the whitespace tokenizer, ASCII texts for the simple one), the rest per
        text; the normalisation runs once per distinct word. Without `positions`, the
        positions are not computed (left empty)."""
        texts = texts.cast(pa.large_string()) if not pa.types.is_large_string(texts.type) else texts
        n = len(texts)
        base = self.params.base_tokenizer
        separators = _SEPARATOR_BYTES.get(base)
        if base == "simple":  # ASCII texts: their alphanumeric characters are bytes
            bulk = pc.fill_null(pc.string_is_ascii(texts), True).to_numpy(zero_copy_only=False)
        elif separators is None and base != "ngram":  # (n-grams: of UTF-8 characters)
            bulk = np.zeros(n, bool)
        else:
            bulk = np.ones(n, bool)
        ids: dict[str, int] = {}
        parts = []
        if bulk.any():
            parts.append(self._bulk(texts, np.flatnonzero(bulk), separators, ids, positions))
        if not bulk.all():
            parts.append(self._one_by_one(texts, np.flatnonzero(~bulk), ids, positions))
        if not parts:
            return Occurrences(
                np.zeros(0, np.int64), np.zeros(0, np.uint32), np.zeros(0, np.int32), []
            )
        if len(parts) == 1:
            rows, places, tokens = parts[0]
        else:
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
        separators: np.ndarray | None,
        ids: dict[str, int],
        positions: bool,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, positions, token ids) of texts `rows` (a large_string array), split a
        chunk of rows at a time by `_kernels.split_words` (at `separators`), or into
        n-grams of characters by `_kernels.split_ngrams`, into occurrences of the chunk's
        distinct words; each distinct word is judged (too long, a stop word) and normalised
        once over the whole column."""
        validity, offsets, data = texts.buffers()
        data = data if data is not None else pa.py_buffer(b"")
        ends = np.frombuffer(offsets, np.int64)
        nbytes = ends[rows + texts.offset + 1] - ends[rows + texts.offset]
        p = self.params
        if separators is None:  # n-grams: counted from each text's characters
            letters = pc.fill_null(pc.utf8_length(texts), 0).to_numpy(zero_copy_only=False)
            capacity = int(ngram_counts(letters[rows], p)[0].sum())
        else:  # words: a byte and a separator (or the text's end) at least
            capacity = (int(nbytes.sum()) + len(rows)) // 2 + 1 + len(rows) // _BULK_ROWS

        def split(start: int, scratch: _SplitScratch) -> tuple[np.ndarray, int, int, tuple]:
            """Chunk `start`'s occurrences into `scratch` (the kernels run without the GIL)."""
            chunk = np.ascontiguousarray(rows[start : start + _BULK_ROWS], np.int64)
            if separators is not None:
                out = scratch.sized(len(chunk), int(nbytes[start : start + len(chunk)].sum()))
                n, distinct = _kernels.split_words(
                    data, offsets, validity, texts.offset, chunk, separators, *out
                )
                return chunk, n, distinct, out
            # (a character takes up to four bytes: n-grams of a text of c characters
            # and b bytes hold at most 4 / 1 times their characters' count in bytes)
            chars = letters[chunk]
            counts, sizes = ngram_counts(chars, p)
            wide = np.where(nbytes[start : start + len(chunk)] > chars, 4, 1)
            out = scratch.sized_for(int(counts.sum()), int((sizes * wide).sum()))
            n, distinct = _kernels.split_ngrams(
                data, offsets, validity, texts.offset, chunk, p.min_ngram_length,
                p.max_ngram_length, p.prefix_only, *out,
            )  # fmt: skip
            return chunk, n, distinct, out

        # Every chunk's occurrences go straight into arrays of the column's (an upper bound
        # of their count: the pages past the last occurrence are never touched, so never
        # resident), not into arrays of their own joined at the end (fresh memory to fault
        # in twice). The next chunk is split on a worker while this one's words are
        # numbered: two scratches, each chunk's results copied out before it is reused.
        row_type = self._row_type(len(texts))
        all_rows = np.empty(capacity, row_type)
        all_tokens = np.empty(capacity, np.int32)
        all_places = np.empty(capacity, np.uint32) if positions else _NO_PLACES
        seen = _Words()
        scratches = (_SplitScratch(), _SplitScratch())
        starts = range(0, len(rows), _BULK_ROWS)
        done = 0
        pending: Future | None = None  # (one chunk, as a query's unindexed rows: no thread)
        with ThreadPoolExecutor(1, thread_name_prefix="quiver-fts-split") as pool:
            for i, start in enumerate(starts):
                if pending is None:
                    chunk, n, distinct, out = split(start, scratches[0])
                else:
                    chunk, n, distinct, out = pending.result()
                if i + 1 < len(starts):
                    pending = pool.submit(split, starts[i + 1], scratches[(i + 1) % 2])
                word, owner, place, text, word_ends = out
                words = pa.LargeStringArray.from_buffers(
                    distinct,
                    pa.py_buffer(word_ends[: distinct + 1]),
                    pa.py_buffer(text[: word_ends[distinct]]),
                )
                mapped = seen.ids_of(words, lambda w: self._word_id(w, ids))
                tokens = all_tokens[done : done + n]
                np.take(mapped, word[:n], out=tokens)
                owners = chunk.astype(row_type)
                kept = tokens >= 0
                if kept.all():  # no stop word or long word: nothing to drop
                    np.take(owners, owner[:n], out=all_rows[done : done + n])
                    if positions:
                        all_places[done : done + n] = place[:n]
                else:
                    m = int(np.count_nonzero(kept))
                    tokens[:m] = tokens[kept]
                    all_rows[done : done + m] = owners[owner[:n][kept]]
                    if positions:
                        all_places[done : done + m] = place[:n][kept]
                    n = m
                done += n
        return all_rows[:done], all_places[:done], all_tokens[:done]

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


_NO_PLACES = np.zeros(0, np.uint32)


class _SplitScratch:
    """The outputs of `_kernels.split_words`, reused from chunk to chunk (grown when a
    chunk needs more): per occurrence its word, text and place; the distinct words' bytes
    and ends."""

    def __init__(self) -> None:
        self._occurrences = -1
        self._bytes = -1
        self._out: tuple[np.ndarray, ...] = ()

    def sized(self, texts: int, nbytes: int) -> tuple[np.ndarray, ...]:
        """Room for the words of `texts` texts of `nbytes` bytes in all."""
        # a word takes a byte and is followed by a separator or its text's end
        return self.sized_for((nbytes + texts) // 2 + 1, nbytes)

    def sized_for(self, occurrences: int, nbytes: int) -> tuple[np.ndarray, ...]:
        """Room for `occurrences` occurrences of distinct words of `nbytes` bytes in all."""
        if occurrences > self._occurrences or nbytes > self._bytes:
            self._occurrences = max(occurrences, self._occurrences)
            self._bytes = max(nbytes, self._bytes)
            n = self._occurrences
            self._out = (
                np.empty(n, np.int32),
                np.empty(n, np.int32),
                np.empty(n, np.uint32),
                np.empty(max(self._bytes, 1), np.uint8),
                np.empty(n + 1, np.int64),
            )
        return self._out


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


def _id_of(ids: dict[str, int], token: str | None) -> int:
    """`token`'s id in `ids` (added when new); -1 for a dropped word."""
    if token is None:
        return -1
    found = ids.get(token)
    if found is None:
        found = ids[token] = len(ids)
    return found


def _splitter(params: AnalyzerParams) -> Callable[[str], list[str]]:
    base = params.base_tokenizer
    if base == "simple":
        return token_pattern().findall
    if base == "whitespace":
        return _WHITESPACE.findall
    if base == "ngram":
        return functools.partial(
            _ngrams, params.min_ngram_length, params.max_ngram_length, params.prefix_only
        )
    return lambda text: [text]


def ngram_counts(lengths: np.ndarray, params: AnalyzerParams) -> tuple[np.ndarray, np.ndarray]:
    """Per text of `lengths` characters, how many n-grams the tokenizer makes of it and
    their characters in all."""
    lengths = np.asarray(lengths, np.int64)
    counts = np.zeros(len(lengths), np.int64)
    sizes = np.zeros(len(lengths), np.int64)
    for k in range(params.min_ngram_length, params.max_ngram_length + 1):
        made = (lengths >= k) if params.prefix_only else np.maximum(lengths - k + 1, 0)
        counts += made
        sizes += k * made
    return counts, sizes


def _ngrams(shortest: int, longest: int, prefix_only: bool, text: str) -> list[str]:
    """The character n-grams of `text`, by start then length (tantivy's NgramTokenizer)."""
    starts = range(1 if prefix_only else max(len(text) - shortest + 1, 0))
    return [
        text[start : start + n]
        for start in starts
        for n in range(shortest, min(longest, len(text) - start) + 1)
    ]


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
