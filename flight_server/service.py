"""`DatasetService`: what the Flight server does, without the transport.

The server (`flight_server.server`) turns RPCs into calls of this class and its results
and exceptions into Flight objects; tests and other front ends can call it directly.

- `list_datasets(prefix)` → `DatasetSummary` per dataset under the root;
- `plan_scan(ReadRequest)` → `ScanPlan`: the projected schema, the resolved version and one
  `PlannedEndpoint` (signed ticket) per fragment or row range that can hold matching rows;
- `read(ticket)` → `EndpointStream`: that endpoint's batches (lazily) and the memory
  one stream of them holds, for the server's `MemoryBudget`;
- `put(PutRequest, reader)` → `{"version", "rows"}` or, staging, `{"fragments", "rows"}`;
- `action(name, body)` → the JSON-able result of a DoAction (see `ACTIONS`).

Every name is validated before storage is touched; `authorize(identity, dataset, right)`
is called before any dataset is read ("read") or changed ("write").
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import itertools
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from fsspec.implementations.local import LocalFileSystem

from flight_server.auth import Identity, authorize
from flight_server.config import DEFAULT_STAGED_TTL, DEFAULT_TICKET_TTL, ServerConfig
from flight_server.confine import check_dataset_dir
from flight_server.corruption import data_corrupt
from flight_server.errors import (
    AlreadyExists,
    Cancelled,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Scrubber,
    Unavailable,
    Unimplemented,
)
from flight_server.names import dataset_uri, discover, normalize_root, validate_name
from flight_server.protocol import (
    Fields,
    PutRequest,
    ReadRequest,
    job_field,
    parse_object,
    version_ref,
)
from flight_server.staging import AUTO_JOB_PREFIX, STAGING_DIR, StagingLedger, new_job
from flight_server.tickets import FRAGMENT_KIND, ReadTicket, Signer
from format.dataset import (
    LanceDataset,
    LanceOperation,
    commit,
    dataset,
    write_fragments,
)
from format.dataset.changes import appended_between
from format.errors import (
    CommitConflictError,
    CorruptFileError,
    DatasetAlreadyExistsError,
    DatasetNotFoundError,
    InvalidInputError,
    NotAppendOnlyError,
    SchemaMismatchError,
)
from format.io.store import ObjectStore, filesystem, open_store
from format.proto import table_pb2
from format.table import versions as _versions
from format.table.commit import read_transaction
from format.table.manifest import storage_version_of_file
from format.table.schema import RESERVED_COLUMNS, LanceSchema, check_new_schema
from format.table.transaction import IDEMPOTENCY_KEY

log = logging.getLogger("quiver.service")

READ, WRITE = "read", "write"
MAX_AGE_SECONDS = 3_155_760_000  # 100 years: cleanup's older_than_seconds
IDEMPOTENCY_SCAN_LIMIT = 1000  # versions searched for an idempotency key without read_version
_CACHE_SIZE = 64
# DoGet batches hold about this many bytes at most (and at most --batch-size rows): what a
# stream holds is a few batches, so wide rows get fewer of them.
BATCH_BYTES = 8 << 20


# ------------------------------------------------------------------------------- results
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


@dataclass(frozen=True)
class StagedFragment:
    """A verified staged fragment: the engine fragment plus what the commit must check."""

    token: str
    fragment: table_pb2.DataFragment
    schema: pa.Schema | None  # set when its field ids are those of LanceSchema.from_arrow
    signature: str  # digest of the Lance schema (ids, names, types) it was written with
    job: str | None = None  # the staging job and ledger record the put left
    record: str | None = None


def schema_signature(schema: LanceSchema) -> str:
    """A digest of what data files depend on: each field's id, parent, name, type, nullability."""
    rows = [[f.id, f.parent_id, f.name, f.logical_type, bool(f.nullable)] for f in schema.walk()]
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()[:32]


def _iso(t: dt.datetime | None) -> str | None:
    if t is None:
        return None
    if t.tzinfo is None:
        t = t.astimezone()  # naive = local time, as the engine reports versions()
    return t.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _stamp(ds: LanceDataset) -> int:
    """The commit time of a version in nanoseconds: tells apart equal numbers of two lives."""
    return int(ds.manifest.pb.timestamp.ToNanoseconds())


def _known_live_rows(frag: Any) -> int:
    """Live rows of a fragment: from the manifest when it says, else from its deletion file."""
    pb = frag.metadata
    if not pb.HasField("deletion_file"):
        return int(pb.physical_rows)
    if pb.deletion_file.num_deleted_rows:
        return _live_rows(pb)
    return int(frag.count_rows())  # older writers leave the count out


def _live_rows(pb: table_pb2.DataFragment) -> int:
    return int(pb.physical_rows) - int(pb.deletion_file.num_deleted_rows)


# ------------------------------------------------------------------------------- actions
ACTIONS: dict[str, str] = {
    "commit": "Make staged fragments visible in one new version: {dataset, operation: "
    "append|overwrite|create, fragments, read_version?, idempotency_key?} -> {version, rows}",
    "abort": "Remove the files of staged, uncommitted fragments: {dataset, fragments} -> "
    "{removed_files, kept_files}",
    "describe": "Schema, version, rows and fragments of a dataset: {dataset, version?|tag?|as_of?}",
    "list_versions": "Every version of a dataset with its time and row count: {dataset}",
    "delete": "Delete the rows matching a SQL predicate: {dataset, predicate} -> {version, "
    "deleted_rows}",
    "restore": "Make an old version (number or tag) the latest: {dataset, version|tag} -> "
    "{version}",
    "create_tag": "Tag a version (default latest): {dataset, tag, version?} -> {tag, version}",
    "delete_tag": "Remove a tag: {dataset, tag}",
    "list_tags": "Every tag of a dataset and its version: {dataset} -> {tags}",
    "add_columns": "Add columns computed by SQL expressions: {dataset, columns: {name: expr}} "
    "-> {version}",
    "drop_columns": "Remove columns: {dataset, columns: [name]} -> {version}",
    "alter_columns": "Rename columns, change nullability or type: {dataset, alterations: "
    "[{path, name?, nullable?, data_type?}]} -> {version}",
    "compact": "Merge small fragments and purge deleted rows: {dataset, "
    "target_rows_per_fragment?, max_rows_per_group?, materialize_deletions?, "
    "materialize_deletions_threshold?}",
    "cleanup": "Remove old versions and unreferenced files: {dataset, older_than_seconds?, "
    "retain_versions?, delete_unverified?, error_if_tagged_old_versions?}",
    "drop_dataset": "Delete a dataset and all its files: {dataset}",
    "healthcheck": "Whether this server can serve: {} -> {status}",
}

_READ_ACTIONS = {"describe", "list_versions", "list_tags"}


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
        self.root = normalize_root(root)
        self.storage_options = dict(storage_options or {})
        self.signer = signer or Signer()
        self.max_rows_per_endpoint = max_rows_per_endpoint
        self.batch_size = batch_size
        self.ticket_ttl = ticket_ttl
        self.staged_ttl = staged_ttl
        self.serving = True
        self.scrub = Scrubber([(self.root, "<root>"), (f"file://{self.root}", "<root>")])
        self._cache: OrderedDict[tuple[str, int], LanceDataset] = OrderedDict()
        self._lock = threading.Lock()
        if "://" not in self.root:
            with contextlib.suppress(OSError):
                os.makedirs(self.root, exist_ok=True)

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

    # -- names, access and errors -------------------------------------------------------
    def uri(self, name: str) -> str:
        """The URI of dataset `name`: the name validated and, on a local root, its directory
        checked to resolve inside the root (PermissionDenied for links leading out)."""
        uri = dataset_uri(self.root, name)
        if "://" not in self.root:
            check_dataset_dir(self.root, uri, name)
        return uri

    def scrubber_for(self, name: str | None) -> Scrubber:
        """A scrubber that also turns this dataset's URI into its name."""
        if not name:
            return self.scrub
        try:
            uri = dataset_uri(self.root, name)
        except InvalidArgument:
            return self.scrub
        return self.scrub.with_pairs([(uri, name)])

    def explain(
        self,
        exc: BaseException,
        name: str | None,
        version: int | None = None,
        fragment_id: int | None = None,
    ) -> BaseException:
        """`exc` as a client should see it: a damaged file of dataset `name` becomes
        DataCorrupt naming the version, fragment and file (`flight_server.corruption`)."""
        if not isinstance(exc, CorruptFileError) or not name:
            return exc
        try:
            uri = dataset_uri(self.root, name)
        except InvalidArgument:
            return exc

        def manifest_of(v: int | None) -> table_pb2.Manifest:
            ds = self.open_version(name, v) if v is not None else self.open_latest(name)
            return ds.manifest.pb

        return data_corrupt(
            exc, name, uri, version=version, fragment_id=fragment_id, manifest_of=manifest_of
        )

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

    # -- opening ------------------------------------------------------------------------
    def open_latest(self, name: str) -> LanceDataset:
        """A fresh handle on the latest version (safe to mutate)."""
        uri = self.uri(name)
        try:
            return dataset(uri, storage_options=self.storage_options)
        except DatasetNotFoundError:
            raise NotFound(f"dataset {name!r} does not exist") from None

    def _try_latest(self, name: str) -> LanceDataset | None:
        try:
            return self.open_latest(name)
        except NotFound:
            return None

    def open_version(self, name: str, version: int) -> LanceDataset:
        """A cached, read-only handle on one version (never mutate it)."""
        uri = self.uri(name)
        key = (uri, version)
        with self._lock:
            ds = self._cache.get(key)
            if ds is not None:
                self._cache.move_to_end(key)
                return ds
        try:
            ds = dataset(uri, version=version, storage_options=self.storage_options)
        except DatasetNotFoundError:
            raise NotFound(f"dataset {name!r} does not exist") from None
        with self._lock:
            self._cache[key] = ds
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return ds

    def _forget(self, name: str) -> None:
        uri = self.uri(name)
        with self._lock:
            for key in [k for k in self._cache if k[0] == uri]:
                del self._cache[key]

    def open_ref(
        self, name: str, version: int | None, tag: str | None, as_of: str | None
    ) -> LanceDataset:
        """The dataset at a version number, tag, timestamp, or the latest (read-only)."""
        if version is not None:
            return self.open_version(name, version)
        if tag is None and as_of is None:
            return self.open_latest(name)
        uri = self.uri(name)
        try:
            ds = dataset(uri, version=tag, asof=as_of, storage_options=self.storage_options)
        except DatasetNotFoundError:
            raise NotFound(f"dataset {name!r} does not exist") from None
        if ds.uri != uri:
            raise Unimplemented(f"tag {tag!r} of dataset {name!r} is on a branch; not served")
        return ds

    def open(self, request: ReadRequest) -> LanceDataset:
        """The dataset version a read request resolves to."""
        return self.open_ref(request.dataset, request.version, request.tag, request.as_of)

    # -- listing ------------------------------------------------------------------------
    def list_datasets(self, prefix: str = "", identity: Any = None) -> list[DatasetSummary]:
        """Every readable dataset under the root whose name starts with `prefix`."""
        out = []
        for found in discover(self.root, self.storage_options, prefix):
            if not self.may_read(identity, found.name):
                continue  # unreadable datasets are not listed, not even by name
            try:
                ds = dataset(self.uri(found.name), storage_options=self.storage_options)
                frags = ds.manifest.pb.fragments
                out.append(
                    DatasetSummary(
                        found.name,
                        ds.version,
                        ds.schema,
                        sum(_live_rows(f) for f in frags),
                        len(frags),
                    )
                )
            except Exception as e:  # noqa: BLE001 - one bad dataset must not hide the rest
                log.warning("listing skips dataset %r: %s", found.name, type(e).__name__)
        return out

    # -- reads --------------------------------------------------------------------------
    def _scanner(self, ds: LanceDataset, request: ReadRequest) -> Any:
        return ds.scanner(
            columns=list(request.columns) if request.columns is not None else None,
            filter=request.filter,
            limit=request.limit,
            with_row_id=request.with_row_id,
        )

    def schema(self, request: ReadRequest, identity: Any = None) -> pa.Schema:
        """The schema DoGet will stream for this request."""
        self.authorize(identity, request.dataset, READ)
        return self._scanner(self.open(request), request).projected_schema

    def _pieces(
        self, frag: Any, live: int, step: int | None
    ) -> Iterator[tuple[tuple[int, int] | None, int]]:
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

    def plan_scan(self, request: ReadRequest, identity: Any = None) -> ScanPlan:
        """Resolve the version, check projection and filter, and cut the read into endpoints."""
        self.authorize(identity, request.dataset, READ)
        ds = self.open(request)
        schema = self._scanner(ds, request).projected_schema  # raises on bad columns / filter
        expires = int(time.time()) + self.ticket_ttl if self.ticket_ttl else None
        if request.appended_since is not None:
            return self._plan_appended(request, ds, schema, expires)
        stamp = _stamp(ds)

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
                stamp=stamp,
            ).encode(self.signer)

        frags = [f for f in ds.get_fragments() if f.physical_rows]
        endpoints: list[PlannedEndpoint] = []
        if request.limit == 0:
            return ScanPlan(request.dataset, ds.version, schema, [], 0, expires)
        if request.filter is not None and request.limit is not None:
            # the limit counts matching rows over the whole dataset: one endpoint reads it all
            if frags:
                endpoints.append(PlannedEndpoint(ticket(None, None, request.limit), None, None, -1))
            return ScanPlan(request.dataset, ds.version, schema, endpoints, -1, expires)
        remaining = request.limit
        step = request.max_rows_per_endpoint or self.max_rows_per_endpoint
        for frag in frags:
            live = _known_live_rows(frag)
            if not live:
                continue
            for rng, rows in self._pieces(frag, live, step):
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
        store = open_store(self.uri(name), self.storage_options)
        try:
            appended = appended_between(store, since, ds.version)
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
            pinned = self.open_version(name, a.version)
            frag = pinned.get_fragment(a.fragment_id)
            live = _known_live_rows(frag) if frag is not None else 0
            for rng, rows in self._pieces(frag, live, step) if live else ():
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
                    stamp=_stamp(pinned),
                ).encode(self.signer)
                shown = rows if request.filter is None else -1
                endpoints.append(PlannedEndpoint(token, a.fragment_id, rng, shown, a.version))
        total = sum(e.rows for e in endpoints) if request.filter is None else -1
        return ScanPlan(name, ds.version, schema, endpoints, total, expires)

    def ticket(self, token: bytes) -> ReadTicket:
        """A verified read ticket; InvalidArgument if forged, altered, expired or too big."""
        return ReadTicket.decode(self.signer, token)

    def read(self, token: bytes | ReadTicket, identity: Any = None) -> EndpointStream:
        """Verify a ticket (unless given verified) and plan streaming its rows (bounded
        memory, whatever the fragment size); nothing is read before the stream is iterated."""
        t = token if isinstance(token, ReadTicket) else self.ticket(token)
        validate_name(t.dataset)
        self.authorize(identity, t.dataset, READ)
        ds = self.open_version(t.dataset, t.version)
        if t.stamp is not None and _stamp(ds) != t.stamp:
            self._forget(t.dataset)  # the dataset was dropped and created again: look again
            ds = self.open_version(t.dataset, t.version)
            if _stamp(ds) != t.stamp:
                raise NotFound(
                    f"version {t.version} of dataset {t.dataset!r} no longer exists "
                    "(the dataset was replaced); call GetFlightInfo again"
                )
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
            fragment_readahead=2,
            readahead_bytes=1,
            batch_bytes=BATCH_BYTES,
            physical_range=physical_range,
        )
        nbytes = scanner.memory_estimate()
        # the scanner's generator rather than to_reader(): closing it stops the readahead
        return EndpointStream(t, scanner.projected_schema, scanner.to_batches(), nbytes)

    # -- writes -------------------------------------------------------------------------
    def _stage_token(
        self, name: str, frag: Any, schema: pa.Schema | None, sig: str, job: str, record: str
    ) -> str:
        payload = {
            "d": name,
            "f": _b64(frag.SerializeToString()),
            "s": _b64(schema.serialize().to_pybytes()) if schema is not None else None,
            "h": sig,
            "j": job,
            "r": record,
            "e": int(time.time()) + self.staged_ttl,
        }
        return self.signer.sign(FRAGMENT_KIND, payload, "staged fragment")

    def verify_fragment(self, name: str, token: Any) -> StagedFragment:
        """A staged fragment string issued by this service for dataset `name`."""
        if not isinstance(token, str):
            raise InvalidArgument("fragments must be strings returned by DoPut")
        p = self.signer.verify(FRAGMENT_KIND, token, what="staged fragment")
        try:
            frag = table_pb2.DataFragment()
            frag.ParseFromString(base64.b64decode(p["f"], validate=True))
            schema = None
            if p["s"] is not None:
                schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(p["s"], validate=True)))
            sig, owner = p["h"], p["d"]
            job, record, expires = p["j"], p["r"], p["e"]
            if not all(isinstance(x, str) for x in (sig, owner, job, record)):
                raise ValueError
            if isinstance(expires, bool) or not isinstance(expires, int):
                raise ValueError
        except Exception:  # noqa: BLE001 - a signed but unreadable payload
            raise InvalidArgument("invalid staged fragment: malformed payload") from None
        if owner != name:
            raise InvalidArgument(f"a staged fragment belongs to dataset {owner!r}, not {name!r}")
        if not frag.files or any(not _plain_file(f.path) for f in frag.files):
            raise InvalidArgument("invalid staged fragment: bad data file entry")
        if time.time() > expires:
            raise InvalidArgument(
                f"a staged fragment of dataset {name!r} expired (staged fragments can be "
                f"committed for {self.staged_ttl} s); stage the data again"
            )
        return StagedFragment(token, frag, schema, sig, job, record)

    def _remove_files(self, uri: str, frags: list[table_pb2.DataFragment]) -> int:
        """Delete staged data files (best effort); drop the dataset directory if it is empty."""
        store = open_store(uri, self.storage_options)
        removed = 0
        for frag in frags:
            for f in frag.files:
                try:
                    store.delete(f"data/{f.path}")
                    removed += 1
                except Exception as e:  # noqa: BLE001 - best effort
                    log.warning("could not remove a staged file: %s", type(e).__name__)
        if not _versions.list_manifests(store):
            for sub in (STAGING_DIR, "data", ""):
                with contextlib.suppress(Exception):
                    store.fs.rmdir(store.full_path(sub))
        return removed

    def put(
        self,
        request: PutRequest,
        schema: pa.Schema,
        batches: Iterable[pa.RecordBatch],
        cancelled: Callable[[], bool] = lambda: False,
        identity: Any = None,
    ) -> dict[str, Any]:
        """Write a stream: committed now, or staged as opaque fragment strings.

        A schema that does not fit, a stream that breaks (`batches` raises) or a call the
        client cancels (`cancelled()` turns true) leaves nothing visible and removes every
        file written.
        """
        name, mode = request.dataset, request.mode
        uri = self.uri(name)
        self.authorize(identity, name, WRITE)
        check_new_schema(schema, name)  # reserved, duplicate names; empty fixed-size lists
        existing = self._try_latest(name)
        if mode == "create" and existing is not None:
            raise AlreadyExists(f"dataset {name!r} already exists (use mode append or overwrite)")
        appending = mode == "append" and existing is not None
        if (
            not appending
            and existing is not None
            and existing.data_storage_version == "0.1"
            and any(_has_dictionary(f.type) for f in schema)
        ):
            # legacy files keep dictionary values in the manifest, which the two-step
            # write + commit cannot carry for a new schema
            raise Unimplemented(
                f"dataset {name!r} uses legacy storage: overwriting it with dictionary "
                "columns is not supported; decode them or append instead"
            )
        written: list[table_pb2.DataFragment] = []
        try:
            written = write_fragments(
                _checked_stream(schema, batches, cancelled),
                uri,
                mode="append" if appending else "overwrite",
                storage_options=self.storage_options,
                # an overwrite keeps the dataset's storage version, as pylance's does
                data_storage_version=existing.data_storage_version if existing else None,
            )
        except BaseException as e:
            # the engine removed what it wrote; a new dataset's empty directories go too
            if existing is None:
                self._remove_files(uri, [])
            if isinstance(e, _StreamBroken):
                raise Cancelled("the upload was cut off before its end; nothing was kept") from None
            raise
        if cancelled():
            self._remove_files(uri, written)
            raise Cancelled("the upload was cancelled; nothing was written")
        rows = sum(int(f.physical_rows) for f in written)
        fresh: pa.Schema | None = None
        if appending:
            assert existing is not None
            sig = schema_signature(existing.lance_schema)
        else:
            fresh = schema
            sig = schema_signature(LanceSchema.from_arrow(schema))
        if not request.commit:
            job = request.job or new_job()
            ledger = StagingLedger(open_store(uri, self.storage_options))
            record = ledger.record(job, [f.path for fr in written for f in fr.files])
            if request.job is not None and ledger.finished(job):
                # the job was committed or aborted while this put ran: nothing may join it
                self._remove_files(uri, written)
                ledger.drop(job, record)
                raise InvalidArgument(
                    f"staging job {job!r} of dataset {name!r} has already been committed or "
                    "aborted; stage under a new job"
                )
            tokens = [self._stage_token(name, f, fresh, sig, job, record) for f in written]
            return {"fragments": tokens, "rows": rows}
        if appending:
            assert existing is not None
            if not written:
                return {"version": existing.version, "rows": 0}
            operation: Any = LanceOperation.Append(written)
            read_version = existing.version
        else:
            operation = LanceOperation.Overwrite(schema, written)
            read_version = existing.version if existing is not None and mode == "overwrite" else 0
        new = self._commit(name, uri, operation, read_version, written, None, mode, clean=True)
        return {"version": new.version, "rows": rows}

    def _commit(
        self,
        name: str,
        uri: str,
        operation: Any,
        read_version: int,
        frags: list[table_pb2.DataFragment],
        idempotency_key: str | None,
        mode: str,
        *,
        clean: bool,
    ) -> LanceDataset:
        """Commit; with `clean`, remove the fragments' files when it certainly did not land."""
        try:
            return commit(
                uri,
                operation,
                read_version=read_version,
                storage_options=self.storage_options,
                idempotency_key=idempotency_key,
            )
        except (CommitConflictError, DatasetAlreadyExistsError) as e:
            if clean:
                self._remove_files(uri, frags)
            if mode == "create" or isinstance(e, DatasetAlreadyExistsError):
                raise AlreadyExists(f"dataset {name!r} was created concurrently") from None
            raise
        except (InvalidInputError, SchemaMismatchError):
            if clean:
                self._remove_files(uri, frags)
            raise

    # -- actions ------------------------------------------------------------------------
    def action_right(self, name: str) -> str | None:
        """The right an action needs on its dataset (None: no dataset involved)."""
        if name == "healthcheck":
            return None
        return READ if name in _READ_ACTIONS else WRITE

    def action(self, name: str, body: bytes | None, identity: Any = None) -> dict[str, Any]:
        """Run one DoAction by name with its JSON body; returns the JSON-able result."""
        if name not in ACTIONS:
            raise Unimplemented(
                f"unknown action {name[:64]!r}; ListActions names the {len(ACTIONS)} actions"
            )
        doc = parse_object(body, f"{name} body", empty_ok=name == "healthcheck")
        handler = getattr(self, f"_action_{name}")
        f = Fields(doc, f"{name} body", handler.keys)
        right = self.action_right(name)
        if right is not None:
            self.authorize(identity, f.dataset(), right)
            self.uri(f.dataset())  # a dataset whose directory leads out of the root: refused
        return handler(f)

    def _action_healthcheck(self, f: Fields) -> dict[str, Any]:
        if not self.serving:
            raise Unavailable("the server is draining")
        try:
            fs, path = filesystem(self.root, self.storage_options)
            if isinstance(fs, LocalFileSystem):
                if not fs.isdir(path):
                    raise FileNotFoundError
            else:
                with contextlib.suppress(FileNotFoundError):
                    fs.ls(path)
        except Exception:  # noqa: BLE001 - any failure means storage is unreachable
            raise Unavailable("the storage root is not reachable") from None
        return {"status": "serving"}

    _action_healthcheck.keys = ()  # type: ignore[attr-defined]

    def _action_describe(self, f: Fields) -> dict[str, Any]:
        name = f.dataset()
        version, tag, as_of = version_ref(f)
        ds = self.open_ref(name, version, tag, as_of)
        frags = ds.manifest.pb.fragments
        return {
            "dataset": name,
            "version": ds.version,
            "latest_version": ds.latest_version,
            "timestamp": _iso(ds.manifest.timestamp),
            "data_storage_version": ds.data_storage_version,
            "rows": sum(_live_rows(fr) for fr in frags),
            "fragments": len(frags),
            "schema": [
                {"name": fld.name, "type": str(fld.type), "nullable": fld.nullable}
                for fld in ds.schema
            ],
            "tags": {t: info["version"] for t, info in ds.tags.list().items()},
        }

    _action_describe.keys = ("dataset", "version", "tag", "as_of")  # type: ignore[attr-defined]

    def _action_list_versions(self, f: Fields) -> dict[str, Any]:
        ds = self.open_latest(f.dataset())
        return {
            "versions": [
                {
                    "version": v["version"],
                    "timestamp": _iso(v["timestamp"]),
                    "rows": int(v["metadata"]["total_rows"]),
                    "fragments": int(v["metadata"]["total_fragments"]),
                }
                for v in ds.versions()
            ]
        }

    _action_list_versions.keys = ("dataset",)  # type: ignore[attr-defined]

    def _action_list_tags(self, f: Fields) -> dict[str, Any]:
        ds = self.open_latest(f.dataset())
        return {
            "tags": {
                t: {
                    "version": info["version"],
                    "created_at": _iso(info["created_at"]),
                    "updated_at": _iso(info["updated_at"]),
                }
                for t, info in ds.tags.list().items()
            }
        }

    _action_list_tags.keys = ("dataset",)  # type: ignore[attr-defined]

    def _action_create_tag(self, f: Fields) -> dict[str, Any]:
        name = f.dataset()
        tag = f.str("tag", required=True)
        ds = self.open_latest(name)
        version = f.int("version", minimum=1) or ds.version
        ds.tags.create(tag, version)
        return {"tag": tag, "version": version}

    _action_create_tag.keys = ("dataset", "tag", "version")  # type: ignore[attr-defined]

    def _action_delete_tag(self, f: Fields) -> dict[str, Any]:
        name = f.dataset()
        tag = f.str("tag", required=True)
        self.open_latest(name).tags.delete(tag)
        return {"tag": tag, "deleted": True}

    _action_delete_tag.keys = ("dataset", "tag")  # type: ignore[attr-defined]

    def _action_delete(self, f: Fields) -> dict[str, Any]:
        name = f.dataset()
        predicate = f.str("predicate", required=True)
        ds = self.open_latest(name)
        before = ds.count_rows()
        ds.delete(predicate)
        return {"version": ds.version, "deleted_rows": before - ds.count_rows()}

    _action_delete.keys = ("dataset", "predicate")  # type: ignore[attr-defined]

    def _action_restore(self, f: Fields) -> dict[str, Any]:
        name = f.dataset()
        if isinstance(f.doc.get("version"), str) and "tag" not in f.doc:
            f.doc["tag"] = f.doc.pop("version")  # {"version": "q3"} names a tag
        version, tag, as_of = version_ref(f)
        if as_of is not None or (version is None and tag is None):
            raise InvalidArgument("restore body: give 'version' or 'tag'")
        uri = self.uri(name)
        try:
            ds = dataset(
                uri,
                version=version if version is not None else tag,
                storage_options=self.storage_options,
            )
        except DatasetNotFoundError:
            raise NotFound(f"dataset {name!r} does not exist") from None
        ds.restore()
        return {"version": ds.version, "restored": version if version is not None else tag}

    _action_restore.keys = ("dataset", "version", "tag")  # type: ignore[attr-defined]

    def _action_add_columns(self, f: Fields) -> dict[str, Any]:
        name = f.dataset()
        columns = f.obj("columns", required=True)
        if not columns or not all(
            isinstance(k, str) and k and isinstance(v, str) and v.strip()
            for k, v in columns.items()
        ):
            raise InvalidArgument(
                "add_columns body: 'columns' must map new column names to SQL expressions"
            )
        _refuse_reserved("add_columns body", columns)
        ds = self.open_latest(name)
        ds.add_columns(dict(columns))
        return {"version": ds.version}

    _action_add_columns.keys = ("dataset", "columns")  # type: ignore[attr-defined]

    def _action_drop_columns(self, f: Fields) -> dict[str, Any]:
        name = f.dataset()
        columns = f.str_list("columns", required=True, nonempty=True)
        ds = self.open_latest(name)
        ds.drop_columns(columns)
        return {"version": ds.version}

    _action_drop_columns.keys = ("dataset", "columns")  # type: ignore[attr-defined]

    def _action_alter_columns(self, f: Fields) -> dict[str, Any]:
        name = f.dataset()
        alterations = f.list("alterations", required=True)
        if not alterations:
            raise InvalidArgument("alter_columns body: 'alterations' is empty")
        parsed = []
        for i, alt in enumerate(alterations):
            if not isinstance(alt, dict):
                raise InvalidArgument("alter_columns body: each alteration is a JSON object")
            a = Fields(alt, f"alteration {i}", ("path", "name", "nullable", "data_type"))
            out: dict[str, Any] = {"path": a.str("path", required=True)}
            if any(p["path"] == out["path"] for p in parsed):
                raise InvalidArgument(
                    f"alteration {i}: column {out['path'][:80]!r} is altered twice; "
                    "give one alteration per column"
                )
            if a.has("name"):
                out["name"] = a.str("name")
                _refuse_reserved(f"alteration {i}", [out["name"]])
            if a.has("nullable"):
                out["nullable"] = a.bool("nullable")
            if a.has("data_type"):
                out["data_type"] = _arrow_type(a.str("data_type"))
            if len(out) == 1:
                raise InvalidArgument(
                    f"alteration {i}: give at least one of 'name', 'nullable', 'data_type'"
                )
            parsed.append(out)
        ds = self.open_latest(name)
        ds.alter_columns(*parsed)
        return {"version": ds.version}

    _action_alter_columns.keys = ("dataset", "alterations")  # type: ignore[attr-defined]

    def _action_compact(self, f: Fields) -> dict[str, Any]:
        name = f.dataset()
        options = {
            "target_rows_per_fragment": f.int("target_rows_per_fragment", minimum=1),
            "max_rows_per_group": f.int("max_rows_per_group", minimum=1),
            "materialize_deletions": f.bool("materialize_deletions"),
            "materialize_deletions_threshold": f.number(
                "materialize_deletions_threshold", minimum=0
            ),
        }
        ds = self.open_latest(name)
        metrics = ds.optimize.compact_files(**{k: v for k, v in options.items() if v is not None})
        return {
            "version": ds.version,
            "fragments_removed": metrics.fragments_removed,
            "fragments_added": metrics.fragments_added,
            "files_removed": metrics.files_removed,
            "files_added": metrics.files_added,
        }

    _action_compact.keys = (  # type: ignore[attr-defined]
        "dataset",
        "target_rows_per_fragment",
        "max_rows_per_group",
        "materialize_deletions",
        "materialize_deletions_threshold",
    )

    def _action_cleanup(self, f: Fields) -> dict[str, Any]:
        name = f.dataset()
        older = f.number("older_than_seconds", minimum=0, maximum=MAX_AGE_SECONDS)
        retain = f.int("retain_versions", minimum=1)
        ds = self.open_latest(name)
        stats = ds.cleanup_old_versions(
            older_than=dt.timedelta(seconds=older) if older is not None else None,
            retain_versions=retain,
            delete_unverified=f.bool("delete_unverified", default=False),
            error_if_tagged_old_versions=f.bool("error_if_tagged_old_versions", default=True),
        )
        self._forget(name)
        return {
            "bytes_removed": stats.bytes_removed,
            "old_versions": stats.old_versions,
            "data_files_removed": stats.data_files_removed,
            "deletion_files_removed": stats.deletion_files_removed,
            "transaction_files_removed": stats.transaction_files_removed,
        }

    _action_cleanup.keys = (  # type: ignore[attr-defined]
        "dataset",
        "older_than_seconds",
        "retain_versions",
        "delete_unverified",
        "error_if_tagged_old_versions",
    )

    def _action_drop_dataset(self, f: Fields) -> dict[str, Any]:
        name = f.dataset()
        uri = self.uri(name)
        store = open_store(uri, self.storage_options)
        if not _versions.list_manifests(store):
            raise NotFound(f"dataset {name!r} does not exist")
        self._forget(name)
        store.fs.rm(store.root, recursive=True)
        return {"dataset": name, "dropped": True}

    _action_drop_dataset.keys = ("dataset",)  # type: ignore[attr-defined]

    # -- commit and abort ---------------------------------------------------------------
    def _staged(self, name: str, f: Fields, *, required: bool = True) -> list[StagedFragment]:
        tokens = f.list("fragments", required=required) or []
        staged = [self.verify_fragment(name, t) for t in tokens]
        seen: set[str] = set()
        for s in staged:
            for file in s.fragment.files:
                if file.path in seen:
                    raise InvalidArgument("the same staged fragment is listed twice")
                seen.add(file.path)
        return staged

    def _action_commit(self, f: Fields) -> dict[str, Any]:
        name = f.dataset()
        op = f.str("operation", required=True)
        if op not in ("append", "overwrite", "create"):
            raise InvalidArgument("commit body: 'operation' must be append, overwrite or create")
        read_version = f.int("read_version", minimum=0)
        key = f.str("idempotency_key")
        job = job_field(f)
        staged = self._staged(name, f)
        uri = self.uri(name)
        store = open_store(uri, self.storage_options)
        frags = [s.fragment for s in staged]
        rows = sum(int(fr.physical_rows) for fr in frags)
        existing = self._try_latest(name)
        if key is not None and existing is not None:
            found = self._find_idempotent(store, key, read_version)
            if found is not None:
                committed = _file_paths(self.open_version(name, found).manifest.pb)
                self._settle(store, name, staged, job, committed)
                return {"version": found, "rows": rows, "duplicate": True}
        for fr in frags:
            for file in fr.files:
                if not store.exists(f"data/{file.path}"):
                    raise InvalidArgument(
                        "a staged fragment's data file is gone (aborted or cleaned up); "
                        "stage the data again"
                    )
        if op == "create" and existing is not None:
            raise AlreadyExists(f"dataset {name!r} already exists")
        if op == "append" and existing is not None:
            if not frags:
                return {"version": existing.version, "rows": 0}
            self._check_appendable(name, existing, staged)
            operation: Any = LanceOperation.Append(frags)
            rv = existing.version if read_version is None else read_version
        else:
            if not frags and op == "overwrite" and existing is not None:
                schema: Any = existing.lance_schema  # an empty overwrite truncates
            elif not frags:
                raise InvalidArgument(f"{op} of a new dataset needs at least one staged fragment")
            else:
                schema = self._common_schema(staged)
                if existing is not None:
                    self._check_storage_version(name, existing, staged)
            operation = LanceOperation.Overwrite(schema, frags)
            if op == "overwrite" and existing is not None:
                rv = existing.version if read_version is None else read_version
            else:
                rv = 0
        new = self._commit(name, uri, operation, rv, frags, key, op, clean=False)
        self._settle(store, name, staged, job, _file_paths(new.manifest.pb))
        return {"version": new.version, "rows": rows}

    _action_commit.keys = (  # type: ignore[attr-defined]
        "dataset",
        "operation",
        "fragments",
        "read_version",
        "idempotency_key",
        "job",
    )

    def _settle(
        self,
        store: ObjectStore,
        name: str,
        staged: list[StagedFragment],
        job: str | None,
        committed: set[str],
    ) -> None:
        """After a commit whose version references the data files `committed`: forget the
        committed puts' ledger records and, when the commit names its job, end the job and
        remove its other attempts' files."""
        try:
            ledger = StagingLedger(store)
            records = {(s.job, s.record) for s in staged}
            if job is not None:
                ledger.finish(job)
                for rec in ledger.records(job):
                    doomed = [p for p in rec.files if p not in committed]
                    for path in doomed:
                        store.delete(f"data/{path}")
                    ledger.drop(job, rec.record)
                    records.discard((job, rec.record))
            for rec_job, rec_id in records:
                assert rec_job is not None and rec_id is not None
                # a put whose fragments were committed only in part stays for the sweep
                rec = ledger.read(rec_job, rec_id)
                if rec is not None and all(p in committed for p in rec.files):
                    ledger.drop(rec_job, rec_id)
                    if rec_job.startswith(AUTO_JOB_PREFIX):
                        ledger.remove_job(rec_job)
        except Exception as e:  # noqa: BLE001 - the commit stands; the sweep finishes this
            log.warning("settling the staging ledger of %r failed: %s", name, type(e).__name__)

    @staticmethod
    def _check_storage_version(name: str, ds: LanceDataset, staged: list[StagedFragment]) -> None:
        storage = ds.data_storage_version
        for s in staged:
            for file in s.fragment.files:
                if storage_version_of_file(file.file_major_version, file.file_minor_version) != (
                    storage
                ):
                    raise InvalidArgument(
                        f"staged fragments use another storage version than dataset {name!r} "
                        f"({storage}); stage the data again"
                    )

    def _check_appendable(self, name: str, ds: LanceDataset, staged: list[StagedFragment]) -> None:
        sig = schema_signature(ds.lance_schema)
        self._check_storage_version(name, ds, staged)
        committed = _file_paths(ds.manifest.pb)
        for s in staged:
            if s.signature != sig:
                raise InvalidArgument(
                    f"staged fragments do not match the schema of dataset {name!r} "
                    "(it changed since they were staged?); stage the data again"
                )
            for file in s.fragment.files:
                if file.path in committed:
                    raise AlreadyExists(
                        f"staged fragments are already committed in version {ds.version}"
                    )

    def _common_schema(self, staged: list[StagedFragment]) -> pa.Schema:
        schemas = [s.schema for s in staged]
        if any(s is None for s in schemas):
            raise InvalidArgument(
                "fragments staged for append cannot create or overwrite a dataset; "
                "stage them with mode overwrite"
            )
        first = schemas[0]
        assert first is not None
        if any(not s.equals(first, check_metadata=True) for s in schemas[1:]):  # type: ignore[union-attr]
            raise InvalidArgument("staged fragments have different schemas")
        return first

    def _find_idempotent(
        self, store: ObjectStore, key: str, read_version: int | None
    ) -> int | None:
        """The version a commit with this idempotency key already made, if any."""
        entries = _versions.list_manifests(store)
        floor = read_version if read_version is not None else max(entries) - IDEMPOTENCY_SCAN_LIMIT
        for v in sorted(entries, reverse=True):
            if v <= floor:
                break
            try:
                txn = read_transaction(store, _versions.load_manifest(store, entries[v]))
            except Exception:  # noqa: BLE001 - cleaned up meanwhile
                continue
            if txn is not None and txn.transaction_properties.get(IDEMPOTENCY_KEY) == key:
                return v
        return None

    def _action_abort(self, f: Fields) -> dict[str, Any]:
        name = f.dataset()
        job = job_field(f)
        staged = self._staged(name, f, required=job is None)
        uri = self.uri(name)
        store = open_store(uri, self.storage_options)
        ledger = StagingLedger(store)
        records = [(s.job, s.record) for s in staged]
        paths = [file.path for s in staged for file in s.fragment.files]
        if job is not None:
            ledger.finish(job)
            for rec in ledger.records(job):
                records.append((job, rec.record))
                paths.extend(rec.files)
        referenced = _referenced_files(store)
        doomed = sorted({p for p in paths if p not in referenced})
        kept = len({p for p in paths if p in referenced})  # committed: the dataset's now
        removed = self._remove_files(uri, [_fragment_of(doomed)])
        for rec_job, rec_id in records:
            if rec_job is not None and rec_id is not None:
                ledger.drop(rec_job, rec_id)
                if rec_job.startswith(AUTO_JOB_PREFIX):
                    ledger.remove_job(rec_job)
        if job is not None and not _versions.list_manifests(store):
            ledger.remove_job(job)  # a dataset that never came to be leaves nothing
            self._remove_files(uri, [])
        return {"removed_files": removed, "kept_files": kept}

    _action_abort.keys = ("dataset", "fragments", "job")  # type: ignore[attr-defined]

    # -- the staging sweep --------------------------------------------------------------
    def sweep_staging(self, now: float | None = None) -> dict[str, int]:
        """Remove the files of stagings whose fragments expired uncommitted, in every
        dataset under the root; forget ended jobs once their late puts can't arrive."""
        now = time.time() if now is None else now
        stats = {"removed_files": 0, "records": 0, "jobs": 0}
        for found in discover(self.root, self.storage_options, holding=STAGING_DIR):
            try:
                self._sweep_dataset(self.uri(found.name), now, stats)
            except Exception as e:  # noqa: BLE001 - one bad dataset must not stop the sweep
                log.warning("staging sweep of %r failed: %s", found.name, type(e).__name__)
        return stats

    def _sweep_dataset(self, uri: str, now: float, stats: dict[str, int]) -> None:
        store = open_store(uri, self.storage_options)
        ledger = StagingLedger(store)
        # a token lives staged_ttl from its put; allow clock skew between replicas
        cutoff = now - self.staged_ttl - SWEEP_GRACE_SECONDS
        referenced: set[str] | None = None
        for job in ledger.jobs():
            records = ledger.records(job)
            for rec in records:
                if rec.created > cutoff:
                    continue
                if referenced is None:
                    referenced = _referenced_files(store)
                for path in rec.files:
                    if path not in referenced:
                        store.delete(f"data/{path}")
                        stats["removed_files"] += 1
                ledger.drop(job, rec.record)
                stats["records"] += 1
            ended = ledger.finished_at(job)
            live = [r for r in records if r.created > cutoff]
            if not live and (ended is None or ended <= cutoff):
                ledger.remove_job(job)
                stats["jobs"] += 1
        if not _versions.list_manifests(store):
            self._remove_files(uri, [])


# ------------------------------------------------------------------------------- helpers
SWEEP_GRACE_SECONDS = 300
# Endpoints one read may be cut into beyond one per fragment (each holds a signed ticket in
# memory: a million of them cost gigabytes).
MAX_ENDPOINTS = 20_000


def _check_endpoint_count(name: str, planned: int, fragments: int, step: int | None) -> None:
    """InvalidArgument once a read cut by `step` rows would get more endpoints than allowed."""
    if planned >= max(MAX_ENDPOINTS, fragments):
        raise InvalidArgument(
            f"max_rows_per_endpoint {step} cuts dataset {name!r} into more than "
            f"{max(MAX_ENDPOINTS, fragments)} endpoints; ask for more rows per endpoint"
        )


def _file_paths(manifest: table_pb2.Manifest) -> set[str]:
    """Data file paths (relative to data/) one version references."""
    return {file.path for fr in manifest.fragments for file in fr.files}


def _referenced_files(store: ObjectStore) -> set[str]:
    """Data file paths (relative to data/) any version of the dataset references."""
    referenced: set[str] = set()
    entries = _versions.list_manifests(store)
    for v in entries:
        try:
            m = _versions.load_manifest(store, entries[v])
        except Exception:  # noqa: BLE001 - cleaned up meanwhile
            continue
        referenced |= _file_paths(m.pb)
    return referenced


def _fragment_of(paths: list[str]) -> table_pb2.DataFragment:
    """A throwaway fragment listing data files, for `_remove_files`."""
    frag = table_pb2.DataFragment()
    for p in paths:
        frag.files.add(path=p)
    return frag


class _StreamBroken(Exception):
    """The client's stream ended in an error."""


def _checked_stream(
    schema: pa.Schema, batches: Iterable[pa.RecordBatch], cancelled: Callable[[], bool]
) -> pa.RecordBatchReader:
    """The batches as a reader that fails (so written files are removed) on a cut stream
    or on a batch that is not valid Arrow data (before any native code walks it)."""

    def checked() -> Iterator[pa.RecordBatch]:
        it = iter(batches)
        for number in itertools.count(1):
            if cancelled():
                raise _StreamBroken
            try:
                batch = next(it)
            except StopIteration:
                break
            except Exception:  # noqa: BLE001 - any failure to read means a broken upload
                raise _StreamBroken from None
            try:
                batch.validate(full=True)
            except pa.ArrowException as e:
                raise InvalidArgument(
                    f"uploaded batch {number} is not valid Arrow data: {e}"
                ) from None
            yield batch
        if cancelled():
            raise _StreamBroken

    return pa.RecordBatchReader.from_batches(schema, checked())


def _has_dictionary(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return True
    return any(_has_dictionary(t.field(i).type) for i in range(t.num_fields))


def _plain_file(path: str) -> bool:
    return bool(path) and "/" not in path and "\\" not in path and path not in (".", "..")


def _refuse_reserved(what: str, names: Iterable[str]) -> None:
    """InvalidArgument for a new column named like a system column (`_rowid`, ...)."""
    for n in names:
        if n in RESERVED_COLUMNS:
            raise InvalidArgument(
                f"{what}: {n} is a reserved column name (row ids and addresses) and cannot be "
                "used in a Lance dataset"
            )


_TYPE_ALIASES = {"utf8": "string", "large_utf8": "large_string", "str": "string"}


def _arrow_type(text: str) -> pa.DataType:
    try:
        return pa.type_for_alias(_TYPE_ALIASES.get(text, text))
    except (ValueError, KeyError):
        raise InvalidArgument(
            f"unknown data_type {text[:40]!r} (use Arrow names: int64, float32, string...)"
        ) from None
