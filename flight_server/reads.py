"""Reads: listing datasets, planning a scan into signed endpoints, streaming one endpoint.

- `list_datasets(prefix)` → `DatasetSummary` per dataset under the root;
- `plan_scan(ReadRequest)` → `ScanPlan`: the projected schema, the resolved version and one
  `PlannedEndpoint` (signed ticket) per fragment or row range that can hold matching rows;
- `read(ticket)` → `EndpointStream`: that endpoint's batches (lazily) and the memory one
  stream of them holds, for the server's `MemoryBudget`.

Callers check the caller's rights first (`DatasetService`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from quiver.flight_server import nearest
from quiver.flight_server.errors import FailedPrecondition, InvalidArgument, NotFound
from quiver.flight_server.handles import DatasetHandles, known_live_rows, live_rows, stamp
from quiver.flight_server.names import discover, validate_name
from quiver.flight_server.planned import PlannedSearches
from quiver.flight_server.protocol import ReadRequest
from quiver.flight_server.tickets import ReadTicket, Signer
from quiver.format.dataset import LanceDataset, dataset
from quiver.format.dataset.changes import appended_between
from quiver.format.errors import NotAppendOnlyError

log = logging.getLogger("quiver.reads")

# DoGet batches hold about this many bytes at most (and at most --batch-size rows): what a
# stream holds is a few batches, so wide rows get fewer of them.
BATCH_BYTES = 8 << 20
# Endpoints one read may be cut into beyond one per fragment (each holds a signed ticket in
# memory: a million of them cost gigabytes).
MAX_ENDPOINTS = 20_000
# A filtered read its indices narrow to at most this many candidate rows (in fragments they
# cover) is one endpoint: a round trip per fragment would cost more than reading them.
FEW_CANDIDATES = 16_384


@dataclass(frozen=True)
class DatasetSummary:
    """One dataset of a listing."""

    name: str
    version: int
    schema: pa.Schema
    rows: int
    fragments: int


@dataclass(frozen=True)
class PlannedEndpoint:
    """One endpoint: its signed ticket and what it covers."""

    ticket: bytes
    fragment_id: int | None
    row_range: tuple[int, int] | None
    rows: int  # rows it returns; -1 when a filter makes that unknown
    version: int | None = None  # the version its ticket pins, when not the plan's

    def metadata(self, version: int) -> dict[str, Any]:
        """The endpoint's `app_metadata` document."""
        pinned = self.version if self.version is not None else version
        out: dict[str, Any] = {"version": pinned, "fragment_id": self.fragment_id}
        if self.row_range is not None:
            out["row_range"] = list(self.row_range)
        out["rows"] = self.rows
        return out


@dataclass(frozen=True)
class ScanPlan:
    """GetFlightInfo's answer before it becomes Flight objects."""

    dataset: str
    version: int
    schema: pa.Schema
    endpoints: list[PlannedEndpoint]
    total_records: int  # -1 when a filter makes it unknown
    expires: int | None  # unix seconds, or None when tickets never expire


@dataclass
class EndpointStream:
    """One ticket's rows, not read until iterated, and the bytes streaming them holds."""

    ticket: ReadTicket
    schema: pa.Schema
    batches: Iterator[pa.RecordBatch]
    memory_estimate: int  # what one stream of this scan holds at most (a few decoded batches)

    def close(self) -> None:
        """Stop reading (background readahead included) and drop what was read."""
        close = getattr(self.batches, "close", None)
        if close is not None:
            close()


class Reads:
    """Plans and streams reads of the datasets behind `handles`, signing with `signer`."""

    def __init__(
        self,
        handles: DatasetHandles,
        signer: Signer,
        *,
        ticket_ttl: int,
        max_rows_per_endpoint: int | None,
        batch_size: int | None,
    ) -> None:
        self.handles = handles
        self.signer = signer
        self.ticket_ttl = ticket_ttl
        self.max_rows_per_endpoint = max_rows_per_endpoint
        self.batch_size = batch_size
        self.planned = PlannedSearches()  # searches GetFlightInfo built, for their DoGet

    def open(self, request: ReadRequest) -> LanceDataset:
        """The dataset version a read request resolves to."""
        return self.handles.open_ref(request.dataset, request.version, request.tag, request.as_of)

    def list_datasets(self, prefix: str, readable: Any) -> list[DatasetSummary]:
        """Every dataset under the root whose name starts with `prefix` and for which
        `readable(name)` is true (the others are not listed, not even by name)."""
        h = self.handles
        out = []
        for found in discover(h.root, h.storage_options, prefix):
            if not readable(found.name):
                continue
            try:
                ds = dataset(h.uri(found.name), storage_options=h.storage_options)
                frags = ds.manifest.pb.fragments
                rows = sum(live_rows(f) for f in frags)
                out.append(DatasetSummary(found.name, ds.version, ds.schema, rows, len(frags)))
            except Exception as e:  # noqa: BLE001 - one bad dataset must not hide the rest
                log.warning("listing skips dataset %r: %s", found.name, type(e).__name__)
        return out

    def schema(self, request: ReadRequest) -> pa.Schema:
        """The schema DoGet will stream for this request."""
        if request.search:
            return nearest.nearest_schema(self, request)
        return _scanner(self.open(request), request).projected_schema

    def plan_scan(self, request: ReadRequest) -> ScanPlan:
        """Resolve the version, check projection and filter, and cut the read into endpoints
        (a nearest-neighbour search is one endpoint: `flight_server.nearest`)."""
        if request.search:
            found = nearest.plan_nearest(self, request)
            endpoint = PlannedEndpoint(found.ticket, None, None, -1)
            return ScanPlan(
                request.dataset, found.version, found.schema, [endpoint], -1, found.expires
            )
        ds = self.open(request)
        scan = _scanner(ds, request)
        schema = scan.projected_schema  # raises on bad columns / filter
        expires = int(time.time()) + self.ticket_ttl if self.ticket_ttl else None
        if request.appended_since is not None:
            return self._plan_appended(request, ds, schema, expires)
        pinned = stamp(ds)

        def ticket(fid: int | None, rng: tuple[int, int] | None, limit: int | None) -> bytes:
            return ReadTicket(
                dataset=request.dataset,
                version=ds.version,
                fragment_id=fid,
                row_range=rng,
                columns=request.columns,
                filter=request.filter,
                limit=limit,
                with_row_id=request.with_row_id,
                expires=expires,
                stamp=pinned,
                blob_handling=request.blob_handling,
            ).encode(self.signer)

        frags = [f for f in ds.get_fragments() if f.physical_rows]
        pruning = scan.index_pruning if request.filter is not None else None
        if pruning is not None:  # fragments the filter's indices rule out get no endpoint
            frags = [f for f in frags if pruning.may_match(f.fragment_id)]
        endpoints: list[PlannedEndpoint] = []
        if request.limit == 0:
            return ScanPlan(request.dataset, ds.version, schema, [], 0, expires)
        few = (
            pruning is not None
            and len(pruning.rows) <= FEW_CANDIDATES
            and all(f.fragment_id in pruning.covered for f in frags)
        )
        if request.filter is not None and (request.limit is not None or few):
            # the limit counts matching rows over the whole dataset, and the indices' few
            # candidates are read in less time than more round trips take: one endpoint
            if frags:
                endpoints.append(PlannedEndpoint(ticket(None, None, request.limit), None, None, -1))
            return ScanPlan(request.dataset, ds.version, schema, endpoints, -1, expires)
        remaining = request.limit
        step = request.max_rows_per_endpoint or self.max_rows_per_endpoint
        for frag in frags:
            live = known_live_rows(frag)
            if not live:
                continue
            for rng, rows in _pieces(frag, live, step):
                if pruning is not None and not pruning.may_match(frag.fragment_id, rng):
                    continue
                _check_endpoint_count(request.dataset, len(endpoints), len(frags), step)
                limit = None
                if remaining is not None:
                    if remaining == 0:
                        break
                    if rows > remaining:
                        rows = limit = remaining
                    remaining -= rows
                endpoints.append(
                    PlannedEndpoint(
                        ticket(frag.fragment_id, rng, limit),
                        frag.fragment_id,
                        rng,
                        rows if request.filter is None else -1,
                    )
                )
        total = sum(e.rows for e in endpoints) if request.filter is None else -1
        return ScanPlan(request.dataset, ds.version, schema, endpoints, total, expires)

    def _plan_appended(
        self, request: ReadRequest, ds: LanceDataset, schema: pa.Schema, expires: int | None
    ) -> ScanPlan:
        """Endpoints of the rows appended in versions (appended_since, ds.version], each
        ticket pinned to the version that appended its fragment (`format.dataset.changes`)."""
        name, since = request.dataset, request.appended_since
        assert since is not None
        if since > ds.version:
            raise InvalidArgument(
                f"appended_since {since} is after version {ds.version} of dataset {name!r}"
            )
        try:
            appended = appended_between(self.handles.store(name), since, ds.version)
        except NotAppendOnlyError as e:
            reason = str(e).split(": ", 1)[-1]
            raise FailedPrecondition(
                f"dataset {name!r}: {reason}; the rows appended since version {since} cannot "
                f"be followed past version {e.version} (start again after it)",
                version=e.version,
                operation=e.operation,
            ) from None
        step = request.max_rows_per_endpoint or self.max_rows_per_endpoint
        endpoints: list[PlannedEndpoint] = []
        for a in appended:
            pinned = self.handles.open_version(name, a.version)
            frag = pinned.get_fragment(a.fragment_id)
            live = known_live_rows(frag) if frag is not None else 0
            for rng, rows in _pieces(frag, live, step) if live else ():
                _check_endpoint_count(name, len(endpoints), len(appended), step)
                token = ReadTicket(
                    dataset=name,
                    version=a.version,
                    fragment_id=a.fragment_id,
                    row_range=rng,
                    columns=request.columns,
                    filter=request.filter,
                    with_row_id=request.with_row_id,
                    expires=expires,
                    stamp=stamp(pinned),
                    blob_handling=request.blob_handling,
                ).encode(self.signer)
                shown = rows if request.filter is None else -1
                endpoints.append(PlannedEndpoint(token, a.fragment_id, rng, shown, a.version))
        total = sum(e.rows for e in endpoints) if request.filter is None else -1
        return ScanPlan(name, ds.version, schema, endpoints, total, expires)

    def ticket(self, token: bytes) -> ReadTicket:
        """A verified read ticket; InvalidArgument if forged, altered, expired or too big."""
        return ReadTicket.decode(self.signer, token)

    def open_pinned(self, name: str, version: int, pinned: int | None) -> LanceDataset:
        """The version a ticket pins; NotFound if the dataset was replaced since."""
        validate_name(name)
        handles = self.handles
        ds = handles.open_version(name, version)
        if pinned is not None and stamp(ds) != pinned:
            handles.forget(name)  # the dataset was dropped and created again: look again
            ds = handles.open_version(name, version)
            if stamp(ds) != pinned:
                raise NotFound(
                    f"version {version} of dataset {name!r} no longer exists "
                    "(the dataset was replaced); call GetFlightInfo again"
                )
        return ds

    def read(self, t: ReadTicket | nearest.NearestTicket) -> EndpointStream:
        """Plan streaming a verified ticket's rows (bounded memory, whatever the fragment
        size); nothing is read before the stream is iterated."""
        if isinstance(t, nearest.NearestTicket):
            schema, batches = nearest.read_nearest(self, t)
            return EndpointStream(t, schema, batches, BATCH_BYTES)  # type: ignore[arg-type]
        ds = self.open_pinned(t.dataset, t.version, t.stamp)
        fragments, physical_range = None, None
        if t.fragment_id is not None:
            frag = ds.get_fragment(t.fragment_id)
            if frag is None:
                raise NotFound(
                    f"fragment {t.fragment_id} is not in version {t.version} of {t.dataset!r}"
                )
            fragments = [frag]
            if t.row_range is not None:
                first, end = t.row_range
                if not 0 <= first <= end <= frag.physical_rows:
                    raise InvalidArgument("invalid ticket: row range outside the fragment")
                physical_range = (first, end)
        scanner = ds.scanner(
            columns=list(t.columns) if t.columns is not None else None,
            filter=t.filter,
            limit=t.limit,
            batch_size=self.batch_size,
            with_row_id=t.with_row_id,
            fragments=fragments,
            # a background thread decodes the next batch while this one is sent, one ahead
            # (unless other streams keep the cores busy already: `readahead`)
            fragment_readahead=2,
            readahead_bytes=1,
            batch_bytes=BATCH_BYTES,
            physical_range=physical_range,
            **({"blob_handling": t.blob_handling} if t.blob_handling else {}),
        )
        nbytes = scanner.memory_estimate()
        # the scanner's generator rather than to_reader(): closing it stops the readahead
        return EndpointStream(t, scanner.projected_schema, scanner.to_batches(), nbytes)


def _scanner(ds: LanceDataset, request: ReadRequest) -> Any:
    return ds.scanner(
        columns=list(request.columns) if request.columns is not None else None,
        filter=request.filter,
        limit=request.limit,
        with_row_id=request.with_row_id,
        **({"blob_handling": request.blob_handling} if request.blob_handling else {}),
    )


def _pieces(frag: Any, live: int, step: int | None) -> Iterator[tuple[tuple[int, int] | None, int]]:
    """(physical row range or None for the whole fragment, live rows in it), cutting
    fragments into ranges of at most `step` physical rows."""
    physical = frag.physical_rows
    if step is None or physical <= step:
        yield None, live
        return
    deleted = frag.deleted_offsets if live != physical else np.empty(0, np.uint64)
    for first in range(0, physical, step):
        end = min(first + step, physical)
        gone = int(np.searchsorted(deleted, end)) - int(np.searchsorted(deleted, first))
        if end - first - gone > 0:
            yield (first, end), end - first - gone


def _check_endpoint_count(name: str, planned: int, fragments: int, step: int | None) -> None:
    """InvalidArgument once a read cut by `step` rows would get more endpoints than allowed."""
    if planned >= max(MAX_ENDPOINTS, fragments):
        raise InvalidArgument(
            f"max_rows_per_endpoint {step} cuts dataset {name!r} into more than "
            f"{max(MAX_ENDPOINTS, fragments)} endpoints; ask for more rows per endpoint"
        )
