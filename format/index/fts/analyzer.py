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
