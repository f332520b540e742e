"""Statement handles: a prepared statement, or a planned query's ticket, as bytes the client
holds and sends back.

Handles are stateless: they carry the SQL text (or the Substrait plan), its bound
parameters and (in a ticket) the dataset versions its plan read, so nothing is kept on the
server for a client that never closes a statement, and any server behind a balancer can
answer. Nothing in a handle grants anything: every use plans the statement again with the
caller's own rights.
"""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from quiver.flight_server.errors import InvalidArgument

_PREFIX = b"quiver-sql/1:"
MAX_HANDLE_BYTES = 4 << 20


@dataclass(frozen=True)
class Statement:
    """A statement's SQL (or serialized Substrait plan), its parameter values, and a planned
    query's pinned versions."""

    query: str | bytes
    parameters: bytes | None = None  # one row of parameter values, as an Arrow IPC stream
    versions: dict[str, int] = field(default_factory=dict)
    query_id: str = ""  # a planned query's id, for CancelFlightInfo

    def encode(self) -> bytes:
        doc: dict[str, Any] = (
            {"q": self.query}
            if isinstance(self.query, str)
            else {"s": base64.b64encode(self.query).decode()}
        )
        if self.parameters is not None:
            doc["p"] = base64.b64encode(self.parameters).decode()
        if self.versions:
            doc["v"] = self.versions
        if self.query_id:
            doc["id"] = self.query_id
        data = _PREFIX + json.dumps(doc, separators=(",", ":")).encode()
        if len(data) > MAX_HANDLE_BYTES:
            raise InvalidArgument(
                f"statement with its parameters is {len(data)} bytes; at most {MAX_HANDLE_BYTES}"
            )
        return data

    @classmethod
    def decode(cls, data: bytes) -> Statement:
        """The statement a handle holds; InvalidArgument for bytes that are not one."""
        if not data.startswith(_PREFIX) or len(data) > MAX_HANDLE_BYTES:
            raise InvalidArgument("not a prepared statement handle of this server")
        try:
            doc = json.loads(data[len(_PREFIX) :])
            query = doc["q"] if "s" not in doc else base64.b64decode(doc["s"], validate=True)
            params = doc.get("p")
            versions = doc.get("v", {})
            query_id = doc.get("id", "")
            ok = (
                isinstance(query, str | bytes)
                and isinstance(versions, dict)
                and all(isinstance(k, str) and type(v) is int for k, v in versions.items())
                and isinstance(query_id, str)
            )
            parameters = base64.b64decode(params, validate=True) if params is not None else None
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            raise InvalidArgument("not a prepared statement handle of this server")
        return cls(query, parameters, versions, query_id)

    def planned(self, versions: dict[str, int]) -> Statement:
        """This statement as a query ticket: the versions its plan read and a fresh id."""
        return replace(self, versions=versions, query_id=secrets.token_hex(8))

    def with_parameters(self, table: pa.Table) -> Statement:
        """This statement with `table`'s rows as its parameter values."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return replace(self, parameters=sink.getvalue().to_pybytes())

    def parameter_rows(self) -> list[list[pa.Scalar]]:
        """The bound parameter values, one list per row (none without parameters)."""
        if self.parameters is None:
            return []
        try:
            table = pa.ipc.open_stream(self.parameters).read_all()
        except pa.ArrowInvalid:
            raise InvalidArgument("the statement's parameters are not an Arrow stream") from None
        return parameter_rows(table)

    def single_parameters(self) -> list[pa.Scalar] | None:
        """The parameter values of a query: one row at most."""
        rows = self.parameter_rows()
        if not rows:
            return None
        if len(rows) > 1:
            raise InvalidArgument(
                f"a query takes one row of parameters, not {len(rows)} (use an update "
                "statement to run once per row)"
            )
        return rows[0]


def parameter_rows(table: pa.Table) -> list[list[pa.Scalar]]:
    """A table of parameter values as one list of values per row (by column position)."""
    return [[table.column(c)[r] for c in range(table.num_columns)] for r in range(table.num_rows)]
