"""SQL filter text -> sqlglot syntax tree, in the SQL dialect pylance's filters use.

pylance parses a filter as the WHERE clause of `SELECT 1 FROM t WHERE <filter>` with a
generic dialect where backticks quote identifiers, double quotes quote *strings* (not
identifiers), a doubled quote escapes that quote inside a string, and a backslash is an
ordinary character (it is the LIKE escape character, not a string escape). `==` is `=`.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError, TokenError

from quiver.format.errors import FilterSyntaxError

_PREFIX = "SELECT 1 FROM t WHERE "
_MAX_SHOWN = 500  # longer filters are cut in error messages


class LanceFilterDialect(Dialect):
    """The sqlglot dialect matching pylance's (sqlparser GenericDialect + backtick idents)."""

    class Tokenizer(tokens.Tokenizer):
        """Quotes, identifiers and escapes as pylance's tokenizer reads them."""

        QUOTES = ["'", '"']
        IDENTIFIERS = ["`"]
        STRING_ESCAPES = ["'", '"']
        IDENTIFIER_ESCAPES = ["`"]
        HEX_STRINGS = [("x'", "'"), ("X'", "'")]


def describe_filter(sql: str, dataset: str | None) -> str:
    """The `filter '...' [on dataset '...']` phrase every error message starts with."""
    where = f" on dataset {dataset!r}" if dataset else ""
    shown = sql if len(sql) <= _MAX_SHOWN else sql[:_MAX_SHOWN] + "..."
    return f"filter {shown!r}{where}"


def parse_filter(sql: str, *, dataset: str | None = None) -> exp.Expression:
    """Parse a filter string into the sqlglot expression of its WHERE clause."""
    if not isinstance(sql, str):
        raise FilterSyntaxError(f"a filter must be a string, got {type(sql).__name__}")
    if not sql.strip():
        raise FilterSyntaxError(f"{describe_filter(sql, dataset)} is empty")
    try:
        statements = sqlglot.parse(_PREFIX + sql, dialect=LanceFilterDialect)
    except ParseError as e:
        raise FilterSyntaxError(_parse_error_message(sql, dataset, e)) from None
    except (TokenError, SqlglotError, ValueError, RecursionError) as e:
        reason = str(e).replace(_PREFIX, "").splitlines()[0] if str(e) else type(e).__name__
        raise FilterSyntaxError(
            f"{describe_filter(sql, dataset)} does not parse: {reason}"
        ) from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        raise FilterSyntaxError(
            f"{describe_filter(sql, dataset)} does not parse: expected one expression"
        )
    select = statements[0]
    where = select.args.get("where")
    extra = [
        key
        for key, value in select.args.items()
        if value and key not in ("expressions", "from", "from_", "where", "kind")
    ]
    if where is None or extra:
        raise FilterSyntaxError(
            f"{describe_filter(sql, dataset)} does not parse: expected a single boolean "
            f"expression, found extra clauses ({', '.join(sorted(extra)) or 'none'})"
        )
    return where.this


def _parse_error_message(sql: str, dataset: str | None, err: ParseError) -> str:
    """Translate a sqlglot ParseError into a message with the position in the filter text."""
    detail = ""
    for info in err.errors[:1]:
        description = info.get("description") or "syntax error"
        if description.startswith("Required keyword"):
            # sqlglot names its own classes here; say what a user can act on
            description = "an operand is missing"
        line, col = info.get("line"), info.get("col")
        if isinstance(line, int) and isinstance(col, int):
            if line == 1:
                col -= len(_PREFIX)
            token = info.get("highlight") or ""
            near = f" near {token!r}" if token else ""
            detail = f": {description}{near} at line {line}, column {max(col, 1)}"
        else:
            detail = f": {description}"
    if not detail:
        detail = f": {str(err).splitlines()[0]}"
    return f"{describe_filter(sql, dataset)} does not parse{detail}"
