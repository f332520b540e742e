"""The low-level write API, shaped like pylance's: stage fragments, then commit operations.

    frags = write_fragments(table, uri)                       # files written, nothing visible
    ds = commit(uri, LanceOperation.Append(frags), read_version=3)

Fragments are `lance.table.DataFragment` messages (pylance's `FragmentMetadata`); they
travel as bytes or JSON (`fragment_to_json` / `fragment_from_json`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from quiver.format.dataset import write as _write
from quiver.format.dataset.blob_writes import stored_schema
from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.dataset import LanceDataset
from quiver.format.dataset.distributed_indexing import index_record
from quiver.format.dataset.merge_insert import Transaction
from quiver.format.errors import InvalidInputError
from quiver.format.io.store import open_store
from quiver.format.proto import table_pb2, transaction_pb2
from quiver.format.table import versions as _versions
from quiver.format.table.commit import DEFAULT_MAX_RETRIES, commit_transaction
from quiver.format.table.manifest import Manifest, storage_version_of_file
from quiver.format.table.schema import LanceSchema, check_new_schema
from quiver.format.table.transaction import IDEMPOTENCY_KEY, ManifestContext, new_transaction

Fragment = table_pb2.DataFragment
T = transaction_pb2.Transaction


def fragment_to_json(fragment: Fragment) -> str:
    """A staged fragment as a compact JSON string (base64 of its protobuf encoding)."""
    return json.dumps({"v": 1, "fragment": base64.b64encode(fragment.SerializeToString()).decode()})


def fragment_from_json(text: str) -> Fragment:
    """Inverse of `fragment_to_json`; InvalidInputError for anything else."""
    try:
        doc = json.loads(text)
        if doc.get("v") != 1:
            raise ValueError("unknown version")
        frag = Fragment()
        frag.ParseFromString(base64.b64decode(doc["fragment"], validate=True))
    except Exception as e:  # noqa: BLE001 - json, base64 and protobuf raise many types
        raise InvalidInputError(f"not a staged fragment: {e}") from None
    if not frag.files or not frag.physical_rows:
        raise InvalidInputError("not a staged fragment: it has no data file or no rows")
    return frag


class LanceOperation:
    """Namespace of committable operations (pylance's `LanceOperation`)."""

    @dataclass
    class Append:
        """Add new fragments."""

        fragments: Sequence[Fragment]

        def _body(self, _schema: LanceSchema | None) -> tuple[str, Any]:
            return "append", T.Append(fragments=list(self.fragments))

    @dataclass
    class Overwrite:
        """Replace the whole table (or create it) with new fragments and schema."""

        new_schema: pa.Schema | LanceSchema
        fragments: Sequence[Fragment]

        def _body(self, _schema: LanceSchema | None) -> tuple[str, Any]:
            if isinstance(self.new_schema, LanceSchema):
                schema = self.new_schema
            else:
                check_new_schema(self.new_schema, "Overwrite")
                # blob columns as the fragments' files store them (blob v2 from 2.2 on)
                files = [f for frag in self.fragments for f in frag.files]
                arrow = self.new_schema
                if files:
                    version = storage_version_of_file(
                        files[0].file_major_version, files[0].file_minor_version
                    )
                    arrow = stored_schema(arrow, version, "Overwrite")
                schema = LanceSchema.from_arrow(arrow)
            body = T.Overwrite(fragments=list(self.fragments), schema=schema.to_protos())
            for k, v in schema.metadata.items():
                body.schema_metadata[k] = v
            return "overwrite", body

    @dataclass
    class Delete:
        """Replace fragments' deletion files and drop fully deleted fragments."""

        updated_fragments: Sequence[Fragment]
        deleted_fragment_ids: Sequence[int]
        predicate: str = ""

        def _body(self, _schema: LanceSchema | None) -> tuple[str, Any]:
            return "delete", T.Delete(
                updated_fragments=list(self.updated_fragments),
                deleted_fragment_ids=list(self.deleted_fragment_ids),
                predicate=self.predicate,
            )

    @dataclass
    class RewriteGroup:
        """Old fragments replaced by new ones holding the same rows."""

        old_fragments: Sequence[Fragment]
        new_fragments: Sequence[Fragment]

    @dataclass
    class Rewrite:
        """Compaction: groups of fragments rewritten."""

        groups: Sequence[LanceOperation.RewriteGroup]

        def _body(self, _schema: LanceSchema | None) -> tuple[str, Any]:
            return "rewrite", T.Rewrite(
                groups=[
                    T.Rewrite.RewriteGroup(
                        old_fragments=list(g.old_fragments), new_fragments=list(g.new_fragments)
                    )
                    for g in self.groups
                ]
            )

    @dataclass
    class Merge:
        """New schema with every fragment (usually each with an extra data file)."""

        fragments: Sequence[Fragment]
        schema: LanceSchema

        def _body(self, _schema: LanceSchema | None) -> tuple[str, Any]:
            body = T.Merge(fragments=list(self.fragments), schema=self.schema.to_protos())
            for k, v in self.schema.metadata.items():
                body.schema_metadata[k] = v
            return "merge", body

    @dataclass
    class Project:
        """A new schema over the same data (drop or rename columns)."""

        schema: LanceSchema

        def _body(self, _schema: LanceSchema | None) -> tuple[str, Any]:
            return "project", T.Project(schema=self.schema.to_protos())

    @dataclass
    class Restore:
        """Make an old version the latest."""

        version: int

        def _body(self, _schema: LanceSchema | None) -> tuple[str, Any]:
            return "restore", T.Restore(version=self.version)

    @dataclass
    class CreateIndex:
        """Add index segments (as `create_index_uncommitted` builds them, by either engine)
        and remove others."""

        new_indices: Sequence[Any]
        removed_indices: Sequence[Any] = ()

        def _body(self, _schema: LanceSchema | None) -> tuple[str, Any]:
            return "create_index", T.CreateIndex(
                new_indices=[index_record(i, "CreateIndex") for i in self.new_indices],
                removed_indices=[index_record(i, "CreateIndex") for i in self.removed_indices],
            )

    @dataclass
    class UpdateConfig:
        """Set and remove table configuration keys."""

        upsert_values: dict[str, str] = field(default_factory=dict)
        delete_keys: Sequence[str] = ()

        def _body(self, _schema: LanceSchema | None) -> tuple[str, Any]:
            return "update_config", T.UpdateConfig(
                upsert_values=dict(self.upsert_values), delete_keys=list(self.delete_keys)
            )


def write_fragments(
    data: Any,
    uri: str,
    schema: pa.Schema | None = None,
    *,
    mode: str = "append",
    max_rows_per_file: int | None = None,
    max_rows_per_group: int | None = None,
    data_storage_version: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> list[Fragment]:
    """Write data files for later commit: nothing becomes visible until `commit`.

    With mode "append" on an existing dataset the data must match its schema and is
    written at its storage version; otherwise the data's own schema is used.
    """
    store = open_store(str(uri), storage_options)
    reader = _write.to_reader(data, schema)
    entries = _versions.list_manifests(store)
    kwargs: dict[str, Any] = {}
    if max_rows_per_file is not None:
        kwargs["max_rows_per_file"] = max_rows_per_file
    if max_rows_per_group is not None:
        kwargs["max_rows_per_group"] = max_rows_per_group
    if mode == "append" and entries:
        latest = _versions.load_manifest(store, entries[max(entries)])
        version = latest.data_storage_version
        order = _write.check_append_schema(
            reader.schema, latest.schema, store.uri, legacy=version == "0.1"
        )
        return _write.write_fragment_files(
            store, reader, latest.schema.project(order), version, columns=order, **kwargs
        )
    if mode not in ("append", "create", "overwrite"):
        raise InvalidInputError(f"mode must be append, create or overwrite, not {mode!r}")
    version = _write.normalize_storage_version(data_storage_version)
    check_new_schema(reader.schema, store.uri)
    return _write.write_fragment_files(
        store,
        reader,
        LanceSchema.from_arrow(stored_schema(reader.schema, version, store.uri)),
        version,
        **kwargs,
    )


def commit(
    uri: str,
    operation: Any,
    read_version: int | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    max_retries: int = DEFAULT_MAX_RETRIES,
    idempotency_key: str | None = None,
    commit_message: str | None = None,
    data_storage_version: str | None = None,
) -> LanceDataset:
    """Commit one operation (or a `Transaction` from `execute_uncommitted`, whose own
    read version counts) as the next version (pylance's `LanceDataset.commit`).

    `read_version` is the version the operation was planned on (default: the latest, or
    0 to create); concurrent commits since then are checked for conflicts. With an
    `idempotency_key`, a commit that already landed is returned instead of repeated.
    """
    store = open_store(str(uri), storage_options)
    if isinstance(operation, Transaction):  # planned by merge_insert's execute_uncommitted
        txn = transaction_pb2.Transaction()
        txn.CopyFrom(operation.operation)
        if commit_message:
            txn.transaction_properties["__lance_commit_message"] = commit_message
        result = commit_transaction(store, txn, max_retries=max_retries)
        return LanceDataset(DatasetCore(store, result.manifest, storage_options))
    if not hasattr(operation, "_body"):
        raise InvalidInputError(f"not a LanceOperation: {operation!r}")
    entries = _versions.list_manifests(store)
    latest = _versions.load_manifest(store, entries[max(entries)]) if entries else None
    newest = latest.version if latest is not None else 0
    if read_version is None:
        read_version = newest
    elif not 0 <= read_version <= newest:
        raise InvalidInputError(
            f"{store.uri}: read_version {read_version} is not a version of the dataset "
            f"(its latest is {newest})"
        )
    name, body = operation._body(latest.schema if latest is not None else None)
    if name == "create_index":
        _record_files(store, body)
    props = {}
    if idempotency_key:
        props[IDEMPOTENCY_KEY] = idempotency_key
    if commit_message:
        props["__lance_commit_message"] = commit_message
    txn = new_transaction(read_version, name, body, properties=props)
    storage = None
    if latest is None:
        storage = _write.normalize_storage_version(data_storage_version)
        files = [f for frag in getattr(operation, "fragments", ()) for f in frag.files]
        if files and data_storage_version is None:
            storage = storage_version_of_file(
                files[0].file_major_version, files[0].file_minor_version
            )

    def load(version: int) -> Manifest:
        return _versions.load_manifest(store, _versions.find_entry(store, version))

    ctx = ManifestContext(storage_version=storage, load_version=load)
    result = commit_transaction(store, txn, ctx=ctx, max_retries=max_retries)
    return LanceDataset(DatasetCore(store, result.manifest, storage_options))


def _record_files(store: Any, body: Any) -> None:
    """Record the files of new index segments that name none, as pylance does on commit
    (a segment committed without details is known by its files)."""
    import uuid as _uuid

    for record in body.new_indices:
        if record.files or not record.uuid.uuid:
            continue
        directory = f"_indices/{_uuid.UUID(bytes=bytes(record.uuid.uuid))}"
        for file_name, size, _ in sorted(store.list_dir(directory)):
            record.files.add(path=file_name, size_bytes=int(size))
