"""One namespace request as its handler sees it, and the answers a handler can give.

A handler gets a `Call`: the operation's name, the route's id parts, the caller's identity
and its parameters. Parameters may come in the JSON body or the query string (clients put
DescribeTable's flags in either, CreateTable's and MergeInsert's only in the query); the
body wins. Getters check types and answer InvalidInput (400, code 13) naming the parameter.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from quiver.flight_server.namespace.errors import invalid
from quiver.flight_server.namespace.ids import joined

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


@dataclass
class Call:
    """A parsed request: operation, id, identity, JSON body (or Arrow bytes) and query."""

    op: str
    parts: list[str]
    delimiter: str
    identity: Any = None
    body: dict[str, Any] = field(default_factory=dict)
    data: bytes | None = None
    query: dict[str, list[str]] = field(default_factory=dict)
    path: dict[str, str] = field(default_factory=dict)  # the route's other parts (index_name)

    @property
    def id_text(self) -> str:
        """The id as messages show it."""
        return joined(self.parts, self.delimiter)

    def _raw(self, key: str) -> tuple[Any, bool]:
        """(value, from the query string) of a parameter; (None, False) when absent."""
        if key in self.body and self.body[key] is not None:
            return self.body[key], False
        values = self.query.get(key)
        if values:
            return values[-1], True
        return None, False

    def has(self, key: str) -> bool:
        """Whether the parameter was given."""
        return self._raw(key)[0] is not None

    def str(self, key: str, *, required: bool = False) -> str | None:
        value, _ = self._raw(key)
        if value is None:
            if required:
                raise invalid(f"{self.op}: '{key}' is required")
            return None
        if not isinstance(value, str):
            raise invalid(f"{self.op}: '{key}' must be a string")
        return value

    def int(self, key: str, *, required: bool = False, minimum: int | None = 0) -> int | None:
        value, text = self._raw(key)
        if value is None:
            if required:
                raise invalid(f"{self.op}: '{key}' is required")
            return None
        if text:
            try:
                value = int(value)
            except ValueError:
                raise invalid(f"{self.op}: '{key}' must be an integer") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(f"{self.op}: '{key}' must be an integer")
        if minimum is not None and value < minimum:
            raise invalid(f"{self.op}: '{key}' must be >= {minimum}")
        return value

    def number(self, key: str) -> float | None:
        value, text = self._raw(key)
        if value is None:
            return None
        if text:
            try:
                value = float(value)
            except ValueError:
                raise invalid(f"{self.op}: '{key}' must be a number") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise invalid(f"{self.op}: '{key}' must be a number")
        return float(value)

    def bool(self, key: str, default: bool = False) -> bool:
        value, text = self._raw(key)
        if value is None:
            return default
        if text:
            low = str(value).lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise invalid(f"{self.op}: '{key}' must be true or false")
        if not isinstance(value, bool):
            raise invalid(f"{self.op}: '{key}' must be true or false")
        return value

    def strings(self, key: str, *, required: bool = False) -> list[str] | None:
        """A list of strings (a repeated query parameter, or a JSON array)."""
        if key in self.body and self.body[key] is not None:
            value = self.body[key]
        elif self.query.get(key):
            value = list(self.query[key])
        else:
            if required:
                raise invalid(f"{self.op}: '{key}' is required")
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise invalid(f"{self.op}: '{key}' must be a list of strings")
        return value

    def object(self, key: str) -> dict[str, Any] | None:
        value, text = self._raw(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise invalid(f"{self.op}: '{key}' must be an object")
        return value

    def page(self) -> tuple[str | None, int | None]:
        """(page_token, limit) of a list call."""
        return self.str("page_token"), self.int("limit")


class Empty:
    """An answer with status 200 and no body (the `exists` routes)."""


EMPTY = Empty()


@dataclass
class ArrowFile:
    """An answer streamed as an Arrow IPC file (QueryTable): chunks of its bytes."""

    chunks: Iterator[bytes]


def paged(key: str, names: list[str], call: Call) -> dict[str, Any]:
    """A list answer: the sorted `names` after the call's ``page_token``, at most its
    ``limit``, under `key`, and the next page's token (the last name) when more remain."""
    token, limit = call.page()
    if token:
        names = [n for n in names if n > token]
    out: dict[str, Any] = {key: names}
    if limit is not None and limit > 0 and len(names) > limit:
        out[key] = names[:limit]
        out["page_token"] = names[limit - 1]
    return out
