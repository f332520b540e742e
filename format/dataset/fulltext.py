"""Full-text search over a dataset version: pylance's `to_table(full_text_query=...)`.

A query is a string, or ``{"query": text, "columns": [...]}``. Without columns it searches
every column with an INVERTED index (pylance refuses a dataset with none). The query is
analysed as the column's index analyses text (`format.index.fts.analyzer`); a row matches
when it holds any of the query's tokens, and is ranked by BM25 (k1 = 1.2, b = 0.75, in
float32 as pylance computes it), summed over the query's tokens (a repeated token counts
each time). With several columns a row's score is its best column's.

- Rows the index covers are scored with the index's statistics (documents, tokens, and
  documents per token, summed over its partitions; rows deleted since still count, as the
  index files are not rewritten by a delete). Deleted rows are never answers.
- Rows of fragments no index covers (appended since it was built) are searched by reading
  and analysing the column, and scored with the index's statistics plus theirs; with
  ``fast_search`` they are left out. A column without an index is searched that way alone,
  its text split as the simple tokenizer splits it and nothing more (pylance's way).
- With ``prefilter`` the filter chooses the rows searched (and the unindexed rows counted);
  without, the best ``limit`` rows are found first and the filter then drops some.

Answers come best first with a ``_score`` (float32) column after the projected columns;
pylance orders tied scores arbitrarily, Quiver by row id.
"""

from __future__ import annotations

import functools
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fragment import LanceFragment, shared_fragments
from quiver.format.dataset.fulltext_combined import combined_rows
from quiver.format.dataset.fulltext_elements import (
    DOC_INDEX_FIELD,
    PhraseSpec,
    element_column,
    element_table,
    holds_phrase,
)
from quiver.format.dataset.fulltext_query import (
    AnyOf,
    Boost,
    Combined,
    Match,
    Phrase,
    Query,
    columns_of,
    parse_query,
)
from quiver.format.dataset.fulltext_ranking import Ranked
from quiver.format.dataset.fulltext_statistics import Corpus, analysed_batch
from quiver.format.dataset.nearest import (
    QUERY_INDEX,
    LocatedSearch,
    take_answers,
    with_measure,
)
from quiver.format.dataset.scan import ROW_ID_FIELD, Scanner
from quiver.format.dataset.scan_extras import RowMask
from quiver.format.dataset.take import column_at, take_rows
from quiver.format.errors import CorruptFileError, InvalidInputError
from quiver.format.index.fts import bm25
from quiver.format.index.fts.analyzer import Analyzer, AnalyzerParams
from quiver.format.index.fts.blockmax import BlockMax, word_blocks
from quiver.format.index.fts.build import lists_elements
from quiver.format.index.fts.fuzzy import expand
from quiver.format.index.fts.index import InvertedIndex, open_inverted
from quiver.format.index.fts.phrase import indexed_match
from quiver.format.index.fts.postings import BLOCK
from quiver.format.io.lru import ByteLRU
from quiver.format.numeric import unique_sorted
from quiver.format.table.indices import IndexEntry, frag_reuse_of, indices_of
from quiver.format.table.schema import path_parts

SCORE = "_score"
_INVERTED = "InvertedIndexDetails"
_F = np.float32


# per query word, its rows' weights, ranked best first as deep as searches went: what a
# search with a limit reads of a frequent word
RANKED: ByteLRU[Ranked] = ByteLRU(128 << 20)


# per query word, its posting blocks and the rows block-max searches decoded from them
BLOCK_MAX: ByteLRU[BlockMax] = ByteLRU(64 << 20)
# Query words holding at most this many rows together are scored whole, in one merge: the
# threshold algorithm's rounds cost more than that, and where weights tie (documents of one
# length) it cannot stop before the end of the lists anyway.
SUMMED_ROWS = 65_536


def _ranked_key(indices: list[InvertedIndex], token: str, corpus: Corpus) -> tuple:
    """A word's `RANKED` key: the segments and the corpus statistics its weights use."""
    return (tuple(i.where for i in indices), token, corpus.docs, corpus.tokens, corpus.df[token])


# how pylance analyses a column no index covers: the simple split alone (no lower-casing,
# stemming, stop words, folding or length limit)
_UNINDEXED = Analyzer(
    AnalyzerParams(
        lower_case=False,
        stem=False,
        remove_stop_words=False,
        ascii_folding=False,
        max_token_length=None,
    )
)


def inverted_entries(core: DatasetCore, elements: bool = False) -> dict[str, list[IndexEntry]]:
    """Column name -> the segments of the INVERTED index on it (the first index's name) of
    rows, or with `elements` of list elements (`fulltext_elements`); worked out once per
    version (a server plans and runs each search on the same open version)."""
    per_core = _ENTRIES.get(core)
    if per_core is None:
        per_core = _ENTRIES.setdefault(core, {})
    found = per_core.get(elements)
    if found is None:
        found = per_core[elements] = _inverted_entries(core, elements)
    return {column: list(entries) for column, entries in found.items()}


_ENTRIES: weakref.WeakKeyDictionary[DatasetCore, dict[bool, dict]] = weakref.WeakKeyDictionary()


def _inverted_entries(core: DatasetCore, elements: bool) -> dict[str, list[IndexEntry]]:
    out: dict[str, list[IndexEntry]] = {}
    names = core.lance_schema.column_paths()  # a nested column by its path, as queries name it
    entries = indices_of(core.manifest)
    for e in entries:
        if not e.details_type.endswith(_INVERTED) or len(e.field_ids) != 1:
            continue
        if lists_elements(e.details) != elements:
            continue
        column = names.get(e.field_ids[0])
        if column is None:
            continue
        first = out.setdefault(column, [])
        if not first or first[0].name == e.name:
            first.append(e)
    return out


def _best(found: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's best score over several (row ids, scores) sets, by row id."""
    if len(found) == 1:
        return found[0]
    ids = np.concatenate([i for i, _ in found]) if found else np.empty(0, np.uint64)
    scores = np.concatenate([s for _, s in found]) if found else np.empty(0, np.float32)
    if not len(ids):
        return ids, scores
    order = np.lexsort((-scores, ids))
    ids, scores = ids[order], scores[order]
    first = np.r_[True, ids[1:] != ids[:-1]]
    return ids[first], scores[first]


def _phrase_rows(
    indices: list[InvertedIndex], tokens: list[str], offsets: list[int], slop: int
) -> np.ndarray:
    """Row ids (sorted) of the indexed documents holding the phrase: per partition, the
    documents holding every token, their positions checked by pylance's rule."""
    distinct = list(dict.fromkeys(tokens))
    out: list[int] = []
    for index in indices:
        for part in index.partitions:
            tids = [part.token_id(t) for t in distinct]
            if any(tid is None for tid in tids):
                continue
            spans = {}
            for t, tid in zip(distinct, tids, strict=True):
                assert tid is not None
                if not 0 <= tid < len(part.df):
                    raise CorruptFileError(index.where, f"token id {tid} outside the postings")
                docs, freqs = part.postings(tid)
                spans[t] = (docs, np.concatenate([[0], np.cumsum(freqs, dtype=np.int64)]))
            common = functools.reduce(np.intersect1d, [spans[t][0] for t in distinct])
            if not len(common):
                continue
            where = {}
            for t, tid in zip(distinct, tids, strict=True):
                docs, bounds = spans[t]
                at = np.searchsorted(docs, common)
                where[t] = (part.positions(tid), bounds[at].tolist(), bounds[at + 1].tolist())
            for j, doc in enumerate(common.tolist()):
                per = {t: p[lo[j] : hi[j]].tolist() for t, (p, lo, hi) in where.items()}
                if indexed_match([per[t] for t in tokens], offsets, slop):
                    out.append(int(part.row_ids[doc]))
    return np.sort(np.array(out, np.uint64))


def _phrased(
    found: dict[str, tuple[np.ndarray, ...]], rows: np.ndarray
) -> dict[str, tuple[np.ndarray, ...]]:
    """`found` (per token: row ids, frequencies, lengths) kept to `rows`."""
    out = {}
    for token, (ids, freqs, lengths) in found.items():
        keep = np.isin(ids, rows)
        if keep.any():
            out[token] = (ids[keep], freqs[keep], lengths[keep])
    return out


def _searches_every_index(query: Query) -> bool:
    """Whether some match of the query names no column (and so searches every index)."""
    if isinstance(query, (Match, Phrase)):
        return query.columns is None
    if isinstance(query, Combined):
        return False
    if isinstance(query, AnyOf):
        return any(_searches_every_index(q) for q in query.queries)
    if isinstance(query, Boost):
        return _searches_every_index(query.positive) or _searches_every_index(query.negative)
    return any(_searches_every_index(q) for q in (*query.must, *query.should, *query.must_not))


def _score(
    tokens: list[str],
    corpus: Corpus,
    found: dict[str, tuple[np.ndarray, ...]],
    require_all: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(row ids, scores) summing each query token's weights in query order; with
    `require_all`, only rows holding every token."""
    parts = [found[t][0] for t in dict.fromkeys(tokens) if t in found]
    if not parts:
        return np.empty(0, np.uint64), np.empty(0, np.float32)
    # one token's rows are distinct already (each row is in one partition of one segment)
    ids = np.sort(parts[0]) if len(parts) == 1 else unique_sorted(np.concatenate(parts))
    scores = np.zeros(len(ids), np.float32)
    for t in tokens:
        if t not in found or not corpus.df[t]:
            continue
        rows, freqs, lengths = found[t]
        at = np.searchsorted(ids, rows)
        scores[at] += corpus.weights(t, freqs, lengths)
    keep = scores > 0
    if require_all:
        for t in dict.fromkeys(tokens):
            keep &= np.isin(ids, found[t][0]) if t in found else False
    return ids[keep], scores[keep]


class FullTextSearch(LocatedSearch):
    """One planned full-text search over a dataset version."""

    def __init__(
        self,
        core: DatasetCore,
        query: Any,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        prefilter: bool = False,
        with_row_id: bool = False,
        with_row_address: bool = False,
        limit: int | None = None,
        offset: int | None = None,
        fast_search: bool = False,
        autoproject: bool = True,
        row_mask: RowMask | None = None,
        among: np.ndarray | None = None,
    ) -> None:
        self.core = core
        self.row_mask = row_mask  # pylance's row address prefilter
        # rows (row ids) a vector search chose: searched alone, read and analysed as no
        # index held them, their statistics added to the indices' (pylance's full-text
        # search prefiltered by a vector search)
        self.among = among
        # `_score` ends the columns unless they place it or `autoproject` is off (pylance's
        # disable_scoring_autoprojection)
        self.autoproject = autoproject
        self.batch = isinstance(query, list)
        if self.batch and not query:
            raise InvalidInputError(f"{core.uri}: a batch of full-text queries is empty")
        self.queries = [parse_query(q, core.uri) for q in (query if self.batch else [query])]
        self.query = self.queries[0]
        if not isinstance(prefilter, bool) or not isinstance(fast_search, bool):
            raise InvalidInputError(f"{core.uri}: prefilter and fast_search must be true or false")
        self.names = list(core.lance_schema.names) if columns is None else list(columns)
        if self.batch and (QUERY_INDEX in core.lance_schema.names or QUERY_INDEX in self.names):
            raise InvalidInputError(
                f"{core.uri}: a batch of queries adds {QUERY_INDEX!r}, a column of the dataset"
            )
        self._fragments = shared_fragments(core)
        self._scanner = Scanner(
            core,
            self._fragments,
            columns=[c for c in self.names if c != SCORE],
            filter=filter,
            with_row_id=with_row_id,
            with_row_address=with_row_address,
        )
        self.filter, self.prefilter, self.fast_search = filter, prefilter, fast_search
        self.limit, self.offset = limit, offset or 0
        self.indexed_columns = inverted_entries(core)
        self.element_entries = inverted_entries(core, elements=True)
        self.elements = element_column(
            self.queries, set(self.indexed_columns), set(self.element_entries), core.uri
        )  # the column of list elements it answers (None: rows)
        if not self.indexed_columns and any(_searches_every_index(q) for q in self.queries):
            raise InvalidInputError(
                f"{core.uri}: cannot perform full text search unless an INVERTED index has "
                "been created on at least one column"
            )
        named = set().union(*(columns_of(q) for q in self.queries))
        # (a column of list elements is refused by the query that names it, if it must be)
        for c in sorted(named - {self.elements} - set(self.element_entries)):
            kind = core.lance_schema.field_at(c).to_arrow().type  # ColumnNotFoundError names it
            if not pa.types.is_string(kind) and not pa.types.is_large_string(kind):
                raise InvalidInputError(f"{core.uri}: column {c!r} does not hold text")

    # -- schema ---------------------------------------------------------------------------
    @property
    def schema(self) -> pa.Schema:
        base = self._scanner.projected_schema
        fields = with_measure(base, self.names, SCORE, self.autoproject)
        if self.elements is not None:  # each document's place in its list, before `_score`
            names = [f.name for f in fields]
            fields.insert(names.index(SCORE) if SCORE in names else len(names), DOC_INDEX_FIELD)
        if self.batch:
            fields.insert(0, pa.field(QUERY_INDEX, pa.int32(), nullable=False))
        return pa.schema(fields, metadata=base.metadata)

    projected_schema = schema

    # -- what the searches of other shapes build on (`fulltext_combined`, `fulltext_elements`)
    @property
    def fragments(self) -> list[LanceFragment]:
        """The version's fragments, as this search reads them."""
        return self._fragments

    @property
    def scanner(self) -> Scanner:
        """The scanner of the search's projection and filter: answers are taken through
        it (`nearest.take_answers`)."""
        return self._scanner

    def read_rows(
        self, fragments: Sequence[LanceFragment], columns: list[str], filtered: bool
    ) -> Iterator[pa.RecordBatch]:
        """`columns` and `_rowid` of `fragments`' rows, those the search's filter keeps when
        `filtered`."""
        return Scanner(
            self.core,
            fragments,
            columns=columns,
            filter=self.filter if filtered else None,
            with_row_id=True,
        ).to_batches()

    def _among(self, column: str) -> Iterable[pa.RecordBatch]:
        """`column` and `_rowid` of the rows `among` names."""
        assert self.among is not None
        top = path_parts(column)[0] if column not in self.core.lance_schema.names else column
        rows = take_rows(self.core, self._fragments, self.among, [top], with_row_id=True)
        values = column_at(rows, column)  # a nested field's values, named by its path
        return pa.table({column: values, ROW_ID_FIELD.name: rows[ROW_ID_FIELD.name]}).to_batches()

    def _allowed(self, covered: set[int]) -> np.ndarray | None:
        """Row ids a prefilter lets the index answer (sorted), or None without one."""
        if not (self.prefilter and self.filter is not None):
            return None
        frags = [f for f in self._fragments if f.fragment_id in covered]
        ids = [b.column(ROW_ID_FIELD.name).to_numpy() for b in self.read_rows(frags, [], True)]
        return np.sort(np.concatenate(ids).astype(np.uint64)) if ids else np.empty(0, np.uint64)

    def _column(
        self,
        column: str,
        text: str,
        require_all: bool,
        top: int | None = None,
        slop: int | None = None,
        fuzzy: tuple[int, int, int] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, scores) of every row of `column` holding any (or, with `require_all`,
        every) token of `text`; with `top`, of a subset holding its `top` best rows; with
        `slop`, the rows holding the tokens as a phrase (`format.index.fts.phrase`); with
        `fuzzy` (fuzziness, max_expansions, prefix_length), indexed rows holding the
        expansions of its tokens (`format.index.fts.fuzzy`), the others as without."""
        entries = self.indexed_columns.get(column, [])
        indices = [self.open_index(e) for e in entries]
        if slop is not None and any(not p.position_columns for i in indices for p in i.partitions):
            raise InvalidInputError(
                f"{self.core.uri}: position is not found but required for phrase queries, "
                f"try recreating the index on {column!r} with position"
            )
        analyzer = indices[0].analyzer if indices else _UNINDEXED
        placed = analyzer.query_tokens(text)
        tokens = [t for _, t in placed]
        phrase = None if slop is None else (tokens, [p for p, _ in placed], slop)
        indexed_phrase = phrase
        if analyzer.params.base_tokenizer == "ngram":
            # as pylance: indexed rows holding any n-gram match, with `AND` or as a phrase;
            # a phrase among rows no index covers needs them all (all at position 0)
            require_all, indexed_phrase = False, None
        asked: list[tuple[int, str]] = []  # a fuzzy query's own tokens (the simple split)
        chosen: list[tuple[int, str]] = []  # and their expansions among the index's tokens
        if fuzzy is not None and indices:
            asked = _UNINDEXED.positioned(text)
            vocabulary = sorted(set().union(*(i.vocabulary() for i in indices)))
            chosen = expand(asked, vocabulary, *fuzzy)
        if not tokens and not chosen:
            return np.empty(0, np.uint64), np.empty(0, np.float32)
        terms = set(tokens) | {t for _, t in chosen}
        corpus = Corpus(
            sum(i.num_docs for i in indices),
            sum(i.total_tokens for i in indices),
            Counter({t: sum(i.document_frequency(t) for i in indices) for t in terms}),
        )
        covered = self.covered_fragments(entries)
        if self.among is not None:  # only the rows a vector search chose, read below
            ids, scores = np.empty(0, np.uint64), np.empty(0, np.float32)
        elif asked:
            ids, scores = self._fuzzy_indexed(indices, asked, chosen, covered, corpus, require_all)
        elif top is not None and indices and not require_all and indexed_phrase is None:
            ids, scores = self._indexed_top(indices, tokens, covered, corpus, top)
        else:
            found = self.indexed_postings(indices, tokens, covered)
            if indexed_phrase is not None:
                found = _phrased(found, _phrase_rows(indices, *indexed_phrase))
            ids, scores = _score(tokens, corpus, found, require_all)
        rest = [f for f in self._fragments if f.fragment_id not in covered]
        batches: Iterable[pa.RecordBatch]
        if self.among is not None:  # the rows a vector search chose, read as unindexed
            batches = self._among(column)
        else:
            batches = self.read_rows(rest, [column], self.prefilter and self.filter is not None)
        if (rest or self.among is not None) and tokens and not (self.fast_search and indices):
            flat_found, flat_corpus = self._flat(batches, column, analyzer, set(tokens), phrase)
            # pylance scores rows no index covers with every query token, repeats included
            every = [t for _, t in analyzer.positioned(text)]
            flat_ids, flat_scores = _score(every, corpus + flat_corpus, flat_found, require_all)
            ids = np.concatenate([ids, flat_ids])
            scores = np.concatenate([scores, flat_scores])
        order = np.argsort(ids, kind="stable")
        return ids[order], scores[order]

    def _fuzzy_indexed(
        self,
        indices: list[InvertedIndex],
        asked: list[tuple[int, str]],
        chosen: list[tuple[int, str]],
        covered: set[int],
        corpus: Corpus,
        require_all: bool,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, scores) of the indexed rows holding a fuzzy query's expansions, each
        a term of its own; with `require_all`, rows holding an expansion of every query
        token (none when some token has none)."""
        if require_all and {p for p, _ in chosen} != {p for p, _ in asked}:
            return np.empty(0, np.uint64), np.empty(0, np.float32)
        terms = [t for _, t in chosen]
        found = self.indexed_postings(indices, terms, covered)
        ids, scores = _score(terms, corpus, found)
        if require_all:
            keep = np.ones(len(ids), bool)
            for position in dict.fromkeys(p for p, _ in chosen):
                holders = [found[t][0] for p, t in chosen if p == position and t in found]
                keep &= np.isin(ids, np.concatenate(holders)) if holders else False
            ids, scores = ids[keep], scores[keep]
        return ids, scores

    def _evaluate(self, query: Query, top: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(row ids ascending, scores) of the rows a query matches; with `top`, of a subset
        holding its `top` best (a best-of or a positive boost keeps each part's best)."""
        if isinstance(query, Match):
            columns = query.columns or tuple(sorted(self.indexed_columns))
            top = top if query.boost > 0 else None
            fuzzy = None
            if query.fuzziness:
                fuzzy = (query.fuzziness, query.max_expansions, query.prefix_length)
            found = [
                self._column(c, query.text, query.require_all, top, fuzzy=fuzzy) for c in columns
            ]
            ids, scores = _best(found)
            return ids, (scores * np.float32(query.boost)).astype(np.float32)
        if isinstance(query, Phrase):
            columns = query.columns or tuple(sorted(self.indexed_columns))
            return _best([self._column(c, query.text, False, slop=query.slop) for c in columns])
        if isinstance(query, Combined):
            return combined_rows(self, query)
        if isinstance(query, AnyOf):
            return _best([self._evaluate(q, top) for q in query.queries])
        if isinstance(query, Boost):
            ids, scores = self._evaluate(query.positive)
            negative, penalty = self._evaluate(query.negative)
            at = np.searchsorted(negative, ids)
            hit = at < len(negative)
            hit[hit] = negative[at[hit]] == ids[hit]
            scores = scores.copy()
            scores[hit] -= np.float32(query.negative_boost) * penalty[at[hit]]
            return ids, scores
        must = [self._evaluate(q) for q in query.must]
        should = [self._evaluate(q) for q in query.should]
        if must:
            ids = must[0][0]
            for other, _ in must[1:]:
                ids = np.intersect1d(ids, other)
        else:
            ids = unique_sorted(np.concatenate([i for i, _ in should]))
        scores = np.zeros(len(ids), np.float32)
        for part_ids, part_scores in (*must, *should):
            at = np.searchsorted(part_ids, ids)
            at = np.minimum(at, max(len(part_ids) - 1, 0))
            hit = (part_ids[at] == ids) if len(part_ids) else np.zeros(len(ids), bool)
            scores[hit] += part_scores[at[hit]]
        for q in query.must_not:
            excluded, _ = self._evaluate(q)
            keep = ~np.isin(ids, excluded)
            ids, scores = ids[keep], scores[keep]
        return ids, scores

    def open_index(self, entry: IndexEntry) -> InvertedIndex:
        """The open segment of an INVERTED index entry (opened once per process)."""
        base = entry.pb.base_id if entry.pb.HasField("base_id") else None
        store, directory = self.core.resolve(entry.directory, base, relative_to_root=True)
        return open_inverted(store, directory, entry.uuid, frag_reuse_of(self.core.manifest))

    def covered_fragments(self, entries: list[IndexEntry]) -> set[int]:
        """The fragments some segment of `entries` covers (every fragment for a segment
        that names none)."""
        covered: set[int] = set()
        for e in entries:
            if e.fragment_ids is None:
                return {f.fragment_id for f in self._fragments}
            covered |= set(e.fragment_ids)
        return covered

    def live_filter(self, covered: set[int]) -> Any:
        """A function: row ids -> which of them the index may answer (live rows of covered
        fragments, and, prefiltering, those the filter keeps)."""
        allowed = self._allowed(covered)
        inside = np.array(sorted(covered), dtype=np.uint64)
        # every fragment covered, none with deletions, row ids addresses: every row the
        # index holds is an answer, nothing to check
        whole = (
            not self.core.manifest.uses_stable_row_ids
            and frag_reuse_of(self.core.manifest) is None  # its dropped rows hold GONE
            and self.row_mask is None
            and covered == {f.fragment_id for f in self._fragments}
            and not any(f.num_deletions for f in self._fragments)
        )

        def live(rows: np.ndarray) -> np.ndarray:
            if whole:
                keep = np.ones(len(rows), bool)
            else:
                addr, alive = self.locator.addresses(rows)
                keep = alive & np.isin(addr >> np.uint64(32), inside)
            if allowed is not None:
                keep &= np.isin(rows, allowed)
            if self.row_mask is not None:
                keep &= self.row_mask.keep(rows)
            return keep

        return live

    def indexed_postings(
        self, indices: list[InvertedIndex], tokens: list[str], covered: set[int]
    ) -> dict[str, tuple[np.ndarray, ...]]:
        """Per query token: (row ids, frequencies, lengths) of the rows the index may
        answer with."""
        if not indices:
            return {}
        live = self.live_filter(covered)
        found = {}
        for token in dict.fromkeys(tokens):
            parts = [i.matches(token) for i in indices]
            rows = np.concatenate([p[0] for p in parts])
            keep = live(rows)
            if keep.any():
                found[token] = tuple(np.concatenate([p[k] for p in parts])[keep] for k in range(3))
        return found

    def _indexed_top(
        self,
        indices: list[InvertedIndex],
        tokens: list[str],
        covered: set[int],
        corpus: Corpus,
        top: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(row ids ascending, scores) of indexed rows holding a query token: a subset
        holding the `top` best. Fagin's threshold algorithm over each word's rows ranked
        by weight: rows are read best first, deeper each round, until the `top`-th best
        score seen beats what any row not seen could score (the words' next weights
        summed, in the order scores are summed, so float rounding cannot break the bound).
        A frequent word costs its best rows, not all of them."""
        live = self.live_filter(covered)
        words = [t for t in dict.fromkeys(tokens) if corpus.df[t]]
        if len(tokens) == 1 and words and top > 0:
            # one word: the blocks its best rows can be in, not all of them
            found = self._block_max(indices, words[0], corpus, top, live)
            if found is not None:
                return found
        unranked = [t for t in words if RANKED.get(_ranked_key(indices, t, corpus)) is None]
        if len(unranked) > 1:
            for index in indices:  # their posting lists in one read
                index.prefetch(unranked)
        lists = {t: self._ranked(indices, t, corpus) for t in words}
        if not lists or top <= 0:
            return np.empty(0, np.uint64), np.empty(0, np.float32)
        if sum(len(ranked.rows) for ranked in lists.values()) <= SUMMED_ROWS:
            ranked = [lists[t] for t in tokens if t in lists]
            rows, scores = bm25.summed([r.rows for r in ranked], [r.weights for r in ranked])
            keep = live(rows)
            return rows[keep], scores[keep]
        longest = max(len(ranked.rows) for ranked in lists.values())
        depth = max(4 * top, 256)
        while True:
            seen = unique_sorted(np.concatenate([r.rows[r.best(depth)] for r in lists.values()]))
            seen = seen[live(seen)]
            scores = np.zeros(len(seen), np.float32)
            bound = np.float32(0)
            for t in tokens:
                if t not in lists:
                    continue
                ranked = lists[t]
                rows, weights = ranked.rows, ranked.weights
                at = np.minimum(np.searchsorted(rows, seen), len(rows) - 1)
                hit = rows[at] == seen
                scores[hit] += weights[at[hit]]
                if depth < len(rows):
                    bound = np.float32(bound + ranked.weight_after(depth))
            if depth >= longest:
                return seen, scores
            if len(seen) >= top and len(lists) == 1:
                # one word: its ranking is the answers' order (weight, then row id), so its
                # first rows are the best even where weights tie at the bound
                return seen, scores
            if len(seen) >= top and np.partition(scores, len(seen) - top)[len(seen) - top] > bound:
                return seen, scores
            depth *= 4

    def _block_max(
        self,
        indices: list[InvertedIndex],
        token: str,
        corpus: Corpus,
        top: int,
        live: Callable[[np.ndarray], np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """`BlockMax.best` of one word, its blocks and what searches decoded of them kept
        per word and corpus statistics; None where a partition's blocks hold no best scores
        (256-document blocks: the whole list is searched)."""
        if any(p.block != BLOCK for i in indices for p in i.partitions):
            return None
        key = _ranked_key(indices, token, corpus)
        blocks = BLOCK_MAX.get(key)
        if blocks is None:
            blocks = word_blocks(indices, token, *corpus.statistics(token))
            BLOCK_MAX.put(key, blocks, blocks.nbytes)
        found = blocks.best(top, live)
        BLOCK_MAX.resize(key, blocks.nbytes)
        return found

    def _ranked(self, indices: list[InvertedIndex], token: str, corpus: Corpus) -> Ranked:
        """A word's rows (ascending) and weights over every segment, computed once per word
        and corpus statistics."""
        key = _ranked_key(indices, token, corpus)
        found = RANKED.get(key)
        if found is None:
            idf, avgdl = corpus.statistics(token)
            parts = [part for i in indices for part in i.weighted(token, idf, avgdl)]
            if len(parts) == 1:
                rows, weights, ascending = parts[0]
            else:
                rows = np.concatenate([p[0] for p in parts])
                weights = np.concatenate([p[1] for p in parts])
                ascending = len(rows) < 2 or bool((rows[1:] >= rows[:-1]).all())
            if not ascending:
                by_row = np.argsort(rows, kind="stable")
                rows, weights = rows[by_row], weights[by_row]
            found = Ranked(rows, weights)
            RANKED.put(key, found, found.nbytes)
        return found

    def _flat(
        self,
        batches: Iterable[pa.RecordBatch],
        column: str,
        analyzer: Analyzer,
        wanted: set[str],
        phrase: PhraseSpec | None = None,
    ) -> tuple[dict[str, tuple[np.ndarray, ...]], Corpus]:
        """The query tokens' matches among rows read as no index holds them (`batches` of
        `column` and `_rowid`), analysed, and those rows' statistics; with a `phrase`
        (tokens, query positions, slop), only rows holding the phrase match (every row
        counts in the statistics)."""
        corpus = Corpus()
        hits: dict[str, tuple[list[int], list[int], list[int]]] = {t: ([], [], []) for t in wanted}
        for batch in batches:
            ids = batch.column(ROW_ID_FIELD.name).to_numpy()
            masked = None if self.row_mask is None else self.row_mask.keep(ids)
            if phrase is None:  # the batch analysed at once (the build's compiled split)
                analysed_batch(batch.column(column), ids, masked, analyzer, wanted, corpus, hits)
                continue
            for i, (rid, text) in enumerate(
                zip(ids, batch.column(column).to_pylist(), strict=True)
            ):
                placed = analyzer.positioned(text)
                if not placed:
                    continue
                toks = [t for _, t in placed]
                corpus.docs += 1
                corpus.tokens += len(toks)
                counts = Counter(toks)
                present = wanted.intersection(counts)
                corpus.df.update(present)
                if phrase is not None and not holds_phrase(placed, phrase):
                    continue
                if masked is not None and not masked[i]:
                    continue  # (counted in the statistics, never an answer)
                for t in present:
                    rows, freqs, lengths = hits[t]
                    rows.append(int(rid))
                    freqs.append(counts[t])
                    lengths.append(len(toks))
        found = {
            t: (np.array(r, np.uint64), np.array(f, np.uint32), np.array(n, np.float32))
            for t, (r, f, n) in hits.items()
            if r
        }
        return found, corpus

    def candidates(self, query: Query | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, scores) of the answers to `query` (default: the first), best first,
        before a postfilter."""
        stop = None if self.limit is None else self.offset + self.limit
        ids, scores = self._evaluate(self.query if query is None else query, stop)
        if stop is not None and stop < len(scores):
            # only rows scoring at least the stop-th best can be answers: sort those alone
            bar = np.partition(scores, len(scores) - stop)[len(scores) - stop]
            keep = scores >= bar
            ids, scores = ids[keep], scores[keep]
        order = np.lexsort((ids, -scores))
        ids, scores = ids[order], scores[order]
        if self.offset or stop is not None:
            ids, scores = ids[self.offset : stop], scores[self.offset : stop]
        return ids, scores

    def to_table(self) -> pa.Table:
        """Run the search: the answers with their `_score`, best first; for a batch, each
        query's answers in turn after its `query_index`, their rows read in one take."""
        if self.elements is not None:
            return element_table(self, self.elements, take_answers)
        found = [self.candidates(q) for q in self.queries]
        ids = np.concatenate([i for i, _ in found])
        scores = np.concatenate([s for _, s in found]).astype(np.float32)
        query_index = np.repeat(np.arange(len(found), dtype=np.int32), [len(i) for i, _ in found])
        postfilter = self.filter is not None and not self.prefilter
        # a row in several answers of a batch is read once (the locator's take)
        rows, keep = take_answers(self.core, self._scanner, self.locator, ids, postfilter)
        if keep is not None:
            scores, query_index = scores[keep], query_index[keep]
        columns = []
        for f in self.schema:
            if f.name == SCORE:
                columns.append(pa.array(scores, pa.float32()))
            elif f.name == QUERY_INDEX and self.batch:
                columns.append(pa.array(query_index, pa.int32()))
            else:
                columns.append(column_at(rows, f.name))  # (a nested field: by its path)
        return pa.Table.from_arrays(columns, schema=self.schema)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        yield from self.to_table().to_batches()

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())
