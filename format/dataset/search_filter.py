"""Search filters: one search filtering another, as pylance 14's `filter` takes them.

`filter` may be a full-text query (Quiver's query objects or a structured query) filtering a
vector search, a vector search (`VectorSearchQuery`, Quiver's or pylance's) filtering a
full-text search, or ``{"expr_filter": sql, "search_filter": query}``, both at once. What
each combination answers (checked against pylance's answers, `test_search_filters.py`):

- **a vector search filtered by a full-text query** (its rows keep `_distance`):
  - after the search (the default): the vector search's `k` rows, then those a match
    query matches (only match queries, as in pylance); without a SQL filter, only the
    nearest `offset + limit` rows are matched (pylance's order);
  - before it (`prefilter=True`): the `k` nearest of the rows the query matches among
    those the SQL filter keeps (its best `offset + limit` with a limit);
- **a full-text search filtered by a vector search** (its rows keep `_score`, in the
  vector search's order; `_distance` on request after the search):
  - after the search (the default): the full-text search's rows (its best `offset +
    limit` with a limit), then the vector search's `k` nearest among them, then the SQL
    filter;
  - before it (`prefilter=True`): the vector search's `k` rows (the SQL filter
    before it), then those the full-text query matches, read and scored as rows no index
    covers would be: their statistics added to the indices' (pylance's rule).

Then `offset` and `limit` over the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.dataset.answers import TableAnswer
from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fulltext import FullTextSearch
from quiver.format.dataset.fulltext_query import STRUCTURED, Combined, Match, leaves, parse_query
from quiver.format.dataset.minhash import search_nearest
from quiver.format.dataset.query import FullTextQuery
from quiver.format.dataset.scan_extras import RowMask
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError

_ROW_ID, _SCORE, _DISTANCE = "_rowid", "_score", "_distance"


class VectorSearchQuery:
    """A vector search as a filter of a full-text search (pylance's `VectorSearchQuery`,
    with its signature): the `nearest` parameters of `scanner`."""

    def __init__(
        self,
        column: str,
        q: Any,
        k: int | None = None,
        metric: str | None = None,
        nprobes: int | None = None,
        minimum_nprobes: int | None = None,
        maximum_nprobes: int | None = None,
        refine_factor: int | None = None,
        use_index: bool = True,
        ef: int | None = None,
        query_parallelism: int | None = None,
        approx_mode: str = "normal",
        search_effort: float | None = None,
    ) -> None:
        given = {
            "column": column, "q": q, "k": k, "metric": metric, "nprobes": nprobes,
            "minimum_nprobes": minimum_nprobes, "maximum_nprobes": maximum_nprobes,
            "refine_factor": refine_factor, "use_index": use_index, "ef": ef,
            "query_parallelism": query_parallelism, "approx_mode": approx_mode,
            "search_effort": search_effort,
        }  # fmt: skip
        self._inner = given

    def inner(self) -> dict[str, Any]:
        """The `nearest` dictionary."""
        return dict(self._inner)


@dataclass(frozen=True)
class SearchFilter:
    """A `filter` split: its SQL part and its search (one of `text` or `vector`)."""

    expr: str | pc.Expression | None
    text: Any = None
    vector: dict[str, Any] | None = None


def search_filter_of(uri: str, value: Any) -> SearchFilter | None:
    """The search a `filter` holds (None: a plain SQL or expression filter)."""
    if value is None or isinstance(value, (str, pc.Expression)):
        return None
    if isinstance(value, dict) and set(value) <= {"expr_filter", "search_filter"}:
        inner = search_filter_of(uri, value.get("search_filter"))
        expr = value.get("expr_filter")
        if expr is not None and not isinstance(expr, (str, pc.Expression)):
            raise InvalidInputError(f"{uri}: 'expr_filter' must be SQL text or an expression")
        if inner is None:  # (a SQL filter alone, or none at all)
            return SearchFilter(expr)
        return SearchFilter(expr, inner.text, inner.vector)
    vector = _nearest_of(value)
    if vector is not None:
        return SearchFilter(None, vector=vector)
    structured = isinstance(value, dict) and len(value) == 1 and next(iter(value)) in STRUCTURED
    if isinstance(value, FullTextQuery) or structured:
        return SearchFilter(None, text=value)
    raise InvalidInputError(
        f"{uri}: filter must be SQL text, an expression, a full-text query, a "
        f"VectorSearchQuery or {{'expr_filter', 'search_filter'}}, not {type(value).__name__}"
    )


def _nearest_of(value: Any) -> dict[str, Any] | None:
    """The `nearest` parameters of a VectorSearchQuery (Quiver's or pylance's, whose
    `inner()` is the same dictionary), without the defaults pylance fills in."""
    inner = getattr(value, "inner", None)
    if not callable(inner) or type(value).__name__ != "VectorSearchQuery":
        return None
    found = inner()
    if not isinstance(found, dict):
        return None
    kept = {k: v for k, v in found.items() if v is not None}
    kept.pop("query_parallelism", None)  # (threads: the answer is the same)
    return kept


def filtered_search(
    core: DatasetCore,
    search: SearchFilter,
    *,
    columns: Any,
    nearest: dict[str, Any] | None,
    full_text_query: Any,
    prefilter: bool,
    limit: int | None,
    offset: int | None,
    fast_search: bool,
    with_row_id: bool,
    with_row_address: bool,
    autoproject: bool,
    mask: RowMask | None,
) -> FilteredSearch:
    """The planned search of a `filter` holding a search (see the module)."""
    uri = core.uri
    if search.text is not None:
        if full_text_query is not None:
            raise InvalidInputError(
                f"{uri}: a full-text filter can't be used with a full-text search"
            )
        if nearest is None:
            raise InvalidInputError(
                f"{uri}: a query filter can only be used with a full-text or vector search"
            )
    else:
        if nearest is not None:
            raise InvalidInputError(f"{uri}: a vector filter can't be used with a vector search")
        if full_text_query is None:
            raise InvalidInputError(
                f"{uri}: a query filter can only be used with a full-text or vector search"
            )
    names = None if columns is None else list(columns)
    if isinstance(columns, dict):
        raise UnsupportedFeatureError(f"{uri}: SQL projections with a search filter")
    plan = _Plan(core, search, names, nearest, full_text_query, prefilter, fast_search, mask)
    return FilteredSearch(plan, limit, offset or 0, with_row_id, with_row_address, autoproject)


@dataclass
class _Plan:
    core: DatasetCore
    search: SearchFilter
    names: list[str] | None
    nearest: dict[str, Any] | None
    full_text_query: Any
    prefilter: bool
    fast_search: bool
    mask: RowMask | None

    def fulltext(self, query: Any, **options: Any) -> FullTextSearch:
        search = FullTextSearch(
            self.core, query, fast_search=self.fast_search, with_row_id=True, **options
        )
        if search.elements is not None or search.batch:
            what = "a batch of queries" if search.batch else f"list elements ({search.elements!r})"
            raise UnsupportedFeatureError(
                f"{self.core.uri}: a search filter with a full-text search of {what}"
            )
        return search

    def vector(self, nearest: dict[str, Any], mask: RowMask | None, **options: Any) -> Any:
        return search_nearest(
            self.core, nearest, filter=self.search.expr, with_row_id=True, row_mask=mask,
            fast_search=self.fast_search, **options,
        )  # fmt: skip

    def matching(self, query: Any, **options: Any) -> np.ndarray:
        """Row ids (sorted) of the rows a full-text query matches (every one, or its best
        `limit`)."""
        ids, _ = self.fulltext(query, columns=[], **options).candidates()
        return np.sort(ids.astype(np.uint64))

    def kept(self, allow: np.ndarray) -> RowMask:
        """The caller's row mask, kept to `allow` too."""
        if self.mask is not None and self.mask.allow is not None:
            allow = np.intersect1d(allow, self.mask.allow)
        return RowMask(allow, None if self.mask is None else self.mask.block)


class FilteredSearch(TableAnswer):
    """A search filtered by another search: run once, on first use."""

    def __init__(
        self,
        plan: _Plan,
        limit: int | None,
        offset: int,
        with_row_id: bool,
        with_row_address: bool,
        autoproject: bool,
    ) -> None:
        self._plan = plan
        self._limit, self._offset = limit, offset
        self._with_row_id, self._with_row_address = with_row_id, with_row_address
        self._autoproject = autoproject
        self._table: pa.Table | None = None

    # -- the four combinations ------------------------------------------------------------
    def _vector_by_text(self) -> pa.Table:
        p = self._plan
        query = parse_query(p.search.text, p.core.uri)
        names = self._names(_SCORE, "a vector search")
        if p.prefilter:  # the query's best `offset + limit` rows the SQL filter keeps
            assert p.nearest is not None
            stop = None if self._limit is None else self._offset + self._limit
            matched = p.matching(p.search.text, limit=stop, filter=p.search.expr, prefilter=True)
            return self._vector_table(p.nearest, p.kept(matched), names, prefilter=True)
        if not isinstance(query, Match):
            raise UnsupportedFeatureError(
                f"{p.core.uri}: only match queries are supported as a full-text filter after "
                "a vector search (prefilter=False)"
            )
        assert p.nearest is not None
        found = self._vector_table(p.nearest, p.mask, names, prefilter=False)
        if p.search.expr is None and self._limit is not None:
            # pylance's nearest `offset + limit` rows, then the match, then the offset
            found = found.slice(0, self._offset + self._limit)
        keep = np.isin(found.column(_ROW_ID).to_numpy(), p.matching(p.search.text))
        return self._sliced(found.filter(pa.array(keep)))

    def _text_by_vector(self) -> pa.Table:
        p = self._plan
        assert p.search.vector is not None
        combined = any(
            isinstance(q, Combined) for q in leaves(parse_query(p.full_text_query, p.core.uri))
        )
        if combined and p.prefilter:
            raise UnsupportedFeatureError(
                f"{p.core.uri}: a combined-fields query prefiltered by a vector search"
            )
        if p.prefilter:
            names = self._names(_DISTANCE, "a full-text search prefiltered by a vector search")
            chosen = p.vector(p.search.vector, p.mask, columns=[], prefilter=True)
            order = chosen.to_table().column(_ROW_ID).to_numpy()
            text = p.fulltext(
                p.full_text_query, columns=names, among=order,
                with_row_address=self._with_row_address, autoproject=self._autoproject,
            ).to_table()  # fmt: skip
            at = {int(r): i for i, r in enumerate(order.tolist())}
            rank = [at[int(r)] for r in text.column(_ROW_ID).to_numpy().tolist()]
            return text.take(pa.array(np.argsort(rank, kind="stable")))
        stop = None if self._limit is None else self._offset + self._limit
        ids, scores = p.fulltext(p.full_text_query, columns=[], limit=stop).candidates()
        ids = ids.astype(np.uint64)
        names = self._names(None, "")
        wanted = None if names is None else [n for n in names if n != _SCORE]
        found = self._vector_table(p.search.vector, p.kept(np.sort(ids)), wanted, prefilter=False)
        by_id = dict(zip(ids.tolist(), scores.tolist(), strict=True))
        score = pa.array(
            [by_id[int(r)] for r in found.column(_ROW_ID).to_numpy().tolist()], pa.float32()
        )
        if _DISTANCE not in (names or []) and _DISTANCE in found.column_names:
            found = found.drop_columns([_DISTANCE])
        return self._with_score(found, score, names)

    # -- helpers ----------------------------------------------------------------------------
    def _names(self, refused: str | None, what: str) -> list[str] | None:
        names = self._plan.names
        if refused is not None and names is not None and refused in names:
            raise InvalidInputError(f"{self._plan.core.uri}: {what} has no {refused!r} column")
        return names

    def _vector_table(
        self,
        nearest: dict[str, Any],
        mask: RowMask | None,
        names: list[str] | None,
        prefilter: bool,
    ) -> pa.Table:
        search = self._plan.vector(
            nearest, mask, columns=names, prefilter=prefilter,
            with_row_address=self._with_row_address, autoproject=self._autoproject,
        )  # fmt: skip
        return search.to_table()

    def _with_score(self, found: pa.Table, score: pa.Array, names: list[str] | None) -> pa.Table:
        """`found` with `_score` where the projection names it, else after the columns."""
        if names is not None and _SCORE in names:
            at = [n for n in names if n in found.column_names or n == _SCORE].index(_SCORE)
        elif not self._autoproject and names is not None:
            return found
        else:
            system = [n for n in found.column_names if n in (_ROW_ID, "_rowaddr")]
            at = found.num_columns - len(system)
        return found.add_column(at, pa.field(_SCORE, pa.float32()), score)

    def _sliced(self, found: pa.Table) -> pa.Table:
        """`found` past `offset`, at most `limit` rows."""
        return found.slice(self._offset, self._limit)

    def to_table(self) -> pa.Table:
        if self._table is None:
            p = self._plan
            if p.search.text is not None and not p.prefilter:
                found = self._vector_by_text()  # (sliced there)
            else:
                found = self._sliced(
                    self._vector_by_text() if p.search.text is not None else self._text_by_vector()
                )
            if not self._with_row_id:
                found = found.drop_columns([_ROW_ID])
            self._table = found
        return self._table

    @property
    def schema(self) -> pa.Schema:
        return self.to_table().schema

    projected_schema = schema

    def explain_plan(self, verbose: bool = False) -> str:
        """What runs, in Quiver's terms (`verbose` adds nothing)."""
        p = self._plan
        steps = {
            (True, True): "the rows a full-text query matches, then a vector search among them",
            (True, False): "a vector search, then the rows of it a match query matches",
            (False, True): "a vector search, then a full-text search of its rows as unindexed",
            (False, False): "a full-text search, then a vector search among its rows",
        }[(p.search.text is not None, p.prefilter)]
        sql = "" if p.search.expr is None else f"; SQL filter {p.search.expr}"
        return f"Search filter: {steps}{sql}; then offset and limit"
