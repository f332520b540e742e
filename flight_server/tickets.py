"""Self-contained, HMAC-SHA256-signed tokens: read tickets and staged fragments.

A token is ``{kind}.{base64url(JSON payload)}.{base64url(HMAC-SHA256(key, kind.payload))}``
(ASCII, no padding). The kind (``qt1`` for read tickets, ``qf1`` for staged fragments)
is signed with the payload, so one kind can never pass for the other. Any change to any
byte, a truncation, or a token signed with another key fails verification with the same
one-line `InvalidArgument`; the payload is only parsed after the signature checks out.

Replicas that must accept each other's tokens share the key (``QUIVER_TICKET_KEY``);
without one every process draws a random key, and its tokens die with it.

A read ticket pins everything a DoGet needs, so any replica can serve it and a retry reads
the same rows:

    {"d": dataset name, "v": resolved version, "f": fragment id | null (all fragments),
     "r": [first, end) physical rows of the fragment | null, "c": columns | null,
     "q": filter | null, "l": limit | null, "i": with_row_id, "e": expiry (unix s) | null,
     "t": commit time of the version (ns), which tells a recreated dataset's version apart,
     "b": the branch, when not the main line, "h": blob_handling, when not the default}
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from quiver.flight_server.errors import InvalidArgument
from quiver.flight_server.names import DatasetName, branch_of

TICKET_KIND = "qt1"
FRAGMENT_KIND = "qf1"
MAX_TOKEN_BYTES = 1 << 20
MIN_KEY_BYTES = 16


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if _B64_TEXT.fullmatch(text) is None:
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_B64_TEXT = re.compile(r"[A-Za-z0-9_-]+")
# one encoder for every token: json.dumps builds a new one per call when given options
_canonical_json = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode


class Signer:
    """Signs and verifies tokens with one HMAC key."""

    def __init__(self, key: bytes | None = None) -> None:
        if key is None:
            key = secrets.token_bytes(32)
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"the ticket key must have at least {MIN_KEY_BYTES} bytes")
        self._key = key

    def __repr__(self) -> str:
        return "Signer(<key hidden>)"

    def _mac(self, kind: str, body: str) -> bytes:
        return hmac.digest(self._key, f"{kind}.{body}".encode("ascii"), "sha256")

    def sign(self, kind: str, payload: dict[str, Any], what: str = "ticket") -> str:
        """The token for a JSON-serializable payload; InvalidArgument if it would exceed
        the size tokens are accepted at."""
        body = _b64(_canonical_json(payload).encode())
        token = f"{kind}.{body}.{_b64(self._mac(kind, body))}"
        if len(token) > MAX_TOKEN_BYTES:
            raise _too_big(what, len(token))
        return token

    def verify(self, kind: str, token: bytes | str, what: str = "ticket") -> dict[str, Any]:
        """The payload of a token of this kind; InvalidArgument if it is anything else."""
        bad = InvalidArgument(f"invalid {what}: not issued by this service, or altered")
        if isinstance(token, (bytes, str)) and len(token) > MAX_TOKEN_BYTES:
            raise _too_big(what, len(token))
        if isinstance(token, bytes):
            try:
                token = token.decode("ascii")
            except UnicodeDecodeError:
                raise bad from None
        if not isinstance(token, str):
            raise bad
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != kind:
            raise bad
        _, body, mac = parts
        try:
            given = _unb64(mac)
            raw = _unb64(body)
        except (ValueError, binascii.Error):
            raise bad from None
        if not hmac.compare_digest(given, self._mac(kind, body)):
            raise bad
        try:
            payload = json.loads(raw)
        except ValueError:
            raise bad from None
        if not isinstance(payload, dict):
            raise bad
        return payload


def _too_big(what: str, size: int) -> InvalidArgument:
    """The error for a token over `MAX_TOKEN_BYTES` (a ticket's filter too long, mostly)."""
    hint = " (it carries the read's filter and columns: shorten them)" if what == "ticket" else ""
    return InvalidArgument(
        f"{what} of {size} bytes is over this service's limit of {MAX_TOKEN_BYTES} bytes{hint}"
    )


@dataclass(frozen=True)
class ReadTicket:
    """One endpoint's read: a fragment (or all) of one version, projected and filtered."""

    dataset: str
    version: int
    fragment_id: int | None = None
    row_range: tuple[int, int] | None = None
    columns: tuple[str, ...] | None = None
    filter: str | None = None
    limit: int | None = None
    with_row_id: bool = False
    expires: int | None = None
    stamp: int | None = None
    blob_handling: str | None = None

    def encode(self, signer: Signer) -> bytes:
        """The signed ticket bytes."""
        payload = {
            "d": self.dataset,
            "v": self.version,
            "f": self.fragment_id,
            "r": list(self.row_range) if self.row_range is not None else None,
            "c": list(self.columns) if self.columns is not None else None,
            "q": self.filter,
            "l": self.limit,
            "i": self.with_row_id,
            "e": self.expires,
            "t": self.stamp,
            **branch_of(self.dataset),
            **({"h": self.blob_handling} if self.blob_handling is not None else {}),
        }
        return signer.sign(TICKET_KIND, payload).encode("ascii")

    @classmethod
    def decode(cls, signer: Signer, token: bytes, *, now: float | None = None) -> ReadTicket:
        """Verify and parse a ticket; InvalidArgument if forged, altered or expired."""
        p = signer.verify(TICKET_KIND, token)
        try:
            ticket = cls(
                dataset=DatasetName(_typed(p["d"], str), _typed(p.get("b"), str, optional=True)),
                version=_typed(p["v"], int),
                fragment_id=_typed(p["f"], int, optional=True),
                row_range=_range(p["r"]),
                columns=_columns(p["c"]),
                filter=_typed(p["q"], str, optional=True),
                limit=_typed(p["l"], int, optional=True),
                with_row_id=_typed(p["i"], bool),
                expires=_typed(p["e"], int, optional=True),
                stamp=_typed(p["t"], int, optional=True),
                blob_handling=_typed(p.get("h"), str, optional=True),
            )
        except (KeyError, TypeError, ValueError):
            raise InvalidArgument("invalid ticket: malformed payload") from None
        if ticket.expires is not None and (now or time.time()) > ticket.expires:
            raise InvalidArgument("ticket expired: call GetFlightInfo again for fresh tickets")
        return ticket


def _typed(value: Any, kind: type, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if kind is int and isinstance(value, bool):
        raise TypeError("bool is not int")
    if not isinstance(value, kind):
        raise TypeError(f"expected {kind.__name__}")
    return value


def _range(value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("bad range")
    first, end = (_typed(v, int) for v in value)
    if not 0 <= first < end:
        raise ValueError("bad range")
    return first, end


def _columns(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise TypeError("columns")
    return tuple(_typed(c, str) for c in value)
