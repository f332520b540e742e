"""Searches as SQL table functions: full-text, nearest-neighbour and hybrid search over a
dataset, as tables a query selects from, filters, joins and aggregates.

    SELECT id, title, _score FROM search('docs', 'quick fox', 10)
    SELECT id, _distance FROM vector_search('docs', 'vec', [0.1, 0.2, 0.3, 0.4], 5)
    SELECT id, _relevance_score FROM hybrid_search('docs', 'quick fox', 'vec', [...], 10)

- `search(table, query [, limit [, columns [, filter]]])`: the `limit` (10) best BM25
  matches of `query` with `_score`, best first. `query` is the text, or a structured query
  as JSON text (`{"match": {...}}`, `{"phrase": {...}}`, `{"boolean": {...}}`...: the forms
  the Flight descriptor's `full_text_query` takes); `columns` (a name or an array) are the
  columns searched (the indexed ones when left out).
- `vector_search(table, column, vector [, limit [, filter]])`: the `limit` (10) rows nearest
  to `vector` in `column`, with `_distance`, nearest first (through the column's vector index
  when it has one, with its metric).
- `hybrid_search(table, query, column, vector [, limit [, filter]])`: both, fused by
  reciprocal rank, with `_relevance_score`, best first.

`table` is a dataset name as SQL names tables (`docs`, `team/docs`, `docs@v3`, `docs@gold`,
`docs#dev`), read with the caller's rights; `filter` (Lance's filter SQL) chooses the rows
searched, before ranking (a `WHERE` around the function filters its answer). Each search
answers every column of the dataset but blob columns, then its score. Arguments are
constants or `$n` parameters (not the table). The search runs when the statement is
planned (its answer is at most `limit` rows, up to 100,000, held in memory), at the
version the statement reads; a prepared statement planned before its parameters are
bound answers no rows, in the search's schema.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
from datafusion import Expr, SessionContext, udtf
from datafusion.catalog import Table

from quiver.flight_server.errors import InvalidArgument, NotFound
from quiver.flight_server.sql.catalog import (
    Planning,
    QuiverCatalog,
    current_planning,
    split_name,
)
from quiver.format.dataset.fulltext import SCORE
from quiver.format.dataset.hybrid import RELEVANCE
from quiver.format.dataset.nearest import DISTANCE
from quiver.format.dataset.sql.table import blob_columns

DEFAULT_LIMIT = 10
MAX_LIMIT = 100_000  # rows a search answers in SQL (held in memory while the statement runs)
_UNBOUND = object()  # a parameter not bound yet
_SCORES = {"search": SCORE, "vector_search": DISTANCE, "hybrid_search": RELEVANCE}
_TABLE = ("table", str)
_LIMIT = ("limit", int)
_FILTER = ("filter", str)
_VECTOR = ("vector", list)
_COLUMN = ("column", str)
# each function's arguments (name, type), the required ones first
_SIGNATURES: dict[str, tuple[int, tuple[tuple[str, type], ...]]] = {
    "search": (2, (_TABLE, ("query", str), _LIMIT, ("columns", list), _FILTER)),
    "vector_search": (3, (_TABLE, _COLUMN, _VECTOR, _LIMIT, _FILTER)),
    "hybrid_search": (4, (_TABLE, ("query", str), _COLUMN, _VECTOR, _LIMIT, _FILTER)),
}


def register_searches(context: SessionContext, catalog: QuiverCatalog) -> None:
    """Register `search`, `vector_search` and `hybrid_search` in `context`, resolving
    datasets through `catalog`."""
    for name in _SIGNATURES:
        context.register_udtf(udtf(_table_function(name, catalog), name))


def _table_function(name: str, catalog: QuiverCatalog) -> Callable[..., Table]:
    def run(*raw: Any) -> Table:
        scope = current_planning()
        if scope is None:  # only statements the engine plans reach here
            raise InvalidArgument(f"{name}: a search runs inside a statement")
        try:
            args = _arguments(name, raw, scope)
            found = catalog.open_dataset(scope, *_schema_and_table(args["table"]))
            if found is None:
                raise NotFound(f"{name}: dataset {args['table']!r} does not exist")
            ds = found[0]
            answer = _search(name, ds, args) if _UNBOUND not in args.values() else _empty(name, ds)
        except Exception as e:
            scope.failure = e  # the engine hands it back wrapped in its own error
            raise
        return Table(pads.dataset(answer))

    return run


def _schema_and_table(name: str) -> tuple[str, str]:
    """(schema, table) of a dataset named as SQL names tables: the folders split off before
    a branch (which may hold '/') or version reference."""
    cut = min((i for i in (name.find("#"), name.find("@")) if i >= 0), default=len(name))
    schema, table = split_name(name[:cut])
    return schema, table + name[cut:]


def _arguments(name: str, raw: tuple[Any, ...], scope: Planning) -> dict[str, Any]:
    """The function's arguments by name, checked (a NULL optional one left out)."""
    required, signature = _SIGNATURES[name]
    if not required <= len(raw) <= len(signature):
        shape = ", ".join(n if i < required else f"[{n}]" for i, (n, _) in enumerate(signature))
        raise InvalidArgument(f"{name}({shape}) takes {required} to {len(signature)} arguments, "
                              f"not {len(raw)}")  # fmt: skip
    out: dict[str, Any] = {}
    for i, ((arg, kind), expr) in enumerate(zip(signature, raw, strict=False)):
        value = _constant(name, i + 1, arg, Expr(expr), scope)
        if value is _UNBOUND:
            if i == 0:
                raise InvalidArgument(f"{name}: the table (argument 1) cannot be a parameter")
            out[arg] = value
            continue
        if value is None:
            if i < required:
                raise InvalidArgument(f"{name}: argument {i + 1} ({arg}) is NULL")
            continue
        out[arg] = _checked(name, i + 1, arg, kind, value)
    return out


def _constant(name: str, position: int, arg: str, expr: Expr, scope: Planning) -> Any:
    """An argument's value: a constant expression, or a `$n` parameter's value (`_UNBOUND`
    while a prepared statement is planned without its parameters)."""
    if expr.variant_name() == "Placeholder":
        value = scope.parameters.get(expr.to_variant().id(), _UNBOUND)
    else:
        try:
            value = expr.python_value()
        except Exception:  # noqa: BLE001 - DataFusion raises plain Exceptions
            shown = expr.canonical_name()
            raise InvalidArgument(
                f"{name}: argument {position} ({arg}) must be a constant, not {shown}"
            ) from None
    return value.as_py() if isinstance(value, pa.Scalar) else value


def _checked(name: str, position: int, arg: str, kind: type, value: Any) -> Any:
    where = f"{name}: argument {position} ({arg})"
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgument(f"{where} must be a positive integer, not {value!r}")
        if value > MAX_LIMIT:
            raise InvalidArgument(
                f"{where} is at most {MAX_LIMIT:,} (an answer is held in memory), not {value:,}"
            )
        return value
    if arg == "columns":
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
            raise InvalidArgument(f"{where} must be a column name or an array of them")
        return value
    if kind is list:
        ok = (
            isinstance(value, list)
            and value
            and all(isinstance(x, int | float) and not isinstance(x, bool) for x in value)
        )
        if not ok:
            raise InvalidArgument(f"{where} must be a non-empty array of numbers")
        return value
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{where} must be a non-empty string")
    return value


def _text_query(name: str, query: str, columns: list[str] | None) -> Any:
    """The engine's full-text query: JSON object text is a structured query, anything else
    the words to match (in `columns` when given)."""
    stripped = query.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        try:
            structured = json.loads(stripped)
        except ValueError:
            structured = None
        if isinstance(structured, dict):
            if columns is not None:
                raise InvalidArgument(
                    f"{name}: a structured query names its columns itself (no 'columns' argument)"
                )
            return structured
    return query if columns is None else {"query": query, "columns": columns}


def _columns(ds: Any) -> list[str]:
    blobs = blob_columns(ds)
    return [n for n in ds.schema.names if n not in blobs]


def _empty(name: str, ds: Any) -> pa.Table:
    """No rows, in the search's schema: a prepared statement's answer before it has its
    parameters (the client learns the result's schema from it)."""
    fields = [ds.schema.field(n) for n in _columns(ds)] + [pa.field(_SCORES[name], pa.float32())]
    return pa.schema(fields).empty_table()


def _search(name: str, ds: Any, args: dict[str, Any]) -> pa.Table:
    """The search's answer over dataset version `ds`."""
    common: dict[str, Any] = {
        "columns": _columns(ds),
        "filter": args.get("filter"),
        "prefilter": "filter" in args,
    }
    limit = args.get("limit", DEFAULT_LIMIT)
    if name == "vector_search":
        nearest = {"column": args["column"], "q": args["vector"], "k": limit}
        return ds.to_table(nearest=nearest, **common)
    text = _text_query(name, args["query"], args.get("columns"))
    if name == "search":
        return ds.to_table(full_text_query=text, limit=limit, **common)
    nearest = {"column": args["column"], "q": args["vector"]}
    return ds.to_table(nearest=nearest, full_text_query=text, limit=limit, **common)
