"""What one node of a filter's syntax tree says about one column, for the indices that
narrow the filter (`format.index.pruning`): whether it is the bare column (a top-level one,
or a field nested in structs by its path), the texts a match must contain, a NULL test."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from sqlglot import exp

from quiver.format.expr.typed import unparen
from quiver.format.table.schema import path_parts

__all__ = ["FLIPPED", "bare_column", "field_at", "has_column", "is_null_test", "literal_texts"]

FLIPPED = {exp.EQ: exp.EQ, exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}


def bare_column(node: Any, column: str) -> exp.Expression | None:
    """`node` when it is a plain reference to `column` (no cast, no function), else None."""
    if node is None:
        return None
    node = unparen(node)
    if not isinstance(node, exp.Column):
        return None
    names = [column] if len(node.parts) == 1 else path_parts(column)
    if len(names) != len(node.parts):
        return None
    for i, (part, name) in enumerate(zip(node.parts, names, strict=True)):
        # an unquoted top-level name is matched regardless of case; a nested field's name
        # exactly, as the filter engine and pylance resolve it
        folds = i == 0 and not part.args.get("quoted")
        if not (part.name == name or (folds and part.name.lower() == name.lower())):
            return None
    return node


def field_at(schema: pa.Schema, column: str) -> pa.Field:
    """The field a column names: a top-level one, or one nested in structs by its path."""
    if column in schema.names:
        return schema.field(column)
    head, *rest = path_parts(column)
    f = schema.field(head)
    for name in rest:
        f = f.type.field(name)
    return f


# characters a regular expression gives a meaning to: a pattern without them is literal text
_REGEX_SYNTAX = frozenset("\\.^$*+?()[]{}|")


def literal_texts(node: exp.Expression, column: str) -> list[str] | None:
    """The texts every value matching `node` contains, when `node` is `contains`,
    `starts_with`, LIKE (without NOT or ESCAPE, no backslash in its pattern), or
    `regexp_like` / `regexp_match` of a literal pattern, on the bare column; else None."""
    if isinstance(node, (exp.Contains, exp.StartsWith, exp.Like, exp.RegexpLike)):
        subject, pattern = node.this, node.expression
        if node.args.get("negate") or (isinstance(node, exp.RegexpLike) and node.args.get("flag")):
            return None
    elif (
        isinstance(node, exp.Anonymous)
        and str(node.this).lower() == "regexp_match"
        and len(node.expressions) == 2
    ):
        subject, pattern = node.expressions
    else:
        return None
    if bare_column(subject, column) is None:
        return None
    if not isinstance(pattern, exp.Literal) or not pattern.is_string:
        return None
    text = pattern.this
    if isinstance(node, exp.Like):
        if "\\" in text:
            return None
        return [t for t in text.replace("_", "%").split("%") if t]
    if isinstance(node, (exp.RegexpLike, exp.Anonymous)):
        inner = text.removeprefix("^").removesuffix("$")
        if any(c in _REGEX_SYNTAX for c in inner):
            return None
        return [inner]
    return [text]


def has_column(node: exp.Expression) -> bool:
    return any(True for _ in node.find_all(exp.Column, exp.Dot))


def is_null_test(node: exp.Expression, column: str) -> bool:
    """Whether `node` is `column IS NULL`."""
    return (
        isinstance(node, exp.Is)
        and isinstance(node.expression, exp.Null)
        and bare_column(node.this, column) is not None
    )
