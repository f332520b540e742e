"""Full-text queries: what `full_text_query` accepts, parsed into a tree.

- a string: its tokens matched in every column with an INVERTED index (OR);
- ``{"query": text, "columns": [...]}``: the same in the named columns;
- a structured query, the Lance namespace's ``FtsQuery`` form of pylance's query objects:

  - ``{"match": {"terms", "column"?, "operator"?: "Or" | "And", "boost"?, "fuzziness"?,
    "max_expansions"?, "prefix_length"?}}`` (pylance's `MatchQuery`);
  - ``{"multi_match": {"match_queries": [match, ...]}}`` (`MultiMatchQuery`: a row's
    best match);
  - ``{"boolean": {"must"?: [q], "should"?: [q], "must_not"?: [q]}}`` (`BooleanQuery`);
  - ``{"boost": {"positive": q, "negative": q, "negative_boost"?}}`` (`BoostQuery`);
  - ``{"phrase": {"terms", "column"?, "slop"?}}`` (`PhraseQuery`: needs an index with
    positions);
  - ``{"combined_fields": {"query", "columns", "boost"?: [w, ...], "operator"?}}``
    (`CombinedFieldsQuery`: BM25F over the columns as one field,
    `format.dataset.fulltext_combined`);
  - a match or phrase may name its ``"document_granularity"``: ``"row"`` or
    ``"list_element"`` (documents of list elements: `format.dataset.fulltext_elements`);

  and a string whose first and last characters are double quotes is a phrase (slop 0).

How each node scores is `format.dataset.fulltext`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quiver.format.dataset.query import FullTextQuery, combined_fields
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError


@dataclass(frozen=True)
class Match:
    """Rows holding the text's tokens (all of them when `require_all`) in `columns` (None:
    every indexed column; a row scores its best column), scores times `boost`."""

    text: str
    columns: tuple[str, ...] | None = None
    require_all: bool = False
    boost: float = 1.0
    fuzziness: int = 0  # other than 0: fuzzy (`format.index.fts.fuzzy`), for indexed rows
    max_expansions: int = 50
    prefix_length: int = 0
    granularity: str | None = None  # "row" or "list_element" documents (None: as indexed)


@dataclass(frozen=True)
class Phrase:
    """Rows holding the text's tokens in order, each adjacent pair up to `slop` extra
    positions apart, in `columns` (None: every indexed column); scored as a match of all
    of them."""

    text: str
    columns: tuple[str, ...] | None = None
    slop: int = 0
    granularity: str | None = None  # "row" or "list_element" documents (None: as indexed)


@dataclass(frozen=True)
class AnyOf:
    """A row's best score among the queries (a multi-match)."""

    queries: tuple[Query, ...]


@dataclass(frozen=True)
class Boolean:
    """Rows matching every `must` (or, without one, any `should`) and no `must_not`;
    scores summed over the matching `must` and `should` queries."""

    must: tuple[Query, ...] = ()
    should: tuple[Query, ...] = ()
    must_not: tuple[Query, ...] = ()


@dataclass(frozen=True)
class Boost:
    """Rows matching `positive`; those matching `negative` too lose `negative_boost` times
    their `negative` score (which may leave it below zero, as in pylance)."""

    positive: Query
    negative: Query
    negative_boost: float = 0.5


@dataclass(frozen=True)
class Combined:
    """Rows holding the text's tokens (all of them when `require_all`) in any of `columns`,
    scored by BM25F: the columns as one field, each column's term frequencies and lengths
    weighted by its boost."""

    text: str
    columns: tuple[str, ...]
    boosts: tuple[float, ...]
    require_all: bool = False


Query = Match | Phrase | AnyOf | Boolean | Boost | Combined
STRUCTURED = ("match", "multi_match", "boolean", "boost", "phrase", "combined_fields")


def parse_query(value: Any, where: str) -> Query:
    """`full_text_query` as a tree; InvalidInputError (or UnsupportedFeatureError) naming
    what is wrong."""
    if isinstance(value, str):
        return _text(value, None, where)
    if isinstance(value, FullTextQuery):
        value = value.to_dict()
    if not isinstance(value, dict):
        hint = ""
        if type(value).__module__.startswith("lance"):
            hint = " (build it with quiver.format.dataset.query's classes of the same name)"
        raise UnsupportedFeatureError(
            f"{where}: full_text_query must be a string, {{'query', 'columns'}}, a "
            f"structured query ({', '.join(STRUCTURED)}) or a query object, not "
            f"{type(value).__name__}{hint}"
        )
    if "query" in value and not set(value) & set(STRUCTURED):
        unknown = sorted(set(value) - {"query", "columns"})
        if unknown:
            raise InvalidInputError(
                f"{where}: full_text_query has unknown key {unknown[0]!r} (query, columns)"
            )
        text = value.get("query")
        if not isinstance(text, str):
            raise InvalidInputError(f"{where}: full_text_query's 'query' must be a string")
        return _text(text, _columns(value.get("columns"), where, "'columns'"), where)
    return _structured(value, where)


def _text(text: str, columns: tuple[str, ...] | None, where: str) -> Match | Phrase:
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return Phrase(text[1:-1], columns)
    return Match(text, columns)


def _columns(value: Any, where: str, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(c, str) for c in value):
        raise InvalidInputError(f"{where}: full_text_query's {what} must name columns")
    return tuple(value) or None


def _object(value: Any, where: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInputError(f"{where}: full_text_query's {what} must be an object")
    return value


def _structured(value: dict[str, Any], where: str) -> Query:
    kinds = [k for k in value if value[k] is not None]
    if len(kinds) != 1 or kinds[0] not in STRUCTURED:
        raise InvalidInputError(
            f"{where}: a structured full-text query is an object with one of "
            f"{', '.join(STRUCTURED)}, not {sorted(value)}"
        )
    kind = kinds[0]
    body = _object(value[kind], where, f"'{kind}'")
    if kind == "match":
        return _match(body, where)
    if kind == "phrase":
        unknown = sorted(set(body) - {"terms", "column", "slop", "document_granularity"})
        if unknown:
            raise InvalidInputError(f"{where}: 'phrase' has unknown key {unknown[0]!r}")
        terms, slop = body.get("terms"), body.get("slop", 0)
        if not isinstance(terms, str):
            raise InvalidInputError(f"{where}: 'phrase.terms' must be a string")
        if isinstance(slop, bool) or not isinstance(slop, int) or slop < 0:
            raise InvalidInputError(f"{where}: 'phrase.slop' must be a whole number >= 0")
        columns = _columns(body.get("column"), where, "'phrase.column'")
        return Phrase(terms, columns, slop, _granularity(body, where, "phrase"))
    if kind == "combined_fields":
        return _combined(body, where)
    if kind == "multi_match":
        queries = body.get("match_queries")
        if not isinstance(queries, list) or not queries:
            raise InvalidInputError(f"{where}: 'multi_match' needs a list of 'match_queries'")
        return AnyOf(tuple(_match(_object(q, where, "'match_queries'"), where) for q in queries))
    if kind == "boolean":
        parts = {}
        for key in ("must", "should", "must_not"):
            items = body.get(key) or []
            if not isinstance(items, list):
                raise InvalidInputError(f"{where}: 'boolean.{key}' must be a list of queries")
            parts[key] = tuple(parse_query(q, where) for q in items)
        unknown = sorted(set(body) - set(parts))
        if unknown:
            raise InvalidInputError(f"{where}: 'boolean' has unknown key {unknown[0]!r}")
        if not parts["must"] and not parts["should"]:
            raise InvalidInputError(f"{where}: a boolean query needs 'must' or 'should' queries")
        return Boolean(parts["must"], parts["should"], parts["must_not"])
    negative_boost = body.get("negative_boost", 0.5)
    if isinstance(negative_boost, bool) or not isinstance(negative_boost, (int, float)):
        raise InvalidInputError(f"{where}: 'boost.negative_boost' must be a number")
    if "positive" not in body or "negative" not in body:
        raise InvalidInputError(f"{where}: a boost query needs 'positive' and 'negative'")
    return Boost(
        parse_query(body["positive"], where),
        parse_query(body["negative"], where),
        float(negative_boost),
    )


def _match(body: dict[str, Any], where: str) -> Match:
    known = {"terms", "column", "operator", "boost", "fuzziness", "max_expansions"}
    known |= {"document_granularity"}
    unknown = sorted(set(body) - known - {"prefix_length"})
    if unknown:
        raise InvalidInputError(f"{where}: 'match' has unknown key {unknown[0]!r}")
    terms = body.get("terms")
    if not isinstance(terms, str):
        raise InvalidInputError(f"{where}: 'match.terms' must be a string")
    operator = str(body.get("operator") or "Or").lower()
    if operator not in ("or", "and"):
        raise InvalidInputError(f"{where}: 'match.operator' must be Or or And")
    boost = body.get("boost", 1.0)
    if isinstance(boost, bool) or not isinstance(boost, (int, float)):
        raise InvalidInputError(f"{where}: 'match.boost' must be a number")
    fuzzy = {}
    for key, default in (("fuzziness", 0), ("max_expansions", 50), ("prefix_length", 0)):
        value = body.get(key)
        value = default if value is None else value
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInputError(f"{where}: 'match.{key}' must be a whole number >= 0")
        fuzzy[key] = value
    column = body.get("column")
    return Match(
        terms,
        _columns(column, where, "'match.column'"),
        operator == "and",
        float(boost),
        **fuzzy,
        granularity=_granularity(body, where, "match"),
    )


def _combined(body: dict[str, Any], where: str) -> Combined:
    """A `combined_fields` body (lance's serde form of `CombinedFieldsQuery`), refused as
    pylance refuses it (`query.combined_fields`)."""
    text, columns, boosts, require_all = combined_fields(body, where)
    return Combined(text, columns, boosts, require_all)


def _granularity(body: dict[str, Any], where: str, what: str) -> str | None:
    """A match's or phrase's `document_granularity` ("row", "list_element" or None)."""
    value = body.get("document_granularity")
    value = getattr(value, "value", value)  # pylance's DocumentGranularity
    if value is None:
        return None
    text = str(value).lower() if isinstance(value, str) else None
    if text not in ("row", "list_element"):
        raise InvalidInputError(
            f"{where}: '{what}.document_granularity' must be row or list_element, not {value!r}"
        )
    return text


def leaves(query: Query) -> list[Match | Phrase | Combined]:
    """The matches, phrases and combined-fields queries a query is made of."""
    if isinstance(query, (Match, Phrase, Combined)):
        return [query]
    if isinstance(query, AnyOf):
        parts: tuple[Query, ...] = query.queries
    elif isinstance(query, Boolean):
        parts = (*query.must, *query.should, *query.must_not)
    else:
        parts = (query.positive, query.negative)
    return [leaf for part in parts for leaf in leaves(part)]


def columns_of(query: Query) -> set[str]:
    """The columns a query names (its matches without columns search every index)."""
    return {c for leaf in leaves(query) for c in leaf.columns or ()}
