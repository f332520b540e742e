"""Object ids of the namespace and what they name under Quiver's root.

A route's ``{id}`` is the id's parts joined by the delimiter (``?delimiter=``, default
``$``); empty parts are dropped, so the root namespace is the delimiter alone. A JSON body
may repeat the id as a list; if it does, it must name the same object (the spec's rule).

Quiver's layout is the namespace tree itself: namespace ``["team"]`` is the directory
``{root}/team``, table ``["team", "sales"]`` is dataset ``team/sales``, the Lance dataset at
``{root}/team/sales.lance``. Every part must therefore be a valid dataset-name segment
(`flight_server.names`), and a namespace's parts may not end in ``.lance``.
"""

from __future__ import annotations

from typing import Any

from quiver.flight_server.errors import InvalidArgument
from quiver.flight_server.names import MAX_DEPTH, SUFFIX, validate_name
from quiver.flight_server.namespace.errors import invalid

DEFAULT_DELIMITER = "$"


def split_id(raw: str, delimiter: str | None) -> list[str]:
    """The parts of a route id (`raw`, already URL-decoded)."""
    delimiter = delimiter or DEFAULT_DELIMITER
    return [p for p in raw.split(delimiter) if p]


def joined(parts: list[str], delimiter: str = DEFAULT_DELIMITER) -> str:
    """An id as messages show it: its parts joined by the delimiter (the root: the
    delimiter alone)."""
    return delimiter.join(parts) or delimiter


def check_body_id(body: dict[str, Any], parts: list[str], delimiter: str) -> None:
    """Refuse a body whose ``id`` names another object than the route. Parts joined by the
    delimiter name the same object as the parts (DuckDB's lance extension sends
    ``["ns$table"]``)."""
    given = body.get("id")
    if given is None:
        return
    if not isinstance(given, list) or not all(isinstance(p, str) for p in given):
        raise invalid("request body 'id' must be a list of strings")
    if [q for p in given for q in p.split(delimiter) if q] != parts:
        raise invalid(f"request body names {given!r}, the route names {parts!r}")


def namespace_path(parts: list[str]) -> str:
    """The directory (relative to the root, '' for the root) of namespace `parts`."""
    if not parts:
        return ""
    if len(parts) >= MAX_DEPTH:
        raise invalid(f"namespace {joined(parts)!r} is deeper than {MAX_DEPTH - 1} levels")
    path = "/".join(parts)
    _valid(path, parts)
    for p in parts:
        if p.endswith(SUFFIX):
            raise invalid(f"namespace {joined(parts)!r}: a namespace may not end in '{SUFFIX}'")
    return path


def table_name(parts: list[str]) -> str:
    """The dataset name of table `parts` (its namespace's parts, then its own)."""
    if not parts:
        raise invalid("a table id needs at least one part (the table's name)")
    name = "/".join(parts)
    _valid(name, parts)
    return name


def _valid(name: str, parts: list[str]) -> None:
    if any("/" in p for p in parts):
        raise invalid(f"id {joined(parts)!r}: a part may not contain '/'")
    try:
        validate_name(name)
    except InvalidArgument as e:
        raise invalid(f"id {joined(parts)!r}: {e}") from None
