"""`DatasetService`: what the Flight server does, without the transport.

The server (`flight_server.server`) turns RPCs into calls of this class and its results
and exceptions into Flight objects; tests and other front ends can call it directly. It
checks the caller's rights and hands each job to its module:

- dataset handles by name (`flight_server.handles`);
- `list_datasets`, `plan_scan`, `schema`, `read` (`flight_server.reads`);
- `put`, staged commits, aborts and the staging sweep (`flight_server.writes`);
- `action(name, body)` through the action table (`flight_server.actions`).

Every name is validated before storage is touched; `authorize(identity, dataset, right)`
is called before any dataset is read ("read") or changed ("write").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from quiver.flight_server.actions import find_action, parse_body
from quiver.flight_server.auth import Identity, authorize
from quiver.flight_server.budget import MemoryBudget
from quiver.flight_server.config import DEFAULT_STAGED_TTL, DEFAULT_TICKET_TTL, ServerConfig
from quiver.flight_server.errors import Scrubber
from quiver.flight_server.handles import DatasetHandles
from quiver.flight_server.names import validate_name
from quiver.flight_server.nearest import NearestTicket, is_nearest_ticket
from quiver.flight_server.protocol import PutRequest, ReadRequest
from quiver.flight_server.reads import DatasetSummary, EndpointStream, Reads, ScanPlan
from quiver.flight_server.tickets import ReadTicket, Signer
from quiver.flight_server.writes import Writes
from quiver.wire.requests import READ, WRITE


class DatasetService:
    """Datasets under one storage root, served through one signer."""

    def __init__(
        self,
        root: str,
        *,
        storage_options: dict[str, Any] | None = None,
        signer: Signer | None = None,
        max_rows_per_endpoint: int | None = None,
        batch_size: int | None = None,
        ticket_ttl: int = DEFAULT_TICKET_TTL,
        staged_ttl: int = DEFAULT_STAGED_TTL,
    ) -> None:
        self.signer = signer or Signer()
        self.handles = DatasetHandles(root, storage_options)
        self.reads = Reads(
            self.handles,
            self.signer,
            ticket_ttl=ticket_ttl,
            max_rows_per_endpoint=max_rows_per_endpoint,
            batch_size=batch_size,
        )
        self.writes = Writes(self.handles, self.signer, staged_ttl=staged_ttl)
        self.serving = True
        # the server's memory budget, which index builds share with DoGet streams
        self.budget: MemoryBudget | None = None

    @classmethod
    def from_config(cls, config: ServerConfig) -> DatasetService:
        """The service a `ServerConfig` describes."""
        return cls(
            config.root,
            storage_options=config.storage_options,
            signer=Signer(config.ticket_key),
            max_rows_per_endpoint=config.max_rows_per_endpoint,
            batch_size=config.batch_size,
            ticket_ttl=config.ticket_ttl,
            staged_ttl=config.staged_ttl,
        )

    @property
    def root(self) -> str:
        """The normalised storage root."""
        return self.handles.root

    @property
    def staged_ttl(self) -> int:
        """Seconds a staged fragment may wait for its commit."""
        return self.writes.staged_ttl

    # -- names, access and errors -------------------------------------------------------
    def uri(self, name: str) -> str:
        """The URI of dataset `name` (validated, confined to the root)."""
        return self.handles.uri(name)

    def scrubber_for(self, name: str | None) -> Scrubber:
        """A scrubber that also turns this dataset's URI into its name."""
        return self.handles.scrubber_for(name)

    def explain(
        self,
        exc: BaseException,
        name: str | None,
        version: int | None = None,
        fragment_id: int | None = None,
    ) -> BaseException:
        """`exc` as a client should see it (a damaged file becomes DataCorrupt)."""
        return self.handles.explain(exc, name, version, fragment_id)

    def authorize(self, identity: Any, dataset: str, right: str) -> None:
        """Allow or refuse (PermissionDenied) `right` ("read"/"write") on `dataset`.

        `identity` is the auth middleware's `Identity` (rights from the auth file); anything
        else (None: the server runs without an auth file) is allowed everything.
        """
        authorize(identity if isinstance(identity, Identity) else None, dataset, right)

    @staticmethod
    def may_read(identity: Any, dataset: str) -> bool:
        """Whether `identity` may read `dataset` (always, without authentication)."""
        return not isinstance(identity, Identity) or identity.may(READ, dataset)

    def set_serving(self, serving: bool) -> None:
        """Mark the service (not) ready; `healthcheck` answers unavailable while not."""
        self.serving = serving

    # -- reads --------------------------------------------------------------------------
    def list_datasets(self, prefix: str = "", identity: Any = None) -> list[DatasetSummary]:
        """Every readable dataset under the root whose name starts with `prefix`."""
        return self.reads.list_datasets(prefix, lambda name: self.may_read(identity, name))

    def schema(self, request: ReadRequest, identity: Any = None) -> pa.Schema:
        """The schema DoGet will stream for this request."""
        self.authorize(identity, request.dataset, READ)
        return self.reads.schema(request)

    def plan_scan(self, request: ReadRequest, identity: Any = None) -> ScanPlan:
        """Resolve the version, check projection and filter, and cut the read into endpoints."""
        self.authorize(identity, request.dataset, READ)
        return self.reads.plan_scan(request)

    def ticket(self, token: bytes) -> ReadTicket | NearestTicket:
        """A verified read ticket (or a nearest-neighbour search's); InvalidArgument if
        forged, altered, expired or too big."""
        if is_nearest_ticket(token):
            return NearestTicket.decode(self.signer, token)
        return self.reads.ticket(token)

    def read(
        self, token: bytes | ReadTicket | NearestTicket, identity: Any = None
    ) -> EndpointStream:
        """Verify a ticket (unless given verified) and plan streaming its rows; nothing is
        read before the stream is iterated."""
        verified = isinstance(token, ReadTicket | NearestTicket)
        t = token if verified else self.ticket(token)
        validate_name(t.dataset)  # before rights are looked up (the read checks the directory)
        self.authorize(identity, t.dataset, READ)
        return self.reads.read(t)

    # -- writes -------------------------------------------------------------------------
    def put(
        self,
        request: PutRequest,
        schema: pa.Schema,
        batches: Iterable[pa.RecordBatch],
        cancelled: Callable[[], bool] = lambda: False,
        identity: Any = None,
    ) -> dict[str, Any]:
        """Write a stream: committed now, or staged as opaque fragment strings."""
        self.handles.uri(request.dataset)
        self.authorize(identity, request.dataset, WRITE)
        return self.writes.put(request, schema, batches, cancelled)

    def sweep_staging(self, now: float | None = None) -> dict[str, int]:
        """Remove the files of stagings that expired uncommitted (see `Writes`)."""
        return self.writes.sweep_staging(now)

    # -- actions ------------------------------------------------------------------------
    def action(self, name: str, body: bytes | None, identity: Any = None) -> dict[str, Any]:
        """Run one DoAction by name with its JSON body; returns the JSON-able result."""
        action = find_action(name)
        f = parse_body(action, body)
        if action.right is not None:
            self.authorize(identity, f.dataset(), action.right)
            self.uri(f.dataset())  # a dataset whose directory leads out of the root: refused
        return action.run(self, f)
