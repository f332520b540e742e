"""Writes: DoPut streams committed at once or staged, and the commit, abort and sweep of
staged fragments.

A staged fragment travels to the client as an opaque signed string (`StagedFragment`); the
staging ledger (`flight_server.staging`) remembers the files each put wrote so a job's commit
or abort, or the sweep, removes every failed attempt's files. Callers check rights first.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from quiver.flight_server import changes, metrics
from quiver.flight_server.errors import AlreadyExists, Cancelled, InvalidArgument, Unimplemented
from quiver.flight_server.handles import DatasetHandles
from quiver.flight_server.names import DatasetName, branch_of, discover
from quiver.flight_server.protocol import PutRequest
from quiver.flight_server.staging import AUTO_JOB_PREFIX, STAGING_DIR, StagingLedger, new_job
from quiver.flight_server.tickets import FRAGMENT_KIND, Signer
from quiver.flight_server.uploads import StreamBroken, checked_stream
from quiver.format.dataset import LanceDataset, LanceOperation, commit, write_fragments
from quiver.format.errors import (
    CommitConflictError,
    DatasetAlreadyExistsError,
    InvalidInputError,
    SchemaMismatchError,
)
from quiver.format.io.store import ObjectStore
from quiver.format.proto import table_pb2
from quiver.format.table import versions as _versions
from quiver.format.table.commit import find_idempotent_commit, read_transaction
from quiver.format.table.manifest import storage_version_of_file
from quiver.format.table.schema import LanceSchema, check_new_schema
from quiver.format.table.versions import data_file_paths, referenced_data_files

log = logging.getLogger("quiver.writes")

# The sweep waits this long past a staged fragment's expiry: clock skew between replicas.
SWEEP_GRACE_SECONDS = 300


@dataclass(frozen=True)
class StagedFragment:
    """A verified staged fragment: the engine fragment plus what the commit must check."""

    token: str
    fragment: table_pb2.DataFragment
    schema: pa.Schema | None  # set when its field ids are those of LanceSchema.from_arrow
    signature: str  # digest of the Lance schema (ids, names, types) it was written with
    job: str | None = None  # the staging job and ledger record the put left
    record: str | None = None
    source: bool = False  # staged with mode "source": the rows of a change (apply_staged)


def schema_signature(schema: LanceSchema) -> str:
    """A digest of what data files depend on: each field's id, parent, name, type, nullability."""
    rows = [[f.id, f.parent_id, f.name, f.logical_type, bool(f.nullable)] for f in schema.walk()]
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()[:32]


class Writes:
    """Puts, commits, aborts and the staging sweep of the datasets behind `handles`."""

    def __init__(self, handles: DatasetHandles, signer: Signer, *, staged_ttl: int) -> None:
        self.handles = handles
        self.signer = signer
        self.staged_ttl = staged_ttl

    # -- staged fragment strings ----------------------------------------------------------
    def _stage_token(
        self,
        name: str,
        frag: Any,
        schema: pa.Schema | None,
        sig: str,
        job: str,
        record: str,
        *,
        source: bool = False,
    ) -> str:
        payload: dict[str, Any] = {
            "d": name,
            "f": _b64(frag.SerializeToString()),
            "s": _b64(schema.serialize().to_pybytes()) if schema is not None else None,
            "h": sig,
            "j": job,
            "r": record,
            "e": int(time.time()) + self.staged_ttl,
            **branch_of(name),
        }
        if source:
            payload["u"] = "source"  # the rows of a change, never the dataset's own
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
            sig, owner = p["h"], DatasetName(p["d"], p.get("b"))
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
        return StagedFragment(token, frag, schema, sig, job, record, p.get("u") == "source")

    def staged(self, name: str, tokens: list[Any]) -> list[StagedFragment]:
        """Verify a commit's or abort's fragment strings; each fragment listed once."""
        staged = [self.verify_fragment(name, t) for t in tokens]
        seen: set[str] = set()
        for s in staged:
            for file in s.fragment.files:
                if file.path in seen:
                    raise InvalidArgument("the same staged fragment is listed twice")
                seen.add(file.path)
        return staged

    def _remove_files(self, name: str, paths: Iterable[str]) -> int:
        """Delete data files (best effort); drop the dataset directory if it is empty."""
        store = self.handles.store(name)
        removed = 0
        for path in paths:
            try:
                store.delete(f"data/{path}")
                removed += 1
            except Exception as e:  # noqa: BLE001 - best effort
                log.warning("could not remove a staged file: %s", type(e).__name__)
        if not _versions.list_manifests(store):
            for sub in (STAGING_DIR, "data", ""):
                with contextlib.suppress(Exception):
                    store.fs.rmdir(store.full_path(sub))
        return removed

    # -- DoPut ----------------------------------------------------------------------------
    def put(
        self,
        request: PutRequest,
        schema: pa.Schema,
        batches: Iterable[pa.RecordBatch],
        cancelled: Callable[[], bool] = lambda: False,
    ) -> dict[str, Any]:
        """Write a stream: committed now, or staged as opaque fragment strings.

        A schema that does not fit, a stream that breaks (`batches` raises) or a call the
        client cancels (`cancelled()` turns true) leaves nothing visible and removes every
        file written.
        """
        name, mode = request.dataset, request.mode
        uri = self.handles.uri(name)
        if mode == "source":
            return changes.stage_source(self, request, schema, batches, cancelled)
        key = request.idempotency_key
        if request.backfill is not None:
            return changes.backfill_put(
                self, name, request.backfill, schema, batches, cancelled, key
            )
        check_new_schema(schema, name)  # reserved, duplicate names; empty fixed-size lists
        if request.merge is not None:
            return changes.merge_put(self, name, request.merge, schema, batches, cancelled, key)
        existing = self.handles.try_latest(name)
        if key is not None and existing is not None:
            repeated = self._repeated_put(name, key)
            if repeated is not None:
                for _ in checked_stream(schema, batches, cancelled):
                    pass  # the rows were committed by the first put: read and drop them
                return repeated
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
                checked_stream(schema, batches, cancelled),
                uri,
                mode="append" if appending else "overwrite",
                storage_options=self.handles.storage_options,
                # an overwrite keeps the dataset's storage version, as pylance's does
                data_storage_version=existing.data_storage_version if existing else None,
            )
        except BaseException as e:
            # the engine removed what it wrote; a new dataset's empty directories go too
            if existing is None:
                self._remove_files(name, [])
            if isinstance(e, StreamBroken):
                raise Cancelled("the upload was cut off before its end; nothing was kept") from None
            raise
        if cancelled():
            self._remove_files(name, _paths(written))
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
            return self.stage_written(name, written, fresh, sig, request.job)
        if appending:
            assert existing is not None
            if not written:
                return {"version": existing.version, "rows": 0}
            operation: Any = LanceOperation.Append(written)
            read_version = existing.version
        else:
            operation = LanceOperation.Overwrite(schema, written)
            read_version = existing.version if existing is not None and mode == "overwrite" else 0
        new = self._commit(name, operation, read_version, written, key, mode, clean=True)
        return {"version": new.version, "rows": rows}

    def _repeated_put(self, name: str, key: str) -> dict[str, Any] | None:
        """The answer of the put that committed with idempotency `key` (its version and
        rows, `duplicate`), None if none did: the key's record makes this one read when
        the key is new, and otherwise a search of the versions since its first attempt."""
        done = changes.repeated(self.handles, name, key)
        if done is None:
            return None
        manifest = self.handles.open_version(name, done["version"]).manifest
        txn = read_transaction(self.handles.store(name), manifest)
        body = txn.append if txn is not None and txn.HasField("append") else None
        if body is None and txn is not None and txn.HasField("overwrite"):
            body = txn.overwrite
        rows = sum(int(f.physical_rows) for f in body.fragments) if body is not None else 0
        return {"version": done["version"], "rows": rows, "duplicate": True}

    def stage_written(
        self,
        name: str,
        written: list[table_pb2.DataFragment],
        fresh: pa.Schema | None,
        sig: str | None,
        job: str | None,
        *,
        source: bool = False,
    ) -> dict[str, Any]:
        """Record a staging put's files under its job (a new one when None) and answer
        its fragment strings; `sig` None is that of `fresh`; `source` marks rows staged
        as a change's source."""
        if sig is None:
            assert fresh is not None
            sig = schema_signature(LanceSchema.from_arrow(fresh))
        rows = sum(int(f.physical_rows) for f in written)
        named = job
        job = job or new_job()
        ledger = StagingLedger(self.handles.store(name))
        record = ledger.record(job, _paths(written))
        if named is not None and ledger.finished(job):
            # the job was committed or aborted while this put ran: nothing may join it
            self._remove_files(name, _paths(written))
            ledger.drop(job, record)
            raise InvalidArgument(
                f"staging job {job!r} of dataset {name!r} has already been committed or "
                "aborted; stage under a new job"
            )
        tokens = [
            self._stage_token(name, f, fresh, sig, job, record, source=source) for f in written
        ]
        metrics.staged(len(tokens))
        return {"fragments": tokens, "rows": rows}

    def discard_written(self, name: str, written: list[table_pb2.DataFragment]) -> None:
        """Remove the files of a put that will not be staged or committed."""
        self._remove_files(name, _paths(written))

    def _commit(
        self,
        name: str,
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
            new = commit(
                self.handles.uri(name),
                operation,
                read_version=read_version,
                storage_options=self.handles.storage_options,
                idempotency_key=idempotency_key,
            )
            metrics.committed(mode)
            return new
        except (CommitConflictError, DatasetAlreadyExistsError) as e:
            if clean:
                self._remove_files(name, _paths(frags))
            if mode == "create" or isinstance(e, DatasetAlreadyExistsError):
                raise AlreadyExists(f"dataset {name!r} was created concurrently") from None
            raise
        except (InvalidInputError, SchemaMismatchError):
            if clean:
                self._remove_files(name, _paths(frags))
            raise

    # -- commit and abort of staged fragments ---------------------------------------------
    def commit_staged(
        self,
        name: str,
        op: str,
        staged: list[StagedFragment],
        *,
        read_version: int | None,
        idempotency_key: str | None,
        job: str | None,
    ) -> dict[str, Any]:
        """Make staged fragments visible in one new version (`op`: append, overwrite or
        create); a repeated idempotency key answers the version its first commit made."""
        if any(s.source for s in staged):
            raise InvalidArgument(
                "fragments staged with mode 'source' are the rows of a change: apply them "
                "with apply_staged"
            )
        store = self.handles.store(name)
        frags = [s.fragment for s in staged]
        rows = sum(int(fr.physical_rows) for fr in frags)
        existing = self.handles.try_latest(name)
        if idempotency_key is not None and existing is not None:
            found = find_idempotent_commit(store, idempotency_key, read_version)
            if found is not None:
                committed = data_file_paths(self.handles.open_version(name, found).manifest)
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
            _check_appendable(name, existing, staged)
            operation: Any = LanceOperation.Append(frags)
            rv = existing.version if read_version is None else read_version
        else:
            if not frags and op == "overwrite" and existing is not None:
                schema: Any = existing.lance_schema  # an empty overwrite truncates
            elif not frags:
                raise InvalidArgument(f"{op} of a new dataset needs at least one staged fragment")
            else:
                schema = _common_schema(staged)
                if existing is not None:
                    _check_storage_version(name, existing, staged)
            operation = LanceOperation.Overwrite(schema, frags)
            if op == "overwrite" and existing is not None:
                rv = existing.version if read_version is None else read_version
            else:
                rv = 0
        new = self._commit(name, operation, rv, frags, idempotency_key, op, clean=False)
        self._settle(store, name, staged, job, data_file_paths(new.manifest))
        return {"version": new.version, "rows": rows}

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

    def abort(self, name: str, staged: list[StagedFragment], job: str | None) -> dict[str, Any]:
        """Remove the files of staged, uncommitted fragments (and of the job's other puts);
        files a version references stay (they are the dataset's now)."""
        store = self.handles.store(name)
        ledger = StagingLedger(store)
        records = [(s.job, s.record) for s in staged]
        paths = [file.path for s in staged for file in s.fragment.files]
        if job is not None:
            ledger.finish(job)
            for rec in ledger.records(job):
                records.append((job, rec.record))
                paths.extend(rec.files)
        referenced = referenced_data_files(store)
        doomed = sorted({p for p in paths if p not in referenced})
        kept = len({p for p in paths if p in referenced})
        removed = self._remove_files(name, doomed)
        for rec_job, rec_id in records:
            if rec_job is not None and rec_id is not None:
                ledger.drop(rec_job, rec_id)
                if rec_job.startswith(AUTO_JOB_PREFIX):
                    ledger.remove_job(rec_job)
        if job is not None and not _versions.list_manifests(store):
            ledger.remove_job(job)  # a dataset that never came to be leaves nothing
            self._remove_files(name, [])
        return {"removed_files": removed, "kept_files": kept}

    # -- the staging sweep ----------------------------------------------------------------
    def sweep_staging(self, now: float | None = None) -> dict[str, int]:
        """Remove the files of stagings whose fragments expired uncommitted, in every
        dataset under the root; forget ended jobs once their late puts can't arrive."""
        now = time.time() if now is None else now
        stats = {"removed_files": 0, "records": 0, "jobs": 0}
        h = self.handles
        for found in discover(h.root, h.storage_options, holding=STAGING_DIR):
            try:
                self._sweep_dataset(found.name, now, stats)
            except Exception as e:  # noqa: BLE001 - one bad dataset must not stop the sweep
                log.warning("staging sweep of %r failed: %s", found.name, type(e).__name__)
        return stats

    def _sweep_dataset(self, name: str, now: float, stats: dict[str, int]) -> None:
        store = self.handles.store(name)
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
                    referenced = referenced_data_files(store)
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
            self._remove_files(name, [])


# ------------------------------------------------------------------------------- checks
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


def _check_appendable(name: str, ds: LanceDataset, staged: list[StagedFragment]) -> None:
    sig = schema_signature(ds.lance_schema)
    _check_storage_version(name, ds, staged)
    committed = data_file_paths(ds.manifest)
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


def _common_schema(staged: list[StagedFragment]) -> pa.Schema:
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


# ------------------------------------------------------------------------------- helpers
def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _paths(frags: Iterable[table_pb2.DataFragment]) -> list[str]:
    return [f.path for fr in frags for f in fr.files]


def _has_dictionary(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return True
    return any(_has_dictionary(t.field(i).type) for i in range(t.num_fields))


def _plain_file(path: str) -> bool:
    return bool(path) and "/" not in path and "\\" not in path and path not in (".", "..")
