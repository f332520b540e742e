"""The gRPC status of each error code, and the error details every failed call carries.

A failed call ends with a gRPC status code (the table below) and, in the standard
`grpc-status-details-bin` trailer (which pyarrow clients read as a Flight error's
`extra_info`), a serialized `google.rpc.Status` whose one detail is a `google.rpc.ErrorInfo`:
``reason`` is the Quiver code in capitals (``NOT_FOUND``, ``COMMIT_CONFLICT``), ``domain`` is
``quiver``, and ``metadata`` holds the error's other fields (``retryable``, ``version``...):
strings as they are, other values as JSON text. Every gRPC library decodes it: grpc-go's
`status.FromError(err).Details()`, Java's `StatusProto.fromThrowable`, Python's
`grpc_status.rpc_status`, tonic's `tonic-types`.

Arrow Flight's transport sends only the codes of the Flight protocol (UNKNOWN, INTERNAL,
INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, ALREADY_EXISTS, CANCELLED, UNAUTHENTICATED,
PERMISSION_DENIED, UNIMPLEMENTED, UNAVAILABLE), so the codes gRPC has beyond them are sent as
the Flight code Arrow's own clients turn them into: a retryable conflict (ABORTED) as
UNAVAILABLE, a refused state (FAILED_PRECONDITION) as INVALID_ARGUMENT, damaged data
(DATA_LOSS) as INTERNAL. ``reason`` tells them apart.

The encoding is written by hand (three small messages): registering the `google.rpc` protos in
this package would clash with `googleapis-common-protos` in a user's environment.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

DOMAIN = "quiver"
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"

# gRPC status codes (grpc/status.h), by name
OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
UNAUTHENTICATED = 16

# Quiver code -> gRPC status code
GRPC_STATUS: dict[str, int] = {
    "invalid_argument": INVALID_ARGUMENT,
    "not_found": NOT_FOUND,
    "already_exists": ALREADY_EXISTS,
    "failed_precondition": INVALID_ARGUMENT,
    "commit_conflict": INVALID_ARGUMENT,  # UNAVAILABLE when retryable (`grpc_status`)
    "unauthenticated": UNAUTHENTICATED,
    "permission_denied": PERMISSION_DENIED,
    "unavailable": UNAVAILABLE,
    "unimplemented": UNIMPLEMENTED,
    "cancelled": CANCELLED,
    "data_corrupt": INTERNAL,
    "internal": INTERNAL,
    "deadline_exceeded": DEADLINE_EXCEEDED,
}


def grpc_status(code: str, details: dict[str, Any] | None = None) -> int:
    """The gRPC status code a failed call with this Quiver code ends with."""
    if code == "commit_conflict" and (details or {}).get("retryable"):
        return UNAVAILABLE
    return GRPC_STATUS.get(code, INTERNAL)


class ErrorDetails(NamedTuple):
    """What a `grpc-status-details-bin` trailer said."""

    grpc_code: int
    message: str
    code: str | None  # the Quiver code (ErrorInfo.reason in lower case)
    details: dict[str, Any]  # the code and the other fields


# -- protobuf wire format (varints and length-delimited fields only) ----------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs of a message: ints for varints, bytes for the rest."""
    out: list[tuple[int, int | bytes]] = []
    i, end = 0, len(data)

    def varint() -> int:
        nonlocal i
        shift = value = 0
        while True:
            if i >= end or shift > 63:
                raise ValueError("truncated varint")
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while i < end:
        key = varint()
        number, kind = key >> 3, key & 7
        if kind == 0:
            out.append((number, varint()))
        elif kind == 2:
            length = varint()
            if i + length > end:
                raise ValueError("truncated field")
            out.append((number, data[i : i + length]))
            i += length
        elif kind == 1:
            i += 8
        elif kind == 5:
            i += 4
        else:
            raise ValueError(f"unsupported wire type {kind}")
    if i != end:
        raise ValueError("truncated message")
    return out


def _metadata_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _parse_metadata_value(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return text if isinstance(value, str) else value


def encode(code: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    """The serialized google.rpc.Status of a failed call (see the module's docstring)."""
    fields = {k: v for k, v in (details or {}).items() if k != "code" and v is not None}
    info = _field(1, code.upper().encode()) + _field(2, DOMAIN.encode())
    for key in sorted(fields):
        entry = _field(1, key.encode()) + _field(2, _metadata_value(fields[key]).encode())
        info += _field(3, entry)
    detail = _field(1, ERROR_INFO_TYPE.encode()) + _field(2, info)
    status = _varint(1 << 3 | 0) + _varint(grpc_status(code, details))
    return status + _field(2, message.encode()) + _field(3, detail)


def decode(raw: bytes) -> ErrorDetails | None:
    """The details of a `grpc-status-details-bin` value (None when it is not a
    google.rpc.Status); a JSON object, as older Quiver servers sent, is read too."""
    raw = bytes(raw)
    if raw[:1] == b"{":
        try:
            doc = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(doc, dict):
            return None
        code = doc.get("code") if isinstance(doc.get("code"), str) else None
        return ErrorDetails(grpc_status(code or "internal", doc), "", code, doc)
    try:
        grpc_code, message, code, details = 0, "", None, {}
        for number, value in _fields(raw):
            if number == 1 and isinstance(value, int):
                grpc_code = value
            elif number == 2 and isinstance(value, bytes):
                message = value.decode("utf-8", "replace")
            elif number == 3 and isinstance(value, bytes):
                parts = dict(_fields(value))
                if parts.get(1) != ERROR_INFO_TYPE.encode() or not isinstance(parts.get(2), bytes):
                    continue
                reason, domain, fields = "", "", {}
                for n, v in _fields(parts[2]):  # type: ignore[arg-type]
                    if n == 1 and isinstance(v, bytes):
                        reason = v.decode("utf-8", "replace")
                    elif n == 2 and isinstance(v, bytes):
                        domain = v.decode("utf-8", "replace")
                    elif n == 3 and isinstance(v, bytes):
                        entry = dict(_fields(v))
                        key, text = entry.get(1, b""), entry.get(2, b"")
                        if isinstance(key, bytes) and isinstance(text, bytes):
                            fields[key.decode()] = _parse_metadata_value(text.decode())
                if domain == DOMAIN and reason:
                    code = reason.lower()
                    details = {"code": code, **fields}
    except (ValueError, UnicodeDecodeError):
        return None
    return ErrorDetails(grpc_code, message, code, details)
