"""Full-text search over list elements: pylance's `document_granularity=LIST_ELEMENT`.

An INVERTED index of a list-of-strings column may take each element of each list as a
document (`create_scalar_index(..., "INVERTED", document_granularity="list_element")`: the
docs file records each document's row and position in the list; null elements are
documents of no token, null and empty lists none). A match or phrase query on such a
column answers documents, not rows: a row holding the words in two elements comes back
twice, each time with its element's position (`_doc_index`, a list of one uint32) and that
element's BM25 score, under statistics over elements (documents, their tokens, documents
per token).

Which granularity a query searches: the one it names (``"document_granularity":
"row" | "list_element"`` in a match or phrase), else the one the column is indexed at
(row when it has no index); a column indexed both ways needs the query to name one, and a
granularity the column has no index of is refused, as pylance refuses them. String queries
(every indexed column) search row indices only. Elements of rows no index covers are read
and analysed as the index analyses text, unless `fast_search`.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from quiver.format.dataset.fulltext_query import Match, Phrase, Query
from quiver.format.dataset.scan import ROW_ID_FIELD
from quiver.format.dataset.take import column_at
from quiver.format.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from quiver.format.index.fts import bm25
from quiver.format.index.fts.index import InvertedIndex, Partition
from quiver.format.index.fts.phrase import indexed_match, scanned_match

if TYPE_CHECKING:
    from quiver.format.dataset.fulltext import FullTextSearch

ROW, LIST_ELEMENT = "row", "list_element"
DOC_INDEX = "_doc_index"
DOC_INDEX_FIELD = pa.field(DOC_INDEX, pa.list_(pa.field("item", pa.uint32(), False)), False)


def granularity(query: Query, rows: set[str], elements: set[str], where: str) -> str:
    """The documents a match or phrase searches (`rows` / `elements`: the columns indexed
    at each granularity); ROW for every other query. Refused as pylance refuses a choice
    the indices do not allow."""
    if not isinstance(query, (Match, Phrase)):
        return ROW
    asked = query.granularity
    if query.columns is None or len(query.columns) != 1:
        if asked == LIST_ELEMENT:
            raise InvalidInputError(
                f"{where}: a full-text query of list elements names its one column"
            )
        return ROW
    (column,) = query.columns
    kinds = {k for k, held in ((ROW, rows), (LIST_ELEMENT, elements)) if column in held}
    if asked is None:
        if kinds == {ROW, LIST_ELEMENT}:
            raise InvalidInputError(
                f"{where}: column {column!r} has full-text indices of rows and of list "
                "elements: the query must name its document_granularity"
            )
        return LIST_ELEMENT if kinds == {LIST_ELEMENT} else ROW
    if kinds and asked not in kinds:
        raise InvalidInputError(
            f"{where}: the full-text query of {column!r} asks for {asked} documents, but its "
            f"index has {kinds.pop()} documents"
        )
    if asked == LIST_ELEMENT and not kinds:
        raise InvalidInputError(
            f"{where}: column {column!r} has no full-text index of list elements"
        )
    return asked


@dataclass(frozen=True)
class ElementAnswers:
    """Documents a query matches: row id, position in the row's list, score."""

    rows: np.ndarray  # uint64
    elements: np.ndarray  # uint32
    scores: np.ndarray  # float32

    def ranked(self, offset: int, stop: int | None) -> ElementAnswers:
        """Best first (score, then row id and position), `[offset:stop]`."""
        order = np.lexsort((self.elements, self.rows, -self.scores))[offset:stop]
        return ElementAnswers(self.rows[order], self.elements[order], self.scores[order])

    def doc_index(self) -> pa.Array:
        """The `_doc_index` column: each document's position, as a list of one."""
        offsets = pa.array(np.arange(len(self.elements) + 1, dtype=np.int32))
        values = pa.array(self.elements, pa.uint32())
        return pa.ListArray.from_arrays(offsets, values, type=DOC_INDEX_FIELD.type)


@dataclass
class _Docs:
    """Per document found, its row, position and length; per query token, its documents
    (numbers into those) and frequencies."""

    rows: list[np.ndarray]
    elements: list[np.ndarray]
    lengths: list[np.ndarray]
    hits: dict[str, list[tuple[np.ndarray, np.ndarray]]]
    count: int = 0

    def add(self, rows: np.ndarray, elements: np.ndarray, lengths: np.ndarray) -> int:
        """New documents; the number of the first."""
        first = self.count
        self.rows.append(rows.astype(np.uint64))
        self.elements.append(elements.astype(np.uint32))
        self.lengths.append(lengths.astype(np.float32))
        self.count += len(rows)
        return first


def search_elements(search: FullTextSearch, column: str, query: Match | Phrase) -> ElementAnswers:
    """The list-element documents of `column` matching `query`, scored (`search`: the
    FullTextSearch asking, for its fragments, filter and options)."""
    if isinstance(query, Match) and query.fuzziness:
        raise UnsupportedFeatureError(
            f"{search.core.uri}: fuzzy matches of list elements ({column!r})"
        )
    entries = search.element_entries[column]
    indices: list[InvertedIndex] = [search.open_index(e) for e in entries]
    analyzer = indices[0].analyzer
    placed = analyzer.query_tokens(query.text)
    tokens = [t for _, t in placed]
    slop = query.slop if isinstance(query, Phrase) else None
    if slop is not None and any(not p.position_columns for i in indices for p in i.partitions):
        raise InvalidInputError(
            f"{search.core.uri}: position is not found but required for phrase queries, "
            f"try recreating the index on {column!r} with position"
        )
    empty = ElementAnswers(np.empty(0, np.uint64), np.empty(0, np.uint32), np.empty(0, np.float32))
    if not tokens:
        return empty
    distinct = list(dict.fromkeys(tokens))
    docs = _Docs([], [], [], {t: [] for t in distinct})
    statistics: list[Any] = [0, 0, Counter()]  # documents, tokens, documents per token
    phrase = None if slop is None else (tokens, [p for p, _ in placed], slop)
    phrased: list[np.ndarray] = []  # documents holding the phrase
    covered = search.covered_fragments(entries)
    live = search.live_filter(covered)
    for index in indices:
        for part in index.partitions:
            phrased.append(_indexed(part, index.where, distinct, docs, statistics, live, phrase))
    rest = [f for f in search.fragments if f.fragment_id not in covered]
    if rest and not search.fast_search:
        phrased.append(_scanned(search, rest, column, analyzer, distinct, docs, statistics, phrase))
    n_docs, n_tokens, df = statistics
    if not docs.count:
        return empty
    rows = np.concatenate(docs.rows)
    elements = np.concatenate(docs.elements)
    lengths = np.concatenate(docs.lengths)
    avgdl = bm25.mean_length(n_tokens, n_docs)
    lists, weights = [], []
    for t in tokens:
        found = docs.hits[t]
        if not found or not df[t]:
            continue
        numbers = np.concatenate([n for n, _ in found])
        freqs = np.concatenate([f for _, f in found])
        idf = np.float32(bm25.idf(df[t], n_docs))
        w = bm25.weights(idf, freqs, bm25.norms(lengths[numbers], avgdl))
        order = np.argsort(numbers, kind="stable")
        lists.append(numbers[order])
        weights.append(w[order])
    if not lists:
        return empty
    numbers, scores = bm25.summed(lists, weights)
    holding = {
        t: np.unique(np.concatenate([n for n, _ in docs.hits[t]])) for t in distinct if docs.hits[t]
    }
    keep = scores > 0
    if slop is not None or (isinstance(query, Match) and query.require_all):
        for t in distinct:
            keep &= np.isin(numbers, holding[t]) if t in holding else False
    if slop is not None:
        keep &= np.isin(numbers, np.concatenate(phrased))
    numbers, scores = numbers[keep], scores[keep]
    if isinstance(query, Match):
        scores = (scores * np.float32(query.boost)).astype(np.float32)
    return ElementAnswers(rows[numbers], elements[numbers], scores)


PhraseSpec = tuple[list[str], list[int], int]  # tokens, their query positions, slop


def _indexed(
    part: Partition,
    where: str,
    distinct: list[str],
    docs: _Docs,
    statistics: list[Any],
    live: Any,
    phrase: PhraseSpec | None,
) -> np.ndarray:
    """One partition's live documents holding a query token, added to `docs`, and its
    statistics; the numbers of those holding the phrase (by pylance's rule for indexed
    documents), if there is one."""
    if part.elements is None:
        raise CorruptFileError(where, "an index of list elements without their positions")
    statistics[0] += len(part.row_ids)
    statistics[1] += part.total_tokens
    postings = {}
    for t in distinct:
        tid = part.token_id(t)
        if tid is None:
            continue
        if not 0 <= tid < len(part.df):
            raise CorruptFileError(where, f"token id {tid} outside the postings")
        statistics[2][t] += int(part.df[tid])
        local, freqs = part.postings(tid)
        if len(local) and int(local.max()) >= len(part.row_ids):
            raise CorruptFileError(where, "a posting names a document the index does not hold")
        alive = live(part.row_ids[local])
        postings[t] = (tid, local[alive], freqs[alive])
    if not postings:
        return np.empty(0, np.int64)
    union = np.unique(np.concatenate([d for _, d, _ in postings.values()]))
    first = docs.add(part.row_ids[union], part.elements[union], part.scored_lengths[union])
    for t, (_, local, freqs) in postings.items():
        docs.hits[t].append((first + np.searchsorted(union, local), freqs))
    if phrase is None or set(phrase[0]) - set(postings):
        return np.empty(0, np.int64)
    tokens, offsets, slop = phrase
    common = functools.reduce(np.intersect1d, [postings[t][1] for t in dict.fromkeys(tokens)])
    found = []
    for doc in common.tolist():
        places = {t: _positions_in(part, postings[t][0], doc) for t in dict.fromkeys(tokens)}
        if indexed_match([places[t] for t in tokens], offsets, slop):
            found.append(doc)
    return first + np.searchsorted(union, np.array(found, np.int64))


def _positions_in(part: Partition, tid: int, doc: int) -> list[int]:
    """A token's positions in one document of a partition."""
    local, freqs = part.postings(tid)
    at = int(np.searchsorted(local, doc))
    start = int(freqs[:at].sum())
    return part.positions(tid)[start : start + int(freqs[at])].tolist()


def _scanned(
    search: FullTextSearch,
    fragments: list[Any],
    column: str,
    analyzer: Any,
    distinct: list[str],
    docs: _Docs,
    statistics: list[Any],
    phrase: PhraseSpec | None,
) -> np.ndarray:
    """The list elements of rows no index covers, read and analysed as the index analyses
    text: those holding a query token added to `docs`, every one counted in the statistics
    (with a prefilter, of the rows it keeps); the numbers of those holding the phrase."""
    filtered = search.prefilter and search.filter is not None
    wanted = set(distinct)
    rows, elements, lengths, found_phrase = [], [], [], []
    hits: dict[str, tuple[list[int], list[int]]] = {t: ([], []) for t in distinct}
    for batch in search.read_rows(fragments, [column], filtered):
        ids = batch.column(ROW_ID_FIELD.name).to_numpy()
        for rid, values in zip(ids, batch.column(column).to_pylist(), strict=True):
            for position, text in enumerate(values or []):
                placed = analyzer.positioned(text) if text is not None else []
                toks = [t for _, t in placed]
                statistics[0] += 1
                statistics[1] += len(toks)
                counts = Counter(toks)
                present = wanted.intersection(counts)
                statistics[2].update(present)
                if not present:
                    continue
                number = len(rows)
                rows.append(int(rid))
                elements.append(position)
                lengths.append(len(toks))
                for t in present:
                    hits[t][0].append(number)
                    hits[t][1].append(counts[t])
                if phrase is not None and holds_phrase(placed, phrase):
                    found_phrase.append(number)
    if not rows:
        return np.empty(0, np.int64)
    first = docs.add(np.array(rows), np.array(elements), np.array(lengths))
    for t, (numbers, freqs) in hits.items():
        if numbers:
            docs.hits[t].append((first + np.array(numbers), np.array(freqs, np.uint32)))
    return first + np.array(found_phrase, np.int64)


def holds_phrase(placed: list[tuple[int, str]], phrase: PhraseSpec) -> bool:
    """Whether an analysed text (position, token pairs) holds the phrase (pylance's rule
    for text no index covers)."""
    tokens, offsets, slop = phrase
    where: dict[str, list[int]] = {}
    for position, token in placed:
        where.setdefault(token, []).append(position)
    if any(t not in where for t in tokens):
        return False
    return scanned_match([where[t] for t in tokens], offsets, slop)


def element_column(
    queries: list[Query], rows: set[str], elements: set[str], where: str
) -> str | None:
    """The column a search answers list elements of (None: it answers rows): one match or
    phrase of such a column; refused inside a compound query or a batch."""
    chosen = [granularity(q, rows, elements, where) == LIST_ELEMENT for q in queries]
    if any(chosen) and len(queries) > 1:
        raise UnsupportedFeatureError(f"{where}: list-element queries in a batch of queries")
    if chosen and chosen[0]:
        (column,) = queries[0].columns  # type: ignore[union-attr]
        return column
    for q in queries:
        for inner in _nested(q):
            if granularity(inner, rows, elements, where) == LIST_ELEMENT:
                raise UnsupportedFeatureError(
                    f"{where}: a query of list elements inside a boolean, boost or "
                    "multi-match query (search the list-element column on its own)"
                )
    return None


def _nested(query: Query) -> list[Query]:
    """The matches and phrases inside a compound query."""
    if isinstance(query, (Match, Phrase)):
        return []
    parts = getattr(query, "queries", None)
    if parts is None:
        parts = [getattr(query, n) for n in ("positive", "negative") if hasattr(query, n)]
        parts += [*getattr(query, "must", ()), *getattr(query, "should", ())]
        parts += list(getattr(query, "must_not", ()))
    out: list[Query] = []
    for q in parts:
        out += [q] if isinstance(q, (Match, Phrase)) else _nested(q)
    return out


def element_table(search: FullTextSearch, column: str, take: Any) -> pa.Table:
    """The answers of a list-element search as pylance returns them: each document's row
    (repeated for each of its elements found), its `_doc_index` and `_score`, best first,
    `offset` and `limit` applied before a postfilter (`take`: nearest.take_answers)."""
    stop = None if search.limit is None else search.offset + search.limit
    found = search_elements(search, column, search.query).ranked(search.offset, stop)
    postfilter = search.filter is not None and not search.prefilter
    rows, keep = take(search.core, search.scanner, search.locator, found.rows, postfilter)
    if keep is not None:
        found = ElementAnswers(found.rows[keep], found.elements[keep], found.scores[keep])
    columns = []
    for f in search.schema:
        if f.name == DOC_INDEX:
            columns.append(found.doc_index())
        elif f.name == "_score":
            columns.append(pa.array(found.scores, pa.float32()))
        else:
            columns.append(column_at(rows, f.name))
    return pa.Table.from_arrays(columns, schema=search.schema)
