"""Flight SQL messages on the wire: commands and action bodies packed in a
`google.protobuf.Any` (type URL `type.googleapis.com/arrow.flight.protocol.sql.<Name>`),
DoPut answers and plain Flight session messages serialized as they are."""

from __future__ import annotations

from google.protobuf import any_pb2
from google.protobuf.message import DecodeError, Message

from quiver.flight_server.errors import InvalidArgument, Unimplemented
from quiver.flight_server.sql import flight_session_pb2 as session
from quiver.flight_server.sql import flight_sql_pb2 as sql

__all__ = ["sql", "session", "pack", "unpack", "is_flight_sql", "SQL_TYPE_PREFIX"]

SQL_TYPE_PREFIX = "type.googleapis.com/arrow.flight.protocol.sql."
# every message a client may send packed in an Any, by its short name
_MESSAGES: dict[str, type[Message]] = {
    name: cls
    for name, cls in vars(sql).items()
    if isinstance(cls, type) and issubclass(cls, Message)
}


def pack(message: Message) -> bytes:
    """`message` packed in an Any, serialized (a descriptor's command, a ticket, a body)."""
    wrapped = any_pb2.Any()
    wrapped.Pack(message)
    return wrapped.SerializeToString()


def is_flight_sql(data: bytes) -> bool:
    """Whether `data` is an Any holding a Flight SQL message (cheap: Quiver's own commands
    are JSON and its tickets start with other bytes)."""
    return data[:1] == b"\n" and SQL_TYPE_PREFIX.encode() in data[:80]


def unpack(data: bytes) -> Message | None:
    """The Flight SQL message packed in `data`, or None if `data` holds none; a message
    that cannot be decoded is InvalidArgument, one this server does not know Unimplemented."""
    wrapped = any_pb2.Any()
    try:
        wrapped.ParseFromString(data)
    except DecodeError:
        return None
    if not wrapped.type_url.startswith(SQL_TYPE_PREFIX):
        return None
    name = wrapped.type_url[len(SQL_TYPE_PREFIX) :]
    cls = _MESSAGES.get(name)
    if cls is None:
        raise Unimplemented(f"Flight SQL message {name} is not supported")
    message = cls()
    try:
        message.ParseFromString(wrapped.value)
    except DecodeError:
        raise InvalidArgument(f"the Flight SQL message {name} could not be decoded") from None
    return message
