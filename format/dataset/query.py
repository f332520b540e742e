"""Full-text query objects with pylance 14's classes and signatures (`lance.query`):
`MatchQuery`, `PhraseQuery`, `BoostQuery`, `MultiMatchQuery`, `CombinedFieldsQuery`,
`BooleanQuery`, with `FullTextOperator`, `Occur` and `DocumentGranularity`. Each is its
structured form (`to_dict()`, the Lance namespace's `FtsQuery` JSON that `full_text_query`
also takes:
`format.dataset.fulltext_query`), so pylance code runs with these imported from here::

    from quiver.format.dataset.query import BooleanQuery, MatchQuery, Occur

    ds.to_table(full_text_query=BooleanQuery([(Occur.MUST, MatchQuery("lance", "text"))]))
"""

from __future__ import annotations

import abc
from enum import Enum
from typing import Any

from quiver.format.errors import InvalidInputError

__all__ = [
    "BooleanQuery",
    "BoostQuery",
    "CombinedFieldsQuery",
    "DocumentGranularity",
    "FullTextOperator",
    "FullTextQuery",
    "FullTextQueryType",
    "MatchQuery",
    "MultiMatchQuery",
    "Occur",
    "PhraseQuery",
]


class FullTextQueryType(Enum):
    MATCH = "match"
    MATCH_PHRASE = "match_phrase"
    BOOST = "boost"
    MULTI_MATCH = "multi_match"
    COMBINED_FIELDS = "combined_fields"
    BOOLEAN = "boolean"


class FullTextOperator(Enum):
    AND = "AND"
    OR = "OR"


class DocumentGranularity(str, Enum):
    ROW = "row"
    LIST_ELEMENT = "list_element"


class Occur(Enum):
    SHOULD = "SHOULD"
    MUST = "MUST"
    MUST_NOT = "MUST_NOT"


class FullTextQuery(abc.ABC):
    """A full-text query: its structured form and its type."""

    @abc.abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The query's structured (JSON) form."""

    @abc.abstractmethod
    def query_type(self) -> FullTextQueryType:
        """Which kind of query this is."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"


def _operator(op: FullTextOperator | str) -> str:
    value = op.value if isinstance(op, FullTextOperator) else str(op)
    return "And" if value.upper() == "AND" else "Or"


def _granularity(value: DocumentGranularity | str | None) -> dict[str, str]:
    if value is None:
        return {}
    return {"document_granularity": getattr(value, "value", value)}


class MatchQuery(FullTextQuery):
    def __init__(
        self,
        query: str,
        column: str,
        *,
        boost: float = 1.0,
        fuzziness: int | None = 0,
        max_expansions: int = 50,
        operator: FullTextOperator = FullTextOperator.OR,
        prefix_length: int = 0,
        document_granularity: DocumentGranularity | None = None,
    ) -> None:
        self._body = {
            "terms": query,
            "column": column,
            "boost": boost,
            "fuzziness": fuzziness,
            "max_expansions": max_expansions,
            "operator": _operator(operator),
            "prefix_length": prefix_length,
            **_granularity(document_granularity),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"match": dict(self._body)}

    def query_type(self) -> FullTextQueryType:
        return FullTextQueryType.MATCH


class PhraseQuery(FullTextQuery):
    def __init__(
        self,
        query: str,
        column: str,
        *,
        slop: int = 0,
        document_granularity: DocumentGranularity | None = None,
    ) -> None:
        self._body = {
            "terms": query,
            "column": column,
            "slop": slop,
            **_granularity(document_granularity),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"phrase": dict(self._body)}

    def query_type(self) -> FullTextQueryType:
        return FullTextQueryType.MATCH_PHRASE


class BoostQuery(FullTextQuery):
    def __init__(
        self, positive: FullTextQuery, negative: FullTextQuery, *, negative_boost: float = 0.5
    ) -> None:
        self._parts = (positive, negative, negative_boost)

    def to_dict(self) -> dict[str, Any]:
        positive, negative, weight = self._parts
        return {
            "boost": {
                "positive": _form(positive),
                "negative": _form(negative),
                "negative_boost": weight,
            }
        }

    def query_type(self) -> FullTextQueryType:
        return FullTextQueryType.BOOST


class MultiMatchQuery(FullTextQuery):
    """The query matched in each column (each with its boost); a row scores its best."""

    def __init__(
        self,
        query: str,
        columns: list[str],
        *,
        boosts: list[float] | None = None,
        operator: FullTextOperator = FullTextOperator.OR,
    ) -> None:
        if boosts is not None and len(boosts) != len(columns):
            raise ValueError("boosts must have one value per column")
        weights = boosts if boosts is not None else [1.0] * len(columns)
        self._matches = [
            MatchQuery(query, c, boost=b, operator=operator).to_dict()["match"]
            for c, b in zip(columns, weights, strict=True)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {"multi_match": {"match_queries": [dict(m) for m in self._matches]}}

    def query_type(self) -> FullTextQueryType:
        return FullTextQueryType.MULTI_MATCH


class CombinedFieldsQuery(FullTextQuery):
    """The query over `columns` as one field (BM25F): each column's term frequencies and
    lengths weighted by its boost (at least 1); with `AND`, every term in some column."""

    def __init__(
        self,
        query: str,
        columns: list[str],
        *,
        boosts: list[float] | None = None,
        operator: FullTextOperator = FullTextOperator.OR,
    ) -> None:
        if isinstance(columns, str):
            raise TypeError("columns must be a list of column names, not a string")
        self._body = {
            "query": query,
            "columns": list(columns),
            "boost": list(boosts) if boosts is not None else [1.0] * len(columns),
            "operator": _operator(operator),
        }
        combined_fields(self._body, "CombinedFieldsQuery")  # refused here, as pylance does

    def to_dict(self) -> dict[str, Any]:
        return {"combined_fields": dict(self._body)}

    def query_type(self) -> FullTextQueryType:
        return FullTextQueryType.COMBINED_FIELDS


class BooleanQuery(FullTextQuery):
    def __init__(self, queries: list[tuple[Occur, FullTextQuery]]) -> None:
        self._queries = list(queries)

    def to_dict(self) -> dict[str, Any]:
        parts: dict[str, list[Any]] = {"must": [], "should": [], "must_not": []}
        for occur, query in self._queries:
            name = getattr(occur, "value", occur)
            key = {"MUST": "must", "SHOULD": "should", "MUST_NOT": "must_not"}.get(str(name))
            if key is None:
                raise ValueError(f"a BooleanQuery clause needs an Occur, not {occur!r}")
            parts[key].append(_form(query))
        return {"boolean": parts}

    def query_type(self) -> FullTextQueryType:
        return FullTextQueryType.BOOLEAN


def _form(query: Any) -> Any:
    """A query object's structured form (a dict stays as it is)."""
    return query.to_dict() if isinstance(query, FullTextQuery) else query


MAX_FIELD_BOOST = 1048576.0  # pylance's bound on a combined field's weight


def combined_fields(
    body: dict[str, Any], where: str
) -> tuple[str, tuple[str, ...], tuple[float, ...], bool]:
    """A `combined_fields` body checked as pylance checks `CombinedFieldsQuery`: (text,
    columns, boosts, whether every term is needed); InvalidInputError naming the problem."""
    unknown = sorted(set(body) - {"query", "columns", "boost", "operator"})
    if unknown:
        raise InvalidInputError(f"{where}: 'combined_fields' has unknown key {unknown[0]!r}")
    text = body.get("query")
    if not isinstance(text, str):
        raise InvalidInputError(f"{where}: 'combined_fields.query' must be a string")
    columns = body.get("columns")
    if not isinstance(columns, (list, tuple)) or not all(isinstance(c, str) for c in columns):
        raise InvalidInputError(f"{where}: 'combined_fields.columns' must name columns")
    if not columns:
        raise InvalidInputError(f"{where}: Cannot create CombinedFieldsQuery with no columns")
    for i, column in enumerate(columns):
        if column in columns[:i]:
            raise InvalidInputError(
                f"{where}: CombinedFieldsQuery columns must be unique, but {column!r} is duplicated"
            )
    boosts = body.get("boost")
    boosts = [1.0] * len(columns) if boosts is None else boosts
    if not isinstance(boosts, (list, tuple)) or len(boosts) != len(columns):
        count = len(boosts) if isinstance(boosts, (list, tuple)) else boosts
        raise InvalidInputError(
            f"{where}: The number of boosts ({count}) must match the number of columns "
            f"({len(columns)})"
        )
    for column, boost in zip(columns, boosts, strict=True):
        number = isinstance(boost, (int, float)) and not isinstance(boost, bool)
        if not number or not 1.0 <= boost <= MAX_FIELD_BOOST:  # NaN fails both bounds
            raise InvalidInputError(
                f"{where}: combined_fields boost for column {column!r} must be a finite "
                f"value in [1, {MAX_FIELD_BOOST:.0f}], got {boost!r}"
            )
    operator = str(body.get("operator") or "Or").lower()
    if operator not in ("or", "and"):
        raise InvalidInputError(f"{where}: 'combined_fields.operator' must be Or or And")
    return text, tuple(columns), tuple(float(b) for b in boosts), operator == "and"
